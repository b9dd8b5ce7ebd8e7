//! The data plane's turn on the in-memory platform ([`crate::fake`]): no root, no interfaces,
//! time moved by the test. Each test drives whole turns of the loop ([`Datapath::turn`]), so
//! what it checks is what the live switch does between its devices: receiving, the switch's
//! decisions, fitting, NetIOC and pacing, batching, failover, ports that come and go.

use super::*;
use crate::fake::{FakeInterface, FakePlatform};
use core::time::Duration;
use etherparse::PacketBuilder;
use std::sync::Mutex;
use teamster_core::ioc::{NodeSpec, Shares};
use teamster_core::offload::{Gso, GsoKind, Offload, PartialChecksum};
use teamster_core::teaming::{FailoverOrder, GroupId, LbtConfig, Policy, PortSpec, UplinkSpec};
use teamster_core::wire::MacAddr;

const VM1: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const VM2: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const OUTSIDE: MacAddr = MacAddr([2, 0, 0, 0, 0, 0x99]);

/// A UDP/IPv4 frame from `src` to `dst` of `len` bytes in all.
fn udp(src: MacAddr, dst: MacAddr, len: usize) -> Vec<u8> {
    let payload = vec![0x5a; len - 14 - 20 - 8];
    let b = PacketBuilder::ethernet2(src.0, dst.0)
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .udp(4000, 5000);
    let mut f = Vec::with_capacity(len);
    b.write(&mut f, &payload).expect("frame");
    f
}

/// A TCP/IPv4 super-frame of `segments` segments of `mss` bytes, with its request to segment.
fn tcp_super(src: MacAddr, dst: MacAddr, mss: u16, segments: usize) -> Frame {
    let payload = vec![0x33; usize::from(mss) * segments];
    let b = PacketBuilder::ethernet2(src.0, dst.0)
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .tcp(4000, 5000, 1, 65535);
    let mut f = Vec::new();
    b.write(&mut f, &payload).expect("frame");
    let offload = Offload {
        csum: Some(PartialChecksum { start: 34, offset: 16 }),
        gso: Some(Gso {
            kind: GsoKind::TcpV4,
            size: mss,
            ecn: false,
        }),
    };
    Frame::new(f, offload)
}

/// What a test's switch is made of: uplinks `u1` and `u2` (capacity `rate`, in that failover
/// order) and ports `vm1` and `vm2` on taps `tap1` and `tap2`, one NetIOC leaf each.
struct Rig {
    fake: FakePlatform,
    dp: Datapath<FakePlatform>,
    events: Arc<Mutex<Vec<Event>>>,
}

fn team(rate: Bandwidth, macs: &[(PortId, MacAddr)]) -> Team {
    let uplinks = ["u1", "u2"].map(|n| UplinkSpec {
        name: n.into(),
        capacity: rate,
    });
    let mut team = Team::new(uplinks.to_vec(), LbtConfig::default()).expect("team");
    team.add_group(group()).expect("group");
    for &(id, mac) in macs {
        team.add_port(PortSpec {
            id,
            mac,
            group: GroupId(0),
        })
        .expect("port");
    }
    team
}

fn group() -> PortGroupSpec {
    PortGroupSpec {
        mode: Default::default(),
        tuning: Default::default(),
        lacp: Default::default(),
        name: "vms".into(),
        policy: Policy::PORT_ID,
        order: FailoverOrder {
            active: vec![UplinkId(0)],
            standby: vec![UplinkId(1)],
        },
        failback: true,
        notify_switches: true,
        vlan: None,
    }
}

/// A tree with a leaf per name, equal shares, no reservation or limit.
fn tree(names: &[&str]) -> (Tree, Vec<NodeId>) {
    let mut tree = Tree::new("uplink");
    let leaves = names
        .iter()
        .map(|n| {
            let spec = NodeSpec {
                name: (*n).into(),
                reservation: Bandwidth::ZERO,
                shares: Shares::new(50).expect("shares"),
                limit: None,
            };
            tree.add(NodeId::ROOT, spec).expect("leaf")
        })
        .collect();
    (tree, leaves)
}

