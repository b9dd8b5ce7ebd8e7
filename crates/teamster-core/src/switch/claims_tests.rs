//! A port given a host outside's MAC (a gateway's): it owns nothing while detached, waits while
//! the host is heard from, yields to a host that appears after it, takes the address over only
//! by the operator's word, and takes it when the host went quiet (a migrated VM).

use super::tests::{mac, switch_with, targets, udp, REMOTE};
use super::*;
use crate::wire::ETHERTYPE_RARP;
use core::net::Ipv4Addr;
use core::time::Duration;

/// The gateway: a host outside, behind the uplinks, in VLAN 10.
const GATEWAY: MacAddr = MacAddr(REMOTE);

fn at_ms(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

/// The switch of `super::tests` (ports 1, 2 in VLAN 10; port 3 in VLAN 20), with the
/// gateway heard on uplink 0 at `now` (it answered port 1).
fn switch_knowing_the_gateway(now: Instant) -> Switch {
    let mut s = switch_with(SwitchConfig::default());
    let reply = udp(GATEWAY.0, mac(1).0, Some(10));
    assert_eq!(
        targets(&s.ingress(Ingress::Uplink(UplinkId(0)), &reply, now)),
        [Egress::Port(PortId(1))]
    );
    while s.poll_effect().is_some() {}
    s
}

/// Port 4 in group "a" (VLAN 10) with the gateway's MAC.
fn thief() -> PortSpec {
    PortSpec {
        id: PortId(4),
        mac: GATEWAY,
        group: GroupId(0),
    }
}

fn rarps(s: &mut Switch) -> Vec<MacAddr> {
    std::iter::from_fn(|| s.poll_effect())
        .filter_map(|e| match e {
            Effect::Transmit { frame, .. } if crate::wire::parse(&frame).unwrap().ether_type == ETHERTYPE_RARP => {
                Some(MacAddr(frame[6..12].try_into().unwrap()))
            }
            _ => None,
        })
        .collect()
}

fn notes(s: &mut Switch) -> Vec<MacNoteKind> {
    std::iter::from_fn(|| s.poll_mac_note()).map(|n| n.kind).collect()
}

/// Where port 1's frame to the gateway goes.
fn to_gateway(s: &mut Switch, now: Instant) -> Vec<Egress> {
    targets(&s.ingress(Ingress::Port(PortId(1)), &udp(mac(1).0, GATEWAY.0, None), now))
}

#[test]
fn a_detached_port_owns_no_mac_and_announces_nothing() {
    let mut s = switch_with(SwitchConfig::default());
    while s.poll_effect().is_some() {}
    s.add_detached_port(thief()).unwrap();
    assert_eq!(s.mac_claim(PortId(4)), Some(Claim::Detached));
    assert!(rarps(&mut s).is_empty(), "no RARP for a port that is not there");
    assert_eq!(s.mac_table().static_port(Some(10), GATEWAY), None);
    // Port 1's frames for that address go out to the network, as for any unknown address.
    let home = s.team().port_uplink(PortId(1)).unwrap();
    assert_eq!(to_gateway(&mut s, at_ms(0)), [Egress::Uplink(home)]);
    // Attached with nobody outside using the address: it owns it, announced.
    s.attach_port(PortId(4), at_ms(10));
    assert_eq!(s.mac_claim(PortId(4)), Some(Claim::Owned));
    assert_eq!(rarps(&mut s), [GATEWAY]);
    assert_eq!(to_gateway(&mut s, at_ms(20)), [Egress::Port(PortId(4))]);
    // Detached again (its tap went away): nothing of it stays in the table.
    s.detach_port(PortId(4));
    assert_eq!(s.mac_table().lookup(Some(10), GATEWAY, at_ms(30)), None);
    assert_eq!(to_gateway(&mut s, at_ms(30)), [Egress::Uplink(home)]);
    // A move of the detached port (its uplink failed) announces nothing either.
    s.team_mut()
        .set_link(UplinkId(0), crate::teaming::LinkState::Down, at_ms(40))
        .unwrap();
    assert!(!rarps(&mut s).contains(&GATEWAY));
}

#[test]
fn a_port_given_a_heard_hosts_mac_waits_and_takes_it_once_the_host_is_quiet() {
    let mut s = switch_knowing_the_gateway(at_ms(0));
    s.add_port(thief(), at_ms(100)).unwrap();
    assert_eq!(s.mac_claim(PortId(4)), Some(Claim::Waiting));
    assert_eq!(notes(&mut s), [MacNoteKind::InUse(Location::Remote(UplinkId(0)))]);
    assert!(rarps(&mut s).is_empty(), "not announced");
    // Port 1 still reaches the gateway; the thief's frames from its address go nowhere.
    let gateway_uplink = Egress::Uplink(s.team().port_uplink(PortId(1)).unwrap());
    assert_eq!(to_gateway(&mut s, at_ms(200)), [gateway_uplink]);
    let forged = udp(GATEWAY.0, [0xff; 6], None);
    assert!(s.ingress(Ingress::Port(PortId(4)), &forged, at_ms(300)).is_empty());
    // The gateway keeps talking: still the gateway's.
    let reply = udp(GATEWAY.0, mac(1).0, Some(10));
    s.ingress(Ingress::Uplink(UplinkId(0)), &reply, at_ms(1_000));
    assert!(s.ingress(Ingress::Port(PortId(4)), &forged, at_ms(1_500)).is_empty());
    let c = s.port_counters(PortId(4)).unwrap();
    assert_eq!(c.drops(DropReason::MacConflict), 2);
    // Quiet for MOVE_QUIET (it moved, or a migrated VM's source stopped), and its address
    // unknown (it never spoke ARP here, so it cannot be asked): the port takes it.
    let later = at_ms(1_000) + MOVE_QUIET;
    assert_eq!(s.ingress(Ingress::Port(PortId(4)), &forged, later).len(), 3);
    assert_eq!(s.mac_claim(PortId(4)), Some(Claim::Owned));
    assert_eq!(notes(&mut s), [MacNoteKind::Claimed]);
    assert_eq!(to_gateway(&mut s, later), [Egress::Port(PortId(4))]);
}

#[test]
fn a_port_that_owns_a_mac_yields_it_to_a_host_outside_that_appears() {
    let mut s = switch_with(SwitchConfig::default());
    s.add_port(thief(), at_ms(0)).unwrap();
    assert_eq!(s.mac_claim(PortId(4)), Some(Claim::Owned));
    // The port's own broadcast, flooded back by the physical switch: a reflection.
    let bcast = udp(GATEWAY.0, [0xff; 6], None);
    let out = s.ingress(Ingress::Port(PortId(4)), &bcast, at_ms(1_000));
    assert!(out.iter().any(|o| matches!(o.to, Egress::Uplink(_))));
    let back = udp(GATEWAY.0, [0xff; 6], Some(10));
    assert!(s.ingress(Ingress::Uplink(UplinkId(1)), &back, at_ms(1_001)).is_empty());
    assert_eq!(s.uplink_counters(UplinkId(1)).unwrap().drops(DropReason::Reflection), 1);
    assert_eq!(s.mac_claim(PortId(4)), Some(Claim::Owned));
    // The real gateway answers port 1 (unicast to a port settled for a second: never one of
    // ours): the port yields, and port 1 gets the answer.
    let reply = udp(GATEWAY.0, mac(1).0, Some(10));
    let out = s.ingress(Ingress::Uplink(UplinkId(0)), &reply, at_ms(1_002));
    assert_eq!(targets(&out), [Egress::Port(PortId(1))]);
    assert_eq!(s.mac_claim(PortId(4)), Some(Claim::Waiting));
    assert_eq!(notes(&mut s), [MacNoteKind::Yielded(UplinkId(0))]);
    assert_eq!(
        s.mac_table().lookup(Some(10), GATEWAY, at_ms(1_002)),
        Some(Location::Remote(UplinkId(0)))
    );
    let home = s.team().port_uplink(PortId(1)).unwrap();
    assert_eq!(to_gateway(&mut s, at_ms(1_003)), [Egress::Uplink(home)]);
    // A quiet port (nothing sent out for a second) cannot be reflected: its gateway's
    // broadcast yields too.
    let mut s = switch_with(SwitchConfig::default());
    s.add_port(thief(), at_ms(0)).unwrap();
    assert!(s
        .ingress(Ingress::Uplink(UplinkId(0)), &back, at_ms(5_000))
        .iter()
        .any(|o| o.to == Egress::Port(PortId(1))));
    assert_eq!(s.mac_claim(PortId(4)), Some(Claim::Waiting));
    // The team's own RARP coming back is never taken for a host outside.
    let mut s = switch_with(SwitchConfig::default());
    s.add_port(thief(), at_ms(0)).unwrap();
    let rarp = crate::wire::build_rarp(GATEWAY, Some(10));
    assert!(s.ingress(Ingress::Uplink(UplinkId(1)), &rarp, at_ms(5_000)).is_empty());
    assert_eq!(s.mac_claim(PortId(4)), Some(Claim::Owned));
}

#[test]
fn the_operators_word_takes_the_mac_over_and_keeps_it() {
    let mut s = switch_knowing_the_gateway(at_ms(0));
    s.add_detached_port(thief()).unwrap();
    s.set_mac_takeover(PortId(4), true, at_ms(50));
    s.attach_port(PortId(4), at_ms(100));
    assert_eq!(s.mac_claim(PortId(4)), Some(Claim::Owned));
    assert_eq!(notes(&mut s), [MacNoteKind::TakenOver(Location::Remote(UplinkId(0)))]);
    assert_eq!(rarps(&mut s), [GATEWAY]);
    // The host outside is refused from then on, and counted.
    let reply = udp(GATEWAY.0, mac(1).0, Some(10));
    assert!(s.ingress(Ingress::Uplink(UplinkId(0)), &reply, at_ms(2_000)).is_empty());
    assert_eq!(
        s.uplink_counters(UplinkId(0)).unwrap().drops(DropReason::MacConflict),
        1
    );
    assert_eq!(to_gateway(&mut s, at_ms(2_001)), [Egress::Port(PortId(4))]);
}

/// An ARP reply from the gateway at 10.77.0.254 to port 1, tagged for VLAN 10.
fn gateway_arp() -> Vec<u8> {
    let untagged = crate::wire::build_arp_reply(GATEWAY, GATEWAY_IP, mac(1), Ipv4Addr::new(10, 77, 0, 1));
    let mut f = Vec::new();
    TagEdit::Push(10).apply_into(&untagged, &mut f);
    f
}

const GATEWAY_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 254);

