//! The packet scheduler: hClock-style tags that deliver the [`allocate`](super::allocate) rule.
//!
//! Model. One [`Scheduler`] per uplink, over the same tree as the allocator, with a FIFO per
//! leaf. Every node keeps three tags (R and L in nanoseconds of engine time, S in shares units):
//! - R, its reservation clock: advanced by `bits / reservation` only when the node is served in
//!   the *reservation phase*; a node is due while its R tag is at or before `now`;
//! - L, its limit clock: advanced by `bits / limit` on every service; the node is eligible while
//!   its L tag is at or before `now` (allowed to lag by [`Scheduler::LIMIT_LAG_NS`] while busy);
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
//! Each inner node keeps its backlogged children in three priority queues, as mClock does: ready
//! by R tag, ready by S tag, and held (by limit, or because every leaf below is held) by release
//! time ([`tourney`]: a heap while few children are in one, a tournament tree while many are),
//! so a dequeue costs O(depth · log n).
//!
//! Ties. Children with equal tags go in the order of the round they were filed in (how many
//! times the parent's virtual time had risen), then by their place in the tree. A child waking
//! from idle is filed in round 0, ahead of every child waiting with its tag: its tag is the
//! virtual time itself, so in the fluid model it is owed service now, while the others' equal
//! tags come from service they have had. Filing it in the present round instead made it wait
//! behind every tied peer, so a request/response port's latency was its round trip rounded up to
//! whole rounds of all the busy ports (the `rr_latency_fifo_vs_netioc` test: 61.3 µs with twelve
//! greedy ports against 51.1 µs now). Children re-filed after service, release or a change of
//! controls file in the present round, behind those filed before them.
//!
//! A leaf's limit may instead be a [`SharedLimits`] bucket, shared by the schedulers of every
//! uplink the port uses: a vNIC's limit is one cap across its uplinks.
//!
//! Precision. Tags are f64, so they are kept small: R and L tags (and held release times) count
//! nanoseconds from the scheduler's own epoch, which is moved up to `now` once `now` is
//! [`Scheduler::REBASE_NS`] past it (every tag shifted by the same amount, queues re-keyed; the
//! order of every queue is kept, since subtracting one number is monotone). S tags count from
//! their parent's virtual time, which is subtracted out at the same moments. An f64 holding at
//! most a few seconds of nanoseconds (or of shares units) resolves far below one byte at
//! 100 Gbit/s, so the allocation a year after start is the allocation at start. A
//! [`SharedLimits`] keeps its own epoch; a scheduler reads and writes its buckets through the
//! difference of the two epochs (an exact integer).
//!
//! Layout (for speed; none of it changes a decision). With thousands of backlogged leaves, every
//! packet visits a leaf that has not been touched for thousands of packets, so the cost is in
//! cache misses and in chains of dependent loads; the layout keeps a visit to about one line:
//! - Each node's per-packet state (S and L tags and costs, its FIFO's ends and first packet's
//!   length, backlog, position, parent, state) is one 64-byte line ([`Hot`]); R tags,
//!   reservations and shared-bucket ids, which a limits-and-shares tree never reads, live apart
//!   ([`Cold`]), as do an inner node's queues and virtual time ([`Inner`]).
//! - Packets wait in one slab of slots shared by all leaves: each leaf's FIFO is a singly linked
//!   list through it, and a slot also holds its successor's length. The leaf's line thus knows
//!   its first packet's length, so the charge and the re-keying never wait for the slot's line;
//!   freed slots are reused last-in first-out, so an enqueue writes a line still in cache.
//! - The root has a fast path: when no held child is due and no reservation is due there, and
//!   the least S tag is a leaf that its limit lets send, that leaf is served without the general
//!   walk (which would pick the same leaf).
//! - Costs are per byte (8 / shares, ns per byte), so a charge is one multiplication of the
//!   length; scaling by 8 is exact in binary floating point, so every tag is bit for bit what a
//!   per-bit cost times `8 · len` gives.
//! - A node without a reservation leaves its R tag alone when it wakes: the only reader of that
//!   tag, [`Scheduler::set_controls`] giving it a reservation, takes `max(R, now)`, which under an
//!   engine clock that never goes back is `now` either way.
//! - Times are differences of `u64` nanoseconds converted once to f64 (no 128-bit arithmetic).

use super::{NodeId, Tree};
use crate::Instant;

