//! The receive half of a turn: frames from every socket and from the port workers into each
//! interface's [`IngressQueue`], then at most [`RX_TURN`] of them per interface through the
//! switch, new flows first, in [`ROUNDS`] rounds.
//!
//! The loop reads an interface while its queue is under half its budget (up to
//! [`READS_PER_ROUND`] batches a round), so when the switch falls behind the excess waits here,
//! in flow queues under CoDel, not in the kernel's FIFO: a ping or a handshake beside bulk
//! flows is switched in the next turn, and the bulk flows are slowed by CoDel's drops (or CE
//! marks) rather than by the socket buffer overflowing. Reading is a fraction of a frame's cost
//! (sending is most of it), so reading more than is switched costs little; frames dropped here
//! are counted as `backlog` on the interface they arrived on.

use super::{port_worker, switch_frame, Datapath, PortIo, Scratch};
use crate::ingress_queue::IngressQueue;
use crate::{Backend, RX_TURN};
use teamster_core::offload::Offload;
use teamster_core::teaming::UplinkId;
use teamster_core::wire::mark_congestion;
use teamster_core::{switch::Ingress, Instant};

/// Frames an interface's receive queue holds at most.
pub const INGRESS_FRAMES: usize = 2048;
/// Bytes an interface's receive queue holds at most: twice a socket's receive buffer, so that
/// one read below half of it never overflows it.
pub const INGRESS_BYTES: u64 = 4 << 20;
/// Receive calls per interface per round, at most.
pub const READS_PER_ROUND: usize = 2;
/// Rounds of reading and switching per turn of the loop.
pub const ROUNDS: usize = 4;

/// A receive queue of frames with their offload requests.
pub(super) type Queue = IngressQueue<(Vec<u8>, Offload)>;

/// A new, empty receive queue.
pub(super) fn queue(now: Instant) -> Queue {
    IngressQueue::new(INGRESS_BYTES, INGRESS_FRAMES, now)
}

impl Datapath {
    /// The receive queue of an interface: ports first, then uplinks.
    fn ingress_slot(&self, from: Ingress) -> usize {
        match from {
            Ingress::Port(p) => self.index[&p],
            Ingress::Uplink(u) => self.ports.len() + u.0,
        }
    }

    /// Reads every socket into its receive queue while the queue has room, and takes what the
    /// port workers handed over; returns the frames received.
    fn receive(&mut self, now: Instant, scratch: &mut Scratch) -> usize {
        let mut received = 0;
        for p in 0..self.ports.len() {
            let id = self.ports[p].plan.id;
            let PortIo::Here(backend) = &mut self.ports[p].io else {
                continue;
            };
            received += read(backend, &self.ingress[p], &mut self.pool, &mut |f, o| {
                scratch.received.push((Ingress::Port(id), f, o))
            });
        }
        for u in 0..self.uplinks.len() {
            let Some(backend) = self.uplinks[u].backend.as_mut() else {
                continue;
            };
            let q = &self.ingress[self.ports.len() + u];
            received += read(backend, q, &mut self.pool, &mut |f, o| {
                scratch.received.push((Ingress::Uplink(UplinkId(u)), f, o))
            });
        }
        for w in &self.workers {
            for _ in 0..port_worker::HANDOFF_FRAMES {
                let Some(h) = w.lane.from_ports.pop() else { break };
                let id = self.ports[h.port as usize].plan.id;
                scratch.received.push((Ingress::Port(id), h.frame, h.offload));
                received += 1;
            }
        }
        for (from, frame, offload) in scratch.received.drain(..) {
            let slot = self.ingress_slot(from);
            let q = &mut self.ingress[slot];
            let flow = q.flow_of(&frame);
            let len = frame.len() as u32;
            let pool = &mut self.pool;
            q.enqueue(flow, (frame, offload), len, now, &mut |(f, _)| pool.give(f));
        }
        received
    }

    /// The receive half of a turn, in [`ROUNDS`] rounds: each reads every socket, switches the
    /// new flows' frames of every interface and sends them at once, then switches a share of
    /// each interface's other frames (at most [`RX_TURN`] per interface over the turn), sent at
    /// the end of the turn in large batches. A sparse flow so waits for a round, not for the
    /// turn's bulk; returns the frames received.
    pub(super) fn receive_and_switch(&mut self, mut now: Instant, scratch: &mut Scratch) -> usize {
        scratch.taken.clear();
        scratch.taken.resize(self.ingress.len(), 0);
        let mut received = 0;
        for round in 1..=ROUNDS {
            received += self.receive(now, scratch);
            self.switch_from_queues(now, scratch, None);
            if !scratch.pending.is_empty() {
                self.dispatch(&mut scratch.pending, now);
                self.send_now(now);
            }
            self.switch_from_queues(now, scratch, Some(RX_TURN * round / ROUNDS));
            if round < ROUNDS {
                now = self.now();
            }
        }
        received
    }

    /// Switches frames from every receive queue: with `upto`, from any flow until the queue has
    /// given that many this turn; without, only new flows' frames, up to [`RX_TURN`].
    fn switch_from_queues(&mut self, now: Instant, scratch: &mut Scratch, upto: Option<usize>) {
        let ports = self.ports.len();
        for slot in 0..self.ingress.len() {
            if self.ingress[slot].is_empty() {
                continue;
            }
            let from = if slot < ports {
                Ingress::Port(self.ports[slot].plan.id)
            } else {
                Ingress::Uplink(UplinkId(slot - ports))
            };
            while scratch.taken[slot] < upto.unwrap_or(RX_TURN) {
                let pool = &mut self.pool;
                let mark = &mut |(f, _): &mut (Vec<u8>, Offload)| mark_congestion(f);
                let drop = &mut |(f, _): (Vec<u8>, Offload)| pool.give(f);
                let q = &mut self.ingress[slot];
                let next = match upto {
                    None => q.dequeue_new(now, mark, drop),
                    Some(_) => q.dequeue(now, mark, drop),
                };
                let Some(frame) = next else { break };
                scratch.taken[slot] += 1;
                let (pending, forwards) = (&mut scratch.pending, &mut scratch.forwards);
                switch_frame(&mut self.switch, from, frame, now, &mut self.pool, pending, forwards);
            }
            let (dropped, marked) = self.ingress[slot].take_counts();
            let (extra, ecn) = if slot < ports {
                let p = &mut self.ports[slot];
                (&mut p.extra, &mut p.ecn_marked)
            } else {
                let u = &mut self.uplinks[slot - ports];
                (&mut u.extra, &mut u.ecn_marked)
            };
            extra.backlog += dropped;
            *ecn += marked;
        }
    }

    /// Whether frames wait in a receive queue (the loop must not sleep).
    pub(super) fn ingress_waiting(&self) -> bool {
        self.ingress.iter().any(|q| !q.is_empty())
    }
}

/// Reads `backend` while `queue` is under half its budget, up to [`READS_PER_ROUND`] batches;
/// returns the frames read.
fn read(
    backend: &mut crate::backend::Link,
    queue: &Queue,
    pool: &mut crate::pool::FramePool,
    sink: &mut dyn FnMut(Vec<u8>, Offload),
) -> usize {
    let (mut read, mut bytes) = (0, 0u64);
    for _ in 0..READS_PER_ROUND {
        if queue.len() + read > INGRESS_FRAMES / 2 || queue.bytes() + bytes > INGRESS_BYTES / 2 {
            break;
        }
        let n = backend.recv_batch(pool, &mut |f, o| {
            bytes += f.len() as u64;
            sink(f, o)
        });
        read += n;
        if n < RX_TURN {
            break;
        }
    }
    read
}
