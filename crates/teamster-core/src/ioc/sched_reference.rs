//! The scheduler as it was before its data layout was optimised (commit dd7b91e), kept for
//! tests only: `sched_equiv_tests` runs it and [`super::Scheduler`] side by side on random trees
//! and operations and requires the same packets in the same order, bit for bit, so the
//! optimised layout is known to change no decision. Its model is the one `sched.rs` documents.
//!
//! One change from dd7b91e: heap entries with equal keys are ordered by the parent's virtual-time
//! round when they were filed (how many times its virtual time had risen; the earlier first),
//! then by child index, the rule the optimised scheduler's tournament trees follow (rounds count
//! from 1; a child filed as it wakes from idle is filed in round 0, ahead of equal tags); before, the
//! order among equal keys was whatever `BinaryHeap` left, which mostly, but not always, put
//! earlier filings first. Only ties between children with exactly equal tags can be decided
//! differently.
#![allow(dead_code)]

use super::{NodeId, NodeSpec, Tree};
use crate::Instant;
use std::cmp::{Ordering, Reverse};
use std::collections::VecDeque;

/// Limit buckets shared between the schedulers of several uplinks, one per limited vNIC.
#[derive(Debug, Clone, Default)]
pub struct SharedLimits {
    /// Per bucket: (nanoseconds per bit, L tag in nanoseconds since `epoch`).
    buckets: Vec<(f64, f64)>,
    /// Engine time (ns) the L tags count from.
    epoch: u64,
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

    /// Changes a bucket's cap to `bps` bits per second (None: unlimited) from now on: its clock
    /// restarts at the next send, as a node's does on a change of controls, so frames held by the
    /// old limit (however low it was) are not held by it any longer.
    pub fn set(&mut self, id: LimitId, bps: Option<f64>) {
        self.buckets[id.0] = (bps.map_or(0.0, |b| 1e9 / b.max(1.0)), f64::NEG_INFINITY);
    }

    /// Bucket `b`'s L tag in nanoseconds since `epoch`.
    fn tag(&self, b: usize, epoch: u64) -> f64 {
        self.buckets[b].1 + epoch_offset(self.epoch, epoch)
    }

    /// Moves the epoch up to `now` once it is [`Scheduler::REBASE_NS`] behind.
    fn rebase(&mut self, now: u64) {
        if now.saturating_sub(self.epoch) < REBASE_NS {
            return;
        }
        let shift = (now - self.epoch) as f64;
        self.buckets.iter_mut().for_each(|(_, tag)| *tag -= shift);
        self.epoch = now;
    }
}

/// How far tags may count from their epoch before it is moved: 2^32 ns (4.3 s), where an f64
/// still resolves a millionth of a nanosecond.
const REBASE_NS: u64 = 1 << 32;

/// What to add to a time counted from epoch `from` to count it from epoch `to`.
#[inline]
fn epoch_offset(from: u64, to: u64) -> f64 {
    if from == to {
        0.0
    } else {
        (i128::from(from) - i128::from(to)) as f64
    }
}

/// A heap entry: a key (a tag or a time, see [`Entry::new`]), the child, the child's version
/// when pushed, and the parent's round when filed. Ordered by key, round, child.
#[derive(Debug, Clone, Copy)]
struct Entry(u64, u32, u32, u64);

impl Entry {
    /// An entry keyed by `key`, mapped to a u64 whose unsigned order is the float's order.
    #[inline]
    fn new(key: f64, child: u32, version: u32) -> Entry {
        Entry(ord_key(key), child, version, 0)
    }

    /// The key as the float it was made from.
    #[inline]
    fn key(self) -> f64 {
        let b = self.0;
        f64::from_bits(if b >> 63 == 1 { b & !(1 << 63) } else { !b })
    }
}

/// Maps a float to a u64 with the same order (negative numbers flipped, positives offset).
#[inline]
fn ord_key(x: f64) -> u64 {
    let b = x.to_bits();
    if b >> 63 == 1 {
        !b
    } else {
        b | (1 << 63)
    }
}

impl PartialEq for Entry {
    #[inline]
    fn eq(&self, o: &Self) -> bool {
        (self.0, self.3, self.1) == (o.0, o.3, o.1)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    #[inline]
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    #[inline]
    fn cmp(&self, o: &Self) -> Ordering {
        (self.0, self.3, self.1).cmp(&(o.0, o.3, o.1))
    }
}

type MinHeap = std::collections::BinaryHeap<Reverse<Entry>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    Ready,
    Held,
}