mod tourney;
use tourney::{from_ord_key, ord_key, Tourney, ABSENT};

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

/// What to add to a time counted from epoch `from` to count it from epoch `to`: the exact
/// integer difference, rounded once to an f64.
#[inline]
fn epoch_offset(from: u64, to: u64) -> f64 {
    if from >= to {
        (from - to) as f64
    } else {
        -((to - from) as f64)
    }
}

/// The larger of two tags, neither of them NaN (`f64::max` without its NaN handling).
#[inline]
fn max(a: f64, b: f64) -> f64 {
    if a > b {
        a
    } else {
        b
    }
}

/// "No slot" / "no node" in the u32 links.
const NONE: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    Ready,
    Held,
}

/// What every packet through a node reads and writes, in one cache line.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Hot {
    /// S tag, in shares units (see the module's "Precision").
    s_tag: f64,
    /// L tag, in nanoseconds since the scheduler's epoch.
    l_tag: f64,
    /// Shares-clock units per byte: 8 / shares.
    s_cost: f64,
    /// Nanoseconds per byte under the limit; 0 = unlimited.
    l_cost: f64,
    /// The node's FIFO: first and last slot (NONE when empty), its length and its first
    /// packet's length.
    head: u32,
    tail: u32,
    queued: u32,
    head_len: u32,
    /// The node's position among its parent's children (in the parent's queues).
    pos: u32,
    /// Backlogged leaves in this subtree.
    backlog: u32,
    /// The parent's index; NONE for the root.
    parent: u32,
    state: State,
    /// Whether the node has a reservation (its R tag and cost are in [`Cold`]).
    reserved: bool,
    /// Whether a [`SharedLimits`] bucket (named in [`Cold`]) replaces its own limit.
    shared: bool,
}

/// A node's state that only reservations and shared limits read.
#[derive(Debug, Clone, Copy)]
struct Cold {
    /// R tag, in nanoseconds since the scheduler's epoch.
    r_tag: f64,
    /// Nanoseconds per byte under the reservation; 0 = no reservation.
    r_cost: f64,
    /// The shared limit bucket, if `Hot::shared`.
    bucket: u32,
}

/// An inner node's children, by phase, and its virtual time.
#[derive(Debug, Clone, Default)]
struct Inner {
    /// The S tag of the last child picked in the shares phase: this node's virtual time.
    vtime: f64,
    /// How many times `vtime` has risen, from 1 (renumbered before it would wrap): entries
    /// filed in the queues carry it (0 for a waking child), and win ties against entries filed
    /// in later rounds ([`tourney`]).
    round: u32,
    /// Children ready, by R tag (only children with a reservation).
    by_r: Tourney,
    /// Children ready, by S tag.
    by_s: Tourney,
    /// Children held back, by the time they may be released.
    held: Tourney,
}

/// A queued packet: the item, the next slot of its FIFO (or of the free list) and that next
/// packet's length.
#[derive(Debug, Clone)]
struct Slot<T> {
    next: u32,
    next_len: u32,
    item: Option<T>,
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
    hot: Vec<Hot>,
    cold: Vec<Cold>,
    inner: Vec<Inner>,
    slots: Vec<Slot<T>>,
    /// The first free slot (NONE: none; the slab grows).
    free: u32,
    /// The nodes picked on the way down, with their phase.
    path: Vec<(u32, Phase)>,
    /// Engine time (ns) the R and L tags count from; see the module's "Precision".
    epoch: u64,
}

