//! One engine, proven: random frames through the engine (`core::Switch::forward`) and through the
//! kernel path's program (BPF_PROG_TEST_RUN), the same frame to both, each verdict compared:
//! output ports and uplinks, VLAN edit, source rewrite, drop reason; and the two MAC tables
//! compared as they grow. Where the program punts (hands the frame to the engine), the punt must
//! be one the program's contract names, and the engine's answer stands.
//!
//! Needs root (BPF, a network namespace of its own for the interfaces the program is run on).
//! Without it the test fails when TEAMSTER_REQUIRE_LIVE is set (CI), else says why and passes.

mod common;

use common::{Frames, Rig};
use teamster_kernel::{abi, Tables};

#[test]
fn the_kernel_path_decides_every_frame_as_the_engine_does() {
    let Some(mut rig) = Rig::new_or_skip() else { return };
    let mut frames = Frames::new(20261127);
    let mut punts = std::collections::BTreeMap::<u8, u64>::new();
    let mut compared = 0u64;
    let total = 6000;
    for n in 0..total {
        // The team changes under the traffic: an uplink fails and comes back.
        if n == total / 3 {
            rig.set_uplink(0, false);
        }
        if n == total / 2 {
            rig.set_uplink(1, false);
        }
        if n == 2 * total / 3 {
            rig.set_uplink(0, true);
            rig.set_uplink(1, true);
        }
        // The engine's timers: the flowlet rebalance moves targets under the traffic.
        if n % 50 == 0 {
            rig.tick();
        }
        let (from, frame) = frames.next(&rig);
        match rig.compare(from, &frame) {
            Ok(Some(punt)) => *punts.entry(punt).or_default() += 1,
            Ok(None) => compared += 1,
            Err(why) => panic!("frame {n} from {from:?} ({} bytes) {frame:02x?}:\n{why}", frame.len()),
        }
        if n % 250 == 0 {
            rig.compare_mac_tables()
                .unwrap_or_else(|why| panic!("after frame {n}: {why}"));
            rig.compare_flowlets()
                .unwrap_or_else(|why| panic!("after frame {n}: {why}"));
        }
    }
    rig.compare_mac_tables().expect("MAC tables at the end");
    rig.compare_flowlets().expect("flowlet buckets at the end");
    let punted: u64 = punts.values().sum();
    let (_, moves) = rig
        .switch
        .team()
        .flowlets(common::FLOWLET_GROUP, teamster_core::Instant::ZERO)
        .expect("a flowlet group");
    eprintln!(
        "compared {compared} verdicts, {punted} punted by reason {punts:?}; flowlet group: {} compared, {} undecided, {moves:?}; {}",
        rig.flowlet_compared,
        rig.flowlet_undecided,
        rig.summary()
    );
    assert!(
        rig.flowlet_compared > 50,
        "{} flowlet frames compared",
        rig.flowlet_compared
    );
    // The comparison is worth something only if the frames reached every kind of decision.
    rig.assert_coverage();
    // Each punt was checked against the contract's reasons above; most frames must be decided
    // in the kernel for the comparison to mean anything.
    assert!(
        compared > total * 4 / 5,
        "only {compared} of {total} compared: {punts:?}"
    );
}

/// Dynamic's flowlet buckets in the kernel decide as the engine's: frames from the flowlet
/// group's two ports only, with the rebalance moving targets, the group's active members
/// failing and returning under the traffic (both at once for a while: new buckets are placed on
/// the standby, with no target), an uplink's interface removed and back, and the group's order
/// changed (a target becomes a standby); each verdict and every bucket's member compared, and
/// a bucket handed to the engine only while it is not placed.
#[test]
fn flowlet_buckets_decide_as_the_engine_does() {
    let Some(mut rig) = Rig::new_or_skip() else { return };
    let mut frames = Frames::from_ports(20261128, &[11, 12]);
    let total = 5000;
    for n in 0..total {
        match n {
            _ if n == total / 4 => rig.set_uplink(0, false),
            _ if n == total / 2 => rig.set_uplink(1, false),
            _ if n == 5 * total / 8 => rig.set_uplink(0, true),
            _ if n == 3 * total / 4 => rig.set_uplink(1, true),
            // Uplink 1's interface goes (a NIC removed), then comes back: buckets aimed at it
            // take their hashed member meanwhile, never the engine.
            _ if n == 25 * total / 32 => rig.set_uplink_interface(1, false),
            _ if n == 27 * total / 32 => rig.set_uplink_interface(1, true),
            // Targets on uplink 0 now name a standby: their next flowlets take their hash's.
            _ if n == 7 * total / 8 => rig.set_order(common::FLOWLET_GROUP, &[1, 2], &[0]),
            _ => {}
        }
        if n % 40 == 0 {
            rig.tick();
        }
        let (from, frame) = frames.next(&rig);
        if let Err(why) = rig.compare(from, &frame) {
            panic!("frame {n} from {from:?} ({} bytes) {frame:02x?}:\n{why}", frame.len());
        }
        if n % 100 == 0 {
            rig.compare_flowlets()
                .unwrap_or_else(|why| panic!("after frame {n}: {why}"));
        }
    }
    rig.compare_flowlets().expect("flowlet buckets at the end");
    let (_, moves) = rig
        .switch
        .team()
        .flowlets(common::FLOWLET_GROUP, teamster_core::Instant::ZERO)
        .expect("a flowlet group");
    eprintln!(
        "flowlet group: {} compared, {} undecided, {moves:?}",
        rig.flowlet_compared, rig.flowlet_undecided
    );
    // The frames reached every decision: kept within a burst, moved to a new target at a
    // flowlet's start, moved at once off a failed member.
    assert!(rig.flowlet_compared > 1000, "{} compared", rig.flowlet_compared);
    assert!(
        moves.retargets > 0 && moves.flowlet_moves > 0 && moves.forced_moves > 0,
        "{moves:?}"
    );
}

