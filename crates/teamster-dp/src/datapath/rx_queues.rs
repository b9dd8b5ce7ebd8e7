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
use crate::platform::Platform;
use crate::steer;
use crate::{Device, Frame};
use std::collections::VecDeque;
use teamster_core::rx::netqueue::{NetQueue, Placement};
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
pub(super) const ROUND: core::time::Duration = core::time::Duration::from_secs(1);
/// The most MACs of one port that get a filter of their own.
pub const FILTERS_PER_PORT: usize = 4;

/// The data-plane thread (0: the switching worker) reading receive queue `q` under `steering`
/// with `workers` port workers (see the module documentation).
pub(super) fn queue_thread(steering: &Steering, workers: usize, q: usize) -> usize {
    match (steering, q) {
        (_, 0) => 0,
        _ if workers == 0 => 0,
        (Steering::Rss(_), q) => 1 + (q - 1) % workers,
        (Steering::NetQueue(_), q) => (q - 1) % (workers + 1),
    }
}

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
    /// Dynamic NetQueue: each queue's capacity is measured from the thread reading it (see
    /// `thread_load`), from the configured `queue_pps` on until the first measure; false: the
    /// configured figure stands.
    pub measure_capacity: bool,
}

impl Default for RxPlan {
    fn default() -> RxPlan {
        RxPlan {
            queues: 1,
            steering: Steering::Rss(RssConfig::new(1).expect("one queue")),
            measure_capacity: false,
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
    /// Dynamic NetQueue: frames per second at load 1.0 (measured or configured).
    pub capacity: Option<f64>,
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
pub(super) struct UplinkRx<D> {
    /// Its key, for life: its queues' slots in the port workers (see [`slot`]).
    pub key: usize,
    /// The generation of each queue's socket while attached (index 0 unused: the uplink's own).
    pub(super) generations: Vec<Option<u64>>,
    /// Frames each queue took since the uplink was attached.
    pub(super) frames: Vec<u64>,
    /// Frames at the last round, and the rates measured then.
    pub(super) frames_then: Vec<u64>,
    /// Frames the kernel dropped on each queue's socket (its buffer full: the thread reading
    /// it fell behind) since the uplink was attached, and at the last round.
    pub(super) drops: Vec<u64>,
    pub(super) drops_then: Vec<u64>,
    pub(super) pps: Vec<f64>,
    pub(super) netqueue: Option<NetQueue>,
    /// The filters the installed program steers (NetQueue).
    pub(super) steered: Vec<(MacAddr, u16)>,
    /// The queues the switching worker reads itself, with their sockets.
    local: Vec<(usize, D)>,
    pub(super) note: Option<String>,
}

// By hand: a derive would ask that the device type have a default.
impl<D> Default for UplinkRx<D> {
    fn default() -> Self {
        UplinkRx {
            key: 0,
            generations: Vec::new(),
            frames: Vec::new(),
            frames_then: Vec::new(),
            drops: Vec::new(),
            drops_then: Vec::new(),
            pps: Vec::new(),
            netqueue: None,
            steered: Vec::new(),
            local: Vec::new(),
            note: None,
        }
    }
}

impl<D: Device> UplinkRx<D> {
    /// An uplink's receive queues, before its first attach, under receive key `key`.
    pub(super) fn keyed(key: usize) -> Self {
        UplinkRx {
            key,
            ..UplinkRx::default()
        }
    }

    /// The descriptors of the queues the switching worker reads.
    pub(super) fn local_fds(&self) -> impl Iterator<Item = std::os::fd::RawFd> + '_ {
        self.local.iter().map(|(_, l)| l.raw_fd())
    }

    /// Whether a queue the switching worker reads failed for good (its interface gone);
    /// reads, and so clears, each one's error.
    pub(super) fn local_error(&self, interface: &str, platform: &impl Platform) -> bool {
        (self.local.iter()).any(|(_, l)| l.take_error().is_some() && !platform.is_index(interface, l.ifindex()))
    }

    /// Reads the queues the switching worker reads into `into`, as frames of ingress slot
    /// `slot`, counting each; returns how many.
    pub(super) fn read_local(
        &mut self,
        slot: usize,
        pool: &mut crate::pool::FramePool,
        into: &mut Vec<(usize, Frame)>,
    ) -> usize {
        let mut read = 0;
        for i in 0..self.local.len() {
            let start = into.len();
            let (q, link) = &mut self.local[i];
            let q = *q;
            read += link.recv_batch(pool, &mut |f| into.push((slot, f)));
            for (_, f) in &into[start..] {
                self.count(q, &f.bytes);
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

    /// Counts `n` frames the kernel dropped on queue `q`'s socket.
    pub(super) fn count_drops(&mut self, q: usize, n: u64) {
        if let Some(d) = self.drops.get_mut(q) {
            *d += n;
        }
    }

    /// Reads the kernel's drop counters of the queues the switching worker reads, counting
    /// them per queue; returns their sum.
    pub(super) fn local_ring_drops(&mut self) -> u64 {
        let mut all = 0;
        for (q, link) in &mut self.local {
            let n = link.ring_drops();
            if let Some(d) = self.drops.get_mut(*q) {
                *d += n;
            }
            all += n;
        }
        all
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

impl<P: Platform> Datapath<P> {
    /// Opens uplink `u`'s receive queues past its own socket and steers frames to them; on any
    /// failure it receives on its own socket alone, and says why.
    pub(super) fn attach_queues(&mut self, u: usize, now: Instant) {
        let want = self.rx.queues;
        let rx = &mut self.uplinks[u].rx;
        *rx = UplinkRx {
            key: rx.key,
            frames: vec![0; want],
            frames_then: vec![0; want],
            drops: vec![0; want],
            drops_then: vec![0; want],
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
            Some(b) => b.open_queues(&mut up.fanout, want),
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
                self.uplinks[u].rx.local.push((q, link));
                self.pollfds_stale = true;
                continue;
            };
            self.workers[worker].command(super::port_worker::Command::Attach {
                port: slot(key, q),
                generation: self.generation,
                link: Box::new(link),
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
        queue_thread(&self.rx.steering, self.workers.len(), q)
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
            Some(b) => b.steer(&program),
            None => Ok(()),
        }
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
                capacity: match (&self.rx.steering, &rx.netqueue) {
                    (Steering::NetQueue(Placement::Packed(_)), Some(nq)) => Some(nq.capacity(q as u16)),
                    _ => None,
                },
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

/// Kept so a queue's events are bounded even when never read.
pub(super) type RxEvents = VecDeque<RxEvent>;