#[derive(Debug, Clone)]
struct SNode {
    parent: Option<usize>,
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
    /// How many times `vtime` has risen.
    round: u64,
    /// Backlogged leaves in this subtree.
    backlog: u32,
    state: State,
    version: u32,
    /// Children ready, by R tag (only children with a reservation).
    by_r: MinHeap,
    /// Children ready, by S tag.
    by_s: MinHeap,
    /// Children held back, by the time they may be released.
    held: MinHeap,
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
    /// Engine time (ns) the R and L tags count from; see the module's "Precision".
    epoch: u64,
}

impl<T> Scheduler<T> {
    /// How far a busy node's limit clock may lag behind `now` and still be caught up: 1 ms (at
    /// least two 1500-byte frames at its limit). A limited node is not always picked the moment
    /// its limit allows (its parent competes at its own level); without this slack the service
    /// it missed would be lost for good (and go to its siblings), and with unbounded slack a node
    /// held back for a long time could then exceed its limit for as long. The slack is never
    /// credit: a waking node's limit clock starts at `now`, and the clock never moves back, so
    /// over any span a node sends at most one packet more than its limit allows.
    pub const LIMIT_LAG_NS: f64 = 1e6;
    /// The least slack, in bytes.
    pub const LIMIT_MIN_BURST_BYTES: f64 = 3000.0;
    /// How far `now` may run ahead of the tags' epoch before the epoch is moved up to it.
    pub const REBASE_NS: u64 = REBASE_NS;

    /// The lag allowed for a limit clock costing `cost` nanoseconds per bit.
    fn limit_slack(cost: f64) -> f64 {
        Self::LIMIT_LAG_NS.max(Self::LIMIT_MIN_BURST_BYTES * 8.0 * cost)
    }

    /// A scheduler for `tree`; a `(leaf, bucket)` pair in `shared` replaces that leaf's own limit.
    pub fn new(tree: &Tree, shared: &[(NodeId, LimitId)]) -> Scheduler<T> {
        let per_bit = |bps: f64| if bps > 0.0 { 1e9 / bps } else { 0.0 };
        let nodes: Vec<SNode> = tree
            .ids()
            .map(|id| {
                let n = tree.node(id);
                SNode {
                    parent: n.parent.map(|p| p.0),
                    r_cost: per_bit(n.spec.reservation.bps_f64()),
                    s_cost: 1.0 / f64::from(n.spec.shares.get()),
                    l_cost: n.spec.limit.map_or(0.0, |l| per_bit(l.bps_f64())),
                    shared_limit: shared.iter().find(|(nid, _)| *nid == id).map(|(_, l)| *l),
                    r_tag: f64::NEG_INFINITY,
                    s_tag: 0.0,
                    l_tag: f64::NEG_INFINITY,
                    vtime: 0.0,
                    round: 1,
                    backlog: 0,
                    state: State::Idle,
                    version: 0,
                    by_r: MinHeap::new(),
                    by_s: MinHeap::new(),
                    held: MinHeap::new(),
                }
            })
            .collect();
        Scheduler {
            queues: (0..nodes.len()).map(|_| VecDeque::new()).collect(),
            nodes,
            path: Vec::new(),
            epoch: 0,
        }
    }

    /// `now` in nanoseconds since the tags' epoch, moving the epoch up first if `now` has run
    /// [`Scheduler::REBASE_NS`] past it.
    fn time(&mut self, now: Instant) -> f64 {
        let now = now.as_nanos();
        if now.saturating_sub(self.epoch) >= REBASE_NS {
            self.rebase(now);
        }
        epoch_offset(now, self.epoch)
    }

