//! The tables `teamster ctl` prints: one row per object, columns lined up.

use crate::live::snapshot::{CountersView, EventView, GroupView, LbtView, NodeView, PortView, Snapshot, UplinkView};

/// Lines up `rows` under `header` in columns. (A table crate would do, but this is all of it.)
pub(super) fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let parts: Vec<String> = cells.iter().zip(&width).map(|(c, w)| format!("{c:<w$}")).collect();
        parts.join("  ").trim_end().to_string() + "\n"
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect());
    for r in rows {
        out += &line(r);
    }
    out
}

pub(super) fn rate(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2}G", bps / 1e9)
    } else if bps >= 1e6 {
        format!("{:.1}M", bps / 1e6)
    } else if bps >= 1e3 {
        format!("{:.1}k", bps / 1e3)
    } else {
        format!("{bps:.0}")
    }
}

pub(super) fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

pub(super) fn dropped(c: &CountersView) -> u64 {
    c.drops.values().sum()
}

pub(super) fn uplink_rows(us: &[UplinkView]) -> String {
    let rows = us
        .iter()
        .map(|u| {
            vec![
                u.name.clone(),
                u.interface.clone(),
                if u.in_use {
                    "in use".into()
                } else {
                    format!("out (link {}, admin {})", u.link, u.admin)
                },
                rate(u.capacity_bps as f64),
                pct(u.tx_utilisation),
                pct(u.rx_utilisation),
                u.queue_depth.to_string(),
                u.counters.tx_packets.to_string(),
                u.counters.rx_packets.to_string(),
                dropped(&u.counters).to_string(),
            ]
        })
        .collect();
    table(
        &[
            "UPLINK",
            "INTERFACE",
            "STATE",
            "CAPACITY",
            "TX",
            "RX",
            "QUEUE",
            "TX PKTS",
            "RX PKTS",
            "DROPS",
        ],
        rows,
    )
}

pub(super) fn port_rows(ps: &[PortView]) -> String {
    let rows = ps
        .iter()
        .map(|p| {
            vec![
                p.name.clone(),
                p.interface.clone(),
                {
                    let origin = serde_json::to_value(&p.origin)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default();
                    // A libvirt port's domain: `libvirt:web1`.
                    match &p.owner {
                        Some(owner) => format!("{origin}:{owner}"),
                        None => origin,
                    }
                },
                p.uplink.clone().unwrap_or_else(|| "none".into()),
                rate(p.tx_bps),
                rate(p.rx_bps),
                rate(p.allocation_bps),
                rate(p.reservation_bps as f64),
                p.shares.to_string(),
                p.limit_bps.map_or("-".into(), |l| rate(l as f64)),
                p.counters.tx_packets.to_string(),
                p.counters.rx_packets.to_string(),
                dropped(&p.counters).to_string(),
            ]
        })
        .collect();
    table(
        &[
            "PORT",
            "INTERFACE",
            "ORIGIN",
            "UPLINK",
            "TX",
            "RX",
            "ALLOCATION",
            "RESERVATION",
            "SHARES",
            "LIMIT",
            "TX PKTS",
            "RX PKTS",
            "DROPS",
        ],
        rows,
    )
}

pub(super) fn group_rows(gs: &[GroupView]) -> String {
    let rows = gs
        .iter()
        .map(|g| {
            let receives = if g.mode == "switch-independent" || g.mode.is_empty() {
                g.receive_uplink.clone().unwrap_or_else(|| "none".into())
            } else {
                "every member".into()
            };
            let flowlets = g
                .flowlets
                .iter()
                .map(|f| format!("{} {} ({})", f.uplink, f.buckets, rate(f.bps)))
                .collect::<Vec<_>>()
                .join(", ");
            vec![
                g.name.clone(),
                g.policy.clone(),
                g.mode.clone(),
                g.active.join(","),
                g.standby.join(","),
                g.failback.to_string(),
                g.vlan.map_or("-".into(), |v| v.to_string()),
                receives,
                g.vmq_queues.map_or("-".into(), |q| q.to_string()),
                if flowlets.is_empty() { "-".into() } else { flowlets },
            ]
        })
        .collect();
    table(
        &[
            "GROUP",
            "POLICY",
            "MODE",
            "ACTIVE",
            "STANDBY",
            "FAILBACK",
            "VLAN",
            "RECEIVES ON",
            "VMQS",
            "FLOWLETS PER MEMBER",
        ],
        rows,
    )
}

