//! The differential test's rig: an engine and the kernel program over the same switch, in a
//! network namespace of the test thread's own, and a generator of hostile and ordinary frames.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;
use teamster_core::switch::{
    DropReason, EntryAt, Forward, Ingress, MacLimits, SecurityPolicy, Switch, SwitchConfig, TagEdit, Verdict,
};
use teamster_core::teaming::flowlet::BucketState;
use teamster_core::teaming::{
    FailoverOrder, GroupId, HashFields, LbtConfig, LinkState, Policy, PolicyTuning, PortGroupSpec, PortId, PortSpec,
    Team, TeamMode, UplinkId, UplinkSpec,
};
use teamster_core::units::Bandwidth;
use teamster_core::wire::MacAddr;
use teamster_core::Instant;
use teamster_kernel::flowlet_sync::FlowletSync;
use teamster_kernel::mac_sync::{push_changes, Places};
use teamster_kernel::{abi, Binding, Interfaces, Slots, SwitchProgram, Tables};

pub const PORTS: u32 = 12;
pub const UPLINKS: usize = 3;

pub fn port_mac(p: u32) -> MacAddr {
    MacAddr([0x02, 0, 0, 0, 0, p as u8])
}

pub fn uplink_mac(u: usize) -> MacAddr {
    MacAddr([0x0e, 0, 0, 0, 0, u as u8])
}

/// A port group of the rig: (name, VLAN, policy, active, standby, security, tuning).
type GroupRow = (
    &'static str,
    Option<u16>,
    Policy,
    Vec<usize>,
    Vec<usize>,
    SecurityPolicy,
    PolicyTuning,
);

/// The flowlet group (Dynamic): its index, and its tuning. The gap (100 ms) is near the time
/// between two frames of one bucket in the tests (a few thousand frames a second over a few
/// dozen buckets), so buckets both keep their member within a burst and start new flowlets;
/// the rebalance is frequent, so targets move under the traffic.
pub const FLOWLET_GROUP: GroupId = GroupId(5);

fn flowlet_tuning() -> PolicyTuning {
    PolicyTuning {
        hash_fields: HashFields::MacAddresses,
        flowlet_gap: Duration::from_millis(100),
        rebalance: Duration::from_millis(50),
    }
}

/// A change made to the kernel's tables after they are built (a mutant).
type Mutation = Box<dyn Fn(&mut Tables)>;

fn groups() -> Vec<GroupRow> {
    let accept = Verdict::Accept;
    let open = |mac_changes, forged, promiscuous| SecurityPolicy {
        mac_changes,
        forged_transmits: forged,
        promiscuous,
        ..SecurityPolicy::default()
    };
    let reject = Verdict::Reject;
    vec![
        (
            "web",
            None,
            Policy::PORT_ID,
            vec![0, 1],
            vec![2],
            SecurityPolicy::default(),
            PolicyTuning::default(),
        ),
        (
            "db",
            Some(10),
            Policy::IP_HASH_L4,
            vec![0, 1, 2],
            vec![],
            open(accept, reject, reject),
            PolicyTuning::default(),
        ),
        (
            "mon",
            Some(10),
            Policy::LOAD_BASED,
            vec![1, 0],
            vec![],
            open(reject, accept, accept),
            PolicyTuning::default(),
        ),
        (
            "lab",
            Some(20),
            Policy::IP_HASH,
            vec![1, 2],
            vec![0],
            open(accept, accept, reject),
            PolicyTuning::default(),
        ),
        (
            "hash",
            Some(30),
            Policy::ADDRESS_HASH,
            vec![2, 0, 1],
            vec![],
            SecurityPolicy::default(),
            PolicyTuning::default(),
        ),
        (
            "dyn",
            Some(20),
            Policy::DYNAMIC,
            vec![0, 1],
            vec![2],
            SecurityPolicy::default(),
            flowlet_tuning(),
        ),
    ]
}

/// Ports: (ID, group index).
const PORT_GROUPS: [(u32, usize); PORTS as usize] = [
    (1, 0),
    (2, 0),
    (3, 0),
    (4, 1),
    (5, 1),
    (6, 2),
    (7, 3),
    (8, 3),
    (9, 4),
    (10, 4),
    (11, 5),
    (12, 5),
];

