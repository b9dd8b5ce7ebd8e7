//! The allocation tree: nodes with reservation, shares and limit.

use super::Shares;
use crate::units::Bandwidth;

/// Index of a node in its tree; the root (the uplink) is [`NodeId::ROOT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub usize);

impl NodeId {
    pub const ROOT: NodeId = NodeId(0);
}

/// A node's controls as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    pub name: String,
    pub reservation: Bandwidth,
    pub shares: Shares,
    /// None: unlimited.
    pub limit: Option<Bandwidth>,
}

/// A node in the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub spec: NodeSpec,
    pub parent: Option<NodeId>,
    pub children: Vec<NodeId>,
}

/// A node the tree refuses; nothing was added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    #[error("`{0}`: the name is already used by another node")]
    DuplicateName(String),
    #[error("`{name}`: limit {limit} is below the reservation {reservation}")]
    LimitBelowReservation {
        name: String,
        limit: Bandwidth,
        reservation: Bandwidth,
    },
    #[error("no node with index {0}")]
    UnknownNode(usize),
}

/// A tree of nodes under a root that stands for one uplink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    nodes: Vec<Node>,
    /// Each node's index by name, so that finding and adding stay O(1) in trees of thousands
    /// of ports (a cluster's placement builds many).
    by_name: std::collections::HashMap<String, NodeId>,
}

impl Tree {
    /// A tree holding only its root, named `root_name`.
    pub fn new(root_name: &str) -> Tree {
        Tree {
            nodes: vec![Node {
                spec: NodeSpec {
                    name: root_name.to_string(),
                    reservation: Bandwidth::ZERO,
                    shares: Shares::NORMAL,
                    limit: None,
                },
                parent: None,
                children: Vec::new(),
            }],
            by_name: std::collections::HashMap::from([(root_name.to_string(), NodeId::ROOT)]),
        }
    }

    /// Adds a child of `parent`, after checking its name is new and its limit covers its reservation.
    pub fn add(&mut self, parent: NodeId, spec: NodeSpec) -> Result<NodeId, TreeError> {
        if parent.0 >= self.nodes.len() {
            return Err(TreeError::UnknownNode(parent.0));
        }
        if self.find(&spec.name).is_some() {
            return Err(TreeError::DuplicateName(spec.name));
        }
        check_limit(&spec)?;
        let id = NodeId(self.nodes.len());
        self.by_name.insert(spec.name.clone(), id);
        self.nodes.push(Node {
            spec,
            parent: Some(parent),
            children: Vec::new(),
        });
        self.nodes[parent.0].children.push(id);
        Ok(id)
    }

    /// The node with this index.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.0]
    }

    /// The node named `name`.
    pub fn find(&self, name: &str) -> Option<NodeId> {
        self.by_name.get(name).copied()
    }

    /// Number of nodes, the root included.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True if the tree holds only its root.
    pub fn is_empty(&self) -> bool {
        self.nodes.len() == 1
    }

    /// Every node's index, parents before children (insertion order).
    pub fn ids(&self) -> impl Iterator<Item = NodeId> {
        (0..self.nodes.len()).map(NodeId)
    }

    /// Replaces a node's controls (not its name), checking only the node itself; callers that
    /// need admission control go through [`super::admission`].
    pub(crate) fn set_controls(&mut self, id: NodeId, spec: NodeSpec) -> Result<(), TreeError> {
        check_limit(&spec)?;
        let node = self.nodes.get_mut(id.0).ok_or(TreeError::UnknownNode(id.0))?;
        node.spec = NodeSpec {
            name: node.spec.name.clone(),
            ..spec
        };
        Ok(())
    }
}

fn check_limit(spec: &NodeSpec) -> Result<(), TreeError> {
    match spec.limit {
        Some(limit) if limit < spec.reservation => Err(TreeError::LimitBelowReservation {
            name: spec.name.clone(),
            limit,
            reservation: spec.reservation,
        }),
        _ => Ok(()),
    }
}