/// The ARP probes the switch sent: (uplink, destination MAC, target address).
fn probes(s: &mut Switch) -> Vec<(UplinkId, MacAddr, Option<core::net::IpAddr>)> {
    std::iter::from_fn(|| s.poll_effect())
        .filter_map(|e| match e {
            Effect::Transmit { uplink, frame } => {
                let k = crate::wire::parse(&frame).unwrap();
                let probe = k.arp_op == Some(1) && k.src_ip == Some(Ipv4Addr::UNSPECIFIED.into());
                probe.then_some((uplink, k.dst_mac, k.dst_ip))
            }
            _ => None,
        })
        .collect()
}

/// A waiting port whose host outside went quiet: the switch asks the host (an ARP probe to its
/// MAC for the address it gave in ARP); an answer keeps the port waiting, silence gives it the
/// address (a VM migrated here, its source stopped).
#[test]
fn the_switch_asks_the_host_outside_before_a_waiting_port_takes_its_mac() {
    let mut s = switch_knowing_the_gateway(at_ms(0));
    // Probes leave from the uplink's own MAC (a switch that does not know it cannot ask).
    s.set_uplink_mac(UplinkId(0), Some(MacAddr([0x0a, 0, 0, 0, 0, 1])));
    s.ingress(Ingress::Uplink(UplinkId(0)), &gateway_arp(), at_ms(10));
    s.add_port(thief(), at_ms(100)).unwrap();
    while s.poll_effect().is_some() {}
    let forged = udp(GATEWAY.0, [0xff; 6], None);
    // Quiet for MOVE_QUIET: asked, the frame still dropped.
    let t = at_ms(10) + MOVE_QUIET;
    assert!(s.ingress(Ingress::Port(PortId(4)), &forged, t).is_empty());
    assert_eq!(probes(&mut s), [(UplinkId(0), GATEWAY, Some(GATEWAY_IP.into()))]);
    // It answers: still the gateway's, and not asked again within PROBE_EVERY.
    let answer = {
        let untagged = crate::wire::build_arp_reply(
            GATEWAY,
            GATEWAY_IP,
            MacAddr([0x0a, 0, 0, 0, 0, 1]),
            Ipv4Addr::UNSPECIFIED,
        );
        let mut f = Vec::new();
        TagEdit::Push(10).apply_into(&untagged, &mut f);
        f
    };
    s.ingress(Ingress::Uplink(UplinkId(0)), &answer, t + Duration::from_millis(5));
    let t2 = t + PROBE_WAIT + Duration::from_millis(100);
    assert!(s.ingress(Ingress::Port(PortId(4)), &forged, t2).is_empty());
    assert!(probes(&mut s).is_empty());
    assert_eq!(s.mac_claim(PortId(4)), Some(Claim::Waiting));
    // Asked again once quiet, and this time no answer: the port takes the address.
    let t3 = t + Duration::from_millis(5) + MOVE_QUIET + PROBE_EVERY;
    assert!(s.ingress(Ingress::Port(PortId(4)), &forged, t3).is_empty());
    assert_eq!(probes(&mut s).len(), 1);
    let t4 = t3 + PROBE_WAIT;
    assert_eq!(s.ingress(Ingress::Port(PortId(4)), &forged, t4).len(), 3);
    assert_eq!(s.mac_claim(PortId(4)), Some(Claim::Owned));
    let kinds = notes(&mut s);
    assert_eq!(kinds.last(), Some(&MacNoteKind::Claimed));
    assert_eq!(s.port_counters(PortId(4)).unwrap().drops(DropReason::MacConflict), 3);
}

