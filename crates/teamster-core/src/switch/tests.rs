//! Forwarding, VLANs, flooding, loop prevention, ageing and counters.

use super::*;
use crate::teaming::{FailoverOrder, LbtConfig, LinkState, Policy, PortGroupSpec, PortSpec, UplinkSpec};
use crate::units::Bandwidth;
use crate::wire::{build_gratuitous_arp, MacAddr};
use core::net::Ipv4Addr;
use etherparse::{PacketBuilder, VlanId};
use proptest::prelude::*;

pub(super) const REMOTE: [u8; 6] = [0x0a, 0, 0, 0, 0, 0x99];

pub(super) fn mac(n: u8) -> MacAddr {
    MacAddr([0x02, 0, 0, 0, 0, n])
}

/// Two 10G uplinks; group "a" (VLAN 10) with ports 1, 2 and group "b" (VLAN 20) with port 3,
/// all port-ID over both uplinks, security policies all rejected.
fn switch() -> Switch {
    switch_with(SwitchConfig::default())
}

/// The same switch with `config` (ageing, MAC limits, security of groups "a" and "b").
pub(super) fn switch_with(config: SwitchConfig) -> Switch {
    let t = team(
        &[("a", Some(10), true), ("b", Some(20), true)],
        &[(1, 0), (2, 0), (3, 1)],
    );
    Switch::with_config(t, config)
}

/// Two 10G uplinks; port-ID groups over both, each (name, VLAN, notify switches); ports
/// (ID, group index) with MAC `mac(ID)`.
pub(super) fn team(groups: &[(&str, Option<u16>, bool)], ports: &[(u32, usize)]) -> Team {
    let uplinks = (1..=2)
        .map(|i| UplinkSpec {
            name: format!("uplink{i}"),
            capacity: Bandwidth::from_gbps(10),
        })
        .collect();
    let mut t = Team::new(uplinks, LbtConfig::default()).unwrap();
    for (name, vlan, notify) in groups {
        t.add_group(PortGroupSpec {
            mode: Default::default(),
            tuning: Default::default(),
            lacp: Default::default(),
            name: (*name).into(),
            policy: Policy::PORT_ID,
            order: FailoverOrder {
                active: vec![UplinkId(0), UplinkId(1)],
                standby: vec![],
            },
            failback: true,
            notify_switches: *notify,
            vlan: *vlan,
        })
        .unwrap();
    }
    for (id, g) in ports {
        t.add_port(PortSpec {
            id: PortId(*id),
            mac: mac(*id as u8),
            group: GroupId(*g),
        })
        .unwrap();
    }
    t
}

pub(super) fn udp(src: [u8; 6], dst: [u8; 6], vlan: Option<u16>) -> Vec<u8> {
    let mut f = Vec::new();
    let b = PacketBuilder::ethernet2(src, dst);
    match vlan {
        Some(v) => b
            .single_vlan(VlanId::try_new(v).unwrap())
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(1, 2)
            .write(&mut f, &[7; 20]),
        None => b
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(1, 2)
            .write(&mut f, &[7; 20]),
    }
    .unwrap();
    f
}

pub(super) fn targets(out: &[Output]) -> Vec<Egress> {
    out.iter().map(|o| o.to).collect()
}

#[test]
fn local_unicast_stays_in_its_vlan() {
    let mut s = switch();
    let out = s.ingress(Ingress::Port(PortId(1)), &udp(mac(1).0, mac(2).0, None), Instant::ZERO);
    assert_eq!(targets(&out), [Egress::Port(PortId(2))]);
    assert_eq!(
        out[0].frame,
        udp(mac(1).0, mac(2).0, None),
        "untouched between access ports"
    );
    // Port 3 is in VLAN 20: port 1 cannot reach it directly. The address is unknown in VLAN 10:
    // the frame goes to the uplink only, since port 2 (MAC changes rejected) owns no unknown
    // address.
    let out = s.ingress(Ingress::Port(PortId(1)), &udp(mac(1).0, mac(3).0, None), Instant::ZERO);
    let home = s.team().port_uplink(PortId(1)).unwrap();
    assert_eq!(targets(&out), [Egress::Uplink(home)]);
    // Sent frames are counted when the data plane reports them (see counters.rs).
    assert_eq!(s.port_counters(PortId(1)).unwrap().rx_packets, 2);
    assert_eq!(s.port_counters(PortId(2)).unwrap().tx_packets, 0);
}

