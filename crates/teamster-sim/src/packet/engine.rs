//! The packet-mode engine: every packet of every port through the real switch, team and
//! scheduler, as the live data plane sends frames.
//!
//! Events, in time order (ties in the order they were scheduled): a source emits, an uplink
//! finishes sending a packet, a TCP ACK, loss signal or RR response comes back, a timeline event
//! applies, a one-second row is recorded. A packet is its flow's headers (see [`super::frames`])
//! handed to [`Switch::ingress_elided`] at its length, so MAC learning, VLAN tagging, port
//! security and loop prevention decide as live, and the team picks the uplink and meters the
//! packet as it is offered (the team's timers run first when due); it then goes into that
//! uplink's queueing discipline: NetIOC
//! ([`Ioc`]: a queue per port, `queue_packets` deep) or a FIFO (`fifo_packets` deep, for
//! comparison). A full queue drops the packet, except a greedy source's: that source holds it and
//! waits, as a sender blocked on a full socket buffer, until a frame leaves the uplink, then
//! fills its queue again (see `Blocked`). Each uplink sends one packet at a time at its
//! effective rate, and the switch counts what left. The remote host the ports send to answers
//! each port once a second on the uplink it uses, so the switch knows where its MAC lives.

use super::frames::{self, REMOTE_IP, REMOTE_MAC, REMOTE_PORT};
use super::source::{SourceSpec, Stream};
use crate::run::{MoveRecord, Row, RunOutput};
use core::net::Ipv4Addr;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use teamster_core::ioc::admission::ReservationCap;
use teamster_core::ioc::{Ioc, NodeId, NodeSpec, QueueLimit, Tree};
use teamster_core::switch::{Egress, Ingress, SecurityPolicy, Switch, SwitchConfig};
use teamster_core::teaming::{Effect, GroupId, LbtConfig, LinkState, PortGroupSpec, PortId, PortSpec, Team, UplinkId};
use teamster_core::units::Bandwidth;
use teamster_core::wire::MacAddr;
use teamster_core::Instant;

/// How an uplink queues packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Discipline {
    /// The NetIOC scheduler.
    Netioc,
    /// One first-in first-out queue: no NetIOC.
    Fifo,
}

/// An uplink in packet mode.
#[derive(Debug, Clone)]
pub struct UplinkPlan {
    pub name: String,
    /// Nominal capacity: what admission control counts against.
    pub capacity: Bandwidth,
    /// Effective rate packets leave at (e.g. 9.4 Gbit/s of TCP payload on 10 GbE).
    pub rate_bps: f64,
}

/// A port in packet mode.
#[derive(Debug, Clone)]
pub struct PortPlan {
    pub name: String,
    pub id: u32,
    pub mac: MacAddr,
    pub group: usize,
    /// Its leaf in the NetIOC tree.
    pub leaf: NodeId,
    pub source: SourceSpec,
    pub start_s: f64,
    pub stop_s: Option<f64>,
}

/// A timeline event in packet mode.
#[derive(Debug, Clone)]
pub enum PlanEvent {
    /// Change a node's reservation/shares/limit, through admission control.
    SetControls { node: NodeId, spec: NodeSpec },
    /// Switch every uplink's queueing discipline.
    Discipline(Discipline),
    /// Every node's controls from a tree of the same shape, whose admission the caller decided
    /// (a cluster's placement): ports arriving and leaving by migration.
    ReplaceTree(Tree),
    /// An uplink's link goes down (false) or comes up: the team fails over, and what waited
    /// for a failed uplink is dropped.
    Link { uplink: usize, up: bool },
}

/// A whole host, ready to run.
#[derive(Debug, Clone)]
pub struct HostPlan {
    pub uplinks: Vec<UplinkPlan>,
    pub groups: Vec<PortGroupSpec>,
    pub lbt: LbtConfig,
    pub tree: Tree,
    pub reservation_cap: ReservationCap,
    pub ports: Vec<PortPlan>,
    /// Each port group's security policy (by group index; missing: all rejected).
    pub security: Vec<SecurityPolicy>,
    pub discipline: Discipline,
    pub queue_packets: usize,
    /// Each uplink's byte budget in milliseconds at its capacity (None: packets only).
    pub queue_ms: Option<f64>,
    pub fifo_packets: usize,
    pub events: Vec<(f64, PlanEvent)>,
    pub duration_s: f64,
}

