//! The receive model's event loop: frames cross the wire, the NIC steers each to a queue, the
//! queue's core polls it, and the VM's vCPUs consume it (see [`super`] for the model).

mod send;

use super::flows::{Flows, HEADERS};
use super::scenario::{Direction, PlacementMode, Setup, SplitMode, Steering};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use teamster_core::offload::{Delivered, Gro};
use teamster_core::rx::netqueue::{NetQueue, Packing, Placement};
use teamster_core::rx::split_rx::{SplitCosts, SplitRx};
use teamster_core::Instant;

/// Ethernet preamble, start delimiter, gap and FCS: bytes a frame costs the wire beyond itself.
const WIRE_EXTRA: u64 = 24;
/// An echo request's frame.
const PING_BYTES: u32 = 98;
/// The bucket of the throughput series, ns.
const BUCKET_NS: u64 = 1_000_000;

/// One variant's figures, over the measured window.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Measured {
    pub throughput_gbps: f64,
    /// Hypervisor cores busy: receive queues, SplitRx workers, send threads.
    pub host_cpu: f64,
    pub guest_cpu: f64,
    pub cpu_per_gbps: f64,
    /// Mean ping round trip (twice the one-way receive latency), µs.
    pub ping_us: Option<f64>,
    /// Send: the probe's mean one-way latency from the vNIC to the end of the wire, µs.
    pub send_latency_us: Option<f64>,
    /// Send: transmit-completion interrupts the guests took, per second.
    pub guest_irqs_per_s: f64,
    pub queues_used: u32,
    /// Frames dropped at a full receive queue or vNIC.
    pub drops: u64,
    /// Frames (segments) the wire carried, and frames delivered to VMs (after coalescing).
    pub segments: u64,
    pub delivered_frames: u64,
    /// Dynamic NetQueue moves and SplitRx changes: (time in s, what).
    pub events: Vec<(f64, String)>,
    /// Delivered throughput per ms, Gbps, from the start.
    #[serde(skip)]
    pub series: Vec<f64>,
}

#[derive(Debug, Clone, Copy)]
struct Pkt {
    stream: u32,
    seq: u32,
    born: u64,
    probe: bool,
}

/// A frame on its way to a VM: `segments` wire frames coalesced, `payload` TCP bytes.
#[derive(Debug, Clone, Copy)]
struct Item {
    stream: u32,
    segments: u32,
    payload: u64,
    bytes: u64,
    born: u64,
    probe: bool,
    queue: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    WireFree,
    /// A paced stream may send again: the wire takes it if it is free.
    WireWake,
    Arrive(u32, u32, u64, bool),
    Irq(u32),
    CoreDone(u32),
    WorkerStart(u32),
    WorkerDone(u32),
    GuestDone(u32, u32),
    Probe,
    Tick,
    TxStart(u32),
    TxDone(u32),
    Sent(u32, u32),
    /// NetIOC's scheduler has handed a packet over.
    Scheduled,
    /// A vNIC's moderated transmit-completion interrupt is due.
    GuestIrq(u32),
    /// The send probe, handed over at the time given, has left the wire.
    ProbeSent(u64),
}

/// A server (queue core, worker, vCPU, send thread): waiting work, the batch in hand, busy time.
#[derive(Default)]
struct Server {
    waiting: VecDeque<Item>,
    hand: Vec<Item>,
    busy: bool,
    wake_pending: bool,
    busy_ns: u64,
}

struct Sim<'a> {
    s: &'a Setup,
    now: u64,
    warm: u64,
    end: u64,
    seq: u64,
    heap: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    flows: Flows,
    rings: Vec<VecDeque<Pkt>>,
    queues: Vec<Server>,
    gro: Vec<Gro>,
    workers: Vec<Server>,
    vcpus: Vec<Vec<Server>>,
    tx: Vec<Server>,
    netqueue: Option<NetQueue>,
    split: Vec<SplitRx>,
    queue_pkts: Vec<u64>,
    queue_seen: Vec<bool>,
    wire_busy: bool,
    wire_wake: Option<u64>,
    wire_free_at: u64,
    rr: usize,
    burst_left: u32,
    out: Measured,
    payload_bits: f64,
    pings: Vec<u64>,
    send: send::SendState,
}