#[test]
fn to_remote_tags_with_the_group_vlan_on_the_port_uplink() {
    let mut s = switch();
    // Learn the remote MAC first (from port 1's... any uplink, as a reply would come).
    let reply = udp(REMOTE, mac(1).0, Some(10));
    let out = s.ingress(Ingress::Uplink(UplinkId(1)), &reply, Instant::ZERO);
    assert_eq!(
        targets(&out),
        [Egress::Port(PortId(1))],
        "known unicast is taken from any uplink"
    );
    assert_eq!(
        out[0].frame,
        udp(REMOTE, mac(1).0, None),
        "tag removed toward the access port"
    );
    let out = s.ingress(
        Ingress::Port(PortId(1)),
        &udp(mac(1).0, REMOTE, None),
        Instant::from_secs(1),
    );
    let home = s.team().port_uplink(PortId(1)).unwrap();
    assert_eq!(targets(&out), [Egress::Uplink(home)]);
    assert_eq!(
        out[0].frame,
        udp(mac(1).0, REMOTE, Some(10)),
        "tagged with VLAN 10 on the trunk"
    );
}

#[test]
fn broadcast_from_a_port_floods_its_vlan_and_one_uplink() {
    let mut s = switch();
    let arp = build_gratuitous_arp(mac(2), Ipv4Addr::new(10, 0, 0, 2), None);
    let out = s.ingress(Ingress::Port(PortId(2)), &arp, Instant::ZERO);
    let home = s.team().port_uplink(PortId(2)).unwrap();
    assert_eq!(targets(&out), [Egress::Port(PortId(1)), Egress::Uplink(home)]);
    assert_eq!(home, UplinkId(0), "port 2: active[2 mod 2]");
}

#[test]
fn broadcast_from_uplinks_is_taken_once_and_never_reflected_to_uplinks() {
    let mut s = switch();
    let bcast = udp(REMOTE, [0xff; 6], Some(10));
    // The physical switch floods it to both members; only the group's receive uplink (uplink1) counts.
    let a = s.ingress(Ingress::Uplink(UplinkId(0)), &bcast, Instant::ZERO);
    let b = s.ingress(Ingress::Uplink(UplinkId(1)), &bcast, Instant::ZERO);
    assert_eq!(targets(&a), [Egress::Port(PortId(1)), Egress::Port(PortId(2))]);
    assert!(b.is_empty());
    assert_eq!(
        s.uplink_counters(UplinkId(1))
            .unwrap()
            .drops(DropReason::NotReceiveUplink),
        1
    );
    // When uplink1 fails, uplink2 becomes the receive uplink.
    s.team_mut()
        .set_link(UplinkId(0), LinkState::Down, Instant::ZERO)
        .unwrap();
    let b = s.ingress(Ingress::Uplink(UplinkId(1)), &bcast, Instant::from_secs(1));
    assert_eq!(b.len(), 2);
}

#[test]
fn our_own_frames_reflected_back_are_dropped() {
    let mut s = switch();
    // Port 1's broadcast, flooded back by the physical switch (a frame with its MAC that it did
    // not send is a host outside's: see claims.rs).
    s.ingress(Ingress::Port(PortId(1)), &udp(mac(1).0, [0xff; 6], None), Instant::ZERO);
    let echo = udp(mac(1).0, [0xff; 6], Some(10));
    assert!(s.ingress(Ingress::Uplink(UplinkId(0)), &echo, Instant::ZERO).is_empty());
    assert_eq!(s.uplink_counters(UplinkId(0)).unwrap().drops(DropReason::Reflection), 1);
    // A learned (not configured) MAC behind a port is protected too: a guest bridge, in a group
    // that accepts forged transmits and MAC changes.
    let bridge = SecurityPolicy {
        mac_changes: Verdict::Accept,
        forged_transmits: Verdict::Accept,
        promiscuous: Verdict::Reject,
        ..SecurityPolicy::default()
    };
    let mut s = switch_with(SwitchConfig {
        security: vec![bridge],
        ..SwitchConfig::default()
    });
    let guest_second_mac = [0x02, 0, 0, 0, 0, 0x42];
    s.ingress(
        Ingress::Port(PortId(1)),
        &udp(guest_second_mac, mac(2).0, None),
        Instant::ZERO,
    );
    assert!(s
        .ingress(
            Ingress::Uplink(UplinkId(1)),
            &udp(guest_second_mac, mac(1).0, Some(10)),
            Instant::ZERO
        )
        .is_empty());
    assert_eq!(s.uplink_counters(UplinkId(1)).unwrap().drops(DropReason::Reflection), 1);
}

