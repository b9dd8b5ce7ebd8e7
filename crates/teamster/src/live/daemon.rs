//! The poll loop of the live switch; see the [parent module](super).

use super::config::{AdminState, SwitchFile, SwitchPlan};
use super::snapshot::{EventView, MoveView, Snapshot};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use teamster_core::ioc::{LimitId, NodeId, Scheduler, SharedLimits, Tree};
use teamster_core::switch::{Egress, Ingress, Output, Switch};
use teamster_core::teaming::{Effect, GroupId, LinkState, PortId, UplinkId};
use teamster_core::Instant;
use teamster_dp::afpacket::AfPacket;
use teamster_dp::netlink::LinkWatch;
use teamster_dp::pacer::Pacer;
use teamster_dp::Backend;

/// Frames queued per port in an uplink's scheduler before tail drop.
const LEAF_QUEUE: usize = 1024;
/// The longest the loop sleeps, so timers, signals and API changes are seen promptly.
const MAX_WAIT_MS: i32 = 10;
/// Events kept for the API and the dashboard.
const EVENTS_KEPT: usize = 1000;
/// How often the loop publishes a snapshot.
const SNAPSHOT_EVERY: core::time::Duration = core::time::Duration::from_millis(500);

pub(super) struct Port {
    pub(super) id: PortId,
    pub(super) name: String,
    pub(super) backend: AfPacket,
    pub(super) leaf: NodeId,
    pub(super) limit: LimitId,
    mtu: usize,
    pub(super) extra: ExtraDrops,
}

/// Drops the data plane makes outside the core switch, kept per port and per uplink.
#[derive(Debug, Clone, Default)]
pub(super) struct ExtraDrops {
    /// The port's queue in an uplink's scheduler was full.
    pub(super) queue_full: u64,
    /// Too large for the egress MTU and not a TCP frame that could be cut.
    pub(super) oversize: u64,
    /// The kernel's receive ring was full before the loop read it.
    pub(super) ring_full: u64,
    /// The kernel refused to send it.
    pub(super) tx_error: u64,
}

pub(super) struct Uplink {
    pub(super) name: String,
    pub(super) interface: String,
    backend: AfPacket,
    ifindex: i32,
    mtu: usize,
    pub(super) sched: Scheduler<Vec<u8>>,
    pacer: Pacer,
    pub(super) extra: ExtraDrops,
    /// Carrier as the kernel reports it.
    pub(super) carrier: bool,
    /// Administrative state from the configuration or the API.
    pub(super) admin_up: bool,
}

/// A change the API asks the loop to make: a checked plan to switch to, and where to say done.
pub struct Apply {
    pub plan: Box<SwitchPlan>,
    /// Answered with the snapshot taken right after the change.
    pub done: tokio::sync::oneshot::Sender<Arc<Snapshot>>,
}

/// How the loop talks to the API: changes in, snapshots out.
pub struct ControlLink {
    pub changes: std::sync::mpsc::Receiver<Apply>,
    pub snapshots: tokio::sync::watch::Sender<Arc<Snapshot>>,
}

/// A running switch.
pub struct Daemon {
    pub(super) switch: Switch,
    pub(super) tree: Tree,
    pub(super) file: SwitchFile,
    pub(super) ports: Vec<Port>,
    index: HashMap<PortId, usize>,
    pub(super) uplinks: Vec<Uplink>,
    shared: SharedLimits,
    links: LinkWatch,
    started: std::time::Instant,
    pub(super) moves: Vec<MoveView>,
    pub(super) events: VecDeque<EventView>,
    next_seq: u64,
    /// Times an uplink in use went out of use (carrier loss or administratively down).
    pub(super) failovers: u64,
    status_file: Option<PathBuf>,
    control: Option<ControlLink>,
    /// Every descriptor the loop waits on (ports, uplinks, netlink), built once at attach.
    pollfds: Vec<libc::pollfd>,
}