fn uplink_plans(rate: Bandwidth) -> Vec<UplinkPlan> {
    ["u1", "u2"]
        .map(|n| UplinkPlan {
            name: n.into(),
            interface: n.into(),
            capacity: rate,
            follows_link_speed: false,
            admin_up: true,
            backend: BackendChoice::AfPacket,
        })
        .to_vec()
}

/// Planned ports in group 0, each `(name, tap, MAC)` on its leaf, numbered from `first`.
fn plans(ports: &[(&str, &str, MacAddr)], leaves: &[NodeId], first: u32) -> Vec<PortPlan> {
    (ports.iter().zip(leaves).enumerate())
        .map(|(i, (&(name, tap, mac), &leaf))| PortPlan {
            id: PortId(first + i as u32),
            name: name.into(),
            interface: tap.into(),
            mac,
            group: GroupId(0),
            leaf,
            backend: BackendChoice::AfPacket,
            mac_takeover: false,
        })
        .collect()
}

impl Rig {
    /// The rig with `workers` data-plane threads, every device taking offloads (AF_PACKET's),
    /// no busy polling.
    fn new(rate: Bandwidth, workers: usize) -> Rig {
        Rig::with(rate, workers, true, Duration::ZERO)
    }

    /// The rig; `uplink_offloads`: the uplinks' devices take offloads (false: as AF_XDP's).
    fn with(rate: Bandwidth, workers: usize, uplink_offloads: bool, busy_poll: Duration) -> Rig {
        let fake = FakePlatform::new();
        for (name, mac) in [("u1", [2, 0xee, 0, 0, 0, 1]), ("u2", [2, 0xee, 0, 0, 0, 2])] {
            let props = FakeInterface {
                takes_offloads: uplink_offloads,
                ..FakeInterface::with_mac(MacAddr(mac))
            };
            fake.add(name, props);
        }
        for (name, mac) in [("tap1", [0xfe, 0, 0, 0, 0, 1]), ("tap2", [0xfe, 0, 0, 0, 0, 2])] {
            fake.add(name, FakeInterface::with_mac(MacAddr(mac)));
        }
        let (tree, leaves) = tree(&["vm1", "vm2"]);
        let ports = plans(&[("vm1", "tap1", VM1), ("vm2", "tap2", VM2)], &leaves, 1);
        let plan = DatapathPlan {
            team: team(rate, &[(PortId(1), VM1), (PortId(2), VM2)]),
            tree,
            reservation_cap: ReservationCap::default(),
            ports,
            uplinks: uplink_plans(rate),
            switch: SwitchConfig::default(),
            busy_poll,
            workers,
            rx: RxPlan::default(),
        };
        let events = Arc::new(Mutex::new(Vec::new()));
        let seen = events.clone();
        let options = AttachOptions {
            events: Some(Arc::new(move |e: &Event| seen.lock().unwrap().push(e.clone()))),
            ..AttachOptions::default()
        };
        let dp = Datapath::attach_on(fake.clone(), plan, options).expect("attach");
        Rig { fake, dp, events }
    }

    /// Turns the loop `n` times, the clock still.
    fn turns(&mut self, n: usize) {
        for _ in 0..n {
            self.dp.turn(&mut ());
        }
    }

    /// Turns the loop until `done` holds, at most 500 turns (a port worker's thread runs on its
    /// own; each turn waits at most 10 ms for it).
    fn until(&mut self, what: &str, mut done: impl FnMut(&mut Rig) -> bool) {
        for _ in 0..500 {
            if done(self) {
                return;
            }
            self.dp.turn(&mut ());
        }
        panic!("{what}: not within 500 turns");
    }

    /// Frames sent on `name` since the last look, other than the switch's own announcements
    /// (RARPs).
    fn wire(&self, name: &str) -> Vec<Frame> {
        let rarp = |f: &Frame| f.bytes.get(12..14) == Some(&[0x80, 0x35]);
        self.fake.take_wire(name).into_iter().filter(|f| !rarp(f)).collect()
    }

    fn port(&self, name: &str) -> &Port<crate::fake::FakeDevice> {
        self.dp.ports().iter().find(|p| p.plan.name == name).expect("port")
    }

    fn saw(&self, kind: &str, text: &str) -> bool {
        let events = self.events.lock().unwrap();
        events.iter().any(|e| e.kind == kind && e.message.contains(text))
    }
}

