//! The live switch's poll loop: one [`Device`] per VM port and uplink, the `teamster-core`
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
mod egress;
mod fit;
mod handoff;
mod history;
mod ingress;
mod poll;
mod port_moves;
mod port_worker;
mod ports;
mod publish;
mod rx_queues;
mod rx_rounds;
mod switching;
mod thread_load;
mod uplinks;

pub use history::{Event, EventSink, Move, MOVES_KEPT};
pub use publish::{PortState, Published, UplinkState};
pub use rx_queues::{FilterState, QueueState, RxEvent, RxPlan, RxState, Steering, MAX_RX_QUEUES};

use crate::pool::{self, FramePool, Spill};
use handoff::Doorbell;
use port_worker::{Gone, PortWorker, Returned, Upstream};

use crate::backend::{BackendChoice, Link};
use crate::pacer::Pacer;
use crate::platform::{Kernel, LinkSource, Platform};
use crate::{Device, Frame};
use history::History;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use switching::Scratch;
use teamster_core::ioc::{Ioc, NodeId, QueueLimit, ReservationCap, Tree};
use teamster_core::switch::{Counters, Egress, Location, MacNote, MacNoteKind, SecurityPolicy, Switch, SwitchConfig};
use teamster_core::teaming::{Effect, GroupId, LinkState, PortGroupSpec, PortId, Team, UplinkId};
use teamster_core::units::Bandwidth;
use teamster_core::wire::MacAddr;
use teamster_core::Instant;

/// The longest the loop sleeps, so timers, signals and control-plane changes are seen promptly.
const MAX_WAIT_MS: i32 = 10;
/// How long the loop polls without sleeping after a turn that received frames, by default (see
/// the `poll` submodule).
pub const DEFAULT_BUSY_POLL: core::time::Duration = core::time::Duration::from_micros(50);
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

pub use crate::extra_drops::ExtraDrops;

/// Where a port's socket is.
// One per port: the bytes a detached or away port wastes are nothing beside a pointer chase per
// batch for the ports this thread serves.
#[allow(clippy::large_enum_variant)]
enum PortIo<D> {
    /// Its interface is missing.
    Detached,
    /// The switching worker does its I/O.
    Here(D),
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

/// What a port's NetIOC queues did with its frames: how many they took, how long they held
/// its frames (backlogged), how many they marked Congestion Experienced, how many it offered
/// carried TCP, and the wire bytes they turned away. A what-if tells from these whether the port wanted
/// more than it got (see `teamster_sim::whatif::demand`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueTally {
    pub taken: u64,
    /// Nanoseconds its queue held its frames: between two of its frames, when the later one
    /// finds one of the earlier still queued (FIFO: the queue never emptied in between).
    pub backlog_ns: u64,
    /// When its last frame came, ns on the data plane's clock.
    pub last_ns: u64,
    pub marked: u64,
    /// Frames offered to its queues (taken or not) that carried TCP.
    pub tcp: u64,
    /// Wire bytes its queues turned away (its `queue_full` drops).
    pub dropped_bytes: u64,
}

/// A VM port: attached while its interface exists.
pub struct Port<D: Device = Link> {
    pub plan: PortPlan,
    io: PortIo<D>,
    mtu: usize,
    pub extra: ExtraDrops,
    /// Frames from this port marked ECN Congestion Experienced in the switch's receive queue
    /// (CoDel, instead of a drop), since start.
    pub ecn_marked: u64,
    /// What its NetIOC queues (one per uplink) did with its frames, since it was added.
    pub queue: QueueTally,
    /// The last attach failure reported, so a retry failing the same way is not logged again.
    attach_error: Option<String>,
    /// Set when the port was removed: the slot is empty, and taken again by a port added once
    /// frames the old one handed between threads have drained (see the `ports` submodule).
    vacant_since: Option<Instant>,
    /// The port worker its socket is given to (whose tally holds its counts).
    home: Option<usize>,
    /// Frames for it held while its socket moves between workers.
    held: VecDeque<Frame>,
}

impl<D: Device> Port<D> {
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
    fn here(&mut self) -> Option<&mut D> {
        match &mut self.io {
            PortIo::Here(link) => Some(link),
            _ => None,
        }
    }
}

/// An uplink: attached while its interface exists.
pub struct Uplink<D: Device = Link> {
    pub plan: UplinkPlan,
    /// None while detached (its interface went away after start).
    backend: Option<D>,
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
    rx: rx_queues::UplinkRx<D>,
    /// The fanout group its own socket leads, once it has receive queues.
    fanout: Option<u32>,
}

impl<D: Device> Uplink<D> {
    /// Whether the uplink's interface is attached.
    pub fn attached(&self) -> bool {
        self.backend.is_some()
    }

    /// The backend in use while attached (`af_packet`, or AF_XDP with its modes).
    pub fn backend(&self) -> Option<String> {
        self.backend.as_ref().map(D::describe)
    }
}

