//! A switch-independent group whose policy spreads a port over members (Address Hash, Dynamic):
//! frames on another member than the port's carry that member's MAC, broadcasts stay on the
//! port's member, and nothing changes in a switch-dependent group. Also what reaches LACP: never
//! a VM's slow-protocol frames, and a Marker flood only a bounded number of answers.

use super::tests::{mac, targets, REMOTE};
use super::*;
use crate::teaming::{FailoverOrder, LbtConfig, Policy, PortGroupSpec, PortSpec, TeamMode};
use etherparse::PacketBuilder;

const UPLINK_MACS: [[u8; 6]; 2] = [[0x0e, 0, 0, 0, 0, 0xa1], [0x0e, 0, 0, 0, 0, 0xa2]];

fn switch(policy: Policy, mode: TeamMode) -> Switch {
    let mut t = Team::new(crate::teaming::tests::uplinks(&[10.0, 10.0]), LbtConfig::default()).unwrap();
    t.add_group(PortGroupSpec {
        name: "vms".into(),
        policy,
        order: FailoverOrder {
            active: vec![UplinkId(0), UplinkId(1)],
            standby: vec![],
        },
        failback: true,
        notify_switches: true,
        vlan: None,
        mode,
        tuning: Default::default(),
        lacp: Default::default(),
    })
    .unwrap();
    t.add_port(PortSpec {
        id: PortId(1),
        mac: mac(1),
        group: GroupId(0),
    })
    .unwrap();
    let mut s = Switch::with_config(t, SwitchConfig::default());
    for (u, m) in UPLINK_MACS.iter().enumerate() {
        s.set_uplink_mac(UplinkId(u), Some(MacAddr(*m)));
    }
    // The remote host is known (a reply came in on uplink 1).
    s.ingress(
        Ingress::Uplink(UplinkId(0)),
        &tcp(REMOTE, mac(1).0, 80, 9),
        Instant::ZERO,
    );
    s
}

fn tcp(src: [u8; 6], dst: [u8; 6], sport: u16, dport: u16) -> Vec<u8> {
    let mut f = Vec::new();
    PacketBuilder::ethernet2(src, dst)
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .tcp(sport, dport, 1, 1000)
        .write(&mut f, &[7; 20])
        .unwrap();
    f
}

/// Per uplink, the source MACs of port 1's frames to the remote host over 64 flows.
fn sources(s: &mut Switch) -> [Vec<[u8; 6]>; 2] {
    let mut seen: [Vec<[u8; 6]>; 2] = [vec![], vec![]];
    for sport in 0..64 {
        let out = s.ingress(
            Ingress::Port(PortId(1)),
            &tcp(mac(1).0, REMOTE, 40_000 + sport, 80),
            Instant::ZERO,
        );
        let Egress::Uplink(u) = out[0].to else {
            panic!("{out:?}")
        };
        let src: [u8; 6] = out[0].frame[6..12].try_into().unwrap();
        if !seen[u.0].contains(&src) {
            seen[u.0].push(src);
        }
    }
    seen
}

#[test]
fn a_spread_port_shows_its_mac_on_its_own_member_only() {
    for policy in [Policy::ADDRESS_HASH, Policy::DYNAMIC] {
        let mut s = switch(policy, TeamMode::SwitchIndependent);
        let own = s.team().port_uplink(PortId(1)).unwrap();
        let other = UplinkId(1 - own.0);
        let seen = sources(&mut s);
        assert_eq!(seen[own.0], [mac(1).0], "{policy}: the port's own member");
        assert_eq!(seen[other.0], [UPLINK_MACS[other.0]], "{policy}: the other member");
        // A broadcast goes on the port's own member, from the port's MAC.
        let out = s.ingress(Ingress::Port(PortId(1)), &tcp(mac(1).0, [0xff; 6], 1, 2), Instant::ZERO);
        assert_eq!(targets(&out), [Egress::Uplink(own)], "{policy}");
        assert_eq!(&out[0].frame[6..12], &mac(1).0);
    }
}