impl HostPlan {
    /// What bounds each uplink's NetIOC queues.
    fn queue_limit(&self) -> QueueLimit {
        QueueLimit {
            frames_per_port: self.queue_packets,
            time: self.queue_ms.map(|ms| std::time::Duration::from_secs_f64(ms / 1e3)),
        }
    }
}

/// A packet in a queue.
#[derive(Debug, Clone, Copy)]
struct Pkt {
    port: u32,
    stream: u32,
    /// Its place in its stream, from 0.
    seq: u64,
    bytes: u32,
    born: f64,
}

/// What the engine tracks of one stream's order: the next sequence number, the highest one
/// that has reached the remote host, and the uplink its last packet took.
#[derive(Debug, Clone, Copy, Default)]
struct StreamOrder {
    next: u64,
    highest: Option<u64>,
    uplink: Option<usize>,
}

#[derive(Debug, Clone, Copy)]
enum Ev {
    Start(usize),
    Stop(usize),
    CbrTick(usize),
    TxDone(usize, Pkt),
    Wake(usize),
    Ack(usize, u32),
    Loss(usize, u32),
    Response(usize, f64),
    Timeline(usize),
    Record,
}

/// Why a greedy source is not sending: it sends until a frame of it does not join a queue, then
/// waits, as a sender blocked on a full socket buffer does, until a frame leaves an uplink.
#[derive(Debug, Clone, Copy)]
enum Blocked {
    /// Its frame was refused by uplink `.0`'s queue: the source holds it (it was offered and
    /// metered once) until a frame leaves that uplink, then tries it again.
    Holding(usize, Pkt),
    /// The switch dropped its frame (no uplink took it): it sends again at the next departure
    /// on any uplink.
    Dropped,
}

/// The FIFO that replaces NetIOC on an uplink when the discipline says so.
struct Fifo {
    queue: VecDeque<Pkt>,
    per_port: Vec<usize>,
}

/// Time-ordered events; the sequence number keeps equal times in scheduling order.
struct Agenda {
    heap: BinaryHeap<Reverse<(u64, u64, usize)>>,
    events: Vec<Option<Ev>>,
    free: Vec<usize>,
    seq: u64,
}

impl Agenda {
    fn push(&mut self, t_ns: f64, ev: Ev) {
        let slot = match self.free.pop() {
            Some(i) => {
                self.events[i] = Some(ev);
                i
            }
            None => {
                self.events.push(Some(ev));
                self.events.len() - 1
            }
        };
        self.seq += 1;
        self.heap.push(Reverse((t_ns.max(0.0) as u64, self.seq, slot)));
    }

    fn pop(&mut self) -> Option<(f64, Ev)> {
        let Reverse((t, _, slot)) = self.heap.pop()?;
        let ev = self.events[slot].take().expect("each slot is popped once");
        self.free.push(slot);
        Some((t as f64, ev))
    }
}

struct Sim<'a> {
    plan: &'a HostPlan,
    /// The switch every packet goes through (MAC learning, VLANs, security, the team).
    switch: Switch,
    /// NetIOC: the tree, a scheduler per uplink, a shared limit bucket per port.
    ioc: Ioc<Pkt>,
    /// Per uplink, when the discipline is FIFO (NetIOC still holds the controls).
    fifo: Option<Vec<Fifo>>,
    busy: Vec<bool>,
    /// Per uplink, when its last packet's last bit left, in exact (fractional) nanoseconds.
    line_clock: Vec<f64>,
    /// Per port, when a constant-bit-rate source is next due, in exact nanoseconds.
    cbr_clock: Vec<f64>,
    agenda: Agenda,
    active: Vec<bool>,
    /// Per port: what a greedy source waits for, if anything (see [`Blocked`]).
    blocked: Vec<Option<Blocked>>,
    /// The port whose blocked source is first to retry at the next departure (the turn rotates,
    /// so blocked sources share the room a shared queue makes).
    turn: usize,
    streams: Vec<Vec<Stream>>,
    /// Per port, per stream: the headers of its flow to the remote host.
    flows: Vec<Vec<Vec<u8>>>,
    /// Per port, per stream: its order (sequence numbers, uplink).
    order: Vec<Vec<StreamOrder>>,
    // Per-second counters.
    offered: Vec<f64>,
    delivered: Vec<f64>,
    uplink_bits: Vec<f64>,
    out: RunOutput,
}