    /// Moves the epoch to `now`: every time-valued tag and heap key down by the same amount, and
    /// every node's children's S tags down by the node's virtual time. Subtracting one number
    /// keeps every heap's order, so the heaps are re-keyed in place of being rebuilt by pops.
    fn rebase(&mut self, now: u64) {
        let shift = (now - self.epoch) as f64;
        let vtimes: Vec<f64> = self.nodes.iter().map(|n| n.vtime).collect();
        let rekey = |heap: &mut MinHeap, by: f64| {
            let mut v = std::mem::take(heap).into_vec();
            for Reverse(e) in v.iter_mut() {
                *e = Entry(Entry::new(e.key() - by, e.1, e.2).0, e.1, e.2, e.3);
            }
            *heap = MinHeap::from(v);
        };
        for n in self.nodes.iter_mut() {
            n.r_tag -= shift;
            n.l_tag -= shift;
            if let Some(p) = n.parent {
                n.s_tag -= vtimes[p];
            }
            let vt = n.vtime;
            rekey(&mut n.by_r, shift);
            rekey(&mut n.held, shift);
            rekey(&mut n.by_s, vt);
            n.vtime = 0.0;
        }
        self.epoch = now;
    }

    /// Queues a packet of `len` bytes on leaf `leaf`.
    pub fn enqueue(&mut self, leaf: NodeId, len: u32, item: T, now: Instant) {
        let was_empty = self.queues[leaf.0].is_empty();
        self.queues[leaf.0].push_back((len, item));
        if !was_empty {
            return;
        }
        let t = self.time(now);
        let mut at = leaf.0;
        while let Some(parent) = self.nodes[at].parent {
            self.nodes[at].backlog += 1;
            match self.nodes[at].state {
                State::Idle => {
                    self.wake(at, t);
                    self.place(at, parent, t, None);
                }
                // Held only because nothing below could send: the new packet may change that.
                State::Held if self.limit_ok(at, t, None) => self.place(at, parent, t, None),
                _ => {}
            }
            at = parent;
        }
        self.nodes[at].backlog += 1;
    }

    /// Re-synchronises an idle node's tags so that it banks no credit.
    fn wake(&mut self, i: usize, t: f64) {
        let vt = self.nodes[i].parent.map_or(0.0, |p| self.nodes[p].vtime);
        let n = &mut self.nodes[i];
        n.r_tag = n.r_tag.max(t);
        n.l_tag = n.l_tag.max(t);
        n.s_tag = n.s_tag.max(vt);
    }

    /// Files backlogged node `i` in its parent's heaps: ready if its limit allows sending at `t`
    /// (and nothing below is known to be held until later), else held until its release time.
    fn place(&mut self, i: usize, parent: usize, t: f64, held_below_until: Option<f64>) {
        let own = self.release_time(i);
        let release = held_below_until.map_or(own, |b| b.max(own));
        let n = &mut self.nodes[i];
        // A child waking from idle files in round 0, as the optimised scheduler's does.
        let woke = n.state == State::Idle;
        n.version = n.version.wrapping_add(1);
        let (v, c) = (n.version, i as u32);
        let (r_cost, r_tag, s_tag) = (n.r_cost, n.r_tag, n.s_tag);
        if release <= t {
            n.state = State::Ready;
            let p = &mut self.nodes[parent];
            let round = if woke { 0 } else { p.round };
            if r_cost > 0.0 {
                p.by_r.push(Reverse(Entry(Entry::new(r_tag, c, v).0, c, v, round)));
            }
            p.by_s.push(Reverse(Entry(Entry::new(s_tag, c, v).0, c, v, round)));
        } else {
            n.state = State::Held;
            let p = &mut self.nodes[parent];
            let round = if woke { 0 } else { p.round };
            p.held.push(Reverse(Entry(Entry::new(release, c, v).0, c, v, round)));
        }
    }

    /// The time node `i`'s own limit next lets it send. A shared bucket is read through the
    /// `SharedLimits` passed to `dequeue`, so here it counts as released; `pick` checks it.
    fn release_time(&self, i: usize) -> f64 {
        match self.nodes[i].shared_limit {
            Some(_) => f64::NEG_INFINITY,
            None => self.nodes[i].l_tag,
        }
    }

    /// Whether node `i`'s own limit lets it send at `t`.
    fn limit_ok(&self, i: usize, t: f64, shared: Option<&SharedLimits>) -> bool {
        match (self.nodes[i].shared_limit, shared) {
            (Some(LimitId(b)), Some(s)) => s.tag(b, self.epoch) <= t,
            (Some(_), None) => true,
            (None, _) => self.nodes[i].l_tag <= t,
        }
    }