/// Lets one uplink's scheduler send what its pacer allows at `now`, a batch at a time, and
/// stops while the device is busy: frames then wait in the scheduler, where NetIOC decides whose
/// are dropped if the wait grows, rather than in the kernel's FIFO.
fn pace_one(u: &mut Uplink, shared: &mut SharedLimits, now: Instant) {
    u.pacer.refill(now);
    loop {
        let mut batch = 0;
        while batch < AfPacket::TX_BATCH && u.pacer.may_send() {
            let Some((_, len, frame)) = u.sched.dequeue(now, shared) else {
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

impl Daemon {
    /// Attaches to every interface of `plan`. On error, whatever was opened is closed again.
    /// `control`, if given, connects the loop to the API.
    pub fn attach(
        plan: SwitchPlan,
        status_file: Option<PathBuf>,
        control: Option<ControlLink>,
    ) -> Result<Daemon, String> {
        let started = std::time::Instant::now();
        let now = Instant::ZERO;
        // Subscribe before reading carriers, so a change in between is not missed.
        let links = LinkWatch::open().map_err(|e| format!("netlink link watch: {e}"))?;
        let mut switch = Switch::new(plan.team, plan.mac_ageing);
        // One limit bucket per port, shared by every uplink's scheduler: a port's limit is one
        // cap across the uplinks it uses (IP hash spreads a port over several).
        let mut shared = SharedLimits::default();
        let mut ports = Vec::new();
        for ((id, iface, leaf), pf) in plan.ports.into_iter().zip(&plan.file.ports) {
            let backend = AfPacket::open(&iface).map_err(|e| e.to_string())?;
            let limit = shared.add(f64::INFINITY);
            shared.set(limit, plan.tree.node(leaf).spec.limit.map(|l| l.bps_f64()));
            ports.push(Port {
                id,
                name: pf.name.clone(),
                backend,
                leaf,
                limit,
                mtu: mtu_of(&iface),
                extra: ExtraDrops::default(),
            });
        }
        let buckets: Vec<(NodeId, LimitId)> = ports.iter().map(|p| (p.leaf, p.limit)).collect();
        let mut uplinks = Vec::new();
        for (i, ((iface, capacity), uf)) in plan.uplinks.iter().zip(&plan.file.uplinks).enumerate() {
            let backend = AfPacket::open(iface).map_err(|e| e.to_string())?;
            let ifindex = sysfs(iface, "ifindex").and_then(|s| s.parse().ok()).unwrap_or(-1);
            let carrier = sysfs(iface, "carrier").as_deref() == Some("1");
            let admin_up = uf.admin == AdminState::Up;
            if !(carrier && admin_up) {
                let _ = switch.team_mut().set_link(UplinkId(i), LinkState::Down, now);
            }
            uplinks.push(Uplink {
                name: uf.name.clone(),
                interface: iface.clone(),
                backend,
                ifindex,
                mtu: mtu_of(iface),
                sched: Scheduler::new(&plan.tree, &buckets),
                pacer: Pacer::new(capacity.bps_f64(), now),
                extra: ExtraDrops::default(),
                carrier,
                admin_up,
            });
        }
        let index = ports.iter().enumerate().map(|(i, p)| (p.id, i)).collect();
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
        let mut daemon = Daemon {
            pollfds,
            switch,
            tree: plan.tree,
            file: plan.file,
            ports,
            index,
            uplinks,
            shared,
            links,
            started,
            moves: Vec::new(),
            events: VecDeque::new(),
            next_seq: 0,
            failovers: 0,
            status_file,
            control,
        };
        let summary = format!(
            "switching {} ports on {} uplinks",
            daemon.ports.len(),
            daemon.uplinks.len()
        );
        daemon.event(now, "start", summary);
        Ok(daemon)
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.started.elapsed().as_nanos() as u64)
    }

    /// Records an event for the API and the dashboard, and logs it on stderr.
    fn event(&mut self, now: Instant, kind: &str, message: String) {
        eprintln!("{:>9.3} s  {kind}: {message}", now.as_secs_f64());
        if self.events.len() == EVENTS_KEPT {
            self.events.pop_front();
        }
        self.events.push_back(EventView {
            seq: self.next_seq,
            t_s: now.as_secs_f64(),
            kind: kind.to_string(),
            message,
        });
        self.next_seq += 1;
    }

    /// Tells the team whether uplink `u` may be used: carrier up and administratively up.
    fn refresh_link(&mut self, u: usize, now: Instant) {
        let up = self.uplinks[u].carrier && self.uplinks[u].admin_up;
        let state = if up { LinkState::Up } else { LinkState::Down };
        if self.switch.team().link_state(UplinkId(u)) != Some(state) {
            if !up {
                self.failovers += 1;
            }
            let _ = self.switch.team_mut().set_link(UplinkId(u), state, now);
        }
    }

    /// Runs until `stop` is set.
    pub fn run(&mut self, stop: &Arc<AtomicBool>) {
        let mut next_status = Instant::ZERO;
        let mut next_snapshot = Instant::ZERO;
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
                            self.uplinks[u].name,
                            if change.up { "up" } else { "down" }
                        );
                        self.event(now, "link", what);
                        self.refresh_link(u, now);
                    }
                }
            }
            while let Some(apply) = self.control.as_ref().and_then(|c| c.changes.try_recv().ok()) {
                self.apply(*apply.plan, now);
                let snap = Arc::new(self.snapshot(now));
                if let Some(c) = &self.control {
                    c.snapshots.send_replace(snap.clone());
                }
                let _ = apply.done.send(snap);
            }
            for p in 0..self.ports.len() {
                let id = self.ports[p].id;
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
            while let Some(effect) = self.switch.poll_effect() {
                match effect {
                    Effect::Transmit { uplink, frame } => self.uplinks[uplink.0].backend.send_owned(frame),
                    Effect::PortMoved(m) => {
                        let name = |u: Option<UplinkId>| u.map(|u| self.uplinks[u.0].name.clone());
                        let port = self
                            .index
                            .get(&m.port)
                            .map_or(m.port.0.to_string(), |&i| self.ports[i].name.clone());
                        let view = MoveView {
                            t_s: now.as_secs_f64(),
                            port,
                            from: name(m.from),
                            to: name(m.to),
                            reason: m.reason.to_string(),
                        };
                        let what = format!(
                            "port {}: {} -> {} ({})",
                            view.port,
                            view.from.as_deref().unwrap_or("none"),
                            view.to.as_deref().unwrap_or("none"),
                            view.reason
                        );
                        self.moves.push(view);
                        self.event(now, "move", what);
                    }
                }
            }
            self.pace(now);
            for p in &mut self.ports {
                p.extra.tx_error += p.backend.flush() as u64;
            }
            for u in &mut self.uplinks {
                u.extra.tx_error += u.backend.flush() as u64;
            }
            if now >= next_snapshot {
                for p in &mut self.ports {
                    p.extra.ring_full += p.backend.ring_drops();
                }
                for u in &mut self.uplinks {
                    u.extra.ring_full += u.backend.ring_drops();
                }
                let snap = Arc::new(self.snapshot(now));
                if let Some(c) = &self.control {
                    c.snapshots.send_replace(snap.clone());
                }
                if now >= next_status {
                    self.write_status(&snap);
                    next_status = now + core::time::Duration::from_secs(1);
                }
                next_snapshot = now + SNAPSHOT_EVERY;
            }
        }
        let snap = self.snapshot(self.now());
        self.write_status(&snap);
    }

    /// Switches to `plan`, a checked variant of the running configuration that differs only in
    /// port controls, port-group teaming and uplinks' administrative state (what the API may
    /// change): the tree's shape, ports and interfaces are the same, so node and port IDs hold.
    fn apply(&mut self, plan: SwitchPlan, now: Instant) {
        for p in &self.ports {
            let new = &plan.tree.node(p.leaf).spec;
            if *new != self.tree.node(p.leaf).spec {
                self.shared.set(p.limit, new.limit.map(|l| l.bps_f64()));
                for u in &mut self.uplinks {
                    u.sched.set_controls(p.leaf, new, now);
                }
            }
        }
        for (g, (old, new)) in self.file.port_groups.iter().zip(&plan.file.port_groups).enumerate() {
            let changed = old.policy != new.policy
                || old.active != new.active
                || old.standby != new.standby
                || old.failback != new.failback;
            if let (true, Some(spec)) = (changed, plan.team.group(GroupId(g))) {
                let spec = spec.clone();
                let _ =
                    self.switch
                        .team_mut()
                        .reconfigure_group(GroupId(g), spec.policy, spec.order, spec.failback, now);
            }
        }
        for u in 0..self.uplinks.len() {
            let admin_up = plan.file.uplinks[u].admin == AdminState::Up;
            if self.uplinks[u].admin_up != admin_up {
                self.uplinks[u].admin_up = admin_up;
                let what = format!(
                    "{} administratively {}",
                    self.uplinks[u].name,
                    if admin_up { "up" } else { "down" }
                );
                self.event(now, "link", what);
                self.refresh_link(u, now);
            }
        }
        self.tree = plan.tree;
        self.file = plan.file;
        self.event(now, "config", "configuration changed through the API".to_string());
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
                    let leaf = from.map(|i| self.ports[i].leaf);
                    let up = &mut self.uplinks[u.0];
                    let shared = &mut self.shared;
                    let mtu = up.mtu;
                    let mut full = 0;
                    let fitted = fit(out.frame, mtu, &mut |piece| match leaf {
                        Some(leaf) if up.sched.queued(leaf) < LEAF_QUEUE => {
                            up.sched.enqueue(leaf, piece.len() as u32, piece, now);
                            // Send what the pacer allows at once, so the queue fills only when
                            // the uplink itself is the bottleneck.
                            pace_one(up, shared, now);
                        }
                        Some(_) => full += 1,
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
        for u in &mut self.uplinks {
            pace_one(u, &mut self.shared, now);
        }
    }

    /// Writes the status file atomically (temporary file, then rename).
    fn write_status(&self, snap: &Snapshot) {
        if let Some(path) = &self.status_file {
            let tmp = path.with_extension("tmp");
            let text = serde_json::to_string(snap).unwrap_or_default();
            if std::fs::write(&tmp, text).is_ok() {
                let _ = std::fs::rename(&tmp, path);
            }
        }
    }
}