#[test]
fn bad_frames_are_counted_not_forwarded() {
    let mut s = switch();
    assert!(s
        .ingress(Ingress::Port(PortId(1)), &[1, 2, 3], Instant::ZERO)
        .is_empty());
    assert!(s
        .ingress(
            Ingress::Port(PortId(1)),
            &udp(mac(1).0, mac(2).0, Some(10)),
            Instant::ZERO
        )
        .is_empty());
    assert!(s
        .ingress(
            Ingress::Uplink(UplinkId(0)),
            &udp(REMOTE, [0xff; 6], Some(99)),
            Instant::ZERO
        )
        .is_empty());
    assert!(s
        .ingress(Ingress::Port(PortId(9)), &udp(mac(9).0, mac(1).0, None), Instant::ZERO)
        .is_empty());
    let c = s.port_counters(PortId(1)).unwrap();
    assert_eq!(
        (
            c.drops(DropReason::Malformed),
            c.drops(DropReason::TaggedOnAccessPort),
            c.rx_packets
        ),
        (1, 1, 2)
    );
    assert_eq!(
        s.uplink_counters(UplinkId(0)).unwrap().drops(DropReason::UnknownVlan),
        1
    );
    assert_eq!(s.unattributed_counters().drops(DropReason::UnknownPort), 1);
    let hairpin = s.ingress(Ingress::Port(PortId(1)), &udp(mac(2).0, mac(1).0, None), Instant::ZERO);
    assert!(hairpin.is_empty(), "dst behind the same port");
}

#[test]
fn learned_remote_macs_age_out() {
    let mut s = switch();
    s.ingress(
        Ingress::Uplink(UplinkId(1)),
        &udp(REMOTE, mac(1).0, Some(10)),
        Instant::ZERO,
    );
    assert_eq!(
        s.mac_table().lookup(Some(10), MacAddr(REMOTE), Instant::from_secs(299)),
        Some(Location::Remote(UplinkId(1)))
    );
    assert_eq!(
        s.mac_table().lookup(Some(10), MacAddr(REMOTE), Instant::from_secs(300)),
        None
    );
    let static_entries = 3;
    assert_eq!(s.mac_table().len(), static_entries + 1);
    s.handle_timeout(Instant::from_secs(301));
    assert_eq!(s.mac_table().len(), static_entries, "swept; configured port MACs stay");
    // Unknown again: a frame to it goes to the port's uplink (and to no local port, none of
    // which accepts MAC changes).
    let out = s.ingress(
        Ingress::Port(PortId(1)),
        &udp(mac(1).0, REMOTE, None),
        Instant::from_secs(302),
    );
    assert_eq!(
        targets(&out),
        [Egress::Uplink(s.team().port_uplink(PortId(1)).unwrap())]
    );
}

#[test]
fn switched_traffic_feeds_load_based_teaming() {
    let mut s = switch();
    let f = udp(mac(1).0, REMOTE, None);
    s.ingress(
        Ingress::Uplink(UplinkId(0)),
        &udp(REMOTE, mac(1).0, Some(10)),
        Instant::ZERO,
    );
    for k in 0..31u64 {
        s.ingress(Ingress::Port(PortId(1)), &f, Instant::from_secs(k));
    }
    let u = s.team().port_uplink(PortId(1)).unwrap();
    assert!(s.team().utilisation(u, Instant::from_secs(31)).unwrap().tx > 0.0);
}

#[test]
fn failover_rarp_goes_out_of_the_new_uplink() {
    let mut s = switch();
    let before = s.team().port_uplink(PortId(1)).unwrap();
    s.team_mut().set_link(before, LinkState::Down, Instant::ZERO).unwrap();
    let mut rarps = 0;
    while let Some(e) = s.poll_effect() {
        if let Effect::Transmit { uplink, .. } = e {
            assert_ne!(uplink, before);
            rarps += 1;
        }
    }
    assert!(rarps >= 1);
}