/// Runs a host plan to its end.
pub fn run(plan: &HostPlan) -> Result<RunOutput, String> {
    let mut sim = Sim::new(plan)?;
    sim.run_to_end()?;
    Ok(sim.finish())
}

/// Runs a host plan to its end, and also gives, per port, the frames waiting in its uplinks'
/// queues at the end (a test's view of how full the sources keep them).
#[cfg(test)]
pub(super) fn run_with_queues(plan: &HostPlan) -> Result<(RunOutput, Vec<usize>), String> {
    let mut sim = Sim::new(plan)?;
    sim.run_to_end()?;
    let queued = (0..plan.ports.len())
        .map(|i| {
            (0..plan.uplinks.len())
                .map(|u| match &sim.fifo {
                    Some(fifos) => fifos[u].per_port[i],
                    None => sim.ioc.queued(u, plan.ports[i].leaf),
                })
                .sum()
        })
        .collect();
    Ok((sim.finish(), queued))
}

impl<'a> Sim<'a> {
    /// A host built from `plan`, with its ports' starts, stops, timeline and first row due.
    fn new(plan: &'a HostPlan) -> Result<Sim<'a>, String> {
        let uplinks = plan.uplinks.iter().map(|u| (u.name.clone(), u.capacity));
        let mut team = Team::with_groups(uplinks, plan.lbt, &plan.groups).map_err(|e| e.to_string())?;
        let mut flows = Vec::new();
        for (i, p) in plan.ports.iter().enumerate() {
            team.add_port(PortSpec {
                id: PortId(p.id),
                mac: p.mac,
                group: GroupId(p.group),
            })
            .map_err(|e| format!("ports[{i}]: {e}"))?;
            let streams = match p.source {
                SourceSpec::TcpStream { streams, .. } => streams,
                _ => 1,
            };
            let ip = Ipv4Addr::from(0x0a00_0000 + i as u32);
            flows.push(
                (0..streams)
                    .map(|s| {
                        let port = 40_000 + s as u16;
                        frames::headers((p.mac, ip, port), (REMOTE_MAC, REMOTE_IP, REMOTE_PORT), None)
                    })
                    .collect(),
            );
        }
        let mut switch = Switch::with_config(
            team,
            SwitchConfig {
                security: plan.security.clone(),
                ..SwitchConfig::default()
            },
        );
        // Each uplink's own MAC, as the live data plane reads it from the interface (what a
        // spreading policy sends from on another member than a port's own).
        for u in 0..plan.uplinks.len() {
            switch.set_uplink_mac(UplinkId(u), Some(MacAddr([0x02, 0xfe, 0, 0, 0, u as u8 + 1])));
        }
        let np = plan.ports.len();
        let leaves: Vec<NodeId> = plan.ports.iter().map(|p| p.leaf).collect();
        let capacities = plan.uplinks.iter().map(|u| u.capacity).collect();
        let ioc = Ioc::new(
            plan.tree.clone(),
            &leaves,
            capacities,
            plan.reservation_cap,
            plan.queue_limit(),
        );
        let mut sim = Sim {
            plan,
            switch,
            ioc,
            fifo: (plan.discipline == Discipline::Fifo).then(|| new_fifos(plan)),
            busy: vec![false; plan.uplinks.len()],
            line_clock: vec![f64::NEG_INFINITY; plan.uplinks.len()],
            cbr_clock: vec![f64::NEG_INFINITY; np],
            agenda: Agenda {
                heap: BinaryHeap::new(),
                events: Vec::new(),
                free: Vec::new(),
                seq: 0,
            },
            active: vec![false; np],
            blocked: vec![None; np],
            turn: 0,
            streams: plan
                .ports
                .iter()
                .map(|p| match p.source {
                    SourceSpec::TcpStream { streams, .. } => vec![Stream::new(); streams as usize],
                    _ => Vec::new(),
                })
                .collect(),
            flows,
            offered: vec![0.0; np],
            delivered: vec![0.0; np],
            uplink_bits: vec![0.0; plan.uplinks.len()],
            out: RunOutput::new(
                plan.uplinks.iter().map(|u| u.name.clone()).collect(),
                plan.uplinks.iter().map(|u| u.rate_bps).collect(),
                plan.ports.iter().map(|p| p.name.clone()).collect(),
            ),
            order: plan
                .ports
                .iter()
                .map(|p| match p.source {
                    SourceSpec::TcpStream { streams, .. } => vec![StreamOrder::default(); streams as usize],
                    _ => vec![StreamOrder::default()],
                })
                .collect(),
        };
        sim.out.reservations = plan
            .ports
            .iter()
            .map(|p| vec![(0.0, sim.ioc.tree().node(p.leaf).spec.reservation.bps_f64())])
            .collect();
        sim.announce_remote(Instant::ZERO);
        for (i, p) in plan.ports.iter().enumerate() {
            sim.agenda.push(p.start_s * 1e9, Ev::Start(i));
            if let Some(stop) = p.stop_s {
                sim.agenda.push(stop * 1e9, Ev::Stop(i));
            }
        }
        for (k, (at, _)) in plan.events.iter().enumerate() {
            sim.agenda.push(at * 1e9, Ev::Timeline(k));
        }
        sim.agenda.push(1e9, Ev::Record);
        Ok(sim)
    }

    /// Handles every event due by the plan's end.
    fn run_to_end(&mut self) -> Result<(), String> {
        let end = self.plan.duration_s * 1e9;
        while let Some((t, ev)) = self.agenda.pop() {
            if t > end {
                break;
            }
            self.handle(t, ev)?;
        }
        Ok(())
    }

    /// The run's output, with the uplink each port ended on.
    fn finish(mut self) -> RunOutput {
        self.out.port_uplinks = self
            .plan
            .ports
            .iter()
            .map(|p| {
                self.switch
                    .team()
                    .port_uplink(PortId(p.id))
                    .map(|u| self.out.uplinks[u.0].clone())
            })
            .collect();
        self.out
    }
}

/// An empty FIFO per uplink.
fn new_fifos(plan: &HostPlan) -> Vec<Fifo> {
    (0..plan.uplinks.len())
        .map(|_| Fifo {
            queue: VecDeque::new(),
            per_port: vec![0; plan.ports.len()],
        })
        .collect()
}

impl Sim<'_> {
    fn handle(&mut self, t: f64, ev: Ev) -> Result<(), String> {
        match ev {
            Ev::Start(i) => self.start(i, t),
            Ev::Stop(i) => {
                self.active[i] = false;
                self.blocked[i] = None;
            }
            Ev::CbrTick(i) => {
                if let (true, SourceSpec::Cbr { rate, bytes }) = (self.active[i], &self.plan.ports[i].source) {
                    let (rate, bytes) = (rate.bps_f64(), *bytes);
                    self.offer(i, 0, bytes, t);
                    // An exact clock per source, as for the lines: no rounding speeds it up.
                    let due = self.cbr_clock[i].max(t) + f64::from(bytes) * 8.0 / rate * 1e9;
                    self.cbr_clock[i] = due;
                    self.agenda.push(due.ceil(), Ev::CbrTick(i));
                }
            }
            Ev::TxDone(u, pkt) => self.tx_done(u, pkt, t),
            Ev::Wake(u) => {
                if !self.busy[u] {
                    self.start_tx(u, t);
                }
            }
            Ev::Ack(i, s) => {
                if let SourceSpec::TcpStream { max_window, .. } = self.plan.ports[i].source {
                    self.streams[i][s as usize].on_ack(max_window);
                    self.try_send(i, s, t);
                }
            }
            Ev::Loss(i, s) => {
                if let SourceSpec::TcpStream { rtt_us, .. } = self.plan.ports[i].source {
                    self.streams[i][s as usize].on_loss(t, rtt_us * 1e3);
                    self.try_send(i, s, t);
                }
            }
            Ev::Response(i, born) => {
                self.out.latencies[i].push((t / 1e9, (t - born) / 1e3));
                if let (true, SourceSpec::TcpRr { request, .. }) = (self.active[i], &self.plan.ports[i].source) {
                    let request = *request;
                    self.offer(i, 0, request, t);
                }
            }
            Ev::Timeline(k) => self.timeline(k, t),
            Ev::Record => self.record(t),
        }
        Ok(())
    }

