//! An uplink's receive queues: its frames spread over the data-plane threads by RSS, or by
//! NetQueue's destination-MAC filters packed as load allows (Dynamic NetQueue).
//!
//! Model. With `rx.queues = n` above one, an attached uplink (AF_PACKET) has `n` receive
//! queues: queue 0 is its own socket, read by the switching worker; queues 1 to `n - 1` are
//! sockets joined after it to the same fanout group, each read by one thread
//! ([`Datapath::queue_thread`]): under RSS queue `q` goes to port worker `(q - 1) mod workers`
//! (the switching worker has queue 0 already); under NetQueue queue 1 stays with the switching
//! worker and queue `q` goes to thread `(q - 1) mod threads`, so the queue Dynamic NetQueue packs
//! light filters onto is the switching worker's, and at low load one thread does everything.
//! A port worker reads its queues and hands the frames over as it does a port's.
//! The kernel runs the group's steering program ([`crate::steer`]) on every frame the uplink
//! receives and queues it on one socket only, so a queue's frames are read by one thread and a
//! flow's frames stay in order. The switch itself stays in the switching worker: what the
//! queues spread is the receiving (the system calls and copies), not the switching.
//! - RSS: the program is the Toeplitz hash and indirection table of `core::rx`; it is built
//!   once, at attach.
//! - NetQueue: one filter per MAC behind a local port (as the MAC table knows them, refreshed
//!   every round), placed by `core::rx::NetQueue` evenly or packed (Dynamic NetQueue), with
//!   every other frame on queue 0. Each round (the packing interval, 1 s by default) the
//!   filters' loads are measured from the frames counted to their MACs, the queues repacked, and
//!   the program rebuilt when what it steers changed, and swapped in by a thread of its own
//!   (the kernel swaps it between frames, then waits for an RCU grace period, milliseconds the
//!   frames' path must not wait). Each move is an event with its reason and the queues' loads.
//!   Filters are bounded: at most [`FILTERS_PER_PORT`] MACs of one port and
//!   [`steer::MAX_PROGRAM_FILTERS`] in all are steered (a VM sourcing many MACs cannot take
//!   the others' queues); other MACs take the default queue, and the uplink's note says so.
//!
//! A port worker's slot for a queue is keyed by the uplink's receive key, which it keeps for
//! life (uplinks after a removed one move down an index; their keys, and so their queues, stay).
//! A queue whose socket fails, or whose interface goes, detaches the whole uplink, which is
//! re-attached with all its queues, in a new group, as any uplink is. An uplink whose queues
//! could not be opened (its interface was down, say) is tried again every round. Frames a
//! queue handed over under an earlier attach carry an older generation and are dropped,
//! counted as `detached` on the uplink. A queue's counts run from its uplink's attach.

use super::{Datapath, MAX_PORTS, MAX_UPLINKS};
use crate::afpacket::{self, AfPacket};
use crate::backend::Link;
use crate::steer;
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::mpsc::{Receiver, Sender};
use teamster_core::rx::netqueue::{NetQueue, Placement, Reason};
use teamster_core::rx::RssConfig;
use teamster_core::teaming::PortId;
use teamster_core::wire::MacAddr;
use teamster_core::Instant;

/// The most receive queues an uplink has.
pub const MAX_RX_QUEUES: usize = 16;
/// Slots of a port worker: every port, then every uplink's receive queues.
pub(super) const MAX_SLOTS: usize = MAX_PORTS + MAX_UPLINKS * MAX_RX_QUEUES;
/// Receive-queue events kept (the most recent).
pub const RX_EVENTS_KEPT: usize = 1000;
/// How often the queues' frame rates are measured (and NetQueue's filters refreshed, when
/// it places them evenly).
const ROUND: core::time::Duration = core::time::Duration::from_secs(1);
/// The most MACs of one port that get a filter of their own.
pub const FILTERS_PER_PORT: usize = 4;

/// A port worker's slot for queue `q` of the uplink with receive key `key`.
pub(super) fn slot(key: usize, q: usize) -> usize {
    MAX_PORTS + key * MAX_RX_QUEUES + q
}

