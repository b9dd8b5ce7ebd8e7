//! Each sender's part of an uplink's queue budget: its NetIOC allocation's worth of waiting.
//!
//! Model. Past an uplink's byte budget ([`super::queue_limit`]) a frame still joins while its
//! sender (a port, or a class that sends for the host) holds less than its *fair part*. The
//! fair part is the budget times the fraction of the uplink the sender's NetIOC allocation is,
//! every *active* sender taken as greedy: a sender is active if it queued a frame on this uplink
//! in the last [`ACTIVE`]. So every sender may hold the same *time* of waiting, the budget's
//! time at the rate the scheduler serves it: a port reserved and served at 75% of the uplink
//! holds up to 75% of the budget, a port held to 10% by its limit up to 10%.
//!
//! Why. A TCP sender keeps its rate only while its queue does not run dry after it slows down
//! for a drop or a mark, so what it may hold must grow with the rate it is given. An equal split
//! (the budget divided among the senders with frames waiting) gave the busiest sender the
//! shortest queue in time: a reserved port served at 75% of a 100 Mbit/s uplink beside two
//! others could hold a third of the budget, 1.7 ms of its own sending, while the others could
//! hold 11 ms; its TCP saw drops first and fell to under half its reservation.
//!
//! Allocations come from the fluid allocator ([`super::allocate`]) over the tree, with every
//! active sender's demand unlimited and every other leaf's zero. They are computed again at
//! most every [`REFRESH`], at once after the tree or the capacity changes, and after
//! [`JOIN_REFRESH`] when a sender that was not active appears.
//!
//! A part is never less than an equal split's (the budget divided among the senders with frames
//! waiting, its own included, the rule before this one), nor than [`MIN_PART`]. So a newcomer,
//! not yet counted, is never shut out; a port allocated little still has room for a burst of
//! its own, its queue only the longer in time (the scheduler, not the queue, holds it to its
//! allocation); and a port allocated little on a fast uplink can still have a frame waiting.
//! What matters for TCP is that no part is *short* for its port's rate; a part that is long
//! costs its own port's latency and is bounded.
//!
//! Bound: the allocations of the senders add up to at most the capacity, so the allocation
//! parts add up to at most the budget, and the equal-split floors to at most another: the parts
//! add up to less than twice the budget (plus [`MIN_PART`] each).

use super::{allocate, NodeId, Tree};
use crate::Instant;

/// A sender that queued nothing for this long is no longer active.
pub const ACTIVE: u64 = 50_000_000;
/// Allocations are recomputed at least this often while they are asked for (ns).
pub const REFRESH: u64 = 10_000_000;
/// A sender that was not active when the allocations were computed has them recomputed after
/// this long at most (ns).
pub const JOIN_REFRESH: u64 = 1_000_000;
/// The least fair part: two full-size frames.
pub const MIN_PART: u64 = 2 * 1518;

/// One uplink's record of its senders and their allocations; see the module documentation.
#[derive(Debug, Clone)]
pub struct QueueShares {
    /// Per node: when it last queued a frame here (None: never).
    last_seen: Vec<Option<Instant>>,
    /// Per node: its allocation in bits/s when last computed, and whether it was active then.
    alloc: Vec<f64>,
    counted: Vec<bool>,
    /// When the allocations were computed (None: they must be, before use).
    computed: Option<Instant>,
}

impl QueueShares {
    /// An uplink's record over a tree of `nodes` nodes, with no sender seen yet.
    pub fn new(nodes: usize) -> QueueShares {
        QueueShares {
            last_seen: vec![None; nodes],
            alloc: vec![0.0; nodes],
            counted: vec![false; nodes],
            computed: None,
        }
    }

    /// Notes that `leaf` queued a frame at `now`.
    pub fn seen(&mut self, leaf: NodeId, now: Instant) {
        self.last_seen[leaf.0] = Some(now);
    }

    /// The tree's controls or the uplink's capacity changed: the allocations are recomputed
    /// before they are used again.
    pub fn invalidate(&mut self) {
        self.computed = None;
    }

    /// The fair part of `leaf`, in bytes, on an uplink of `capacity_bps` with byte budget
    /// `budget` and `waiting` senders with frames waiting (`leaf` included or not), at `now`;
    /// the allocations are brought up to date first if they are due.
    pub fn fair_part(
        &mut self,
        tree: &Tree,
        capacity_bps: f64,
        leaf: NodeId,
        budget: u64,
        waiting: usize,
        now: Instant,
    ) -> u64 {
        let age = self.computed.map(|at| now.as_nanos().saturating_sub(at.as_nanos()));
        let due = match age {
            None => true,
            Some(a) => a >= REFRESH || (!self.counted[leaf.0] && a >= JOIN_REFRESH),
        };
        if due {
            self.compute(tree, capacity_bps, now);
        }
        let equal = (budget / (waiting as u64 + 1)).max(MIN_PART);
        if !self.counted[leaf.0] || capacity_bps <= 0.0 {
            return equal;
        }
        let part = budget as f64 * (self.alloc[leaf.0] / capacity_bps).min(1.0);
        (part as u64).max(equal)
    }

