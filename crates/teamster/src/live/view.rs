//! Building the [`Snapshot`] of a running [`Daemon`].

use super::daemon::{Daemon, ExtraDrops};
use super::snapshot::{CountersView, GroupView, LbtView, NodeView, PortView, Snapshot, UplinkView};
use std::collections::HashSet;
use teamster_core::ioc::{allocate, NodeId};
use teamster_core::switch::{Counters, DropReason};
use teamster_core::teaming::{GroupId, LinkState, UplinkId};
use teamster_core::Instant;

/// Moves kept in a snapshot (the most recent).
const MOVES_SHOWN: usize = 500;
/// Events kept in a snapshot (the most recent).
const EVENTS_SHOWN: usize = 200;

/// The core switch's counters with the data plane's own drops added under their reasons.
fn counters(c: Option<&Counters>, extra: &ExtraDrops) -> CountersView {
    let c = c.cloned().unwrap_or_default();
    let mut drops: std::collections::BTreeMap<String, u64> = DropReason::ALL
        .iter()
        .map(|r| (r.name().to_string(), c.drops(*r)))
        .collect();
    drops.insert("queue_full".into(), extra.queue_full);
    drops.insert("oversize".into(), extra.oversize);
    drops.insert("ring_full".into(), extra.ring_full);
    drops.insert("tx_error".into(), extra.tx_error);
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

impl Daemon {
    /// The switch as the API shows it at `now`.
    pub(super) fn snapshot(&self, now: Instant) -> Snapshot {
        let team = self.switch.team();
        let uplink_name = |u: UplinkId| self.uplinks[u.0].name.clone();
        let uplinks = self
            .uplinks
            .iter()
            .enumerate()
            .map(|(i, u)| {
                let util = team.utilisation(UplinkId(i), now).unwrap_or_default();
                UplinkView {
                    name: u.name.clone(),
                    interface: u.interface.clone(),
                    link: up_down(u.carrier),
                    admin: up_down(u.admin_up),
                    in_use: team.link_state(UplinkId(i)) == Some(LinkState::Up),
                    capacity_bps: team.uplink(UplinkId(i)).map_or(0, |s| s.capacity.bps()),
                    tx_utilisation: util.tx,
                    rx_utilisation: util.rx,
                    queue_depth: self.ports.iter().map(|p| u.sched.queued(p.leaf) as u64).sum(),
                    counters: counters(self.switch.uplink_counters(UplinkId(i)), &u.extra),
                }
            })
            .collect();
        let demand = self.demands(now);
        let allocation = self.allocations(now);
        let ports = self
            .ports
            .iter()
            .zip(&self.file.ports)
            .map(|(p, pf)| {
                let spec = &self.tree.node(p.leaf).spec;
                let rates = team.port_rates(p.id, now).unwrap_or_default();
                PortView {
                    name: p.name.clone(),
                    interface: pf.interface.clone(),
                    mac: pf.mac.clone(),
                    group: pf.group.clone(),
                    uplink: team.port_uplink(p.id).map(uplink_name),
                    home: team.port_home(p.id).map(uplink_name),
                    reservation_bps: spec.reservation.bps(),
                    shares: spec.shares.get(),
                    limit_bps: spec.limit.map(|l| l.bps()),
                    allocation_bps: allocation[p.leaf.0],
                    tx_bps: rates.tx,
                    rx_bps: rates.rx,
                    counters: counters(self.switch.port_counters(p.id), &p.extra),
                }
            })
            .collect();
        let port_groups = self
            .file
            .port_groups
            .iter()
            .enumerate()
            .map(|(g, gf)| GroupView {
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
            })
            .collect();
        let lbt_config = team.lbt_config();
        let (last, next) = team.lbt_timing();
        let lbt = LbtView {
            threshold: lbt_config.threshold,
            window_s: lbt_config.window.as_secs_f64(),
            period_s: lbt_config.period.as_secs_f64(),
            last_move_s: last.map(|t| t.as_secs_f64()),
            next_move_allowed_s: next.map(|t| t.as_secs_f64()),
            moves: self.moves[self.moves.len().saturating_sub(MOVES_SHOWN)..].to_vec(),
        };
        let port_leaves: HashSet<NodeId> = self.ports.iter().map(|p| p.leaf).collect();
        let netioc = self
            .tree
            .ids()
            .map(|id| {
                let n = self.tree.node(id);
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
                    parent: n.parent.map(|p| self.tree.node(p).spec.name.clone()),
                    kind: kind.to_string(),
                    reservation_bps: n.spec.reservation.bps(),
                    shares: n.spec.shares.get(),
                    limit_bps: n.spec.limit.map(|l| l.bps()),
                    allocation_bps: allocation[id.0],
                    demand_bps: demand[id.0],
                }
            })
            .collect();
        Snapshot {
            t_s: now.as_secs_f64(),
            uplinks,
            ports,
            port_groups,
            lbt,
            netioc,
            failovers: self.failovers,
            events: self
                .events
                .iter()
                .skip(self.events.len().saturating_sub(EVENTS_SHOWN))
                .cloned()
                .collect(),
        }
    }

    /// Offered send rate per tree node: each port's, summed up the tree.
    fn demands(&self, now: Instant) -> Vec<f64> {
        let mut demand = vec![0.0; self.tree.len()];
        for p in &self.ports {
            let rate = self.switch.team().port_rates(p.id, now).map_or(0.0, |r| r.tx);
            let mut node = Some(p.leaf);
            while let Some(n) = node {
                demand[n.0] += rate;
                node = self.tree.node(n).parent;
            }
        }
        demand
    }

    /// What NetIOC gives each node at the measured demands: per uplink in use, the allocation
    /// of its capacity among the ports it carries, summed over uplinks.
    fn allocations(&self, now: Instant) -> Vec<f64> {
        let team = self.switch.team();
        let mut total = vec![0.0; self.tree.len()];
        for u in 0..self.uplinks.len() {
            let id = UplinkId(u);
            if team.link_state(id) != Some(LinkState::Up) {
                continue;
            }
            let capacity = team.uplink(id).map_or(0.0, |s| s.capacity.bps_f64());
            // Leaves demand what their port offers on this uplink; a leaf with no port (an idle
            // class) demands nothing; inner nodes are bounded by their children.
            let mut demand: Vec<Option<f64>> = self
                .tree
                .ids()
                .map(|n| self.tree.node(n).children.is_empty().then_some(0.0))
                .collect();
            for p in &self.ports {
                if team.port_uplink(p.id) == Some(id) {
                    demand[p.leaf.0] = Some(team.port_rates(p.id, now).map_or(0.0, |r| r.tx));
                }
            }
            let a = allocate(&self.tree, capacity, &demand);
            for (t, v) in total.iter_mut().zip(&a.0) {
                *t += v;
            }
        }
        total
    }
}
