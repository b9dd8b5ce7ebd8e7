//! A NetIOC tree as written in a file (JSON or TOML), with demands, for `teamster ioc`.
//!
//! ```json
//! {"capacity": "9.4G",
//!  "nodes": [{"name": "vm", "reservation": "4.8G", "shares": 100,
//!             "children": [{"name": "vm1", "shares": 50, "demand": "10G"}]},
//!            {"name": "nfs", "shares": "normal", "limit": "2G", "demand": "10G"}]}
//! ```
//!
//! A missing reservation is 0; a missing limit or demand is unlimited; missing shares are the
//! traffic class's default for a top-level node named after a class (`vm`: high), else normal.
//! Bandwidths are strings with units or numbers of bits/s. Names are unique.
//! `reservation_cap` (default 0.75) is the share of `capacity` that reservations may take.

use super::{NodeId, NodeSpec, ReservationCap, Shares, TrafficClass, Tree};
use crate::units::Bandwidth;
use serde::Deserialize;

/// The file's top level.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeFile {
    pub capacity: Bandwidth,
    pub reservation_cap: Option<f64>,
    #[serde(default)]
    pub nodes: Vec<NodeFile>,
}

/// One node in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeFile {
    pub name: String,
    #[serde(default)]
    pub reservation: Bandwidth,
    pub shares: Option<Shares>,
    pub limit: Option<Bandwidth>,
    pub demand: Option<Bandwidth>,
    #[serde(default)]
    pub children: Vec<NodeFile>,
}

/// A checked tree with its demands (indexed by [`NodeId`]) and the admission cap.
#[derive(Debug, Clone)]
pub struct Built {
    pub tree: Tree,
    pub demand: Vec<Option<f64>>,
    pub capacity: Bandwidth,
    pub cap: ReservationCap,
}

impl TreeFile {
    /// Builds the tree; errors name the node by its key path and name, and the key at fault.
    pub fn build(&self) -> Result<Built, String> {
        if self.capacity.bps() == 0 {
            return Err("capacity: must be greater than zero".into());
        }
        let cap = match self.reservation_cap {
            Some(f) => ReservationCap::new(f).map_err(|e| format!("reservation_cap: {e}"))?,
            None => ReservationCap::default(),
        };
        let mut tree = Tree::new("uplink");
        let mut demand = vec![None];
        for (i, n) in self.nodes.iter().enumerate() {
            add(&mut tree, &mut demand, NodeId::ROOT, n, &format!("nodes[{i}]"), true)?;
        }
        Ok(Built {
            tree,
            demand,
            capacity: self.capacity,
            cap,
        })
    }
}

/// Adds `n` and its subtree under `parent`.
fn add(
    tree: &mut Tree,
    demand: &mut Vec<Option<f64>>,
    parent: NodeId,
    n: &NodeFile,
    path: &str,
    top_level: bool,
) -> Result<(), String> {
    let at = format!("{path} (`{}`)", n.name);
    if n.name.trim().is_empty() {
        return Err(format!("{path}.name: must not be empty"));
    }
    let class_default = top_level
        .then(|| n.name.parse::<TrafficClass>().ok())
        .flatten()
        .map(|c| c.default_shares());
    let spec = NodeSpec {
        name: n.name.clone(),
        reservation: n.reservation,
        shares: n.shares.or(class_default).unwrap_or_default(),
        limit: n.limit,
    };
    let id = tree.add(parent, spec).map_err(|e| match e {
        super::TreeError::DuplicateName(_) => format!("{at}.name: `{}` is used by another node", n.name),
        super::TreeError::LimitBelowReservation { limit, reservation, .. } => {
            format!("{at}.limit: {limit} is below the reservation {reservation}")
        }
        other => format!("{at}: {other}"),
    })?;
    demand.push(n.demand.map(Bandwidth::bps_f64));
    debug_assert_eq!(demand.len(), id.0 + 1);
    for (i, c) in n.children.iter().enumerate() {
        add(tree, demand, id, c, &format!("{path}.children[{i}]"), false)?;
    }
    Ok(())
}
