//! Fluid fidelity: every `step_s`, each host's real team maps the VMs running there to
//! uplinks, and each uplink's effective rate is shared among them by the NetIOC allocator
//! ([`teamster_core::ioc::allocate`]) over the host's tree in force: reservations first, then
//! the excess by shares, within limits. A change between two steps takes effect at the next.
//! Greedy sources want all they can get; a cbr source wants its rate.

use super::decide::Decisions;
use super::plan::ClusterPlan;
use super::stays::HostStays;
use crate::packet::source::SourceSpec;
use crate::run::{Row, RunOutput};
use teamster_core::ioc::{allocate, Tree};
use teamster_core::teaming::{GroupId, LinkState, PortId, PortSpec, Team, UplinkId};
use teamster_core::Instant;

/// One host as the fluid run keeps it.
struct FluidHost<'a> {
    stays: HostStays<'a>,
    team: Team,
    /// Per stay of the host: whether its port is in the team, its port ID and its leaf (the
    /// same in every tree: they differ only in controls).
    joined: Vec<bool>,
    ids: Vec<PortId>,
    macs: Vec<teamster_core::wire::MacAddr>,
    leaves: Vec<teamster_core::ioc::NodeId>,
    /// The trees in force, one per change of controls.
    trees: Vec<(f64, Tree)>,
    links_applied: usize,
    up: Vec<bool>,
}

/// Runs every host at fluid fidelity.
pub fn run(plan: &ClusterPlan, d: &Decisions) -> RunOutput {
    let mut out = super::output(plan, d);
    let nv = plan.vms.len();
    let nu = plan.uplinks.len();
    let mut hosts: Vec<FluidHost> = (0..plan.hosts.len())
        .map(|h| {
            let stays = HostStays::new(plan, d, h);
            let mut trees = vec![(0.0, stays.tree(d, &[]))];
            trees.extend(d.controls[h].iter().map(|(t, c)| (*t, stays.tree(d, c))));
            let uplinks = plan.uplinks.iter().map(|u| (u.name.clone(), u.capacity));
            let team = Team::with_groups(uplinks, plan.lbt, &plan.groups).expect("the host shape was built once");
            let n = stays.stays.len();
            FluidHost {
                joined: vec![false; n],
                ids: (0..n).map(|k| PortId(stays.port(d, k).0)).collect(),
                macs: (0..n).map(|k| stays.port(d, k).1).collect(),
                leaves: (0..n).map(|k| stays.leaf(&trees[0].1, k)).collect(),
                stays,
                team,
                trees,
                links_applied: 0,
                up: vec![true; nu],
            }
        })
        .collect();
    let steps = (plan.file.duration_s / plan.file.step_s).ceil() as usize;
    for i in 0..steps {
        let t = i as f64 * plan.file.step_s;
        let now = Instant::from_nanos((t * 1e9) as u64);
        let mut row = Row {
            t_s: t,
            uplink_tx: vec![0.0; nu * hosts.len()],
            uplink_rx: vec![0.0; nu * hosts.len()],
            offered_tx: vec![0.0; nv],
            delivered_tx: vec![0.0; nv],
            offered_rx: vec![0.0; nv],
            delivered_rx: vec![0.0; nv],
        };
        for (h, host) in hosts.iter_mut().enumerate() {
            host.advance(plan, d, h, t, now);
            let tree = &host
                .trees
                .iter()
                .rev()
                .find(|(at, _)| *at <= t)
                .expect("the first is at 0")
                .1;
            for u in 0..nu {
                // A class or pool with nothing in it wants nothing (else it would take shares).
                let mut demand: Vec<Option<f64>> = (tree.ids())
                    .map(|id| tree.node(id).children.is_empty().then_some(0.0))
                    .collect();
                let mut on = Vec::new();
                for (k, &s) in host.stays.stays.iter().enumerate() {
                    let leaf = host.leaves[k];
                    let vm = d.stays[s].vm;
                    let here = host.joined[k] && host.team.port_uplink(host.ids[k]) == Some(UplinkId(u));
                    demand[leaf.0] = match (&plan.vms[vm].source, here) {
                        (_, false) => Some(0.0),
                        (SourceSpec::Cbr { rate, .. }, true) => Some(rate.bps_f64()),
                        (_, true) => None,
                    };
                    if here {
                        on.push((vm, leaf));
                    }
                }
                let rate = if host.up[u] { plan.uplinks[u].rate_bps } else { 0.0 };
                let got = allocate(tree, rate, &demand);
                for (vm, leaf) in on {
                    let x = got.get(leaf);
                    row.delivered_tx[vm] += x;
                    row.offered_tx[vm] += demand[leaf.0].unwrap_or(x);
                    row.uplink_tx[h * nu + u] += x;
                }
            }
        }
        out.rows.push(row);
    }
    out
}

impl FluidHost<'_> {
    /// Brings the team to instant `t`: link changes applied, ports of stays that began joined,
    /// of stays that ended removed.
    fn advance(&mut self, plan: &ClusterPlan, d: &Decisions, h: usize, t: f64, now: Instant) {
        while let Some(&(_, u, up)) = d.links[h].get(self.links_applied).filter(|l| l.0 <= t) {
            let state = if up { LinkState::Up } else { LinkState::Down };
            let _ = self.team.set_link(UplinkId(u), state, now);
            self.up[u] = up;
            self.links_applied += 1;
        }
        for k in 0..self.stays.stays.len() {
            let stay = &d.stays[self.stays.stays[k]];
            let active = stay.from_s <= t && stay.to_s.is_none_or(|e| e > t);
            let id = self.ids[k];
            if active && !self.joined[k] {
                let v = &plan.vms[stay.vm];
                let spec = PortSpec {
                    id,
                    mac: self.macs[k],
                    group: GroupId(v.group),
                };
                self.joined[k] = self.team.add_port(spec).is_ok();
            } else if !active && self.joined[k] {
                let _ = self.team.remove_port(id);
                self.joined[k] = false;
            }
        }
    }
}