/// Runs one variant for `duration_ns`, measuring after `warmup_ns`.
pub fn run(s: &Setup, seed: u64, duration_ns: u64, warmup_ns: u64) -> Result<Measured, String> {
    let flows = Flows::new(s, seed)?;
    let nq = s.nic.queues as usize;
    let netqueue = match s.nic.steering {
        Steering::Netqueue => {
            let placement = match s.nic.placement {
                PlacementMode::Even => Placement::Even,
                PlacementMode::Packed => Placement::Packed(Packing {
                    queue_pps: match (s.nic.queue_pps, queue_ns_per_frame(s)) {
                        (Some(p), _) => p,
                        (None, ns) if ns > 0.0 => 1e9 / ns,
                        (None, _) => {
                            return Err("nic.queue_pps: the costs make a frame free: say what fills a queue".into())
                        }
                    },
                    interval: core::time::Duration::from_secs_f64(s.nic.packing_interval_ms / 1e3),
                    ..Packing::default()
                }),
            };
            let mut q = NetQueue::new(s.nic.queues, placement)?;
            for (port, mac, vni) in flows.filters(s) {
                q.add_filter(port, mac, vni, Instant::ZERO)?;
            }
            Some(q)
        }
        _ => None,
    };
    let c = &s.costs;
    let deliver_ns = c.copy + c.copy_byte * flows.inner_bytes as f64;
    let split_costs = SplitCosts {
        queue_ns: (queue_ns_per_frame(s) - deliver_ns).max(0.0),
        deliver_ns,
        handoff_ns: c.handoff,
    };
    let mut sim = Sim {
        s,
        now: 0,
        warm: warmup_ns,
        end: duration_ns,
        seq: 0,
        heap: BinaryHeap::new(),
        rings: vec![VecDeque::new(); nq],
        queues: (0..nq).map(|_| Server::default()).collect(),
        gro: (0..nq).map(|_| Gro::new()).collect(),
        workers: (0..s.vms.count).map(|_| Server::default()).collect(),
        vcpus: (0..s.vms.count)
            .map(|_| (0..s.vms.vcpus).map(|_| Server::default()).collect())
            .collect(),
        tx: (0..s.vms.count).map(|_| Server::default()).collect(),
        netqueue,
        split: (0..nq).map(|_| SplitRx::new(split_costs)).collect::<Result<_, _>>()?,
        queue_pkts: vec![0; nq],
        queue_seen: vec![false; nq],
        wire_busy: false,
        wire_wake: None,
        wire_free_at: 0,
        rr: 0,
        burst_left: 0,
        out: Measured {
            throughput_gbps: 0.0,
            host_cpu: 0.0,
            guest_cpu: 0.0,
            cpu_per_gbps: 0.0,
            ping_us: None,
            send_latency_us: None,
            guest_irqs_per_s: 0.0,
            queues_used: 0,
            drops: 0,
            segments: 0,
            delivered_frames: 0,
            events: Vec::new(),
            series: vec![0.0; duration_ns.div_ceil(BUCKET_NS) as usize],
        },
        flows,
        payload_bits: 0.0,
        pings: Vec::new(),
        send: send::SendState::new(s),
    };
    match s.traffic.direction {
        Direction::Receive => sim.at(0, Ev::WireFree),
        Direction::Send => {
            for vm in 0..s.vms.count {
                sim.at(0, Ev::TxStart(vm));
            }
        }
    }
    if s.ping.is_some() {
        sim.at(warmup_ns, Ev::Probe);
    }
    if s.nic.placement == PlacementMode::Packed || s.nic.split_rx == SplitMode::Auto {
        sim.at(tick_ns(s), Ev::Tick);
    }
    while let Some(Reverse((t, _, ev))) = sim.heap.pop() {
        if t >= duration_ns {
            break;
        }
        sim.now = t;
        sim.handle(ev);
    }
    Ok(sim.finish(duration_ns))
}

fn tick_ns(s: &Setup) -> u64 {
    (s.nic.packing_interval_ms * 1e6) as u64
}

/// CPU time a queue's core spends on one unsplit, uncoalesced frame of the traffic's size.
pub fn queue_ns_per_frame(s: &Setup) -> f64 {
    let c = &s.costs;
    let inner = f64::from(s.traffic.payload) + HEADERS as f64;
    let outer = inner + if s.traffic.overlay { 50.0 } else { 0.0 };
    c.rx + c.rx_byte * outer
        + if s.traffic.overlay { c.decap } else { 0.0 }
        + if s.nic.rx_checksum {
            0.0
        } else {
            c.checksum_byte * inner
        }
        + if s.nic.gro { c.gro } else { 0.0 }
        + c.switch
        + c.copy
        + c.copy_byte * inner
}