proptest! {
    /// Whatever arrives on an uplink, nothing goes out of an uplink, and nothing panics.
    #[test]
    fn never_uplink_to_uplink(bytes in proptest::collection::vec(any::<u8>(), 0..120), dst in 0usize..4, vlan in proptest::option::of(0u16..30), u in 0usize..2) {
        let mut s = switch();
        let dsts = [[0xff; 6], mac(1).0, REMOTE, [0x01, 0, 0x5e, 0, 0, 1]];
        let mut frame = udp(REMOTE, dsts[dst], vlan.map(|v| v % 25 + 1));
        frame.extend_from_slice(&bytes);
        let out = s.ingress(Ingress::Uplink(UplinkId(u)), &frame, Instant::ZERO);
        prop_assert!(out.iter().all(|o| matches!(o.to, Egress::Port(_))));
        let raw = s.ingress(Ingress::Uplink(UplinkId(u)), &bytes, Instant::ZERO);
        prop_assert!(raw.iter().all(|o| matches!(o.to, Egress::Port(_))));
    }
}

/// Headers standing for a longer frame are switched like the frame, and counted and metered at
/// its wire length: what the simulator's packet mode relies on.
#[test]
fn elided_frames_are_counted_at_their_wire_length() {
    let mut s = switch();
    let reply = udp(REMOTE, mac(1).0, Some(10));
    s.ingress(Ingress::Uplink(UplinkId(1)), &reply, Instant::ZERO);
    let headers = udp(mac(1).0, REMOTE, None);
    let elided = 9000 - headers.len();
    let mut whole = headers.clone();
    whole.resize(9000, 0);
    let mut t = s.clone();
    let a = s.ingress_elided(Ingress::Port(PortId(1)), &headers, elided, Instant::ZERO);
    let b = t.ingress(Ingress::Port(PortId(1)), &whole, Instant::ZERO);
    assert_eq!(targets(&a), targets(&b), "the same decision");
    assert_eq!(a[0].frame.len(), headers.len() + 4, "headers only, tagged");
    let (ca, cb) = (s.port_counters(PortId(1)).unwrap(), t.port_counters(PortId(1)).unwrap());
    assert_eq!((ca.rx_packets, ca.rx_bytes), (cb.rx_packets, cb.rx_bytes));
    // The team's meters saw 9000 (+4 tag) bytes either way.
    let later = Instant::from_secs(2);
    assert_eq!(
        s.team().port_rates(PortId(1), later),
        t.team().port_rates(PortId(1), later)
    );
    assert!(s.team().port_rates(PortId(1), later).unwrap().tx > 0.0);
}

/// A port added while the switch runs is reached by its MAC at once; removed, its static and
/// learned addresses go with it (frames to them flood or go out as unknown, never to it), its
/// counters go, and its ID can be given again without inheriting anything.
#[test]
fn ports_come_and_go_while_the_switch_runs() {
    let mut s = switch();
    let t = Instant::ZERO;
    let four = PortSpec {
        id: PortId(4),
        mac: mac(4),
        group: GroupId(0),
    };
    assert!(
        s.add_port(
            PortSpec {
                mac: mac(1),
                ..four.clone()
            },
            t
        )
        .is_err(),
        "MAC taken"
    );
    assert!(s.team().port_uplink(PortId(4)).is_none(), "a refusal changes nothing");
    s.add_port(four.clone(), t).unwrap();
    // Its MAC is announced on its uplink, tagged with its group's VLAN.
    match s.poll_effect() {
        Some(Effect::Transmit { uplink, frame }) => {
            assert_eq!(Some(uplink), s.team().port_uplink(PortId(4)));
            assert_eq!(frame, crate::wire::build_rarp(mac(4), Some(10)));
        }
        other => panic!("no RARP for the new port: {other:?}"),
    }
    assert!(s.poll_effect().is_none());
    let out = s.ingress(Ingress::Port(PortId(1)), &udp(mac(1).0, mac(4).0, None), t);
    assert_eq!(targets(&out), [Egress::Port(PortId(4))]);
    // Port 4 is sent a frame from behind it with a second MAC: forged transmits are rejected,
    // so learn one through port 2's group instead: a broadcast from port 4 floods to 1 and 2.
    let bcast = udp(mac(4).0, [0xff; 6], None);
    let out = s.ingress(Ingress::Port(PortId(4)), &bcast, t);
    assert!(targets(&out).contains(&Egress::Port(PortId(1))));
    let removed = s.remove_port(PortId(4)).unwrap();
    assert_eq!(removed, four);
    assert!(s.port_counters(PortId(4)).is_none());
    let out = s.ingress(Ingress::Port(PortId(1)), &udp(mac(1).0, mac(4).0, None), t);
    assert!(!targets(&out).contains(&Egress::Port(PortId(4))), "{:?}", targets(&out));
    let out = s.ingress(Ingress::Port(PortId(1)), &udp(mac(1).0, [0xff; 6], None), t);
    assert!(
        !targets(&out).contains(&Egress::Port(PortId(4))),
        "not flooded to either"
    );
    // Frames from it are not attributed to any port.
    s.ingress(Ingress::Port(PortId(4)), &bcast, t);
    assert!(s.port_counters(PortId(4)).is_none());
    s.count_sent(Egress::Port(PortId(4)), 1, 60);
    assert!(
        s.port_counters(PortId(4)).is_none(),
        "a late count does not bring it back"
    );
    assert!(s.remove_port(PortId(4)).is_err());
    // The ID again, with another MAC: the old MAC is unknown.
    s.add_port(PortSpec { mac: mac(9), ..four }, t).unwrap();
    let out = s.ingress(Ingress::Port(PortId(1)), &udp(mac(1).0, mac(4).0, None), t);
    assert!(!targets(&out).contains(&Egress::Port(PortId(4))));
    assert_eq!(s.mac_table().static_port(Some(10), mac(9)), Some(PortId(4)));
}

