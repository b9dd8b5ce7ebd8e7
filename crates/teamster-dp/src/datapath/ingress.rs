//! The receive half of a turn: frames from every socket and from the port workers into each
//! interface's [`IngressQueue`], then at most [`RX_TURN`] of them per interface through the
//! switch, new flows first, in [`ROUNDS`] rounds.
//!
//! When the switch falls behind, the excess waits here, in flow queues under CoDel, rather
//! than in the kernel's FIFO: a ping or a handshake beside bulk flows is switched within a
//! round, and the bulk flows are slowed by CoDel's drops (or CE marks) rather than by a socket
//! buffer overflowing. Reading is a fraction of a frame's cost (sending is most of it), so
//! reading more than is switched costs little. How far each interface is read:
//! - an uplink always, up to [`READS_PER_ROUND`] batches a round: it carries every VM's inbound
//!   traffic, so a flood towards one VM must be cut here, by the queue's budget, from the
//!   flood's own flow queue, not left in the kernel's FIFO ahead of the other VMs' frames;
//! - a VM's port while its queue is under half its budget: the queue holds that VM's frames
//!   only, so what its excess delays is its own traffic, and the kernel drops that excess (as
//!   `ring_full`) at no cost to the switch's CPU.
//!
//! Frames dropped here are counted as `backlog` on the interface they arrived on.

use super::switching::Scratch;
use super::{port_worker, Datapath, PortIo, Slot, MAX_PORTS};
use crate::ingress_queue::IngressQueue;
use crate::platform::Platform;
use crate::Frame;
use crate::{Device, RX_TURN};
use core::time::Duration;
use teamster_core::teaming::UplinkId;
use teamster_core::wire::mark_congestion;
use teamster_core::{switch::Ingress, Instant};

/// Frames an interface's receive queue holds at most.
pub const INGRESS_FRAMES: usize = 2048;
/// Memory an interface's receive queue holds at most, counted as the buffers its frames are
/// in: a port's queue is read only below half of it, so one read (at most a socket receive
/// buffer's worth, 4 MiB as the kernel counts it) does not overflow it.
pub const INGRESS_MEMORY: u64 = 8 << 20;
/// Receive calls per interface per round, at most.
pub const READS_PER_ROUND: usize = 2;
/// Rounds of reading and switching per turn of the loop.
pub const ROUNDS: usize = 4;

/// A receive queue of frames with their offload requests.
pub(super) type Queue = IngressQueue<Frame>;

/// A new, empty receive queue (it allocates nothing until its first frame).
pub(super) fn queue() -> Queue {
    IngressQueue::new(INGRESS_MEMORY, INGRESS_FRAMES)
}