    /// Allocates the uplink among the senders active at `now`, each taken as greedy.
    fn compute(&mut self, tree: &Tree, capacity_bps: f64, now: Instant) {
        let active = |seen: Option<Instant>| seen.is_some_and(|t| now.as_nanos().saturating_sub(t.as_nanos()) < ACTIVE);
        // Inner nodes: no demand of their own (their children's tops cap them). Leaves: unlimited
        // if active, else nothing (a class with no ports is a leaf that sends nothing).
        let demand: Vec<Option<f64>> = tree
            .ids()
            .map(|id| {
                let leaf = tree.node(id).children.is_empty();
                (leaf && !active(self.last_seen[id.0])).then_some(0.0)
            })
            .collect();
        self.alloc = allocate(tree, capacity_bps, &demand).0;
        for id in tree.ids() {
            self.counted[id.0] = tree.node(id).children.is_empty() && active(self.last_seen[id.0]);
        }
        self.computed = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ioc::NodeSpec;
    use crate::units::Bandwidth;

    /// Root of 100 Mbit/s; ports a (reserving 60M), b (limited to 10M) and c.
    fn tree() -> (Tree, [NodeId; 3]) {
        let mut t = Tree::new("uplink");
        let mut add = |name: &str, reservation: u64, limit: Option<u64>| {
            let spec = NodeSpec {
                name: name.into(),
                reservation: Bandwidth::from_mbps(reservation),
                shares: crate::ioc::Shares::NORMAL,
                limit: limit.map(Bandwidth::from_mbps),
            };
            t.add(NodeId::ROOT, spec).unwrap()
        };
        let a = add("a", 60, None);
        let b = add("b", 0, Some(10));
        let c = add("c", 0, None);
        (t, [a, b, c])
    }

    #[test]
    fn a_part_follows_the_allocation_of_the_active_senders() {
        let (t, [a, b, c]) = tree();
        let mut q = QueueShares::new(t.len());
        let now = Instant::from_millis(1000);
        for leaf in [a, b, c] {
            q.seen(leaf, now);
        }
        let budget = 100_000;
        // 60 + 40 split by shares under b's limit: a 75, b 10, c 15 of 100 (nine others
        // waiting: an equal split's tenth does not raise any of them).
        assert_eq!(q.fair_part(&t, 100e6, a, budget, 9, now), 75_000);
        assert_eq!(q.fair_part(&t, 100e6, b, budget, 9, now), 10_000);
        assert_eq!(q.fair_part(&t, 100e6, c, budget, 9, now), 15_000);
        // With one other waiting, b's part is an equal split's half, not its 10%.
        assert_eq!(q.fair_part(&t, 100e6, b, budget, 1, now), 50_000);
        assert_eq!(q.fair_part(&t, 100e6, a, budget, 1, now), 75_000);
        // b goes quiet: past ACTIVE and the next refresh, a and c share what it left (80/20).
        let later = Instant::from_nanos(now.as_nanos() + ACTIVE);
        q.seen(a, later);
        q.seen(c, later);
        assert_eq!(q.fair_part(&t, 100e6, a, budget, 9, later), 80_000);
        assert_eq!(q.fair_part(&t, 100e6, c, budget, 9, later), 20_000);
    }

    #[test]
    fn a_newcomer_gets_an_equal_split_until_the_allocations_are_recomputed() {
        let (t, [a, _, c]) = tree();
        let mut q = QueueShares::new(t.len());
        let now = Instant::from_millis(1000);
        q.seen(a, now);
        assert_eq!(
            q.fair_part(&t, 100e6, a, 90_000, 1, now),
            90_000,
            "alone, a gets it all"
        );
        // c appears within JOIN_REFRESH: an equal split's part with the one sender waiting.
        let soon = Instant::from_nanos(now.as_nanos() + JOIN_REFRESH / 2);
        q.seen(c, soon);
        assert_eq!(q.fair_part(&t, 100e6, c, 90_000, 1, soon), 45_000);
        // After JOIN_REFRESH c is counted: a 80, c 20.
        let after = Instant::from_nanos(now.as_nanos() + JOIN_REFRESH);
        assert_eq!(q.fair_part(&t, 100e6, c, 90_000, 9, after), 18_000);
        assert_eq!(q.fair_part(&t, 100e6, a, 90_000, 9, after), 72_000);
    }

    #[test]
    fn a_change_of_controls_is_seen_at_once_and_a_part_has_a_floor() {
        let (mut t, [a, b, _]) = tree();
        let mut q = QueueShares::new(t.len());
        let now = Instant::from_millis(5);
        q.seen(a, now);
        q.seen(b, now);
        // a 60 + 30 (b capped at 10): 90 of 100.
        assert_eq!(q.fair_part(&t, 100e6, a, 100_000, 99, now), 90_000);
        let mut spec = t.node(b).spec.clone();
        spec.limit = Some(Bandwidth::from_bps(100));
        crate::ioc::admission::set_controls(
            &mut t,
            b,
            spec,
            Bandwidth::from_bps(100_000_000),
            crate::ioc::ReservationCap::new(1.0).unwrap(),
        )
        .unwrap();
        // Without invalidation the old figures stand within REFRESH; with it, b's 100 bit/s is
        // seen, and its part is the floor.
        assert_eq!(q.fair_part(&t, 100e6, b, 100_000, 99, now), 10_000);
        q.invalidate();
        assert_eq!(q.fair_part(&t, 100e6, b, 100_000, 99, now), MIN_PART);
    }
}