/// A VM's frame leaves by its port group's active uplink, and a reply to the VM's MAC comes
/// back to its tap only: the whole turn, on the fake.
#[test]
fn a_frame_crosses_the_switch_both_ways() {
    let mut rig = Rig::new(Bandwidth::from_gbps(10), 1);
    let out = udp(VM1, OUTSIDE, 200);
    rig.fake.inject("tap1", Frame::complete(out.clone()));
    rig.turns(2);
    let sent = rig.wire("u1");
    assert_eq!(sent.len(), 1, "one frame on the active uplink");
    assert_eq!(sent[0].bytes, out);
    assert!(rig.wire("u2").is_empty(), "nothing on the standby");
    let back = udp(OUTSIDE, VM1, 300);
    rig.fake.inject("u1", Frame::complete(back.clone()));
    rig.turns(2);
    assert_eq!(rig.wire("tap1").iter().map(|f| &f.bytes).collect::<Vec<_>>(), [&back]);
    assert!(rig.wire("tap2").is_empty(), "a known MAC is not flooded");
    assert!(
        rig.saw("start", "switching 2 ports on 2 uplinks"),
        "events reach the sink"
    );
}

/// Carrier lost on the active uplink: the port's traffic moves to the standby within the turn
/// that sees it, the move and the failover are counted, and the port's MAC is announced there.
#[test]
fn a_lost_carrier_fails_the_port_over_to_the_standby() {
    let mut rig = Rig::new(Bandwidth::from_gbps(10), 1);
    rig.fake.inject("tap1", Frame::complete(udp(VM1, OUTSIDE, 100)));
    rig.turns(2);
    assert_eq!(rig.wire("u1").len(), 1);
    rig.fake.set_carrier("u1", false);
    rig.turns(1);
    assert_eq!(rig.dp.failovers(), 1);
    let rarps: Vec<Frame> = rig.fake.take_wire("u2");
    assert!(
        rarps.iter().any(|f| f.bytes.get(6..12) == Some(&VM1.0[..])),
        "notify-switch frame for vm1 on u2"
    );
    rig.fake.inject("tap1", Frame::complete(udp(VM1, OUTSIDE, 100)));
    rig.turns(2);
    assert_eq!(rig.wire("u2").len(), 1, "after failover: the standby");
    assert!(rig.wire("u1").is_empty());
    assert!(rig.dp.moves().any(|m| m.port == "vm1" && m.to.as_deref() == Some("u2")));
    // Carrier back: failback.
    rig.fake.set_carrier("u1", true);
    rig.turns(1);
    rig.fake.inject("tap1", Frame::complete(udp(VM1, OUTSIDE, 100)));
    rig.turns(2);
    assert_eq!(rig.wire("u1").len(), 1, "failback to u1");
}

/// An uplink of 10 Mbit/s sends at 10 Mbit/s: a VM offering 16 Mbit/s has 10 of them sent,
/// the pacer letting out what accrues as the clock moves, the rest waiting in NetIOC.
#[test]
fn an_uplink_is_paced_at_its_capacity() {
    let mut rig = Rig::new(Bandwidth::from_mbps(10), 1);
    // A turn a millisecond, as the loop wakes when the pacer's next batch is due (it accrues
    // no more than its burst between two turns); two 1000-byte frames offered in each.
    let step = |rig: &mut Rig| {
        for _ in 0..2 {
            rig.fake.inject("tap1", Frame::complete(udp(VM1, OUTSIDE, 1000)));
        }
        rig.fake.advance(Duration::from_millis(1));
        rig.turns(1);
        rig.wire("u1").iter().map(|f| f.bytes.len()).sum::<usize>()
    };
    for _ in 0..20 {
        step(&mut rig);
    }
    let bytes: usize = (0..200).map(|_| step(&mut rig)).sum();
    // 200 ms at 10 Mbit/s is 250,000 bytes; the pacer's balance is within a frame and a burst
    // (3036 bytes) either side.
    assert!((246_000..=254_000).contains(&bytes), "{bytes} bytes in 200 ms");
    assert!(rig.dp.queued_bytes(0) > 0, "the excess waits in NetIOC");
    assert!(rig.port("vm1").extra.queue_full > 0, "and beyond its budget is dropped");
    // Held down by the uplink: its queue held its frames all along (220 turns of 1 ms, less
    // the few before it filled), and what was turned away is counted in wire bytes (1000-byte frames).
    let q = rig.port("vm1").queue;
    assert!((200_000_000..=220_000_000).contains(&q.backlog_ns), "{q:?}");
    let x = rig.port("vm1").extra.queue_full;
    assert!(
        q.dropped_bytes >= x * 1000 && q.dropped_bytes <= x * 1100,
        "{q:?} for {x} frames"
    );
}

