//! The switch's own receive queue per interface: flow queues served in deficit round robin,
//! new flows first, each kept short by CoDel (an fq_codel, RFC 8290, in front of the switch).
//!
//! Model. A switch that is short of CPU forwards less than arrives, and the excess waits
//! somewhere. Left in the kernel's socket buffer it waits in one FIFO per interface: a ping or a
//! TCP handshake queues behind every bulk frame the VM sent before it (milliseconds), and the
//! bulk flows are told to slow down only when that buffer overflows. So the loop reads every
//! interface while this queue has room, whatever it can forward, and keeps the excess here:
//! - a frame goes to one of [`FLOWS`] queues by a keyed hash of its addresses, protocol and ports
//!   (the key is random per queue, so a VM cannot aim its flows at another's queue);
//! - the queues are served in deficit round robin ([`QUANTUM`] bytes a round); a queue that
//!   becomes active joins the *new* list, served before the *old* one, so a sparse flow (a
//!   ping, a request, an ACK stream) goes out in the next turn whatever the bulk flows hold;
//! - CoDel, on each flow queue at dequeue: once a queue's frames have waited more than
//!   [`TARGET`] for a whole [`INTERVAL`], it drops (or marks CE, where the frame is
//!   ECN-capable) one frame, then more often (interval / sqrt(count)) until the wait falls under
//!   the target: TCP backs off to what the switch forwards, with a short standing queue;
//! - a frame and memory budget bounds the whole (memory counted as the buffers the frames hold,
//!   not their lengths): past it, the oldest frames of the flow queue holding the most memory
//!   are dropped, half of it at a time (a flood that ignores CoDel costs its own flow, not the
//!   others).
//!
//! Frames are held in one slab for all flow queues, so memory is bounded by the frame budget
//! whichever flows hold them. The flow queues' state (some 70 KiB) is made at the first frame,
//! not with the queue: a port that never receives (detached, or removed and its slot kept for
//! the next) costs nothing. Time is passed in; drops are handed to the caller (to recycle the
//! buffer) and counted.

use core::time::Duration;
use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher, RandomState};
use teamster_core::Instant;

/// Flow queues per interface (fq_codel's default).
pub const FLOWS: usize = 1024;
/// Bytes a flow queue may send per round of the deficit round robin: one full-size frame.
pub const QUANTUM: i64 = 1514;
/// Frames dropped at most at once from the largest flow queue when over budget.
pub const DROP_BATCH: usize = 64;
/// CoDel's acceptable standing wait.
pub const TARGET: Duration = Duration::from_millis(5);
/// CoDel's window: a wait above the target for this long starts dropping.
pub const INTERVAL: Duration = Duration::from_millis(100);

/// A frame held, with when it arrived, its length and the memory it holds.
struct Held<T> {
    item: T,
    len: u32,
    cost: u32,
    at: Instant,
}

/// Which list a flow queue is on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Listed {
    No,
    New,
    Old,
}

/// No slot: the end of a flow queue's chain.
const NIL: u32 = u32::MAX;

/// One flow queue (a chain of slots, oldest first) with its round-robin deficit and CoDel
/// state.
struct Flow {
    head: u32,
    tail: u32,
    bytes: u64,
    deficit: i64,
    listed: Listed,
    dropping: bool,
    count: u32,
    last_count: u32,
    first_above: Option<Instant>,
    drop_next: Instant,
}

/// The switch's receive queue for one interface.
pub struct IngressQueue<T> {
    flows: Vec<Flow>,
    /// The memory each flow queue holds, apart from the rest of its state so that finding the
    /// largest is one pass over a dense array (as Linux's fq_codel keeps its backlogs).
    held: Vec<u64>,
    /// Every held frame, in one slab shared by the flow queues (so memory is bounded by the
    /// frame budget, whichever flows hold the frames), chained through `next`.
    slots: Vec<Option<Held<T>>>,
    next: Vec<u32>,
    free: Vec<u32>,
    new_flows: VecDeque<u16>,
    old_flows: VecDeque<u16>,
    bytes: u64,
    memory: u64,
    frames: usize,
    max_memory: u64,
    max_frames: usize,
    keys: RandomState,
    dropped: u64,
    marked: u64,
}

