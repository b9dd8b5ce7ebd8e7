//! The live switch's poll loop: one [`Backend`] per VM port and uplink, the `teamster-core`
//! [`Switch`] deciding where each frame goes, one NetIOC [`Scheduler`] and [`Pacer`] per uplink,
//! and netlink for carrier changes.
//!
//! Each turn of [`Datapath::run`]: wait (poll) for frames, a link change or the next timer (at
//! most 10 ms); apply carrier changes (failover within that turn); pass every received frame
//! through the switch; send frames for ports at once, queue frames for uplinks in their
//! scheduler (cut to the MTU, TCP super-frames segmented), and let each pacer release what the
//! uplink's capacity allows, holding back while the device is busy; run the team's timers (LBT);
//! send team-originated frames (notify-switch RARPs); then give the [`Control`] its turn, which
//! may reconfigure the switch between packets or read its state. A limit is one bucket per port
//! across every uplink's scheduler, so a port spread over several uplinks (IP hash) is capped once.

use crate::afpacket::AfPacket;
use crate::netlink::LinkWatch;
use crate::pacer::Pacer;
use crate::Backend;
use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use teamster_core::ioc::{Ioc, NodeId, ReservationCap, Tree};
use teamster_core::switch::{Counters, Egress, Ingress, Output, Switch, SwitchConfig};
use teamster_core::teaming::{Effect, GroupId, LinkState, PortGroupSpec, PortId, Team, UplinkId};
use teamster_core::units::Bandwidth;
use teamster_core::Instant;

/// Frames queued per port in an uplink's scheduler before tail drop.
const LEAF_QUEUE: usize = 1024;
/// The longest the loop sleeps, so timers, signals and control-plane changes are seen promptly.
const MAX_WAIT_MS: i32 = 10;
/// Events kept (the most recent).
const EVENTS_KEPT: usize = 1000;

/// A VM port to attach.
#[derive(Debug, Clone)]
pub struct PortPlan {
    pub id: PortId,
    pub name: String,
    pub interface: String,
    /// Its leaf in the NetIOC tree.
    pub leaf: NodeId,
}

/// An uplink to attach (in the team's uplink order).
#[derive(Debug, Clone)]
pub struct UplinkPlan {
    pub name: String,
    pub interface: String,
    pub capacity: Bandwidth,
    pub admin_up: bool,
}

/// Everything the data plane needs, checked by the caller.
pub struct DatapathPlan {
    pub team: Team,
    pub tree: Tree,
    pub reservation_cap: ReservationCap,
    pub ports: Vec<PortPlan>,
    pub uplinks: Vec<UplinkPlan>,
    /// MAC ageing and limits, and each port group's security policy.
    pub switch: SwitchConfig,
}

/// Drops the data plane makes outside the core switch, kept per port and per uplink.
#[derive(Debug, Clone, Default)]
pub struct ExtraDrops {
    /// The port's queue in an uplink's scheduler was full.
    pub queue_full: u64,
    /// Too large for the egress MTU and not a TCP frame that could be cut.
    pub oversize: u64,
    /// The kernel's receive ring was full before the loop read it.
    pub ring_full: u64,
    /// The kernel refused to send it.
    pub tx_error: u64,
}

/// An attached VM port.
pub struct Port {
    pub plan: PortPlan,
    backend: AfPacket,
    mtu: usize,
    pub extra: ExtraDrops,
}

/// An attached uplink.
pub struct Uplink {
    pub plan: UplinkPlan,
    backend: AfPacket,
    ifindex: i32,
    mtu: usize,
    pacer: Pacer,
    pub extra: ExtraDrops,
    /// Carrier as the kernel reports it.
    pub carrier: bool,
}

/// Something that happened, for logs and the control plane.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Increases by one per event since start.
    pub seq: u64,
    pub at: Instant,
    /// `start`, `link`, `move` or `config`.
    pub kind: &'static str,
    pub message: String,
}

