//! NetIOC as a kernel HTB hierarchy: what the kernel fast path programs on each uplink so that
//! Linux's HTB qdisc shares the uplink as the engine's fluid allocator says.
//!
//! Model. One HTB qdisc per uplink, handle [`MAJOR`]`:`. Its class `:1` is the tree's root (the
//! uplink, rate and ceil its capacity); under it, every node of the tree with a port below it is
//! a class with the same parent as in the tree, and every port is a leaf class with a `bfifo`
//! queue. A class's minor comes from [`ClassIds`] (by name, stable while the node exists), and
//! the fast path marks a port's frames with [`priority`] of its leaf's minor, which HTB reads
//! before any filter, so classifying takes no lock. Anything else on the uplink (the host's own
//! traffic, frames the engine sends itself) finds no class and goes to the default leaf
//! [`UNCLASSIFIED`].
//!
//! The numbers ([`plan`]), every rate in bytes per second as HTB counts them (frames without FCS,
//! a super-frame as its segments; what the engine's reservations count):
//! - **rate**: a port's is its allocation from [`allocate`] over the uplink's capacity with every
//!   port greedy, floored at [`floor`] (HTB refuses 0); an inner class's is the sum of its
//!   children's. So every reservation is met by HTB's own tokens, exactly, with no borrowing,
//!   whatever the others send, and the rates add up to at most the capacity.
//! - **ceil**: the node's limit (a port's times its `limit_share` on this uplink), capped by its
//!   parent's ceil; the capacity where there is none. HTB caps only what a class borrows at an
//!   inner ceil, so an inner limit is also met through its children's rates, which add up to at
//!   most it.
//! - **quantum**: what a port borrows of another's unused rate is shared by HTB's round robin
//!   over the *leaves'* quanta (an inner class's quantum is ignored), so a leaf's quantum is its
//!   whole path's weight: the product, from the root down, of each node's shares over the shares
//!   of its siblings with ports, scaled to at most [`MAX_QUANTUM`] and at least one frame.
//! - **burst**: two milliseconds at the rate (or ceil), at least two full frames, as the
//!   user-space pacer's.
//! - **queue**: a port's `bfifo` holds [`QUEUE_TIME`] at its rate, the engine's own bound, but
//!   never less than one super-frame and two frames (bfifo drops a frame longer than its whole
//!   limit, even from an empty queue).
//!
//! Where HTB differs from the engine's hClock, and what this does about it: HTB splits what is
//! *lent* by quanta over whole packets, not by shares over bytes (a 64 KiB super-frame is one
//! turn); so the allocation is delivered as rates, which are exact in bytes, and quanta only
//! share the slack of ports that send less than their allocation. The whole account, with the
//! kernel's sources, is in `crates/teamster-kernel/design/netioc-htb.md` and
//! `docs/kernel-path.md`.
//!
//! Pure: the kernel path ([`diff`] gives the class operations) and tests use it alike.

use super::{allocate, NodeId, Tree};
use std::collections::{BTreeMap, BTreeSet};

/// The HTB qdisc's major number on every uplink ("ts").
pub const MAJOR: u16 = 0x7473;
/// The class that stands for the tree's root, the uplink.
pub const ROOT: u16 = 1;
/// The default leaf: what carries no port's priority.
pub const UNCLASSIFIED: u16 = 0xfffe;
/// How long a port's queue holds at its rate.
pub const QUEUE_TIME_NS: u64 = 5_000_000;
/// The largest quantum given: one 64 KiB super-frame's worth, so a port's turn is at most one.
pub const MAX_QUANTUM: u32 = 60_000;
/// The least quantum: a full-size frame.
pub const MIN_QUANTUM: u32 = 1514;
/// The largest super-frame a port's queue must have room for (veth's and most NICs'
/// `gso_max_size`).
pub const SUPER_FRAME: u32 = 65_536;

/// The `skb->priority` that selects class `minor` of the qdisc: HTB reads it as a class ID (minor
/// 0, the qdisc's own handle, is HTB's direct queue: sent first, never shaped).
pub fn priority(minor: u16) -> u32 {
    u32::from(MAJOR) << 16 | u32::from(minor)
}

/// Class minors by node name: a node keeps its minor while it exists, a new one takes the lowest
/// free (2 ..= 0xfffd, but never [`MAJOR`]), and a minor is free again once its node is gone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClassIds {
    by_name: BTreeMap<String, u16>,
}

impl ClassIds {
    const FIRST: u16 = 2;
    const LAST: u16 = 0xfffd;

    /// The minor of `name`, if it has one.
    pub fn get(&self, name: &str) -> Option<u16> {
        self.by_name.get(name).copied()
    }

    /// The minor of `name`, given one if it has none (None: all 65,531 are taken).
    fn assign(&mut self, name: &str) -> Option<u16> {
        if let Some(m) = self.get(name) {
            return Some(m);
        }
        let used: BTreeSet<u16> = self.by_name.values().copied().collect();
        // Not MAJOR: a leaf's queue takes its class's minor as its own major.
        let free = (Self::FIRST..=Self::LAST).find(|m| *m != MAJOR && !used.contains(m))?;
        self.by_name.insert(name.to_string(), free);
        Some(free)
    }