fn switch() -> Switch {
    let uplinks = (0..UPLINKS)
        .map(|i| UplinkSpec {
            name: format!("up{i}"),
            capacity: Bandwidth::from_gbps(10),
        })
        .collect();
    let mut team = Team::new(uplinks, LbtConfig::default()).expect("a team");
    let mut security = Vec::new();
    for (name, vlan, policy, active, standby, sec, tuning) in groups() {
        team.add_group(PortGroupSpec {
            name: name.into(),
            policy,
            order: FailoverOrder {
                active: active.into_iter().map(UplinkId).collect(),
                standby: standby.into_iter().map(UplinkId).collect(),
            },
            failback: true,
            notify_switches: false,
            vlan,
            mode: TeamMode::SwitchIndependent,
            tuning,
            lacp: Default::default(),
        })
        .expect("a group");
        security.push(sec);
    }
    for (id, g) in PORT_GROUPS {
        team.add_port(PortSpec {
            id: PortId(id),
            mac: port_mac(id),
            group: GroupId(g),
        })
        .expect("a port");
    }
    let mut s = Switch::with_config(
        team,
        SwitchConfig {
            ageing: Duration::from_secs(300),
            mac_limits: MacLimits { total: 40, per_port: 5 },
            security,
            overlays: Vec::new(),
        },
    );
    for u in 0..2 {
        s.set_uplink_mac(UplinkId(u), Some(uplink_mac(u)));
    }
    s
}

fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().expect("runs");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn ifindex(name: &str) -> u32 {
    let c = std::ffi::CString::new(name).expect("a name");
    // SAFETY: a NUL-terminated name.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    assert!(i != 0, "no interface {name}");
    i
}

/// True for a frame whose ether type (at 12) is IPv4 or IPv6 and that is shorter than that
/// header: BPF_PROG_TEST_RUN refuses those.
fn too_short_for_test_run(frame: &[u8]) -> bool {
    match frame[12..14] {
        [0x08, 0x00] => frame.len() < 14 + 20,
        [0x86, 0xdd] => frame.len() < 14 + 40,
        _ => false,
    }
}

/// What kinds of decisions the frames reached.
#[derive(Default, Debug)]
pub struct Coverage {
    drops: BTreeMap<&'static str, u64>,
    to_port: u64,
    to_uplink: u64,
    pushed: u64,
    popped: u64,
    floods: u64,
    refused: u64,
}

pub struct Rig {
    pub switch: Switch,
    fast: SwitchProgram,
    ifs: Interfaces,
    slots: Slots,
    now: Instant,
    /// CLOCK_MONOTONIC at the start: the engine's clock follows the kernel's, so the two agree
    /// on time windows (a port's frames coming back within the reflection window).
    started_ns: u64,
    mutation: Option<Mutation>,
    cov: Coverage,
    flowlets: FlowletSync,
    /// Per flowlet bucket, the clock before the engine and after the program last ran a frame
    /// of it: whether the two saw the bucket idle is undecided when the gap falls between.
    flowlet_runs: BTreeMap<usize, (u64, u64)>,
    /// Frames of the flowlet group compared, and those whose bucket's idleness was undecided.
    pub flowlet_compared: u64,
    pub flowlet_undecided: u64,
}

