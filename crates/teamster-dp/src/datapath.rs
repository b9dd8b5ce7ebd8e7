//! The live switch's poll loop: one [`Backend`] per VM port and uplink, the `teamster-core`
//! [`Switch`] deciding where each frame goes, one NetIOC [`Scheduler`] and [`Pacer`] per uplink,
//! and netlink for carrier changes.
//!
//! Each turn of [`Datapath::run`]: wait (poll) for frames, a link change or the next timer (at most
//! 10 ms); apply carrier changes (failover within that turn); read every interface into its receive
//! queue and pass frames from those queues through the switch, new flows first and sent at once
//! (the `ingress` submodule); send frames for ports at once, queue frames for uplinks in their
//! scheduler (fitted to the interface: see the `fit` submodule), and let each pacer release what
//! the uplink's capacity allows, holding back while the device is busy; run the team's timers
//! (LBT); send team-originated frames (notify-switch RARPs); tell the switch what each device took
//! (its `tx_*` counters); then give the [`Control`] its turn, which may reconfigure the switch
//! between packets or read its state. A limit is one bucket per port across every uplink's
//! scheduler, so a port spread over several uplinks (IP hash) is capped once.
//!
//! Threads. The loop above is the switching worker. With `workers` above one it starts port
//! workers (the `port_worker` submodule) that do the ports' receiving and sending: what they
//! receive it takes from their queues in its receive pass, and what it sends to their ports it
//! hands them, fitted, in its dispatch; their counts reach the switch each turn. The switch and
//! the schedulers stay in this one thread, so forwarding decisions and NetIOC's order are
//! exactly those of one thread, and nothing on the frames' path takes a lock. Why not a switch
//! per thread: the MAC table, the team's meters and NetIOC's shared limits would have to be
//! merged between threads, and NetIOC would stop being exact; the switching itself is a small
//! part of the cost per frame, the system calls and copies the large part, and those are what
//! the port workers take. With `[rx] queues` above one, an uplink's receiving is spread over
//! the threads too (the `rx_queues` submodule: RSS or NetQueue steering in the kernel), and
//! under NetQueue a VM's port I/O follows its filter's queue (the `port_moves` submodule). The
//! switching worker still switches every frame and sends on the uplinks: on a machine with
//! many cores it is the bound.
//!
//! Interfaces come and go (the `attach` submodule states the rules): a VM's tap disappears
//! when the VM stops and returns, with a new index, when it starts. The port is then detached (its
//! frames dropped as `detached`) and re-attached by name; an uplink that disappears is out of
//! use until it returns. Link state cannot be lost: a netlink overrun re-reads every interface,
//! and the uplinks' carrier is re-read every second anyway.
//!
//! Super-frames. A frame travels with its offload request (partial checksum, TSO/GSO
//! super-frame) from the interface it arrived on to the one it leaves by, and is completed or
//! cut only where that interface or its pacing needs it (the `fit` submodule). It is counted,
//! metered (LBT), scheduled and paced at its wire length: its segments' bytes, headers repeated.
//!
//! Counting. `tx_packets`/`tx_bytes` of a port or uplink count frames its device took, a
//! super-frame as the segments it becomes, never frames dropped on the way; `rx_packets` counts
//! a super-frame once, `rx_bytes` at its wire length. Each drop is counted once, on one
//! interface: the switch's reasons, `ring_full`, `truncated` and `bad_offload` on the interface
//! the frame arrived on; `queue_full` on the port whose NetIOC queue (in an uplink's scheduler)
//! was full; `oversize`, `bad_offload` (a request that cannot be completed in software),
//! `tx_error` and `detached` on the interface that could not send it.

mod attach;
mod fit;
mod handoff;
mod ingress;
mod poll;
mod port_moves;
mod port_worker;
mod ports;
mod publish;
mod rx_queues;
mod rx_rounds;
mod thread_load;
mod uplinks;

pub use publish::{PortState, Published, UplinkState};
pub use rx_queues::{FilterState, QueueState, RxEvent, RxPlan, RxState, Steering, MAX_RX_QUEUES};

use crate::pool::{self, FramePool, Spill};
use fit::{fit, Refused};
use handoff::Doorbell;
use port_worker::{Gone, PortWorker, Returned, Upstream};

use crate::backend::{BackendChoice, Link};
use crate::netlink::LinkWatch;
use crate::pacer::Pacer;
use crate::Backend;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use teamster_core::ioc::{Enqueued, Ioc, NodeId, QueueLimit, ReservationCap, Tree};
use teamster_core::offload::Offload;
use teamster_core::switch::{
    Counters, Egress, Forward, Ingress, Location, MacNote, MacNoteKind, SecurityPolicy, Switch, SwitchConfig, TagEdit,
};
use teamster_core::teaming::{Effect, GroupId, LinkState, PortGroupSpec, PortId, Team, UplinkId};
use teamster_core::units::Bandwidth;
use teamster_core::wire::{mark_congestion, MacAddr};
use teamster_core::Instant;

/// The longest the loop sleeps, so timers, signals and control-plane changes are seen promptly.
const MAX_WAIT_MS: i32 = 10;
/// How long the loop polls without sleeping after a turn that received frames, by default (see
/// the `poll` submodule).
pub const DEFAULT_BUSY_POLL: core::time::Duration = core::time::Duration::from_micros(50);
/// Events kept (the most recent).
const EVENTS_KEPT: usize = 1000;
/// Port moves kept (the most recent; their counts by reason are kept for ever).
pub const MOVES_KEPT: usize = 1000;
/// How often the uplinks' carrier is re-read, and missing interfaces looked for, whatever
/// netlink says.
const RESYNC_EVERY: core::time::Duration = core::time::Duration::from_secs(1);

/// A VM port as the configuration plans it, whatever made it (the file, the API, a port rule,
/// the libvirt hook, the cluster controller, a reload): what [`Datapath::attach`] starts with
/// and what [`Datapath::reconfigure`] compares, by `name`, with the ports it has (see the
/// `ports` submodule). A running port holds the latest, under its own ID, in [`Port::plan`].
#[derive(Debug, Clone, PartialEq)]
pub struct PortPlan {
    /// Its ID in the team: the plan's for a port the switch starts with; a port added to a
    /// running switch is given the smallest free ID instead, and one running keeps its own.
    pub id: PortId,
    /// What it is known by: unique among the switch's ports, and what a change matches it by.
    pub name: String,
    pub interface: String,
    /// The MAC its VM uses.
    pub mac: MacAddr,
    /// Its port group (its index in the team).
    pub group: GroupId,
    /// Its leaf in the NetIOC tree.
    pub leaf: NodeId,
    /// AF_PACKET, AF_XDP, or AF_XDP where it works.
    pub backend: BackendChoice,
    /// The operator's word: the port takes its MAC over from a host outside that uses it (see
    /// `teamster_core::switch::claims`).
    pub mac_takeover: bool,
}