/// The receive key and queue of a port worker's slot past the ports'.
pub(super) fn of_slot(slot: usize) -> Option<(usize, usize)> {
    let s = slot.checked_sub(MAX_PORTS)?;
    Some((s / MAX_RX_QUEUES, s % MAX_RX_QUEUES))
}

/// How a frame's receive queue is chosen.
#[derive(Debug, Clone, PartialEq)]
pub enum Steering {
    Rss(RssConfig),
    NetQueue(Placement),
}

/// Every uplink's receive queues.
#[derive(Debug, Clone, PartialEq)]
pub struct RxPlan {
    /// Receive queues per uplink (1: the uplink's own socket only, as before).
    pub queues: usize,
    pub steering: Steering,
}

impl Default for RxPlan {
    fn default() -> RxPlan {
        RxPlan {
            queues: 1,
            steering: Steering::Rss(RssConfig::new(1).expect("one queue")),
        }
    }
}

/// A filter's move between receive queues, as the control plane sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct RxEvent {
    pub at: Instant,
    pub uplink: String,
    pub mac: MacAddr,
    pub from: u16,
    pub to: u16,
    /// `spread` or `pack`.
    pub reason: &'static str,
    /// Each queue's load before the move (a fraction of `queue_pps`).
    pub loads: Vec<f64>,
}

/// One receive queue as the control plane sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueState {
    pub queue: usize,
    /// The data-plane thread reading it (0: the switching worker); None while not open.
    pub worker: Option<usize>,
    /// Frames it received since its uplink was attached.
    pub frames: u64,
    /// Frames per second over the last round.
    pub pps: f64,
}

/// A NetQueue filter as the control plane sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct FilterState {
    pub mac: MacAddr,
    pub port: PortId,
    pub queue: u16,
    /// Smoothed load, a fraction of one queue.
    pub load: f64,
}

/// An uplink's receive queues as the control plane sees them.
#[derive(Debug, Clone, PartialEq)]
pub struct RxState {
    /// `rss`, `netqueue` or `dynamic-netqueue`.
    pub steering: &'static str,
    pub queues: Vec<QueueState>,
    pub filters: Vec<FilterState>,
    /// Why the uplink receives on fewer queues than configured, if it does.
    pub note: Option<String>,
}

/// One uplink's receive queues.
#[derive(Default)]
pub(super) struct UplinkRx {
    /// Its key, for life: its queues' slots in the port workers (see [`slot`]).
    pub key: usize,
    /// The generation of each queue's socket while attached (index 0 unused: the uplink's own).
    generations: Vec<Option<u64>>,
    frames: Vec<u64>,
    /// Frames at the last round, and the rates measured then.
    frames_then: Vec<u64>,
    pps: Vec<f64>,
    netqueue: Option<NetQueue>,
    /// The filters the installed program steers (NetQueue).
    steered: Vec<(MacAddr, u16)>,
    /// The queues the switching worker reads itself, with their sockets.
    local: Vec<(usize, Link)>,
    note: Option<String>,
}

/// A program to install on a fanout group, off the frames' path.
struct SteerJob {
    fd: OwnedFd,
    program: Vec<libc::sock_filter>,
    uplink: String,
}

/// The thread that installs NetQueue's programs, and the errors it reports.
pub(super) struct Steerer {
    jobs: Sender<SteerJob>,
    failed: Receiver<String>,
}

impl Steerer {
    /// Starts the thread.
    pub(super) fn spawn() -> std::io::Result<Steerer> {
        let (jobs, inbox) = std::sync::mpsc::channel::<SteerJob>();
        let (report, failed) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("teamster-steer".into())
            .spawn(move || {
                for job in inbox {
                    if let Err(e) = afpacket::steer_fd(job.fd.as_raw_fd(), &job.program, &job.uplink) {
                        let _ = report.send(format!("uplink {}: steering not changed: {e}", job.uplink));
                    }
                }
            })?;
        Ok(Steerer { jobs, failed })
    }
}

impl UplinkRx {
    /// An uplink's receive queues, before its first attach, under receive key `key`.
    pub(super) fn keyed(key: usize) -> UplinkRx {
        UplinkRx {
            key,
            ..UplinkRx::default()
        }
    }