    /// Starts port `i`'s source.
    fn start(&mut self, i: usize, t: f64) {
        self.active[i] = true;
        match self.plan.ports[i].source {
            SourceSpec::Greedy { bytes } => {
                self.fill(i, bytes, t);
            }
            SourceSpec::Cbr { .. } => self.agenda.push(t, Ev::CbrTick(i)),
            SourceSpec::TcpStream { streams, .. } => {
                for s in 0..streams {
                    self.try_send(i, s, t);
                }
            }
            SourceSpec::TcpRr { request, .. } => {
                self.offer(i, 0, request, t);
            }
        }
    }

    /// Sends what stream `s` of port `i` may; a drop is a loss the sender sees one RTT later.
    fn try_send(&mut self, i: usize, s: u32, t: f64) {
        let SourceSpec::TcpStream { bytes, rtt_us, .. } = self.plan.ports[i].source else {
            return;
        };
        while self.active[i] && self.streams[i][s as usize].may_send() {
            self.streams[i][s as usize].in_flight += 1;
            if !self.offer(i, s, bytes, t) {
                self.agenda.push(t + rtt_us * 1e3, Ev::Loss(i, s));
                break;
            }
        }
    }

    /// Queues a packet of port `i` on the uplink its flow maps to; false if it was dropped.
    fn offer(&mut self, i: usize, stream: u32, bytes: u32, t: f64) -> bool {
        match self.route(i, stream, bytes, t) {
            Some((u, pkt)) => self.queue(u, pkt, t).is_ok(),
            None => false,
        }
    }

