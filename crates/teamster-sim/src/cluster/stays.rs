//! One host's share of the decisions: the stays of VMs on it, each a NetIOC leaf of its own,
//! and the tree of controls in force at each instant, as both fidelities run a host.

use super::decide::Decisions;
use super::plan::ClusterPlan;
use teamster_core::ioc::{NodeId, Tree};
use teamster_core::placement::{Host, Vm};
use teamster_core::units::Bandwidth;

/// The stays of one host, and how its tree is built.
pub struct HostStays<'a> {
    plan: &'a ClusterPlan,
    host: Host,
    /// Stay indices (into [`Decisions::stays`]) on this host, in order.
    pub stays: Vec<usize>,
    /// Each stay's leaf name stem: the VM's name, then `~2`, `~3` for later stays of the same
    /// VM on this host.
    names: Vec<String>,
    /// Migration streams (indices into [`Decisions::transfers`]) from this host, in order:
    /// each a leaf `vmotion~{index}` in the `live-migration` class.
    pub transfers: Vec<usize>,
}

impl<'a> HostStays<'a> {
    /// Host `h`'s stays.
    pub fn new(plan: &'a ClusterPlan, d: &Decisions, h: usize) -> HostStays<'a> {
        let mut host = plan.cluster.host(&plan.hosts[h]).expect("a host of the plan").clone();
        host.vms.clear();
        let stays: Vec<usize> = (0..d.stays.len()).filter(|&s| d.stays[s].host == h).collect();
        let mut names: Vec<String> = Vec::new();
        for (k, &s) in stays.iter().enumerate() {
            let vm = d.stays[s].vm;
            let before = stays[..k].iter().filter(|&&o| d.stays[o].vm == vm).count();
            let base = &plan.vms[vm].vm.name;
            names.push(if before == 0 {
                base.clone()
            } else {
                format!("{base}~{}", before + 1)
            });
        }
        let transfers = (0..d.transfers.len()).filter(|&x| d.transfers[x].host == h).collect();
        HostStays {
            plan,
            host,
            stays,
            names,
            transfers,
        }
    }

    /// The tree with every stay's leaf, reserving what `reservations` gives it (the others
    /// nothing), derived nodes set.
    pub fn tree(&self, d: &Decisions, reservations: &[(usize, Bandwidth)]) -> Tree {
        let mut host = self.host.clone();
        for (k, &s) in self.stays.iter().enumerate() {
            let mut vm: Vm = self.plan.vms[d.stays[s].vm].vm.clone();
            vm.name = self.names[k].clone();
            let r = (reservations.iter())
                .find(|(o, _)| *o == s)
                .map_or(Bandwidth::ZERO, |(_, r)| *r);
            for v in &mut vm.vnics {
                v.reservation = r;
                // A limit below the reservation in force would be refused; placement admitted it.
                v.limit = v.limit.map(|l| l.max(r));
            }
            host.vms.push(vm);
        }
        for &x in &self.transfers {
            host.vms.push(Vm {
                name: format!("vmotion~{x}"),
                vnics: vec![teamster_core::placement::Vnic {
                    pool: super::scenario::MIGRATION_CLASS.into(),
                    reservation: Bandwidth::ZERO,
                    shares: teamster_core::ioc::Shares::NORMAL,
                    limit: None,
                }],
            });
        }
        host.tree_with(&[])
            .expect("the host's pools hold every VM placed there")
    }

    /// Stay `k`'s team port ID and MAC: its VM's, or for a VM back on a host it left, the
    /// host's own for that stay (a port of its own there: both are unique on the host).
    pub fn port(&self, d: &Decisions, k: usize) -> (u32, teamster_core::wire::MacAddr) {
        let s = self.stays[k];
        let v = &self.plan.vms[d.stays[s].vm];
        if self.names[k] == v.vm.name {
            return (v.id, v.mac);
        }
        let b = (s as u32).to_be_bytes();
        let mac = teamster_core::wire::MacAddr([0x02, 0x58, b[0], b[1], b[2], b[3]]);
        (super::plan::FIRST_STAY_ID | s as u32, mac)
    }

    /// Migration stream `x` (an index into [`Decisions::transfers`])'s leaf in `tree`.
    pub fn transfer_leaf(&self, tree: &Tree, x: usize) -> NodeId {
        tree.find(&format!("vmotion~{x}#0")).expect("every transfer has a leaf")
    }

    /// Stay `k` (of [`HostStays::stays`])'s leaf in `tree`.
    pub fn leaf(&self, tree: &Tree, k: usize) -> NodeId {
        tree.find(&format!("{}#0", self.names[k]))
            .expect("every stay has a leaf")
    }
}