/// An uplink to attach (in the team's uplink order).
#[derive(Debug, Clone)]
pub struct UplinkPlan {
    pub name: String,
    pub interface: String,
    pub capacity: Bandwidth,
    /// The capacity is the link speed the kernel reports (the configuration set none), so a
    /// new speed becomes the new capacity; else the configured capacity stays whatever the link
    /// does.
    pub follows_link_speed: bool,
    pub admin_up: bool,
    /// AF_PACKET, AF_XDP, or AF_XDP where it works.
    pub backend: BackendChoice,
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
    /// After a turn that received frames, poll this long without sleeping.
    pub busy_poll: core::time::Duration,
    /// Data-plane threads: the switching worker, and `workers - 1` port workers that share
    /// the ports' receiving and sending (see the `port_worker` submodule). At least 1.
    pub workers: usize,
    /// The uplinks' receive queues (see the `rx_queues` submodule).
    pub rx: RxPlan,
}

/// Data-plane threads by default: one per core the process may run on, at most
/// [`DEFAULT_WORKERS_MAX`], but one alone on a machine of two cores or fewer. Measured on two
/// cores shared with the VMs (`bench/live/RESULTS.md`), a second thread moved 25-35% more
/// frames only while the switch was short of CPU (offloads off), and cost latency always: the
/// frames of a port cross threads, one more wake-up each way when idle, and a second thread
/// polling takes CPU from the VMs.
pub fn default_workers() -> usize {
    match std::thread::available_parallelism().map_or(1, |n| n.get()) {
        ..=2 => 1,
        cores => cores.min(DEFAULT_WORKERS_MAX),
    }
}

/// The most data-plane threads a switch starts unless told otherwise.
pub const DEFAULT_WORKERS_MAX: usize = 8;

/// The most data-plane threads a switch may have.
pub const MAX_WORKERS: usize = 64;

/// The most uplinks a switch has (each is a socket, a receive queue, a NetIOC scheduler and a
/// poll entry; a host has a handful of NICs).
pub const MAX_UPLINKS: usize = 64;

/// The most VM ports a switch holds at once (vSphere's figure for virtual ports per host):
/// port workers keep lock-free counters for this many, allocated at start.
pub const MAX_PORTS: usize = 4096;

/// Drops the data plane makes outside the core switch, kept per port and per uplink (each drop
/// on one interface: see the module documentation).
#[derive(Debug, Clone, Default)]
pub struct ExtraDrops {
    /// From this port: its queue in an uplink's scheduler was full.
    pub queue_full: u64,
    /// To this interface: too large for its MTU and not a TCP frame that could be cut.
    pub oversize: u64,
    /// On this interface: the kernel's receive buffer was full before the loop read it.
    pub ring_full: u64,
    /// To this interface: the kernel refused to send it.
    pub tx_error: u64,
    /// On this interface: longer on the wire than the kernel captured, so not forwarded.
    pub truncated: u64,
    /// On this interface: its offload request (virtio-net header) did not match the frame; or,
    /// to this interface: a partial checksum it cannot take could not be completed.
    pub bad_offload: u64,
    /// To this interface while it was detached (its interface missing).
    pub detached: u64,
    /// From or to this port: the queue between its port worker and the switching worker was
    /// full (the other thread had fallen behind by thousands of frames).
    pub handoff_full: u64,
    /// On this interface: dropped from the switch's receive queue, which held more than the
    /// switch forwarded (by CoDel, or over the queue's budget).
    pub backlog: u64,
}

impl ExtraDrops {
    /// Every reason with its count, in a stable order, for status and metrics.
    pub fn by_reason(&self) -> [(&'static str, u64); 9] {
        [
            ("queue_full", self.queue_full),
            ("oversize", self.oversize),
            ("ring_full", self.ring_full),
            ("tx_error", self.tx_error),
            ("truncated", self.truncated),
            ("bad_offload", self.bad_offload),
            ("detached", self.detached),
            ("handoff_full", self.handoff_full),
            ("backlog", self.backlog),
        ]
    }
}

/// Where a port's socket is.
// One per port: the bytes a detached or away port wastes are nothing beside a pointer chase per
// batch for the ports this thread serves.
#[allow(clippy::large_enum_variant)]
enum PortIo {
    /// Its interface is missing.
    Detached,
    /// The switching worker does its I/O.
    Here(Link),
    /// A port worker does its I/O; what the switching worker needs of the socket is copied
    /// here.
    Away {
        worker: usize,
        /// Which attach this is (a report about an earlier socket is ignored).
        generation: u64,
        ifindex: i32,
        takes_offloads: bool,
        describe: String,
        /// The thread its socket is moving to, 0 the switching worker (see the `port_moves`
        /// submodule).
        moving_to: Option<usize>,
    },
}

/// A VM port: attached while its interface exists.
pub struct Port {
    pub plan: PortPlan,
    io: PortIo,
    mtu: usize,
    pub extra: ExtraDrops,
    /// Frames from this port marked ECN Congestion Experienced in the switch's receive queue
    /// (CoDel, instead of a drop), since start.
    pub ecn_marked: u64,
    /// The last attach failure reported, so a retry failing the same way is not logged again.
    attach_error: Option<String>,
    /// Set when the port was removed: the slot is empty, and taken again by a port added once
    /// frames the old one handed between threads have drained (see the `ports` submodule).
    vacant_since: Option<Instant>,
    /// The port worker its socket is given to (whose tally holds its counts).
    home: Option<usize>,
    /// Frames for it held while its socket moves between workers.
    held: VecDeque<(Vec<u8>, Offload)>,
}

impl Port {
    /// Whether the slot holds a port (false once it was removed).
    pub fn present(&self) -> bool {
        self.vacant_since.is_none()
    }

