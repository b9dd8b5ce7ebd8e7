//! Remediation: when a reservation grows or a host loses capacity and a host no longer admits
//! its VMs, migrations that make every host admit its VMs again.
//!
//! Model. A host *violates* when its VMs no longer pass admission there. For each violating
//! host, in name order, VMs move out until it admits the rest: first the one VM, of the
//! smallest reservation, whose leaving alone is enough and which another host admits; failing
//! that, the VM of the largest reservation another host admits (the fewest moves), and again.
//! Each destination is chosen as initial placement chooses, among hosts that admit the VM with
//! everything already there, so a move never breaks another host. A host that cannot be
//! mended is a [`Fault`] naming it and why; the moves planned for other hosts stand.

use super::{Cluster, Vm};
use crate::units::Bandwidth;

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
    /// The hosts whose VMs no longer pass admission there, in name order.
    pub fn violations(&self) -> Vec<String> {
        (self.hosts.values())
            .filter(|h| h.headroom_with(&[]).is_err())
            .map(|h| h.name.clone())
            .collect()
    }

    /// Changes vNIC `vnic` of VM `vm`'s reservation to `reservation`; refused (nothing
    /// changed) if the VM or vNIC is unknown or a pool's cluster quota would break. The host
    /// may then violate: [`Cluster::remediate`] mends it.
    pub fn set_reservation(&mut self, vm: &str, vnic: usize, reservation: Bandwidth) -> Result<(), String> {
        let host = self.host_of(vm).ok_or_else(|| format!("no VM {vm}"))?.to_string();
        let h = self.hosts.get_mut(&host).expect("found");
        let i = h.vms.iter().position(|v| v.name == vm).expect("on its host");
        let mut was = h.vms.remove(i);
        let Some(n) = was.vnics.get_mut(vnic) else {
            h.vms.insert(i, was);
            return Err(format!("VM {vm} has no vNIC {vnic}"));
        };
        let old = std::mem::replace(&mut n.reservation, reservation);
        if let Some(why) = self.quota_breach(&was) {
            was.vnics[vnic].reservation = old;
            self.hosts.get_mut(&host).expect("found").vms.insert(i, was);
            return Err(why);
        }
        self.hosts.get_mut(&host).expect("found").vms.insert(i, was);
        Ok(())
    }

    /// Host `host`'s admission capacity is now `capacity` (an uplink lost or added).
    pub fn set_capacity(&mut self, host: &str, capacity: Bandwidth) -> Result<(), String> {
        let h = self.hosts.get_mut(host).ok_or_else(|| format!("no host {host}"))?;
        h.capacity = capacity;
        Ok(())
    }

    /// Plans and applies migrations by the rule of the module documentation.
    pub fn remediate(&mut self) -> Remedy {
        let mut remedy = Remedy::default();
        for host in self.violations() {
            while self.hosts[&host].headroom_with(&[]).is_err() {
                match self.pick(&host) {
                    Some((vm, to)) => {
                        let h = self.hosts.get_mut(&host).expect("violating host");
                        let i = h.vms.iter().position(|v| v.name == vm).expect("on it");
                        let moved = h.vms.remove(i);
                        remedy.migrations.push(Migration {
                            vm,
                            from: host.clone(),
                            to: to.clone(),
                            reservation: moved.reservation(),
                        });
                        self.hosts.get_mut(&to).expect("destination").vms.push(moved);
                    }
                    None => {
                        let why = self.hosts[&host].headroom_with(&[]).err().unwrap_or_default();
                        remedy.faults.push(Fault {
                            host: host.clone(),
                            why: format!("no VM can move to a host that admits it; {why}"),
                        });
                        break;
                    }
                }
            }
        }
        remedy
    }

    /// The VM to move off violating host `host`, and where.
    fn pick(&self, host: &str) -> Option<(String, String)> {
        let h = &self.hosts[host];
        let destination = |vm: &Vm| -> Option<String> {
            (self.hosts.values())
                .filter(|o| o.name != host)
                .filter_map(|o| Some((o.headroom_with(&[vm]).ok()?, o.vms.len(), &o.name)))
                .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(b.2.cmp(a.2)))
                .map(|(_, _, name)| name.clone())
        };
        let mut by_size: Vec<&Vm> = h.vms.iter().collect();
        by_size.sort_by(|a, b| a.reservation().cmp(&b.reservation()).then(a.name.cmp(&b.name)));
        let enough = |vm: &Vm| {
            let mut rest = h.clone();
            rest.vms.retain(|v| v.name != vm.name);
            rest.headroom_with(&[]).is_ok()
        };
        let alone = by_size
            .iter()
            .filter(|vm| enough(vm))
            .find_map(|vm| Some((vm.name.clone(), destination(vm)?)));
        alone.or_else(|| {
            (by_size.iter().rev())
                .filter(|vm| vm.reservation() > Bandwidth::ZERO)
                .find_map(|vm| Some((vm.name.clone(), destination(vm)?)))
        })
    }
}
