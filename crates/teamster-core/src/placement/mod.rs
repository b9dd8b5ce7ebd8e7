//! Bandwidth-aware placement: which host a VM goes to so that every network reservation holds
//! (what DRS does for NetIOC reservations).
//!
//! Model. A cluster is hosts, VMs and pools. A host has a NetIOC tree (its traffic classes and
//! pools under a root standing for an uplink), the capacity admission control counts against
//! (its smallest uplink, as the live switch admits), and its reservation cap (75% by default).
//! A VM has vNICs, each with a reservation under a named pool. A VM is *admitted* on a host
//! when its vNICs, added as leaves under their pools in a copy of the host's tree, pass
//! [`crate::ioc::admit`] there, and every pool with a cluster-wide quota still holds: the
//! reservations of its vNICs on all hosts total at most the quota. A host without one of the
//! VM's pools does not admit it.
//!
//! A node may be *derived* on a host: its reservation there is what its children reserve (a
//! pool with a cluster-wide quota, consumed on each host by the vNICs there, as vSphere's
//! network resource pools are); admission then checks it against its parent as any other.
//!
//! Initial placement ([`Cluster::place`]): among the hosts that admit the VM, the one with the
//! most reservation headroom left once it is there, ties broken by fewer VMs, then by name; so
//! VMs balance by reservation. Headroom is the least, over the VM's pools, of what more the pool
//! could reserve: its own free reservation, or for a derived pool what its parent could still
//! give, and so up to the root's share of the capacity. A VM no host admits is refused with
//! each host's reason. Deterministic: the order is total. The hosts are kept ranked in that
//! order per pool ([`ranking`]), so a choice reads the first few, not every host. A host marked unavailable ([`Cluster::set_unavailable`]: it
//! stopped reporting) keeps its VMs but receives none, by placement, by hand or by
//! remediation; a host marked closed ([`Cluster::set_closed`]: heard again after a failure,
//! held down) receives none either, but its VMs may be moved off it.

mod ranking;
mod remediate;
mod standing;
pub use remediate::{Fault, Migration, Remedy};

use crate::ioc::admission::{admit, quota};
use crate::ioc::{NodeId, NodeSpec, ReservationCap, Shares, Tree};
use crate::units::Bandwidth;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One vNIC of a VM: its reservation (and shares, limit) under a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vnic {
    pub pool: String,
    pub reservation: Bandwidth,
    pub shares: Shares,
    pub limit: Option<Bandwidth>,
}

/// A VM as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vm {
    pub name: String,
    pub vnics: Vec<Vnic>,
}

impl Vm {
    /// The VM's reservations in all.
    pub fn reservation(&self) -> Bandwidth {
        Bandwidth::from_bps(self.vnics.iter().fold(0, |a, v| a.saturating_add(v.reservation.bps())))
    }
}

/// A host: its NetIOC tree without VMs, admission capacity and cap, and the VMs on it.
#[derive(Debug, Clone)]
pub struct Host {
    pub name: String,
    pub tree: Tree,
    pub capacity: Bandwidth,
    pub cap: ReservationCap,
    pub vms: Vec<Vm>,
    /// Nodes whose reservation is their children's total (see the module documentation).
    pub derived: Vec<NodeId>,
    /// Why the host takes no VMs now (it stopped reporting, say), or None: it takes them. Its
    /// VMs stay where they are; placement and remediation send it none.
    pub unavailable: Option<String>,
    /// Why the host takes no new VMs though it is heard (held down after a failure), or None.
    /// Unlike an unavailable host, it forwards only for the VMs it has, so remediation may move
    /// them off it.
    pub closed: Option<String>,
    /// Its standing, once asked: see [`standing`].
    kept: standing::Kept,
}

