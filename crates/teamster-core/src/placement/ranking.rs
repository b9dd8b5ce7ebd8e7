//! The ranking: for each pool, the hosts that may take a VM under it, in the order initial
//! placement prefers them; so a choice reads the first few hosts instead of every host.
//!
//! Model. Take a VM whose vNICs are all under one pool `p` and reserve `R` in all. On a host
//! that admits it, its headroom is `room(p) - R`, where `room(p)` is what more may be reserved
//! under `p` there before it comes (the free reservation of `p`'s top: see [`Host::room`]); and
//! a host whose `room(p)` is below `R` does not admit it (the top's children would reserve
//! more than it holds). So over the hosts that admit the VM, initial placement's order (most
//! headroom, then fewest VMs, then name) is the order of (`room(p)` down, VMs up, name up), which
//! does not depend on the VM. The ranking keeps, for each pool, the hosts that may take VMs
//! (not marked unavailable or closed, and admitting their own VMs) in that order. A choice
//! walks it from the top: the first host that admits the VM is the one placement wants (a host
//! may still refuse it for another reason, such as a derived pool's limit, and the walk goes
//! on); it stops once a host's room is below `R`, or cannot beat a choice already made.
//!
//! Every node of a host's own tree is a pool here, the root (named after its uplink) included.
//! A host's entries are made again only after it changed (its VMs, tree, capacity or marks):
//! a change marks it *unranked* ([`Cluster::settle`] ranks it), and until then a choice looks
//! at each unranked host by itself besides walking the ranking, so choices are exact between
//! settles; so does it at each host with VMs arriving (remediation plans several moves at
//! once). [`Cluster::place`] and [`Cluster::remediate`] settle first; a controller settles the
//! view it keeps whenever it marks it, at a cost in proportion to the hosts changed since. The
//! ranking also keeps the hosts that do not admit their own VMs, so [`Cluster::violations`]
//! does not read every host.
//!
//! What the ranking does not answer is answered by reading every host: a VM with vNICs under
//! several pools (its headroom is the least over pools with different rooms), or none; and a VM
//! no host takes, whose refusal names each host's reason (after the walk, so a refusal costs
//! about twice what it did). A walk whose first hosts all refuse the VM for another reason than
//! room (a derived pool's limit) reads on until one takes it. A property test holds the ranked
//! choice to the one made by reading every host.

use super::{Cluster, Host, Vm};
use crate::units::Bandwidth;
use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::sync::Arc;

/// A host's place in a pool's ranking: more room first, then fewer VMs, then its name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Rank {
    room: Reverse<u64>,
    vms: usize,
    host: String,
}

/// The hosts ranked per pool, those that do not admit their VMs, and those changed since.
#[derive(Debug, Clone, Default)]
pub(super) struct Ranking {
    pools: imbl::OrdMap<String, imbl::OrdSet<Rank>>,
    /// Each ranked host's entries, to take them out when it changes.
    entries: imbl::HashMap<String, Arc<[(String, Rank)]>>,
    /// The hosts that did not admit their VMs when last ranked.
    over: imbl::OrdSet<String>,
    /// The hosts changed since they were last ranked (or never ranked).
    unranked: imbl::OrdSet<String>,
}

impl Ranking {
    /// Host `host` changed: its entries no longer hold until it is ranked again.
    pub(super) fn unrank(&mut self, host: &str) {
        if !self.unranked.contains(host) {
            self.unranked.insert(host.to_string());
        }
    }

    /// Takes host `host`'s entries out of the ranking.
    fn take_out(&mut self, host: &str) {
        self.over.remove(host);
        let Some(old) = self.entries.remove(host) else { return };
        for (pool, rank) in old.iter() {
            if let Some(set) = self.pools.get_mut(pool) {
                set.remove(rank);
                if set.is_empty() {
                    self.pools.remove(pool);
                }
            }
        }
    }
}

/// Where a VM would go, and the hosts looked at on the way.
pub(super) struct Choice {
    /// The host and the VM's headroom there; None if no host looked at takes it.
    pub best: Option<(String, Bandwidth)>,
    /// Each host looked at, with the VM's headroom there or why it does not take it.
    pub looked: Vec<(String, Result<Bandwidth, String>)>,
}

/// Initial placement's order of two candidates (headroom, VMs with the newcomers, name): the
/// greater is preferred.
fn prefer(a: &(Bandwidth, usize, &str), b: &(Bandwidth, usize, &str)) -> std::cmp::Ordering {
    a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(b.2.cmp(a.2))
}

impl Cluster {
    /// Ranks every host changed since the last settle (see the module documentation): in
    /// proportion to those hosts, each judged once.
    pub fn settle(&mut self) {
        let unranked = std::mem::take(&mut self.ranking.unranked);
        for name in unranked {
            self.ranking.take_out(&name);
            let Some(h) = self.hosts.get(&name) else { continue };
            let tree = match h.standing() {
                Err(_) => {
                    self.ranking.over.insert(name);
                    continue;
                }
                Ok(_) if h.unavailable.is_some() || h.closed.is_some() => continue,
                Ok((tree, _)) => tree,
            };
            // Every node of the host's own tree, the root included (a vNIC may sit under it).
            let entries: Arc<[(String, Rank)]> = (h.tree.ids())
                .map(|id| {
                    let rank = Rank {
                        room: Reverse(h.room(tree, id)),
                        vms: h.vms.len(),
                        host: name.clone(),
                    };
                    (h.tree.node(id).spec.name.clone(), rank)
                })
                .collect();
            for (pool, rank) in entries.iter() {
                self.ranking.pools.entry(pool.clone()).or_default().insert(rank.clone());
            }
            self.ranking.entries.insert(name, entries);
        }
    }

