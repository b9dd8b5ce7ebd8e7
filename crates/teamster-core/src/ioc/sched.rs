//! The packet scheduler: hClock-style tags that deliver the [`allocate`](super::allocate) rule.
//!
//! Model. One [`Scheduler`] per uplink, over the same tree as the allocator, with a FIFO per
//! leaf. Every node keeps three tags, in nanoseconds of engine time:
//! - R, its reservation clock: advanced by `bits / reservation` only when the node is served in
//!   the *reservation phase*; a node is due while its R tag is at or before `now`;
//! - L, its limit clock: advanced by `bits / limit` on every service; the node is eligible while
//!   its L tag is at or before `now` (plus a burst of [`Scheduler::LIMIT_BURST_BYTES`]);
//! - S, its shares clock: advanced by `bits / shares` only when served in the *shares phase*.
//!
//! A dequeue walks from the root. At each node it picks, among children with backlog and an
//! eligible limit, the one with the earliest due R tag (reservation phase), or else the one with
//! the smallest S tag (shares phase), and charges the packet to every node on the path by the
//! phase it was picked in. Because S tags ignore reservation-phase service, a node gets its
//! reservation *plus* its share of the excess (the allocator's rule), not the larger of the two;
//! because R tags advance in proportion to reservations, an overloaded link is split in
//! proportion to them. A node waking from idle is re-synchronised: R and L tags to `now`, the S
//! tag to its parent's virtual time (the S tag of the last shares-phase pick there), so it banks
//! no credit for its idle time.
//!
//! A leaf's limit may instead be a [`SharedLimits`] bucket, shared by the schedulers of every
//! uplink the port uses: a vNIC's limit is one cap across its uplinks.

use super::{NodeId, Tree};
use crate::Instant;
use std::collections::VecDeque;

/// Limit buckets shared between the schedulers of several uplinks, one per limited vNIC.
#[derive(Debug, Clone, Default)]
pub struct SharedLimits {
    /// Per bucket: (nanoseconds per bit, L tag).
    buckets: Vec<(f64, f64)>,
}

/// A bucket in [`SharedLimits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitId(pub usize);

impl SharedLimits {
    /// Adds a bucket capping at `bps` bits per second.
    pub fn add(&mut self, bps: f64) -> LimitId {
        self.buckets.push((1e9 / bps.max(1.0), f64::NEG_INFINITY));
        LimitId(self.buckets.len() - 1)
    }
}

#[derive(Debug, Clone)]
struct SNode {
    parent: Option<usize>,
    children: Vec<usize>,
    /// Nanoseconds per bit under the reservation; 0 = no reservation.
    r_cost: f64,
    /// Shares-clock units per bit: 1 / shares.
    s_cost: f64,
    /// Nanoseconds per bit under the limit; 0 = unlimited.
    l_cost: f64,
    shared_limit: Option<LimitId>,
    r_tag: f64,
    s_tag: f64,
    l_tag: f64,
    /// The S tag of the last child picked in the shares phase: this node's virtual time.
    vtime: f64,
    /// Backlogged leaves in this subtree.
    backlog: u32,
}

/// Which phase a node was picked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Reservation,
    Shares,
}

/// A hierarchical reservation/shares/limit packet scheduler for one uplink.
#[derive(Debug, Clone)]
pub struct Scheduler<T> {
    nodes: Vec<SNode>,
    queues: Vec<VecDeque<(u32, T)>>,
    path: Vec<(usize, Phase)>,
    /// Children found without an eligible leaf during the current dequeue.
    blocked: Vec<bool>,
}

impl<T> Scheduler<T> {
    /// Bytes a limited node may send ahead of its limit clock, so that pacing at packet
    /// granularity does not lose throughput to rounding.
    pub const LIMIT_BURST_BYTES: f64 = 3000.0;

    /// A scheduler for `tree`; `shared[i]`, if given, replaces leaf `i`'s own limit.
    pub fn new(tree: &Tree, shared: &[(NodeId, LimitId)]) -> Scheduler<T> {
        let nodes: Vec<SNode> = tree
            .ids()
            .map(|id| {
                let n = tree.node(id);
                let per_bit = |bps: f64| if bps > 0.0 { 1e9 / bps } else { 0.0 };
                SNode {
                    parent: n.parent.map(|p| p.0),
                    children: n.children.iter().map(|c| c.0).collect(),
                    r_cost: per_bit(n.spec.reservation.bps_f64()),
                    s_cost: 1.0 / f64::from(n.spec.shares.get()),
                    l_cost: n.spec.limit.map_or(0.0, |l| per_bit(l.bps_f64())),
                    shared_limit: shared.iter().find(|(nid, _)| *nid == id).map(|(_, l)| *l),
                    r_tag: f64::NEG_INFINITY,
                    s_tag: 0.0,
                    l_tag: f64::NEG_INFINITY,
                    vtime: 0.0,
                    backlog: 0,
                }
            })
            .collect();
        Scheduler {
            queues: (0..nodes.len()).map(|_| VecDeque::new()).collect(),
            blocked: vec![false; nodes.len()],
            nodes,
            path: Vec::new(),
        }
    }

    /// Queues a packet of `len` bytes on leaf `leaf`.
    pub fn enqueue(&mut self, leaf: NodeId, len: u32, item: T, now: Instant) {
        let was_empty = self.queues[leaf.0].is_empty();
        self.queues[leaf.0].push_back((len, item));
        if was_empty {
            let now = now.as_nanos() as f64;
            let mut at = Some(leaf.0);
            while let Some(i) = at {
                if self.nodes[i].backlog == 0 {
                    self.wake(i, now);
                }
                self.nodes[i].backlog += 1;
                at = self.nodes[i].parent;
            }
        }
    }