impl Rig {
    /// A rig, or None (after saying why) where the machine cannot run one and the test is not
    /// required to (TEAMSTER_REQUIRE_LIVE unset).
    pub fn new_or_skip() -> Option<Rig> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(
                std::env::var_os("TEAMSTER_REQUIRE_LIVE").is_none(),
                "the kernel path's tests need root (TEAMSTER_REQUIRE_LIVE is set)"
            );
            eprintln!("skipped: the kernel path's tests need root");
            return None;
        }
        // A network namespace for this thread alone (gone with it), and the thread on CPU 0,
        // where the program's per-CPU verdict is then read.
        // SAFETY: both act on the calling thread only.
        unsafe {
            assert_eq!(libc::unshare(libc::CLONE_NEWNET), 0, "unshare(CLONE_NEWNET)");
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            assert_eq!(libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set), 0);
        }
        let mut ifs = Interfaces::default();
        for p in 1..=PORTS {
            let name = format!("p{p}");
            sh(&[
                "ip",
                "link",
                "add",
                &name,
                "type",
                "veth",
                "peer",
                "name",
                &format!("p{p}x"),
            ]);
            ifs.ports.insert(
                PortId(p),
                Binding {
                    ifindex: ifindex(&name),
                    peer: p % 2 == 0,
                    priority: 0,
                },
            );
        }
        for u in 0..UPLINKS {
            let name = format!("u{u}");
            sh(&[
                "ip",
                "link",
                "add",
                &name,
                "type",
                "veth",
                "peer",
                "name",
                &format!("u{u}x"),
            ]);
            ifs.uplinks.insert(
                UplinkId(u),
                Binding {
                    ifindex: ifindex(&name),
                    peer: false,
                    priority: 0,
                },
            );
        }
        let switch = switch();
        let fast = SwitchProgram::load(switch.mac_table().limits().total).expect("the program loads");
        let mut rig = Rig {
            switch,
            fast,
            ifs,
            slots: Slots::default(),
            now: Instant::ZERO,
            started_ns: teamster_kernel::monotonic_ns(),
            mutation: None,
            cov: Coverage::default(),
            flowlets: FlowletSync::default(),
            flowlet_runs: BTreeMap::new(),
            flowlet_compared: 0,
            flowlet_undecided: 0,
        };
        rig.sync();
        Some(rig)
    }

    /// Writes the engine's state into the kernel's tables and the engine's MAC-table changes
    /// into the kernel's, as the daemon does after each turn (`teamster_kernel::KernelPath`).
    fn sync(&mut self) {
        let mut t = Tables::build(&self.switch, &self.ifs, &mut self.slots, self.now).expect("supported");
        if let Some(m) = &self.mutation {
            m(&mut t);
        }
        self.fast.write(&t).expect("tables written");
        let places = Places::new(&self.ifs, &self.slots);
        let overflowed = push_changes(&mut self.fast, &mut self.switch, &places, i128::from(self.started_ns))
            .expect("the engine's MAC changes written");
        assert!(!overflowed, "the engine's journal overflowed");
        self.flowlets
            .push(&mut self.fast, &self.switch, &places, i128::from(self.started_ns))
            .expect("the flowlet targets written");
    }

    /// Takes uplink `u`'s interface away (as a NIC removed: the link is down and the tables no
    /// longer name it), or gives it back.
    pub fn set_uplink_interface(&mut self, u: usize, present: bool) {
        if present {
            self.ifs.uplinks.insert(
                UplinkId(u),
                Binding {
                    ifindex: ifindex(&format!("u{u}")),
                    peer: false,
                    priority: 0,
                },
            );
        } else {
            self.ifs.uplinks.remove(&UplinkId(u));
        }
        self.set_uplink(u, present);
    }

    /// Gives group `g` a new failover order (its policy, and so its state, kept).
    pub fn set_order(&mut self, g: GroupId, active: &[usize], standby: &[usize]) {
        let spec = self.switch.team().group(g).expect("a group").clone();
        let order = FailoverOrder {
            active: active.iter().copied().map(UplinkId).collect(),
            standby: standby.iter().copied().map(UplinkId).collect(),
        };
        self.switch
            .team_mut()
            .reconfigure_group(g, spec.policy, order, spec.failback, self.now)
            .expect("a valid order");
        while self.switch.poll_effect().is_some() {}
        self.sync();
    }

    /// Tells the engine what the program sent in its flowlet buckets (and the hash policies'
    /// census buckets) since the last pull, as the daemon does every 250 ms; returns how many
    /// buckets had sent.
    pub fn pull_flowlets(&mut self) -> usize {
        let now = Instant::from_nanos(teamster_kernel::monotonic_ns() - self.started_ns);
        self.pull_flowlets_at(now)
    }

    /// [`Rig::pull_flowlets`] as of the engine's time `now`.
    pub fn pull_flowlets_at(&mut self, now: Instant) -> usize {
        let places = Places::new(&self.ifs, &self.slots);
        self.flowlets
            .pull(&self.fast, &mut self.switch, &places, i128::from(self.started_ns), now)
            .expect("the flowlets read")
    }

    /// The engine's state of the flowlet group's buckets.
    pub fn flowlet_buckets(&self) -> Vec<BucketState> {
        self.engine_buckets()
    }

    /// Runs the engine's timers (the flowlet rebalance among them) and writes what they changed.
    pub fn tick(&mut self) {
        self.now = Instant::from_nanos(teamster_kernel::monotonic_ns() - self.started_ns);
        self.switch.handle_timeout(self.now);
        while self.switch.poll_effect().is_some() {}
        self.sync();
    }

    /// The engine's flowlet buckets of the flowlet group.
    fn engine_buckets(&self) -> Vec<BucketState> {
        self.switch
            .team()
            .flowlet_buckets(FLOWLET_GROUP)
            .expect("a flowlet group")
    }

    /// The slot of uplink `u`'s interface, or NO_SLOT while it has none.
    fn uplink_slot(&self, u: UplinkId) -> u32 {
        self.ifs
            .uplinks
            .get(&u)
            .and_then(|b| self.slots.of(b.ifindex))
            .unwrap_or(abi::NO_SLOT)
    }

    /// Writes the engine's state of flowlet bucket `b` into the program's (the test's own
    /// resync, where the two could not be compared).
    fn resync_flowlet(&mut self, b: usize) {
        let e = self.engine_buckets()[b];
        let index = (FLOWLET_GROUP.0 * abi::FLOWLET_BUCKETS + b) as u32;
        let k = |t: Option<Instant>| t.map_or(0, |t| t.as_nanos() + self.started_ns);
        let current = e.current.map_or(abi::NO_SLOT, |u| self.slot(EntryAt::Uplink(u)).0);
        let f = abi::Flowlet {
            last_seen: k(e.last_seen),
            flowlet_at: k(e.flowlet_at),
            current,
            ..self.fast.flowlet(index).expect("the flowlets map")
        };
        self.fast.put_flowlet(index, f).expect("the flowlets map");
    }

    /// The program's flowlet buckets against the engine's: every bucket with a target on the
    /// same current member.
    pub fn compare_flowlets(&self) -> Result<(), String> {
        let mut differ = Vec::new();
        for (b, e) in self.engine_buckets().iter().enumerate() {
            if e.target.is_none() {
                continue;
            }
            let index = (FLOWLET_GROUP.0 * abi::FLOWLET_BUCKETS + b) as u32;
            let k = self.fast.flowlet(index).map_err(|e| e.to_string())?;
            let engine = e.current.map_or(abi::NO_SLOT, |u| self.uplink_slot(u));
            // (A bucket on an uplink whose interface is gone: neither can send there, and the
            // kernel still names the freed slot until the bucket's next frame.)
            if engine != abi::NO_SLOT && k.current != engine {
                differ.push((b, engine, k.current));
            }
        }
        if differ.is_empty() {
            Ok(())
        } else {
            Err(format!("flowlet buckets (bucket, engine's slot, kernel's): {differ:?}"))
        }
    }

    /// Changes the kernel's tables with `f` from now on (a mutant of the program's inputs).
    pub fn mutate(&mut self, f: impl Fn(&mut Tables) + 'static) {
        self.mutation = Some(Box::new(f));
        self.sync();
    }

    pub fn set_uplink(&mut self, u: usize, up: bool) {
        let state = if up { LinkState::Up } else { LinkState::Down };
        self.switch
            .team_mut()
            .set_link(UplinkId(u), state, self.now)
            .expect("an uplink");
        while self.switch.poll_effect().is_some() {}
        self.sync();
    }

    fn slot(&self, at: EntryAt) -> (u32, bool) {
        let (b, port) = match at {
            EntryAt::Port(p) => (self.ifs.ports[&p], true),
            EntryAt::Uplink(u) => (self.ifs.uplinks[&u], false),
            EntryAt::Tunnel => unreachable!("no overlays here"),
        };
        (self.slots.of(b.ifindex).expect("a slot"), port)
    }

    /// The kernel's counters of the interface `from` arrives on.
    pub fn kernel_stats(&self, from: Ingress) -> teamster_kernel::abi::Stats {
        let (_, slot) = self.ingress_slot(from);
        self.fast.stats(slot).expect("the stats map")
    }

    /// The program under test, for a test that stages its maps itself.
    pub fn program(&mut self) -> &mut SwitchProgram {
        &mut self.fast
    }

    /// `from`'s interface index and slot.
    pub fn ingress_slot(&self, from: Ingress) -> (u32, u32) {
        let b = match from {
            Ingress::Port(p) => self.ifs.ports[&p],
            Ingress::Uplink(u) => self.ifs.uplinks[&u],
        };
        (b.ifindex, self.slots.of(b.ifindex).expect("a slot"))
    }

    fn counters(&self, from: Ingress) -> (Vec<u64>, u64) {
        let c = match from {
            Ingress::Port(p) => self.switch.port_counters(p),
            Ingress::Uplink(u) => self.switch.uplink_counters(u),
        }
        .expect("counted");
        (DropReason::ALL.iter().map(|r| c.drops(*r)).collect(), c.mac_limit)
    }

    /// The engine's outputs as the program records them.
    fn outs(&self, fwd: &[Forward]) -> Vec<abi::Out> {
        let mut v: Vec<abi::Out> = fwd
            .iter()
            .map(|f| {
                let slot = match f.to {
                    teamster_core::switch::Egress::Port(p) => self.slot(EntryAt::Port(p)).0,
                    teamster_core::switch::Egress::Uplink(u) => self.slot(EntryAt::Uplink(u)).0,
                };
                let (edit, vid) = match f.edit {
                    TagEdit::Keep => (abi::EDIT_KEEP, 0),
                    TagEdit::Push(v) => (abi::EDIT_PUSH, v),
                    TagEdit::Pop => (abi::EDIT_POP, 0),
                    other => panic!("an edit the kernel path does not make: {other:?}"),
                };
                abi::Out {
                    slot,
                    edit,
                    rewrite: u8::from(f.source.is_some()),
                    vid,
                }
            })
            .collect();
        v.sort();
        v
    }

    /// Switches `frame` from `from` in both; Ok(None) if they agree, Ok(Some(reason)) if the
    /// program punted it (to a contract's reason), Err saying how they differ.
    pub fn compare(&mut self, from: Ingress, frame: &[u8]) -> Result<Option<u8>, String> {
        let t0 = teamster_kernel::monotonic_ns();
        self.now = Instant::from_nanos(t0 - self.started_ns);
        let flowlet_port = matches!(from, Ingress::Port(p) if self.switch.team().port_group(p) == Some(FLOWLET_GROUP));
        let buckets_before = flowlet_port.then(|| self.engine_buckets());
        let (before, limit_before) = self.counters(from);
        let unsettled = match from {
            Ingress::Port(p) => !self.switch.port_switching(p).expect("a port").owned,
            Ingress::Uplink(_) => false,
        };
        let mut fwd = Vec::new();
        self.switch.forward(from, frame, 0, self.now, &mut fwd);
        let (after, limit_after) = self.counters(from);
        let engine_drop = before
            .iter()
            .zip(&after)
            .position(|(a, b)| a != b)
            .map_or(0, |i| i as u16 + 1);
        let (ifindex, _) = self.ingress_slot(from);
        // The engine is alive (it writes the tables after each of its turns; this rig only
        // when they change).
        self.fast
            .stamp_engine(teamster_kernel::monotonic_ns())
            .map_err(|e| e.to_string())?;
        let (ret, v) = match self.fast.run(ifindex, frame, 0) {
            Ok(r) => r,
            // BPF_PROG_TEST_RUN refuses (EINVAL) an IP frame too short for its IP header, before
            // the program runs; live, the program sees such frames (a VM can send them).
            Err(_) if too_short_for_test_run(frame) => {
                self.sync();
                return Ok(Some(0));
            }
            Err(e) => return Err(format!("{e:?}")),
        };
        let t1 = teamster_kernel::monotonic_ns();
        // The flowlet bucket the engine sent this frame through, and what it was before.
        let sent = buckets_before.and_then(|before| {
            let after = self.engine_buckets();
            (0..before.len())
                .find(|b| after[*b].last_seen != before[*b].last_seen)
                .map(|b| (b, before[b]))
        });
        if v.punt != 0 {
            self.check_punt(v.punt, from, frame, unsettled)?;
            // Handed up as a flowlet the engine places: only for a bucket it had not placed, or
            // one placed without a target while an active member is live (its new flowlets
            // take the least loaded one).
            let team = self.switch.team();
            let active_live = team
                .group(FLOWLET_GROUP)
                .is_some_and(|g| g.order.active.iter().any(|u| team.uplink_usable(*u)));
            let engines = |before: &BucketState| before.last_seen.is_none() || (before.target.is_none() && active_live);
            if v.punt == 10 && !sent.is_some_and(|(_, before)| engines(&before)) {
                return Err(format!(
                    "punted as a flowlet the engine places, but its bucket has a target: {sent:?}"
                ));
            }
            self.sync();
            if let Some((b, before)) = sent {
                // Punted for another reason, the engine sent it through a bucket the program
                // keeps, which the program does not see: the daemon's kernel state lags the
                // engine's by that frame (it may start the bucket's next flowlet a frame
                // early). The rig writes it down, so that the comparison goes on.
                if before.last_seen.is_some() {
                    self.resync_flowlet(b);
                }
                self.flowlet_runs.insert(b, (t0, t1));
            }
            return Ok(Some(v.punt));
        }
        if let Some((b, before)) = sent {
            let gap = flowlet_tuning().flowlet_gap.as_nanos() as u64;
            let undecided = match (self.flowlet_runs.insert(b, (t0, t1)), before.last_seen) {
                (Some((p0, p1)), Some(_)) => t0.saturating_sub(p1) < gap && t1.saturating_sub(p0) >= gap,
                _ => false,
            };
            if undecided {
                // The engine's clock and the program's straddle the gap: either may be right.
                self.flowlet_undecided += 1;
                self.resync_flowlet(b);
                return Ok(Some(0));
            }
            self.flowlet_compared += 1;
        }
        let kernel: Vec<abi::Out> = {
            let mut k = v.outs[..v.count as usize].to_vec();
            k.sort();
            k
        };
        let engine = self.outs(&fwd);
        let name = |d: u16| {
            d.checked_sub(1)
                .and_then(|i| DropReason::ALL.get(i as usize))
                .map_or("none", |r| r.name())
        };
        if engine_drop != v.drop || engine != kernel {
            return Err(format!(
                "engine: drop {} outputs {engine:?}\nkernel: drop {} outputs {kernel:?}",
                name(engine_drop),
                name(v.drop)
            ));
        }
        let refused = limit_after > limit_before;
        if refused != (v.learned == 2) {
            return Err(format!(
                "engine refused to learn: {refused}; kernel: {}",
                ["known", "added", "refused"][v.learned.min(2) as usize]
            ));
        }
        let want = if !engine.is_empty() {
            7 // TC_ACT_REDIRECT
        } else {
            2 // TC_ACT_SHOT
        };
        if ret != want {
            return Err(format!("program returned {ret}, expected {want}"));
        }
        self.cover(engine_drop, &engine, refused);
        Ok(None)
    }

    fn cover(&mut self, drop: u16, outs: &[abi::Out], refused: bool) {
        let c = &mut self.cov;
        if drop > 0 {
            *c.drops.entry(DropReason::ALL[drop as usize - 1].name()).or_default() += 1;
        }
        for o in outs {
            let port = self
                .ifs
                .ports
                .values()
                .any(|b| self.slots.of(b.ifindex) == Some(o.slot));
            if port {
                c.to_port += 1
            } else {
                c.to_uplink += 1
            }
            c.pushed += u64::from(o.edit == abi::EDIT_PUSH);
            c.popped += u64::from(o.edit == abi::EDIT_POP);
        }
        c.floods += u64::from(outs.len() > 1);
        c.refused += u64::from(refused);
    }

    /// A punt is right only for what the program's contract hands to the engine.
    fn check_punt(&self, why: u8, from: Ingress, frame: &[u8], unsettled: bool) -> Result<(), String> {
        let src = MacAddr(frame[6..12].try_into().expect("14 bytes at least"));
        let ok = match (why, from) {
            // A port that does not own its MAC (a host outside used it first).
            (1, Ingress::Port(_)) => unsettled,
            // A guest changing its MAC (its group accepts MAC changes) or going back to its own.
            (2, Ingress::Port(p)) => {
                let sw = self.switch.port_switching(p).expect("a port");
                sw.policy.mac_changes.accepts()
            }
            // An LACPDU's ether type, to the slow-protocols address.
            (3, Ingress::Uplink(_)) => frame[12..14] == [0x88, 0x09] && frame[..6] == [0x01, 0x80, 0xc2, 0, 0, 2],
            // A port's configured MAC heard on an uplink.
            (5, Ingress::Uplink(_)) => (1..=PORTS).any(|p| port_mac(p) == src),
            // VXLAN, MACsec, or IPv6 extension headers past the parser's bound.
            (6, _) => frame.windows(2).any(|w| w == [0x12, 0xb5]),
            // A flowlet bucket's first frame: the engine has placed the bucket since.
            (10, Ingress::Port(p)) => self.switch.team().port_group(p) == Some(FLOWLET_GROUP),
            (7, _) => true,
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "punted for reason {why}, which does not apply to this frame from {from:?}"
            ))
        }
    }

    /// The kernel's MAC table against the engine's: the same entries, each at the same place.
    pub fn compare_mac_tables(&self) -> Result<(), String> {
        let engine: BTreeSet<(u16, [u8; 6], u32, bool)> = self
            .switch
            .mac_entries(self.now)
            .into_iter()
            .map(|e| {
                (
                    teamster_kernel::tables::domain(e.vlan),
                    e.mac.0,
                    self.slot(e.at).0,
                    e.fixed,
                )
            })
            .collect();
        let kernel: BTreeSet<(u16, [u8; 6], u32, bool)> = self
            .fast
            .fdb()
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|(k, e)| (k.domain, k.mac, e.slot, e.flags & abi::FDB_STATIC != 0))
            .collect();
        if engine == kernel {
            return Ok(());
        }
        Err(format!(
            "MAC tables differ: only the engine's {:?}; only the kernel's {:?}",
            engine.difference(&kernel).collect::<Vec<_>>(),
            kernel.difference(&engine).collect::<Vec<_>>()
        ))
    }

    pub fn summary(&self) -> String {
        format!("{:?}", self.cov)
    }

    /// The frames reached every decision the comparison is meant to cover.
    pub fn assert_coverage(&self) {
        let c = &self.cov;
        for why in [
            "malformed",
            "reflection",
            "not_receive_uplink",
            "no_uplink",
            "tagged_on_access_port",
            "unknown_vlan",
            "hairpin",
            "forged_transmit",
            "slow_protocol",
            "link_control",
        ] {
            assert!(
                c.drops.get(why).copied().unwrap_or(0) > 0,
                "no frame was dropped for {why}: {c:?}"
            );
        }
        assert!(c.to_port > 100 && c.to_uplink > 100, "{c:?}");
        assert!(
            c.pushed > 50 && c.popped > 50 && c.floods > 50 && c.refused > 0,
            "{c:?}"
        );
    }
}