impl<P: Platform> Datapath<P> {
    /// The receive half of a turn, in [`ROUNDS`] rounds: each reads the sockets with frames
    /// (every socket in the first round; in the others those a zero-timeout poll finds
    /// readable), switches the new flows' frames of every interface and sends them, with
    /// whatever the rounds before switched, at once; then switches a share of each interface's
    /// other frames (at most [`RX_TURN`] per interface over the turn), which the next round or
    /// the end of the turn sends. A sparse flow so waits for a round, not for the turn's bulk.
    /// Returns the frames received and the time at the end, for the rest of the turn (the
    /// clock of the pacers and schedulers must not go back).
    pub(super) fn receive_and_switch(&mut self, mut now: Instant, scratch: &mut Scratch) -> (usize, Instant) {
        scratch.taken.clear();
        scratch.taken.resize(self.ingress.len(), 0);
        let mut received = 0;
        for round in 1..=ROUNDS {
            let all = round == 1 || self.pollfds_stale;
            if !all {
                self.poll_for(Duration::ZERO);
            }
            received += self.receive(now, scratch, all);
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
        self.count_ingress_drops();
        (received, now)
    }

    /// Reads the sockets (every one, or those the last poll found readable) into their receive
    /// queues, and takes a round's share of what the port workers handed over; returns the
    /// frames received.
    fn receive(&mut self, now: Instant, scratch: &mut Scratch, all: bool) -> usize {
        let ports = self.ports.len();
        let mut received = 0;
        if all {
            scratch.readable.extend(0..self.ingress.len());
        } else {
            for (fd, slot) in self.pollfds.iter().zip(&self.pollmap) {
                match *slot {
                    Slot::Port(p) if fd.revents & libc::POLLIN != 0 => scratch.readable.push(p),
                    Slot::Uplink(u) | Slot::Queue(u) if fd.revents & libc::POLLIN != 0 => {
                        scratch.readable.push(ports + u)
                    }
                    _ => {}
                }
            }
        }
        for slot in scratch.readable.drain(..) {
            let backend = if slot < ports {
                let PortIo::Here(b) = &mut self.ports[slot].io else {
                    continue;
                };
                b
            } else {
                let Some(b) = self.uplinks[slot - ports].backend.as_mut() else {
                    continue;
                };
                b
            };
            let q = &self.ingress[slot];
            // A VM's port only below half its queue's budget (see the module documentation).
            let (room, memory) = if slot < ports {
                (INGRESS_FRAMES / 2, INGRESS_MEMORY / 2)
            } else {
                (usize::MAX, u64::MAX)
            };
            let mut read = 0;
            let mut cost = 0u64;
            let start = scratch.received.len();
            for _ in 0..READS_PER_ROUND {
                if q.len() + read >= room || q.memory() + cost >= memory {
                    break;
                }
                let n = backend.recv_batch(&mut self.pool, &mut |f| {
                    cost += f.bytes.capacity() as u64;
                    scratch.received.push((slot, f))
                });

                read += n;
                if n < RX_TURN {
                    break;
                }
            }
            received += read;
            if slot >= ports && self.rx.queues > 1 {
                let rx = &mut self.uplinks[slot - ports].rx;
                for (_, f) in &scratch.received[start..] {
                    rx.count(0, &f.bytes);
                }
                // The uplink's queues this thread reads (NetQueue's queue 1), as far.
                received += rx.read_local(slot, &mut self.pool, &mut scratch.received);
            }
        }
        for w in 0..self.workers.len() {
            received += self.take_handed(w, port_worker::HANDOFF_FRAMES / ROUNDS, &mut scratch.received);
        }
        for (slot, frame) in scratch.received.drain(..) {
            self.enqueue_received(slot, frame, now);
        }
        received
    }

    /// Puts a frame received on interface `slot` (ports, then uplinks) in its receive queue.
    pub(super) fn enqueue_received(&mut self, slot: usize, frame: Frame, now: Instant) {
        let q = &mut self.ingress[slot];
        let flow = q.flow_of(&frame.bytes);
        let size = (frame.bytes.len() as u32, frame.bytes.capacity() as u32);
        let pool = &mut self.pool;
        q.enqueue(flow, frame, size, now, &mut |f| pool.give(f.into_bytes()));
    }

    /// Takes up to `max` frames port worker `w` handed over into `into`, each with the
    /// interface it goes to (ports, then uplinks); returns how many.
    pub(super) fn take_handed(&mut self, w: usize, max: usize, into: &mut Vec<(usize, Frame)>) -> usize {
        let ports = self.ports.len();
        let mut taken = 0;
        for _ in 0..max {
            let Some(h) = self.workers[w].lane.from_ports.pop() else {
                break;
            };
            let slot = h.port as usize;
            let to = if slot < MAX_PORTS {
                // A frame a removed port handed over before it went goes with it.
                self.ports.get(slot).is_some_and(|p| p.present()).then_some(slot)
            } else {
                // An uplink's receive queue's, unless that queue has since closed.
                self.take_queue_frame(slot, h.generation, &h.frame.bytes)
                    .map(|u| ports + u)
            };
            let Some(to) = to else {
                self.pool.give(h.frame.into_bytes());
                continue;
            };
            into.push((to, h.frame));
            taken += 1;
        }
        taken
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
                let mark = &mut |f: &mut Frame| mark_congestion(&mut f.bytes);
                let drop = &mut |f: Frame| pool.give(f.into_bytes());
                let q = &mut self.ingress[slot];
                let next = match upto {
                    None => q.dequeue_new(now, mark, drop),
                    Some(_) => q.dequeue(now, mark, drop),
                };
                let Some(frame) = next else { break };
                scratch.taken[slot] += 1;
                scratch.switch_frame(&mut self.switch, &mut self.pool, from, frame, now);
            }
        }
        for to in scratch.refused.drain(..) {
            match to {
                teamster_core::switch::Egress::Port(p) => {
                    if let Some(i) = self.ports.iter().position(|s| s.plan.id == p) {
                        self.ports[i].extra.bad_offload += 1;
                    }
                }
                teamster_core::switch::Egress::Uplink(u) => {
                    if let Some(up) = self.uplinks.get_mut(u.0) {
                        up.extra.bad_offload += 1;
                    }
                }
            }
        }
    }

    /// Moves the receive queues' drop and mark counts to their interfaces.
    fn count_ingress_drops(&mut self) {
        let ports = self.ports.len();
        for (slot, q) in self.ingress.iter_mut().enumerate() {
            let (dropped, marked) = q.take_counts();
            if dropped + marked == 0 {
                continue;
            }
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
