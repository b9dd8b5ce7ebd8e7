//! Remediation: when a reservation grows or a host loses capacity and a host no longer admits
//! its VMs, migrations that make every host admit its VMs again.
//!
//! Model. A host *violates* when its VMs no longer pass admission there; each VM with a
//! reservation on it is then a violated reservation (its guarantee cannot be kept). For each
//! violating host, in name order, remediation looks for the set of VMs to move out with the
//! fewest VMs, then the least reservation moved, then the first names: a set such that the rest
//! pass admission and each VM of it (largest first) goes to a host that admits it with
//! everything already there, chosen as initial placement chooses. So a move never breaks
//! another host. Sets are tried by size, at most [`SEARCH_BUDGET`] in all for a host; past
//! that, VMs leave one by one by a greedy rule (the smallest whose leaving alone is enough,
//! else the largest that can go), kept only if that mends the host. A host that cannot be
//! mended is a [`Fault`] naming it and what is short, and none of its VMs move; the moves
//! planned for other hosts stand.

use super::{Cluster, Host, Vm};
use crate::units::Bandwidth;
use std::sync::Arc;

/// One migration of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    pub vm: String,
    pub from: String,
    pub to: String,
    /// The VM's reservations in all: the bandwidth that moves with it.
    pub reservation: Bandwidth,
}

/// A host remediation could not mend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub host: String,
    pub why: String,
}

/// What remediation did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Remedy {
    pub migrations: Vec<Migration>,
    pub faults: Vec<Fault>,
}

impl Cluster {
    /// Changes vNIC `vnic` of VM `vm`'s reservation to `reservation`; refused (nothing
    /// changed) if the VM or vNIC is unknown, the reservation is above the vNIC's limit or a
    /// pool's cluster quota would break. The host
    /// may then violate: [`Cluster::remediate`] mends it.
    pub fn set_reservation(&mut self, vm: &str, vnic: usize, reservation: Bandwidth) -> Result<(), String> {
        let host = self.host_of(vm).ok_or_else(|| format!("no VM {vm}"))?.to_string();
        let was = self.hosts[&host]
            .vms
            .iter()
            .find(|v| v.name == vm)
            .expect("on its host");
        let Some(n) = was.vnics.get(vnic) else {
            return Err(format!("VM {vm} has no vNIC {vnic}"));
        };
        if let Some(limit) = n.limit.filter(|l| *l < reservation) {
            return Err(format!("VM {vm}: reservation {reservation} is above its limit {limit}"));
        }
        // The quota is checked with the VM's other reservations as they are, this one as asked.
        let mut asked = was.clone();
        asked.vnics[vnic].reservation = reservation;
        let old = self.take(vm, &host).expect("on its host");
        if let Some(why) = self.quota_breach(&asked) {
            self.put(old, &host);
            return Err(why);
        }
        self.put(asked, &host);
        Ok(())
    }

    /// Host `host`'s admission capacity is now `capacity` (an uplink lost or added).
    pub fn set_capacity(&mut self, host: &str, capacity: Bandwidth) -> Result<(), String> {
        let h = self.host_mut(host).ok_or_else(|| format!("no host {host}"))?;
        h.capacity = capacity;
        Ok(())
    }

    /// Moves `vm` to host `to` by hand, if `to` admits it with everything there; refused (nothing
    /// changed) otherwise, or if the VM or host is unknown or the VM is there already.
    pub fn migrate(&mut self, vm: &str, to: &str) -> Result<Migration, String> {
        let from = self.host_of(vm).ok_or_else(|| format!("no VM {vm}"))?.to_string();
        let dest = self.hosts.get(to).ok_or_else(|| format!("no host {to}"))?;
        if from == to {
            return Err(format!("VM {vm} is on {to} already"));
        }
        let v = self.hosts[&from]
            .vms
            .iter()
            .find(|v| v.name == vm)
            .expect("on its host");
        dest.admits_kept(&[v])
            .map_err(|e| format!("{to} does not admit {vm}: {e}"))?;
        Ok(self.move_vm(&from, vm, to))
    }

