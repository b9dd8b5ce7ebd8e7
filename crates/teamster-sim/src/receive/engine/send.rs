//! Send mode: the VMs' send threads, the transmit scheduler in front of the NIC, and the
//! guests' transmit-completion interrupts.
//!
//! Model. Each VM's send thread takes up to `vms.tx_batch` TSO super-frames that its streams'
//! windows allow, pays for them (`switch`, `tx`, or software segmentation; `wakeup` if it
//! slept) and hands them over together at the end of its run. Under `scheduler = "fifo"` they
//! join the NIC's queue at once, behind whatever it holds, so a batch stays a burst on the
//! wire. Under `scheduler = "netioc"` they join the VM's own port queue; one scheduler core
//! takes a packet from each backlogged port in turn (`schedule` per packet, `wakeup` when it
//! had slept with every port queue empty) and keeps at most [`NIC_DEPTH`] packets at the NIC,
//! so the wire carries the ports' packets interleaved. With `vms.irq_rate`, a packet that has
//! left the wire is reported to its guest by a moderated interrupt (`guest_irq` on the guest's
//! vCPU): the first completion not yet reported starts the vNIC's coalescing timer, 1 /
//! `irq_rate` long, and the interrupt that ends it reports every completion until then; the
//! segments leave the window (and the guest's TCP may send more) only then, with the ACKs that
//! came back for them (`traffic.ack_every`), which the host and the guest receive at the
//! receive costs. (ACKs' own timing is not modelled: they come back with the completions.) This is why interleaving costs the guests
//! CPU: a burst's completions arrive together and one interrupt reports them all, while the
//! same packets spread over a round of every port's arrive one by one. The probe (`[ping]`)
//! is a 98-byte frame on a port of its own, handed over every `interval_us`; its latency runs
//! to its last bit on the wire.

use super::{Ev, Item, Server, Sim, PING_BYTES};
use crate::receive::scenario::{Setup, TxScheduler};
use std::collections::VecDeque;

/// Packets NetIOC's scheduler lets the NIC hold (one on the wire, one waiting): enough to keep
/// the wire busy between two of its decisions, few enough that its order is the wire's.
const NIC_DEPTH: u32 = 2;
/// An ACK's frame: Ethernet, IPv4 and TCP with timestamps.
const ACK_BYTES: f64 = 66.0;

/// What the send side keeps beyond the send threads.
pub(super) struct SendState {
    /// NetIOC: one queue per VM port, then the probe's.
    ports: Vec<VecDeque<Item>>,
    pub(super) scheduler: Server,
    /// The scheduler polls (it has work or waits for room at the NIC); else it sleeps.
    awake: bool,
    next_port: usize,
    /// Packets handed to the NIC and not yet off the wire.
    at_nic: u32,
    /// Per VM: (stream, segments) off the wire and not yet reported to the guest; the vNIC's
    /// coalescing timer runs while this is not empty.
    unreported: Vec<Vec<(u32, u32)>>,
    /// Interrupts taken in the measured window, and the probe's latencies (ns).
    pub(super) irqs: u64,
    pub(super) latencies: Vec<u64>,
}

impl SendState {
    pub(super) fn new(s: &Setup) -> SendState {
        let vms = s.vms.count as usize;
        SendState {
            ports: vec![VecDeque::new(); vms + 1],
            scheduler: Server::default(),
            awake: false,
            next_port: 0,
            at_nic: 0,
            unreported: vec![Vec::new(); vms],
            irqs: 0,
            latencies: Vec::new(),
        }
    }
}