impl<T> IngressQueue<T> {
    /// An empty queue holding at most `max_frames` frames in at most `max_memory` bytes of
    /// buffers. It allocates nothing until its first frame.
    pub fn new(max_memory: u64, max_frames: usize) -> IngressQueue<T> {
        IngressQueue {
            flows: Vec::new(),
            held: Vec::new(),
            slots: Vec::new(),
            next: Vec::new(),
            free: Vec::new(),
            new_flows: VecDeque::new(),
            old_flows: VecDeque::new(),
            bytes: 0,
            memory: 0,
            frames: 0,
            max_memory,
            max_frames,
            keys: RandomState::new(),
            dropped: 0,
            marked: 0,
        }
    }

    /// Makes the flow queues, at the first frame (`now`).
    fn make_flows(&mut self, now: Instant) {
        self.flows = (0..FLOWS)
            .map(|_| Flow {
                head: NIL,
                tail: NIL,
                bytes: 0,
                deficit: 0,
                listed: Listed::No,
                dropping: false,
                count: 0,
                last_count: 0,
                first_above: None,
                drop_next: now,
            })
            .collect();
        self.held = vec![0; FLOWS];
    }

    /// Frames held.
    pub fn len(&self) -> usize {
        self.frames
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.frames == 0
    }

    /// Bytes held (the frames' lengths).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Memory held (what the frames' buffers cost, as given to [`IngressQueue::enqueue`]).
    pub fn memory(&self) -> u64 {
        self.memory
    }

    /// Frames dropped since the last call (budget and CoDel), and frames marked CE instead.
    pub fn take_counts(&mut self) -> (u64, u64) {
        (core::mem::take(&mut self.dropped), core::mem::take(&mut self.marked))
    }

    /// The flow queue a frame belongs to: a keyed hash of its MAC addresses and tags, and of
    /// its IP addresses, protocol and (unless a fragment) ports where it has them.
    pub fn flow_of(&self, frame: &[u8]) -> usize {
        let mut h = self.keys.build_hasher();
        let Some((et, ip)) = teamster_core::wire::network_layer(frame) else {
            h.write(frame);
            return h.finish() as usize % FLOWS;
        };
        h.write(&frame[..ip]);
        let ports = |h: &mut std::hash::DefaultHasher, at: usize| {
            if let Some(p) = frame.get(at..at + 4) {
                h.write(p);
            }
        };
        match et {
            0x0800 if frame.len() >= ip + 20 => {
                let ihl = usize::from(frame[ip] & 0x0f) * 4;
                let proto = frame[ip + 9];
                h.write(&frame[ip + 9..ip + 10]);
                h.write(&frame[ip + 12..ip + 20]);
                let fragment = u16::from_be_bytes([frame[ip + 6], frame[ip + 7]]) & 0x3fff != 0;
                if !fragment && matches!(proto, 6 | 17 | 132 | 136) {
                    ports(&mut h, ip + ihl);
                }
            }
            0x86dd if frame.len() >= ip + 40 => {
                let next = frame[ip + 6];
                h.write(&frame[ip + 6..ip + 7]);
                h.write(&frame[ip + 8..ip + 40]);
                if matches!(next, 6 | 17 | 132 | 136) {
                    ports(&mut h, ip + 40);
                }
            }
            _ => {}
        }
        h.finish() as usize % FLOWS
    }

    /// Queues `item` (`len` bytes long, holding `cost` bytes of memory) on flow queue `flow`,
    /// arrived at `now`; keeps within the budget by dropping, into `drop`, the oldest frames
    /// of the flow queue holding the most memory.
    pub fn enqueue(&mut self, flow: usize, item: T, (len, cost): (u32, u32), now: Instant, drop: &mut dyn FnMut(T)) {
        if self.flows.is_empty() {
            self.make_flows(now);
        }
        self.push(
            flow,
            Held {
                item,
                len,
                cost,
                at: now,
            },
        );
        let f = &mut self.flows[flow];
        f.bytes += u64::from(len);
        if f.listed == Listed::No {
            f.listed = Listed::New;
            f.deficit = QUANTUM;
            self.new_flows.push_back(flow as u16);
        }
        self.held[flow] += u64::from(cost);
        self.bytes += u64::from(len);
        self.memory += u64::from(cost);
        self.frames += 1;
        while self.frames > self.max_frames || self.memory > self.max_memory {
            // Half the largest queue at a time (at most [`DROP_BATCH`] frames), as fq_codel
            // does: one pass over the flows' memory per batch.
            let largest = self.largest();
            let keep = self.held[largest] / 2;
            for _ in 0..DROP_BATCH {
                let Some(held) = self.pop(largest) else { break };
                drop(held.item);
                self.dropped += 1;
                if self.held[largest] <= keep {
                    break;
                }
            }
            if self.held[largest] == 0 {
                self.idle(largest);
            }
        }
    }