    /// The descriptors of the queues the switching worker reads.
    pub(super) fn local_fds(&self) -> impl Iterator<Item = std::os::fd::RawFd> + '_ {
        self.local.iter().map(|(_, l)| crate::Backend::raw_fd(l))
    }

    /// Whether a queue the switching worker reads failed for good (its interface gone);
    /// reads, and so clears, each one's error.
    pub(super) fn local_error(&self, interface: &str) -> bool {
        (self.local.iter()).any(|(_, l)| l.take_error().is_some() && !crate::iface::is_index(interface, l.ifindex()))
    }

    /// Reads the queues the switching worker reads into `into`, as frames of ingress slot
    /// `slot`, counting each; returns how many.
    pub(super) fn read_local(
        &mut self,
        slot: usize,
        pool: &mut crate::pool::FramePool,
        into: &mut Vec<(usize, Vec<u8>, teamster_core::offload::Offload)>,
    ) -> usize {
        let mut read = 0;
        for i in 0..self.local.len() {
            let start = into.len();
            let (q, link) = &mut self.local[i];
            let q = *q;
            read += crate::Backend::recv_batch(link, pool, &mut |f, o| into.push((slot, f, o)));
            for (_, f, _) in &into[start..] {
                self.count(q, f);
            }
        }
        read
    }

    /// Each NetQueue filter's port and queue, while the queues are open (else the filters
    /// steer nothing).
    pub(super) fn filter_queues(&self) -> impl Iterator<Item = (PortId, u16)> + '_ {
        let open = self.generations.len() > 1;
        (self.netqueue.iter().filter(move |_| open)).flat_map(|nq| nq.filters().iter().map(|f| (f.port, f.queue)))
    }

    /// Counts a frame queue `q` took (NetQueue: to its destination MAC, its first six bytes).
    pub(super) fn count(&mut self, q: usize, frame: &[u8]) {
        if let Some(n) = self.frames.get_mut(q) {
            *n += 1;
        }
        if let (Some(nq), Some(dst)) = (self.netqueue.as_mut(), frame.get(..6)) {
            let mac = MacAddr(dst.try_into().expect("six bytes"));
            nq.count(mac, None);
        }
    }
}

impl Datapath {
    /// Opens uplink `u`'s receive queues past its own socket and steers frames to them; on any
    /// failure it receives on its own socket alone, and says why.
    pub(super) fn attach_queues(&mut self, u: usize, now: Instant) {
        let want = self.rx.queues;
        let rx = &mut self.uplinks[u].rx;
        *rx = UplinkRx {
            key: rx.key,
            frames: vec![0; want],
            frames_then: vec![0; want],
            pps: vec![0.0; want],
            note: rx.note.take(),
            ..UplinkRx::default()
        };
        if want <= 1 {
            return;
        }
        if let Steering::NetQueue(placement) = self.rx.steering {
            rx.netqueue = NetQueue::new(want as u16, placement).ok();
        }
        let interface = self.uplinks[u].plan.interface.clone();
        let up = &mut self.uplinks[u];
        let opened = match &up.backend {
            _ if self.workers.is_empty() => Err("one data-plane thread reads every queue: workers = 1".to_string()),
            Some(Link::Packet(b)) => open_group(b, &mut up.fanout, &interface, want),
            Some(Link::Xdp(_)) => Err("af_xdp receives on one queue: set backend = \"af_packet\"".to_string()),
            None => return,
        };
        let sockets = match opened {
            Ok(s) => s,
            Err(why) => return self.queues_refused(u, why, now),
        };
        let key = self.uplinks[u].rx.key;
        let mut generations = vec![None];
        for (i, link) in sockets.into_iter().enumerate() {
            let q = i + 1;
            self.generation += 1;
            generations.push(Some(self.generation));
            let Some(worker) = self.queue_thread(q).checked_sub(1) else {
                self.uplinks[u].rx.local.push((q, Link::Packet(link)));
                self.pollfds_stale = true;
                continue;
            };
            self.workers[worker].command(super::port_worker::Command::Attach {
                port: slot(key, q),
                generation: self.generation,
                link: Box::new(Link::Packet(link)),
                interface: interface.clone(),
            });
        }
        self.uplinks[u].rx.generations = generations;
        self.uplinks[u].rx.note = None;
        if let Err(why) = self.steer(u) {
            self.detach_queues(u);
            return self.queues_refused(u, why, now);
        }
        let what = format!(
            "uplink {}: receiving on {want} queues ({})",
            self.uplinks[u].plan.name,
            self.steering_name()
        );
        self.event(now, "rx", what);
    }