impl Host {
    /// The host's tree with its VMs' and `extra` VMs' vNICs added under their pools (leaf
    /// `{vm}#{i}` for vNIC `i`) and derived nodes set, or why not.
    pub fn tree_with(&self, extra: &[&Vm]) -> Result<Tree, String> {
        let mut tree = self.tree.clone();
        for vm in self.vms.iter().chain(extra.iter().copied()) {
            for (i, v) in vm.vnics.iter().enumerate() {
                // A pool is one of the host's own nodes (not a VM's leaf added before).
                let pool = (self.tree)
                    .find(&v.pool)
                    .ok_or_else(|| format!("no pool `{}` on host {}", v.pool, self.name))?;
                let spec = NodeSpec {
                    name: format!("{}#{i}", vm.name),
                    reservation: v.reservation,
                    shares: v.shares,
                    limit: v.limit,
                };
                tree.add(pool, spec).map_err(|e| e.to_string())?;
            }
        }
        // Children before parents: they have larger indices.
        let mut derived = self.derived.clone();
        derived.sort_unstable_by(|a, b| b.cmp(a));
        for id in derived {
            let node = tree.node(id);
            let held = (node.children.iter()).fold(0u64, |a, c| a.saturating_add(tree.node(*c).spec.reservation.bps()));
            let spec = NodeSpec {
                reservation: Bandwidth::from_bps(held),
                ..node.spec.clone()
            };
            tree.set_controls(id, spec).map_err(|e| e.to_string())?;
        }
        Ok(tree)
    }

    /// The first node at or above `id` in `tree` whose reservation is its own (not derived):
    /// where a leaf added under `id` counts against a quota.
    fn top(&self, tree: &Tree, id: NodeId) -> NodeId {
        self.climb(tree, id, |_| ())
    }

    /// [`Host::top`], calling `on_derived` with each derived node passed on the way up.
    fn climb(&self, tree: &Tree, id: NodeId, mut on_derived: impl FnMut(NodeId)) -> NodeId {
        let mut at = id;
        while let (Some(parent), true) = (tree.node(at).parent, self.derived.contains(&at)) {
            on_derived(at);
            at = parent;
        }
        at
    }

    /// What the children of node `id` in `tree` reserve in all.
    fn reserved_under(&self, tree: &Tree, id: NodeId) -> u64 {
        (tree.node(id).children.iter()).fold(0u64, |a, c| a.saturating_add(tree.node(*c).spec.reservation.bps()))
    }

    /// The free reservation of node `id` in `tree`: what it may hand its children (the cap's
    /// share of the capacity at the root, its own reservation below) minus what they reserve.
    fn slack(&self, tree: &Tree, id: NodeId) -> u64 {
        // What admission holds the children to, to the bit: a VM fits here exactly when it
        // reserves no more than the slack ([`ranking`] relies on it).
        let (quota, _) = quota(tree, id, self.capacity, self.cap);
        quota.bps().saturating_sub(self.reserved_under(tree, id))
    }

    /// The headroom `vm` would leave here, or why this host does not take it (unavailable, or
    /// it fails admission).
    pub fn admits(&self, vm: &Vm) -> Result<Bandwidth, String> {
        match self.unavailable.as_ref().or(self.closed.as_ref()) {
            Some(why) => Err(why.clone()),
            None => self.headroom_with(&[vm]),
        }
    }

    /// What more may be reserved under node `id` of `tree`: its own free reservation if its
    /// reservation is its own; if it is derived (its reservation is its children's, so it grows
    /// with them), what its parent may still give, and so on up to the root, whose free share is
    /// the cap's part of the capacity. A derived node's own slack is always 0, so reading it
    /// would make every such host look full.
    fn room(&self, tree: &Tree, id: NodeId) -> u64 {
        self.slack(tree, self.top(tree, id))
    }

    /// The reservation headroom with `extra` placed: the least room (see `room`) of the pools
    /// of the VMs' vNICs (of the host's classes and pools, with no `extra`); or why the host
    /// does not admit them.
    pub fn headroom_with(&self, extra: &[&Vm]) -> Result<Bandwidth, String> {
        self.judged(extra).map(|(_, headroom)| headroom)
    }