    /// Whether the port's interface is attached (it exists, and its socket is open).
    pub fn attached(&self) -> bool {
        !matches!(self.io, PortIo::Detached)
    }

    /// The backend in use while attached (`af_packet`, or AF_XDP with its modes).
    pub fn backend(&self) -> Option<String> {
        match &self.io {
            PortIo::Detached => None,
            PortIo::Here(link) => Some(link.describe()),
            PortIo::Away { describe, .. } => Some(describe.clone()),
        }
    }

    /// The data-plane thread doing its I/O while attached: 0 for the switching worker.
    pub fn worker(&self) -> Option<usize> {
        match &self.io {
            PortIo::Detached => None,
            PortIo::Here(_) => Some(0),
            PortIo::Away { worker, .. } => Some(worker + 1),
        }
    }

    /// The index of the interface its socket is bound to, while attached.
    fn ifindex(&self) -> Option<i32> {
        match &self.io {
            PortIo::Detached => None,
            PortIo::Here(link) => Some(link.ifindex()),
            PortIo::Away { ifindex, .. } => Some(*ifindex),
        }
    }

    /// Its socket, if the switching worker does its I/O.
    fn here(&mut self) -> Option<&mut Link> {
        match &mut self.io {
            PortIo::Here(link) => Some(link),
            _ => None,
        }
    }
}

/// An uplink: attached while its interface exists.
pub struct Uplink {
    pub plan: UplinkPlan,
    /// None while detached (its interface went away after start).
    backend: Option<Link>,
    mtu: usize,
    pacer: Pacer,
    pub extra: ExtraDrops,
    /// Carrier as the kernel reports it (false while detached).
    pub carrier: bool,
    /// Frames marked ECN Congestion Experienced here, since start: queued for this uplink when
    /// its queue was over its byte budget, or received on it and held too long in the switch's
    /// receive queue (CoDel).
    pub ecn_marked: u64,
    /// The last attach failure reported.
    attach_error: Option<String>,
    /// Its receive queues past its own socket (see the `rx_queues` submodule).
    rx: rx_queues::UplinkRx,
    /// The fanout group its own socket leads, once it has receive queues.
    fanout: Option<u32>,
}

impl Uplink {
    /// Whether the uplink's interface is attached.
    pub fn attached(&self) -> bool {
        self.backend.is_some()
    }

    /// The backend in use while attached (`af_packet`, or AF_XDP with its modes).
    pub fn backend(&self) -> Option<String> {
        self.backend.as_ref().map(Link::describe)
    }
}

/// How to attach, beyond the plan.
#[derive(Debug, Clone, Default)]
pub struct AttachOptions {
    /// The netlink socket's receive buffer, in bytes (None: the system's default). Tests make
    /// it tiny to force an overrun.
    pub netlink_rcvbuf: Option<usize>,
}

/// What a descriptor in the poll set belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Port(usize),
    Uplink(usize),
    /// A receive queue of uplink `.0` the switching worker reads.
    Queue(usize),
    Links,
    /// The switching worker's doorbell: a port worker handed it frames.
    Bell,
}

/// Something that happened, for logs and the control plane.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Increases by one per event since start.
    pub seq: u64,
    pub at: Instant,
    /// `start`, `link`, `attach`, `move` or `config`.
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
    /// NetIOC: the tree, each uplink's scheduler, each port's shared limit bucket; frames wait
    /// there with their offload requests.
    ioc: Ioc<(Vec<u8>, Offload)>,
    ports: Vec<Port>,
    index: HashMap<PortId, usize>,
    uplinks: Vec<Uplink>,
    links: LinkWatch,
    started: std::time::Instant,
    /// The most recent moves ([`MOVES_KEPT`]), and how many there were since start by reason.
    moves: VecDeque<Move>,
    moves_by_reason: std::collections::BTreeMap<String, u64>,
    events: VecDeque<Event>,
    next_seq: u64,
    failovers: u64,
    /// Every descriptor the loop waits on (attached ports and uplinks, netlink), and whose each
    /// is; rebuilt when an interface is attached or detached.
    pollfds: Vec<libc::pollfd>,
    pollmap: Vec<Slot>,
    pollfds_stale: bool,
    /// When the uplinks' carrier is next re-read.
    next_resync: Instant,
    /// Frame buffers, reused: frames are received into them, no allocation once warm.
    pool: FramePool,
    busy_poll: core::time::Duration,
    /// Until when the loop polls without sleeping (the last turn with frames, plus `busy_poll`).
    busy_until: Instant,
    /// The port workers (none with one data-plane thread); port `i` goes to `i % len`.
    workers: Vec<PortWorker>,
    /// Rung by port workers when they hand this thread frames while it sleeps.
    bell: Arc<Doorbell>,
    /// Ports whose socket a port worker closed.
    gone: Receiver<Gone>,
    /// Sockets port workers handed back (ports moving between workers).
    returned: Receiver<Returned>,
    /// Attaches so far (each attach to a port worker carries the next).
    generation: u64,
    /// Each interface's receive queue, ports then uplinks.
    ingress: Vec<ingress::Queue>,
    /// Interfaces netlink announced since the control plane last looked (see
    /// [`Datapath::take_link_news`]).
    news: LinkNews,
    /// Sockets to close, closed by a thread of their own: closing a packet socket waits for an
    /// RCU grace period in the kernel (`synchronize_net`, 10-25 ms measured here), which would
    /// stall every other port's traffic if this thread did it.
    closer: std::sync::mpsc::Sender<Link>,
    /// The uplinks' receive queues, the most recent moves of their filters, and when their
    /// next round is due.
    rx: RxPlan,
    rx_events: rx_queues::RxEvents,
    /// Filter moves since start, by reason.
    rx_moves: std::collections::BTreeMap<&'static str, u64>,
    next_rx_round: Instant,
    /// Installs NetQueue's programs off this thread.
    steerer: rx_rounds::Steerer,
    /// This thread's time at work and frames received; and each data-plane thread's meter
    /// (this one first, then the port workers'), read at each receive-queue round.
    load: thread_load::ThreadLoad,
    meters: Vec<thread_load::Meter>,
}

/// Interfaces that appeared, changed or went, by name, for the control plane's port rules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkNews {
    /// Names netlink announced (new, changed or deleted), each once, at most [`NEWS_KEPT`].
    pub names: Vec<String>,
    /// Some announcements were lost (a netlink overrun, or more than [`NEWS_KEPT`] names
    /// between two looks): every interface should be looked at again.
    pub lost: bool,
}

