//! `GET /metrics`: the latest snapshot in the OpenMetrics text format Prometheus scrapes.
//!
//! Names: `teamster_uplink_*{uplink}` and `teamster_port_*{port}` (packets, bytes, drops by
//! `reason`, utilisation or rate by `direction`), `teamster_netioc_*{node}` (reservation,
//! limit, allocation, demand in bits/s), `teamster_lbt_moves_total`, `teamster_port_moves_total{reason}`,
//! `teamster_failovers_total`, `teamster_scheduler_queue_depth{uplink}` (frames),
//! `teamster_scheduler_queue_bytes{uplink}`, `teamster_scheduler_queue_budget_bytes{uplink}`
//! and `teamster_uplink_ecn_marked_total{uplink}` / `teamster_port_ecn_marked_total{port}`
//! (frames marked Congestion Experienced), `teamster_vtep_remote_resolved{remote}` (overlays:
//! 1 once ARP has found the remote VTEP's MAC), `teamster_rx_queue_frames_total{uplink,queue}`,
//! `teamster_rx_queue_pps{uplink,queue}`, `teamster_rx_queue_load{uplink,queue}` and
//! `teamster_rx_queue_capacity{uplink,queue}` (receive queues; the load under NetQueue only, the
//! capacity under Dynamic NetQueue only), `teamster_rx_filter_moves_total{reason}` (Dynamic
//! NetQueue's moves since start), and `teamster_api_tcp_connections_refused_total{reason}` and
//! `teamster_api_tcp_connections_evicted_total{reason}` (the TCP listener's, see
//! [`crate::http::admission`]).

use super::ApiState;
use crate::live::snapshot::{CountersView, Snapshot};
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

type FloatGauge = Gauge<f64, AtomicU64>;

/// The receive queues' families.
fn rx_metrics(reg: &mut Registry, rx: &crate::live::rx_view::RxView) {
    let frames = Family::<Labels, Counter>::default();
    reg.register("rx_queue_frames", "Frames a receive queue took", frames.clone());
    let pps = gauge(
        reg,
        "rx_queue_pps",
        "Frames per second a receive queue took over the last round",
    );
    let load = gauge(
        reg,
        "rx_queue_load",
        "A receive queue's NetQueue load, as a fraction of its capacity",
    );
    let capacity = gauge(
        reg,
        "rx_queue_capacity",
        "Frames per second a receive queue's thread takes at full load (Dynamic NetQueue: measured, or rx.queue_pps)",
    );
    let moves = Family::<Labels, Counter>::default();
    reg.register(
        "rx_filter_moves",
        "NetQueue filter moves between receive queues since start",
        moves.clone(),
    );
    for u in &rx.uplinks {
        for q in &u.queues {
            let queue = q.queue.to_string();
            let l = labels(&[("uplink", &u.uplink), ("queue", &queue)]);
            frames.get_or_create(&l).inc_by(q.frames);
            pps.get_or_create(&l).set(q.pps);
            if let Some(v) = q.load {
                load.get_or_create(&l).set(v);
            }
            if let Some(v) = q.capacity {
                capacity.get_or_create(&l).set(v);
            }
        }
    }
    for (reason, n) in &rx.moves {
        moves.get_or_create(&labels(&[("reason", reason)])).inc_by(*n);
    }
}

/// What the TCP listener refused and evicted, by reason (see [`crate::http::admission`]).
fn api_metrics(reg: &mut Registry) {
    let tally = &crate::http::admission::TCP_TALLY;
    for (name, help, values) in [
        (
            "api_tcp_connections_refused",
            "TCP API connections closed at once, by reason",
            tally.refusals(),
        ),
        (
            "api_tcp_connections_evicted",
            "TCP API connections without the token closed for a newcomer, by reason",
            tally.evictions(),
        ),
    ] {
        let family = Family::<Labels, Counter>::default();
        reg.register(name, help, family.clone());
        for (reason, n) in values {
            family.get_or_create(&labels(&[("reason", reason)])).inc_by(n);
        }
    }
}

/// Labels as (name, value) pairs: `uplink`, `port` or `node`, with `reason` or `direction`.
type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Packet, byte and drop counters of one kind of object (`uplink` or `port`).
struct Traffic {
    kind: &'static str,
    rx_packets: Family<Labels, Counter>,
    rx_bytes: Family<Labels, Counter>,
    tx_packets: Family<Labels, Counter>,
    tx_bytes: Family<Labels, Counter>,
    drops: Family<Labels, Counter>,
}

