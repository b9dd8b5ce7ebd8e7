//! Building the [`Snapshot`] of a running data plane from what it [`Published`], on the
//! control plane's thread.

use super::config::SwitchFile;
use super::snapshot::{
    CountersView, EventView, FlowletShareView, GroupView, LbtView, MoveView, NodeView, PortView, Snapshot, UplinkView,
};
use std::collections::HashSet;
use teamster_core::ioc::{allocate, NodeId};
use teamster_core::switch::{Counters, DropReason};
use teamster_core::teaming::{GroupId, LinkState, UplinkId};
use teamster_dp::datapath::{ExtraDrops, Published};

/// Moves kept in a snapshot (the most recent).
pub(super) const MOVES_SHOWN: usize = 500;
/// Events kept in a snapshot (the most recent).
pub(super) const EVENTS_SHOWN: usize = 200;

/// The core switch's counters with the data plane's own drops added under their reasons.
fn counters(c: Option<&Counters>, extra: &ExtraDrops) -> CountersView {
    let c = c.cloned().unwrap_or_default();
    let mut drops: std::collections::BTreeMap<String, u64> = DropReason::ALL
        .iter()
        .map(|r| (r.name().to_string(), c.drops(*r)))
        .collect();
    for (reason, n) in extra.by_reason() {
        drops.insert(reason.into(), n);
    }
    CountersView {
        rx_packets: c.rx_packets,
        rx_bytes: c.rx_bytes,
        tx_packets: c.tx_packets,
        tx_bytes: c.tx_bytes,
        drops,
    }
}

fn up_down(up: bool) -> String {
    if up { "up" } else { "down" }.to_string()
}