/// A port that yielded to a host outside does not take the address on a quiet spell: only
/// once the host's entry has aged out.
#[test]
fn a_port_that_yielded_waits_until_the_hosts_entry_ages_out() {
    let mut s = switch_with(SwitchConfig::default());
    s.add_port(thief(), at_ms(0)).unwrap();
    let reply = udp(GATEWAY.0, mac(1).0, Some(10));
    s.ingress(Ingress::Uplink(UplinkId(0)), &reply, at_ms(10_000));
    assert_eq!(s.mac_claim(PortId(4)), Some(Claim::Waiting));
    assert_eq!(notes(&mut s), [MacNoteKind::Yielded(UplinkId(0))]);
    let mine = udp(GATEWAY.0, mac(2).0, None);
    for t in [12_000, 60_000, 200_000] {
        assert!(
            s.ingress(Ingress::Port(PortId(4)), &mine, at_ms(t)).is_empty(),
            "at {t} ms"
        );
    }
    // The gateway's entry ages out (300 s): the sweep gives the port its MAC, announced.
    let aged = at_ms(10_000) + MacTable::DEFAULT_AGEING;
    while s.poll_effect().is_some() {}
    s.handle_timeout(aged);
    assert_eq!(s.mac_claim(PortId(4)), Some(Claim::Owned));
    assert_eq!(notes(&mut s), [MacNoteKind::Claimed]);
    assert_eq!(rarps(&mut s), [GATEWAY]);
    assert_eq!(
        targets(&s.ingress(Ingress::Port(PortId(4)), &mine, aged)),
        [Egress::Port(PortId(2))]
    );
}