    /// [`Host::headroom_with`], with the tree it was read from (the host's with its VMs and
    /// `extra`'s, derived nodes set).
    fn judged(&self, extra: &[&Vm]) -> Result<(Tree, Bandwidth), String> {
        let tree = self.tree_with(extra)?;
        admit(&tree, self.capacity, self.cap).map_err(|e| e.to_string())?;
        // The host's own nodes keep their ids in the tree with VMs (the vNICs come after).
        let pools: Vec<NodeId> = if extra.is_empty() {
            self.tree.ids().collect()
        } else {
            (extra.iter().flat_map(|vm| &vm.vnics))
                .filter_map(|v| self.tree.find(&v.pool))
                .collect()
        };
        let least = pools.into_iter().map(|p| self.room(&tree, p)).min().unwrap_or(0);
        Ok((tree, Bandwidth::from_bps(least)))
    }

    /// [`Host::admits`] for the VMs `extra`, read off the host's standing where it answers
    /// exactly.
    fn admits_kept(&self, extra: &[&Vm]) -> Result<Bandwidth, String> {
        match self.unavailable.as_ref().or(self.closed.as_ref()) {
            Some(why) => Err(why.clone()),
            None => self.headroom_kept(extra),
        }
    }

    /// Adds `vm` to the host's VMs, in name order (as a view built from a state lists them, so
    /// the first VM admission names is the same however the host came to hold them).
    fn push_vm(&mut self, vm: Vm) {
        let at = self.vms.partition_point(|v| v.name < vm.name);
        self.vms.insert(at, vm);
    }

    /// A copy of the host to try changes on, without its standing (which the changes would
    /// leave stale).
    fn trial(&self) -> Host {
        Host {
            kept: Default::default(),
            ..self.clone()
        }
    }
}

/// Where a VM went, and why the other hosts did not take it.
#[derive(Debug, Clone, PartialEq)]
pub struct Placed {
    pub host: String,
    /// The chosen host's reservation headroom with the VM on it.
    pub headroom: Bandwidth,
    /// The hosts placement looked at: each ranked above the chosen one that does not admit
    /// the VM (with why), each changed since the ranking was last settled, and the chosen one
    /// (with its headroom). It reads no others: none could leave more headroom (see
    /// [`ranking`]); hosts that take no VMs (marked, or over their admission) are not ranked,
    /// so not listed. A VM whose vNICs are under several pools, or that has none, is looked
    /// for on every host, and all are listed.
    pub considered: Vec<(String, Result<Bandwidth, String>)>,
}

/// A VM no host admits: each host's reason.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("VM {vm} fits on no host: {}", reasons.iter().map(|(h, r)| format!("{h}: {r}")).collect::<Vec<_>>().join("; "))]
pub struct Refused {
    pub vm: String,
    pub reasons: Vec<(String, String)>,
}

/// The cluster: hosts by name, and pools' cluster-wide quotas.
///
/// A copy shares everything with the original until one of them changes, and then copies only
/// what changed (a host, a path of the maps): a controller makes each change on a copy, and its
/// cost is then in proportion to the change, not to the cluster.
#[derive(Debug, Clone, Default)]
pub struct Cluster {
    hosts: imbl::OrdMap<String, Arc<Host>>,
    quotas: BTreeMap<String, Bandwidth>,
    /// Each VM's host, kept with the hosts' lists, so finding a VM does not scan them all.
    located: imbl::HashMap<String, String>,
    /// What each pool's vNICs reserve over all hosts, kept with the hosts' lists (a quota's
    /// check does not add up every VM).
    pooled: BTreeMap<String, u64>,
    /// The hosts in placement's order of preference, per pool ([`ranking`]).
    ranking: ranking::Ranking,
}

