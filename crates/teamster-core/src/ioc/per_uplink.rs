//! [`Ioc`]: Network I/O Control for a whole team: one tree, one packet [`Scheduler`] per uplink,
//! and a limit bucket per port shared by every uplink's scheduler.
//!
//! Model. The tree (classes, pools, ports) is the host's; each uplink's scheduler shares that
//! uplink's bandwidth by it. A port's limit is one cap across all its uplinks (a port spread by
//! IP hash is capped once), so it lives in [`SharedLimits`], not in any one scheduler. Admission
//! control counts against the smallest uplink, since any port may fail over to any of them, and a
//! change of controls is applied to the tree, the buckets and every scheduler at once, or not at
//! all. Each port's queue in an uplink's scheduler holds at most `leaf_queue` frames; past that,
//! [`Ioc::enqueue`] hands the frame back (tail drop, counted by the caller). The simulator's
//! packet mode and the live data plane both drive this type, so both share exactly this logic.

use super::admission::{self, admit, AdmissionError, ReservationCap};
use super::{LimitId, NodeId, NodeSpec, Scheduler, SharedLimits, Tree};
use crate::units::Bandwidth;
use crate::Instant;

/// Network I/O Control of a team; see the module documentation.
#[derive(Debug, Clone)]
pub struct Ioc<T> {
    tree: Tree,
    cap: ReservationCap,
    capacities: Vec<Bandwidth>,
    scheds: Vec<Scheduler<T>>,
    shared: SharedLimits,
    /// Each port's leaf and its limit bucket.
    buckets: Vec<(NodeId, LimitId)>,
    leaf_queue: usize,
}

impl<T> Ioc<T> {
    /// NetIOC over `tree` for uplinks of `capacities`, with a shared limit bucket for each of
    /// `leaves` (the ports) and at most `leaf_queue` frames queued per port and uplink.
    pub fn new(
        tree: Tree,
        leaves: &[NodeId],
        capacities: Vec<Bandwidth>,
        cap: ReservationCap,
        leaf_queue: usize,
    ) -> Ioc<T> {
        let mut shared = SharedLimits::default();
        let buckets: Vec<(NodeId, LimitId)> = leaves
            .iter()
            .map(|&leaf| {
                let id = shared.add(f64::INFINITY);
                shared.set(id, tree.node(leaf).spec.limit.map(|l| l.bps_f64()));
                (leaf, id)
            })
            .collect();
        Ioc {
            scheds: capacities.iter().map(|_| Scheduler::new(&tree, &buckets)).collect(),
            tree,
            cap,
            capacities,
            shared,
            buckets,
            leaf_queue: leaf_queue.max(1),
        }
    }

    /// The tree in force.
    pub fn tree(&self) -> &Tree {
        &self.tree
    }

    /// The reservation cap admission control applies.
    pub fn reservation_cap(&self) -> ReservationCap {
        self.cap
    }

    /// The capacity admission control counts against: the smallest uplink's.
    pub fn admission_capacity(&self) -> Bandwidth {
        self.capacities.iter().copied().min().unwrap_or(Bandwidth::ZERO)
    }

    /// Uplink `u`'s capacity as NetIOC knows it.
    pub fn capacity(&self, u: usize) -> Bandwidth {
        self.capacities[u]
    }

    /// Queues a frame of `len` bytes from port leaf `leaf` on uplink `u`; gives it back if the
    /// port's queue there is full.
    pub fn enqueue(&mut self, u: usize, leaf: NodeId, len: u32, item: T, now: Instant) -> Result<(), T> {
        let s = &mut self.scheds[u];
        if s.queued(leaf) >= self.leaf_queue {
            return Err(item);
        }
        s.enqueue(leaf, len, item, now);
        Ok(())
    }

    /// The next frame uplink `u` should send at `now`, if any is allowed by the limits.
    pub fn dequeue(&mut self, u: usize, now: Instant) -> Option<(NodeId, u32, T)> {
        self.scheds[u].dequeue(now, &mut self.shared)
    }

    /// When uplink `u` next has a frame a limit now holds back.
    pub fn next_eligible(&self, u: usize, now: Instant) -> Option<Instant> {
        self.scheds[u].next_eligible(now, &self.shared)
    }

    /// Frames of `leaf` waiting on uplink `u`.
    pub fn queued(&self, u: usize, leaf: NodeId) -> usize {
        self.scheds[u].queued(leaf)
    }

    /// Every frame waiting on uplink `u`, in the order the scheduler would send them if no limit
    /// held any back (for a change of queueing discipline, or an uplink leaving the team).
    pub fn drain(&mut self, u: usize) -> Vec<(NodeId, T)> {
        let mut none = SharedLimits::default();
        let far = Instant::from_nanos(u64::MAX / 2);
        let mut out = Vec::new();
        while let Some((leaf, _, item)) = self.scheds[u].dequeue(far, &mut none) {
            out.push((leaf, item));
        }
        out
    }

    /// Changes node `id`'s controls if the tree still passes admission control against the
    /// smallest uplink; applies them to the tree, the port's limit bucket and every scheduler
    /// from `now` on. A refusal names the node and changes nothing.
    pub fn set_controls(&mut self, id: NodeId, spec: NodeSpec, now: Instant) -> Result<(), String> {
        let name = self.tree.node(id).spec.name.clone();
        admission::check_controls(&format!("`{name}`"), &spec)?;
        let capacity = self.admission_capacity();
        admission::set_controls(&mut self.tree, id, spec, capacity, self.cap).map_err(|e| e.to_string())?;
        self.apply(id, now);
        Ok(())
    }

    /// Switches to `tree`, of the same shape, whose admission the caller has checked: every node
    /// whose controls differ gets them from `now` on.
    pub fn replace_tree(&mut self, tree: Tree, now: Instant) {
        let changed: Vec<NodeId> = tree
            .ids()
            .filter(|&id| self.tree.node(id).spec != tree.node(id).spec)
            .collect();
        self.tree = tree;
        for id in changed {
            self.apply(id, now);
        }
    }

    /// Pushes node `id`'s controls from the tree to its bucket and the schedulers.
    fn apply(&mut self, id: NodeId, now: Instant) {
        let spec = &self.tree.node(id).spec;
        if let Some(&(_, bucket)) = self.buckets.iter().find(|(leaf, _)| *leaf == id) {
            self.shared.set(bucket, spec.limit.map(|l| l.bps_f64()));
        }
        for s in &mut self.scheds {
            s.set_controls(id, spec, now);
        }
    }

    /// Uplink `u`'s capacity changed (the kernel reported a new link speed): admission control
    /// counts against the new figures from now on. The change is a fact, so it always applies;
    /// an error says which reservations no longer fit.
    pub fn set_capacity(&mut self, u: usize, capacity: Bandwidth) -> Result<(), AdmissionError> {
        self.capacities[u] = capacity;
        admit(&self.tree, self.admission_capacity(), self.cap)
    }
}
