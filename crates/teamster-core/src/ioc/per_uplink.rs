//! [`Ioc`]: Network I/O Control for a whole team: one tree, one packet [`Scheduler`] per uplink,
//! and a limit bucket per port shared by every uplink's scheduler.
//!
//! Model. The tree (classes, pools, ports) is the host's; each uplink's scheduler shares that
//! uplink's bandwidth by it. A port's limit is one cap across all its uplinks (a port spread by
//! IP hash is capped once), so it lives in [`SharedLimits`], not in any one scheduler. Admission
//! control counts against the smallest uplink, since any port may fail over to any of them, and a
//! change of controls is applied to the tree, the buckets and every scheduler at once, or not at
//! all. What waits for each uplink is bounded by a [`QueueLimit`] (a byte budget of a few
//! milliseconds at the uplink's capacity, of which each sender may hold its NetIOC allocation's
//! share, and a frame count per port; see [`queue_limit`](super::queue_limit) and
//! [`queue_share`](super::queue_share)); a frame refused is handed back by
//! [`Ioc::enqueue`] (counted by the caller). The simulator's packet mode and the live data plane
//! both drive this type, so both share exactly this logic.

use super::admission::{self, admit, AdmissionError, ReservationCap};
use super::queue_limit::{self, Admit, QueueLimit};
use super::queue_share::QueueShares;
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
    limit: QueueLimit,
    /// Per uplink: bytes queued, bytes queued per node (by index), and ports with bytes queued.
    queued_bytes: Vec<Queued>,
}

/// What waits on one uplink, in bytes, and who has been sending there.
#[derive(Debug, Clone)]
struct Queued {
    total: u64,
    per_node: Vec<u64>,
    ports: usize,
    shares: QueueShares,
}

impl Queued {
    /// Nothing waiting, over a tree of `nodes` nodes.
    fn empty(nodes: usize) -> Queued {
        Queued {
            total: 0,
            per_node: vec![0; nodes],
            ports: 0,
            shares: QueueShares::new(nodes),
        }
    }

    /// Counts a frame of `len` bytes of `leaf` joining the queue.
    fn add(&mut self, leaf: NodeId, len: u32) {
        self.ports += usize::from(self.per_node[leaf.0] == 0);
        self.per_node[leaf.0] += u64::from(len);
        self.total += u64::from(len);
    }
}

/// Whether a frame joined its uplink's queue, and with a congestion mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    Plain,
    Marked,
}