/// Frames, ordinary and hostile: every ingress, MACs from the switch's own and others', VLAN
/// tags of three kinds (some too many), IPv4, IPv6 (with extension headers), ARP, RARP, TCP,
/// UDP, ICMP, IGMP, link control, slow protocols, MACsec, VXLAN, odd ether types, and a share
/// of them damaged.
pub struct Frames {
    rng: ChaCha8Rng,
    /// Only from these ports (None: from every port and uplink).
    only: Option<Vec<u32>>,
}

impl Frames {
    pub fn new(seed: u64) -> Frames {
        Frames {
            rng: ChaCha8Rng::seed_from_u64(seed),
            only: None,
        }
    }

    /// The same frames, sent only by `ports`.
    pub fn from_ports(seed: u64, ports: &[u32]) -> Frames {
        Frames {
            only: Some(ports.to_vec()),
            ..Frames::new(seed)
        }
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.rng.random_range(0..from.len())]
    }

    fn remote(&mut self) -> [u8; 6] {
        [0x0a, 0, 0, 0, 1, self.rng.random_range(0..48)]
    }

    fn dst(&mut self) -> [u8; 6] {
        match self.rng.random_range(0..100) {
            0..30 => self.remote(),
            30..55 => port_mac(self.rng.random_range(1..=PORTS)).0,
            55..70 => [0xff; 6],
            70..78 => [0x01, 0, 0x5e, 0, 0, self.rng.random()],
            78..80 => [0x33, 0x33, 0, 0, 0, 1],
            80..85 => {
                let last = self.pick(&[0u8, 1, 2, 3, 0x0e, 0x0f]);
                [0x01, 0x80, 0xc2, 0, 0, last]
            }
            85..87 => [0x01, 0, 0x0c, 0xcc, 0xcc, self.pick(&[0xcc, 0xcd])],
            87..90 => uplink_mac(self.rng.random_range(0..UPLINKS)).0,
            90..95 => [0x02, 0, 0, 0, 1, self.rng.random_range(0..6)],
            _ => {
                let mut m: [u8; 6] = self.rng.random();
                m[0] &= 0xfe;
                m
            }
        }
    }

    /// A frame's source, as sent from `from`.
    fn src(&mut self, from: Ingress) -> [u8; 6] {
        let r = self.rng.random_range(0..100);
        match from {
            Ingress::Port(p) => match r {
                0..70 => port_mac(p.0).0,
                70..78 => port_mac(self.rng.random_range(1..=PORTS)).0,
                78..90 => [0x02, 0, 0, 0, 1, self.rng.random_range(0..6)],
                90..97 => self.remote(),
                97..99 => [0x01, 0, 0x5e, 0, 0, 1],
                _ => [0; 6],
            },
            Ingress::Uplink(_) => match r {
                0..82 => self.remote(),
                82..87 => port_mac(self.rng.random_range(1..=PORTS)).0,
                87..91 => uplink_mac(self.rng.random_range(0..UPLINKS)).0,
                91..95 => [0x02, 0, 0, 0, 1, self.rng.random_range(0..6)],
                95..98 => [0; 6],
                _ => [0x01, 0, 0x5e, 0, 0, 1],
            },
        }
    }

    fn tags(&mut self, from: Ingress) -> Vec<(u16, u16)> {
        let kind = |rng: &mut ChaCha8Rng| [0x8100u16, 0x8100, 0x8100, 0x88a8, 0x9100][rng.random_range(0..5)];
        let vid = |rng: &mut ChaCha8Rng| [10u16, 10, 20, 20, 30, 0, 4095][rng.random_range(0..7)];
        let n = match (from, self.rng.random_range(0..100)) {
            (Ingress::Port(_), 0..92) => 0,
            (Ingress::Port(_), _) => self.rng.random_range(1..3),
            (Ingress::Uplink(_), 0..25) => 0,
            (Ingress::Uplink(_), 25..94) => 1,
            (Ingress::Uplink(_), _) => self.rng.random_range(2..5),
        };
        (0..n).map(|_| (kind(&mut self.rng), vid(&mut self.rng))).collect()
    }

    fn ip4(&mut self) -> [u8; 4] {
        [10, 0, self.rng.random_range(0..3), self.rng.random_range(1..12)]
    }

    fn l4(&mut self, proto: u8) -> Vec<u8> {
        let (sp, any): (u16, u16) = (self.rng.random(), self.rng.random());
        let dp = if self.rng.random_bool(0.03) {
            4789
        } else {
            self.pick(&[80, 443, 53, any])
        };
        match proto {
            6 => {
                let mut t = vec![0u8; 20];
                t[..2].copy_from_slice(&sp.to_be_bytes());
                t[2..4].copy_from_slice(&dp.to_be_bytes());
                t[12] = 5 << 4;
                t.extend(vec![0u8; self.rng.random_range(0..64)]);
                t
            }
            17 => {
                let n = self.rng.random_range(0..40);
                let mut u = vec![0u8; 8 + n];
                u[..2].copy_from_slice(&sp.to_be_bytes());
                u[2..4].copy_from_slice(&dp.to_be_bytes());
                u[4..6].copy_from_slice(&((8 + n) as u16).to_be_bytes());
                if dp == 4789 && n >= 8 {
                    u[8] = 0x08;
                }
                u
            }
            1 => {
                let ty = self.pick(&[8u8, 0, 13, 3]);
                let mut i = vec![ty, 0, 0, 0, 0, 0, 0, 0];
                if ty == 13 {
                    i.resize(self.pick(&[20, 20, 21]), 0);
                }
                i
            }
            2 => {
                let mut g = vec![self.pick(&[0x11u8, 0x16]), 0, 0, 0, 224, 0, 0, 1];
                if g[0] == 0x11 && self.rng.random_bool(0.5) {
                    g.extend([0, 0, 0, 1, 10, 0, 0, 1]);
                }
                g
            }
            _ => vec![0u8; self.rng.random_range(0..32)],
        }
    }

    fn ipv4(&mut self) -> Vec<u8> {
        let proto = self.pick(&[6u8, 6, 17, 17, 1, 2, 47, 51]);
        let mut payload = self.l4(if proto == 51 { 6 } else { proto });
        if proto == 51 {
            let mut ah = vec![6u8, 4, 0, 0];
            ah.resize(24, 0);
            ah.extend(payload);
            payload = ah;
        }
        let mut h = vec![0x45u8, 0, 0, 0, 0, 0, 0, 0, 64, proto, 0, 0];
        h.extend(self.ip4());
        h.extend(self.ip4());
        let total = (20 + payload.len()) as u16;
        h[2..4].copy_from_slice(&total.to_be_bytes());
        if self.rng.random_bool(0.06) {
            h[6] = self.pick(&[0x20u8, 0x00, 0x01]);
            h[7] = self.rng.random();
        }
        h.extend(payload);
        h
    }

    fn ipv6(&mut self) -> Vec<u8> {
        let proto = self.pick(&[6u8, 17, 58, 59]);
        let mut payload = self.l4(proto);
        let mut nh = proto;
        let exts = if self.rng.random_bool(0.2) {
            self.rng.random_range(1..11)
        } else {
            0
        };
        for i in 0..exts {
            let kind = if i == 0 {
                self.pick(&[0u8, 43, 60, 44])
            } else {
                self.pick(&[43u8, 60, 44])
            };
            let mut e = vec![nh, 0, 0, 0, 0, 0, 0, 0];
            if kind == 44 && self.rng.random_bool(0.3) {
                e[3] = 1;
            }
            e.extend(payload);
            payload = e;
            nh = kind;
        }
        let mut h = vec![0x60u8, 0, 0, 0];
        h.extend(&(payload.len() as u16).to_be_bytes());
        h.push(nh);
        h.push(64);
        for _ in 0..2 {
            h.extend([
                0xfd,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                self.rng.random_range(1..12),
            ]);
        }
        h.extend(payload);
        h
    }

    fn arp(&mut self) -> Vec<u8> {
        let mut a = vec![0, 1, 8, 0, 6, 4, 0, self.pick(&[1u8, 2])];
        a.extend(self.remote());
        a.extend(self.ip4());
        a.extend([0; 6]);
        a.extend(self.ip4());
        a
    }

    /// Damages a frame: cut short, a byte changed, or grown.
    fn damage(&mut self, f: &mut Vec<u8>) {
        match self.rng.random_range(0..3) {
            0 => {
                let n = self.rng.random_range(14..f.len().max(15));
                f.truncate(n);
            }
            1 if f.len() > 14 => {
                let i = self.rng.random_range(14..f.len());
                f[i] = self.rng.random();
            }
            _ => f.extend(vec![0u8; self.rng.random_range(1..20)]),
        }
    }

    /// The next frame and where it arrives.
    pub fn next(&mut self, _rig: &Rig) -> (Ingress, Vec<u8>) {
        let from = if let Some(only) = self.only.clone() {
            Ingress::Port(PortId(self.pick(&only)))
        } else if self.rng.random_bool(0.6) {
            Ingress::Port(PortId(self.rng.random_range(1..=PORTS)))
        } else {
            Ingress::Uplink(UplinkId(self.rng.random_range(0..UPLINKS)))
        };
        let mut f = Vec::with_capacity(128);
        f.extend(self.dst());
        f.extend(self.src(from));
        for (kind, vid) in self.tags(from) {
            f.extend(kind.to_be_bytes());
            f.extend(vid.to_be_bytes());
        }
        let (et, body): (u16, Vec<u8>) = match self.rng.random_range(0..100) {
            0..40 => (0x0800, self.ipv4()),
            40..60 => (0x86dd, self.ipv6()),
            60..70 => (0x0806, self.arp()),
            70..72 => (0x8035, self.arp()),
            72..76 => (0x8809, vec![1, 1, 0, 0, 0, 0, 0, 0]),
            76..79 => (0x88cc, vec![2, 7, 4, 0, 0, 0, 0, 0, 1]),
            79..81 => (0x8808, vec![0, 1, 0, 0]),
            81..83 => (0x88e5, vec![0x2c, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0x08, 0x00]),
            83..87 => (self.rng.random_range(0..0x600), vec![0xaa, 0xaa, 3, 0, 0, 0]),
            _ => (self.rng.random(), vec![0u8; self.rng.random_range(0..46)]),
        };
        f.extend(et.to_be_bytes());
        f.extend(body);
        if f.len() < 60 && self.rng.random_bool(0.5) {
            f.resize(60, 0); // Ethernet's minimum, as a NIC pads
        }
        if self.rng.random_bool(0.12) {
            self.damage(&mut f);
        }
        (from, f)
    }
}
