//! Egress: what the switch decided, sent.
//!
//! Model. After the receive pass, each frame waiting in [`Pending`] is fitted to the interface
//! it leaves by (the `fit` submodule: MTU, offloads, the pacer's burst) and then:
//! - to a port: sent on the port's device at once, when the switching worker does its I/O;
//!   handed to the port worker that does (the `handoff` submodule); held while its device
//!   moves between workers (the `port_moves` submodule); dropped as `detached` while it has no
//!   interface;
//! - to an uplink, from a port: queued in the uplink's NetIOC scheduler under the port's leaf
//!   (ECN-marked or dropped as `queue_full` by NetIOC's queue budget), and moved at once to the
//!   device as far as the uplink's [`crate::pacer::Pacer`] allows and the device is not holding
//!   a full batch back;
//! - to an uplink, from an uplink (a frame between two uplinks, or one the switch originates):
//!   sent at once, outside NetIOC, which shares an uplink between VM ports only.
//!
//! At the end of the turn every device's batch is flushed ([`Datapath::send_now`]): each
//! uplink's scheduler releases what its pacer allows, a full batch at a time while the device
//! takes every batch in full, and port workers with frames waiting are woken.

use super::fit::{self, fit, Refused};
use super::port_moves;
use super::switching::Pending;
use super::{Datapath, ExtraDrops, Port, PortIo, Uplink};
use crate::device::TX_BATCH;
use crate::platform::Platform;
use crate::{Device, Frame};
use teamster_core::ioc::{Enqueued, Ioc};
use teamster_core::switch::Egress;
use teamster_core::wire::{carries_tcp, mark_congestion};
use teamster_core::Instant;

/// Lets one uplink's scheduler send what its pacer allows at `now`, a batch at a time, and
/// stops while the device is busy: frames then wait in the scheduler, where NetIOC decides whose
/// are dropped if the wait grows, rather than in the kernel's FIFO.
fn pace_one<D: Device>(u: &mut Uplink<D>, i: usize, ioc: &mut Ioc<Frame>, now: Instant) {
    u.pacer.refill(now);
    let Some(device) = u.backend.as_mut() else {
        // No device: what the scheduler releases is dropped, not kept for one that may never
        // return (the team has already moved the ports away).
        while ioc.dequeue(i, now).is_some() {
            u.extra.detached += 1;
        }
        return;
    };
    // Frames move from the scheduler to the device's transmit batch while the pacer allows and
    // the device is not holding a full batch it could not send; the device sends each full
    // batch with one call, and the rest at the end of the loop's turn ([`flush_uplink`]), so a
    // burst of arrivals costs one sendmmsg per 64 frames, not one per frame.
    while u.pacer.may_send() && device.tx_pending() < TX_BATCH {
        let Some((_, len, frame)) = ioc.dequeue(i, now) else {
            break;
        };
        device.send_owned(frame);
        u.pacer.charge(len as usize);
    }
}

/// Paces uplink `i` and sends its whole transmit batch, again while the device takes every
/// batch in full: the end of a turn, after which the loop may sleep.
fn flush_uplink<D: Device>(u: &mut Uplink<D>, i: usize, ioc: &mut Ioc<Frame>, now: Instant) {
    loop {
        pace_one(u, i, ioc, now);
        let Some(device) = u.backend.as_mut() else {
            return;
        };
        let before = device.tx_pending();
        u.extra.tx_error += device.flush() as u64;
        if before == 0 || device.tx_pending() > 0 || !u.pacer.may_send() {
            return;
        }
    }
}

/// Counts a frame that could not be fitted to its egress interface, on that interface.
fn count_refusal(extra: &mut ExtraDrops, fitted: Result<(), Refused>) {
    match fitted {
        Ok(()) => {}
        Err(Refused::TooBig) => extra.oversize += 1,
        Err(Refused::Offload) => extra.bad_offload += 1,
    }
}

impl<D: Device> Port<D> {
    /// What the port's interface takes, while it has one.
    fn egress(&self) -> Option<fit::Egress> {
        let takes_offloads = match &self.io {
            PortIo::Detached => return None,
            PortIo::Here(device) => device.takes_offloads(),
            PortIo::Away { takes_offloads, .. } => *takes_offloads,
        };
        Some(fit::Egress {
            mtu: self.mtu,
            takes_offloads,
            max_wire: None,
        })
    }
}

impl<P: Platform> Datapath<P> {
    /// Sends frames to ports at once and queues frames for uplinks in their schedulers, each
    /// fitted to its egress interface first (MTU, offloads, pacing).
    pub(super) fn dispatch(&mut self, pending: &mut Vec<Pending>, now: Instant) {
        for Pending { from, to, frame } in pending.drain(..) {
            match to {
                Egress::Port(q) => {
                    if let Some(&i) = self.index.get(&q) {
                        self.send_to_port(i, frame);
                    }
                }
                Egress::Uplink(u) => self.send_to_uplink(u.0, from, frame, now),
            }
        }
    }