/// A port added and removed again before the effects were taken (the data plane undoing an add
/// it had no slot for) leaves nothing behind: no RARP tells the physical switches its MAC is
/// here, while another port's queued announcement stays.
#[test]
fn a_port_removed_before_its_effects_are_taken_is_not_announced() {
    let mut s = switch();
    let spec = |id: u32| PortSpec {
        id: PortId(id),
        mac: mac(id as u8),
        group: GroupId(0),
    };
    s.add_port(spec(4), Instant::ZERO).unwrap();
    s.add_port(spec(5), Instant::ZERO).unwrap();
    s.remove_port(PortId(4)).unwrap();
    match s.poll_effect() {
        Some(Effect::Transmit { frame, .. }) => assert_eq!(frame, crate::wire::build_rarp(mac(5), Some(10))),
        other => panic!("port 5's RARP expected: {other:?}"),
    }
    assert!(s.poll_effect().is_none(), "no RARP for the removed port 4");
}

/// Port groups come and go while the switch runs: a new one takes the next index with its
/// VLAN and security; one with ports cannot go; when one goes, the groups after it move down
/// and their ports keep switching in their VLANs.
#[test]
fn port_groups_come_and_go_while_the_switch_runs() {
    let mut s = switch();
    let t = Instant::ZERO;
    let spec = PortGroupSpec {
        mode: Default::default(),
        tuning: Default::default(),
        lacp: Default::default(),
        name: "c".into(),
        policy: Policy::PORT_ID,
        order: FailoverOrder {
            active: vec![UplinkId(0)],
            standby: vec![],
        },
        failback: true,
        notify_switches: true,
        vlan: Some(30),
    };
    let accept = SecurityPolicy {
        forged_transmits: Verdict::Accept,
        ..SecurityPolicy::default()
    };
    assert_eq!(s.add_group(spec.clone(), accept).unwrap(), GroupId(2));
    s.add_port(
        PortSpec {
            id: PortId(4),
            mac: mac(4),
            group: GroupId(2),
        },
        t,
    )
    .unwrap();
    while s.poll_effect().is_some() {}
    // Its security policy holds: a forged source is accepted in group c.
    let out = s.ingress(Ingress::Port(PortId(4)), &udp(mac(9).0, REMOTE, None), t);
    assert!(!out.is_empty(), "group c accepts forged transmits");
    assert!(s.remove_group(GroupId(1)).is_err(), "group b still has port 3");
    s.remove_port(PortId(3)).unwrap();
    assert_eq!(s.remove_group(GroupId(1)).unwrap().name, "b");
    assert_eq!(s.team().port_group(PortId(4)), Some(GroupId(1)), "c moved down");
    assert_eq!(s.team().group(GroupId(1)).unwrap().name, "c");
    let out = s.ingress(Ingress::Port(PortId(4)), &udp(mac(4).0, REMOTE, None), t);
    let up = s.team().port_uplink(PortId(4)).unwrap();
    assert_eq!(targets(&out), [Egress::Uplink(up)]);
    assert_eq!(
        out[0].frame,
        udp(mac(4).0, REMOTE, Some(30)),
        "still tagged with c's VLAN"
    );
    let out = s.ingress(Ingress::Port(PortId(4)), &udp(mac(8).0, REMOTE, None), t);
    assert!(!out.is_empty(), "and still with c's security policy");
    assert!(s.remove_group(GroupId(5)).is_err());
}