    /// Applies new controls to node `id` from `now` on: its R and L clocks restart at `now` (no
    /// credit from before), and it is re-filed in its parent so a new reservation is seen at
    /// once. Admission control is the caller's: see [`super::admission::set_controls`].
    pub fn set_controls(&mut self, id: NodeId, spec: &NodeSpec, now: Instant) {
        let per_bit = |bps: f64| if bps > 0.0 { 1e9 / bps } else { 0.0 };
        let t = self.time(now);
        let n = &mut self.nodes[id.0];
        n.r_cost = per_bit(spec.reservation.bps_f64());
        n.s_cost = 1.0 / f64::from(spec.shares.get());
        n.l_cost = spec.limit.map_or(0.0, |l| per_bit(l.bps_f64()));
        n.r_tag = n.r_tag.max(t);
        n.l_tag = t;
        if let (Some(parent), true) = (n.parent, n.state != State::Idle) {
            self.place(id.0, parent, t, None);
            // Ancestors held only because everything below them was held may send again (a
            // limit lifted or raised): re-file them, as a new packet would.
            let mut at = parent;
            while let Some(up) = self.nodes[at].parent {
                if self.nodes[at].state == State::Held && self.limit_ok(at, t, None) {
                    self.place(at, up, t, None);
                }
                at = up;
            }
        }
    }

    /// Packets queued on `leaf`.
    pub fn queued(&self, leaf: NodeId) -> usize {
        self.queues[leaf.0].len()
    }

    /// Takes the next packet to send at `now`: `(leaf, bytes, item)`, or None if every backlogged
    /// leaf is held back by a limit (see [`Scheduler::next_eligible`]).
    pub fn dequeue(&mut self, now: Instant, shared: &mut SharedLimits) -> Option<(NodeId, u32, T)> {
        if self.nodes[0].backlog == 0 {
            return None;
        }
        let t = self.time(now);
        shared.rebase(now.as_nanos());
        let to_shared = epoch_offset(self.epoch, shared.epoch);
        self.path.clear();
        let mut at = 0;
        let leaf = loop {
            if self.nodes[at].backlog > 0 && self.queues[at].front().is_some() && self.nodes[at].parent.is_some() {
                break at;
            }
            match self.pick(at, t, shared) {
                Some(step) => {
                    self.path.push(step);
                    at = step.0;
                }
                None if at == 0 => return None,
                None => {
                    // Everything below `at` is held: hold `at` in its parent until the earliest
                    // release below, and look again from the root.
                    let below = self.earliest_held(at);
                    let parent = self.nodes[at].parent.expect("not the root");
                    self.place(at, parent, t, Some(below));
                    self.path.clear();
                    at = 0;
                }
            }
        };
        let (len, item) = self.queues[leaf].pop_front().expect("picked leaves have backlog");
        let bits = f64::from(len) * 8.0;
        let emptied = self.queues[leaf].is_empty();
        // Charge every node on the path by its phase, deepest first, and refile it.
        for k in (0..self.path.len()).rev() {
            let (i, phase) = self.path[k];
            let parent = self.nodes[i].parent.expect("path nodes are children");
            match phase {
                Phase::Reservation => self.nodes[i].r_tag += bits * self.nodes[i].r_cost,
                Phase::Shares => {
                    let start = self.nodes[i].s_tag;
                    self.nodes[i].s_tag += bits * self.nodes[i].s_cost;
                    if start > self.nodes[parent].vtime {
                        self.nodes[parent].round += 1;
                    }
                    self.nodes[parent].vtime = start;
                }
            }
            let n = &mut self.nodes[i];
            match n.shared_limit {
                Some(LimitId(b)) => {
                    // The bucket's tag counts from its own epoch: `to_shared` converts ours.
                    let (cost, tag) = &mut shared.buckets[b];
                    let ts = t + to_shared;
                    let start = if tag.is_finite() {
                        tag.max(ts - Self::limit_slack(*cost))
                    } else {
                        ts
                    };
                    *tag = start + bits * *cost;
                }
                None if n.l_cost > 0.0 => {
                    n.l_tag = n.l_tag.max(t - Self::limit_slack(n.l_cost)) + bits * n.l_cost;
                }
                None => {}
            }
            if emptied {
                n.backlog -= 1;
            }
            let release = match n.shared_limit {
                Some(LimitId(b)) => shared.buckets[b].1 - to_shared,
                None => n.l_tag,
            };
            if n.backlog == 0 {
                n.state = State::Idle;
                n.version = n.version.wrapping_add(1);
            } else if release <= t {
                // Still ready: only the tag of the phase it was served in moved, and its entry is
                // the top of that heap, so re-key it in place; the other heap's entry stays right.
                let key = match phase {
                    Phase::Reservation => n.r_tag,
                    Phase::Shares => n.s_tag,
                };
                let round = self.nodes[parent].round;
                let heap = match phase {
                    Phase::Reservation => &mut self.nodes[parent].by_r,
                    Phase::Shares => &mut self.nodes[parent].by_s,
                };
                // pop + push: std's pop sinks the hole with one compare per level, and the new,
                // larger key rarely climbs far; cheaper than re-sifting the top in place.
                let Some(Reverse(mut top)) = heap.pop() else {
                    unreachable!("the picked entry is on top")
                };
                debug_assert_eq!(top.1 as usize, i, "the picked entry is on top");
                top.0 = ord_key(key);
                top.3 = round;
                heap.push(Reverse(top));
            } else {
                self.place(i, parent, t, Some(release));
            }
        }
        if emptied {
            self.nodes[0].backlog -= 1;
        }
        Some((NodeId(leaf), len, item))
    }