impl Traffic {
    fn register(reg: &mut Registry, kind: &'static str) -> Traffic {
        let t = Traffic {
            kind,
            rx_packets: Family::default(),
            rx_bytes: Family::default(),
            tx_packets: Family::default(),
            tx_bytes: Family::default(),
            drops: Family::default(),
        };
        let sub = reg.sub_registry_with_prefix(kind);
        sub.register("rx_packets", "Frames received", t.rx_packets.clone());
        sub.register("rx_bytes", "Bytes received", t.rx_bytes.clone());
        sub.register("tx_packets", "Frames sent", t.tx_packets.clone());
        sub.register("tx_bytes", "Bytes sent", t.tx_bytes.clone());
        sub.register("drops", "Frames dropped, by reason", t.drops.clone());
        t
    }

    fn record(&self, name: &str, c: &CountersView) {
        let o = labels(&[(self.kind, name)]);
        self.rx_packets.get_or_create(&o).inc_by(c.rx_packets);
        self.rx_bytes.get_or_create(&o).inc_by(c.rx_bytes);
        self.tx_packets.get_or_create(&o).inc_by(c.tx_packets);
        self.tx_bytes.get_or_create(&o).inc_by(c.tx_bytes);
        for (reason, n) in &c.drops {
            self.drops
                .get_or_create(&labels(&[(self.kind, name), ("reason", reason)]))
                .inc_by(*n);
        }
    }
}

fn gauge(reg: &mut Registry, name: &str, help: &str) -> Family<Labels, FloatGauge> {
    let f = Family::<Labels, FloatGauge>::default();
    reg.register(name, help, f.clone());
    f
}

/// The snapshot as OpenMetrics text.
pub fn encode(s: &Snapshot) -> String {
    let mut reg = Registry::with_prefix("teamster");
    let uplink = Traffic::register(&mut reg, "uplink");
    let port = Traffic::register(&mut reg, "port");
    let util = gauge(
        &mut reg,
        "uplink_utilisation",
        "Mean utilisation over the LBT window, 0-1",
    );
    let in_use = gauge(
        &mut reg,
        "uplink_in_use",
        "1 if the team uses the uplink (carrier and admin up)",
    );
    let capacity = gauge(&mut reg, "uplink_capacity_bits_per_second", "Configured capacity");
    let depth = gauge(
        &mut reg,
        "scheduler_queue_depth",
        "Frames waiting in the uplink's NetIOC scheduler",
    );
    let queue_bytes = gauge(
        &mut reg,
        "scheduler_queue_bytes",
        "Bytes waiting in the uplink's NetIOC scheduler",
    );
    let budget = gauge(
        &mut reg,
        "scheduler_queue_budget_bytes",
        "Bytes the uplink's queue holds before it refuses ports over their fair part",
    );
    let marked = Family::<Labels, Counter>::default();
    reg.register(
        "uplink_ecn_marked",
        "Frames marked ECN Congestion Experienced by the switch",
        marked.clone(),
    );
    let port_marked = Family::<Labels, Counter>::default();
    reg.register(
        "port_ecn_marked",
        "Frames from the port marked ECN Congestion Experienced in the switch's receive queue",
        port_marked.clone(),
    );
    let rate = gauge(&mut reg, "port_rate_bits_per_second", "Mean rate over the LBT window");
    let reservation = gauge(
        &mut reg,
        "netioc_reservation_bits_per_second",
        "NetIOC reservation per node",
    );
    let limit = gauge(
        &mut reg,
        "netioc_limit_bits_per_second",
        "NetIOC limit per node (limited nodes only)",
    );
    let allocation = gauge(
        &mut reg,
        "netioc_allocation_bits_per_second",
        "What NetIOC gives the node at the measured demands",
    );
    let demand = gauge(
        &mut reg,
        "netioc_demand_bits_per_second",
        "Offered send rate under the node",
    );
    let lbt_moves = Counter::<u64>::default();
    reg.register("lbt_moves", "Ports moved by Load-Based Teaming", lbt_moves.clone());
    let moves = Family::<Labels, Counter>::default();
    reg.register("port_moves", "Ports moved between uplinks, by reason", moves.clone());
    let failovers = Counter::<u64>::default();
    reg.register("failovers", "Times an uplink in use went out of use", failovers.clone());

    for u in &s.uplinks {
        uplink.record(&u.name, &u.counters);
        let o = labels(&[("uplink", &u.name)]);
        for (dir, v) in [("tx", u.tx_utilisation), ("rx", u.rx_utilisation)] {
            util.get_or_create(&labels(&[("uplink", &u.name), ("direction", dir)]))
                .set(v);
        }
        in_use.get_or_create(&o).set(if u.in_use { 1.0 } else { 0.0 });
        capacity.get_or_create(&o).set(u.capacity_bps as f64);
        depth.get_or_create(&o).set(u.queue_depth as f64);
        queue_bytes.get_or_create(&o).set(u.queue_bytes as f64);
        budget.get_or_create(&o).set(u.queue_budget_bytes as f64);
        marked.get_or_create(&o).inc_by(u.ecn_marked);
    }
    for p in &s.ports {
        port.record(&p.name, &p.counters);
        port_marked
            .get_or_create(&labels(&[("port", &p.name)]))
            .inc_by(p.ecn_marked);
        for (dir, v) in [("tx", p.tx_bps), ("rx", p.rx_bps)] {
            rate.get_or_create(&labels(&[("port", &p.name), ("direction", dir)]))
                .set(v);
        }
    }
    for n in &s.netioc {
        let o = labels(&[("node", &n.name)]);
        reservation.get_or_create(&o).set(n.reservation_bps as f64);
        if let Some(l) = n.limit_bps {
            limit.get_or_create(&o).set(l as f64);
        }
        allocation.get_or_create(&o).set(n.allocation_bps);
        demand.get_or_create(&o).set(n.demand_bps);
    }
    // Totals since start, not the bounded log of recent moves: a counter must never go back.
    for (reason, &n) in &s.lbt.moves_by_reason {
        if reason == "load-based" {
            lbt_moves.inc_by(n);
        }
        moves.get_or_create(&labels(&[("reason", reason)])).inc_by(n);
    }
    failovers.inc_by(s.failovers);
    let resolved = Family::<Labels, FloatGauge>::default();
    reg.register(
        "vtep_remote_resolved",
        "1 if ARP has found the remote VTEP's MAC, else 0",
        resolved.clone(),
    );
    for r in s.vtep.iter().flat_map(|v| &v.remotes) {
        resolved
            .get_or_create(&labels(&[("remote", &r.address)]))
            .set(if r.mac.is_some() { 1.0 } else { 0.0 });
    }
    rx_metrics(&mut reg, &s.rx);
    api_metrics(&mut reg);
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &reg).expect("writing to a String cannot fail");
    out
}

