//! A host's standing, kept between changes: its tree with its VMs, whether that passes
//! admission, and its headroom; and admission of more VMs read from it, without building the
//! host's tree again.
//!
//! Model. A host that admits its VMs passes [`admit`] at every node. Adding a vNIC of
//! reservation `r` as a leaf under pool `p` changes one sum that admission checks: the
//! children's total at `p`'s *top*, the first node at or above `p` whose reservation is its
//! own (a derived node's reservation is its children's, so it grows with the leaf and passes
//! by construction, and its parent's total grows instead). So the VM is admitted exactly when,
//! at each top its vNICs reach, what the top's children reserve plus what the vNICs add fits the
//! top's quota (the cap's share of the capacity at the root, its own reservation below); and
//! its headroom is each top's free reservation less what the vNICs add there, at the least.
//! This is what [`Host::headroom_with`] computes on a copy of the tree with the VM's leaves,
//! read off the standing instead: in proportion to the VM's vNICs, not to the host's VMs.
//!
//! The standing is computed once per host and change (lazily, at the first question) and
//! dropped whenever the host's VMs, tree, capacity or cap change ([`Cluster`] changes them
//! only through `host_mut`). Whatever the standing cannot answer exactly (a host that does not
//! admit its VMs, a pool it lacks, a limit below a reservation, a derived node pushed past
//! its limit, a name already there, a refusal whose reason must be worded) goes the whole way,
//! through [`Host::headroom_with`]; a property test holds the two to the same answers.

use super::{Cluster, Host, Vm};
use crate::ioc::admission::quota;
use crate::ioc::{NodeId, Tree};
use crate::units::Bandwidth;
use std::sync::{Arc, OnceLock};

/// A host's tree with its VMs and its headroom, or why it does not admit them.
pub(super) type Standing = Result<(Tree, Bandwidth), String>;

/// A host's standing, computed at most once until the host changes.
#[derive(Debug, Clone, Default)]
pub(super) struct Kept(OnceLock<Arc<Standing>>);

impl Host {
    /// The host's standing (see the module documentation), computed now if not yet.
    pub(super) fn standing(&self) -> &Standing {
        self.kept.0.get_or_init(|| Arc::new(self.judged(&[])))
    }

    /// [`Host::headroom_with`], read off the standing where it answers exactly.
    pub(super) fn headroom_kept(&self, extra: &[&Vm]) -> Result<Bandwidth, String> {
        let (tree, headroom) = match self.standing() {
            Ok((tree, headroom)) => (tree, *headroom),
            Err(why) if extra.is_empty() => return Err(why.clone()),
            Err(_) => return self.headroom_with(extra),
        };
        if extra.is_empty() {
            return Ok(headroom);
        }
        self.added(tree, extra).unwrap_or_else(|| self.headroom_with(extra))
    }

    /// The headroom with `extra` added to `tree` (this host's, with its VMs, admitted), if the
    /// standing answers it: None where only the whole way does (see the module documentation).
    fn added(&self, tree: &Tree, extra: &[&Vm]) -> Option<Result<Bandwidth, String>> {
        // Each top the vNICs reach, and each derived node they pass on the way, with what they
        // add there.
        let mut tops: Vec<(NodeId, u64)> = Vec::new();
        let mut through: Vec<(NodeId, u64)> = Vec::new();
        let mut reached: Vec<NodeId> = Vec::new();
        for (k, vm) in extra.iter().enumerate() {
            if extra[..k].iter().any(|o| o.name == vm.name) {
                return None;
            }
            for (i, v) in vm.vnics.iter().enumerate() {
                let pool = self.tree.find(&v.pool)?;
                let leaf_taken = tree.find(&format!("{}#{i}", vm.name)).is_some();
                if leaf_taken || v.limit.is_some_and(|l| l < v.reservation) {
                    return None;
                }
                let top = self.climb(tree, pool, |d| count(&mut through, d, v.reservation.bps()));
                count(&mut tops, top, v.reservation.bps());
                reached.push(top);
            }
        }
        // A derived node grows with its children: past its limit, admission refuses it.
        for &(node, add) in &through {
            let limit = tree.node(node).spec.limit;
            if limit.is_some_and(|l| self.reserved_under(tree, node).saturating_add(add) > l.bps()) {
                return None;
            }
        }
        for &(top, add) in &tops {
            let (pool, _) = quota(tree, top, self.capacity, self.cap);
            if self.reserved_under(tree, top).saturating_add(add) > pool.bps() {
                // Refused: the reason is worded by admission itself.
                return None;
            }
        }
        let after = |top: NodeId| {
            let add = tops.iter().find(|(t, _)| *t == top).map_or(0, |(_, a)| *a);
            self.slack(tree, top).saturating_sub(add)
        };
        Some(Ok(Bandwidth::from_bps(
            reached.into_iter().map(after).min().unwrap_or(0),
        )))
    }
}

/// Adds `add` to node `node`'s entry in `adds`.
fn count(adds: &mut Vec<(NodeId, u64)>, node: NodeId, add: u64) {
    match adds.iter_mut().find(|(n, _)| *n == node) {
        Some((_, a)) => *a = a.saturating_add(add),
        None => adds.push((node, add)),
    }
}

impl Cluster {
    /// Host `host`'s standing: its headroom, or why it does not admit its VMs; None if there is
    /// no such host.
    pub fn standing(&self, host: &str) -> Option<Result<Bandwidth, String>> {
        let h = self.hosts.get(host)?;
        Some(
            h.standing()
                .as_ref()
                .map(|(_, headroom)| *headroom)
                .map_err(Clone::clone),
        )
    }
}