    /// The flow queue holding the most memory (where a budget drop comes from).
    fn largest(&self) -> usize {
        let mut best = 0;
        for (f, &m) in self.held.iter().enumerate() {
            if m > self.held[best] {
                best = f;
            }
        }
        best
    }

    /// Flow queue `f` ran empty: CoDel's state for it ends (RFC 8289 leaves the dropping
    /// state when there is nothing to dequeue), so frames it gets later are judged afresh.
    fn idle(&mut self, f: usize) {
        self.flows[f].dropping = false;
        self.flows[f].first_above = None;
    }

    /// Puts `held` at the end of flow queue `f`'s chain, in a free slot (the slab grows only
    /// up to the frame budget, plus the one frame over it that [`IngressQueue::enqueue`]
    /// drops again at once).
    fn push(&mut self, f: usize, held: Held<T>) {
        let slot = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(held);
                i
            }
            None => {
                self.slots.push(Some(held));
                self.next.push(NIL);
                (self.slots.len() - 1) as u32
            }
        };
        self.next[slot as usize] = NIL;
        let flow = &mut self.flows[f];
        match flow.tail {
            NIL => flow.head = slot,
            tail => self.next[tail as usize] = slot,
        }
        flow.tail = slot;
    }

    /// Takes the oldest frame of flow queue `f`.
    fn pop(&mut self, f: usize) -> Option<Held<T>> {
        let flow = &mut self.flows[f];
        let slot = flow.head;
        if slot == NIL {
            return None;
        }
        flow.head = self.next[slot as usize];
        if flow.head == NIL {
            flow.tail = NIL;
        }
        self.free.push(slot);
        let held = self.slots[slot as usize].take().expect("a chained slot holds a frame");
        self.held[f] -= u64::from(held.cost);
        self.memory -= u64::from(held.cost);
        self.flows[f].bytes -= u64::from(held.len);
        self.bytes -= u64::from(held.len);
        self.frames -= 1;
        Some(held)
    }

    /// The next frame to switch at `now`: new flows first, then the old ones in deficit round
    /// robin, each through CoDel, which may drop (into `drop`) or mark (`mark` says whether it
    /// could mark the frame CE in place) frames that waited too long.
    pub fn dequeue(
        &mut self,
        now: Instant,
        mark: &mut dyn FnMut(&mut T) -> bool,
        drop: &mut dyn FnMut(T),
    ) -> Option<T> {
        self.serve(now, false, mark, drop)
    }

    /// Like [`IngressQueue::dequeue`], but only from new flows (a flow that just became
    /// active, within its first quantum): what the loop sends ahead of the bulk.
    pub fn dequeue_new(
        &mut self,
        now: Instant,
        mark: &mut dyn FnMut(&mut T) -> bool,
        drop: &mut dyn FnMut(T),
    ) -> Option<T> {
        self.serve(now, true, mark, drop)
    }

    /// The deficit round robin over the new flows, then (unless `only_new`) the old ones.
    fn serve(
        &mut self,
        now: Instant,
        only_new: bool,
        mark: &mut dyn FnMut(&mut T) -> bool,
        drop: &mut dyn FnMut(T),
    ) -> Option<T> {
        loop {
            let (f, from_new) = match self.new_flows.front() {
                Some(&f) => (usize::from(f), true),
                None if only_new => return None,
                None => (usize::from(*self.old_flows.front()?), false),
            };
            if self.flows[f].deficit <= 0 {
                self.flows[f].deficit += QUANTUM;
                self.rotate(f, from_new);
                continue;
            }
            match self.codel_dequeue(f, now, mark, drop) {
                Some(held) => {
                    self.flows[f].deficit -= i64::from(held.len);
                    return Some(held.item);
                }
                None => {
                    // Empty: a new flow goes to the old list once (so a flow that keeps coming
                    // back empty cannot stay ahead of the others), an old one leaves.
                    if from_new && !self.old_flows.is_empty() {
                        self.rotate(f, true);
                    } else {
                        self.unlist(f, from_new);
                    }
                }
            }
        }
    }

    /// Moves flow queue `f` from the front of its list to the back of the old list.
    fn rotate(&mut self, f: usize, from_new: bool) {
        self.unlist(f, from_new);
        self.old_flows.push_back(f as u16);
        self.flows[f].listed = Listed::Old;
    }

    /// Takes flow queue `f` off the front of its list.
    fn unlist(&mut self, f: usize, from_new: bool) {
        let list = if from_new {
            &mut self.new_flows
        } else {
            &mut self.old_flows
        };
        list.pop_front();
        self.flows[f].listed = Listed::No;
    }

    /// Whether CoDel would drop `held`, taken from flow `f` at `now`: its wait has been above
    /// the target for a whole interval, and the queue holds more than one full frame.
    fn too_long(&mut self, f: usize, held: &Held<T>, now: Instant) -> bool {
        let flow = &mut self.flows[f];
        let waited = now.saturating_duration_since(held.at);
        if waited < TARGET || flow.bytes <= QUANTUM as u64 {
            flow.first_above = None;
            return false;
        }
        match flow.first_above {
            None => {
                flow.first_above = Some(now + INTERVAL);
                false
            }
            Some(t) => now >= t,
        }
    }

    /// Drops (or marks) `held` for CoDel; returns it if it was marked and still goes.
    fn punish(
        &mut self,
        mut held: Held<T>,
        mark: &mut dyn FnMut(&mut T) -> bool,
        drop: &mut dyn FnMut(T),
    ) -> Option<Held<T>> {
        if mark(&mut held.item) {
            self.marked += 1;
            return Some(held);
        }
        drop(held.item);
        self.dropped += 1;
        None
    }

    /// CoDel's dequeue on flow queue `f` (RFC 8289's state machine, per flow).
    fn codel_dequeue(
        &mut self,
        f: usize,
        now: Instant,
        mark: &mut dyn FnMut(&mut T) -> bool,
        drop: &mut dyn FnMut(T),
    ) -> Option<Held<T>> {
        let Some(mut held) = self.pop(f) else {
            self.idle(f);
            return None;
        };
        let drop_it = self.too_long(f, &held, now);
        if self.flows[f].dropping {
            if !drop_it {
                self.flows[f].dropping = false;
            }
            while self.flows[f].dropping && now >= self.flows[f].drop_next {
                self.flows[f].count += 1;
                if let Some(marked) = self.punish(held, mark, drop) {
                    let next = control_law(self.flows[f].drop_next, self.flows[f].count);
                    self.flows[f].drop_next = next;
                    return Some(marked);
                }
                held = match self.pop(f) {
                    Some(h) => h,
                    None => {
                        self.idle(f);
                        return None;
                    }
                };
                if self.too_long(f, &held, now) {
                    let next = control_law(self.flows[f].drop_next, self.flows[f].count);
                    self.flows[f].drop_next = next;
                } else {
                    self.flows[f].dropping = false;
                }
            }
        } else if drop_it {
            let flow = &mut self.flows[f];
            // Re-entering soon after the last drop state: start from the rate it ended at.
            let delta = flow.count.saturating_sub(flow.last_count);
            let recent = now.saturating_duration_since(flow.drop_next) < INTERVAL * 16;
            flow.count = if delta > 1 && recent { delta } else { 1 };
            flow.last_count = flow.count;
            flow.dropping = true;
            flow.drop_next = control_law(now, flow.count);
            if let Some(marked) = self.punish(held, mark, drop) {
                return Some(marked);
            }
            held = match self.pop(f) {
                Some(h) => h,
                None => {
                    self.idle(f);
                    return None;
                }
            };
            // Only for its clock: whether the next frame waited too long starts or resets the
            // interval the flow is judged on.
            self.too_long(f, &held, now);
        }
        Some(held)
    }
}

/// When CoDel drops next: one interval after `t` divided by the square root of the drops so far
/// in this episode, so the drop rate rises until the flow slows down.
fn control_law(t: Instant, count: u32) -> Instant {
    t + INTERVAL.div_f64(f64::from(count.max(1)).sqrt())
}

#[cfg(test)]
#[path = "ingress_queue_tests.rs"]
mod tests;