    /// Sends a frame to port `i`: on its device, to its port worker, or held while its device
    /// moves between workers.
    fn send_to_port(&mut self, i: usize, frame: Frame) {
        let port = &mut self.ports[i];
        let Some(to) = port.egress() else {
            port.extra.detached += 1;
            self.pool.give(frame.into_bytes());
            return;
        };
        let pool = &mut self.pool;
        let mut full = 0;
        let fitted = match &mut port.io {
            PortIo::Detached => unreachable!("a detached port has no egress"),
            PortIo::Here(device) => fit(frame, to, &mut |f| device.send_owned(f)),
            PortIo::Away { moving_to: Some(_), .. } => {
                let held = &mut port.held;
                fit(frame, to, &mut |f| {
                    if held.len() < port_moves::HELD_MAX {
                        held.push_back(f);
                    } else {
                        full += 1;
                        pool.give(f.into_bytes());
                    }
                })
            }
            PortIo::Away { worker, .. } => {
                let lane = &self.workers[*worker].lane;
                fit(frame, to, &mut |f| {
                    if let Err(f) = lane.hand(i, f) {
                        full += 1;
                        pool.give(f.into_bytes());
                    }
                })
            }
        };
        count_refusal(&mut port.extra, fitted);
        port.extra.handoff_full += full;
    }

    /// Sends a frame to uplink `u`: from a port, through NetIOC and the pacer; else at once.
    fn send_to_uplink(&mut self, u: usize, from: Option<teamster_core::teaming::PortId>, frame: Frame, now: Instant) {
        let from = from.and_then(|p| self.index.get(&p).copied());
        let leaf = from.map(|i| self.ports[i].plan.leaf);
        let up = &mut self.uplinks[u];
        let ioc = &mut self.ioc;
        let to = fit::Egress {
            mtu: up.mtu,
            takes_offloads: up.backend.as_ref().is_some_and(|b| b.takes_offloads()),
            max_wire: Some(up.pacer.burst() as usize),
        };
        let mut full = 0;
        let mut tally = super::QueueTally::default();
        // Read once a frame (its pieces, if it is segmented, carry what it does).
        let tcp = leaf.is_some() && carries_tcp(&frame.bytes);
        // Its queue held a frame of its since its last one: backlogged all that while.
        if let (Some(i), Some(leaf)) = (from, leaf) {
            let q = &mut self.ports[i].queue;
            let at = now.as_nanos();
            if ioc.queued(u, leaf) > 0 {
                q.backlog_ns += at.saturating_sub(q.last_ns);
            }
            q.last_ns = at;
        }
        let fitted = fit(frame, to, &mut |piece| match leaf {
            Some(leaf) => {
                let wire = piece.wire_len() as u32;
                tally.tcp += u64::from(tcp);
                let mark = |f: &mut Frame| mark_congestion(&mut f.bytes);
                let taken = match ioc.enqueue_marking(u, leaf, wire, piece, now, mark) {
                    Ok(Enqueued::Plain) => true,
                    Ok(Enqueued::Marked) => {
                        up.ecn_marked += 1;
                        tally.marked += 1;
                        true
                    }
                    Err(_) => {
                        full += 1;
                        tally.dropped_bytes += u64::from(wire);
                        false
                    }
                };
                // Move what the pacer allows to the device's batch at once, so the queue fills
                // only when the uplink itself is the bottleneck.
                pace_one(up, u, ioc, now);
                tally.taken += u64::from(taken);
            }
            None => match up.backend.as_mut() {
                Some(b) => b.send_owned(piece),
                None => up.extra.detached += 1,
            },
        });
        // Too big for the uplink: the uplink's drop. A full NetIOC queue: the sending port's
        // (the queue is its own).
        count_refusal(&mut up.extra, fitted);
        if let Some(i) = from {
            let p = &mut self.ports[i];
            p.extra.queue_full += full;
            p.queue.taken += tally.taken;
            p.queue.marked += tally.marked;
            p.queue.tcp += tally.tcp;
            p.queue.dropped_bytes += tally.dropped_bytes;
        }
    }

    /// Sends what is ready: each uplink's scheduler what its pacer allows, each port's batch,
    /// and wakes the port workers for what was handed to them.
    pub(super) fn send_now(&mut self, now: Instant) {
        self.pace(now);
        for p in &mut self.ports {
            if let Some(b) = p.here() {
                p.extra.tx_error += b.flush() as u64;
            }
        }
        // Only those with frames waiting: an idle worker (its VMs' filters packed onto
        // another's queue) sleeps.
        for w in &self.workers {
            if !w.lane.to_ports.is_empty() {
                w.lane.bell.ring();
            }
        }
    }

    /// Lets each uplink's scheduler send what its pacer allows, and sends it.
    pub(super) fn pace(&mut self, now: Instant) {
        for (i, u) in self.uplinks.iter_mut().enumerate() {
            flush_uplink(u, i, &mut self.ioc, now);
        }
    }
}