    /// Picks the child of `p` to serve at `t`: the earliest due R tag, else the smallest S tag,
    /// after releasing held children whose time has come.
    fn pick(&mut self, p: usize, t: f64, shared: &SharedLimits) -> Option<(usize, Phase)> {
        while let Some(&Reverse(e)) = self.nodes[p].held.peek() {
            let (when, c, v) = (e.key(), e.1 as usize, e.2);
            if v != self.nodes[c].version {
                self.nodes[p].held.pop();
            } else if when <= t {
                self.nodes[p].held.pop();
                let until = self.nodes[c].shared_limit.map(|LimitId(b)| shared.tag(b, self.epoch));
                self.place(c, p, t, until);
            } else {
                break;
            }
        }
        for phase in [Phase::Reservation, Phase::Shares] {
            loop {
                let top = match phase {
                    Phase::Reservation => self.nodes[p].by_r.peek().copied(),
                    Phase::Shares => self.nodes[p].by_s.peek().copied(),
                };
                let Some(Reverse(e)) = top else { break };
                let (tag, c, v) = (e.key(), e.1 as usize, e.2);
                if v != self.nodes[c].version || self.nodes[c].state != State::Ready {
                    match phase {
                        Phase::Reservation => self.nodes[p].by_r.pop(),
                        Phase::Shares => self.nodes[p].by_s.pop(),
                    };
                    continue;
                }
                if phase == Phase::Reservation && tag > t {
                    break;
                }
                if !self.limit_ok(c, t, Some(shared)) {
                    // A shared bucket was drained by another uplink: hold it here too.
                    let until = self.nodes[c].shared_limit.map(|LimitId(b)| shared.tag(b, self.epoch));
                    self.place(c, p, t, until);
                    continue;
                }
                return Some((c, phase));
            }
        }
        None
    }

    /// The earliest release time among the held children of `i`.
    fn earliest_held(&mut self, i: usize) -> f64 {
        while let Some(&Reverse(e)) = self.nodes[i].held.peek() {
            let (when, c, v) = (e.key(), e.1, e.2);
            if v == self.nodes[c as usize].version {
                return when;
            }
            self.nodes[i].held.pop();
        }
        f64::INFINITY
    }

    /// The earliest time after `now` at which a backlogged node's limit clock releases it.
    pub fn next_eligible(&self, now: Instant, shared: &SharedLimits) -> Option<Instant> {
        let t = epoch_offset(now.as_nanos(), self.epoch);
        self.nodes
            .iter()
            .filter(|n| n.backlog > 0)
            .map(|n| match n.shared_limit {
                Some(LimitId(b)) => shared.tag(b, self.epoch),
                None => n.l_tag,
            })
            .filter(|&tag| tag > t && tag.is_finite())
            .fold(None, |acc: Option<f64>, tag| Some(acc.map_or(tag, |a| a.min(tag))))
            .map(|tag| Instant::from_nanos(self.epoch.saturating_add(tag.ceil() as u64)))
    }
}
