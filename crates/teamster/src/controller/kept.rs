//! The placement view of the state, kept in step with it from change to change.
//!
//! Model. Every change asks placement ([`super::state::ClusterState::cluster`]): which host has the most
//! headroom, which hosts no longer admit their VMs. Built from nothing, that view costs in
//! proportion to the cluster (every host's tree, every VM). So the state keeps the view it was
//! last asked for ([`Kept`]), with the hosts, VMs and quotas it was built from; both the state's
//! maps and the view are persistent (structurally shared), so keeping them is a few pointer
//! copies. The next question brings the kept view in step with the state by the difference of
//! the maps, which skips what the two share: a VM gone or changed is taken off its host, a
//! host whose shape changed is built again with its VMs, a VM new or changed is put on its
//! host. What changed since is all that is walked, and each host's admission is computed again
//! only if the host changed ([`teamster_core::placement::Cluster::standing`]).
//!
//! The view also indexes VMs by MAC, so a power-on's check that its MAC is free does not read
//! every VM. Hosts' time-dependent marks (silent, held down) are set on every question, in one
//! pass over the hosts, by the state (`ClusterState::placement`, which keeps the view, and
//! `ClusterState::cluster`, which does not). A view that cannot be brought in step (a state
//! that holds a VM on a host it does not have) is built from nothing, which then names what is
//! wrong. A test holds the kept view to the one built from nothing after every kind of change.

use super::inventory::{build_host, vm_of, HostRecord, VmRecord};
use imbl::ordmap::DiffItem;
use std::collections::BTreeMap;
use teamster_core::placement::Cluster;
use teamster_core::units::Bandwidth;
use teamster_core::wire::MacAddr;

/// The hosts, VMs and quotas a view is built from (the state's).
pub struct Source<'a> {
    pub hosts: &'a imbl::OrdMap<String, HostRecord>,
    pub vms: &'a imbl::OrdMap<String, VmRecord>,
    pub quotas: &'a BTreeMap<String, Bandwidth>,
}

/// A placement view, and what it was built from.
#[derive(Debug, Clone, Default)]
pub struct Kept {
    hosts: imbl::OrdMap<String, HostRecord>,
    vms: imbl::OrdMap<String, VmRecord>,
    quotas: BTreeMap<String, Bandwidth>,
    cluster: Cluster,
    /// The VMs by MAC.
    macs: imbl::HashMap<MacAddr, String>,
}

impl Kept {
    /// The view of `s` built from nothing.
    pub fn build(s: Source) -> Result<Kept, String> {
        let mut k = Kept {
            quotas: s.quotas.clone(),
            ..Kept::default()
        };
        for (name, h) in s.hosts {
            add_host(&mut k.cluster, name, h)?;
        }
        for (pool, q) in s.quotas {
            k.cluster.set_quota(pool, *q);
        }
        for (name, v) in s.vms {
            k.cluster.assume(vm_of(name, v), &v.host)?;
            if let Some(mac) = mac_of(v) {
                k.macs.insert(mac, name.clone());
            }
        }
        k.hosts = s.hosts.clone();
        k.vms = s.vms.clone();
        Ok(k)
    }

    /// Brings the view in step with `s` (see the module documentation); an error if it cannot
    /// (the caller builds it anew).
    pub fn follow(&mut self, s: Source) -> Result<(), String> {
        if self.quotas.keys().any(|p| !s.quotas.contains_key(p)) {
            return Err("a quota was removed".into());
        }
        let was = self.vms.clone();
        let vm_diff: Vec<_> = was.diff(s.vms).collect();
        for d in &vm_diff {
            let (name, old) = match d {
                DiffItem::Remove(name, old) => (name, old),
                DiffItem::Update {
                    old: (name, old),
                    new: (_, new),
                } if placed(old) != placed(new) => (name, old),
                _ => continue,
            };
            self.cluster
                .remove_vm(name)
                .ok_or_else(|| format!("VM {name} is not in the view"))?;
            self.forget_mac(name, old);
        }
        for d in self.hosts.diff(s.hosts) {
            match d {
                DiffItem::Remove(name, _) => {
                    let left = self.cluster.remove_host(name)?;
                    if let Some(vm) = left.first() {
                        return Err(format!("host {name} went with VM {} on it", vm.name));
                    }
                }
                DiffItem::Update {
                    old: (name, old),
                    new: (_, new),
                } if old.shape != new.shape => {
                    let vms = self.cluster.remove_host(name)?;
                    add_host(&mut self.cluster, name, new)?;
                    for vm in vms {
                        self.cluster.assume(vm, name)?;
                    }
                }
                DiffItem::Add(name, new) => add_host(&mut self.cluster, name, new)?,
                _ => {}
            }
        }
        for d in &vm_diff {
            let (name, new, old) = match d {
                DiffItem::Add(name, new) => (name, new, None),
                DiffItem::Update {
                    old: (name, old),
                    new: (_, new),
                } => (name, new, Some(old)),
                DiffItem::Remove(..) => continue,
            };
            if old.is_none_or(|old| placed(old) != placed(new)) {
                self.cluster.assume(vm_of(name, new), &new.host)?;
            }
            if let Some(old) = old {
                self.forget_mac(name, old);
            }
            if let Some(mac) = mac_of(new) {
                self.macs.insert(mac, (*name).clone());
            }
        }
        if self.quotas != *s.quotas {
            for (pool, q) in s.quotas {
                self.cluster.set_quota(pool, *q);
            }
            self.quotas = s.quotas.clone();
        }
        self.hosts = s.hosts.clone();
        self.vms = s.vms.clone();
        Ok(())
    }

    /// Drops VM `name`'s MAC (of its record `v`) from the index, if it is the VM indexed there.
    fn forget_mac(&mut self, name: &String, v: &VmRecord) {
        if let Some(mac) = mac_of(v).filter(|m| self.macs.get(m) == Some(name)) {
            self.macs.remove(&mac);
        }
    }

    /// The view: marks as last set.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The view, to set marks on.
    pub fn cluster_mut(&mut self) -> &mut Cluster {
        &mut self.cluster
    }

    /// The VM whose MAC is `mac`, if any.
    pub fn owner_of(&self, mac: MacAddr) -> Option<&String> {
        self.macs.get(&mac)
    }
}

/// Adds host `name` of record `h` to `c`, without VMs.
fn add_host(c: &mut Cluster, name: &str, h: &HostRecord) -> Result<(), String> {
    let (tree, cap) = build_host(&h.shape).map_err(|e| format!("host {name}: {e}"))?;
    let capacity = (h.shape.uplinks.iter().filter(|u| u.up))
        .map(|u| u.capacity)
        .min()
        .unwrap_or(Bandwidth::ZERO);
    c.add_host(name, tree, capacity, cap)?;
    for d in &h.shape.derived {
        c.derive(name, d).map_err(|e| format!("host {name}: derived: {e}"))?;
    }
    Ok(())
}

/// What of a VM's record its placement depends on.
fn placed(
    v: &VmRecord,
) -> (
    &String,
    &String,
    Bandwidth,
    teamster_core::ioc::Shares,
    Option<Bandwidth>,
) {
    (&v.host, &v.pool, v.reservation, v.shares, v.limit)
}

fn mac_of(v: &VmRecord) -> Option<MacAddr> {
    v.mac.as_deref()?.parse().ok()
}

#[cfg(test)]
mod tests;