    /// Uplink `u` receives on its own socket alone, because of `why` (logged once per reason:
    /// the queues are tried again every round).
    fn queues_refused(&mut self, u: usize, why: String, now: Instant) {
        if self.uplinks[u].rx.note.as_ref() == Some(&why) {
            return;
        }
        let what = format!("uplink {}: receiving on one queue: {why}", self.uplinks[u].plan.name);
        self.uplinks[u].rx.note = Some(why);
        self.event(now, "rx", what);
    }

    /// Closes uplink `u`'s receive queues past its own socket.
    pub(super) fn detach_queues(&mut self, u: usize) {
        let generations = std::mem::take(&mut self.uplinks[u].rx.generations);
        for (_, link) in std::mem::take(&mut self.uplinks[u].rx.local) {
            self.close(link);
            self.pollfds_stale = true;
        }
        let key = self.uplinks[u].rx.key;
        for (q, g) in generations.iter().enumerate().skip(1) {
            if g.is_some() {
                let Some(worker) = self.queue_thread(q).checked_sub(1) else {
                    continue;
                };
                let port = slot(key, q);
                self.workers[worker].command(super::port_worker::Command::Detach { port });
            }
        }
    }

    /// The thread reading queue `q`: 0 the switching worker, `k` port worker `k - 1` (see the
    /// module documentation).
    pub(super) fn queue_thread(&self, q: usize) -> usize {
        let n = self.workers.len();
        match (&self.rx.steering, q) {
            (_, 0) => 0,
            _ if n == 0 => 0,
            (Steering::Rss(_), q) => 1 + (q - 1) % n,
            (Steering::NetQueue(_), q) => (q - 1) % (n + 1),
        }
    }

    /// A receive key no uplink has.
    pub(super) fn free_rx_key(&self) -> usize {
        (0..MAX_UPLINKS)
            .find(|k| !self.uplinks.iter().any(|u| u.rx.key == *k))
            .expect("fewer than MAX_UPLINKS uplinks")
    }

    /// Sets uplink `u`'s first steering program from the plan (RSS) or its filters (NetQueue),
    /// here: a group's first program costs no grace period.
    fn steer(&mut self, u: usize) -> Result<(), String> {
        let program = match (&self.rx.steering, &self.uplinks[u].rx.netqueue) {
            (Steering::Rss(rss), _) => steer::rss_program(rss)?,
            (Steering::NetQueue(_), _) => steer::mac_program(&self.uplinks[u].rx.steered),
        };
        match &self.uplinks[u].backend {
            Some(Link::Packet(b)) => b.steer(&program).map_err(|e| e.to_string()),
            _ => Ok(()),
        }
    }

    /// Replaces uplink `u`'s NetQueue program if its filters steer differently now, on the
    /// steering thread.
    fn resteer(&mut self, u: usize, now: Instant) {
        let up = &mut self.uplinks[u];
        let Some(nq) = up.rx.netqueue.as_ref() else { return };
        let mut steered: Vec<(MacAddr, u16)> = (nq.filters().iter())
            .filter(|f| f.queue != 0)
            .map(|f| (f.mac, f.queue))
            .collect();
        steered.truncate(steer::MAX_PROGRAM_FILTERS);
        if steered == up.rx.steered || up.rx.generations.len() <= 1 {
            return;
        }
        let Some(Link::Packet(b)) = &up.backend else { return };
        let job = match b.steering_handle() {
            Ok(fd) => SteerJob {
                fd,
                program: steer::mac_program(&steered),
                uplink: up.plan.name.clone(),
            },
            Err(e) => {
                let what = format!("uplink {}: steering not changed: {e}", up.plan.name);
                return self.event(now, "rx", what);
            }
        };
        up.rx.steered = steered;
        let _ = self.steerer.jobs.send(job);
    }