/// What the program sends in a flowlet bucket reaches the engine (the daemon's pull every
/// 100 ms): its bytes, when it last sent, and the member it took, so the engine's rebalance and
/// its view of the members' shares count traffic the engine never saw.
#[test]
fn what_the_kernel_sends_in_a_bucket_reaches_the_engine() {
    let Some(mut rig) = Rig::new_or_skip() else { return };
    let from = teamster_core::switch::Ingress::Port(teamster_core::teaming::PortId(11));
    let frame = |k: u8| {
        let mut f = vec![0x0a, 0, 0, 0, 1, k];
        f.extend_from_slice(&common::port_mac(11).0);
        f.extend_from_slice(&[0x88, 0xb5]);
        f.extend_from_slice(&[0u8; 486]);
        f
    };
    // Each flow's first frame: handed to the engine, which places its bucket.
    for k in 0..4 {
        assert_eq!(
            rig.compare(from, &frame(k)),
            Ok(Some(10)),
            "flow {k}: placed by the engine"
        );
    }
    let placed: Vec<usize> = rig
        .flowlet_buckets()
        .iter()
        .enumerate()
        .filter(|(_, b)| b.target.is_some())
        .map(|(i, _)| i)
        .collect();
    assert!(!placed.is_empty());
    assert_eq!(rig.pull_flowlets(), 0, "nothing sent by the kernel yet");
    let before = rig.flowlet_buckets();
    // Then the program alone sends them.
    let (ifindex, _) = rig.ingress_slot(from);
    for _ in 0..100 {
        for k in 0..4 {
            let (_, v) = rig.program().run(ifindex, &frame(k), 0).expect("runs");
            assert!(v.punt == 0 && v.count > 0, "flow {k}: switched in the kernel");
        }
    }
    assert_eq!(rig.pull_flowlets(), placed.len(), "every placed bucket sent");
    let after = rig.flowlet_buckets();
    for b in &placed {
        assert!(
            after[*b].last_seen > before[*b].last_seen,
            "bucket {b}: {:?}",
            after[*b]
        );
        assert_eq!(after[*b].current, before[*b].current, "bucket {b}: within its burst");
    }
    // The next rebalance takes the kernel's bytes in: the members' shares carry them.
    let last = placed.iter().filter_map(|b| after[*b].last_seen).max().unwrap();
    let at = rig.switch.team().poll_at().unwrap().max(last);
    rig.switch.team_mut().handle_timeout(at);
    let (shares, _) = rig.switch.team().flowlets(common::FLOWLET_GROUP, at).unwrap();
    let buckets: u32 = shares.iter().map(|s| s.active_buckets).sum();
    let bps: f64 = shares.iter().map(|s| s.bps).sum();
    assert_eq!(buckets as usize, placed.len(), "{shares:?}");
    // 100 frames of 500 bytes in each bucket (and the engine's own first), as a rate over
    // the rebalance interval: well above what the first frames alone give.
    assert!(bps > 100.0 * 500.0 * 8.0, "{shares:?}");
    assert_eq!(rig.pull_flowlets(), 0, "told once");
}