/// An untagged group (the live test's shape): a port with the gateway's MAC that keeps sending
/// broadcasts still yields to the gateway's unicast answer to another port.
#[test]
fn a_busy_port_in_an_untagged_group_yields_to_the_gateways_answer() {
    let t = super::tests::team(&[("vms", None, true)], &[(1, 0), (2, 0)]);
    let mut s = Switch::with_config(t, SwitchConfig::default());
    s.add_port(
        PortSpec {
            id: PortId(3),
            mac: GATEWAY,
            group: GroupId(0),
        },
        Instant::ZERO,
    )
    .unwrap();
    let garp = udp(GATEWAY.0, [0xff; 6], None);
    let mut now = at_ms(1_200);
    for _ in 0..5 {
        s.ingress(Ingress::Port(PortId(3)), &garp, now);
        s.ingress(Ingress::Uplink(UplinkId(1)), &garp, now);
        now = now + Duration::from_millis(50);
    }
    let reply = udp(GATEWAY.0, mac(1).0, None);
    let out = s.ingress(Ingress::Uplink(UplinkId(0)), &reply, now);
    assert_eq!(targets(&out), [Egress::Port(PortId(1))]);
    assert_eq!(s.mac_claim(PortId(3)), Some(Claim::Waiting));
}

/// Once the switch has listened for SETTLE, a port's claim stands: a host outside that sends
/// from a local VM's MAC (a spoofer on the physical network) is refused, counted, and reported
/// once; the VM keeps its address.
#[test]
fn after_the_switch_settles_a_host_outside_cannot_take_a_ports_mac() {
    let mut s = switch_with(SwitchConfig::default());
    let spoof = udp(mac(2).0, mac(1).0, Some(10));
    let t = Instant::ZERO + SETTLE;
    for i in 0..3 {
        let at = t + Duration::from_millis(i);
        assert!(s.ingress(Ingress::Uplink(UplinkId(0)), &spoof, at).is_empty());
    }
    assert_eq!(s.mac_claim(PortId(2)), Some(Claim::Owned));
    assert_eq!(
        s.uplink_counters(UplinkId(0)).unwrap().drops(DropReason::MacConflict),
        3
    );
    assert_eq!(notes(&mut s), [MacNoteKind::Refused(UplinkId(0))], "reported once");
    let out = s.ingress(Ingress::Port(PortId(1)), &udp(mac(1).0, mac(2).0, None), t);
    assert_eq!(targets(&out), [Egress::Port(PortId(2))], "still port 2's");
    // Before SETTLE the same frame makes the port yield (see the tests above).
    let mut s = switch_with(SwitchConfig::default());
    s.ingress(Ingress::Uplink(UplinkId(0)), &spoof, at_ms(5_000));
    assert_eq!(s.mac_claim(PortId(2)), Some(Claim::Waiting));
}

