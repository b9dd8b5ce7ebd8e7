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
        let (from, frame) = frames.next(&rig);
        match rig.compare(from, &frame) {
            Ok(Some(punt)) => *punts.entry(punt).or_default() += 1,
            Ok(None) => compared += 1,
            Err(why) => panic!("frame {n} from {from:?} ({} bytes) {frame:02x?}:\n{why}", frame.len()),
        }
        if n % 250 == 0 {
            rig.compare_mac_tables()
                .unwrap_or_else(|why| panic!("after frame {n}: {why}"));
        }
    }
    rig.compare_mac_tables().expect("MAC tables at the end");
    let punted: u64 = punts.values().sum();
    eprintln!(
        "compared {compared} verdicts, {punted} punted by reason {punts:?}; {}",
        rig.summary()
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

/// The comparison catches a program that decides differently: the same run with the kernel's
/// tables changed in one way must find a difference. The mutants: one port security flag
/// inverted, and the two copies the program reads instead of a map (a port's group policy; that
/// its domain has promiscuous ports) made wrong.
#[test]
fn a_mutated_table_is_caught() {
    type Mutant = fn(&mut Tables);
    let mutants: [(&str, Mutant); 3] = [
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