/// A port's move between uplinks, by name.
#[derive(Debug, Clone, PartialEq)]
pub struct Move {
    pub at: Instant,
    pub port: String,
    pub from: Option<String>,
    pub to: Option<String>,
    pub reason: String,
}

/// The control plane's part of each turn of the loop.
pub trait Control {
    /// Called once per turn, between packets: may [`Datapath::reconfigure`] or read state.
    fn turn(&mut self, dp: &mut Datapath, now: Instant);
}

/// No control plane.
impl Control for () {
    fn turn(&mut self, _: &mut Datapath, _: Instant) {}
}

/// The running data plane.
pub struct Datapath {
    switch: Switch,
    /// NetIOC: the tree, each uplink's scheduler, each port's shared limit bucket.
    ioc: Ioc<Vec<u8>>,
    ports: Vec<Port>,
    index: HashMap<PortId, usize>,
    uplinks: Vec<Uplink>,
    links: LinkWatch,
    started: std::time::Instant,
    moves: Vec<Move>,
    events: VecDeque<Event>,
    next_seq: u64,
    failovers: u64,
    /// Every descriptor the loop waits on (ports, uplinks, netlink), built once at attach.
    pollfds: Vec<libc::pollfd>,
}

/// Lets one uplink's scheduler send what its pacer allows at `now`, a batch at a time, and
/// stops while the device is busy: frames then wait in the scheduler, where NetIOC decides whose
/// are dropped if the wait grows, rather than in the kernel's FIFO.
fn pace_one(u: &mut Uplink, i: usize, ioc: &mut Ioc<Vec<u8>>, now: Instant) {
    u.pacer.refill(now);
    loop {
        let mut batch = 0;
        while batch < AfPacket::TX_BATCH && u.pacer.may_send() {
            let Some((_, len, frame)) = ioc.dequeue(i, now) else {
                break;
            };
            u.backend.send_owned(frame);
            u.pacer.charge(len as usize);
            batch += 1;
        }
        u.extra.tx_error += u.backend.flush() as u64;
        if batch < AfPacket::TX_BATCH || u.backend.tx_pending() > 0 {
            return;
        }
    }
}

/// An interface's MTU (1500 if sysfs does not say).
fn mtu_of(iface: &str) -> usize {
    sysfs(iface, "mtu").and_then(|m| m.parse().ok()).unwrap_or(1500)
}

/// Fits a frame to an interface's MTU and hands each resulting frame to `out`: the frame as is,
/// or its pieces when it is a TCP super-frame a stack handed over for offload. Returns false
/// (handing over nothing) if it is too large and cannot be split.
fn fit(frame: Vec<u8>, mtu: usize, out: &mut dyn FnMut(Vec<u8>)) -> bool {
    if frame.len() <= mtu + 14 {
        out(frame);
        return true;
    }
    match teamster_core::offload::segment_tcp(&frame, mtu) {
        Some(pieces) => pieces.into_iter().for_each(out),
        // Up to two VLAN tags may sit on top of a packet that fits.
        None if frame.len() <= mtu + 22 => out(frame),
        None => return false,
    }
    true
}

fn sysfs(iface: &str, file: &str) -> Option<String> {
    std::fs::read_to_string(Path::new("/sys/class/net").join(iface).join(file))
        .ok()
        .map(|s| s.trim().to_string())
}

