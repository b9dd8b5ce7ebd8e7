//! Admission control: reservations must fit before they are placed.
//!
//! Rules, checked for every node of a tree:
//! - under the root (the uplink), the children's reservations total at most the
//!   [`ReservationCap`] (default 75%, at most 100%) of the uplink's capacity;
//! - under any other node, the children's reservations total at most the node's own reservation
//!   (a pool's fit inside its class's, a port's inside its pool's).

use super::{NodeId, NodeSpec, Tree, TreeError};
use crate::units::Bandwidth;

/// The smallest limit accepted on a class, pool or port: a limit of 0 would leave a port's
/// frames queued for ever rather than dropped, which no operator means.
pub const MIN_LIMIT: Bandwidth = Bandwidth::from_mbps(1);

/// Checks a node's controls, under `key`: a limit is at least [`MIN_LIMIT`] and not below the
/// reservation.
pub fn check_controls(key: &str, spec: &NodeSpec) -> Result<(), String> {
    if let Some(l) = spec.limit {
        if l < MIN_LIMIT {
            return Err(format!(
                "{key}.limit: {l} is below the smallest limit, {MIN_LIMIT} (remove the limit for none)"
            ));
        }
        if l < spec.reservation {
            return Err(format!(
                "{key}.limit: {l} is below the reservation {}",
                spec.reservation
            ));
        }
    }
    Ok(())
}

/// The share of an uplink's capacity that reservations may take, in (0, 1].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReservationCap(f64);

impl Default for ReservationCap {
    fn default() -> Self {
        ReservationCap(0.75)
    }
}

impl ReservationCap {
    /// A cap of `fraction` (0.75 = 75%); it must be in (0, 1].
    pub fn new(fraction: f64) -> Result<ReservationCap, String> {
        if fraction > 0.0 && fraction <= 1.0 {
            Ok(ReservationCap(fraction))
        } else {
            Err(format!(
                "reservation cap {fraction} must be in (0, 1] (0.75 = 75% of the uplink)"
            ))
        }
    }

    /// The fraction.
    pub fn get(self) -> f64 {
        self.0
    }
}

/// A reservation that does not fit; nothing was changed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AdmissionError {
    #[error("`{node}`: reservation {asked} does not fit: {free} is free of {pool} ({scope})")]
    DoesNotFit {
        node: String,
        asked: Bandwidth,
        free: Bandwidth,
        pool: Bandwidth,
        scope: String,
    },
    #[error("`{node}`: reservation {asked} is below the {children} its children already reserve")]
    BelowChildren {
        node: String,
        asked: Bandwidth,
        children: Bandwidth,
    },
    #[error(transparent)]
    Tree(#[from] TreeError),
}

/// Checks every node of `tree` against the rules, for an uplink of `capacity`.
pub fn admit(tree: &Tree, capacity: Bandwidth, cap: ReservationCap) -> Result<(), AdmissionError> {
    for id in tree.ids() {
        let mut used = 0u64;
        for &c in &tree.node(id).children {
            let r = tree.node(c).spec.reservation.bps();
            let (pool, scope) = quota(tree, id, capacity, cap);
            if used.saturating_add(r) > pool.bps() {
                return Err(AdmissionError::DoesNotFit {
                    node: tree.node(c).spec.name.clone(),
                    asked: Bandwidth::from_bps(r),
                    free: Bandwidth::from_bps(pool.bps().saturating_sub(used)),
                    pool,
                    scope,
                });
            }
            used = used.saturating_add(r);
        }
    }
    Ok(())
}

/// Changes node `id`'s controls if the tree still passes admission with them; otherwise
/// returns why, naming `id`, and leaves the tree as it was.
pub fn set_controls(
    tree: &mut Tree,
    id: NodeId,
    spec: NodeSpec,
    capacity: Bandwidth,
    cap: ReservationCap,
) -> Result<(), AdmissionError> {
    if id.0 >= tree.len() {
        return Err(TreeError::UnknownNode(id.0).into());
    }
    let mut trial = tree.clone();
    trial.set_controls(id, spec)?;
    let node = trial.node(id);
    let asked = node.spec.reservation;
    // Its reservation must fit beside its siblings' in its parent's quota...
    if let Some(parent) = node.parent {
        let others: u64 = trial
            .node(parent)
            .children
            .iter()
            .filter(|&&c| c != id)
            .map(|&c| trial.node(c).spec.reservation.bps())
            .sum();
        let (pool, scope) = quota(&trial, parent, capacity, cap);
        if others.saturating_add(asked.bps()) > pool.bps() {
            let free = Bandwidth::from_bps(pool.bps().saturating_sub(others));
            return Err(AdmissionError::DoesNotFit {
                node: node.spec.name.clone(),
                asked,
                free,
                pool,
                scope,
            });
        }
    }
    // ...and still hold its own children's.
    let held: u64 = node
        .children
        .iter()
        .map(|&c| trial.node(c).spec.reservation.bps())
        .sum();
    if node.parent.is_some() && held > asked.bps() {
        return Err(AdmissionError::BelowChildren {
            node: node.spec.name.clone(),
            asked,
            children: Bandwidth::from_bps(held),
        });
    }
    admit(&trial, capacity, cap)?;
    *tree = trial;
    Ok(())
}

/// The reservation children of `id` may share, and a phrase naming where it comes from.
pub(crate) fn quota(tree: &Tree, id: NodeId, capacity: Bandwidth, cap: ReservationCap) -> (Bandwidth, String) {
    let node = tree.node(id);
    if node.parent.is_none() {
        let pool = Bandwidth::from_bps_f64(capacity.bps_f64() * cap.get());
        (
            pool,
            format!("{:.0}% of uplink `{}` ({capacity})", cap.get() * 100.0, node.spec.name),
        )
    } else {
        (
            node.spec.reservation,
            format!("the reservation of `{}`", node.spec.name),
        )
    }
}