/// The hash policies' flows as the kernel sends them reach the engine's flow census (what `ctl
/// group` shows as each member's share): Address Hash and IP hash with ports, eight TCP flows
/// each, sent through the program alone.
#[test]
fn the_hash_policies_census_counts_what_the_kernel_sends() {
    let Some(mut rig) = Rig::new_or_skip() else { return };
    use teamster_core::teaming::{GroupId, PortId};
    assert_eq!(rig.pull_flowlets(), 0, "the counts start");
    let mut sent = std::collections::BTreeMap::<usize, u64>::new();
    for (port, group) in [(9u32, GroupId(4)), (4, GroupId(1))] {
        let from = teamster_core::switch::Ingress::Port(PortId(port));
        let (ifindex, _) = rig.ingress_slot(from);
        for flow in 0..8u16 {
            let b = etherparse::PacketBuilder::ethernet2(common::port_mac(port).0, [0x0a, 0, 0, 0, 1, 3])
                .ipv4([10, 0, 0, 1], [10, 0, 2, 2], 64)
                .tcp(40000 + flow, 443, 1, 1000);
            let mut frame = Vec::new();
            b.write(&mut frame, &[0u8; 200]).unwrap();
            for _ in 0..10 {
                let (_, v) = rig.program().run(ifindex, &frame, 0).expect("runs");
                assert!(v.punt == 0 && v.count > 0, "{v:?}");
                *sent.entry(group.0).or_default() += frame.len() as u64;
            }
        }
    }
    let at = teamster_core::Instant::from_millis(5_000);
    assert!(rig.pull_flowlets_at(at) >= 2, "buckets of both groups counted");
    // The census gives the last whole second's rate.
    let next_second = teamster_core::Instant::from_millis(6_000);
    for g in [GroupId(4), GroupId(1)] {
        let (shares, _) = rig.switch.team().flowlets(g, next_second).unwrap();
        let bits: f64 = shares.iter().map(|s| s.bps).sum();
        let buckets: u32 = shares.iter().map(|s| s.active_buckets).sum();
        assert_eq!(bits, sent[&g.0] as f64 * 8.0, "group {g:?}: {shares:?}");
        assert!(buckets >= 2, "eight flows in more than one bucket: {shares:?}");
    }
}

/// While the engine is gone (no table write for a second: killed, or not started again), a
/// frame in a bucket it never placed is sent on the bucket's hashed member, not handed up to
/// nobody; the bucket stays unplaced, so the engine places it once it is back.
#[test]
fn with_the_engine_gone_a_new_flowlet_is_sent_not_handed_up() {
    let Some(mut rig) = Rig::new_or_skip() else { return };
    let from = teamster_core::switch::Ingress::Port(teamster_core::teaming::PortId(11));
    let mut frame = vec![0x0a, 0, 0, 0, 1, 7];
    frame.extend_from_slice(&common::port_mac(11).0);
    frame.extend_from_slice(&[0x88, 0xb5]);
    frame.extend_from_slice(&[0u8; 46]);
    let (ifindex, _) = rig.ingress_slot(from);
    let long_ago = teamster_kernel::monotonic_ns() - 2_000_000_000;
    rig.program().stamp_engine(long_ago).unwrap();
    for _ in 0..3 {
        let (_, v) = rig.program().run(ifindex, &frame, 0).expect("runs");
        assert_eq!(v.punt, 0, "sent in the kernel while the engine is gone");
        assert!(v.count >= 1, "{v:?}");
    }
    // The engine back: the bucket is still its to place.
    assert_eq!(rig.compare(from, &frame), Ok(Some(10)));
    assert_eq!(
        rig.compare(from, &frame),
        Ok(None),
        "placed: switched in the kernel as the engine does"
    );
}

/// The comparison catches a program that decides differently: the same run with the kernel's
/// tables changed in one way must find a difference. The mutants: one port security flag
/// inverted, the two copies the program reads instead of a map (a port's group policy; that
/// its domain has promiscuous ports) made wrong, Address Hash's fields changed, and the flowlet
/// buckets bypassed.
#[test]
fn a_mutated_table_is_caught() {
    type Mutant = fn(&mut Tables);
    let mutants: [(&str, Mutant); 5] = [
        ("the forged-transmit rule inverted", |t| {
            for i in t.ifaces.values_mut().filter(|i| i.kind == abi::KIND_PORT) {
                i.flags ^= abi::PORT_FORGED_OK;
            }
        }),
        ("every port's group policy read as port ID", |t| {
            for i in t.ifaces.values_mut().filter(|i| i.kind == abi::KIND_PORT) {
                i.policy = abi::POLICY_PORT;
            }
        }),
        ("no port told that its domain has promiscuous ports", |t| {
            for i in t.ifaces.values_mut() {
                i.flags &= !abi::PORT_PROMISCUOUS_PEERS;
            }
        }),
        ("Address Hash over the MACs where the group hashes ports", |t| {
            for g in t.groups.iter_mut().filter(|g| g.policy == abi::POLICY_ADDRESS) {
                g.fields = abi::FIELDS_MAC_ADDRESSES;
            }
        }),
        ("the flowlet group's ports hashing without buckets", |t| {
            for i in t.ifaces.values_mut().filter(|i| i.policy == abi::POLICY_FLOWLET) {
                i.policy = abi::POLICY_ADDRESS;
            }
        }),
    ];
    for (what, mutant) in mutants {
        let Some(mut rig) = Rig::new_or_skip() else { return };
        rig.mutate(mutant);
        let mut frames = Frames::new(7);
        let found = (0..3000).any(|_| {
            let (from, frame) = frames.next(&rig);
            rig.compare(from, &frame).is_err()
        });
        assert!(found, "3000 frames and no difference from a program with {what}");
    }
}