    /// Offers a packet of port `i` to the switch, which meters it and picks its uplink; None if
    /// the switch sends it to no uplink.
    fn route(&mut self, i: usize, stream: u32, bytes: u32, t: f64) -> Option<(usize, Pkt)> {
        self.offered[i] += f64::from(bytes) * 8.0;
        let now = Instant::from_nanos(t as u64);
        // The team's timers (flowlet rebalancing, LBT checks) run when due, as the live data
        // plane runs them between frames, not only at the one-second rows.
        if self.switch.poll_at() <= now {
            self.switch.handle_timeout(now);
        }
        let p = &self.plan.ports[i];
        // Through the switch, as the live path: it learns, checks, tags and picks the uplink, and
        // meters the packet at its length; copies it floods to local ports go nowhere here.
        let headers = &self.flows[i][stream as usize % self.flows[i].len()];
        let elided = (bytes as usize).saturating_sub(headers.len());
        let out = self
            .switch
            .ingress_elided(Ingress::Port(PortId(p.id)), headers, elided, now);
        let u = out.iter().find_map(|o| match o.to {
            Egress::Uplink(u) => Some(u.0),
            Egress::Port(_) => None,
        })?;
        let streams = &mut self.order[i];
        let k = stream as usize % streams.len();
        let o = &mut streams[k];
        if o.uplink.is_some_and(|last| last != u) {
            self.out.member_changes[i] += 1;
        }
        o.uplink = Some(u);
        let pkt = Pkt {
            port: i as u32,
            stream,
            seq: o.next,
            bytes,
            born: t,
        };
        o.next += 1;
        Some((u, pkt))
    }