/// Whether events are logged as JSON lines (journald and log shippers), not text.
static JSON_LOG: AtomicBool = AtomicBool::new(false);

/// Logs events as JSON lines (`{"t_s", "seq", "kind", "message"}`, the API's event fields) from
/// now on, or as text.
pub fn set_json_log(on: bool) {
    JSON_LOG.store(on, Ordering::Relaxed);
}

/// Interface names kept between two looks of the control plane; past it, news is lost (and
/// says so) rather than growing without bound when a local user creates interfaces in a loop.
pub const NEWS_KEPT: usize = 1024;

/// A frame the switch decided to send, in its own buffer, waiting for the end of the receive
/// pass.
struct Pending {
    /// The port it came from (None: an uplink).
    from: Option<PortId>,
    to: Egress,
    frame: Vec<u8>,
    offload: Offload,
}

/// What a turn of the loop reuses from turn to turn.
#[derive(Default)]
struct Scratch {
    /// Frames read this round, with the receive queue (ports then uplinks) they go to.
    received: Vec<(usize, Vec<u8>, Offload)>,
    pending: Vec<Pending>,
    forwards: Vec<Forward>,
    /// Places a frame could not be edited for (counted as `bad_offload` there).
    refused: Vec<Egress>,
    /// Frames taken from each receive queue this turn.
    taken: Vec<usize>,
    /// The receive queues whose interfaces are read this round.
    readable: Vec<usize>,
}

/// Lets one uplink's scheduler send what its pacer allows at `now`, a batch at a time, and
/// stops while the device is busy: frames then wait in the scheduler, where NetIOC decides whose
/// are dropped if the wait grows, rather than in the kernel's FIFO.
fn pace_one(u: &mut Uplink, i: usize, ioc: &mut Ioc<(Vec<u8>, Offload)>, now: Instant) {
    u.pacer.refill(now);
    let Some(backend) = u.backend.as_mut() else {
        // No device: what the scheduler releases is dropped, not kept for one that may never
        // return (the team has already moved the ports away).
        while ioc.dequeue(i, now).is_some() {
            u.extra.detached += 1;
        }
        return;
    };
    // Frames move from the scheduler to the device's transmit batch while the pacer allows and
    // the device is not holding a full batch it could not send; the backend sends each full
    // batch with one call, and the rest at the end of the loop's turn ([`flush_uplink`]), so a
    // burst of arrivals costs one sendmmsg per 64 frames, not one per frame.
    while u.pacer.may_send() && backend.tx_pending() < Link::TX_BATCH {
        let Some((_, len, (frame, offload))) = ioc.dequeue(i, now) else {
            break;
        };
        backend.send_owned(frame, offload);
        u.pacer.charge(len as usize);
    }
}

/// Paces uplink `i` and sends its whole transmit batch, again while the device takes every
/// batch in full: the end of a turn, after which the loop may sleep.
fn flush_uplink(u: &mut Uplink, i: usize, ioc: &mut Ioc<(Vec<u8>, Offload)>, now: Instant) {
    loop {
        pace_one(u, i, ioc, now);
        let Some(backend) = u.backend.as_mut() else {
            return;
        };
        let before = backend.tx_pending();
        u.extra.tx_error += backend.flush() as u64;
        if before == 0 || backend.tx_pending() > 0 || !u.pacer.may_send() {
            return;
        }
    }
}

/// Passes one received frame (in a pooled buffer) through the switch, counted at its wire
/// length, and queues it for each place it goes: the buffer itself where it goes one place
/// with its tags as they are (most unicast frames: no copy), else a copy per place, edited,
/// its offload request moved by the tag the switch added or removed (or, into a tunnel, done
/// first). Where an edit cannot be made, the place is added to `refused` (a `bad_offload`).
#[allow(clippy::too_many_arguments)]
fn switch_frame(
    switch: &mut Switch,
    from: Ingress,
    (frame, offload): (Vec<u8>, Offload),
    now: Instant,
    pool: &mut FramePool,
    pending: &mut Vec<Pending>,
    forwards: &mut Vec<Forward>,
    refused: &mut Vec<Egress>,
) {
    let port = match from {
        Ingress::Port(p) => Some(p),
        Ingress::Uplink(_) => None,
    };
    // A VXLAN frame from a sender on this host (a veth's peer) may come with its UDP checksum
    // left to the device: finish it, so that the VTEP can check it like any other.
    let (mut frame, mut offload) = (frame, offload);
    if port.is_none()
        && offload.csum.is_some()
        && offload.gso.is_none()
        && teamster_core::offload::vxlan::is_vxlan(&frame)
    {
        offload.finish_checksum(&mut frame);
    }
    let extra_wire = offload.wire_len(&frame) - frame.len();
    forwards.clear();
    switch.forward(from, &frame, extra_wire, now, forwards);
    // One place with no tag change (most unicast frames): the buffer itself goes, its source
    // MAC replaced in place if the switch says so.
    if let [f] = forwards[..] {
        if f.edit == TagEdit::Keep {
            let mut frame = frame;
            if let (Some(mac), Some(src)) = (f.source, frame.get_mut(6..12)) {
                src.copy_from_slice(&mac.0);
            }
            pending.push(Pending {
                from: port,
                to: f.to,
                frame,
                offload,
            });
            return;
        }
    }
    // Into a tunnel, a frame with an offload request is completed once (cut at the sender's
    // segment size, checksummed: a packet socket's device cannot do that inside VXLAN), and
    // its pieces wrapped for each remote VTEP it goes to; whether they fit the uplink's MTU is
    // the fitting's to say.
    let mut pieces: Option<Option<Vec<Vec<u8>>>> = None;
    for f in forwards.iter() {
        match f.edit {
            TagEdit::Encap(t) if !offload.is_none() => {
                let max_ip = u16::MAX as usize - teamster_core::offload::vxlan::overhead(false);
                let done = pieces
                    .get_or_insert_with(|| teamster_core::offload::vxlan::complete_inner(&frame, offload, max_ip));
                let Some(done) = done else {
                    refused.push(f.to);
                    continue;
                };
                for piece in done {
                    let mut buf = pool.take(piece.len() + teamster_core::offload::vxlan::overhead(false));
                    if t.wrap_into(piece, &mut buf) {
                        pending.push(Pending {
                            from: port,
                            to: f.to,
                            frame: buf,
                            offload: Offload::NONE,
                        });
                    } else {
                        pool.give(buf);
                        refused.push(f.to);
                    }
                }
            }
            // Out of a tunnel: the outer request (the UDP checksum) goes with the outer headers;
            // a super-frame of VXLAN frames cannot be opened as one.
            TagEdit::Strip(_) if offload.gso.is_some() => refused.push(f.to),
            _ => {
                let delta = f.edit.len_delta();
                let mut buf = pool.take((frame.len() as isize + delta) as usize);
                f.apply_into(&frame, &mut buf);
                let offload = match f.edit {
                    TagEdit::Strip(_) => Offload::NONE,
                    _ => offload.shifted(delta),
                };
                pending.push(Pending {
                    from: port,
                    to: f.to,
                    frame: buf,
                    offload,
                });
            }
        }
    }
    pool.give(frame);
}

