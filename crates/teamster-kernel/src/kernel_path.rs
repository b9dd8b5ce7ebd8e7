//! The kernel path as the data plane sees it ([`teamster_dp::fast_path::FastPath`]): the
//! program attached to each interface the switch opens, its tables synced from the switch after
//! every turn, its counters folded into the switch's and the team's every
//! [`KernelPath::COUNT_EVERY`], and a thread that reads what the program punts and queues each
//! frame for the interface it came from.

use crate::abi::{PuntMeta, Stats};
use crate::flowlet_sync::FlowletSync;
use crate::mac_sync::{pull_learned, push_changes, Places};
use crate::pins::Pins;
use crate::program::SwitchProgram;
use crate::shaping::{self, ShapedUplink, Shaping};
use crate::tables::{Binding, Interfaces, Slots, Tables};
use aya::maps::perf::{PerfEvent, PerfEventArray, PerfEventArrayBuffer};
use aya::maps::MapData;
use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::tc::SchedClassifierLink;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use teamster_core::switch::{Counters, DropReason, Ingress, Switch};
use teamster_core::teaming::{Direction, PortId};
use teamster_core::Instant;
use teamster_dp::datapath::ExtraDrops;
use teamster_dp::fast_path::{Bound, PuntQueue, Synced};

/// Pages of each CPU's punt ring (4 KiB each): room for a burst of full-size frames.
const PUNT_PAGES: usize = 64;

type Queues = Arc<RwLock<HashMap<u32, Arc<PuntQueue>>>>;

/// ARP frames from the uplinks whose sender gave a new address, for the engine's claims.
type Notes = Arc<Mutex<std::collections::VecDeque<Vec<u8>>>>;
/// Notes kept at most between two turns.
const NOTES_KEPT: usize = 1024;
/// The program's reason for a note (switch.h NOTE_ARP).
const NOTE_ARP: u16 = 9;

/// The loaded program and what the data plane needs of it; see the module documentation.
pub struct KernelPath {
    state: Mutex<State>,
    queues: Queues,
    notes: Notes,
    stop: Arc<AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
    /// Punted frames the rings had no room for (the kernel's count).
    lost: Arc<AtomicU64>,
}

struct State {
    fast: SwitchProgram,
    slots: Slots,
    /// By interface name: its index and tcx link.
    attached: BTreeMap<String, Attached>,
    /// Each slot's counters when last folded into the switch's.
    counted: HashMap<u32, Stats>,
    next_count: Option<Instant>,
    /// When the kernel's learned MAC entries are next copied into the engine's table.
    next_mirror: Option<Instant>,
    /// Slots freed by builds whose write has not succeeded yet (their entries still to flush).
    freed: Vec<u32>,
    /// NetIOC's HTB qdiscs on the uplinks.
    shaping: Shaping,
    /// Where this run pins its attachments (None: it does not).
    pins: Option<Pins>,
    /// The earlier run's attachments, by interface index, until this run takes over.
    earlier: BTreeMap<u32, Vec<Earlier>>,
    /// When the NetIOC queues' drops are next read.
    next_queue_stats: Option<Instant>,
    /// The flowlet groups' bucket targets as written.
    flowlets: FlowletSync,
    /// When what the program sent in the flowlet buckets is next read.
    next_flowlet_pull: Option<Instant>,
}

struct Attached {
    ifindex: u32,
    peer: bool,
    link: Held,
    /// What the attachment delivers to (and who may detach it).
    queue: Arc<PuntQueue>,
}

/// A tcx attachment of this run: pinned (it outlives the process, [`crate::pins`]) or not.
enum Held {
    /// Held, never read: dropping it takes the program off.
    Plain(#[allow(dead_code)] FdLink),
    Pinned(PinnedLink),
}

impl Held {
    /// Takes the program off the interface: the pin removed, the link closed.
    fn release(self) {
        if let Held::Pinned(p) = self {
            let _ = p.unpin();
        }
    }
}

/// An earlier run's pinned attachment, still deciding its interface's frames until this run's
/// tables are written ([`crate::pins`]).
struct Earlier {
    path: std::path::PathBuf,
    link: SchedClassifierLink,
}

impl KernelPath {
    /// How often the kernel's counters are folded into the switch's (and LBT's meters).
    pub const COUNT_EVERY: Duration = Duration::from_millis(100);
    /// How often NetIOC's queues on the uplinks are read for their drops.
    pub const QUEUE_STATS_EVERY: Duration = Duration::from_secs(1);