impl Datapath {
    /// Attaches to every interface of `plan`. On error, whatever was opened is closed again.
    pub fn attach(plan: DatapathPlan) -> Result<Datapath, String> {
        let started = std::time::Instant::now();
        let now = Instant::ZERO;
        // Subscribe before reading carriers, so a change in between is not missed.
        let links = LinkWatch::open().map_err(|e| format!("netlink link watch: {e}"))?;
        let mut switch = Switch::with_config(plan.team, plan.switch);
        let mut ports = Vec::new();
        for p in plan.ports {
            let backend = AfPacket::open(&p.interface).map_err(|e| e.to_string())?;
            ports.push(Port {
                mtu: mtu_of(&p.interface),
                plan: p,
                backend,
                extra: ExtraDrops::default(),
            });
        }
        let leaves: Vec<NodeId> = ports.iter().map(|p| p.plan.leaf).collect();
        let capacities = plan.uplinks.iter().map(|u| u.capacity).collect();
        let ioc = Ioc::new(plan.tree, &leaves, capacities, plan.reservation_cap, LEAF_QUEUE);
        let mut uplinks = Vec::new();
        for (i, u) in plan.uplinks.into_iter().enumerate() {
            let backend = AfPacket::open(&u.interface).map_err(|e| e.to_string())?;
            let ifindex = sysfs(&u.interface, "ifindex")
                .and_then(|s| s.parse().ok())
                .unwrap_or(-1);
            let carrier = sysfs(&u.interface, "carrier").as_deref() == Some("1");
            if !(carrier && u.admin_up) {
                let _ = switch.team_mut().set_link(UplinkId(i), LinkState::Down, now);
            }
            uplinks.push(Uplink {
                backend,
                ifindex,
                mtu: mtu_of(&u.interface),
                pacer: Pacer::new(u.capacity.bps_f64(), now),
                extra: ExtraDrops::default(),
                carrier,
                plan: u,
            });
        }
        let index = ports.iter().enumerate().map(|(i, p)| (p.plan.id, i)).collect();
        let pollfds = ports
            .iter()
            .map(|p| p.backend.raw_fd())
            .chain(uplinks.iter().map(|u| u.backend.raw_fd()))
            .chain(std::iter::once(links.raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let mut dp = Datapath {
            pollfds,
            switch,
            ioc,
            ports,
            index,
            uplinks,
            links,
            started,
            moves: Vec::new(),
            events: VecDeque::new(),
            next_seq: 0,
            failovers: 0,
        };
        let summary = format!("switching {} ports on {} uplinks", dp.ports.len(), dp.uplinks.len());
        dp.event(now, "start", summary);
        Ok(dp)
    }

    /// Time since attach, on the engine's clock.
    pub fn now(&self) -> Instant {
        Instant::from_nanos(self.started.elapsed().as_nanos() as u64)
    }

    /// The core switch (team, MAC table, counters).
    pub fn switch(&self) -> &Switch {
        &self.switch
    }

    /// The NetIOC tree in force.
    pub fn tree(&self) -> &Tree {
        self.ioc.tree()
    }

    /// Frames of port leaf `leaf` waiting in uplink `u`'s scheduler.
    pub fn queued(&self, u: usize, leaf: NodeId) -> usize {
        self.ioc.queued(u, leaf)
    }

    pub fn ports(&self) -> &[Port] {
        &self.ports
    }

    pub fn uplinks(&self) -> &[Uplink] {
        &self.uplinks
    }

    /// Every port move since attach, oldest first.
    pub fn moves(&self) -> &[Move] {
        &self.moves
    }

    /// The most recent events (up to 1,000), oldest first.
    pub fn events(&self) -> impl DoubleEndedIterator<Item = &Event> + ExactSizeIterator {
        self.events.iter()
    }

    /// Times an uplink in use went out of use (carrier lost or set administratively down).
    pub fn failovers(&self) -> u64 {
        self.failovers
    }

    /// The switch's counters for port `p`, if it has seen traffic.
    pub fn port_counters(&self, p: PortId) -> Option<&Counters> {
        self.switch.port_counters(p)
    }

    /// Records an event, and logs it on stderr.
    pub fn event(&mut self, now: Instant, kind: &'static str, message: String) {
        eprintln!("{:>9.3} s  {kind}: {message}", now.as_secs_f64());
        if self.events.len() == EVENTS_KEPT {
            self.events.pop_front();
        }
        self.events.push_back(Event {
            seq: self.next_seq,
            at: now,
            kind,
            message,
        });
        self.next_seq += 1;
    }

    /// Tells the team whether uplink `u` may be used: carrier up and administratively up.
    fn refresh_link(&mut self, u: usize, now: Instant) {
        let up = self.uplinks[u].carrier && self.uplinks[u].plan.admin_up;
        let state = if up { LinkState::Up } else { LinkState::Down };
        if self.switch.team().link_state(UplinkId(u)) != Some(state) {
            if !up {
                self.failovers += 1;
            }
            let _ = self.switch.team_mut().set_link(UplinkId(u), state, now);
        }
    }

    /// Runs until `stop` is set, giving `control` a turn each time round.
    pub fn run(&mut self, stop: &AtomicBool, control: &mut dyn Control) {
        let mut pending: Vec<(Option<PortId>, Output)> = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            self.wait();
            let now = self.now();
            for change in self.links.drain() {
                if let Some(u) = self.uplinks.iter().position(|u| u.ifindex == change.ifindex) {
                    if self.uplinks[u].carrier != change.up {
                        self.uplinks[u].carrier = change.up;
                        let what = format!(
                            "{} carrier {}",
                            self.uplinks[u].plan.name,
                            if change.up { "up" } else { "down" }
                        );
                        self.event(now, "link", what);
                        self.refresh_link(u, now);
                    }
                }
            }
            for p in 0..self.ports.len() {
                let id = self.ports[p].plan.id;
                let switch = &mut self.switch;
                self.ports[p].backend.recv_batch(&mut |frame| {
                    pending.extend(
                        switch
                            .ingress(Ingress::Port(id), frame, now)
                            .into_iter()
                            .map(|o| (Some(id), o)),
                    );
                });
            }
            for u in 0..self.uplinks.len() {
                let switch = &mut self.switch;
                self.uplinks[u].backend.recv_batch(&mut |frame| {
                    pending.extend(
                        switch
                            .ingress(Ingress::Uplink(UplinkId(u)), frame, now)
                            .into_iter()
                            .map(|o| (None, o)),
                    );
                });
            }
            self.dispatch(&mut pending, now);
            if now >= self.switch.poll_at() {
                self.switch.handle_timeout(now);
            }
            self.effects(now);
            self.pace(now);
            for p in &mut self.ports {
                p.extra.tx_error += p.backend.flush() as u64;
            }
            for u in &mut self.uplinks {
                u.extra.tx_error += u.backend.flush() as u64;
            }
            control.turn(self, now);
        }
    }

    /// Carries out what the team asked for: frames to send, moves to record.
    fn effects(&mut self, now: Instant) {
        while let Some(effect) = self.switch.poll_effect() {
            match effect {
                Effect::Transmit { uplink, frame } => self.uplinks[uplink.0].backend.send_owned(frame),
                Effect::PortMoved(m) => {
                    let name = |u: Option<UplinkId>| u.map(|u| self.uplinks[u.0].plan.name.clone());
                    let port = self
                        .index
                        .get(&m.port)
                        .map_or(m.port.0.to_string(), |&i| self.ports[i].plan.name.clone());
                    let record = Move {
                        at: now,
                        port,
                        from: name(m.from),
                        to: name(m.to),
                        reason: m.reason.to_string(),
                    };
                    let what = format!(
                        "port {}: {} -> {} ({})",
                        record.port,
                        record.from.as_deref().unwrap_or("none"),
                        record.to.as_deref().unwrap_or("none"),
                        record.reason
                    );
                    self.moves.push(record);
                    self.event(now, "move", what);
                }
            }
        }
    }

    /// Reads the kernel's receive-ring drop counters into the per-interface drops.
    pub fn collect_ring_drops(&mut self) {
        for p in &mut self.ports {
            p.extra.ring_full += p.backend.ring_drops();
        }
        for u in &mut self.uplinks {
            u.extra.ring_full += u.backend.ring_drops();
        }
    }

    /// Switches to a new configuration of the same shape (same ports, uplinks and tree
    /// structure, so IDs hold) between packets: port controls from `tree`, port groups' teaming
    /// from `groups`, uplinks' administrative states from `admin_up`. The caller has checked it
    /// (admission control included).
    pub fn reconfigure(&mut self, tree: Tree, groups: &[PortGroupSpec], admin_up: &[bool], now: Instant) {
        self.ioc.replace_tree(tree, now);
        for (g, new) in groups.iter().enumerate() {
            let team = self.switch.team_mut();
            if team.group(GroupId(g)).is_some_and(|old| old != new) {
                let _ = team.reconfigure_group(GroupId(g), new.policy, new.order.clone(), new.failback, now);
            }
        }
        for (u, &up) in admin_up.iter().enumerate().take(self.uplinks.len()) {
            if self.uplinks[u].plan.admin_up != up {
                self.uplinks[u].plan.admin_up = up;
                let what = format!(
                    "{} administratively {}",
                    self.uplinks[u].plan.name,
                    if up { "up" } else { "down" }
                );
                self.event(now, "link", what);
                self.refresh_link(u, now);
            }
        }
        self.event(now, "config", "configuration changed".to_string());
    }

    /// Sleeps until a frame, a link change, or the next timer (at most 10 ms).
    fn wait(&mut self) {
        let now = self.now();
        let mut deadline = self.switch.poll_at();
        for u in &self.uplinks {
            if let Some(t) = u.pacer.ready_at() {
                deadline = deadline.min(t);
            }
        }
        let first_uplink = self.ports.len();
        for (i, u) in self.uplinks.iter().enumerate() {
            // A busy device: wake when it can take frames again.
            let busy = u.backend.tx_pending() > 0;
            self.pollfds[first_uplink + i].events = if busy {
                libc::POLLIN | libc::POLLOUT
            } else {
                libc::POLLIN
            };
        }
        let backlog = self
            .uplinks
            .iter()
            .any(|u| !u.pacer.may_send() || u.backend.tx_pending() > 0);
        let ms = if backlog {
            1
        } else {
            (deadline - now).as_millis().min(MAX_WAIT_MS as u128) as i32
        };
        let fds = &mut self.pollfds;
        fds.iter_mut().for_each(|f| f.revents = 0);
        // SAFETY: `fds` is a live array of pollfd of the length passed.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    }

    /// Sends frames to ports at once and queues frames for uplinks in their schedulers, each cut
    /// to the egress MTU first.
    fn dispatch(&mut self, pending: &mut Vec<(Option<PortId>, Output)>, now: Instant) {
        for (from, out) in pending.drain(..) {
            match out.to {
                Egress::Port(q) => {
                    let Some(&i) = self.index.get(&q) else { continue };
                    let port = &mut self.ports[i];
                    let backend = &mut port.backend;
                    if !fit(out.frame, port.mtu, &mut |f| backend.send_owned(f)) {
                        port.extra.oversize += 1;
                    }
                }
                Egress::Uplink(u) => {
                    let from = from.and_then(|p| self.index.get(&p).copied());
                    let leaf = from.map(|i| self.ports[i].plan.leaf);
                    let up = &mut self.uplinks[u.0];
                    let ioc = &mut self.ioc;
                    let mtu = up.mtu;
                    let mut full = 0;
                    let fitted = fit(out.frame, mtu, &mut |piece| match leaf {
                        Some(leaf) => {
                            if ioc.enqueue(u.0, leaf, piece.len() as u32, piece, now).is_err() {
                                full += 1;
                            }
                            // Send what the pacer allows at once, so the queue fills only when
                            // the uplink itself is the bottleneck.
                            pace_one(up, u.0, ioc, now);
                        }
                        None => up.backend.send_owned(piece),
                    });
                    up.extra.queue_full += full;
                    if !fitted {
                        up.extra.oversize += 1;
                    }
                    if let Some(i) = from {
                        self.ports[i].extra.queue_full += full;
                        self.ports[i].extra.oversize += u64::from(!fitted);
                    }
                }
            }
        }
    }

    /// Lets each uplink's scheduler send what its pacer allows.
    fn pace(&mut self, now: Instant) {
        for (i, u) in self.uplinks.iter_mut().enumerate() {
            pace_one(u, i, &mut self.ioc, now);
        }
    }
}