/// NetIOC's queue for an uplink is bounded: a VM sending far more than the uplink carries
/// has the excess dropped at its own queue (`queue_full`), never more queued than the budget.
#[test]
fn an_uplink_queue_holds_no_more_than_its_budget() {
    let mut rig = Rig::new(Bandwidth::from_mbps(1), 1);
    let budget = rig.dp.queue_budget(0);
    let mut offered = 0u64;
    for _ in 0..20 {
        for _ in 0..100 {
            rig.fake.inject("tap1", Frame::complete(udp(VM1, OUTSIDE, 1500)));
            offered += 1;
        }
        rig.turns(2);
        assert!(
            rig.dp.queued_bytes(0) <= budget,
            "{} > {budget}",
            rig.dp.queued_bytes(0)
        );
    }
    let dropped = rig.port("vm1").extra.queue_full;
    let queued = rig.dp.queued(0, rig.port("vm1").plan.leaf) as u64;
    let sent = rig.wire("u1").len() as u64;
    assert!(dropped > 0, "the excess is dropped");
    assert_eq!(sent + queued + dropped, offered, "every frame accounted for");
    assert_eq!(rig.port("vm2").extra.queue_full, 0, "another VM's queue is not charged");
}

/// Segments of a super-frame as the wire carries them: complete, each within the MTU, well
/// formed, their bytes the super-frame's wire length.
fn assert_cut(sent: &[Frame], wire_len: usize) {
    assert_eq!(sent.len(), 3, "cut into its three segments");
    for s in sent {
        assert!(s.offload.is_none(), "complete frames");
        assert!(s.bytes.len() <= 1514, "{} bytes", s.bytes.len());
        etherparse::SlicedPacket::from_ethernet(&s.bytes).expect("a well-formed segment");
    }
    assert_eq!(sent.iter().map(|s| s.bytes.len()).sum::<usize>(), wire_len);
}

/// A super-frame leaves whole where the egress device takes offloads and its pacer's burst
/// holds it, and is cut into complete segments where either does not: an uplink that takes
/// complete frames only (AF_XDP's), or a 10 Mbit/s uplink whose burst (3036 bytes) is shorter
/// than the super-frame, which would otherwise leave in one burst hidden from the pacing.
#[test]
fn super_frames_are_cut_only_where_the_egress_needs_it() {
    let big = || tcp_super(VM1, OUTSIDE, 1448, 3);
    let wire_len = big().wire_len();
    // Uplinks that take offloads, at 10 Gbit/s: whole.
    let mut rig = Rig::new(Bandwidth::from_gbps(10), 1);
    rig.fake.inject("tap1", big());
    rig.turns(2);
    let sent = rig.wire("u1");
    assert_eq!(sent.len(), 1, "whole");
    assert_eq!(sent[0].offload.gso.map(|g| g.size), Some(1448));
    assert_eq!(sent[0].wire_len(), wire_len);
    // The same the other way, to a tap.
    rig.fake.inject("u1", tcp_super(OUTSIDE, VM1, 1448, 3));
    rig.turns(2);
    let got = rig.wire("tap1");
    assert_eq!(got.len(), 1, "whole to the tap");
    assert!(got[0].offload.gso.is_some());
    // Uplinks that take complete frames only: cut.
    let mut rig = Rig::with(Bandwidth::from_gbps(10), 1, false, Duration::ZERO);
    rig.fake.inject("tap1", big());
    rig.turns(2);
    assert_cut(&rig.wire("u1"), wire_len);
    // Uplinks that take offloads, paced at 10 Mbit/s: cut for the pacer.
    let mut rig = Rig::new(Bandwidth::from_mbps(10), 1);
    rig.fake.inject("tap1", big());
    rig.turns(2);
    rig.fake.advance(Duration::from_millis(10));
    rig.turns(1);
    assert_cut(&rig.wire("u1"), wire_len);
}