/// Nanoseconds per byte at `bps` bits per second; 0 for none.
fn ns_per_byte(bps: f64) -> f64 {
    if bps > 0.0 {
        8.0 * (1e9 / bps)
    } else {
        0.0
    }
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

    /// The lag allowed for a limit clock costing `cost` nanoseconds per byte (the same figure as
    /// [`Scheduler::limit_slack`] of the per-bit cost: the factor 8 moves exactly).
    #[inline]
    fn limit_slack_bytes(cost: f64) -> f64 {
        max(Self::LIMIT_LAG_NS, Self::LIMIT_MIN_BURST_BYTES * cost)
    }

    /// A scheduler for `tree`; a `(leaf, bucket)` pair in `shared` replaces that leaf's own limit.
    pub fn new(tree: &Tree, shared: &[(NodeId, LimitId)]) -> Scheduler<T> {
        let mut hot = Vec::with_capacity(tree.len());
        let mut cold = Vec::with_capacity(tree.len());
        let mut inner = Vec::with_capacity(tree.len());
        let mut depth = vec![0usize; tree.len()];
        // Each node's shared bucket and position among its siblings, found in one pass each (a
        // tree of thousands of ports is built while the switch runs: not quadratic).
        let mut buckets = vec![None; tree.len()];
        for &(nid, l) in shared {
            buckets[nid.0] = Some(l.0);
        }
        let mut positions = vec![0usize; tree.len()];
        for id in tree.ids() {
            for (k, c) in tree.node(id).children.iter().enumerate() {
                positions[c.0] = k;
            }
        }
        for id in tree.ids() {
            let n = tree.node(id);
            let bucket = buckets[id.0];
            let r_cost = ns_per_byte(n.spec.reservation.bps_f64());
            let pos = positions[id.0];
            if let Some(p) = n.parent {
                depth[id.0] = depth[p.0] + 1;
            }
            hot.push(Hot {
                s_tag: 0.0,
                l_tag: f64::NEG_INFINITY,
                s_cost: 8.0 * (1.0 / f64::from(n.spec.shares.get())),
                l_cost: n.spec.limit.map_or(0.0, |l| ns_per_byte(l.bps_f64())),
                head: NONE,
                tail: NONE,
                queued: 0,
                head_len: 0,
                pos: pos as u32,
                backlog: 0,
                parent: n.parent.map_or(NONE, |p| p.0 as u32),
                state: State::Idle,
                reserved: r_cost > 0.0,
                shared: bucket.is_some(),
            });
            cold.push(Cold {
                r_tag: f64::NEG_INFINITY,
                r_cost,
                bucket: bucket.map_or(NONE, |b| b as u32),
            });
            let kids: Vec<u32> = n.children.iter().map(|c| c.0 as u32).collect();
            inner.push(Inner {
                vtime: 0.0,
                round: 1,
                by_r: Tourney::new(kids.clone()),
                by_s: Tourney::new(kids.clone()),
                held: Tourney::new(kids),
            });
        }
        Scheduler {
            hot,
            cold,
            inner,
            slots: Vec::new(),
            free: NONE,
            path: Vec::with_capacity(depth.iter().max().map_or(0, |d| d + 1)),
            epoch: 0,
        }
    }

    /// Moves node `p`'s round count to `n` (tests: the wrap and renumbering).
    #[cfg(test)]
    pub(super) fn set_round(&mut self, p: usize, n: u32) {
        self.inner[p].round = n;
    }

    /// Node `i`'s parent, if it has one.
    #[inline]
    fn parent(&self, i: usize) -> Option<usize> {
        let p = self.hot[i].parent;
        (p != NONE).then_some(p as usize)
    }

    /// Node `i`'s shared limit bucket, if it has one.
    #[inline]
    fn bucket(&self, i: usize) -> Option<usize> {
        self.hot[i].shared.then(|| self.cold[i].bucket as usize)
    }

    /// `now` in nanoseconds since the tags' epoch, moving the epoch up first if `now` has run
    /// [`Scheduler::REBASE_NS`] past it.
    #[inline]
    fn time(&mut self, now: Instant) -> f64 {
        let now = now.as_nanos();
        match now.checked_sub(self.epoch) {
            // Below 2^32: the signed conversion is one instruction and exact.
            Some(d) if d < REBASE_NS => d as i64 as f64,
            Some(_) => {
                self.rebase(now);
                0.0
            }
            None => epoch_offset(now, self.epoch),
        }
    }

    /// Moves the epoch to `now`: every time-valued tag and queue key down by the same amount, and
    /// every node's children's S tags down by the node's virtual time.
    fn rebase(&mut self, now: u64) {
        let shift = (now - self.epoch) as f64;
        let vtimes: Vec<f64> = self.inner.iter().map(|n| n.vtime).collect();
        for i in 0..self.hot.len() {
            self.cold[i].r_tag -= shift;
            let h = &mut self.hot[i];
            h.l_tag -= shift;
            if h.parent != NONE {
                h.s_tag -= vtimes[h.parent as usize];
            }
            let n = &mut self.inner[i];
            let vt = n.vtime;
            n.by_r.map_keys(|k| ord_key(from_ord_key(k) - shift));
            n.held.map_keys(|k| ord_key(from_ord_key(k) - shift));
            n.by_s.map_keys(|k| ord_key(from_ord_key(k) - vt));
            n.vtime = 0.0;
        }
        self.epoch = now;
    }

    /// A slot holding `item`, the free list's first or a new one.
    #[inline]
    fn alloc(&mut self, item: T) -> u32 {
        if self.free == NONE {
            assert!(self.slots.len() < NONE as usize, "at most 2^32 - 1 packets queued");
            self.slots.push(Slot {
                next: NONE,
                next_len: 0,
                item: Some(item),
            });
            return (self.slots.len() - 1) as u32;
        }
        let s = self.free;
        let slot = &mut self.slots[s as usize];
        self.free = slot.next;
        slot.next = NONE;
        slot.item = Some(item);
        s
    }

    /// Queues a packet of `len` bytes on leaf `leaf`.
    #[inline]
    pub fn enqueue(&mut self, leaf: NodeId, len: u32, item: T, now: Instant) {
        let s = self.alloc(item);
        let h = &mut self.hot[leaf.0];
        h.queued += 1;
        if h.queued > 1 {
            let tail = std::mem::replace(&mut h.tail, s) as usize;
            let t = &mut self.slots[tail];
            t.next = s;
            t.next_len = len;
            return;
        }
        h.head = s;
        h.tail = s;
        h.head_len = len;
        self.wake_path(leaf.0, now);
    }

    /// A leaf's queue went from empty to one packet: counts it in the backlog of every node up
    /// to the root, waking idle ones (and re-filing held ones whose limit allows sending now).
    fn wake_path(&mut self, leaf: usize, now: Instant) {
        let t = self.time(now);
        let mut at = leaf;
        while let Some(parent) = self.parent(at) {
            self.hot[at].backlog += 1;
            match self.hot[at].state {
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
        self.hot[at].backlog += 1;
    }

    /// Re-synchronises an idle node's tags so that it banks no credit.
    fn wake(&mut self, i: usize, t: f64) {
        let vt = self.parent(i).map_or(0.0, |p| self.inner[p].vtime);
        let n = &mut self.hot[i];
        if n.reserved {
            let c = &mut self.cold[i];
            c.r_tag = max(c.r_tag, t);
        }
        n.l_tag = max(n.l_tag, t);
        n.s_tag = max(n.s_tag, vt);
    }

    /// Files backlogged node `i` in its parent's queues: ready if its limit allows sending at `t`
    /// (and nothing below is known to be held until later), else held until its release time.
    fn place(&mut self, i: usize, parent: usize, t: f64, held_below_until: Option<f64>) {
        let own = self.release_time(i);
        let release = held_below_until.map_or(own, |b| max(b, own));
        let n = &mut self.hot[i];
        let (pos, c, was) = (n.pos, i as u32, n.state);
        let p = &mut self.inner[parent];
        // A child waking from idle files in round 0, ahead of every child waiting with the same
        // tag (see the module's "Ties"); one re-filed after service or a change files in the
        // present round, behind those filed before it.
        let round = if was == State::Idle { 0 } else { p.round };
        if release <= t {
            n.state = State::Ready;
            if n.reserved {
                p.by_r.set(pos, c, ord_key(self.cold[i].r_tag), round);
            } else if was == State::Ready {
                p.by_r.set(pos, c, ABSENT, 0);
            }
            p.by_s.set(pos, c, ord_key(n.s_tag), round);
            if was == State::Held {
                p.held.set(pos, c, ABSENT, 0);
            }
        } else {
            n.state = State::Held;
            if was == State::Ready {
                p.by_r.set(pos, c, ABSENT, 0);
                p.by_s.set(pos, c, ABSENT, 0);
            }
            p.held.set(pos, c, ord_key(release), round);
        }
    }

    /// Starts node `p`'s next virtual-time round; before the count would wrap, the rounds filed
    /// in its queues are numbered anew `1, 2, ...` in their order (which changes no decision);
    /// round 0, a waking child's, stays 0.
    fn next_round(&mut self, p: usize) {
        let n = &mut self.inner[p];
        if n.round == u32::MAX {
            let mut used: Vec<u32> = n.by_r.rounds().chain(n.by_s.rounds()).chain(n.held.rounds()).collect();
            used.retain(|&r| r != 0);
            used.sort_unstable();
            used.dedup();
            let rank = |r: u32| {
                if r == 0 {
                    0
                } else {
                    used.partition_point(|&u| u < r) as u32 + 1
                }
            };
            n.by_r.map_rounds(rank);
            n.by_s.map_rounds(rank);
            n.held.map_rounds(rank);
            n.round = used.len() as u32;
        }
        n.round += 1;
    }

    /// Takes node `i`, which has no backlog left, out of its parent's queues.
    fn idle(&mut self, i: usize, parent: usize) {
        let n = &mut self.hot[i];
        let (pos, c, was) = (n.pos, i as u32, n.state);
        n.state = State::Idle;
        let p = &mut self.inner[parent];
        match was {
            State::Ready => {
                // A ready node is in `by_r` exactly when it has a reservation (`place` keeps it so).
                if n.reserved {
                    p.by_r.set(pos, c, ABSENT, 0);
                }
                p.by_s.set(pos, c, ABSENT, 0);
            }
            State::Held => p.held.set(pos, c, ABSENT, 0),
            State::Idle => {}
        }
    }

    /// The time node `i`'s own limit next lets it send. A shared bucket is read through the
    /// `SharedLimits` passed to `dequeue`, so here it counts as released; `pick` checks it.
    #[inline]
    fn release_time(&self, i: usize) -> f64 {
        if self.hot[i].shared {
            f64::NEG_INFINITY
        } else {
            self.hot[i].l_tag
        }
    }

    /// Whether node `i`'s own limit lets it send at `t`.
    #[inline]
    fn limit_ok(&self, i: usize, t: f64, shared: Option<&SharedLimits>) -> bool {
        match (self.bucket(i), shared) {
            (Some(b), Some(s)) => s.tag(b, self.epoch) <= t,
            (Some(_), None) => true,
            (None, _) => self.hot[i].l_tag <= t,
        }
    }

    /// Applies new controls to node `id` from `now` on: its R and L clocks restart at `now` (no
    /// credit from before), and it is re-filed in its parent so a new reservation is seen at
    /// once. Admission control is the caller's: see [`super::admission::set_controls`].
    pub fn set_controls(&mut self, id: NodeId, spec: &super::NodeSpec, now: Instant) {
        let t = self.time(now);
        let c = &mut self.cold[id.0];
        c.r_cost = ns_per_byte(spec.reservation.bps_f64());
        c.r_tag = c.r_tag.max(t);
        let n = &mut self.hot[id.0];
        n.reserved = c.r_cost > 0.0;
        n.s_cost = 8.0 * (1.0 / f64::from(spec.shares.get()));
        n.l_cost = spec.limit.map_or(0.0, |l| ns_per_byte(l.bps_f64()));
        n.l_tag = t;
        if let (Some(parent), true) = (self.parent(id.0), self.hot[id.0].state != State::Idle) {
            self.place(id.0, parent, t, None);
            // Ancestors held only because everything below them was held may send again (a
            // limit lifted or raised): re-file them, as a new packet would.
            let mut at = parent;
            while let Some(up) = self.parent(at) {
                if self.hot[at].state == State::Held && self.limit_ok(at, t, None) {
                    self.place(at, up, t, None);
                }
                at = up;
            }
        }
    }

    /// Packets queued on `leaf`.
    #[inline]
    pub fn queued(&self, leaf: NodeId) -> usize {
        self.hot[leaf.0].queued as usize
    }

    /// Takes the next packet to send at `now`: `(leaf, bytes, item)`, or None if every backlogged
    /// leaf is held back by a limit (see [`Scheduler::next_eligible`]).
    #[inline]
    pub fn dequeue(&mut self, now: Instant, shared: &mut SharedLimits) -> Option<(NodeId, u32, T)> {
        if self.hot[0].backlog == 0 {
            return None;
        }
        // The root fast path: no epoch to move, no held child due and no reservation due at the
        // root, and the least S tag there is a leaf of its own limit that may send. Then the
        // general walk would pick that leaf in the shares phase; this does exactly that, with
        // fewer steps. Anything else takes the general walk.
        let now_ns = now.as_nanos();
        let d = now_ns.wrapping_sub(self.epoch);
        if d >= REBASE_NS || now_ns.wrapping_sub(shared.epoch) >= REBASE_NS {
            return self.dequeue_walk(now, shared);
        }
        let t = d as i64 as f64;
        let tk = ord_key(t);
        let root = &self.inner[0];
        if root.held.min_key() <= tk || root.by_r.min_key() <= tk {
            return self.dequeue_walk(now, shared);
        }
        let Some(w) = root.by_s.peek() else {
            return self.dequeue_walk(now, shared);
        };
        let c = w.child as usize;
        let h = &self.hot[c];
        if h.shared || h.l_tag > t || h.queued == 0 {
            return self.dequeue_walk(now, shared);
        }
        let (len, item, emptied) = self.pop(c);
        self.charge(c, Phase::Shares, f64::from(len), emptied, t, shared);
        if emptied {
            self.hot[0].backlog -= 1;
        }
        Some((NodeId(c), len, item))
    }

    /// [`Scheduler::dequeue`] by the general walk from the root.
    fn dequeue_walk(&mut self, now: Instant, shared: &mut SharedLimits) -> Option<(NodeId, u32, T)> {
        let t = self.time(now);
        if now.as_nanos().saturating_sub(shared.epoch) >= REBASE_NS {
            shared.rebase(now.as_nanos());
        }
        let leaf = self.descend(t, shared)?;
        let (len, item, emptied) = self.pop(leaf);
        let bytes = f64::from(len);
        // Charge every node on the path by its phase, deepest first, and refile it.
        for k in (0..self.path.len()).rev() {
            let (i, phase) = self.path[k];
            self.charge(i as usize, phase, bytes, emptied, t, shared);
        }
        if emptied {
            self.hot[0].backlog -= 1;
        }
        Some((NodeId(leaf), len, item))
    }

    /// Takes the first packet of `leaf`'s FIFO: `(len, item, whether the FIFO is now empty)`.
    /// Its length was in the leaf's line, and its slot hands over the next packet's.
    #[inline]
    fn pop(&mut self, leaf: usize) -> (u32, T, bool) {
        let h = &mut self.hot[leaf];
        let (s, len) = (h.head as usize, h.head_len);
        let slot = &mut self.slots[s];
        let item = slot.item.take().expect("a queued slot holds its packet");
        h.head = slot.next;
        h.head_len = slot.next_len;
        h.queued -= 1;
        let emptied = h.queued == 0;
        if emptied {
            h.tail = NONE;
        }
        slot.next = self.free;
        self.free = s as u32;
        (len, item, emptied)
    }

    /// Walks from the root to the leaf to serve at `t`, recording the path; None if every
    /// backlogged leaf is held.
    #[inline]
    fn descend(&mut self, t: f64, shared: &SharedLimits) -> Option<usize> {
        self.path.clear();
        let mut at = 0;
        loop {
            let h = &self.hot[at];
            if h.queued > 0 && h.backlog > 0 && h.parent != NONE {
                return Some(at);
            }
            match self.pick(at, t, shared) {
                Some((c, phase)) => {
                    self.path.push((c as u32, phase));
                    at = c;
                }
                None if at == 0 => return None,
                None => {
                    // Everything below `at` is held: hold `at` in its parent until the earliest
                    // release below, and look again from the root.
                    let below = self.inner[at]
                        .held
                        .peek()
                        .map_or(f64::INFINITY, |w| from_ord_key(w.key));
                    let parent = self.parent(at).expect("not the root");
                    self.place(at, parent, t, Some(below));
                    self.path.clear();
                    at = 0;
                }
            }
        }
    }

    /// Charges node `i`, served in `phase`, for `bytes` and refiles it in its parent: still
    /// ready (re-keyed in the phase's queue), held by its limit, or idle if `emptied` took its
    /// last backlogged leaf.
    #[inline]
    fn charge(&mut self, i: usize, phase: Phase, bytes: f64, emptied: bool, t: f64, shared: &mut SharedLimits) {
        let n = &mut self.hot[i];
        let parent = n.parent as usize;
        let key = match phase {
            Phase::Reservation => {
                let c = &mut self.cold[i];
                c.r_tag += bytes * c.r_cost;
                c.r_tag
            }
            Phase::Shares => {
                let start = n.s_tag;
                n.s_tag += bytes * n.s_cost;
                if start > self.inner[parent].vtime {
                    self.next_round(parent);
                }
                self.inner[parent].vtime = start;
                self.hot[i].s_tag
            }
        };
        let n = &mut self.hot[i];
        let release = if n.shared {
            // The bucket's tag counts from its own epoch: `to_shared` converts ours.
            let to_shared = epoch_offset(self.epoch, shared.epoch);
            let (cost, tag) = &mut shared.buckets[self.cold[i].bucket as usize];
            let ts = t + to_shared;
            let start = if tag.is_finite() {
                tag.max(ts - Self::limit_slack(*cost))
            } else {
                ts
            };
            *tag = start + bytes * 8.0 * *cost;
            *tag - to_shared
        } else {
            if n.l_cost > 0.0 {
                n.l_tag = max(n.l_tag, t - Self::limit_slack_bytes(n.l_cost)) + bytes * n.l_cost;
            }
            n.l_tag
        };
        if emptied {
            n.backlog -= 1;
        }
        if n.backlog == 0 {
            self.idle(i, parent);
        } else if release <= t {
            // Still ready: only the tag of the phase it was served in moved; the other queue's
            // key stays right.
            // It was picked as the least of that queue, and its key only rose.
            let (pos, p) = (n.pos, &mut self.inner[parent]);
            match phase {
                Phase::Reservation => p.by_r.rekey_top(pos, i as u32, ord_key(key), p.round),
                Phase::Shares => p.by_s.rekey_top(pos, i as u32, ord_key(key), p.round),
            }
        } else {
            self.place(i, parent, t, Some(release));
        }
    }

    /// Picks the child of `p` to serve at `t`: the earliest due R tag, else the smallest S tag,
    /// after releasing held children whose time has come.
    #[inline]
    fn pick(&mut self, p: usize, t: f64, shared: &SharedLimits) -> Option<(usize, Phase)> {
        let tk = ord_key(t);
        if self.inner[p].held.min_key() <= tk {
            self.release_held(p, t, tk, shared);
        }
        if self.inner[p].by_r.min_key() <= tk {
            if let Some(c) = self.first_ready(p, Phase::Reservation, t, tk, shared) {
                return Some((c, Phase::Reservation));
            }
        }
        self.first_ready(p, Phase::Shares, t, tk, shared)
            .map(|c| (c, Phase::Shares))
    }

    /// Re-files the held children of `p` whose release time has come, earliest first.
    fn release_held(&mut self, p: usize, t: f64, tk: u64, shared: &SharedLimits) {
        while let Some(w) = self.inner[p].held.peek().filter(|w| w.key <= tk) {
            let c = w.child as usize;
            let until = self.bucket(c).map(|b| shared.tag(b, self.epoch));
            self.place(c, p, t, until);
        }
    }

    /// The first child in `p`'s queue of `phase` that its limit lets send at `t` (R tags: due by
    /// `t`), holding those a shared bucket drained meanwhile.
    #[inline]
    fn first_ready(&mut self, p: usize, phase: Phase, t: f64, tk: u64, shared: &SharedLimits) -> Option<usize> {
        loop {
            let q = match phase {
                Phase::Reservation => &self.inner[p].by_r,
                Phase::Shares => &self.inner[p].by_s,
            };
            let w = q.peek()?;
            if phase == Phase::Reservation && w.key > tk {
                return None;
            }
            let c = w.child as usize;
            if self.limit_ok(c, t, Some(shared)) {
                return Some(c);
            }
            // A shared bucket was drained by another uplink: hold it here too.
            let until = self.bucket(c).map(|b| shared.tag(b, self.epoch));
            self.place(c, p, t, until);
        }
    }

    /// The earliest time after `now` at which a backlogged node's limit clock releases it.
    pub fn next_eligible(&self, now: Instant, shared: &SharedLimits) -> Option<Instant> {
        let t = epoch_offset(now.as_nanos(), self.epoch);
        (0..self.hot.len())
            .filter(|&i| self.hot[i].backlog > 0)
            .map(|i| match self.bucket(i) {
                Some(b) => shared.tag(b, self.epoch),
                None => self.hot[i].l_tag,
            })
            .filter(|&tag| tag > t && tag.is_finite())
            .fold(None, |acc: Option<f64>, tag| Some(acc.map_or(tag, |a| a.min(tag))))
            .map(|tag| Instant::from_nanos(self.epoch.saturating_add(tag.ceil() as u64)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn heap_keys_keep_the_float_order(a in proptest::num::f64::ANY, b in proptest::num::f64::ANY) {
            prop_assume!(!a.is_nan() && !b.is_nan());
            let (ea, eb) = (ord_key(a), ord_key(b));
            prop_assert_eq!(from_ord_key(ea).to_bits(), a.to_bits());
            if a < b { prop_assert!(ea < eb); }
            if a > b { prop_assert!(ea > eb); }
        }
    }

    /// A year of service at 10 Gbit/s leaves S tags and virtual times near 3e17 bits per share,
    /// where an f64 step is 64: without rebasing, a 128-byte frame's charge (1024 / shares) would
    /// be rounded by up to 6%. The first call a year after start rebases them, and the split by
    /// shares is exact again.
    #[test]
    fn shares_hold_after_a_year_of_service() {
        let mut t = Tree::new("uplink");
        let spec = |name: &str, s: u32| crate::ioc::NodeSpec {
            name: name.into(),
            reservation: crate::units::Bandwidth::ZERO,
            shares: crate::ioc::Shares::new(s).unwrap(),
            limit: None,
        };
        let a = t.add(NodeId::ROOT, spec("a", 1)).unwrap();
        let b = t.add(NodeId::ROOT, spec("b", 3)).unwrap();
        let mut s: Scheduler<()> = Scheduler::new(&t, &[]);
        let year_of_bits = 10e9 * 365.0 * 24.0 * 3600.0;
        for n in s.hot.iter_mut() {
            n.s_tag = year_of_bits;
        }
        for n in s.inner.iter_mut() {
            n.vtime = year_of_bits;
        }
        let mut shared = SharedLimits::default();
        let start = 365 * 24 * 3600 * 1_000_000_000u64;
        let mut sent = [0u64; 2];
        for k in 0..400_000u64 {
            let now = Instant::from_nanos(start + k * 10); // 128 B at ~100 Gbit/s
            for leaf in [a, b] {
                if s.queued(leaf) < 2 {
                    s.enqueue(leaf, 128, (), now);
                }
            }
            let (leaf, _, ()) = s.dequeue(now, &mut shared).unwrap();
            sent[usize::from(leaf == b)] += 1;
        }
        let ratio = sent[1] as f64 / sent[0] as f64;
        assert!((ratio - 3.0).abs() < 0.01 * 3.0, "{sent:?}: {ratio}");
    }

    /// Before a parent's round count wraps, the rounds filed in its queues become 1, 2, ... in
    /// their order and the count goes on from there; a waking child's round 0 stays 0.
    #[test]
    fn rounds_are_renumbered_in_order_before_they_wrap() {
        let mut t = Tree::new("uplink");
        let spec = |name: &str| crate::ioc::NodeSpec {
            name: name.into(),
            reservation: crate::units::Bandwidth::ZERO,
            shares: crate::ioc::Shares::NORMAL,
            limit: None,
        };
        let leaves: Vec<NodeId> = ["a", "b", "c"]
            .iter()
            .map(|n| t.add(NodeId::ROOT, spec(n)).unwrap())
            .collect();
        let mut s: Scheduler<()> = Scheduler::new(&t, &[]);
        let mut shared = SharedLimits::default();
        // Each wakes (round 0) with two packets; a and b are served once, re-filed in rounds
        // near the wrap; c still waits in round 0.
        for leaf in &leaves {
            s.enqueue(*leaf, 100, (), Instant::ZERO);
            s.enqueue(*leaf, 100, (), Instant::ZERO);
        }
        for (want, round) in [(leaves[0], u32::MAX - 7), (leaves[1], u32::MAX)] {
            s.inner[0].round = round;
            assert_eq!(s.dequeue(Instant::ZERO, &mut shared).unwrap().0, want);
        }
        s.next_round(0);
        assert_eq!(s.inner[0].round, 3);
        let mut rounds: Vec<u32> = s.inner[0].by_s.rounds().collect();
        rounds.sort_unstable();
        assert_eq!(rounds, [0, 1, 2]);
        // The order is kept: c (the lower tag), then a and b (equal tags, a filed first).
        let order: Vec<NodeId> = (0..3)
            .map(|_| s.dequeue(Instant::ZERO, &mut shared).unwrap().0)
            .collect();
        assert_eq!(order, [leaves[2], leaves[0], leaves[1]]);
    }

    #[test]
    fn infinities_and_zero_order() {
        let keys = [f64::NEG_INFINITY, -1e18, -1.0, 0.0, 1e-9, 1.0, 1e18, f64::INFINITY];
        for w in keys.windows(2) {
            assert!(ord_key(w[0]) < ord_key(w[1]), "{} < {}", w[0], w[1]);
        }
    }
}