/// A VM sending what the kernel hands up (here MACsec, which the program's parser leaves to the
/// engine) as fast as it can gets at most a burst and its interface's rate through to the
/// engine; the rest is dropped in the kernel and counted.
#[test]
fn what_an_interface_hands_up_is_bounded() {
    let Some(mut rig) = Rig::new_or_skip() else { return };
    let from = teamster_core::switch::Ingress::Port(teamster_core::teaming::PortId(1));
    let mut frame = vec![0x02, 0, 0, 0, 0, 0x77];
    frame.extend_from_slice(&common::port_mac(1).0);
    frame.extend_from_slice(&[0x88, 0xe5]);
    frame.extend_from_slice(&[0u8; 64]);
    let before = rig.kernel_stats(from);
    let started = std::time::Instant::now();
    let sent = 2000u64;
    for _ in 0..sent {
        rig.compare(from, &frame).expect("the same verdict");
    }
    let secs = started.elapsed().as_secs_f64();
    let after = rig.kernel_stats(from);
    let (up, limited) = (after.punted - before.punted, after.punt_limited - before.punt_limited);
    let allowed = 256.0 + f64::from(teamster_kernel::tables::PUNT_RATE) * secs;
    eprintln!("{sent} MACsec frames in {secs:.3} s: {up} handed up (allowed {allowed:.0}), {limited} dropped");
    assert_eq!(up + limited, sent);
    assert!((up as f64) <= allowed + 2.0, "{up} handed up, {allowed:.0} allowed");
    assert!(secs > 0.5 || limited > 0, "none limited in {secs:.3} s");
}

/// A time another CPU wrote after the program read the clock is the present: a port's send
/// stamped a few microseconds after a reflection's arrival still makes it a reflection (the
/// race that, live under a flood, had the program hand a port's own multicast coming back up
/// as a host outside's, and the port yield its MAC), and an address heard "in the future" is
/// known, not aged out.
#[test]
fn a_time_written_after_the_clock_was_read_is_not_the_distant_past() {
    let Some(mut rig) = Rig::new_or_skip() else { return };
    let port = teamster_core::switch::Ingress::Port(teamster_core::teaming::PortId(1));
    let uplink = teamster_core::switch::Ingress::Uplink(teamster_core::teaming::UplinkId(0));
    let frame = |dst: [u8; 6], src: [u8; 6]| {
        let mut f = dst.to_vec();
        f.extend_from_slice(&src);
        f.extend_from_slice(&[0x88, 0xb5]);
        f.extend_from_slice(&[0u8; 50]);
        f
    };
    let (bcast, me) = ([0xff; 6], common::port_mac(1).0);
    // Port 1 sends a broadcast out of its uplink; the program's stamp is then moved 5 ms ahead,
    // as a concurrent send on another CPU would leave it.
    assert_eq!(rig.compare(port, &frame(bcast, me)), Ok(None));
    let (_, slot) = rig.ingress_slot(port);
    let ahead = teamster_kernel::monotonic_ns() + 5_000_000;
    rig.program().mark_sent_out(slot, ahead).unwrap();
    assert_eq!(
        rig.compare(uplink, &frame(bcast, me)),
        Ok(None),
        "the broadcast coming back is a reflection, dropped on both sides"
    );
    // A host behind uplink 0, heard (by the kernel's clock) 5 ms from now: known, so a port's
    // frame to it goes out of one uplink, as the engine sends it, not flooded.
    let host = [0x02, 0x55, 0, 0, 0, 9];
    assert_eq!(rig.compare(uplink, &frame(me, host)), Ok(None));
    let (key, entry) = rig
        .program()
        .fdb()
        .unwrap()
        .into_iter()
        .find(|(k, _)| k.mac == host)
        .expect("the host learned");
    let ahead = teamster_kernel::monotonic_ns() + 5_000_000;
    rig.program().put_learned(key, entry.slot, ahead, false).unwrap();
    assert_eq!(rig.compare(port, &frame(host, me)), Ok(None));
}