/// The operator's word on a port already waiting takes the MAC at once, announced; a port that
/// yielded and then detached starts afresh at its next attach (no yield carried over).
#[test]
fn the_operators_word_on_a_waiting_port_takes_the_mac_at_once() {
    let mut s = switch_with(SwitchConfig::default());
    s.add_port(thief(), at_ms(0)).unwrap();
    let reply = udp(GATEWAY.0, mac(1).0, Some(10));
    s.ingress(Ingress::Uplink(UplinkId(0)), &reply, at_ms(10_000));
    assert_eq!(s.mac_claim(PortId(4)), Some(Claim::Waiting));
    s.detach_port(PortId(4));
    assert_eq!(
        s.guards[&PortId(4)].claim.yielded_at,
        None,
        "a detach forgets the yield"
    );
    s.attach_port(PortId(4), at_ms(11_000));
    assert_eq!(
        s.mac_claim(PortId(4)),
        Some(Claim::Waiting),
        "the gateway is still there"
    );
    while s.poll_effect().is_some() {}
    notes(&mut s);
    s.set_mac_takeover(PortId(4), true, at_ms(12_000));
    assert_eq!(s.mac_claim(PortId(4)), Some(Claim::Owned));
    assert_eq!(notes(&mut s), [MacNoteKind::TakenOver(Location::Remote(UplinkId(0)))]);
    assert_eq!(rarps(&mut s), [GATEWAY]);
    // Cleared, the port keeps what it owns.
    s.set_mac_takeover(PortId(4), false, at_ms(13_000));
    assert_eq!(s.mac_claim(PortId(4)), Some(Claim::Owned));
}