    /// Takes VM `vm` out of the cluster (powered off, or lost with a host), giving it back.
    pub fn remove_vm(&mut self, vm: &str) -> Option<Vm> {
        let host = self.located.get(vm)?.clone();
        Some(self.take(vm, &host).expect("located VMs are on their host"))
    }

    /// Takes host `host` out of the cluster (it failed), giving back the VMs that were on it.
    pub fn remove_host(&mut self, host: &str) -> Result<Vec<Vm>, String> {
        let h = self.hosts.remove(host).ok_or_else(|| format!("no host {host}"))?;
        self.ranking.unrank(host);
        for v in &h.vms {
            self.located.remove(&v.name);
            self.pool_vm(v, -1);
        }
        Ok(Arc::unwrap_or_clone(h).vms)
    }

    /// Reservations that cannot be kept: the VMs with a reservation on violating hosts.
    pub fn violated_reservations(&self) -> usize {
        (self.violations().iter())
            .flat_map(|h| &self.hosts[h].vms)
            .filter(|v| v.reservation() > Bandwidth::ZERO)
            .count()
    }

    /// Plans and applies migrations by the rule of the module documentation.
    pub fn remediate(&mut self) -> Remedy {
        self.settle();
        let mut remedy = Remedy::default();
        for host in self.violations() {
            // An unavailable host may still be forwarding for its VMs: moving one would make it
            // active twice. Its violation stands, as a fault.
            if let Some(why) = &self.hosts[&host].unavailable {
                remedy.faults.push(Fault {
                    host: host.clone(),
                    why: format!("its VMs are not moved while it is unavailable ({why})"),
                });
                continue;
            }
            let plan = match self.fewest_moves(&host) {
                Search::Found(plan) => Some(plan),
                Search::Impossible => None,
                Search::OverBudget => self.greedy_plan(&host),
            };
            let Some(plan) = plan else {
                let why = self.hosts[&host].standing().as_ref().err().cloned().unwrap_or_default();
                remedy.faults.push(Fault {
                    host: host.clone(),
                    why: format!("no set of VMs can move to hosts that admit them; {why}"),
                });
                continue;
            };
            for (vm, to) in plan {
                remedy.migrations.push(self.move_vm(&host, &vm, &to));
            }
        }
        remedy
    }

    /// Moves `vm` from `from` to `to` as planned.
    fn move_vm(&mut self, from: &str, vm: &str, to: &str) -> Migration {
        let moved = self.take(vm, from).expect("on it");
        let m = Migration {
            vm: vm.to_string(),
            from: from.to_string(),
            to: to.to_string(),
            reservation: moved.reservation(),
        };
        self.put(moved, to);
        m
    }

    /// The smallest set of VMs whose leaving mends `host` and which other hosts take (see the
    /// module documentation), with destinations.
    fn fewest_moves(&self, host: &str) -> Search {
        let h: &Host = &self.hosts[host];
        let movable: Vec<&Vm> = (h.vms.iter()).filter(|v| v.reservation() > Bandwidth::ZERO).collect();
        let mut budget = SEARCH_BUDGET;
        for k in 1..=movable.len() {
            let n = binomial(movable.len(), k);
            if n > budget {
                return Search::OverBudget;
            }
            budget -= n;
            let mut sets: Vec<(u64, Vec<String>, Vec<&Vm>)> = Vec::new();
            for_each_subset(movable.len(), k, &mut |pick| {
                let set: Vec<&Vm> = pick.iter().map(|&i| movable[i]).collect();
                let mut rest = h.trial();
                rest.vms.retain(|v| !set.iter().any(|s| s.name == v.name));
                if rest.headroom_with(&[]).is_ok() {
                    let moved = set.iter().fold(0u64, |a, v| a.saturating_add(v.reservation().bps()));
                    let mut names: Vec<String> = set.iter().map(|v| v.name.clone()).collect();
                    names.sort();
                    sets.push((moved, names, set));
                }
            });
            sets.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
            if let Some(plan) = sets.iter().find_map(|(_, _, set)| self.destinations(host, set)) {
                return Search::Found(plan);
            }
        }
        Search::Impossible
    }