    /// Puts `pkt` in uplink `u`'s queue, and starts the uplink if idle; gives it back if full.
    fn queue(&mut self, u: usize, pkt: Pkt, t: f64) -> Result<(), Pkt> {
        let i = pkt.port as usize;
        match &mut self.fifo {
            None => {
                let now = Instant::from_nanos(t as u64);
                self.ioc.enqueue(u, self.plan.ports[i].leaf, pkt.bytes, pkt, now)?;
            }
            Some(fifos) => {
                let f = &mut fifos[u];
                if f.queue.len() >= self.plan.fifo_packets || f.per_port[i] >= self.plan.queue_packets {
                    return Err(pkt);
                }
                f.queue.push_back(pkt);
                f.per_port[i] += 1;
            }
        }
        if !self.busy[u] {
            self.start_tx(u, t);
        }
        Ok(())
    }

    /// Greedy port `i` sends (its held frame first, if any) until a frame does not join a
    /// queue; it then holds that frame and waits (see [`Blocked`]). True if a frame joined.
    fn fill(&mut self, i: usize, bytes: u32, t: f64) -> bool {
        let mut next = match self.blocked[i].take() {
            Some(Blocked::Holding(u, pkt)) => Some((u, pkt)),
            _ => self.route(i, 0, bytes, t),
        };
        let mut joined = false;
        loop {
            let Some((u, pkt)) = next else {
                self.blocked[i] = Some(Blocked::Dropped);
                return joined;
            };
            if let Err(pkt) = self.queue(u, pkt, t) {
                self.blocked[i] = Some(Blocked::Holding(u, pkt));
                return joined;
            }
            joined = true;
            next = self.route(i, 0, bytes, t);
        }
    }

    /// Starts sending the next packet on uplink `u`, or waits for a limit to release one.
    fn start_tx(&mut self, u: usize, t: f64) {
        let now = Instant::from_nanos(t as u64);
        let next = match &mut self.fifo {
            None => match self.ioc.dequeue(u, now) {
                Some((_, _, pkt)) => Some(pkt),
                None => {
                    if let Some(at) = self.ioc.next_eligible(u, now) {
                        self.agenda.push(at.as_nanos() as f64, Ev::Wake(u));
                    }
                    None
                }
            },
            Some(fifos) => {
                let f = &mut fifos[u];
                f.queue.pop_front().inspect(|p| f.per_port[p.port as usize] -= 1)
            }
        };
        self.busy[u] = next.is_some();
        if let Some(pkt) = next {
            // The line's own clock keeps the fraction of a nanosecond the agenda's integer times
            // drop: back to back, a packet starts exactly when the last one ended, so the uplink
            // never sends faster than its rate (it did by up to 6.7% with 64 B frames at 40G).
            // The completion event fires at the next whole nanosecond, never early.
            let start = if self.line_clock[u] > t - 1.0 {
                self.line_clock[u]
            } else {
                t
            };
            let done = start + f64::from(pkt.bytes) * 8.0 / self.plan.uplinks[u].rate_bps * 1e9;
            self.line_clock[u] = done;
            self.agenda.push(done.ceil(), Ev::TxDone(u, pkt));
        }
    }

    /// A packet has left uplink `u`: count it, let its source react, send the next one.
    fn tx_done(&mut self, u: usize, pkt: Pkt, t: f64) {
        let i = pkt.port as usize;
        let bits = f64::from(pkt.bytes) * 8.0;
        self.delivered[i] += bits;
        self.uplink_bits[u] += bits;
        self.out.packets += 1;
        // Both uplinks reach the remote host with the same delay: the order packets leave in
        // is the order they arrive in.
        let streams = &mut self.order[i];
        let k = pkt.stream as usize % streams.len();
        let o = &mut streams[k];
        match o.highest {
            Some(h) if pkt.seq < h => self.out.reordered[i] += 1,
            _ => o.highest = Some(pkt.seq),
        }
        // The switch metered it when it was offered; the uplink counts it as it leaves.
        self.switch
            .count_sent(Egress::Uplink(UplinkId(u)), 1, u64::from(pkt.bytes));
        match self.plan.ports[i].source {
            SourceSpec::TcpStream { rtt_us, .. } => self.agenda.push(t + rtt_us * 1e3, Ev::Ack(i, pkt.stream)),
            SourceSpec::TcpRr { rtt_us, .. } => self.agenda.push(t + rtt_us * 1e3, Ev::Response(i, pkt.born)),
            _ => {}
        }
        self.refill(u, i, t);
        self.start_tx(u, t);
    }