/// The switch as the API shows it, from what the data plane published; `file` is the
/// configuration in force.
pub(super) fn snapshot(dp: &Published, file: &SwitchFile) -> Snapshot {
    let (team, tree, now) = (&dp.team, &dp.tree, dp.at);
    let uplink_name = |u: UplinkId| dp.uplinks[u.0].plan.name.clone();
    let uplinks = dp
        .uplinks
        .iter()
        .enumerate()
        .map(|(i, u)| {
            let util = team.utilisation(UplinkId(i), now).unwrap_or_default();
            UplinkView {
                name: u.plan.name.clone(),
                interface: u.plan.interface.clone(),
                attached: u.attached,
                backend: u.backend.clone(),
                link: up_down(u.carrier),
                admin: up_down(u.plan.admin_up),
                in_use: team.uplink_usable(UplinkId(i)),
                capacity_bps: u.plan.capacity.bps(),
                tx_utilisation: util.tx,
                rx_utilisation: util.rx,
                queue_depth: u.queued_frames,
                queue_bytes: u.queued_bytes,
                queue_budget_bytes: u.queue_budget,
                ecn_marked: u.ecn_marked,
                counters: counters(u.counters.as_ref(), &u.extra),
            }
        })
        .collect();
    let demand = demands(dp);
    let allocation = allocations(dp);
    let by_name: std::collections::HashMap<&str, _> = file.ports.iter().map(|f| (f.name.as_str(), f)).collect();
    let ports = dp
        .ports
        .iter()
        .filter_map(|p| Some((p, *by_name.get(p.plan.name.as_str())?)))
        .map(|(p, pf)| {
            let spec = &tree.node(p.plan.leaf).spec;
            let rates = team.port_rates(p.plan.id, now).unwrap_or_default();
            let last = team.port_last_rates(p.plan.id, now).unwrap_or_default();
            PortView {
                name: p.plan.name.clone(),
                interface: p.plan.interface.clone(),
                attached: p.attached,
                backend: p.backend.clone(),
                worker: p.worker,
                mac: pf.mac.clone().unwrap_or_default(),
                mac_claim: p.mac_claim.map(|c| c.name().to_string()).unwrap_or_default(),
                group: pf.group.clone(),
                origin: pf.origin.clone(),
                owner: pf.owner.clone(),
                uplink: team.port_uplink(p.plan.id).map(uplink_name),
                home: team.port_home(p.plan.id).map(uplink_name),
                reservation_bps: spec.reservation.bps(),
                shares: spec.shares.get(),
                limit_bps: spec.limit.map(|l| l.bps()),
                allocation_bps: allocation[p.plan.leaf.0],
                tx_bps: rates.tx,
                rx_bps: rates.rx,
                tx_last_bps: last.tx,
                rx_last_bps: last.rx,
                ecn_marked: p.ecn_marked,
                queue_taken: p.queue.taken,
                queue_backlog_ns: p.queue.backlog_ns,
                queue_dropped_bytes: p.queue.dropped_bytes,
                queue_marked: p.queue.marked,
                queue_tcp: p.queue.tcp,
                counters: counters(p.counters.as_ref(), &p.extra),
            }
        })
        .collect();
    let port_groups = file
        .port_groups
        .iter()
        .enumerate()
        .map(|(g, gf)| {
            let spec = team.group(GroupId(g));
            let tuning = spec.map(|s| s.tuning).unwrap_or_default();
            let flowlets = team.flowlets(GroupId(g), now);
            GroupView {
                name: gf.name.clone(),
                policy: serde_json::to_value(gf.policy)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                active: gf.active.clone(),
                standby: gf.standby.clone(),
                failback: gf.failback,
                vlan: gf.vlan,
                receive_uplink: team.group_receive_uplink(GroupId(g)).map(uplink_name),
                mode: gf.mode.to_string(),
                hash_fields: tuning.hash_fields.to_string(),
                flowlet_gap_us: tuning.flowlet_gap.as_micros() as u64,
                rebalance_ms: tuning.rebalance.as_millis() as u64,
                vmq_queues: spec.and_then(|s| {
                    let queues: Option<Vec<u32>> = s
                        .order
                        .active
                        .iter()
                        .map(|u| {
                            let interface = &dp.uplinks.get(u.0)?.plan.interface;
                            teamster_dp::iface::rx_queues(interface).ok().map(|n| n as u32)
                        })
                        .collect();
                    Some(s.mode.vmq_queues(s.policy, &queues?))
                }),
                flowlet_moves: flowlets.as_ref().map(|(_, c)| c.flowlet_moves),
                flowlets: flowlets
                    .map(|(shares, _)| {
                        shares
                            .into_iter()
                            .map(|m| FlowletShareView {
                                uplink: uplink_name(m.uplink),
                                buckets: m.active_buckets,
                                bps: m.bps,
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            }
        })
        .collect();
    let lbt_config = team.lbt_config();
    let (last, next) = team.lbt_timing();
    let moves = &dp.moves;
    let lbt = LbtView {
        threshold: lbt_config.threshold,
        window_s: lbt_config.window.as_secs_f64(),
        period_s: lbt_config.period.as_secs_f64(),
        last_move_s: last.map(|t| t.as_secs_f64()),
        next_move_allowed_s: next.map(|t| t.as_secs_f64()),
        moves: moves[moves.len().saturating_sub(MOVES_SHOWN)..]
            .iter()
            .map(|m| MoveView {
                t_s: m.at.as_secs_f64(),
                port: m.port.clone(),
                from: m.from.clone(),
                to: m.to.clone(),
                reason: m.reason.clone(),
            })
            .collect(),
        moves_by_reason: dp.moves_by_reason.clone(),
    };
    let port_leaves: HashSet<NodeId> = dp.ports.iter().map(|p| p.plan.leaf).collect();
    let netioc = tree
        .ids()
        .map(|id| {
            let n = tree.node(id);
            let kind = if id == NodeId::ROOT {
                "root"
            } else if port_leaves.contains(&id) {
                "port"
            } else if n.parent == Some(NodeId::ROOT) {
                "class"
            } else {
                "pool"
            };
            NodeView {
                name: n.spec.name.clone(),
                parent: n.parent.map(|p| tree.node(p).spec.name.clone()),
                kind: kind.to_string(),
                reservation_bps: n.spec.reservation.bps(),
                shares: n.spec.shares.get(),
                limit_bps: n.spec.limit.map(|l| l.bps()),
                allocation_bps: allocation[id.0],
                demand_bps: demand[id.0],
            }
        })
        .collect();
    let skip = dp.events.len().saturating_sub(EVENTS_SHOWN);
    Snapshot {
        t_s: now.as_secs_f64(),
        // Built within milliseconds of the copy it shows.
        unix_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        uplinks,
        ports,
        port_groups,
        lbt,
        netioc,
        failovers: dp.failovers,
        lacp: super::lacp_view::lacp_members(team, uplink_name),
        rx: super::rx_view::rx_view(dp, file.rx.queue_count()),
        vtep: dp.vtep.as_ref().map(|(local, remotes)| super::snapshot::VtepView {
            address: local.to_string(),
            remotes: remotes
                .iter()
                .map(|(ip, mac)| super::snapshot::RemoteVtepView {
                    address: ip.to_string(),
                    mac: mac.map(|m| m.to_string()),
                })
                .collect(),
        }),
        events: dp.events.iter().skip(skip).map(EventView::from).collect(),
        data_plane: dp.data_plane.to_string(),
    }
}

/// Offered send rate per tree node: each port's, summed up the tree.
fn demands(dp: &Published) -> Vec<f64> {
    let tree = &dp.tree;
    let mut demand = vec![0.0; tree.len()];
    for p in &dp.ports {
        let rate = dp.team.port_rates(p.plan.id, dp.at).map_or(0.0, |r| r.tx);
        let mut node = Some(p.plan.leaf);
        while let Some(n) = node {
            demand[n.0] += rate;
            node = tree.node(n).parent;
        }
    }
    demand
}

/// What NetIOC gives each node at the measured demands: per uplink in use, the allocation of
/// its capacity among the ports it carries, summed over uplinks.
fn allocations(dp: &Published) -> Vec<f64> {
    let (team, tree, now) = (&dp.team, &dp.tree, dp.at);
    let mut total = vec![0.0; tree.len()];
    for (u, uplink) in dp.uplinks.iter().enumerate() {
        let id = UplinkId(u);
        if team.link_state(id) != Some(LinkState::Up) {
            continue;
        }
        // Leaves demand what their port offers on this uplink; a leaf with no port (an idle
        // class) demands nothing; inner nodes are bounded by their children.
        let mut demand: Vec<Option<f64>> = tree
            .ids()
            .map(|n| tree.node(n).children.is_empty().then_some(0.0))
            .collect();
        for p in &dp.ports {
            if team.port_uplink(p.plan.id) == Some(id) {
                demand[p.plan.leaf.0] = Some(team.port_rates(p.plan.id, now).map_or(0.0, |r| r.tx));
            }
        }
        let a = allocate(tree, uplink.plan.capacity.bps_f64(), &demand);
        for (t, v) in total.iter_mut().zip(&a.0) {
            *t += v;
        }
    }
    total
}