/// How to attach, beyond the plan.
#[derive(Clone, Default)]
pub struct AttachOptions {
    /// The netlink socket's receive buffer, in bytes (None: the system's default). Tests make
    /// it tiny to force an overrun.
    pub netlink_rcvbuf: Option<usize>,
    /// Told of each event as it happens (the daemon logs them); the data plane itself prints
    /// nothing.
    pub events: Option<EventSink>,
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

/// The control plane's part of each turn of the loop.
pub trait Control<P: Platform = Kernel> {
    /// Called once per turn, between packets: may [`Datapath::reconfigure`] or read state.
    fn turn(&mut self, dp: &mut Datapath<P>, now: Instant);
}

/// No control plane.
impl<P: Platform> Control<P> for () {
    fn turn(&mut self, _: &mut Datapath<P>, _: Instant) {}
}

/// The running data plane, on platform `P` (Linux unless a test says otherwise).
pub struct Datapath<P: Platform = Kernel> {
    /// What opens interfaces, reads their state and keeps the time.
    platform: P,
    switch: Switch,
    /// NetIOC: the tree, each uplink's scheduler, each port's shared limit bucket; frames wait
    /// there with their offload requests.
    ioc: Ioc<Frame>,
    ports: Vec<Port<P::Device>>,
    index: HashMap<PortId, usize>,
    uplinks: Vec<Uplink<P::Device>>,
    links: P::Links,
    /// The most recent events and port moves.
    history: History,
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
    workers: Vec<PortWorker<P>>,
    /// Rung by port workers when they hand this thread frames while it sleeps.
    bell: Arc<Doorbell>,
    /// Ports whose socket a port worker closed.
    gone: Receiver<Gone>,
    /// Sockets port workers handed back (ports moving between workers).
    returned: Receiver<Returned<P::Device>>,
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
    closer: std::sync::mpsc::Sender<P::Device>,
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
    /// What a turn reuses: frames in flight between its steps, sockets that polled in error.
    scratch: Scratch,
    errored: Vec<Slot>,
    /// The kernel fast path's last failure to sync, reported once until it changes.
    fast_path_error: Option<String>,
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

/// Interface names kept between two looks of the control plane; past it, news is lost (and
/// says so) rather than growing without bound when a local user creates interfaces in a loop.
pub const NEWS_KEPT: usize = 1024;

/// Runs a Linux data plane until `stop` is set (see [`Datapath::run`]). Not generic, so the
/// whole loop is compiled, and optimised, with this crate, whatever the caller's profile: a
/// generic call from the `teamster` crate would compile the loop there, unoptimised in a
/// debug build, where the live tests run it.
pub fn run_kernel(dp: &mut Datapath, stop: &AtomicBool, control: &mut dyn Control) {
    dp.run(stop, control);
}

impl Datapath {
    /// Attaches to every interface of `plan` on this host. On error, whatever was opened is
    /// closed again.
    pub fn attach(plan: DatapathPlan) -> Result<Datapath, String> {
        Datapath::attach_with(plan, AttachOptions::default())
    }