    /// A frame of port `departed` left uplink `u`: the greedy sources with room fill their
    /// queues again, the departed one and those holding a frame for `u` or dropped by the switch,
    /// in round-robin order: from `self.turn`, which then moves past the first port that got a
    /// frame in, so that where ports share a queue (a FIFO, a byte budget) they take the room in
    /// turn.
    fn refill(&mut self, u: usize, departed: usize, t: f64) {
        let np = self.plan.ports.len();
        let first = self.turn;
        let mut moved = false;
        for k in (first..np).chain(0..first) {
            let SourceSpec::Greedy { bytes } = self.plan.ports[k].source else {
                continue;
            };
            let wants = match self.blocked[k] {
                None => k == departed,
                Some(Blocked::Holding(on, _)) => on == u && self.may_join(k, u),
                Some(Blocked::Dropped) => true,
            };
            if wants && self.active[k] && self.fill(k, bytes, t) && !moved {
                self.turn = (k + 1) % np;
                moved = true;
            }
        }
    }

    /// False if port `k`'s frame surely cannot join uplink `u`'s queue now: the port holds its
    /// most frames there, or the FIFO is full (a quick test; the queue has the last word).
    fn may_join(&self, k: usize, u: usize) -> bool {
        match &self.fifo {
            None => self.ioc.queued(u, self.plan.ports[k].leaf) < self.plan.queue_packets,
            Some(fifos) => {
                let f = &fifos[u];
                f.queue.len() < self.plan.fifo_packets && f.per_port[k] < self.plan.queue_packets
            }
        }
    }

    /// Applies timeline event `k`.
    fn timeline(&mut self, k: usize, t: f64) {
        let (_, ev) = &self.plan.events[k];
        match ev {
            PlanEvent::SetControls { node, spec } => {
                let name = self.ioc.tree().node(*node).spec.name.clone();
                let what = format!(
                    "{name}: reservation {}, shares {}, limit {}",
                    spec.reservation,
                    spec.shares,
                    spec.limit.map_or("unlimited".to_string(), |l| l.to_string())
                );
                match self
                    .ioc
                    .set_controls(*node, spec.clone(), Instant::from_nanos(t as u64))
                {
                    Ok(()) => {
                        self.out.events.push((t / 1e9, format!("set {what}")));
                        for (i, p) in self.plan.ports.iter().enumerate() {
                            if p.leaf == *node {
                                self.out.reservations[i].push((t / 1e9, spec.reservation.bps_f64()));
                            }
                        }
                    }
                    Err(e) => {
                        self.out.events.push((t / 1e9, format!("rejected {what}: {e}")));
                        self.out.rejections.push((t / 1e9, e));
                    }
                }
            }
            PlanEvent::Discipline(d) => {
                // Requeue what is waiting, in order, into the new discipline.
                let now = Instant::from_nanos(t as u64);
                let waiting: Vec<Vec<Pkt>> = (0..self.plan.uplinks.len())
                    .map(|u| match &mut self.fifo {
                        Some(fifos) => fifos[u].queue.drain(..).collect(),
                        None => self.ioc.drain(u).into_iter().map(|(_, p)| p).collect(),
                    })
                    .collect();
                self.fifo = (*d == Discipline::Fifo).then(|| new_fifos(self.plan));
                for (u, packets) in waiting.into_iter().enumerate() {
                    for p in packets {
                        match &mut self.fifo {
                            Some(fifos) => {
                                fifos[u].per_port[p.port as usize] += 1;
                                fifos[u].queue.push_back(p);
                            }
                            None => {
                                let leaf = self.plan.ports[p.port as usize].leaf;
                                // Past the port's queue depth (FIFO allowed more): dropped.
                                let _ = self.ioc.enqueue(u, leaf, p.bytes, p, now);
                            }
                        }
                    }
                    if !self.busy[u] {
                        self.start_tx(u, t);
                    }
                }
                self.out.events.push((t / 1e9, format!("queueing: {d:?}")));
            }
            PlanEvent::ReplaceTree(tree) => self.ioc.replace_tree(tree.clone(), Instant::from_nanos(t as u64)),
            PlanEvent::Link { uplink, up } => {
                let now = Instant::from_nanos(t as u64);
                let state = if *up { LinkState::Up } else { LinkState::Down };
                // The uplink exists: plans name uplinks by index from the same list.
                let _ = self.switch.team_mut().set_link(UplinkId(*uplink), state, now);
                if !up {
                    match &mut self.fifo {
                        Some(fifos) => {
                            let f = &mut fifos[*uplink];
                            f.queue.clear();
                            f.per_port.iter_mut().for_each(|n| *n = 0);
                        }
                        None => drop(self.ioc.drain(*uplink)),
                    }
                    // Greedy sources holding a frame for it drop it and send again elsewhere.
                    for k in 0..self.plan.ports.len() {
                        if matches!(self.blocked[k], Some(Blocked::Holding(u, _)) if u == *uplink) {
                            self.blocked[k] = None;
                            if let (true, SourceSpec::Greedy { bytes }) = (self.active[k], &self.plan.ports[k].source) {
                                let bytes = *bytes;
                                self.fill(k, bytes, t);
                            }
                        }
                    }
                }
            }
        }
    }