/// A device that takes nothing (its queue full) holds the uplink back: frames wait in NetIOC,
/// none is lost or sent out of order, and they go when the device takes frames again.
#[test]
fn a_busy_device_holds_frames_in_netioc() {
    let mut rig = Rig::new(Bandwidth::from_gbps(10), 1);
    rig.fake.set_tx_room("u1", Some(0));
    // A batch (64) fills the device's own queue; the rest wait in NetIOC.
    for i in 0..100 {
        rig.fake.inject("tap1", Frame::complete(udp(VM1, OUTSIDE, 100 + i)));
    }
    rig.turns(3);
    assert!(rig.wire("u1").is_empty(), "the device took nothing");
    let leaf = rig.port("vm1").plan.leaf;
    assert_eq!(
        rig.dp.queued(0, leaf),
        100 - crate::device::TX_BATCH,
        "frames wait in NetIOC"
    );
    // The port's tally: all taken, none turned away, and no time backlogged yet (its frames
    // all came at one instant).
    let q = rig.port("vm1").queue;
    assert_eq!((q.taken, q.backlog_ns, q.marked, q.dropped_bytes), (100, 0, 0, 0));
    rig.fake.set_tx_room("u1", None);
    rig.fake.advance(Duration::from_millis(1));
    rig.turns(3);
    let sent = rig.wire("u1");
    let lens: Vec<usize> = sent.iter().map(|f| f.bytes.len()).collect();
    assert_eq!(lens, (100..200).collect::<Vec<_>>(), "all hundred, in order");
    let x = &rig.port("vm1").extra;
    assert_eq!((x.queue_full, x.tx_error), (0, 0));
    assert_eq!(rig.dp.uplinks()[0].extra.tx_error, 0);
}