    /// Re-synchronises an idle node's tags so that it banks no credit.
    fn wake(&mut self, i: usize, now: f64) {
        let vt = self.nodes[i].parent.map_or(0.0, |p| self.nodes[p].vtime);
        let n = &mut self.nodes[i];
        n.r_tag = n.r_tag.max(now);
        n.l_tag = n.l_tag.max(now - Self::LIMIT_BURST_BYTES * 8.0 * n.l_cost);
        n.s_tag = n.s_tag.max(vt);
    }

    /// Packets queued on `leaf`.
    pub fn queued(&self, leaf: NodeId) -> usize {
        self.queues[leaf.0].len()
    }

    /// Takes the next packet to send at `now`: `(leaf, bytes, item)`, or None if every backlogged
    /// leaf is held back by a limit (see [`Scheduler::next_eligible`]).
    pub fn dequeue(&mut self, now: Instant, shared: &mut SharedLimits) -> Option<(NodeId, u32, T)> {
        let t = now.as_nanos() as f64;
        self.path.clear();
        let mut at = 0;
        let mut touched_blocked = Vec::new();
        let leaf = loop {
            if self.nodes[at].children.is_empty() {
                break at;
            }
            match self.pick(at, t, shared) {
                Some(step) => {
                    self.path.push(step);
                    at = step.0;
                }
                None => {
                    // Nothing eligible below `at`: mark it and retry from the root.
                    if at == 0 {
                        for b in touched_blocked {
                            self.blocked[b] = false;
                        }
                        return None;
                    }
                    self.blocked[at] = true;
                    touched_blocked.push(at);
                    self.path.clear();
                    at = 0;
                }
            }
        };
        for b in touched_blocked {
            self.blocked[b] = false;
        }
        let (len, item) = self.queues[leaf].pop_front().expect("picked leaves have backlog");
        let bits = f64::from(len) * 8.0;
        let emptied = self.queues[leaf].is_empty();
        for k in 0..self.path.len() {
            let (i, phase) = self.path[k];
            let parent = self.nodes[i].parent.expect("path nodes are children");
            let n = &mut self.nodes[i];
            match phase {
                Phase::Reservation => n.r_tag += bits * n.r_cost,
                Phase::Shares => {
                    let start = n.s_tag;
                    n.s_tag += bits * n.s_cost;
                    self.nodes[parent].vtime = start;
                }
            }
            let n = &mut self.nodes[i];
            match n.shared_limit {
                Some(LimitId(b)) => {
                    let (cost, tag) = &mut shared.buckets[b];
                    *tag = tag.max(t - Self::LIMIT_BURST_BYTES * 8.0 * *cost) + bits * *cost;
                }
                None if n.l_cost > 0.0 => {
                    n.l_tag = n.l_tag.max(t - Self::LIMIT_BURST_BYTES * 8.0 * n.l_cost) + bits * n.l_cost;
                }
                None => {}
            }
            if emptied {
                n.backlog -= 1;
            }
        }
        if emptied {
            self.nodes[0].backlog -= 1;
        }
        Some((NodeId(leaf), len, item))
    }

    /// Whether node `i`'s limit lets it send at `t`.
    fn limit_ok(&self, i: usize, t: f64, shared: &SharedLimits) -> bool {
        match self.nodes[i].shared_limit {
            Some(LimitId(b)) => shared.buckets[b].1 <= t,
            None => self.nodes[i].l_tag <= t,
        }
    }

    /// Picks the child of `parent` to serve: the earliest due R tag, else the smallest S tag,
    /// among backlogged, limit-eligible, unblocked children.
    fn pick(&self, parent: usize, t: f64, shared: &SharedLimits) -> Option<(usize, Phase)> {
        let mut due: Option<(f64, usize)> = None;
        let mut share: Option<(f64, usize)> = None;
        for &c in &self.nodes[parent].children {
            let n = &self.nodes[c];
            if n.backlog == 0 || self.blocked[c] || !self.limit_ok(c, t, shared) {
                continue;
            }
            if n.r_cost > 0.0 && n.r_tag <= t && due.is_none_or(|(tag, _)| n.r_tag < tag) {
                due = Some((n.r_tag, c));
            }
            if share.is_none_or(|(tag, _)| n.s_tag < tag) {
                share = Some((n.s_tag, c));
            }
        }
        due.map(|(_, c)| (c, Phase::Reservation))
            .or(share.map(|(_, c)| (c, Phase::Shares)))
    }

    /// The earliest time after `now` at which a backlogged node's limit clock releases it.
    pub fn next_eligible(&self, now: Instant, shared: &SharedLimits) -> Option<Instant> {
        let t = now.as_nanos() as f64;
        self.nodes
            .iter()
            .filter(|n| n.backlog > 0)
            .map(|n| match n.shared_limit {
                Some(LimitId(b)) => shared.buckets[b].1,
                None => n.l_tag,
            })
            .filter(|&tag| tag > t && tag.is_finite())
            .fold(None, |acc: Option<f64>, tag| Some(acc.map_or(tag, |a| a.min(tag))))
            .map(|tag| Instant::from_nanos(tag.ceil() as u64))
    }
}