impl Sim<'_> {
    /// VM `vm`'s send thread takes the super-frames its streams' windows allow (up to its
    /// batch) and does the work the NIC cannot (segmentation, checksums, VXLAN); if none may
    /// send it sleeps until a paced stream may.
    pub(super) fn transmit(&mut self, vm: u32, wake: bool) {
        let s = self.s;
        let c = &s.costs;
        let per_vm = s.traffic.streams_per_vm;
        let window = s.traffic.window;
        let payload = f64::from(s.traffic.payload);
        let overlay = s.traffic.overlay;
        let mut ns = if wake { c.wakeup } else { 0.0 };
        let mut guest = 0.0;
        let mut batch = Vec::new();
        while batch.len() < s.vms.tx_batch as usize {
            let pick = (0..per_vm).map(|i| vm * per_vm + i).find(|&k| {
                let st = &self.flows.streams[k as usize];
                st.in_flight < window && st.next_allowed <= self.now
            });
            let Some(k) = pick else { break };
            let st = &mut self.flows.streams[k as usize];
            let segs = s.traffic.tso_segments.min(window - st.in_flight);
            st.in_flight += segs;
            st.next_allowed = st.next_allowed.max(self.now) + st.gap_ns * u64::from(segs);
            let n = f64::from(segs);
            ns += c.switch;
            if s.nic.tso || !overlay {
                // The NIC segments (and checksums) the super-frame: one hand-over.
                ns += c.tx + if overlay { c.encap } else { 0.0 };
            } else {
                // Cut in software, each piece checksummed, wrapped and handed over on its own.
                ns += n * (c.segment + c.segment_byte * payload + c.encap + c.tx);
            }
            guest += c.guest + c.guest_byte * payload * n;
            batch.push(Item {
                stream: k,
                segments: segs,
                payload: (payload * n) as u64,
                bytes: 0,
                born: self.now,
                probe: false,
                queue: 0,
            });
        }
        if batch.is_empty() {
            self.tx[vm as usize].busy = false;
            let soonest = (0..per_vm)
                .map(|i| &self.flows.streams[(vm * per_vm + i) as usize])
                .filter(|st| st.in_flight < window)
                .map(|st| st.next_allowed)
                .min();
            if let Some(t) = soonest {
                self.tx[vm as usize].wake_pending = true;
                self.at(t, Ev::TxStart(vm));
            }
            return;
        }
        let guest_charged = self.charge(guest);
        self.vcpus[vm as usize][0].busy_ns += guest_charged;
        let charged = self.charge(ns);
        let t = &mut self.tx[vm as usize];
        t.busy = true;
        t.busy_ns += charged;
        t.hand = batch;
        self.at(self.now + ns.round() as u64, Ev::TxDone(vm));
    }

    /// The send thread hands its batch over (to the NIC, or to its port's queue under
    /// NetIOC), then takes the next.
    pub(super) fn tx_done(&mut self, vm: u32) {
        let batch = std::mem::take(&mut self.tx[vm as usize].hand);
        for it in batch {
            self.hand_over(vm as usize, it);
        }
        self.transmit(vm, false);
    }

    fn hand_over(&mut self, port: usize, it: Item) {
        match self.s.nic.scheduler {
            TxScheduler::Fifo => self.onto_wire(it),
            TxScheduler::Netioc => {
                self.send.ports[port].push_back(it);
                let wake = !self.send.awake;
                self.send.awake = true;
                self.schedule_next(wake);
            }
        }
    }

    /// The NIC's queue takes a packet: the wire sends it after what it already holds.
    fn onto_wire(&mut self, it: Item) {
        let ser = if it.probe {
            self.wire_ns(u64::from(PING_BYTES))
        } else {
            self.wire_ns(self.flows.outer_bytes) * u64::from(it.segments)
        };
        self.wire_free_at = self.wire_free_at.max(self.now) + ser;
        self.send.at_nic += 1;
        if it.probe {
            self.at(self.wire_free_at, Ev::ProbeSent(it.born));
            return;
        }
        if self.measuring() {
            self.out.segments += u64::from(it.segments);
        }
        self.at(self.wire_free_at, Ev::Sent(it.stream, it.segments));
    }

    /// NetIOC's scheduler takes the next backlogged port's head packet, in turn, if the NIC
    /// has room; with nothing queued anywhere it goes to sleep.
    fn schedule_next(&mut self, wake: bool) {
        if self.s.nic.scheduler != TxScheduler::Netioc || self.send.scheduler.busy || self.send.at_nic >= NIC_DEPTH {
            return;
        }
        let n = self.send.ports.len();
        let first = self.send.next_port;
        let Some(p) = (0..n)
            .map(|i| (first + i) % n)
            .find(|&p| !self.send.ports[p].is_empty())
        else {
            self.send.awake = false;
            return;
        };
        self.send.next_port = (p + 1) % n;
        let it = self.send.ports[p].pop_front().expect("a backlogged port");
        let c = &self.s.costs;
        let ns = c.schedule + if wake { c.wakeup } else { 0.0 };
        let charged = self.charge(ns);
        let srv = &mut self.send.scheduler;
        srv.busy = true;
        srv.busy_ns += charged;
        srv.hand = vec![it];
        self.at(self.now + ns.round() as u64, Ev::Scheduled);
    }

    pub(super) fn scheduled(&mut self) {
        let srv = &mut self.send.scheduler;
        srv.busy = false;
        let it = srv.hand.pop().expect("a packet in hand");
        self.onto_wire(it);
        self.schedule_next(false);
    }

    /// Segments are on the wire: they count as delivered (acknowledgements are not modelled)
    /// and are reported to the guest, at once or by its next moderated interrupt.
    pub(super) fn sent(&mut self, stream: u32, segs: u32) {
        self.send.at_nic -= 1;
        self.count_delivered(u64::from(segs) * u64::from(self.s.traffic.payload));
        let vm = stream / self.s.traffic.streams_per_vm;
        if let Some(rate) = self.s.vms.irq_rate {
            // The first completion not yet reported starts the vNIC's coalescing timer; the
            // interrupt that ends it reports every completion until then.
            if self.send.unreported[vm as usize].is_empty() {
                self.at(self.now + (1e9 / rate) as u64, Ev::GuestIrq(vm));
            }
            self.send.unreported[vm as usize].push((stream, segs));
        } else {
            self.release(vm, stream, segs);
            self.wake_sender(vm);
        }
        self.schedule_next(false);
    }

    /// Woken now even if it waits for a paced stream: this one may send at once.
    fn wake_sender(&mut self, vm: u32) {
        if !self.tx[vm as usize].busy {
            self.tx[vm as usize].wake_pending = true;
            self.at(self.now, Ev::TxStart(vm));
        }
    }

    /// The guest takes a transmit-completion interrupt: it pays for it, and the reported
    /// segments leave their windows.
    pub(super) fn guest_irq(&mut self, vm: u32) {
        if self.measuring() {
            self.send.irqs += 1;
        }
        let charged = self.charge(self.s.costs.guest_irq);
        self.vcpus[vm as usize][0].busy_ns += charged;
        for (stream, segs) in std::mem::take(&mut self.send.unreported[vm as usize]) {
            self.release(vm, stream, segs);
        }
        self.wake_sender(vm);
    }

    /// Segments leave their stream's window; the ACKs that report them are received (by the
    /// host's receive path and the guest) now.
    fn release(&mut self, vm: u32, stream: u32, segs: u32) {
        self.flows.streams[stream as usize].in_flight -= segs;
        let every = self.s.traffic.ack_every;
        if every == 0 {
            return;
        }
        let c = &self.s.costs;
        let acks = f64::from(segs.div_ceil(every));
        let host = acks * (c.rx + c.rx_byte * ACK_BYTES + c.switch + c.copy + c.copy_byte * ACK_BYTES);
        let guest = acks * (c.guest + c.guest_byte * ACK_BYTES);
        let (host, guest) = (self.charge(host), self.charge(guest));
        self.queues[0].busy_ns += host;
        self.vcpus[vm as usize][0].busy_ns += guest;
    }

    /// The probe is handed over on its own port.
    pub(super) fn send_probe(&mut self) {
        let it = Item {
            stream: 0,
            segments: 1,
            payload: 0,
            bytes: u64::from(PING_BYTES),
            born: self.now,
            probe: true,
            queue: 0,
        };
        self.hand_over(self.s.vms.count as usize, it);
    }

    pub(super) fn probe_sent(&mut self, born: u64) {
        self.send.at_nic -= 1;
        if born >= self.warm {
            self.send.latencies.push(self.now - born);
        }
        self.schedule_next(false);
    }
}