    /// The remote host answers every port once a second (its ACKs, in short): a frame from it
    /// arrives on the uplink each port uses, so the switch knows where the remote MAC lives and
    /// sends to it rather than flooding, and keeps knowing as entries age.
    fn announce_remote(&mut self, now: Instant) {
        for (i, p) in self.plan.ports.iter().enumerate() {
            let Some(u) = self.switch.team().port_uplink(PortId(p.id)) else {
                continue;
            };
            let vlan = self.plan.groups[p.group].vlan;
            let ip = Ipv4Addr::from(0x0a00_0000 + i as u32);
            let reply = frames::headers((REMOTE_MAC, REMOTE_IP, REMOTE_PORT), (p.mac, ip, 40_000), vlan);
            self.switch.ingress(Ingress::Uplink(u), &reply, now);
        }
    }

    /// Records the second that just ended, and runs the team's timers.
    fn record(&mut self, t: f64) {
        let np = self.plan.ports.len();
        self.out.rows.push(Row {
            t_s: t / 1e9 - 1.0,
            uplink_tx: std::mem::replace(&mut self.uplink_bits, vec![0.0; self.plan.uplinks.len()]),
            uplink_rx: vec![0.0; self.plan.uplinks.len()],
            offered_tx: std::mem::replace(&mut self.offered, vec![0.0; np]),
            delivered_tx: std::mem::replace(&mut self.delivered, vec![0.0; np]),
            offered_rx: vec![0.0; np],
            delivered_rx: vec![0.0; np],
        });
        let now = Instant::from_nanos(t as u64);
        self.announce_remote(now);
        if self.switch.poll_at() <= now {
            self.switch.handle_timeout(now);
        }
        while let Some(e) = self.switch.poll_effect() {
            if let Effect::PortMoved(m) = e {
                let port = self
                    .plan
                    .ports
                    .iter()
                    .find(|p| p.id == m.port.0)
                    .map(|p| p.name.as_str());
                self.out
                    .moves
                    .push(MoveRecord::new(t / 1e9, m, &self.out.uplinks, port));
            }
        }
        if t + 1e9 <= self.plan.duration_s * 1e9 + 1.0 {
            self.agenda.push(t + 1e9, Ev::Record);
        }
    }
}