    fn steering_name(&self) -> &'static str {
        match self.rx.steering {
            Steering::Rss(_) => "rss",
            Steering::NetQueue(Placement::Even) => "netqueue",
            Steering::NetQueue(Placement::Packed(_)) => "dynamic-netqueue",
        }
    }

    /// The uplink a frame handed over from queue slot `slot` belongs to, counted; None (and
    /// counted as `detached`) if that queue has since been closed or renumbered.
    pub(super) fn take_queue_frame(&mut self, slot: usize, generation: u64, frame: &[u8]) -> Option<usize> {
        let Some((u, q)) = self.queue_of(slot, generation) else {
            let key = of_slot(slot).map(|s| s.0);
            if let Some(up) = self.uplinks.iter_mut().find(|u| Some(u.rx.key) == key) {
                up.extra.detached += 1;
            }
            return None;
        };
        self.uplinks[u].rx.count(q, frame);
        Some(u)
    }

    /// The uplink (index) and queue of slot `slot`, if its socket is still the one of
    /// `generation`.
    pub(super) fn queue_of(&self, slot: usize, generation: u64) -> Option<(usize, usize)> {
        let (key, q) = of_slot(slot)?;
        let u = self.uplinks.iter().position(|u| u.rx.key == key)?;
        let current = self.uplinks[u].rx.generations.get(q).copied().flatten();
        (current == Some(generation)).then_some((u, q))
    }

    /// The receive queues' round at `now`: rates measured; queues that could not be opened
    /// tried again; NetQueue's filters refreshed from the MAC table, repacked, and the program
    /// swapped when what it steers changed.
    pub(super) fn rx_round(&mut self, now: Instant) {
        while let Ok(what) = self.steerer.failed.try_recv() {
            self.event(now, "rx", what);
        }
        if self.rx.queues <= 1 || now < self.next_rx_round {
            return;
        }
        let interval = match self.rx.steering {
            Steering::NetQueue(Placement::Packed(p)) => p.interval,
            _ => ROUND,
        };
        let elapsed = (now - self.next_rx_round + interval).as_secs_f64();
        self.next_rx_round = now + interval;
        let netqueue = matches!(self.rx.steering, Steering::NetQueue(_));
        // The MACs behind local ports (the first port a MAC is found on, for one in two VLANs).
        let mut macs: HashMap<MacAddr, PortId> = HashMap::new();
        if netqueue {
            for (vlan, mac, port) in self.switch.mac_table().port_macs(now) {
                if vlan.is_none_or(|v| v < 4096) && !mac.is_multicast() {
                    macs.entry(mac).or_insert(port);
                }
            }
        }
        let mut sorted: Vec<(MacAddr, PortId)> = macs.iter().map(|(m, p)| (*m, *p)).collect();
        sorted.sort();
        for u in 0..self.uplinks.len() {
            if self.uplinks[u].backend.is_some() && self.uplinks[u].rx.generations.len() <= 1 {
                self.attach_queues(u, now);
            }
            let rx = &mut self.uplinks[u].rx;
            for q in 0..rx.frames.len() {
                rx.pps[q] = (rx.frames[q] - rx.frames_then[q]) as f64 / elapsed;
                rx.frames_then[q] = rx.frames[q];
            }
            let Some(nq) = rx.netqueue.as_mut() else { continue };
            let capped = refresh_filters(nq, &macs, &sorted, now);
            let note = capped.then(|| {
                format!(
                    "MACs past {FILTERS_PER_PORT} per port or {} in all take the default queue",
                    steer::MAX_PROGRAM_FILTERS
                )
            });
            if rx.generations.len() > 1 {
                rx.note = note;
            }
            nq.handle_timeout(now);
            let name = self.uplinks[u].plan.name.clone();
            let mut events = Vec::new();
            while let Some(e) = self.uplinks[u].rx.netqueue.as_mut().and_then(NetQueue::poll_event) {
                events.push(RxEvent {
                    at: e.at,
                    uplink: name.clone(),
                    mac: e.mac,
                    from: e.from,
                    to: e.to,
                    reason: match e.reason {
                        Reason::Spread => "spread",
                        Reason::Pack => "pack",
                    },
                    loads: e.loads,
                });
            }
            for e in events {
                let loads: Vec<String> = e.loads.iter().map(|l| format!("{:.0}%", l * 100.0)).collect();
                let what = format!(
                    "uplink {}: {} queue {} -> {} ({}; loads {})",
                    e.uplink,
                    e.mac,
                    e.from,
                    e.to,
                    e.reason,
                    loads.join(" ")
                );
                self.event(now, "rx", what);
                *self.rx_moves.entry(e.reason).or_default() += 1;
                if self.rx_events.len() >= RX_EVENTS_KEPT {
                    self.rx_events.pop_front();
                }
                self.rx_events.push_back(e);
            }
            self.resteer(u, now);
        }
        if netqueue {
            self.follow_queues();
        }
    }

    /// Uplink `u`'s receive queues for the control plane (None with one queue).
    pub(super) fn rx_state(&self, u: usize) -> Option<RxState> {
        if self.rx.queues <= 1 {
            return None;
        }
        let rx = &self.uplinks[u].rx;
        let queues = (0..rx.frames.len())
            .map(|q| QueueState {
                queue: q,
                worker: match q {
                    0 => self.uplinks[u].backend.as_ref().map(|_| 0),
                    _ => rx.generations.get(q).copied().flatten().map(|_| self.queue_thread(q)),
                },
                frames: rx.frames[q],
                pps: rx.pps[q],
            })
            .collect();
        let filters = rx.netqueue.as_ref().map_or(Vec::new(), |nq| {
            (nq.filters().iter())
                .map(|f| FilterState {
                    mac: f.mac,
                    port: f.port,
                    queue: f.queue,
                    load: f.load,
                })
                .collect()
        });
        Some(RxState {
            steering: self.steering_name(),
            queues,
            filters,
            note: rx.note.clone(),
        })
    }

    /// The most recent receive-queue events, at most `n`, oldest first.
    pub(super) fn recent_rx_events(&self, n: usize) -> Vec<RxEvent> {
        let skip = self.rx_events.len().saturating_sub(n);
        self.rx_events.iter().skip(skip).cloned().collect()
    }
}