#[test]
fn nothing_is_rewritten_in_a_bundle_or_under_ip_hash() {
    for (policy, mode) in [
        (Policy::ADDRESS_HASH, TeamMode::Static),
        (Policy::DYNAMIC, TeamMode::Static),
        (Policy::IP_HASH_L4, TeamMode::SwitchIndependent),
    ] {
        let mut s = switch(policy, mode);
        let seen = sources(&mut s);
        for u in 0..2 {
            assert!(seen[u].iter().all(|m| *m == mac(1).0), "{policy} {mode}: {seen:?}");
        }
        assert!(
            !seen[0].is_empty() && !seen[1].is_empty(),
            "{policy} {mode}: not spread"
        );
    }
}

#[test]
fn lacpdus_leave_from_their_uplinks_own_mac() {
    let mut s = switch(Policy::ADDRESS_HASH, TeamMode::Lacp);
    s.handle_timeout(Instant::from_millis(10));
    let mut seen = Vec::new();
    while let Some(e) = s.poll_effect() {
        if let crate::teaming::Effect::Transmit { uplink, frame } = e {
            if crate::wire::lacp::is_slow(&frame) {
                seen.push((uplink.0, <[u8; 6]>::try_from(&frame[6..12]).unwrap()));
            }
        }
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen, [(0, UPLINK_MACS[0]), (1, UPLINK_MACS[1])]);
}

/// A Marker PDU (not a response) from the partner, transaction `n`.
fn marker(n: u32) -> Vec<u8> {
    let mut f = vec![0x01, 0x80, 0xc2, 0, 0, 2, 2, 0, 0, 0, 0, 9, 0x88, 0x09];
    f.extend_from_slice(&[2, 1, 1, 16, 0, 3, 2, 0, 0, 0, 0, 9]);
    f.extend_from_slice(&n.to_be_bytes());
    f.resize(60, 0);
    f
}

#[test]
fn a_vm_cannot_speak_lacp_for_the_team() {
    let mut s = switch(Policy::ADDRESS_HASH, TeamMode::Lacp);
    s.handle_timeout(Instant::ZERO);
    let forged = crate::wire::lacp::Lacpdu {
        actor: crate::wire::lacp::LacpInfo {
            system_priority: 1,
            system: MacAddr([2, 0xba, 0xd, 0, 0, 1]),
            key: 1,
            port_priority: 1,
            port: 1,
            state: 0x3d,
        },
        ..Default::default()
    };
    let frame = crate::wire::lacp::build_lacpdu(mac(1), &forged);
    let before = s.team().lacp().member(UplinkId(0)).unwrap().partner;
    let out = s.ingress(Ingress::Port(PortId(1)), &frame, Instant::from_millis(1));
    assert!(out.is_empty(), "a VM's LACPDU went somewhere: {out:?}");
    assert_eq!(s.port_counters(PortId(1)).unwrap().drops(DropReason::SlowProtocol), 1);
    for u in 0..2 {
        let m = s.team().lacp().member(UplinkId(u)).unwrap();
        assert_eq!(m.counters.rx_lacpdus, 0);
        assert_ne!(m.partner.system, forged.actor.system);
    }
    assert_eq!(s.team().lacp().member(UplinkId(0)).unwrap().partner, before);
}

#[test]
fn a_marker_flood_gets_five_answers_a_second() {
    let mut s = switch(Policy::ADDRESS_HASH, TeamMode::Lacp);
    let answers = |s: &mut Switch| {
        let mut n = 0;
        while let Some(e) = s.poll_effect() {
            if let crate::teaming::Effect::Transmit { frame, .. } = e {
                n += usize::from(matches!(
                    crate::wire::lacp::parse_slow(&frame),
                    Ok(crate::wire::lacp::SlowPdu::Marker(m)) if m.response
                ));
            }
        }
        n
    };
    answers(&mut s);
    for k in 0..10_000 {
        s.ingress(Ingress::Uplink(UplinkId(0)), &marker(k), Instant::from_millis(5));
    }
    assert_eq!(answers(&mut s), 5);
    // A second later, five more; the other member never answered for the flood.
    for k in 0..100 {
        s.ingress(Ingress::Uplink(UplinkId(0)), &marker(k), Instant::from_millis(1005));
    }
    assert_eq!(answers(&mut s), 5);
    let c = s.team().lacp().member(UplinkId(0)).unwrap().counters;
    assert_eq!((c.rx_markers, c.tx_marker_responses), (10_100, 10));
    assert_eq!(s.team().lacp().member(UplinkId(1)).unwrap().counters.rx_markers, 0);
}