    /// [`Datapath::attach`], with `options`.
    pub fn attach_with(plan: DatapathPlan, options: AttachOptions) -> Result<Datapath, String> {
        Datapath::attach_on(Kernel::new(), plan, options)
    }
}

impl<P: Platform> Datapath<P> {
    /// Attaches to every interface of `plan`: every uplink must be there (an error names the
    /// one that is not, or whose index, MTU or carrier cannot be read); a port whose interface
    /// is missing starts detached, with a warning, and attaches when the interface appears.
    /// On error, whatever was opened is closed again.
    pub fn attach_on(platform: P, plan: DatapathPlan, options: AttachOptions) -> Result<Datapath<P>, String> {
        let now = platform.now();
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
        let links = platform
            .watch(options.netlink_rcvbuf)
            .map_err(|e| format!("netlink link watch: {e}"))?;
        let mut switch = Switch::with_config(plan.team, plan.switch);
        let mut ports = Vec::new();
        for p in plan.ports {
            crate::iface::check_name(&p.interface).map_err(|e| format!("port {}: {e}", p.name))?;
            switch.set_mac_takeover(p.id, p.mac_takeover, now);
            ports.push(Port {
                plan: p,
                io: PortIo::Detached,
                mtu: 0,
                extra: ExtraDrops::default(),
                ecn_marked: 0,
                queue: QueueTally::default(),
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
            let (opened, mtu, carrier) = attach::open_uplink(&platform, &u.interface, u.backend)
                .map_err(|e| format!("uplink {}: {e}", u.name))?;
            notes.push(attach::backend_note(
                &format!("uplink {}", u.name),
                &u.interface,
                &opened,
            ));
            let backend = opened.link;
            switch.set_uplink_mac(UplinkId(i), platform.mac(&u.interface).ok());
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
            platform: platform.clone(),
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
        let (closer, closing) = std::sync::mpsc::channel::<P::Device>();
        std::thread::Builder::new()
            .name("teamster-close".into())
            .spawn(move || closing.into_iter().for_each(drop))
            .map_err(|e| format!("cannot start the socket-closing thread: {e}"))?;
        let mut dp = Datapath {
            platform,
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
            history: History::new(options.events.clone()),
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
            scratch: Scratch::default(),
            errored: Vec::new(),
            fast_path_error: None,
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

    /// Time since the platform started, on the engine's clock.
    pub fn now(&self) -> Instant {
        self.platform.now()
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

    pub fn ports(&self) -> &[Port<P::Device>] {
        &self.ports
    }

    pub fn uplinks(&self) -> &[Uplink<P::Device>] {
        &self.uplinks
    }

    /// The most recent port moves (up to [`MOVES_KEPT`]), oldest first.
    pub fn moves(&self) -> impl DoubleEndedIterator<Item = &Move> + ExactSizeIterator {
        self.history.moves()
    }

    /// The most recent events (up to 1,000), oldest first.
    pub fn events(&self) -> impl DoubleEndedIterator<Item = &Event> + ExactSizeIterator {
        self.history.events()
    }

    /// Times an uplink in use went out of use (carrier lost or set administratively down).
    pub fn failovers(&self) -> u64 {
        self.failovers
    }

    /// The switch's counters for port `p`, if it has seen traffic.
    pub fn port_counters(&self, p: PortId) -> Option<&Counters> {
        self.switch.port_counters(p)
    }

    /// Records an event in the ring of recent ones, and tells the sink (see
    /// [`AttachOptions::events`]).
    pub fn event(&mut self, now: Instant, kind: &'static str, message: String) {
        self.history.record(now, kind, message);
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
    pub fn run(&mut self, stop: &AtomicBool, control: &mut dyn Control<P>) {
        while !stop.load(Ordering::Relaxed) {
            self.turn(control);
        }
    }

    /// One turn of the loop (see the module documentation): waits for work or the next timer
    /// (at most 10 ms), then receives, switches, sends, runs the timers, counts, and gives
    /// `control` its turn.
    pub fn turn(&mut self, control: &mut dyn Control<P>) {
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut errored = std::mem::take(&mut self.errored);
        self.wait(&mut errored);
        let woke = std::time::Instant::now();
        let now = self.now();
        for slot in errored.drain(..) {
            self.socket_error(slot, now);
        }
        self.errored = errored;
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
        self.scratch = scratch;
        control.turn(self, now);
        self.sync_fast_path(now);
        self.load.add(woke.elapsed(), received as u64);
    }

    /// With a kernel fast path, brings its tables to the switch's state (what this turn
    /// changed: a failover, a port moved, a port added) and takes its counts.
    fn sync_fast_path(&mut self, now: Instant) {
        let Some(fast) = self.platform.fast_path() else { return };
        let bound = crate::fast_path::Bound {
            ports: self
                .ports
                .iter()
                .filter(|p| p.present() && p.attached())
                .map(|p| (p.plan.id, p.plan.interface.as_str()))
                .collect(),
            uplinks: self
                .uplinks
                .iter()
                .enumerate()
                .filter(|(_, u)| u.attached())
                .map(|(i, u)| (UplinkId(i), u.plan.interface.as_str()))
                .collect(),
            ioc: Some(crate::fast_path::IocView {
                tree: self.ioc.tree(),
                leaves: self
                    .ports
                    .iter()
                    .filter(|p| p.present() && p.attached())
                    .map(|p| (p.plan.id, p.plan.leaf))
                    .collect(),
                capacities: (0..self.uplinks.len())
                    .map(|i| (UplinkId(i), self.ioc.capacity(i)))
                    .collect(),
            }),
        };
        let synced = fast.sync(&mut self.switch, &bound, now);
        for e in &synced.events {
            self.history.record(now, "fast_path", e.clone());
        }
        match synced.error {
            Some(e) => {
                if self.fast_path_error.as_deref() != Some(e.as_str()) {
                    self.history.record(now, "fast_path", e.clone());
                    self.fast_path_error = Some(e);
                }
            }
            None => self.fast_path_error = None,
        }
        for (at, d) in synced.extra {
            let to = match at {
                teamster_core::switch::Ingress::Port(p) => self
                    .index
                    .get(&p)
                    .and_then(|i| self.ports.get_mut(*i))
                    .map(|p| &mut p.extra),
                teamster_core::switch::Ingress::Uplink(u) => self.uplinks.get_mut(u.0).map(|u| &mut u.extra),
            };
            if let Some(to) = to {
                to.oversize += d.oversize;
                to.tx_error += d.tx_error;
                to.queue_full += d.queue_full;
                to.ring_full += d.ring_full;
            }
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
    fn close(&self, link: P::Device) {
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
                for frame in p.held.drain(..) {
                    self.pool.give(frame.into_bytes());
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
                    Some(b) => b.send_owned(Frame::complete(frame)),
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
                    self.history.record_move(record);
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
}

#[cfg(test)]
mod tests;