/// LBT as net-lbt shows it: the knobs, each uplink's load, each port's mapping, the moves.
pub(super) fn lbt_text(l: &LbtView, s: &Snapshot) -> String {
    let mut out = format!(
        "Load-Based Teaming: threshold {}, window {} s, at most one move per {} s; last move {}, next allowed {}\n\n",
        pct(l.threshold),
        l.window_s,
        l.period_s,
        l.last_move_s.map_or("never".into(), |t| format!("at {t:.1} s")),
        l.next_move_allowed_s.map_or("now".into(), |t| format!("at {t:.1} s")),
    );
    out += &table(
        &["UPLINK", "CAPACITY", "TX", "RX"],
        s.uplinks
            .iter()
            .map(|u| {
                vec![
                    u.name.clone(),
                    rate(u.capacity_bps as f64),
                    pct(u.tx_utilisation),
                    pct(u.rx_utilisation),
                ]
            })
            .collect(),
    );
    out += "\n";
    out += &table(
        &["PORT", "UPLINK", "HOME", "TX", "RX"],
        s.ports
            .iter()
            .map(|p| {
                vec![
                    p.name.clone(),
                    p.uplink.clone().unwrap_or_else(|| "none".into()),
                    p.home.clone().unwrap_or_default(),
                    rate(p.tx_bps),
                    rate(p.rx_bps),
                ]
            })
            .collect(),
    );
    out += "\n";
    out += &table(
        &["TIME", "PORT", "FROM", "TO", "REASON"],
        l.moves
            .iter()
            .map(|m| {
                vec![
                    format!("{:.1} s", m.t_s),
                    m.port.clone(),
                    m.from.clone().unwrap_or_else(|| "none".into()),
                    m.to.clone().unwrap_or_else(|| "none".into()),
                    m.reason.clone(),
                ]
            })
            .collect(),
    );
    out
}

pub(super) fn netioc_rows(ns: &[NodeView]) -> String {
    let depth = |n: &NodeView| {
        let mut d = 0;
        let mut p = n.parent.clone();
        while let Some(name) = p {
            d += 1;
            p = ns.iter().find(|m| m.name == name).and_then(|m| m.parent.clone());
        }
        d
    };
    let rows = ns
        .iter()
        .map(|n| {
            vec![
                format!("{}{}", "  ".repeat(depth(n)), n.name),
                n.kind.clone(),
                rate(n.reservation_bps as f64),
                n.shares.to_string(),
                n.limit_bps.map_or("-".into(), |l| rate(l as f64)),
                rate(n.demand_bps),
                rate(n.allocation_bps),
            ]
        })
        .collect();
    table(
        &["NODE", "KIND", "RESERVATION", "SHARES", "LIMIT", "DEMAND", "ALLOCATION"],
        rows,
    )
}

pub(super) fn event_rows(es: &[EventView]) -> String {
    let rows = es
        .iter()
        .map(|e| {
            vec![
                e.seq.to_string(),
                format!("{:.3} s", e.t_s),
                e.kind.clone(),
                e.message.clone(),
            ]
        })
        .collect();
    table(&["SEQ", "TIME", "KIND", "EVENT"], rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_and_rates_read_as_engineers_write_them() {
        let t = table(
            &["PORT", "TX"],
            vec![vec!["vm1".into(), rate(2.5e9)], vec!["database".into(), rate(750e6)]],
        );
        assert_eq!(t, "PORT      TX\nvm1       2.50G\ndatabase  750.0M\n");
        assert_eq!(
            (rate(12.0), rate(1500.0), pct(0.756)),
            ("12".into(), "1.5k".into(), "75.6%".into())
        );
    }

    #[test]
    fn the_netioc_tree_is_indented_by_depth() {
        let node = |name: &str, parent: Option<&str>, kind: &str| NodeView {
            name: name.into(),
            parent: parent.map(str::to_string),
            kind: kind.into(),
            ..NodeView::default()
        };
        let t = netioc_rows(&[
            node("root", None, "root"),
            node("vm", Some("root"), "class"),
            node("vm1", Some("vm"), "port"),
        ]);
        let names: Vec<&str> = t
            .lines()
            .skip(1)
            .map(|l| l.split("  ").find(|s| !s.is_empty()).unwrap_or(""))
            .collect();
        assert!(t.lines().nth(3).unwrap().starts_with("    vm1"), "{t}");
        assert_eq!(names.len(), 3);
    }
}
