//! A host file's Network I/O Control tree: the root is the team's uplinks (admission counts
//! against the smallest); `[[traffic_classes]]` under it (known class names only; shares default
//! to the class's); `[[pools]]` under the `vm` class (created on demand with high shares); each
//! port under its pool, or its class (system traffic), or else directly under `vm`. Every name is
//! unique across classes, pools and ports. Every node's controls pass
//! [`check_controls`](crate::ioc::admission::check_controls).

use super::entries::{ClassEntry, PoolEntry};
use crate::ioc::admission::check_controls;
use crate::ioc::{NodeId, NodeSpec, Shares, TrafficClass, Tree, TreeError};
use crate::units::Bandwidth;

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
    classes: &[ClassEntry],
    pools: &[PoolEntry],
    ports: &[PortControls<'_>],
) -> Result<(Tree, Vec<NodeId>), String> {
    let mut tree = Tree::new(root);
    let add = |tree: &mut Tree, parent: NodeId, key: &str, spec: NodeSpec| -> Result<NodeId, String> {
        check_controls(key, &spec)?;
        tree.add(parent, spec).map_err(|e| match e {
            TreeError::DuplicateName(n) => {
                format!("{key}: the name `{n}` is already used by another class, pool or port")
            }
            other => format!("{key}: {other}"),
        })
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
        add(&mut tree, NodeId::ROOT, &key, spec)?;
    }
    // A class node (a child of the root), created with its default controls when a pool or a
    // port needs it; its name may already be taken by a pool or port, which is an error.
    let class_node = |tree: &mut Tree, class: TrafficClass, key: &str| -> Result<NodeId, String> {
        let root = tree.node(NodeId::ROOT);
        if let Some(&c) = root.children.iter().find(|&&c| tree.node(c).spec.name == class.name()) {
            return Ok(c);
        }
        let spec = NodeSpec {
            name: class.name().into(),
            reservation: Bandwidth::ZERO,
            shares: class.default_shares(),
            limit: None,
        };
        tree.add(NodeId::ROOT, spec).map_err(|_| {
            format!(
                "{key}: needs the traffic class `{0}`, but a pool or port is named `{0}`",
                class.name()
            )
        })
    };
    for (i, p) in pools.iter().enumerate() {
        let key = format!("pools[{i}]");
        super::check_name(&format!("{key}.name"), &p.name)?;
        let vm = class_node(&mut tree, TrafficClass::VirtualMachine, &key)?;
        let spec = NodeSpec {
            name: p.name.clone(),
            reservation: p.reservation,
            shares: p.shares.unwrap_or_default(),
            limit: p.limit,
        };
        add(&mut tree, vm, &key, spec)?;
    }
    let mut leaves = Vec::new();
    for p in ports {
        let key = p.key.as_str();
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
                class_node(&mut tree, c, key)?
            }
            (None, None) => class_node(&mut tree, TrafficClass::VirtualMachine, key)?,
        };
        let spec = NodeSpec {
            name: p.name.to_string(),
            reservation: p.reservation,
            shares: p.shares.unwrap_or_default(),
            limit: p.limit,
        };
        leaves.push(add(&mut tree, parent, key, spec)?);
    }
    Ok((tree, leaves))
}