impl Cluster {
    /// Adds a host without VMs; an error if the name is taken.
    pub fn add_host(&mut self, name: &str, tree: Tree, capacity: Bandwidth, cap: ReservationCap) -> Result<(), String> {
        if self.hosts.contains_key(name) {
            return Err(format!("host {name} is already in the cluster"));
        }
        let host = Host {
            name: name.to_string(),
            tree,
            capacity,
            cap,
            vms: Vec::new(),
            derived: Vec::new(),
            unavailable: None,
            closed: None,
            kept: Default::default(),
        };
        self.hosts.insert(name.to_string(), Arc::new(host));
        self.ranking.unrank(name);
        Ok(())
    }

    /// Makes node `node` of host `host`'s tree derived: its reservation is its children's.
    pub fn derive(&mut self, host: &str, node: &str) -> Result<(), String> {
        let h = self.host_mut(host).ok_or_else(|| format!("no host {host}"))?;
        let id = (h.tree.find(node))
            .filter(|id| *id != NodeId::ROOT)
            .ok_or_else(|| format!("host {host} has no class or pool `{node}`"))?;
        if !h.derived.contains(&id) {
            h.derived.push(id);
        }
        Ok(())
    }

    /// Marks host `host` as taking no VMs, and why (None: it takes them again).
    pub fn set_unavailable(&mut self, host: &str, why: Option<String>) -> Result<(), String> {
        let h = self.hosts.get_mut(host).ok_or_else(|| format!("no host {host}"))?;
        // Its standing does not depend on it: kept (and the host not copied if unchanged).
        if h.unavailable != why {
            Arc::make_mut(h).unavailable = why;
            self.ranking.unrank(host);
        }
        Ok(())
    }

    /// Marks host `host` as taking no new VMs though it is heard, and why (None: it takes them
    /// again); its own VMs may still be moved off it.
    pub fn set_closed(&mut self, host: &str, why: Option<String>) -> Result<(), String> {
        let h = self.hosts.get_mut(host).ok_or_else(|| format!("no host {host}"))?;
        if h.closed != why {
            Arc::make_mut(h).closed = why;
            self.ranking.unrank(host);
        }
        Ok(())
    }

    /// Sets pool `pool`'s quota across the cluster.
    pub fn set_quota(&mut self, pool: &str, quota: Bandwidth) {
        self.quotas.insert(pool.to_string(), quota);
    }

    pub fn host(&self, name: &str) -> Option<&Host> {
        self.hosts.get(name).map(|h| &**h)
    }

    pub fn hosts(&self) -> impl Iterator<Item = &Host> {
        self.hosts.values().map(|h| &**h)
    }

    /// Host `name`, to change its VMs, tree or capacity: its standing is dropped (copied first
    /// if a copy of the cluster shares it).
    fn host_mut(&mut self, name: &str) -> Option<&mut Host> {
        let h = Arc::make_mut(self.hosts.get_mut(name)?);
        self.ranking.unrank(name);
        h.kept = Default::default();
        Some(h)
    }

    /// Counts `vm`'s reservations into its pools' totals (`sign` 1), or out of them (-1).
    fn pool_vm(&mut self, vm: &Vm, sign: i8) {
        for v in &vm.vnics {
            let total = self.pooled.entry(v.pool.clone()).or_default();
            *total = match sign {
                1 => total.saturating_add(v.reservation.bps()),
                _ => {
                    debug_assert!(
                        *total >= v.reservation.bps(),
                        "pool {} counted out more than in",
                        v.pool
                    );
                    total.saturating_sub(v.reservation.bps())
                }
            };
        }
    }

    /// Puts `vm` on host `host` (known), in the lists and totals.
    fn put(&mut self, vm: Vm, host: &str) {
        self.pool_vm(&vm, 1);
        self.located.insert(vm.name.clone(), host.to_string());
        self.host_mut(host).expect("a known host").push_vm(vm);
    }