/// Counts a frame that could not be fitted to its egress interface, on that interface.
fn count_refusal(extra: &mut ExtraDrops, fitted: Result<(), Refused>) {
    match fitted {
        Ok(()) => {}
        Err(Refused::TooBig) => extra.oversize += 1,
        Err(Refused::Offload) => extra.bad_offload += 1,
    }
}

impl Datapath {
    /// Attaches to every interface of `plan`. On error, whatever was opened is closed again.
    pub fn attach(plan: DatapathPlan) -> Result<Datapath, String> {
        Datapath::attach_with(plan, AttachOptions::default())
    }

    /// Attaches to every interface of `plan`: every uplink must be there (an error names the
    /// one that is not, or whose index, MTU or carrier cannot be read); a port whose interface
    /// is missing starts detached, with a warning, and attaches when the interface appears.
    /// On error, whatever was opened is closed again.
    pub fn attach_with(plan: DatapathPlan, options: AttachOptions) -> Result<Datapath, String> {
        let started = std::time::Instant::now();
        let now = Instant::ZERO;
        if !(1..=MAX_RX_QUEUES).contains(&plan.rx.queues) {
            return Err(format!("rx.queues = {}: expected 1 to {MAX_RX_QUEUES}", plan.rx.queues));
        }
        if !(1..=MAX_WORKERS).contains(&plan.workers) {
            return Err(format!(
                "workers = {}: a switch needs 1 to {MAX_WORKERS} data-plane threads",
                plan.workers
            ));
        }
        // Subscribe before reading carriers, so a change in between is not missed.
        let links =
            LinkWatch::open_with_rcvbuf(options.netlink_rcvbuf).map_err(|e| format!("netlink link watch: {e}"))?;
        let mut switch = Switch::with_config(plan.team, plan.switch);
        let mut ports = Vec::new();
        for p in plan.ports {
            crate::iface::check_name(&p.interface).map_err(|e| format!("port {}: {e}", p.name))?;
            switch.set_mac_takeover(p.id, p.mac_takeover, Instant::ZERO);
            ports.push(Port {
                plan: p,
                io: PortIo::Detached,
                mtu: 0,
                extra: ExtraDrops::default(),
                ecn_marked: 0,
                attach_error: None,
                vacant_since: None,
                home: None,
                held: VecDeque::new(),
            });
        }
        if plan.uplinks.len() > MAX_UPLINKS {
            return Err(format!(
                "{} uplinks: a switch has at most {MAX_UPLINKS}",
                plan.uplinks.len()
            ));
        }
        if ports.len() > MAX_PORTS {
            return Err(format!("{} ports: a switch holds at most {MAX_PORTS}", ports.len()));
        }
        let leaves: Vec<NodeId> = ports.iter().map(|p| p.plan.leaf).collect();
        let capacities = plan.uplinks.iter().map(|u| u.capacity).collect();
        let ioc = Ioc::new(
            plan.tree,
            &leaves,
            capacities,
            plan.reservation_cap,
            QueueLimit::DEFAULT,
        );
        let mut uplinks = Vec::new();
        let mut notes = Vec::new();
        for (i, u) in plan.uplinks.into_iter().enumerate() {
            let (opened, mtu, carrier) =
                attach::open_uplink(&u.interface, u.backend).map_err(|e| format!("uplink {}: {e}", u.name))?;
            notes.push(attach::backend_note(
                &format!("uplink {}", u.name),
                &u.interface,
                &opened,
            ));
            let backend = opened.link;
            switch.set_uplink_mac(UplinkId(i), crate::iface::mac(&u.interface).ok());
            if !(carrier && u.admin_up) {
                let _ = switch.team_mut().set_link(UplinkId(i), LinkState::Down, now);
            }
            uplinks.push(Uplink {
                backend: Some(backend),
                mtu,
                pacer: Pacer::new(u.capacity.bps_f64(), now),
                extra: ExtraDrops::default(),
                carrier,
                ecn_marked: 0,
                plan: u,
                attach_error: None,
                rx: rx_queues::UplinkRx::keyed(uplinks.len()),
                fanout: None,
            });
        }
        let index = ports.iter().enumerate().map(|(i, p)| (p.plan.id, i)).collect();
        let bell = Arc::new(Doorbell::new().map_err(|e| format!("eventfd: {e}"))?);
        let spill = Arc::new(Spill::new(pool::KEPT));
        let (gone_tx, gone) = std::sync::mpsc::channel();
        let (returned_tx, returned) = std::sync::mpsc::channel();
        let upstream = Upstream {
            bell: bell.clone(),
            gone: gone_tx,
            returned: returned_tx,
            spill: spill.clone(),
        };
        // Port workers even for a switch that starts without ports: ports come and go.
        let port_workers = plan.workers - 1;
        let workers = (0..port_workers)
            .map(|k| {
                let slots = rx_queues::MAX_SLOTS;
                PortWorker::spawn(k + 1, ports.len(), slots, upstream.clone(), plan.busy_poll)
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("cannot start a port worker thread: {e}"))?;
        let (n_ports, n_uplinks) = (ports.len(), uplinks.len());
        let (closer, closing) = std::sync::mpsc::channel::<Link>();
        std::thread::Builder::new()
            .name("teamster-close".into())
            .spawn(move || closing.into_iter().for_each(drop))
            .map_err(|e| format!("cannot start the socket-closing thread: {e}"))?;
        let mut dp = Datapath {
            pollfds: Vec::new(),
            pollmap: Vec::new(),
            pollfds_stale: true,
            next_resync: now + RESYNC_EVERY,
            switch,
            ioc,
            ports,
            index,
            uplinks,
            links,
            started,
            moves: VecDeque::new(),
            moves_by_reason: Default::default(),
            events: VecDeque::new(),
            next_seq: 0,
            failovers: 0,
            pool: FramePool::sharing(spill),
            busy_poll: plan.busy_poll,
            busy_until: now,
            workers,
            bell,
            gone,
            returned,
            generation: 0,
            ingress: (0..n_ports + n_uplinks).map(|_| ingress::queue()).collect(),
            news: LinkNews::default(),
            closer,
            rx: plan.rx.clone(),
            rx_events: Default::default(),
            rx_moves: Default::default(),
            next_rx_round: now,
            steerer: rx_rounds::Steerer::spawn().map_err(|e| format!("cannot start the steering thread: {e}"))?,
            load: Default::default(),
            meters: Vec::new(),
        };
        dp.meters = vec![Default::default(); dp.workers.len() + 1];
        let summary = format!("switching {} ports on {} uplinks", dp.ports.len(), dp.uplinks.len());
        dp.event(now, "start", summary);
        for note in notes.into_iter().flatten() {
            dp.event(now, "attach", note);
        }
        for i in 0..dp.ports.len() {
            dp.attach_port_at_start(i, now)?;
        }
        for u in 0..dp.uplinks.len() {
            if dp.uplinks[u].backend.is_some() {
                dp.attach_queues(u, now);
            }
        }
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

    /// Bytes (on the wire) waiting in uplink `u`'s scheduler.
    pub fn queued_bytes(&self, u: usize) -> u64 {
        self.ioc.queued_bytes(u)
    }

    /// Uplink `u`'s queue budget in bytes.
    pub fn queue_budget(&self, u: usize) -> u64 {
        self.ioc.budget(u)
    }

    pub fn ports(&self) -> &[Port] {
        &self.ports
    }

    pub fn uplinks(&self) -> &[Uplink] {
        &self.uplinks
    }

    /// The most recent port moves (up to [`MOVES_KEPT`]), oldest first.
    pub fn moves(&self) -> impl DoubleEndedIterator<Item = &Move> + ExactSizeIterator {
        self.moves.iter()
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

    /// Records an event, and logs it on stderr (a line of text, or of JSON: see
    /// [`set_json_log`]).
    pub fn event(&mut self, now: Instant, kind: &'static str, message: String) {
        if JSON_LOG.load(Ordering::Relaxed) {
            let line = serde_json::json!({
                "t_s": now.as_secs_f64(), "seq": self.next_seq, "kind": kind, "message": message,
            });
            eprintln!("{line}");
        } else {
            eprintln!("{:>9.3} s  {kind}: {message}", now.as_secs_f64());
        }
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
        let mut scratch = Scratch::default();
        let mut errored: Vec<Slot> = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            self.wait(&mut errored);
            let woke = std::time::Instant::now();
            let now = self.now();
            for slot in errored.drain(..) {
                self.socket_error(slot, now);
            }
            let drained = self.links.drain();
            for msg in &drained.msgs {
                self.link_msg(msg, now);
            }
            if drained.overrun {
                self.news.lost = true;
                self.event(
                    now,
                    "link",
                    "netlink overrun: link messages were lost; re-reading every interface".to_string(),
                );
                self.resync(now, true);
            } else if now >= self.next_resync {
                self.resync(now, false);
            }
            self.take_gone(now);
            self.take_returned(now);
            let (received, now) = self.receive_and_switch(now, &mut scratch);
            if received > 0 {
                self.busy_until = now + self.busy_poll;
            }
            self.dispatch(&mut scratch.pending, now);
            if now >= self.switch.poll_at() {
                self.switch.handle_timeout(now);
            }
            self.effects(now);
            self.send_now(now);
            self.recycle();
            self.count_devices();
            self.rx_round(now);
            control.turn(self, now);
            self.load.add(woke.elapsed(), received as u64);
        }
    }

    /// Keeps the name a netlink message announces, for [`Datapath::take_link_news`].
    fn note_link(&mut self, msg: &crate::netlink::LinkMsg) {
        let Some(name) = &msg.name else { return };
        if self.news.names.iter().any(|n| n == name) {
            return;
        }
        if self.news.names.len() < NEWS_KEPT {
            self.news.names.push(name.clone());
        } else {
            self.news.lost = true;
        }
    }

    /// Closes `link` off this thread (see `closer`); here if that thread is gone.
    fn close(&self, link: Link) {
        if let Err(back) = self.closer.send(link) {
            drop(back.0);
        }
    }

    /// The interfaces netlink announced since the last call (for port rules), and whether some
    /// announcements were lost.
    pub fn take_link_news(&mut self) -> LinkNews {
        std::mem::take(&mut self.news)
    }

    /// Re-attaches the ports whose socket a port worker closed (its interface went away).
    fn take_gone(&mut self, now: Instant) {
        while let Ok(Gone { port, generation }) = self.gone.try_recv() {
            if rx_queues::of_slot(port).is_some() {
                if let Some((u, _)) = self.queue_of(port, generation) {
                    self.detach_uplink(u, "a receive queue's socket failed", now);
                }
                continue;
            }
            let p = &mut self.ports[port];
            if matches!(p.io, PortIo::Away { generation: g, .. } if g == generation) {
                p.io = PortIo::Detached;
                p.extra.detached += p.held.len() as u64;
                for (frame, _) in p.held.drain(..) {
                    self.pool.give(frame);
                }
                self.pollfds_stale = true;
                let what = format!(
                    "port {}: detached from {} (interface gone)",
                    p.plan.name, p.plan.interface
                );
                self.event(now, "attach", what);
                self.attach_port(port, now);
            }
        }
    }

    /// The port worker whose share port `i` is (None with one data-plane thread).
    fn port_worker_of(&self, i: usize) -> Option<usize> {
        (!self.workers.is_empty()).then(|| i % self.workers.len())
    }

    /// Whether a port worker has handed over frames not yet taken.
    fn handed_waiting(&self) -> bool {
        self.workers.iter().any(|w| !w.lane.from_ports.is_empty())
    }

    /// Takes back into the pool the buffers of frames each device has taken.
    fn recycle(&mut self) {
        let pool = &mut self.pool;
        let backends = self.ports.iter_mut().filter_map(|p| p.here());
        for b in backends {
            b.recycle(&mut |buf| pool.give(buf));
        }
        for b in self.uplinks.iter_mut().filter_map(|u| u.backend.as_mut()) {
            b.recycle(&mut |buf| pool.give(buf));
        }
    }

    /// Tells the switch what each device took since the last turn (its `tx_*` counters), and
    /// takes in the frames each backend dropped on receive.
    fn count_devices(&mut self) {
        for p in &mut self.ports {
            let id = p.plan.id;
            if let Some(b) = p.here() {
                let sent = b.take_sent();
                self.switch.count_sent(Egress::Port(id), sent.packets, sent.bytes);
                let rx = b.take_rx_drops();
                p.extra.truncated += rx.truncated;
                p.extra.bad_offload += rx.bad_offload;
            }
        }
        // A port worker's counts, whether or not the port is still attached (what a closed
        // socket held is counted there too).
        for i in 0..self.ports.len() {
            // A removed port's last counts stay in its slot's tally until the slot is reused.
            if let (Some(w), true) = (self.ports[i].home, self.ports[i].present()) {
                self.take_tally(i, w);
            }
        }
        // The receive queues' counts go to their uplinks (those of a closed queue included):
        // from the port worker reading each, in the slot of the uplink's receive key.
        for up in self.uplinks.iter_mut() {
            for q in 1..self.rx.queues.min(MAX_RX_QUEUES) {
                let Some(w) = rx_queues::queue_thread(&self.rx.steering, self.workers.len(), q).checked_sub(1) else {
                    continue; // the switching worker's own: see collect_ring_drops
                };
                let t = self.workers[w].lane.tallies[rx_queues::slot(up.rx.key, q)].take();
                let x = &mut up.extra;
                x.truncated += t.truncated;
                x.bad_offload += t.bad_offload;
                x.ring_full += t.ring_full;
                x.handoff_full += t.handoff_full;
                up.rx.count_drops(q, t.ring_full);
            }
        }
        for (i, u) in self.uplinks.iter_mut().enumerate() {
            if let Some(b) = u.backend.as_mut() {
                let sent = b.take_sent();
                self.switch
                    .count_sent(Egress::Uplink(UplinkId(i)), sent.packets, sent.bytes);
                let rx = b.take_rx_drops();
                u.extra.truncated += rx.truncated;
                u.extra.bad_offload += rx.bad_offload;
            }
        }
    }

    /// Takes what port worker `w` counted for port `i` into the port's counters.
    fn take_tally(&mut self, i: usize, w: usize) {
        let t = self.workers[w].lane.tallies[i].take();
        let p = &mut self.ports[i];
        self.switch
            .count_sent(Egress::Port(p.plan.id), t.sent_packets, t.sent_bytes);
        let x = &mut p.extra;
        x.truncated += t.truncated;
        x.bad_offload += t.bad_offload;
        x.tx_error += t.tx_error;
        x.ring_full += t.ring_full;
        x.detached += t.detached;
        x.handoff_full += t.handoff_full;
    }

    /// Carries out what the team asked for: frames to send, moves to record; and logs what
    /// happened to ports' claims on their MACs.
    fn effects(&mut self, now: Instant) {
        while let Some(effect) = self.switch.poll_effect() {
            match effect {
                Effect::Transmit { uplink, frame } => match self.uplinks[uplink.0].backend.as_mut() {
                    Some(b) => b.send_owned(frame, Offload::NONE),
                    None => self.uplinks[uplink.0].extra.detached += 1,
                },
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
                    let reason = record.reason.split(':').next().unwrap_or_default().to_string();
                    *self.moves_by_reason.entry(reason).or_default() += 1;
                    if self.moves.len() == MOVES_KEPT {
                        self.moves.pop_front();
                    }
                    self.moves.push_back(record);
                    self.event(now, "move", what);
                }
            }
        }
        while let Some(note) = self.switch.poll_mac_note() {
            let what = self.describe_mac_note(note);
            self.event(now, "port", what);
        }
    }

    /// A `port` event's text for `note`, with the port's and uplinks' names.
    fn describe_mac_note(&self, note: MacNote) -> String {
        let port = self
            .index
            .get(&note.port)
            .map_or(note.port.0.to_string(), |&i| self.ports[i].plan.name.clone());
        let uplink = |u: UplinkId| self.uplinks.get(u.0).map_or(u.0.to_string(), |x| x.plan.name.clone());
        let place = |at: Location| match at {
            Location::Remote(u) => format!("behind uplink {}", uplink(u)),
            Location::Tunnel(ip) => format!("behind remote VTEP {ip}"),
            Location::Port(p) => format!("behind port {}", p.0),
        };
        let mac = note.mac;
        match note.kind {
            MacNoteKind::InUse(at) => format!(
                "port {port}: MAC {mac} is in use by a host outside ({}): the port waits, its frames from it \
                 dropped (mac_conflict), until that host is gone; `mac_takeover` takes it over",
                place(at)
            ),
            MacNoteKind::TakenOver(at) => format!(
                "port {port}: MAC {mac} taken over from a host outside ({}) by mac_takeover",
                place(at)
            ),
            MacNoteKind::Claimed => format!("port {port}: MAC {mac} claimed: no host outside uses it now"),
            MacNoteKind::Refused(u) => format!(
                "port {port}: a host outside on uplink {} also uses MAC {mac}: the port keeps it, that host's \
                 frames are dropped (mac_conflict)",
                uplink(u)
            ),
            MacNoteKind::Yielded(u) => format!(
                "port {port}: a host outside on uplink {} uses MAC {mac}: the port gave it up and waits \
                 until that host's entry ages out (its frames from it dropped as mac_conflict)",
                uplink(u)
            ),
        }
    }

    /// Reads the kernel's receive-ring drop counters into the per-interface drops.
    pub fn collect_ring_drops(&mut self) {
        // Port workers read their own ports' counters (into their tallies).
        for p in &mut self.ports {
            if let Some(b) = p.here() {
                p.extra.ring_full += b.ring_drops();
            }
        }
        for u in &mut self.uplinks {
            if let Some(b) = u.backend.as_mut() {
                let n = b.ring_drops();
                u.extra.ring_full += n;
                u.rx.count_drops(0, n);
            }
            u.extra.ring_full += u.rx.local_ring_drops();
        }
    }

    /// Switches to a new configuration between packets: the ports of `ports` (added, removed or
    /// kept, see the `ports` submodule) with NetIOC tree `tree`, port groups' teaming from
    /// `groups`, and the uplinks of `uplinks` (added, removed or kept, with their administrative
    /// states: see the `uplinks` submodule), which the groups' failover orders index. The
    /// caller has checked it (admission control included).
    pub fn reconfigure(
        &mut self,
        tree: Tree,
        ports: &[PortPlan],
        groups: &[(PortGroupSpec, SecurityPolicy)],
        uplinks: &[UplinkPlan],
        now: Instant,
    ) {
        // How long the data plane stops for the change (it runs between two turns).
        let took = std::time::Instant::now();
        // New uplinks come first (unused), ports leave (a group going has none left), groups
        // go, come and take their orders (the survivors keep their order, so IDs line up with
        // `groups`), uplinks no order lists go, then ports come.
        let added = self.add_uplinks(uplinks, now);
        let names: Vec<&str> = groups.iter().map(|(g, _)| g.name.as_str()).collect();
        let retired = self.retire_ports(ports, &names, now);
        let groups = self.orders_as_running(groups, uplinks, now);
        if groups.is_some_and(|g| self.regroup(&g, now)) {
            // The moves regrouping made name the uplinks by the indices of now.
            self.effects(now);
            if self.remove_uplinks(uplinks, now) {
                self.admit_ports(tree, ports, retired, now);
            }
        }
        self.attach_added(&added, now);
        self.set_admin(uplinks, now);
        let took = took.elapsed().as_micros();
        self.event(now, "config", format!("configuration changed (applied in {took} us)"));
    }

    /// Sends frames to ports at once and queues frames for uplinks in their schedulers, each
    /// fitted to its egress interface first (MTU, offloads, pacing).
    fn dispatch(&mut self, pending: &mut Vec<Pending>, now: Instant) {
        for Pending {
            from,
            to,
            frame,
            offload,
        } in pending.drain(..)
        {
            match to {
                Egress::Port(q) => {
                    let Some(&i) = self.index.get(&q) else { continue };
                    let port = &mut self.ports[i];
                    match &mut port.io {
                        PortIo::Detached => {
                            port.extra.detached += 1;
                            self.pool.give(frame);
                        }
                        PortIo::Here(backend) => {
                            let to = fit::Egress {
                                mtu: port.mtu,
                                takes_offloads: backend.takes_offloads(),
                                max_wire: None,
                            };
                            let fitted = fit(frame, offload, to, &mut |f, o| backend.send_owned(f, o));
                            count_refusal(&mut port.extra, fitted);
                        }
                        PortIo::Away {
                            moving_to: Some(_),
                            takes_offloads,
                            ..
                        } => {
                            let to = fit::Egress {
                                mtu: port.mtu,
                                takes_offloads: *takes_offloads,
                                max_wire: None,
                            };
                            let held = &mut port.held;
                            let mut full = 0;
                            let fitted = fit(frame, offload, to, &mut |frame, offload| {
                                if held.len() < port_moves::HELD_MAX {
                                    held.push_back((frame, offload));
                                } else {
                                    full += 1;
                                    self.pool.give(frame);
                                }
                            });
                            count_refusal(&mut port.extra, fitted);
                            port.extra.handoff_full += full;
                        }
                        PortIo::Away {
                            worker, takes_offloads, ..
                        } => {
                            let to = fit::Egress {
                                mtu: port.mtu,
                                takes_offloads: *takes_offloads,
                                max_wire: None,
                            };
                            let lane = &self.workers[*worker].lane;
                            let mut full = 0;
                            let fitted = fit(frame, offload, to, &mut |frame, offload| {
                                if let Err(frame) = lane.hand(i, frame, offload) {
                                    full += 1;
                                    self.pool.give(frame);
                                }
                            });
                            count_refusal(&mut port.extra, fitted);
                            port.extra.handoff_full += full;
                        }
                    }
                }
                Egress::Uplink(u) => {
                    let from = from.and_then(|p| self.index.get(&p).copied());
                    let leaf = from.map(|i| self.ports[i].plan.leaf);
                    let up = &mut self.uplinks[u.0];
                    let ioc = &mut self.ioc;
                    let to = fit::Egress {
                        mtu: up.mtu,
                        takes_offloads: up.backend.as_ref().is_some_and(|b| b.takes_offloads()),
                        max_wire: Some(up.pacer.burst() as usize),
                    };
                    let mut full = 0;
                    let fitted = fit(frame, offload, to, &mut |piece, o| match leaf {
                        Some(leaf) => {
                            let wire = o.wire_len(&piece) as u32;
                            let mark = |(f, _): &mut (Vec<u8>, Offload)| mark_congestion(f);
                            match ioc.enqueue_marking(u.0, leaf, wire, (piece, o), now, mark) {
                                Ok(Enqueued::Plain) => {}
                                Ok(Enqueued::Marked) => up.ecn_marked += 1,
                                Err(_) => full += 1,
                            }
                            // Move what the pacer allows to the device's batch at once, so the
                            // queue fills only when the uplink itself is the bottleneck.
                            pace_one(up, u.0, ioc, now);
                        }
                        None => match up.backend.as_mut() {
                            Some(b) => b.send_owned(piece, o),
                            None => up.extra.detached += 1,
                        },
                    });
                    // Too big for the uplink: the uplink's drop. A full NetIOC queue: the
                    // sending port's (the queue is its own).
                    count_refusal(&mut up.extra, fitted);
                    if let Some(i) = from {
                        self.ports[i].extra.queue_full += full;
                    }
                }
            }
        }
    }

    /// Sends what is ready: each uplink's scheduler what its pacer allows, each port's batch,
    /// and wakes the port workers for what was handed to them.
    fn send_now(&mut self, now: Instant) {
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
    fn pace(&mut self, now: Instant) {
        for (i, u) in self.uplinks.iter_mut().enumerate() {
            flush_uplink(u, i, &mut self.ioc, now);
        }
    }
}