/// `GET /metrics`.
pub async fn metrics(State(s): State<ApiState>) -> impl IntoResponse {
    let snap = s.snapshots.borrow().clone();
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        encode(&snap),
    )
}

#[cfg(test)]
mod shipped {
    //! The Grafana dashboard and the alerting rules in `packaging/` name only metrics this
    //! module writes.

    use super::*;
    use crate::live::snapshot::{PortView, UplinkView};

    /// Every sample name /metrics can have: gauges as they are, counters with `_total`.
    fn names() -> Vec<String> {
        // One of everything, so that every family has a sample.
        let mut s = Snapshot::default();
        let mut counters = crate::live::snapshot::CountersView::default();
        counters.drops.insert("backlog".into(), 1);
        s.uplinks.push(UplinkView {
            name: "u".into(),
            counters: counters.clone(),
            ..Default::default()
        });
        s.ports.push(PortView {
            name: "p".into(),
            counters,
            ..Default::default()
        });
        s.netioc.push(crate::live::snapshot::NodeView {
            name: "n".into(),
            limit_bps: Some(1),
            ..Default::default()
        });
        s.lbt.moves_by_reason.insert("load-based".into(), 1);
        let text = encode(&s);
        text.lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .flat_map(|l| {
                let mut w = l.split_whitespace();
                let (name, kind) = (w.next().unwrap_or_default(), w.next().unwrap_or_default());
                match kind {
                    "counter" => vec![format!("{name}_total")],
                    _ => vec![name.to_string()],
                }
            })
            .collect()
    }

    fn check(file: &str) {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../..")
                .join(file),
        )
        .unwrap();
        let known = names();
        let re = regex_lite::Regex::new(r"teamster_[a-z_]+").unwrap();
        let used: Vec<&str> = re.find_iter(&text).map(|m| m.as_str()).collect();
        assert!(used.len() > 5, "{file}: no queries found");
        for name in used {
            assert!(
                known.iter().any(|k| k == name),
                "{file}: {name} is not a metric (known: {known:?})"
            );
        }
    }

    #[test]
    fn the_grafana_dashboard_names_only_metrics_that_exist() {
        check("packaging/grafana/teamster.json");
        let v: serde_json::Value =
            serde_json::from_str(include_str!("../../../../packaging/grafana/teamster.json")).unwrap();
        assert!(v["panels"].as_array().is_some_and(|p| p.len() >= 8));
    }

    /// Move counters are totals since start: they keep counting past the log of recent moves,
    /// which forgets the oldest (a counter that went back would read as a reset).
    #[test]
    fn move_counters_count_past_the_move_log() {
        let mut s = Snapshot::default();
        s.lbt.moves_by_reason.insert("load-based".into(), 1500);
        s.lbt.moves_by_reason.insert("failover".into(), 7);
        let text = encode(&s);
        assert!(text.contains("teamster_lbt_moves_total 1500"), "{text}");
        assert!(
            text.contains("teamster_port_moves_total{reason=\"failover\"} 7"),
            "{text}"
        );
    }

    #[test]
    fn the_alerting_rules_name_only_metrics_that_exist() {
        check("packaging/prometheus/teamster-alerts.yml");
    }
}