    /// Frees the minors of the names `keep` refuses.
    fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.by_name.retain(|n, _| keep(n));
    }
}

/// One HTB class as the kernel is given it; rates in bytes per second, sizes in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HtbClass {
    /// The tree node's name (`:1` is the root's, [`UNCLASSIFIED`] has none).
    pub name: String,
    pub minor: u16,
    /// The parent class's minor; 0 for `:1`, whose parent is the qdisc.
    pub parent: u16,
    pub rate: u64,
    pub ceil: u64,
    /// 0 for an inner class (the kernel ignores it).
    pub quantum: u32,
    pub burst: u32,
    pub cburst: u32,
    /// A leaf's `bfifo` limit; None for an inner class.
    pub queue: Option<u32>,
}

/// One uplink's classes, parents before children.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UplinkPlan {
    pub classes: Vec<HtbClass>,
}

impl UplinkPlan {
    /// The class of `minor`.
    pub fn class(&self, minor: u16) -> Option<&HtbClass> {
        self.classes.iter().find(|c| c.minor == minor)
    }
}

/// What to do to an uplink's qdisc to go from one plan to the next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Create(HtbClass),
    Change(HtbClass),
    Delete(u16),
}

/// True if `tree` asks anything of the ports `leaves` that plain sharing of the uplink would not
/// give: a reservation or a limit on a port or above one, or shares that differ between two
/// siblings that both have ports below them. Without that, the kernel path leaves the uplinks'
/// qdiscs alone (and runs at the bridge's speed).
pub fn needs_shaping(tree: &Tree, leaves: &[NodeId]) -> bool {
    let with_ports = with_ports(tree, leaves);
    tree.ids()
        .filter(|id| with_ports[id.0] && *id != NodeId::ROOT)
        .any(|id| {
            let n = tree.node(id);
            if n.spec.reservation.bps() > 0 || n.spec.limit.is_some() {
                return true;
            }
            let parent = tree.node(n.parent.expect("only the root has none"));
            parent
                .children
                .iter()
                .any(|s| with_ports[s.0] && tree.node(*s).spec.shares != n.spec.shares)
        })
}

/// Per node: whether a port of `leaves` is at or below it.
fn with_ports(tree: &Tree, leaves: &[NodeId]) -> Vec<bool> {
    let mut on = vec![false; tree.len()];
    for &l in leaves {
        let mut at = Some(l);
        while let Some(id) = at.filter(|id| id.0 < on.len() && !on[id.0]) {
            on[id.0] = true;
            at = tree.node(id).parent;
        }
    }
    on
}

/// The least rate given to any class, in bytes per second: HTB refuses 0. A thousandth of a
/// megabit, or less on a slow uplink with many classes, so that the floors stay a small part of
/// the capacity.
pub fn floor(capacity_bytes: u64, classes: usize) -> u64 {
    (capacity_bytes / 100 / classes.max(1) as u64).clamp(1, 1000)
}

/// Two milliseconds at `rate` bytes per second, at least two full frames: the burst HTB may send
/// at once, as the user-space pacer's.
fn burst(rate: u64) -> u32 {
    (rate / 500).clamp(2 * 1518, u64::from(u32::MAX)) as u32
}