/// Brings NetQueue's filters in line with the MACs behind local ports (`macs`, and the same
/// sorted): a filter whose MAC left (or moved to another port) is removed, a new MAC gets one
/// unless its port has [`FILTERS_PER_PORT`] or the uplink [`steer::MAX_PROGRAM_FILTERS`]
/// already. Says whether a MAC went without a filter for those limits. Costs a hash lookup
/// per MAC and filter.
fn refresh_filters(
    nq: &mut NetQueue,
    macs: &HashMap<MacAddr, PortId>,
    sorted: &[(MacAddr, PortId)],
    now: Instant,
) -> bool {
    let stale: Vec<MacAddr> = (nq.filters().iter())
        .filter(|f| macs.get(&f.mac) != Some(&f.port))
        .map(|f| f.mac)
        .collect();
    for mac in stale {
        nq.remove_filter(mac, None);
    }
    let mut per_port: HashMap<PortId, usize> = HashMap::new();
    for f in nq.filters() {
        *per_port.entry(f.port).or_default() += 1;
    }
    let mut capped = false;
    for (mac, port) in sorted {
        if nq.has_filter(*mac, None) {
            continue;
        }
        let n = per_port.entry(*port).or_default();
        if *n >= FILTERS_PER_PORT || nq.filters().len() >= steer::MAX_PROGRAM_FILTERS {
            capped = true;
            continue;
        }
        if nq.add_filter(*port, *mac, None, now).is_ok() {
            *n += 1;
        }
    }
    capped
}

/// Makes `own` the first member of a fanout group on `interface` (a new one, unless it leads
/// `group` already) and opens `want - 1` more members, in queue order.
fn open_group(own: &AfPacket, group: &mut Option<u32>, interface: &str, want: usize) -> Result<Vec<AfPacket>, String> {
    let group = match *group {
        Some(g) => g,
        None => *group.insert(own.start_fanout().map_err(|e| e.to_string())?),
    };
    (1..want)
        .map(|_| AfPacket::open_queue(interface, group).map_err(|e| e.to_string()))
        .collect()
}

/// Kept so a queue's events are bounded even when never read.
pub(super) type RxEvents = VecDeque<RxEvent>;