impl<T> Ioc<T> {
    /// NetIOC over `tree` for uplinks of `capacities`, with a shared limit bucket for each of
    /// `leaves` (the ports), and queues bounded by `limit`.
    pub fn new(
        tree: Tree,
        leaves: &[NodeId],
        capacities: Vec<Bandwidth>,
        cap: ReservationCap,
        limit: QueueLimit,
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
            queued_bytes: vec![Queued::empty(tree.len()); capacities.len()],
            tree,
            cap,
            capacities,
            shared,
            buckets,
            limit: QueueLimit {
                frames_per_port: limit.frames_per_port.max(1),
                ..limit
            },
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
    /// queue limit refuses it (a frame that could join only with a congestion mark included).
    pub fn enqueue(&mut self, u: usize, leaf: NodeId, len: u32, item: T, now: Instant) -> Result<(), T> {
        self.enqueue_marking(u, leaf, len, item, now, |_| false).map(|_| ())
    }

    /// Queues a frame as [`Ioc::enqueue`] does, except that over the byte budget `mark` is asked
    /// to set the frame's ECN Congestion Experienced mark (true if the frame carries ECN and
    /// now has it), and a frame the rule admits only marked joins if marked.
    pub fn enqueue_marking(
        &mut self,
        u: usize,
        leaf: NodeId,
        len: u32,
        mut item: T,
        now: Instant,
        mark: impl FnOnce(&mut T) -> bool,
    ) -> Result<Enqueued, T> {
        if self.scheds[u].queued(leaf) >= self.limit.frames_per_port {
            return Err(item);
        }
        let capacity = self.capacities[u].bps_f64();
        let budget = self.limit.budget(capacity);
        let q = &mut self.queued_bytes[u];
        q.shares.seen(leaf, now);
        let mine = q.per_node[leaf.0];
        let len64 = u64::from(len);
        // The fair part matters only past the budget: the allocations are not looked at below it.
        let fair = if q.total + len64 <= budget {
            budget
        } else {
            let waiting = q.ports - usize::from(mine > 0);
            q.shares.fair_part(&self.tree, capacity, leaf, budget, waiting, now)
        };
        let how = match queue_limit::admit(q.total, mine, fair, len64, budget) {
            Admit::Join => Enqueued::Plain,
            Admit::Refuse => return Err(item),
            fair => match (mark(&mut item), fair) {
                (true, _) => Enqueued::Marked,
                (false, Admit::JoinMarked) => Enqueued::Plain,
                (false, _) => return Err(item),
            },
        };
        self.queued_bytes[u].add(leaf, len);
        self.scheds[u].enqueue(leaf, len, item, now);
        Ok(how)
    }

    /// The next frame uplink `u` should send at `now`, if any is allowed by the limits.
    pub fn dequeue(&mut self, u: usize, now: Instant) -> Option<(NodeId, u32, T)> {
        let out = self.scheds[u].dequeue(now, &mut self.shared)?;
        self.dequeued(u, out.0, out.1);
        Some(out)
    }

    /// Bytes waiting on uplink `u`.
    pub fn queued_bytes(&self, u: usize) -> u64 {
        self.queued_bytes[u].total
    }

    /// Uplink `u`'s byte budget at its capacity now.
    pub fn budget(&self, u: usize) -> u64 {
        self.limit.budget(self.capacities[u].bps_f64())
    }

    /// Takes a frame that left uplink `u`'s queue off its byte counts.
    fn dequeued(&mut self, u: usize, leaf: NodeId, len: u32) {
        let q = &mut self.queued_bytes[u];
        let node = &mut q.per_node[leaf.0];
        *node = node.saturating_sub(u64::from(len));
        q.ports -= usize::from(*node == 0);
        q.total = q.total.saturating_sub(u64::from(len));
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
        self.drain_sized(u)
            .into_iter()
            .map(|(leaf, _, item)| (leaf, item))
            .collect()
    }

    /// [`Ioc::drain`], with each frame's length.
    fn drain_sized(&mut self, u: usize) -> Vec<(NodeId, u32, T)> {
        // Every port's shared bucket, none of them limiting (an empty set would not have the
        // buckets the scheduler refers to).
        let mut none = self.shared.clone();
        for &(_, b) in &self.buckets {
            none.set(b, None);
        }
        let far = Instant::from_nanos(u64::MAX / 2);
        let mut out = Vec::new();
        while let Some((leaf, len, item)) = self.scheds[u].dequeue(far, &mut none) {
            self.dequeued(u, leaf, len);
            out.push((leaf, len, item));
        }
        out
    }

    /// Switches to `tree` of another shape (ports added or removed), whose admission the caller
    /// has checked, with a shared limit bucket for each of `leaves` (the ports now). Every
    /// waiting frame stays queued on its uplink, in its port's order, at its port's leaf in the
    /// new tree (`moved` maps an old leaf to its new one); the frames of a port that is gone
    /// (`moved` gives None) are handed back. The schedulers' tags and the limit buckets start
    /// afresh, as after an idle moment: a port's history of service is not carried over.
    pub fn reshape(
        &mut self,
        tree: Tree,
        leaves: &[NodeId],
        moved: impl Fn(NodeId) -> Option<NodeId>,
        now: Instant,
    ) -> Vec<T> {
        let mut fresh = Ioc::new(tree, leaves, self.capacities.clone(), self.cap, self.limit);
        let mut gone = Vec::new();
        for u in 0..self.scheds.len() {
            for (leaf, len, item) in self.drain_sized(u) {
                let Some(leaf) = moved(leaf) else {
                    gone.push(item);
                    continue;
                };
                // Admitted once already: the queue limit is not applied a second time.
                fresh.queued_bytes[u].add(leaf, len);
                fresh.scheds[u].enqueue(leaf, len, item, now);
            }
        }
        *self = fresh;
        gone
    }

    /// Adds an uplink of `capacity` after the others, with an empty scheduler over the tree;
    /// the caller has checked admission against the capacities with it.
    pub fn add_uplink(&mut self, capacity: Bandwidth) {
        self.scheds.push(Scheduler::new(&self.tree, &self.buckets));
        self.queued_bytes.push(Queued::empty(self.tree.len()));
        self.capacities.push(capacity);
    }

    /// Removes uplink `u`; the uplinks after it move down one index. What waited for it is
    /// handed back with its port's leaf (the caller drops and counts it).
    pub fn remove_uplink(&mut self, u: usize) -> Vec<(NodeId, T)> {
        let gone = self.drain(u);
        self.scheds.remove(u);
        self.queued_bytes.remove(u);
        self.capacities.remove(u);
        gone
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
        self.invalidate_shares();
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
        self.invalidate_shares();
    }

    /// The tree's controls or a capacity changed: every uplink's queue shares are recomputed
    /// before they are used again.
    fn invalidate_shares(&mut self) {
        for q in &mut self.queued_bytes {
            q.shares.invalidate();
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
        self.queued_bytes[u].shares.invalidate();
        admit(&self.tree, self.admission_capacity(), self.cap)
    }
}