    /// The hosts whose VMs no longer pass admission there, in name order.
    pub fn violations(&self) -> Vec<String> {
        let r = &self.ranking;
        let mut over: BTreeSet<&String> = (r.over.iter()).filter(|h| !r.unranked.contains(*h)).collect();
        over.extend((r.unranked.iter()).filter(|name| (self.hosts.get(*name)).is_some_and(|h| h.standing().is_err())));
        over.into_iter().cloned().collect()
    }

    /// Where `vm` goes by initial placement's rule with `arriving` VMs already on their way to
    /// their hosts and host `from` left out, read off the ranking where it answers (see the
    /// module documentation), else off every host.
    pub(super) fn best_for(&self, vm: &Vm, arriving: &[(&str, &Vm)], from: Option<&str>) -> Choice {
        match one_pool(vm).filter(|_| !self.ranking.pools.is_empty() || !self.ranking.unranked.is_empty()) {
            Some(pool) => self.ranked_choice(vm, pool, arriving, from),
            None => self.read_all(vm, arriving, from),
        }
    }

    /// The VM's headroom on host `h` with the VMs arriving there, or why it does not take it.
    fn judge(&self, h: &Host, vm: &Vm, arriving: &[(&str, &Vm)]) -> Result<(Bandwidth, usize), String> {
        let mut extra: Vec<&Vm> = (arriving.iter())
            .filter(|(to, _)| *to == h.name)
            .map(|(_, v)| *v)
            .collect();
        extra.push(vm);
        Ok((h.admits_kept(&extra)?, h.vms.len() + extra.len()))
    }

    /// [`Cluster::best_for`] off every host, in name order.
    pub(super) fn read_all(&self, vm: &Vm, arriving: &[(&str, &Vm)], from: Option<&str>) -> Choice {
        let mut best: Option<(Bandwidth, usize, &str)> = None;
        let mut looked = Vec::new();
        for h in self.hosts.values().filter(|h| Some(h.name.as_str()) != from) {
            consider(h, self.judge(h, vm, arriving), &mut best, &mut looked);
        }
        Choice {
            best: best.map(|(headroom, _, host)| (host.to_string(), headroom)),
            looked,
        }
    }

    /// [`Cluster::best_for`] for a VM all under `pool`: the hosts changed since the last settle
    /// and those with VMs arriving, each by itself, and the ranking of `pool` from the top.
    fn ranked_choice(&self, vm: &Vm, pool: &str, arriving: &[(&str, &Vm)], from: Option<&str>) -> Choice {
        let r = &self.ranking;
        let asked = vm.reservation().bps();
        let by_itself: BTreeSet<&str> = (r.unranked.iter().map(String::as_str))
            .chain(arriving.iter().map(|(to, _)| *to))
            .filter(|name| Some(*name) != from)
            .collect();
        let mut best: Option<(Bandwidth, usize, &str)> = None;
        let mut looked = Vec::new();
        for name in &by_itself {
            if let Some(h) = self.hosts.get(*name) {
                consider(h, self.judge(h, vm, arriving), &mut best, &mut looked);
            }
        }
        for rank in r.pools.get(pool).into_iter().flatten() {
            if by_itself.contains(rank.host.as_str()) || Some(rank.host.as_str()) == from {
                continue;
            }
            // None after this host has more room: if it cannot hold the VM, or cannot beat the
            // choice made, neither can they.
            let Some(left) = rank.room.0.checked_sub(asked) else {
                break;
            };
            let could = (Bandwidth::from_bps(left), rank.vms + 1, rank.host.as_str());
            if best.is_some_and(|b| prefer(&could, &b).is_lt()) {
                break;
            }
            let h = &self.hosts[&rank.host];
            let judged = self.judge(h, vm, &[]);
            let taken = judged.is_ok();
            consider(h, judged, &mut best, &mut looked);
            if taken {
                break;
            }
        }
        Choice {
            best: best.map(|(headroom, _, host)| (host.to_string(), headroom)),
            looked,
        }
    }
}

/// Notes what host `h` said to the VM in `looked`, and makes it `best` if it takes the VM and
/// is preferred to the best so far.
fn consider<'a>(
    h: &'a Host,
    judged: Result<(Bandwidth, usize), String>,
    best: &mut Option<(Bandwidth, usize, &'a str)>,
    looked: &mut Vec<(String, Result<Bandwidth, String>)>,
) {
    if let Ok((headroom, vms)) = judged {
        let this = (headroom, vms, h.name.as_str());
        if best.is_none_or(|b| prefer(&this, &b).is_gt()) {
            *best = Some(this);
        }
    }
    looked.push((h.name.clone(), judged.map(|(headroom, _)| headroom)));
}

/// The pool all of `vm`'s vNICs are under, if they are all under one.
fn one_pool(vm: &Vm) -> Option<&str> {
    let first = &vm.vnics.first()?.pool;
    vm.vnics.iter().all(|v| v.pool == *first).then_some(first.as_str())
}
