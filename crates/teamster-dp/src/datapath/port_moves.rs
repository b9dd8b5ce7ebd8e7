//! A port's I/O follows its receive queue: under NetQueue, the thread that reads the queue a
//! VM's filter is on also does that VM's port I/O, so Dynamic NetQueue packing filters onto
//! fewer queues packs the VMs' whole receive path onto fewer threads, and the others sleep.
//!
//! Model. Each round, after NetQueue has placed the filters, a port whose first filter (on the
//! first uplink that has one for it) is on queue `q >= 1` belongs on the thread reading `q`
//! ([`Datapath::queue_thread`]: the switching worker for queue 1); a port on the default queue,
//! or with no filter, stays where it is. A port not where it belongs moves. From the switching
//! worker, its socket is simply given to the port worker. From a port worker, the worker is
//! asked to release the socket ([`Command::Release`]) and sends what it was handed first;
//! frames the switch sends the port meanwhile are held here (at most [`HELD_MAX`], beyond that
//! counted as `handoff_full`); when the socket comes back it goes to its new thread, the held
//! frames after it, and the old worker's counts for the port are taken. A port detached or
//! gone during a move is detached as any other (its held frames counted `detached`; its socket
//! closed when it comes back, what it still held counted `detached` too). Frames the old
//! worker received from the VM before it let go are taken into the switch before the socket
//! moves, so the VM's frames stay in order.

use super::port_worker::{Command, Returned};
use super::{Datapath, PortIo};
use crate::platform::Platform;
use crate::Device;
use std::collections::HashMap;
use teamster_core::switch::Egress;
use teamster_core::teaming::PortId;
use teamster_core::Instant;

/// Frames held for a port while its socket moves between workers.
pub const HELD_MAX: usize = 1024;

impl<P: Platform> Datapath<P> {
    /// Moves port `i`'s socket to thread `to` (0: the switching worker; `k`: port worker
    /// `k - 1`), at once from the switching worker, else by asking its worker to hand it back.
    fn move_port(&mut self, i: usize, to: usize) {
        match &mut self.ports[i].io {
            PortIo::Away { worker, moving_to, .. } => {
                if moving_to.is_some() || *worker + 1 == to {
                    return;
                }
                *moving_to = Some(to);
                let from = *worker;
                self.workers[from].command(Command::Release { port: i });
            }
            PortIo::Here(_) if to > 0 => {
                let PortIo::Here(mut link) = std::mem::replace(&mut self.ports[i].io, PortIo::Detached) else {
                    unreachable!("matched above")
                };
                // What it sent and dropped so far is counted here; the rest by its worker.
                let sent = link.take_sent();
                let p = &mut self.ports[i];
                self.switch
                    .count_sent(Egress::Port(p.plan.id), sent.packets, sent.bytes);
                let rx = link.take_rx_drops();
                p.extra.truncated += rx.truncated;
                p.extra.bad_offload += rx.bad_offload;
                self.give(i, to - 1, Box::new(link));
            }
            _ => {}
        }
    }

    /// Gives port `i`'s socket to port worker `worker` (a new generation).
    pub(super) fn give(&mut self, i: usize, worker: usize, link: Box<P::Device>) {
        self.generation += 1;
        self.pollfds_stale = true;
        let p = &mut self.ports[i];
        p.home = Some(worker);
        p.io = PortIo::Away {
            worker,
            generation: self.generation,
            ifindex: link.ifindex(),
            takes_offloads: link.takes_offloads(),
            describe: link.describe(),
            moving_to: None,
        };
        self.workers[worker].command(Command::Attach {
            port: i,
            generation: self.generation,
            link,
            interface: p.plan.interface.clone(),
        });
    }

    /// Gives each socket a worker handed back to the thread its port moves to, with the
    /// frames held for it meanwhile.
    pub(super) fn take_returned(&mut self, now: Instant) {
        while let Ok(Returned { port, generation, link }) = self.returned.try_recv() {
            let p = &mut self.ports[port];
            let (old, to) = match &p.io {
                PortIo::Away {
                    worker,
                    generation: g,
                    moving_to: Some(to),
                    ..
                } if *g == generation => (*worker, *to),
                // Detached (or replaced) while it moved: the socket is not wanted; what it sent
                // and still held is counted, as a detach counts it.
                _ => {
                    let mut link = *link;
                    if p.present() {
                        p.extra.detached += link.tx_pending() as u64;
                        let sent = link.take_sent();
                        let id = p.plan.id;
                        self.switch.count_sent(Egress::Port(id), sent.packets, sent.bytes);
                    }
                    self.close(link);
                    continue;
                }
            };
            self.take_tally(port, old);
            // What the old worker received before it let go goes to the switch first, so the
            // VM's frames stay in order.
            let mut earlier = Vec::new();
            self.take_handed(old, usize::MAX, &mut earlier);
            for (slot, frame) in earlier {
                self.enqueue_received(slot, frame, now);
            }
            let held = std::mem::take(&mut self.ports[port].held);
            if to == 0 {
                let mut link = *link;
                for frame in held {
                    link.send_owned(frame);
                }
                let p = &mut self.ports[port];
                (p.io, p.home) = (PortIo::Here(link), None);
                self.pollfds_stale = true;
            } else {
                self.give(port, to - 1, link);
                let lane = &self.workers[to - 1].lane;
                let mut full = 0;
                for frame in held {
                    if let Err(frame) = lane.hand(port, frame) {
                        full += 1;
                        self.pool.give(frame.into_bytes());
                    }
                }
                lane.bell.ring();
                self.ports[port].extra.handoff_full += full;
            }
            let what = format!(
                "port {}: I/O moved to data-plane thread {to} (its receive queue's)",
                self.ports[port].plan.name
            );
            self.event(now, "rx", what);
        }
    }

    /// Moves each port whose NetQueue filter is on a queue another thread reads to that
    /// thread (see the module documentation).
    pub(super) fn follow_queues(&mut self) {
        if self.workers.is_empty() {
            return;
        }
        let mut queue_of: HashMap<PortId, u16> = HashMap::new();
        for u in &self.uplinks {
            for (port, queue) in u.rx.filter_queues() {
                queue_of.entry(port).or_insert(queue);
            }
        }
        for i in 0..self.ports.len() {
            let Some(&q) = queue_of.get(&self.ports[i].plan.id) else {
                continue;
            };
            if q >= 1 && self.ports[i].present() {
                let to = self.queue_thread(usize::from(q));
                self.move_port(i, to);
            }
        }
    }
}
