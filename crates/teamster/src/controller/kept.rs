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
//! every VM, and the VMs (and MACs) that hosts still hold after they left them, so a power-on
//! does not read every host's departing set.
//!
//! Hosts' time-dependent marks (silent, held down: `ClusterState::marks`) are set by the state
//! on the hosts that need it ([`Kept::to_mark`]): those whose records changed since the view was
//! marked, and those whose marks fall due by time alone (a host heard goes silent one host
//! timeout after its last report; a host held down opens one host timeout after it came back),
//! kept in order of that time. So a question marks what changed, not every host; only a view
//! built from nothing, a change of the timeouts or of when the controller began to listen, or a
//! question about an earlier time than the last, marks them all. Reports taken in place change
//! a host's record (its time), so the next question looks at each host heard since the last:
//! in proportion to the reports, each looked at once.
//!
//! A view that cannot be brought in step (a state that holds a VM on a host it does not have)
//! is built from nothing, which then names what is wrong. A test holds the kept view to the one
//! built from nothing after every kind of change.

use super::inventory::{build_host, vm_of, HostRecord, VmRecord};
use imbl::ordmap::DiffItem;
use std::collections::{BTreeMap, BTreeSet};
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
    /// The hosts that still hold each VM that left them (their departing sets).
    departing: imbl::HashMap<String, imbl::OrdSet<String>>,
    /// The hosts and VMs (powered off there) still holding each MAC.
    departing_macs: imbl::HashMap<MacAddr, imbl::OrdSet<(String, String)>>,
    /// Hosts whose records changed since the view was last marked.
    changed: imbl::OrdSet<String>,
    /// When each host's marks next fall due by time alone, and the hosts in order of it.
    due_of: imbl::HashMap<String, u64>,
    due: imbl::OrdSet<(u64, String)>,
    /// What the marks were last set with (see [`Kept::to_mark`]), and when.
    marked: Option<(MarkedWith, u64)>,
}

/// What every host's marks depend on besides its record and the time: the host timeout, the
/// longer timeout hosts were given before, and when the controller began to listen.
pub type MarkedWith = (u64, u64, u64);

impl Kept {
    /// The view of `s` built from nothing.
    pub fn build(s: Source) -> Result<Kept, String> {
        let mut k = Kept {
            quotas: s.quotas.clone(),
            ..Kept::default()
        };
        for (name, h) in s.hosts {
            add_host(&mut k.cluster, name, h)?;
            k.index_departing(name, None, Some(h));
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
        let hosts = self.hosts.clone();
        for d in hosts.diff(s.hosts) {
            match d {
                DiffItem::Remove(name, old) => {
                    let left = self.cluster.remove_host(name)?;
                    if let Some(vm) = left.first() {
                        return Err(format!("host {name} went with VM {} on it", vm.name));
                    }
                    self.index_departing(name, Some(old), None);
                    self.set_due(name, None);
                }
                DiffItem::Update {
                    old: (name, old),
                    new: (_, new),
                } => {
                    if old.shape != new.shape {
                        let vms = self.cluster.remove_host(name)?;
                        add_host(&mut self.cluster, name, new)?;
                        for vm in vms {
                            self.cluster.assume(vm, name)?;
                        }
                    }
                    self.index_departing(name, Some(old), Some(new));
                    self.changed.insert(name.clone());
                }
                DiffItem::Add(name, new) => {
                    add_host(&mut self.cluster, name, new)?;
                    self.index_departing(name, None, Some(new));
                    self.changed.insert(name.clone());
                }
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

    /// Host `host`'s departing VMs and MACs, as its record was (`old`) and is (`new`), in the
    /// indexes.
    fn index_departing(&mut self, host: &str, old: Option<&HostRecord>, new: Option<&HostRecord>) {
        static NO_VMS: BTreeSet<String> = BTreeSet::new();
        static NO_MACS: BTreeMap<String, String> = BTreeMap::new();
        let (old_vms, new_vms) = (
            old.map_or(&NO_VMS, |r| &r.departing),
            new.map_or(&NO_VMS, |r| &r.departing),
        );
        if old_vms != new_vms {
            for vm in old_vms.difference(new_vms) {
                if let Some(hosts) = self.departing.get_mut(vm) {
                    hosts.remove(host);
                    if hosts.is_empty() {
                        self.departing.remove(vm);
                    }
                }
            }
            for vm in new_vms.difference(old_vms) {
                self.departing.entry(vm.clone()).or_default().insert(host.to_string());
            }
        }
        let (old_macs, new_macs) = (
            old.map_or(&NO_MACS, |r| &r.departing_macs),
            new.map_or(&NO_MACS, |r| &r.departing_macs),
        );
        if old_macs != new_macs {
            let held = |m: &BTreeMap<String, String>| -> Vec<(MacAddr, String)> {
                (m.iter())
                    .filter_map(|(vm, mac)| Some((mac.parse().ok()?, vm.clone())))
                    .collect()
            };
            for (mac, vm) in held(old_macs) {
                if let Some(holders) = self.departing_macs.get_mut(&mac) {
                    holders.remove(&(host.to_string(), vm));
                    if holders.is_empty() {
                        self.departing_macs.remove(&mac);
                    }
                }
            }
            for (mac, vm) in held(new_macs) {
                self.departing_macs
                    .entry(mac)
                    .or_default()
                    .insert((host.to_string(), vm));
            }
        }
    }

    /// The hosts whose departing sets hold VM `name`, in name order.
    pub fn holding(&self, name: &str) -> impl Iterator<Item = &String> {
        self.departing.get(name).into_iter().flatten()
    }

    /// The hosts and VMs powered off there still holding MAC `mac`, in host order.
    pub fn holding_mac(&self, mac: MacAddr) -> impl Iterator<Item = &(String, String)> {
        self.departing_macs.get(&mac).into_iter().flatten()
    }

    /// The hosts whose marks are to be set at `now_s` with `with` (see the module
    /// documentation): every host if the view was never marked, was marked with other
    /// timeouts or at a later time; else those changed since and those due by now. Taken: the
    /// caller sets their marks and [`Kept::set_due`].
    pub fn to_mark(&mut self, with: MarkedWith, now_s: u64) -> Vec<String> {
        let changed = std::mem::take(&mut self.changed);
        let again = self.marked.is_none_or(|(w, at)| w != with || now_s < at);
        self.marked = Some((with, now_s));
        if again {
            self.due = Default::default();
            self.due_of = Default::default();
            return self.hosts.keys().cloned().collect();
        }
        let mut names: BTreeSet<String> = changed.into_iter().collect();
        while let Some((t, name)) = self.due.get_min().cloned().filter(|(t, _)| *t <= now_s) {
            self.due.remove(&(t, name.clone()));
            self.due_of.remove(&name);
            names.insert(name);
        }
        names.into_iter().collect()
    }

    /// Host `host`'s marks next fall due at `due` (None: not by time alone).
    pub fn set_due(&mut self, host: &str, due: Option<u64>) {
        if let Some(was) = self.due_of.remove(host) {
            self.due.remove(&(was, host.to_string()));
        }
        if let Some(t) = due {
            self.due_of.insert(host.to_string(), t);
            self.due.insert((t, host.to_string()));
        }
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