    /// How long until the kernel's learned MAC entries are next copied into the engine's, after
    /// a copy of `n`: 100 ms for a table of up to a hundred, longer for a larger one (each entry
    /// costs two system calls to read; a table of thousands, which any host outside can fill,
    /// must not cost the daemon a CPU), at most 10 s.
    fn mirror_every(n: usize) -> Duration {
        Duration::from_millis((100 * (1 + n / 100) as u64).min(10_000))
    }

    /// Loads the program with room for `total_macs` learned addresses and starts the punt
    /// reader; with `pins`, its attachments are pinned there and an earlier run's found there
    /// are taken over ([`crate::pins`]). An error says what the kernel refused.
    pub fn load(total_macs: usize, pins: Option<Pins>) -> Result<KernelPath, String> {
        let mut fast = SwitchProgram::load(total_macs).map_err(|e| e.to_string())?;
        let earlier = pins.as_ref().map(open_earlier).unwrap_or_default();
        let perf = fast.take_punts().map_err(|e| e.to_string())?;
        let queues: Queues = Arc::default();
        let notes: Notes = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let lost = Arc::new(AtomicU64::new(0));
        let buffers = open_rings(perf)?;
        let reader = {
            let (queues, notes, stop, lost) = (queues.clone(), notes.clone(), stop.clone(), lost.clone());
            std::thread::Builder::new()
                .name("teamster-punts".into())
                .spawn(move || read_punts(buffers, &queues, &notes, &stop, &lost))
                .map_err(|e| format!("cannot start the punt reader: {e}"))?
        };
        Ok(KernelPath {
            state: Mutex::new(State {
                fast,
                slots: Slots::default(),
                attached: BTreeMap::new(),
                counted: HashMap::new(),
                next_count: None,
                next_mirror: None,
                freed: Vec::new(),
                shaping: Shaping::default(),
                next_queue_stats: None,
                flowlets: FlowletSync::default(),
                next_flowlet_pull: None,
                pins,
                earlier,
            }),
            queues,
            notes,
            stop,
            reader: Some(reader),
            lost,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for KernelPath {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        // This run's attachments were released as its devices closed; an earlier run's that
        // were never taken over (the start failed) stay, still forwarding.
        let st = self.state();
        if let Some(p) = &st.pins {
            p.remove_if_empty();
        }
    }
}

/// The earlier runs' attachments pinned in `pins`, by interface index; a pin that is not a tcx
/// link is removed (it is stale, and nothing of it is used).
fn open_earlier(pins: &Pins) -> BTreeMap<u32, Vec<Earlier>> {
    let mut out: BTreeMap<u32, Vec<Earlier>> = BTreeMap::new();
    for (ifindex, paths) in pins.earlier() {
        for path in paths {
            let link = PinnedLink::from_pin(&path)
                .ok()
                .and_then(|p| SchedClassifierLink::try_from(FdLink::from(p)).ok());
            match link {
                Some(link) => out.entry(ifindex).or_default().push(Earlier { path, link }),
                None => {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
    }
    out
}

/// Opens each online CPU's punt ring.
fn open_rings(mut perf: PerfEventArray<MapData>) -> Result<Vec<PerfEventArrayBuffer<MapData>>, String> {
    let cpus = aya::util::online_cpus().map_err(|(what, e)| format!("{what}: {e}"))?;
    cpus.into_iter()
        .map(|cpu| {
            perf.open(cpu, Some(PUNT_PAGES))
                .map_err(|e| format!("cannot open the punt ring of CPU {cpu}: {e}"))
        })
        .collect()
}

/// The punt reader: waits on every CPU's ring, and queues each frame, its VLAN tag put back
/// where the kernel had taken it off, for the interface it came from.
fn read_punts(
    mut rings: Vec<PerfEventArrayBuffer<MapData>>,
    queues: &Queues,
    notes: &Notes,
    stop: &AtomicBool,
    lost: &AtomicU64,
) {
    let mut fds: Vec<libc::pollfd> = rings
        .iter()
        .map(|r| libc::pollfd {
            fd: r.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let mut frame = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: `fds` is a valid array of pollfd of the length passed.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 100) };
        if n <= 0 {
            continue;
        }
        for ring in rings.iter_mut() {
            ring.for_each(|e| match e {
                PerfEvent::Lost { count } => {
                    lost.fetch_add(count, Ordering::Relaxed);
                }
                PerfEvent::Sample { head, tail } => {
                    frame.clear();
                    frame.extend_from_slice(head);
                    frame.extend_from_slice(tail);
                    match unpack(&frame) {
                        Some((_, NOTE_ARP, bytes)) => {
                            let mut n = notes.lock().unwrap_or_else(|e| e.into_inner());
                            if n.len() < NOTES_KEPT {
                                n.push_back(bytes);
                            }
                        }
                        Some((ifindex, _, mut bytes)) => {
                            // A sender's checksum offload left to the wire: completed here, as
                            // the engine sends the bytes as they are.
                            crate::checksum::complete_partial(&mut bytes);
                            let q = queues.read().unwrap_or_else(|e| e.into_inner()).get(&ifindex).cloned();
                            if let Some(q) = q {
                                q.push(bytes);
                            }
                        }
                        None => {}
                    }
                }
            });
        }
    }
}

/// The interface and frame (as on the wire) of one punt sample: a [`PuntMeta`], then the frame
/// as the kernel held it, then padding.
fn unpack(sample: &[u8]) -> Option<(u32, u16, Vec<u8>)> {
    const META: usize = core::mem::size_of::<PuntMeta>();
    let u16_at = |i: usize| u16::from_ne_bytes([sample[i], sample[i + 1]]);
    let u32_at = |i: usize| u32::from_ne_bytes(sample[i..i + 4].try_into().expect("4 bytes"));
    if sample.len() < META {
        return None;
    }
    let (ifindex, len) = (u32_at(0), u32_at(4) as usize);
    let (reason, tci, proto, present) = (u16_at(8), u16_at(10), u16_at(12), u16_at(14));
    let data = sample.get(META..META + len)?;
    let mut frame = Vec::with_capacity(len + 4);
    if present != 0 && data.len() >= 12 {
        frame.extend_from_slice(&data[..12]);
        frame.extend_from_slice(&proto.to_be_bytes());
        frame.extend_from_slice(&tci.to_be_bytes());
        frame.extend_from_slice(&data[12..]);
    } else {
        frame.extend_from_slice(data);
    }
    Some((ifindex, reason, frame))
}

/// True if `name` is a veth whose peer is in another network namespace: frames for it can be
/// moved there directly (bpf_redirect_peer), skipping its host side. (A peer index that names no
/// interface here is the peer's in its own namespace; one that happens to name another
/// interface here only costs the shortcut.)
fn peer_elsewhere(name: &str) -> bool {
    use teamster_dp::iface;
    if iface::driver(name).ok().as_deref() != Some("veth") {
        return false;
    }
    let Ok(peer) = iface::iflink(name) else { return false };
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: if_indextoname writes at most IF_NAMESIZE bytes into `buf`.
    unsafe { libc::if_indextoname(peer, buf.as_mut_ptr()).is_null() }
}

impl teamster_dp::fast_path::FastPath for KernelPath {
    fn attach(&self, interface: &str) -> io::Result<Arc<PuntQueue>> {
        let index = teamster_dp::iface::index(interface)? as u32;
        let queue = Arc::new(PuntQueue::new()?);
        let mut st = self.state();
        let st = &mut *st;
        if let Some(old) = st.attached.remove(interface) {
            old.link.release();
            self.queues
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&old.ifindex);
        }
        // The queue first: the program hands up what comes before the tables name the interface.
        self.queues
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(index, queue.clone());
        // Behind an earlier run's program if one is there: it decides until this run's tables
        // are written.
        let after = st.earlier.get(&index).and_then(|v| v.last()).map(|e| &e.link);
        let pinned = st
            .fast
            .attach(interface, after)
            .map_err(|e| e.to_string())
            .and_then(|fd| {
                Ok(match &st.pins {
                    Some(p) => Held::Pinned(fd.pin(p.link_path(index)).map_err(|e| {
                        let why = std::error::Error::source(&e).map_or(String::new(), |s| format!(": {s}"));
                        format!("cannot pin its attachment in {}: {e}{why}", p.dir().display())
                    })?),
                    None => Held::Plain(fd),
                })
            });
        let link = pinned.map_err(|e| {
            self.queues.write().unwrap_or_else(|e| e.into_inner()).remove(&index);
            io::Error::other(format!("{interface}: {e}"))
        })?;
        st.attached.insert(
            interface.to_string(),
            Attached {
                ifindex: index,
                peer: peer_elsewhere(interface),
                link,
                queue: queue.clone(),
            },
        );
        Ok(queue)
    }

    fn detach(&self, interface: &str, queue: &Arc<PuntQueue>) {
        let mut st = self.state();
        // Only the attachment the closing device made: the interface may have been attached
        // again since (a tap deleted and re-created, a socket reopened), and that one stays.
        if st.attached.get(interface).is_some_and(|a| Arc::ptr_eq(&a.queue, queue)) {
            let a = st.attached.remove(interface).expect("looked up");
            a.link.release();
            st.shaping.release(a.ifindex);
            self.queues
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&a.ifindex);
        }
    }

    fn sync(&self, switch: &mut Switch, bound: &Bound<'_>, now: Instant) -> Synced {
        let mut st = self.state();
        let mut synced = Synced::default();
        // NetIOC first: the tables carry each port's class.
        if let Err(e) = shape(&mut st, switch, bound, now) {
            synced.error = Some(e);
        }
        match sync_tables(&mut st, &self.notes, switch, bound, now) {
            Ok(extra) => {
                synced.extra = extra;
                if st.next_queue_stats.is_none_or(|t| now >= t) {
                    st.next_queue_stats = Some(now + Self::QUEUE_STATS_EVERY);
                    let checked = st.shaping.check();
                    synced.events.extend(checked.lost);
                    for (p, n) in checked.drops {
                        let drops = ExtraDrops {
                            queue_full: n,
                            ..ExtraDrops::default()
                        };
                        synced.extra.push((Ingress::Port(p), drops));
                    }
                }
                // This run's tables are in: the earlier run's programs step aside.
                if !st.earlier.is_empty() {
                    let earlier = std::mem::take(&mut st.earlier);
                    let n = earlier.len();
                    for e in earlier.into_values().flatten() {
                        let _ = std::fs::remove_file(&e.path);
                    }
                    synced.events.push(format!(
                        "took over forwarding from the previous run's pinned programs on {n} interfaces"
                    ));
                }
            }
            Err(e) => synced.error = Some(e),
        }
        synced
    }

    /// HTB's direct queue on the uplinks' qdiscs (a priority equal to the qdisc's handle): the
    /// team's RARPs after a failover and its LACPDUs leave at once, never behind the ports'
    /// classes; what the engine switches for a port goes there too, bounded by what the port
    /// may hand up ([`crate::tables::PUNT_RATE`]).
    fn send_priority(&self) -> u32 {
        teamster_core::ioc::htb::priority(0)
    }

    fn describe(&self) -> String {
        let lost = self.lost.load(Ordering::Relaxed);
        format!(
            "tcx program, {} interfaces, {lost} punts lost",
            self.state().attached.len()
        )
    }
}

/// Brings NetIOC's HTB qdiscs on the attached uplinks to the engine's tree (see
/// [`crate::shaping`]), and every second reads their ports' queue drops.
fn shape(st: &mut State, switch: &Switch, bound: &Bound<'_>, now: Instant) -> Result<(), String> {
    let Some(ioc) = &bound.ioc else {
        return st.shaping.sync(None, &[], &[], &|_| 1, now);
    };
    let uplinks: Vec<ShapedUplink> = ioc
        .capacities
        .iter()
        .filter_map(|(u, capacity)| {
            let (_, name) = bound.uplinks.iter().find(|(x, _)| x == u)?;
            let a = st.attached.get(*name)?;
            Some(ShapedUplink {
                interface: name.to_string(),
                ifindex: a.ifindex,
                capacity: *capacity,
            })
        })
        .collect();
    let team = switch.team();
    let spread: HashMap<PortId, usize> = team
        .ports()
        .map(|p| {
            let n = team
                .group(p.group)
                .map_or(1, |g| shaping::spread(g.policy, g.order.active.len()));
            (p.id, n)
        })
        .collect();
    st.shaping.sync(
        Some(ioc.tree),
        &ioc.leaves,
        &uplinks,
        &|p| spread.get(&p).copied().unwrap_or(1),
        now,
    )
}

/// Writes the tables the engine's state gives, passes the program's notes to the engine, syncs
/// the MAC tables both ways, and every [`KernelPath::COUNT_EVERY`] folds the kernel's counters
/// into the switch's; returns the data plane's own drops the kernel counted.
fn sync_tables(
    st: &mut State,
    notes: &Notes,
    switch: &mut Switch,
    bound: &Bound<'_>,
    now: Instant,
) -> Result<Vec<(Ingress, ExtraDrops)>, String> {
    let binding = |name: &str, priority: u32| {
        st.attached.get(name).map(|a| Binding {
            ifindex: a.ifindex,
            peer: a.peer,
            priority,
        })
    };
    let ifs = Interfaces {
        ports: bound
            .ports
            .iter()
            .filter_map(|(p, n)| Some((*p, binding(n, st.shaping.priority(*p))?)))
            .collect(),
        uplinks: bound
            .uplinks
            .iter()
            .filter_map(|(u, n)| Some((*u, binding(n, 0)?)))
            .collect(),
    };
    let mut tables = Tables::build(switch, &ifs, &mut st.slots, now).map_err(|e| e.to_string())?;
    st.freed.append(&mut tables.freed);
    tables.freed = st.freed.clone();
    st.fast.write(&tables).map_err(|e| e.to_string())?;
    st.freed.clear();
    // What the program noted for the engine's claims (ARP senders on the uplinks).
    let notes: Vec<Vec<u8>> = notes.lock().unwrap_or_else(|e| e.into_inner()).drain(..).collect();
    for frame in notes {
        switch.note_uplink_arp(&frame);
    }
    // The MAC tables: the engine's changes down, the kernel's entries up.
    let places = Places::new(&ifs, &st.slots);
    let offset = crate::monotonic_ns() as i128 - now.as_nanos() as i128;
    let overflowed = push_changes(&mut st.fast, switch, &places, offset).map_err(|e| e.to_string())?;
    if overflowed || st.next_mirror.is_none_or(|t| now >= t) {
        let n = pull_learned(&mut st.fast, switch, &places, offset).map_err(|e| e.to_string())?;
        st.next_mirror = Some(now + KernelPath::mirror_every(n));
    }
    // The flowlet buckets: what the program sent, up, the targets, down.
    if st.next_flowlet_pull.is_none_or(|t| now >= t) {
        st.next_flowlet_pull = Some(now + FlowletSync::PULL_EVERY);
        st.flowlets
            .pull(&st.fast, switch, &places, offset, now)
            .map_err(|e| e.to_string())?;
    }
    st.flowlets
        .push(&mut st.fast, switch, &places, offset)
        .map_err(|e| e.to_string())?;
    let mut extras = Vec::new();
    if st.next_count.is_none_or(|t| now >= t) {
        st.next_count = Some(now + KernelPath::COUNT_EVERY);
        let at: Vec<(Ingress, u32)> = ifs
            .ports
            .iter()
            .map(|(p, b)| (Ingress::Port(*p), b.ifindex))
            .chain(ifs.uplinks.iter().map(|(u, b)| (Ingress::Uplink(*u), b.ifindex)))
            .filter_map(|(at, i)| Some((at, st.slots.of(i)?)))
            .collect();
        for (at, slot) in at {
            let now_stats = st.fast.stats(slot).map_err(|e| e.to_string())?;
            let before = st.counted.insert(slot, now_stats).unwrap_or_default();
            fold(switch, at, &before, &now_stats, now);
            let d = |a: u64, b: u64| a.saturating_sub(b);
            let extra = ExtraDrops {
                oversize: d(now_stats.oversize, before.oversize),
                tx_error: d(now_stats.tx_error, before.tx_error) + d(now_stats.drops[0], before.drops[0]),
                ring_full: d(now_stats.punt_limited, before.punt_limited),
                ..ExtraDrops::default()
            };
            if extra.oversize + extra.tx_error + extra.ring_full > 0 {
                extras.push((at, extra));
            }
        }
    }
    Ok(extras)
}

/// Adds what the kernel counted at `at` between `before` and `after` to the switch's counters
/// and the team's meters.
fn fold(switch: &mut Switch, at: Ingress, before: &Stats, after: &Stats, now: Instant) {
    let d = |a: u64, b: u64| a.saturating_sub(b);
    let mut c = Counters::default();
    c.rx_packets = d(after.rx_packets, before.rx_packets);
    c.rx_bytes = d(after.rx_bytes, before.rx_bytes);
    c.tx_packets = d(after.tx_packets, before.tx_packets);
    c.tx_bytes = d(after.tx_bytes, before.tx_bytes);
    c.mac_limit = d(after.mac_limit, before.mac_limit);
    for (i, why) in DropReason::ALL.iter().enumerate() {
        let n = d(after.drops[i + 1], before.drops[i + 1]);
        if n > 0 {
            c.add_drops(*why, n);
        }
    }
    switch.add_counts(at, &c);
    let team = switch.team_mut();
    match at {
        Ingress::Port(p) => {
            team.account_port(p, Direction::Tx, d(after.to_uplinks, before.to_uplinks), now);
            team.account_port(p, Direction::Rx, d(after.from_uplinks, before.from_uplinks), now);
        }
        Ingress::Uplink(u) => {
            team.account_uplink(u, Direction::Tx, c.tx_bytes, now);
            team.account_uplink(u, Direction::Rx, c.rx_bytes, now);
        }
    }
}