/// Busy polling is bounded by the wall clock whatever the platform's clock does: with the fake
/// clock standing still, a turn after frames still ends.
#[test]
fn busy_polling_ends_though_the_clock_stands_still() {
    let mut rig = Rig::with(Bandwidth::from_gbps(10), 1, true, Duration::from_millis(2));
    rig.fake.inject("tap1", Frame::complete(udp(VM1, OUTSIDE, 100)));
    let started = std::time::Instant::now();
    rig.turns(5);
    assert_eq!(rig.wire("u1").len(), 1);
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

/// Ports come and go while traffic flows: a port removed stops receiving at once and its
/// frames queued on the uplink are dropped; a port added switches from its first frame; the
/// other port's frames already queued go on.
#[test]
fn ports_come_and_go_mid_stream() {
    let rate = Bandwidth::from_mbps(10);
    let mut rig = Rig::new(rate, 1);
    // vm1 and vm2 each queue more than the pacer lets out at once (its burst is 3036 bytes).
    for _ in 0..10 {
        rig.fake.inject("tap1", Frame::complete(udp(VM1, OUTSIDE, 1000)));
        rig.fake.inject("tap2", Frame::complete(udp(VM2, OUTSIDE, 1000)));
    }
    rig.turns(2);
    let early = rig.wire("u1");
    let leaf = |rig: &Rig, name: &str| rig.port(name).plan.leaf;
    let (vm1_queued, vm2_queued) = (rig.dp.queued(0, leaf(&rig, "vm1")), rig.dp.queued(0, leaf(&rig, "vm2")));
    assert!(vm1_queued > 0 && vm2_queued > 0, "{vm1_queued} and {vm2_queued} queued");
    // vm1 goes, vm3 comes on tap3; vm2 stays.
    rig.fake
        .add("tap3", FakeInterface::with_mac(MacAddr([0xfe, 0, 0, 0, 0, 3])));
    let vm3 = MacAddr([2, 0, 0, 0, 0, 3]);
    let (tree, leaves) = tree(&["vm2", "vm3"]);
    // The IDs are ignored: a port the switch has keeps its own, one it adds gets a free one.
    let want = plans(&[("vm2", "tap2", VM2), ("vm3", "tap3", vm3)], &leaves, 0);
    let now = rig.dp.now();
    rig.dp.reconfigure(
        tree,
        &want,
        &[(group(), SecurityPolicy::default())],
        &uplink_plans(rate),
        now,
    );
    assert!(rig.saw("port", "port vm1: removed"));
    assert!(rig.saw("port", "port vm3: added on interface tap3"));
    assert_eq!(
        rig.dp.queued(0, leaf(&rig, "vm2")),
        vm2_queued,
        "vm2's queued frames stay"
    );
    assert_eq!(rig.dp.queued_bytes(0), vm2_queued as u64 * 1000, "vm1's are dropped");
    rig.fake.inject("tap3", Frame::complete(udp(vm3, OUTSIDE, 400)));
    rig.fake.inject("u1", Frame::complete(udp(OUTSIDE, VM1, 300)));
    for _ in 0..20 {
        rig.fake.advance(Duration::from_millis(1));
        rig.turns(1);
    }
    let sent: Vec<Frame> = early.into_iter().chain(rig.wire("u1")).collect();
    let from = |mac: MacAddr| sent.iter().filter(|f| f.bytes[6..12] == mac.0).count();
    assert_eq!(from(VM2), 10, "vm2's stream went on, all of it");
    assert_eq!(from(VM1), 10 - vm1_queued, "vm1's queued frames never left");
    assert_eq!(from(vm3), 1, "vm3 switches from its first frame");
    assert!(rig.wire("tap1").is_empty(), "a removed port receives nothing");
    assert!(rig.dp.ports().iter().all(|p| !p.present() || p.plan.name != "vm1"));
}

/// A VM's tap goes away and comes back with a new index (the VM restarted): the port detaches
/// and re-attaches by name, and frames flow again.
#[test]
fn a_tap_that_returns_is_attached_again() {
    let mut rig = Rig::new(Bandwidth::from_gbps(10), 1);
    rig.fake.remove("tap1");
    rig.turns(1);
    assert!(!rig.port("vm1").attached());
    rig.fake.inject("u1", Frame::complete(udp(OUTSIDE, VM1, 300)));
    rig.turns(2);
    // Its MAC went with its interface: the frame is for no port here, dropped and counted.
    assert!(rig.wire("tap1").is_empty(), "nothing reaches a detached port");
    assert!(rig.wire("tap2").is_empty());
    let c = rig.dp.switch().uplink_counters(UplinkId(0)).expect("u1's counters");
    assert_eq!((c.rx_packets, c.total_drops()), (1, 1));
    rig.fake
        .add("tap1", FakeInterface::with_mac(MacAddr([0xfe, 0, 0, 0, 0, 1])));
    rig.turns(1);
    assert!(rig.port("vm1").attached());
    assert!(rig.saw("attach", "port vm1: attached to tap1"));
    rig.fake.inject("tap1", Frame::complete(udp(VM1, OUTSIDE, 100)));
    rig.turns(2);
    assert_eq!(rig.wire("u1").len(), 1);
}

/// With two data-plane threads, a port worker does the port's I/O and hands frames to the
/// switching worker and back: both directions arrive, on a real second thread.
#[test]
fn a_port_worker_hands_frames_both_ways() {
    let mut rig = Rig::new(Bandwidth::from_gbps(10), 2);
    assert!(
        rig.dp.ports().iter().any(|p| p.worker() == Some(1)),
        "a port on the port worker"
    );
    for _ in 0..50 {
        rig.fake.inject("tap1", Frame::complete(udp(VM1, OUTSIDE, 200)));
        rig.fake.inject("tap2", Frame::complete(udp(VM2, OUTSIDE, 200)));
    }
    let mut out = 0;
    rig.until("100 frames out", |r| {
        out += r.wire("u1").len();
        out == 100
    });
    for _ in 0..20 {
        rig.fake.inject("u1", Frame::complete(udp(OUTSIDE, VM1, 200)));
        rig.fake.inject("u1", Frame::complete(udp(OUTSIDE, VM2, 200)));
    }
    let (mut a, mut b) = (0, 0);
    rig.until("20 frames to each tap", |r| {
        a += r.wire("tap1").len();
        b += r.wire("tap2").len();
        a == 20 && b == 20
    });
}