impl Sim<'_> {
    fn at(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((t, self.seq, ev)));
    }

    fn measuring(&self) -> bool {
        self.now >= self.warm
    }

    /// The part of `ns` of work starting now that falls inside the measured window.
    fn charge(&self, ns: f64) -> u64 {
        let from = self.now.max(self.warm);
        let to = (self.now + ns.round() as u64).min(self.end);
        to.saturating_sub(from)
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::WireFree => {
                self.wire_busy = false;
                self.send_next();
            }
            Ev::WireWake => {
                if self.wire_wake.is_some_and(|w| w <= self.now) {
                    self.wire_wake = None;
                }
                self.send_next();
            }
            Ev::Arrive(stream, seq, born, probe) => self.arrive(Pkt {
                stream,
                seq,
                born,
                probe,
            }),
            Ev::Irq(q) => {
                let srv = &mut self.queues[q as usize];
                srv.wake_pending = false;
                if !srv.busy {
                    self.poll(q, true);
                }
            }
            Ev::CoreDone(q) => {
                let items = std::mem::take(&mut self.queues[q as usize].hand);
                for it in items {
                    self.deliver(it);
                }
                if self.rings[q as usize].is_empty() {
                    self.queues[q as usize].busy = false;
                } else {
                    self.poll(q, false);
                }
            }
            Ev::WorkerStart(vm) => {
                self.workers[vm as usize].wake_pending = false;
                if !self.workers[vm as usize].busy {
                    self.work(vm, true);
                }
            }
            Ev::WorkerDone(vm) => {
                let items = std::mem::take(&mut self.workers[vm as usize].hand);
                for it in items {
                    self.vnic_receive(vm, it);
                }
                if self.workers[vm as usize].waiting.is_empty() {
                    self.workers[vm as usize].busy = false;
                } else {
                    self.work(vm, false);
                }
            }
            Ev::GuestDone(vm, cpu) => self.guest_done(vm, cpu),
            Ev::Probe => {
                let interval = self.s.ping.as_ref().map_or(0.0, |p| p.interval_us * 1e3) as u64;
                match self.s.traffic.direction {
                    Direction::Send => self.send_probe(),
                    Direction::Receive => {
                        let ser = self.wire_ns(u64::from(PING_BYTES));
                        self.at(self.now + ser, Ev::Arrive(0, 0, self.now, true));
                    }
                }
                self.at(self.now.saturating_add(interval), Ev::Probe);
            }
            Ev::Tick => self.tick(),
            Ev::TxStart(vm) => {
                self.tx[vm as usize].wake_pending = false;
                if !self.tx[vm as usize].busy {
                    self.transmit(vm, true);
                }
            }
            Ev::TxDone(vm) => self.tx_done(vm),
            Ev::Sent(stream, segs) => self.sent(stream, segs),
            Ev::Scheduled => self.scheduled(),
            Ev::GuestIrq(vm) => self.guest_irq(vm),
            Ev::ProbeSent(born) => self.probe_sent(born),
        }
    }

    fn wire_ns(&self, bytes: u64) -> u64 {
        ((bytes + WIRE_EXTRA) as f64 * 8.0 / self.s.nic.speed.bps_f64() * 1e9).ceil() as u64
    }

    /// Receive: puts the next frame of the next stream with room in its window (round robin)
    /// on the wire, or arranges to when a paced stream may send again.
    fn send_next(&mut self) {
        if self.wire_busy {
            return;
        }
        let n = self.flows.streams.len();
        let window = self.s.traffic.window;
        let mut soonest = u64::MAX;
        // The stream that sent last goes on while its burst (a TSO sender's super-frame)
        // lasts; then the next in turn. Small pushed writes have no TSO: they interleave.
        let burst = if self.s.traffic.push {
            1
        } else {
            self.s.traffic.tso_segments
        };
        let start = if self.burst_left > 0 { self.rr + n - 1 } else { self.rr };
        for i in 0..n {
            let k = (start + i) % n;
            if i > 0 || self.burst_left == 0 {
                self.burst_left = burst;
            }
            let st = &self.flows.streams[k];
            if st.in_flight >= window {
                continue;
            }
            if st.next_allowed > self.now {
                soonest = soonest.min(st.next_allowed);
                continue;
            }
            self.rr = (k + 1) % n;
            self.burst_left -= 1;
            let st = &mut self.flows.streams[k];
            st.in_flight += 1;
            st.next_allowed = st.next_allowed.max(self.now) + st.gap_ns;
            let seq = st.next_seq;
            st.next_seq = st.next_seq.wrapping_add(self.s.traffic.payload);
            let ser = self.wire_ns(self.flows.outer_bytes);
            self.wire_busy = true;
            self.at(self.now + ser, Ev::Arrive(k as u32, seq, 0, false));
            self.at(self.now + ser, Ev::WireFree);
            return;
        }
        if soonest != u64::MAX && self.wire_wake.is_none_or(|w| w > soonest) {
            self.wire_wake = Some(soonest);
            self.at(soonest, Ev::WireWake);
        }
    }

    /// A frame reaches the NIC: steered to a queue, dropped if the queue is full, and the
    /// queue's core woken after the interrupt moderation delay if it sleeps.
    fn arrive(&mut self, p: Pkt) {
        let born = if p.probe { p.born } else { self.now };
        let p = Pkt { born, ..p };
        let q = match &mut self.netqueue {
            Some(nq) => usize::from(nq.receive(self.flows.filter_key(p.stream))),
            None => usize::from(self.flows.streams[p.stream as usize].queue),
        };
        if self.measuring() && !p.probe {
            self.out.segments += 1;
            self.queue_seen[q] = true;
        }
        self.queue_pkts[q] += 1;
        if self.rings[q].len() >= self.s.nic.ring as usize {
            self.drop_frames(p.stream, 1, p.probe);
            return;
        }
        self.rings[q].push_back(p);
        let srv = &mut self.queues[q];
        if !srv.busy && !srv.wake_pending {
            srv.wake_pending = true;
            let delay = (self.s.nic.coalesce_us * 1e3) as u64;
            self.at(self.now + delay, Ev::Irq(q as u32));
        }
    }

    fn drop_frames(&mut self, stream: u32, segments: u32, probe: bool) {
        if probe {
            return;
        }
        self.out.drops += u64::from(segments);
        let st = &mut self.flows.streams[stream as usize];
        st.in_flight -= segments;
        self.send_next();
    }

    fn split_queue(&self, q: u32) -> bool {
        match self.s.nic.split_rx {
            SplitMode::Off => false,
            SplitMode::On => true,
            SplitMode::Auto => self.split[q as usize].is_split(),
        }
    }

    /// One poll of queue `q`'s core: takes up to a budget of frames, charges each stage's cost
    /// (the wake-up if the core slept), coalesces (GRO/LRO), and finishes at the batch's end.
    fn poll(&mut self, q: u32, wake: bool) {
        let s = self.s;
        let c = &s.costs;
        let take = self.rings[q as usize].len().min(s.nic.budget as usize);
        let batch: Vec<Pkt> = self.rings[q as usize].drain(..take).collect();
        let outer = self.flows.outer_bytes as f64;
        let inner = self.flows.inner_bytes as f64;
        let mut ns = if wake { c.wakeup } else { 0.0 };
        let per_segment = (if s.nic.lro { 0.0 } else { c.rx + c.rx_byte * outer })
            + if s.traffic.overlay { c.decap } else { 0.0 }
            + if s.nic.rx_checksum {
                0.0
            } else {
                c.checksum_byte * inner
            }
            + if s.nic.gro { c.gro } else { 0.0 };
        ns += per_segment * batch.len() as f64;
        let items = self.coalesce(q, &batch);
        let split = self.split_queue(q);
        for it in &items {
            if s.nic.lro {
                ns += c.rx + c.rx_byte * it.bytes as f64;
            }
            ns += c.switch
                + if split {
                    c.handoff
                } else {
                    c.copy + c.copy_byte * it.bytes as f64
                };
        }
        let charged = self.charge(ns);
        let srv = &mut self.queues[q as usize];
        srv.hand = items;
        srv.busy = true;
        srv.busy_ns += charged;
        self.at(self.now + ns.round() as u64, Ev::CoreDone(q));
    }

    /// The frames a batch becomes: with GRO or LRO, each stream's in-order segments merged
    /// by the real [`Gro`]; otherwise one each.
    fn coalesce(&mut self, q: u32, batch: &[Pkt]) -> Vec<Item> {
        let one = |p: &Pkt, f: &Flows| Item {
            stream: p.stream,
            segments: 1,
            payload: if p.probe { 0 } else { u64::from(f.payload) },
            bytes: if p.probe { u64::from(PING_BYTES) } else { f.inner_bytes },
            born: p.born,
            probe: p.probe,
            queue: q,
        };
        if !(self.s.nic.gro || self.s.nic.lro) {
            return batch.iter().map(|p| one(p, &self.flows)).collect();
        }
        let mut out: Vec<Item> = batch.iter().filter(|p| p.probe).map(|p| one(p, &self.flows)).collect();
        let mut merged: Vec<Delivered> = Vec::new();
        let g = &mut self.gro[q as usize];
        let mut born = std::collections::HashMap::new();
        for p in batch.iter().filter(|p| !p.probe) {
            born.entry(p.stream).or_insert(p.born);
            g.receive(self.flows.frame(p.stream, p.seq), &mut merged);
        }
        g.flush(&mut merged);
        for d in merged {
            let stream = self.flows.stream_of(&d.frame);
            out.push(Item {
                stream,
                segments: u32::from(d.segments),
                payload: (d.frame.len() - HEADERS) as u64,
                bytes: d.frame.len() as u64,
                born: born.get(&stream).copied().unwrap_or(self.now),
                probe: false,
                queue: q,
            });
        }
        out
    }

    /// A frame leaves its queue's core: to its VM's SplitRx worker, or straight to the vNIC.
    fn deliver(&mut self, it: Item) {
        let vm = self.flows.vm_of(it.stream, it.probe);
        if self.split_queue(it.queue) {
            let w = &mut self.workers[vm as usize];
            w.waiting.push_back(it);
            if !w.busy && !w.wake_pending {
                w.wake_pending = true;
                self.at(self.now, Ev::WorkerStart(vm));
            }
        } else {
            self.vnic_receive(vm, it);
        }
    }

    /// A SplitRx worker copies what waits for its VM into the VM (a wake-up if it slept).
    fn work(&mut self, vm: u32, wake: bool) {
        let c = self.s.costs;
        let budget = self.s.nic.budget as usize;
        let w = &mut self.workers[vm as usize];
        let take = w.waiting.len().min(budget);
        let items: Vec<Item> = w.waiting.drain(..take).collect();
        let ns = if wake { c.wakeup } else { 0.0 }
            + items.iter().map(|i| c.copy + c.copy_byte * i.bytes as f64).sum::<f64>();
        let charged = self.charge(ns);
        let w = &mut self.workers[vm as usize];
        w.hand = items;
        w.busy = true;
        w.busy_ns += charged;
        self.at(self.now + ns.round() as u64, Ev::WorkerDone(vm));
    }

    /// A frame reaches the VM's vNIC: to the vCPU its flow maps to (dropped if that vCPU's
    /// ring is full).
    fn vnic_receive(&mut self, vm: u32, it: Item) {
        let cpus = self.s.vms.vcpus;
        let cpu = if it.probe || !self.s.vms.guest_rss {
            0
        } else {
            it.stream % cpus
        };
        let v = &mut self.vcpus[vm as usize][cpu as usize];
        if v.waiting.len() >= self.s.nic.ring as usize {
            self.drop_frames(it.stream, it.segments, it.probe);
            return;
        }
        v.waiting.push_back(it);
        if !v.busy {
            self.guest_next(vm, cpu);
        }
    }

    fn guest_next(&mut self, vm: u32, cpu: u32) {
        let c = self.s.costs;
        let v = &mut self.vcpus[vm as usize][cpu as usize];
        let Some(it) = v.waiting.pop_front() else {
            v.busy = false;
            return;
        };
        let ns = c.guest + c.guest_byte * it.bytes as f64;
        let charged = self.charge(ns);
        let v = &mut self.vcpus[vm as usize][cpu as usize];
        v.busy = true;
        v.busy_ns += charged;
        v.hand.push(it); // (emptied by guest_done)
        self.at(self.now + ns.round() as u64, Ev::GuestDone(vm, cpu));
    }

    /// The guest has consumed a frame: its segments leave the stream's window (the sender may
    /// send more) and count as delivered; a ping's latency is recorded.
    fn guest_done(&mut self, vm: u32, cpu: u32) {
        let it = self.vcpus[vm as usize][cpu as usize]
            .hand
            .pop()
            .expect("a frame in hand");
        if it.probe {
            if self.measuring() {
                self.pings.push(self.now - it.born);
            }
        } else {
            self.flows.streams[it.stream as usize].in_flight -= it.segments;
            self.count_delivered(it.payload);
            self.send_next();
        }
        self.guest_next(vm, cpu);
    }

    /// Counts one frame of `payload` TCP bytes delivered (to a VM, or onto the wire).
    fn count_delivered(&mut self, payload: u64) {
        let bits = payload as f64 * 8.0;
        if let Some(b) = self.out.series.get_mut((self.now / BUCKET_NS) as usize) {
            *b += bits;
        }
        if self.measuring() {
            self.payload_bits += bits;
            self.out.delivered_frames += 1;
        }
    }

    /// Dynamic NetQueue's round and SplitRx's observation, every packing interval.
    fn tick(&mut self) {
        let t = Instant::from_nanos(self.now);
        let secs_now = self.now as f64 / 1e9;
        if let Some(nq) = &mut self.netqueue {
            nq.handle_timeout(t);
            while let Some(e) = nq.poll_event() {
                let loads: Vec<String> = e.loads.iter().map(|l| format!("{l:.2}")).collect();
                let text = format!(
                    "vm{} queue {} -> {} ({:?}; loads {})",
                    e.port.0,
                    e.from,
                    e.to,
                    e.reason,
                    loads.join(" ")
                );
                self.out.events.push((secs_now, text));
            }
        }
        if self.s.nic.split_rx == SplitMode::Auto {
            let secs = tick_ns(self.s) as f64 / 1e9;
            for q in 0..self.split.len() {
                let pps = self.queue_pkts[q] as f64 / secs;
                let ports = match &self.netqueue {
                    Some(nq) => nq.filters().iter().filter(|f| usize::from(f.queue) == q).count(),
                    None => self.flows.vms_on_queue(q as u16),
                } as f64;
                if let Some(e) = self.split[q].observe(t, pps, 1.0, ports.max(1.0)) {
                    let text = format!(
                        "queue {q} {} (unsplit load {:.2})",
                        if e.split { "split" } else { "joined" },
                        e.loads.unsplit
                    );
                    self.out.events.push((secs_now, text));
                }
            }
        }
        self.queue_pkts.iter_mut().for_each(|p| *p = 0);
        self.at(self.now + tick_ns(self.s), Ev::Tick);
    }

    fn finish(mut self, duration_ns: u64) -> Measured {
        let window_s = (duration_ns - self.warm) as f64 / 1e9;
        let busy = |v: &[Server]| v.iter().map(|s| s.busy_ns).sum::<u64>() as f64;
        let host = busy(&self.queues) + busy(&self.workers) + busy(&self.tx) + self.send.scheduler.busy_ns as f64;
        let guest: f64 = self.vcpus.iter().map(|v| busy(v)).sum();
        let o = &mut self.out;
        o.throughput_gbps = self.payload_bits / window_s / 1e9;
        o.host_cpu = host / 1e9 / window_s;
        o.guest_cpu = guest / 1e9 / window_s;
        o.cpu_per_gbps = if o.throughput_gbps > 0.0 {
            o.host_cpu / o.throughput_gbps
        } else {
            0.0
        };
        o.queues_used = self.queue_seen.iter().filter(|s| **s).count() as u32;
        if !self.pings.is_empty() {
            let mean = self.pings.iter().sum::<u64>() as f64 / self.pings.len() as f64;
            o.ping_us = Some(2.0 * mean / 1e3);
        }
        let lat = &self.send.latencies;
        if !lat.is_empty() {
            o.send_latency_us = Some(lat.iter().sum::<u64>() as f64 / lat.len() as f64 / 1e3);
        }
        o.guest_irqs_per_s = self.send.irqs as f64 / window_s;
        for b in &mut o.series {
            *b /= BUCKET_NS as f64; // bits per ns = Gbps
        }
        self.out
    }
}