    /// Takes `vm` off host `host`, out of the lists and totals.
    fn take(&mut self, vm: &str, host: &str) -> Option<Vm> {
        let h = self.host_mut(host)?;
        let i = h.vms.iter().position(|v| v.name == vm)?;
        let taken = h.vms.remove(i);
        self.located.remove(vm);
        self.pool_vm(&taken, -1);
        Some(taken)
    }

    /// The host VM `vm` runs on.
    pub fn host_of(&self, vm: &str) -> Option<&str> {
        self.located.get(vm).map(String::as_str)
    }

    /// Why `vm` would break a pool's cluster-wide quota, if it would.
    fn quota_breach(&self, vm: &Vm) -> Option<String> {
        for (pool, quota) in &self.quotas {
            let in_pool = |v: &Vm| -> u64 {
                (v.vnics.iter())
                    .filter(|n| n.pool == *pool)
                    .fold(0u64, |a, n| a.saturating_add(n.reservation.bps()))
            };
            let asked = in_pool(vm);
            if asked == 0 {
                continue;
            }
            let used = self.pooled.get(pool).copied().unwrap_or(0);
            if used.saturating_add(asked) > quota.bps() {
                let free = Bandwidth::from_bps(quota.bps().saturating_sub(used));
                return Some(format!(
                    "pool `{pool}`: {} asked, {free} free of its cluster quota {quota}",
                    Bandwidth::from_bps(asked)
                ));
            }
        }
        None
    }

    /// Chooses a host for `vm` by the rule of the module documentation, without placing it.
    pub fn choose(&self, vm: &Vm) -> Result<Placed, Refused> {
        if self.host_of(&vm.name).is_some() {
            let why = "already placed".to_string();
            return Err(Refused {
                vm: vm.name.clone(),
                reasons: vec![("cluster".into(), why)],
            });
        }
        if let Some(why) = self.quota_breach(vm) {
            return Err(Refused {
                vm: vm.name.clone(),
                reasons: vec![("cluster".into(), why)],
            });
        }
        let mut choice = self.best_for(vm, &[], None);
        if choice.best.is_none() {
            // Refused: each host's reason, from every host (which would also find a host the
            // ranking missed; the property test holds it never does).
            choice = self.read_all(vm, &[], None);
        }
        match choice.best {
            Some((host, headroom)) => Ok(Placed {
                host,
                headroom,
                considered: choice.looked,
            }),
            None => Err(Refused {
                vm: vm.name.clone(),
                reasons: (choice.looked.into_iter())
                    .map(|(h, r)| (h, r.err().unwrap_or_default()))
                    .collect(),
            }),
        }
    }

    /// Powers `vm` on: chooses its host and places it there.
    pub fn place(&mut self, vm: Vm) -> Result<Placed, Refused> {
        self.settle();
        let placed = self.choose(&vm)?;
        self.put(vm, &placed.host);
        Ok(placed)
    }

    /// Records that `vm` runs on `host` as it is (a state loaded or reported), without admission:
    /// the host may then violate, which [`Cluster::violations`] shows. Refused if the host is
    /// unknown or the VM is placed already.
    pub fn assume(&mut self, vm: Vm, host: &str) -> Result<(), String> {
        if self.host_of(&vm.name).is_some() {
            return Err(format!("VM {} is placed already", vm.name));
        }
        if !self.hosts.contains_key(host) {
            return Err(format!("no host {host}"));
        }
        self.put(vm, host);
        Ok(())
    }

    /// Places `vm` on `host` by hand, if that host admits it.
    pub fn place_on(&mut self, vm: Vm, host: &str) -> Result<(), String> {
        if let Some(why) = self.quota_breach(&vm) {
            return Err(why);
        }
        let h = self.hosts.get(host).ok_or_else(|| format!("no host {host}"))?;
        h.admits_kept(&[&vm])?;
        self.put(vm, host);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
