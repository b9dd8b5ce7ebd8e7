//! The host's Network I/O Control model as files write it: traffic classes, network resource
//! pools, and each port's place and controls. Shared by packet-mode scenarios and the live
//! switch's `switch.toml`, so a simulated host and a real one are configured alike.
//!
//! The tree: the uplink at the root; `[[traffic_classes]]` under it (known class names only;
//! shares default to the class's); `[[pools]]` under the `vm` class (created on demand with high
//! shares); each port under its pool, or its class (system traffic), or else directly under
//! `vm`. Every name is unique across classes, pools and ports.

use serde::{Deserialize, Serialize};
use teamster_core::ioc::{NodeId, NodeSpec, Shares, TrafficClass, Tree, TreeError};
use teamster_core::units::Bandwidth;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClassFile {
    pub class: String,
    #[serde(default)]
    pub reservation: Bandwidth,
    pub shares: Option<Shares>,
    pub limit: Option<Bandwidth>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PoolFile {
    pub name: String,
    #[serde(default)]
    pub reservation: Bandwidth,
    pub shares: Option<Shares>,
    pub limit: Option<Bandwidth>,
}

/// A port's place in the tree and its controls; `key` names it in errors (`ports[3]`).
#[derive(Debug, Clone)]
pub struct PortControls<'a> {
    pub key: String,
    pub name: &'a str,
    pub pool: Option<&'a str>,
    pub class: Option<&'a str>,
    pub reservation: Bandwidth,
    pub shares: Option<Shares>,
    pub limit: Option<Bandwidth>,
}

/// Builds the tree under a root named `root`; returns it and each port's leaf, in order.
pub fn build_tree(
    root: &str,
    classes: &[ClassFile],
    pools: &[PoolFile],
    ports: &[PortControls<'_>],
) -> Result<(Tree, Vec<NodeId>), String> {
    // The NetIOC tree: classes under the root, pools under `vm`, ports under a pool or class.
    let mut tree = Tree::new(root);
    let node_err = |key: String| {
        move |e: TreeError| match e {
            TreeError::DuplicateName(n) => {
                format!("{key}: the name `{n}` is already used by another class, pool or port")
            }
            TreeError::LimitBelowReservation { limit, reservation, .. } => {
                format!("{key}.limit: {limit} is below the reservation {reservation}")
            }
            other => format!("{key}: {other}"),
        }
    };
    for (i, c) in classes.iter().enumerate() {
        let key = format!("traffic_classes[{i}]");
        let class: TrafficClass = c.class.parse().map_err(|e| format!("{key}.class: {e}"))?;
        let spec = NodeSpec {
            name: class.name().into(),
            reservation: c.reservation,
            shares: c.shares.unwrap_or(class.default_shares()),
            limit: c.limit,
        };
        tree.add(NodeId::ROOT, spec).map_err(node_err(key))?;
    }
    let vm_class = |tree: &mut Tree| -> NodeId {
        tree.find("vm").unwrap_or_else(|| {
            let spec = NodeSpec {
                name: "vm".into(),
                reservation: Bandwidth::ZERO,
                shares: Shares::HIGH,
                limit: None,
            };
            tree.add(NodeId::ROOT, spec).expect("`vm` is not taken: find() said so")
        })
    };
    for (i, p) in pools.iter().enumerate() {
        let key = format!("pools[{i}]");
        let vm = vm_class(&mut tree);
        let spec = NodeSpec {
            name: p.name.clone(),
            reservation: p.reservation,
            shares: p.shares.unwrap_or_default(),
            limit: p.limit,
        };
        tree.add(vm, spec).map_err(node_err(key))?;
    }
    let mut leaves = Vec::new();
    for p in ports {
        let key = p.key.clone();
        let parent = match (&p.pool, &p.class) {
            (Some(_), Some(_)) => return Err(format!("{key}: give `pool` or `class`, not both")),
            (Some(pool), None) => pools
                .iter()
                .any(|x| &x.name == pool)
                .then(|| tree.find(pool))
                .flatten()
                .ok_or_else(|| format!("{key}.pool: no pool named `{pool}`"))?,
            (None, Some(class)) => {
                let c: TrafficClass = class.parse().map_err(|e| format!("{key}.class: {e}"))?;
                match tree.find(c.name()) {
                    Some(n) => n,
                    None => {
                        let spec = NodeSpec {
                            name: c.name().into(),
                            reservation: Bandwidth::ZERO,
                            shares: c.default_shares(),
                            limit: None,
                        };
                        tree.add(NodeId::ROOT, spec).map_err(node_err(format!("{key}.class")))?
                    }
                }
            }
            (None, None) => vm_class(&mut tree),
        };
        let spec = NodeSpec {
            name: p.name.to_string(),
            reservation: p.reservation,
            shares: p.shares.unwrap_or_default(),
            limit: p.limit,
        };
        let leaf = tree.add(parent, spec).map_err(node_err(key.clone()))?;
        leaves.push(leaf);
    }
    Ok((tree, leaves))
}