/// The plan for one uplink of `capacity_bps` over `tree`, for the ports `leaves` (each port's
/// leaf), each port's limit multiplied by `limit_share` of it on this uplink (1 where the port's
/// traffic goes to one uplink). Classes get minors from `ids`, which forgets the nodes no longer
/// in the plan. None only if the minors ran out.
pub fn plan(
    tree: &Tree,
    leaves: &[NodeId],
    capacity_bps: f64,
    limit_share: &dyn Fn(NodeId) -> f64,
    ids: &mut ClassIds,
) -> Option<UplinkPlan> {
    let with_ports = with_ports(tree, leaves);
    let ports: BTreeSet<NodeId> = leaves.iter().copied().filter(|l| l.0 < tree.len()).collect();
    let planned: Vec<NodeId> = tree
        .ids()
        .filter(|id| with_ports[id.0] && *id != NodeId::ROOT)
        .collect();
    ids.retain(|n| tree.find(n).is_some_and(|id| with_ports[id.0] && id != NodeId::ROOT));
    let capacity = (capacity_bps.max(0.0) / 8.0) as u64;
    let floor = floor(capacity, planned.len() + 2);
    // Every port greedy, every other leaf idle; the floors (the ports' and the default
    // class's) come off first, so that the rates add up to at most the capacity.
    // A port whose traffic spreads over several uplinks has its limit's share here as its top.
    let demand: Vec<Option<f64>> = tree
        .ids()
        .map(|id| {
            let node = tree.node(id);
            if ports.contains(&id) {
                node.spec.limit.map(|l| l.bps_f64() * limit_share(id).clamp(0.0, 1.0))
            } else {
                node.children.is_empty().then_some(0.0)
            }
        })
        .collect();
    let share_of = (capacity.saturating_sub(floor * (ports.len() as u64 + 1)) * 8) as f64;
    let alloc = allocate(tree, share_of, &demand);

    let mut rate = vec![0u64; tree.len()];
    for &p in &ports {
        rate[p.0] = ((alloc.get(p) / 8.0) as u64).max(floor);
    }
    // Children have larger indices than their parents: summing backwards gives each inner
    // class the sum of its children's rates.
    for &id in planned.iter().rev() {
        if !ports.contains(&id) {
            rate[id.0] = tree.node(id).children.iter().map(|c| rate[c.0]).sum::<u64>().max(floor);
        }
    }

    let weights = path_weights(tree, &with_ports);
    let heaviest = ports.iter().map(|p| weights[p.0]).fold(0.0, f64::max);
    let mut ceil = vec![capacity; tree.len()];
    let mut minor = vec![ROOT; tree.len()];
    let mut out = UplinkPlan {
        classes: vec![HtbClass {
            name: tree.node(NodeId::ROOT).spec.name.clone(),
            minor: ROOT,
            parent: 0,
            rate: capacity.max(floor),
            ceil: capacity.max(floor),
            quantum: 0,
            burst: burst(capacity),
            cburst: burst(capacity),
            queue: None,
        }],
    };
    for &id in &planned {
        let node = tree.node(id);
        let parent = node.parent.expect("only the root has none");
        let share = if ports.contains(&id) {
            limit_share(id).clamp(0.0, 1.0)
        } else {
            1.0
        };
        let limit = node.spec.limit.map_or(u64::MAX, |l| (l.bps_f64() * share / 8.0) as u64);
        ceil[id.0] = limit.min(ceil[parent.0]).max(rate[id.0]);
        minor[id.0] = ids.assign(&node.spec.name)?;
        let leaf = ports.contains(&id);
        let quantum = if leaf && heaviest > 0.0 {
            ((f64::from(MAX_QUANTUM) * weights[id.0] / heaviest) as u32).clamp(MIN_QUANTUM, MAX_QUANTUM)
        } else if leaf {
            MIN_QUANTUM
        } else {
            0
        };
        out.classes.push(HtbClass {
            name: node.spec.name.clone(),
            minor: minor[id.0],
            parent: minor[parent.0],
            rate: rate[id.0],
            ceil: ceil[id.0],
            quantum,
            burst: burst(rate[id.0]),
            cburst: burst(ceil[id.0]),
            queue: leaf.then(|| leaf_queue(rate[id.0])),
        });
    }
    out.classes.push(HtbClass {
        name: String::new(),
        minor: UNCLASSIFIED,
        parent: ROOT,
        rate: floor,
        ceil: capacity.max(floor),
        quantum: MIN_QUANTUM,
        burst: burst(floor),
        cburst: burst(capacity),
        queue: Some(leaf_queue(capacity)),
    });
    Some(out)
}

/// A leaf's `bfifo` limit at `rate` bytes per second; see the module documentation.
pub fn leaf_queue(rate: u64) -> u32 {
    let time = (u128::from(rate) * u128::from(QUEUE_TIME_NS) / 1_000_000_000) as u64;
    time.max(u64::from(SUPER_FRAME) + 2 * 1518).min(u64::from(u32::MAX)) as u32
}

/// Per node: its share of its parent's excess times its parent's, from the root (1) down,
/// counting only siblings with ports below them.
fn path_weights(tree: &Tree, with_ports: &[bool]) -> Vec<f64> {
    let mut w = vec![0.0; tree.len()];
    w[0] = 1.0;
    for id in tree.ids().filter(|id| with_ports[id.0]) {
        let node = tree.node(id);
        let shares = |c: &NodeId| f64::from(tree.node(*c).spec.shares.get());
        let total: f64 = node.children.iter().filter(|c| with_ports[c.0]).map(shares).sum();
        for c in node.children.iter().filter(|c| with_ports[c.0]) {
            w[c.0] = w[id.0] * shares(c) / total;
        }
    }
    w
}

/// The operations that take an uplink's qdisc from `old`'s classes to `new`'s: deletions
/// first, children before parents (HTB refuses to delete a class with children); then
/// creations and changes, parents before children. A class whose parent changed (or is
/// re-created) is deleted and created again, since HTB cannot move a class.
pub fn diff(old: &UplinkPlan, new: &UplinkPlan) -> Vec<Op> {
    let mut again: BTreeSet<u16> = BTreeSet::new();
    for c in &old.classes {
        let moved = new.class(c.minor).is_some_and(|n| n.parent != c.parent);
        if moved || again.contains(&c.parent) {
            again.insert(c.minor);
        }
    }
    let mut ops: Vec<Op> = old
        .classes
        .iter()
        .rev()
        .filter(|c| again.contains(&c.minor) || new.class(c.minor).is_none())
        .map(|c| Op::Delete(c.minor))
        .collect();
    for c in &new.classes {
        match old.class(c.minor) {
            Some(o) if !again.contains(&c.minor) => {
                if o != c {
                    ops.push(Op::Change(c.clone()));
                }
            }
            _ => ops.push(Op::Create(c.clone())),
        }
    }
    ops
}

#[cfg(test)]
mod tests;