    /// Past the search's budget: VMs leave `host` one by one by the greedy rule (the smallest
    /// whose leaving alone is enough, else the largest that can go), tried on a copy; the plan
    /// only if it mends the host, so a host that cannot be mended is not emptied for nothing.
    fn greedy_plan(&self, host: &str) -> Option<Vec<(String, String)>> {
        let mut trial = self.clone();
        let mut plan = Vec::new();
        while trial.hosts[host].standing().is_err() {
            let (vm, to) = trial.one_greedy_move(host)?;
            trial.move_vm(host, &vm, &to);
            plan.push((vm, to));
        }
        Some(plan)
    }

    /// One VM to move off `host` by the greedy rule, with its destination.
    fn one_greedy_move(&self, host: &str) -> Option<(String, String)> {
        let h: &Host = &self.hosts[host];
        let mut by_size: Vec<&Vm> = h.vms.iter().filter(|v| v.reservation() > Bandwidth::ZERO).collect();
        by_size.sort_by(|a, b| a.reservation().cmp(&b.reservation()).then(a.name.cmp(&b.name)));
        let enough = |vm: &Vm| {
            let mut rest = h.trial();
            rest.vms.retain(|v| v.name != vm.name);
            rest.headroom_with(&[]).is_ok()
        };
        let one = |vm: &&Vm| self.destinations(host, &[vm]).and_then(|p| p.into_iter().next());
        let alone = by_size.iter().filter(|vm| enough(vm)).find_map(one);
        alone.or_else(|| by_size.iter().rev().find_map(one))
    }

    /// A destination for each of `vms` leaving `from`, largest first, each where initial
    /// placement would put it with the ones before it already there; None if one has none.
    fn destinations(&self, from: &str, vms: &[&Vm]) -> Option<Vec<(String, String)>> {
        let mut order = vms.to_vec();
        order.sort_by(|a, b| b.reservation().cmp(&a.reservation()).then(a.name.cmp(&b.name)));
        let mut arriving: Vec<(&str, &Vm)> = Vec::new();
        let mut plan = Vec::new();
        for vm in order {
            let (to, _) = self.best_for(vm, &arriving, Some(from)).best?;
            let to = self.hosts[&to].name.as_str();
            arriving.push((to, vm));
            plan.push((vm.name.clone(), to.to_string()));
        }
        Some(plan)
    }
}

/// How many sets remediation tries for one host before it moves VMs greedily instead.
pub const SEARCH_BUDGET: u64 = 5_000;

/// What the search for the fewest moves found.
enum Search {
    Found(Vec<(String, String)>),
    /// Every set was tried: none mends the host with destinations that admit its VMs.
    Impossible,
    OverBudget,
}

/// n choose k, saturating.
pub(super) fn binomial(n: usize, k: usize) -> u64 {
    let mut c: u64 = 1;
    for i in 0..k as u64 {
        c = c.saturating_mul(n as u64 - i) / (i + 1);
    }
    c
}

/// Calls `f` with every `k`-subset of `0..n` as ascending indices, in lexicographic order.
pub(super) fn for_each_subset(n: usize, k: usize, f: &mut dyn FnMut(&[usize])) {
    let mut pick: Vec<usize> = (0..k).collect();
    if k > n {
        return;
    }
    loop {
        f(&pick);
        // The rightmost index that can still advance.
        let Some(i) = (0..k).rev().find(|&i| pick[i] < n - k + i) else {
            return;
        };
        pick[i] += 1;
        for j in i + 1..k {
            pick[j] = pick[j - 1] + 1;
        }
    }
}
