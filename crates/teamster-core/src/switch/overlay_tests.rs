//! Overlay port groups: the VTEP's ARP, wrapping for remote VTEPs, head-end replication,
//! opening accepted frames, isolation from VLANs, split horizon.

use super::tests::{mac, targets, udp};
use super::*;
use crate::offload::{decapsulate, encapsulate, TunnelEnds};
use crate::teaming::PortSpec;
use crate::wire::{build_arp_reply, build_arp_request};

const LOCAL: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const PEER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const OTHER_PEER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 3);
const PEER_MAC: MacAddr = MacAddr([0x0a, 0, 0, 0, 0, 2]);
const OTHER_MAC: MacAddr = MacAddr([0x0a, 0, 0, 0, 0, 3]);
const UPLINK_MAC: MacAddr = MacAddr([0x0a, 0, 0, 0, 0, 1]);
/// A VM behind the remote VTEPs.
const FAR_VM: [u8; 6] = [0x02, 0, 0, 0, 0, 0x77];

/// Two uplinks; group "overlay" (VNI 5001 with two remote VTEPs) with ports 1 and 2, and an
/// untagged group "plain" with port 3.
fn switch() -> Switch {
    let t = super::tests::team(
        &[("overlay", None, true), ("plain", None, false)],
        &[(1, 0), (2, 0), (3, 1)],
    );
    let overlay = Overlay::new(5001, LOCAL, vec![PEER, OTHER_PEER]).unwrap();
    let mut s = Switch::with_config(
        t,
        SwitchConfig {
            overlays: vec![Some(overlay), None],
            ..SwitchConfig::default()
        },
    );
    s.set_uplink_mac(UplinkId(0), Some(UPLINK_MAC));
    s.set_uplink_mac(UplinkId(1), Some(MacAddr([0x0a, 0, 0, 0, 0, 0x11])));
    s
}

fn own_frames(s: &mut Switch) -> Vec<(UplinkId, FlowKey)> {
    std::iter::from_fn(|| s.poll_effect())
        .filter_map(|e| match e {
            Effect::Transmit { uplink, frame } => Some((uplink, parse(&frame).unwrap())),
            _ => None,
        })
        .collect()
}

/// Teaches the switch both remote VTEPs' MACs by their ARP requests for our VTEP.
fn resolve_peers(s: &mut Switch) {
    own_frames(s);
    for (ip, m) in [(PEER, PEER_MAC), (OTHER_PEER, OTHER_MAC)] {
        let ask = build_arp_request(m, ip, LOCAL);
        assert!(s.ingress(Ingress::Uplink(UplinkId(0)), &ask, Instant::ZERO).is_empty());
    }
    own_frames(s);
}

/// A frame from `from` VTEP (at `from_mac`) in VNI `vni`, wrapping `inner`.
fn vxlan(from: Ipv4Addr, from_mac: MacAddr, to: Ipv4Addr, vni: u64, inner: &[u8]) -> Vec<u8> {
    let ends = TunnelEnds::new(from_mac, UPLINK_MAC, from.into(), to.into()).unwrap();
    encapsulate(inner, Vni::new(vni).unwrap(), &ends).unwrap()
}

#[test]
fn the_vtep_answers_arp_for_its_address_on_the_uplink_asked() {
    let mut s = switch();
    own_frames(&mut s);
    let ask = build_arp_request(PEER_MAC, PEER, LOCAL);
    // The physical switch floods a broadcast request to both members: one answer, from the
    // first uplink of the overlay's order.
    assert!(
        s.ingress(Ingress::Uplink(UplinkId(1)), &ask, Instant::ZERO).is_empty(),
        "not switched to VMs"
    );
    assert!(own_frames(&mut s).is_empty());
    assert!(s.ingress(Ingress::Uplink(UplinkId(0)), &ask, Instant::ZERO).is_empty());
    let sent = own_frames(&mut s);
    assert_eq!(sent.len(), 1);
    let (u, reply) = &sent[0];
    assert_eq!(*u, UplinkId(0));
    assert_eq!((reply.arp_op, reply.dst_mac), (Some(2), PEER_MAC));
    assert_eq!(reply.src_mac, UPLINK_MAC, "from that uplink's MAC");
    // A request sent to uplink 1's MAC alone is answered there.
    let mut unicast = ask.clone();
    unicast[..6].copy_from_slice(&[0x0a, 0, 0, 0, 0, 0x11]);
    s.ingress(Ingress::Uplink(UplinkId(1)), &unicast, Instant::ZERO);
    assert_eq!(
        own_frames(&mut s).iter().map(|(u, _)| *u).collect::<Vec<_>>(),
        vec![UplinkId(1)]
    );
    // ARP for anyone else is switched as usual (the plain group's port gets the broadcast).
    let other = build_arp_request(PEER_MAC, PEER, Ipv4Addr::new(192, 0, 2, 50));
    let out = s.ingress(Ingress::Uplink(UplinkId(0)), &other, Instant::ZERO);
    assert_eq!(targets(&out), vec![Egress::Port(PortId(3))]);
}

#[test]
fn a_broadcast_floods_the_segment_and_every_remote_vtep_once_their_macs_are_known() {
    let mut s = switch();
    let bcast = udp(mac(1).0, [0xff; 6], None);
    // Nothing known of the VTEPs yet: the local port gets it, each VTEP is asked for.
    let out = s.ingress(Ingress::Port(PortId(1)), &bcast, Instant::ZERO);
    assert_eq!(
        targets(&out),
        vec![Egress::Port(PortId(2))],
        "never the plain group's port 3"
    );
    assert_eq!(
        s.port_counters(PortId(1)).unwrap().drops(DropReason::VtepUnresolved),
        1,
        "once per frame"
    );
    let asked: Vec<_> = own_frames(&mut s)
        .into_iter()
        .map(|(_, k)| (k.arp_op, k.dst_ip))
        .collect();
    assert_eq!(
        asked,
        vec![(Some(1), Some(PEER.into())), (Some(1), Some(OTHER_PEER.into()))]
    );
    // The replies teach the MACs; the next broadcast reaches both VTEPs, on one uplink.
    for (ip, m) in [(PEER, PEER_MAC), (OTHER_PEER, OTHER_MAC)] {
        let reply = build_arp_reply(m, ip, UPLINK_MAC, LOCAL);
        s.ingress(Ingress::Uplink(UplinkId(0)), &reply, Instant::ZERO);
    }
    let out = s.ingress(Ingress::Port(PortId(1)), &bcast, Instant::ZERO);
    assert_eq!(out.len(), 3);
    let wrapped: Vec<&Output> = out.iter().filter(|o| matches!(o.to, Egress::Uplink(_))).collect();
    assert_eq!(wrapped.len(), 2);
    assert_eq!(wrapped[0].to, wrapped[1].to, "every copy on the port's uplink");
    for (o, (ip, m)) in wrapped.iter().zip([(PEER, PEER_MAC), (OTHER_PEER, OTHER_MAC)]) {
        let d = decapsulate(&o.frame).unwrap();
        assert_eq!(
            (d.vni.get(), d.remote, d.local, d.inner),
            (5001, LOCAL.into(), ip.into(), &bcast[..])
        );
        assert_eq!(&o.frame[..6], &m.0, "to the VTEP's MAC");
    }
}

#[test]
fn a_frame_from_a_listed_vtep_is_opened_into_its_segment_and_its_source_learned() {
    let mut s = switch();
    resolve_peers(&mut s);
    let inner = udp(FAR_VM, mac(2).0, None);
    let outer = vxlan(PEER, PEER_MAC, LOCAL, 5001, &inner);
    let out = s.ingress(Ingress::Uplink(UplinkId(0)), &outer, Instant::ZERO);
    assert_eq!(targets(&out), vec![Egress::Port(PortId(2))]);
    assert_eq!(out[0].frame, inner, "the outer headers cut off");
    // The reply goes to that VTEP alone.
    let reply = udp(mac(2).0, FAR_VM, None);
    let out = s.ingress(Ingress::Port(PortId(2)), &reply, Instant::ZERO);
    assert_eq!(out.len(), 1);
    let d = decapsulate(&out[0].frame).unwrap();
    assert_eq!((d.remote, d.local, d.inner), (LOCAL.into(), PEER.into(), &reply[..]));
    // An opened broadcast goes to the segment's ports, never back into a tunnel.
    let bcast = vxlan(OTHER_PEER, OTHER_MAC, LOCAL, 5001, &udp(FAR_VM, [0xff; 6], None));
    let out = s.ingress(Ingress::Uplink(UplinkId(0)), &bcast, Instant::ZERO);
    assert_eq!(targets(&out), vec![Egress::Port(PortId(1)), Egress::Port(PortId(2))]);
}

#[test]
fn frames_no_overlay_takes_are_dropped_as_tunnel() {
    let mut s = switch();
    resolve_peers(&mut s);
    let inner = udp(FAR_VM, mac(2).0, None);
    let stranger = Ipv4Addr::new(192, 0, 2, 66);
    let cases = [
        vxlan(stranger, PEER_MAC, LOCAL, 5001, &inner),
        vxlan(PEER, PEER_MAC, LOCAL, 5002, &inner),
        vxlan(PEER, PEER_MAC, LOCAL, 5001, &udp(FAR_VM, mac(2).0, Some(10))),
        {
            let mut trailing = vxlan(PEER, PEER_MAC, LOCAL, 5001, &inner);
            trailing.extend_from_slice(&[0; 8]);
            trailing
        },
    ];
    for (i, f) in cases.iter().enumerate() {
        assert!(
            s.ingress(Ingress::Uplink(UplinkId(0)), f, Instant::ZERO).is_empty(),
            "case {i}"
        );
    }
    assert_eq!(s.uplink_counters(UplinkId(0)).unwrap().drops(DropReason::Tunnel), 4);
    // Not learned from any of them: a frame to that VM is flooded, not tunnelled to one VTEP.
    let out = s.ingress(Ingress::Port(PortId(2)), &udp(mac(2).0, FAR_VM, None), Instant::ZERO);
    assert_eq!(out.iter().filter(|o| matches!(o.to, Egress::Uplink(_))).count(), 2);
    // VXLAN to another address is not the VTEP's: switched as any frame (to nobody here).
    let elsewhere = vxlan(PEER, PEER_MAC, Ipv4Addr::new(192, 0, 2, 99), 5001, &inner);
    s.ingress(Ingress::Uplink(UplinkId(0)), &elsewhere, Instant::ZERO);
    assert_eq!(s.uplink_counters(UplinkId(0)).unwrap().drops(DropReason::Tunnel), 4);
}

#[test]
fn overlay_and_vlan_ports_never_meet() {
    let mut s = switch();
    resolve_peers(&mut s);
    // From the plain group's port: its broadcast reaches the uplink, not the overlay's ports.
    let out = s.ingress(Ingress::Port(PortId(3)), &udp(mac(3).0, [0xff; 6], None), Instant::ZERO);
    assert!(out.iter().all(|o| !matches!(o.to, Egress::Port(_))));
    assert!(out.iter().all(|o| decapsulate(&o.frame).is_err()), "not tunnelled");
    // An overlay port cannot reach port 3 by its MAC either: in the segment it is unknown.
    let out = s.ingress(Ingress::Port(PortId(1)), &udp(mac(1).0, mac(3).0, None), Instant::ZERO);
    assert!(out.iter().all(|o| o.to != Egress::Port(PortId(3))));
    // A plain frame from the uplink for an overlay port's MAC does not reach it.
    let out = s.ingress(
        Ingress::Uplink(UplinkId(0)),
        &udp(FAR_VM, mac(1).0, None),
        Instant::ZERO,
    );
    assert!(out.iter().all(|o| o.to != Egress::Port(PortId(1))));
}

#[test]
fn refreshes_go_out_on_a_usable_uplink() {
    let mut s = switch();
    resolve_peers(&mut s);
    let due = s.poll_at();
    assert!(due <= Instant::from_secs(60));
    s.handle_timeout(Instant::from_secs(60));
    let asked = own_frames(&mut s);
    assert_eq!(asked.len(), 2);
    assert!(asked.iter().all(|(u, k)| *u == UplinkId(0) && k.arp_op == Some(1)));
    assert_eq!(
        s.vtep_neighbors(),
        vec![(PEER, Some(PEER_MAC)), (OTHER_PEER, Some(OTHER_MAC))]
    );
}

#[test]
fn the_underlay_cannot_fool_the_vtep() {
    let mut s = switch();
    resolve_peers(&mut s);
    let inner = udp(FAR_VM, mac(2).0, None);
    // Our own frame come back, and a flooded copy sent to another MAC: never opened.
    let own = vxlan(PEER, UPLINK_MAC, LOCAL, 5001, &inner);
    assert!(s.ingress(Ingress::Uplink(UplinkId(1)), &own, Instant::ZERO).is_empty());
    assert_eq!(s.uplink_counters(UplinkId(1)).unwrap().drops(DropReason::Reflection), 1);
    let mut flooded = vxlan(PEER, PEER_MAC, LOCAL, 5001, &inner);
    flooded[..6].copy_from_slice(&[0x0a, 0, 0, 0, 0, 0x55]);
    assert!(s
        .ingress(Ingress::Uplink(UplinkId(0)), &flooded, Instant::ZERO)
        .is_empty());
    assert_eq!(s.uplink_counters(UplinkId(0)).unwrap().drops(DropReason::Tunnel), 1);
    // A fragment to the VTEP (VXLAN is never fragmented): dropped, not switched.
    let mut frag = vxlan(PEER, PEER_MAC, LOCAL, 5001, &inner);
    frag[20] = 0x20;
    assert!(s.ingress(Ingress::Uplink(UplinkId(0)), &frag, Instant::ZERO).is_empty());
    assert_eq!(s.uplink_counters(UplinkId(0)).unwrap().drops(DropReason::Tunnel), 2);
    // An unsolicited announcement does not move a remote VTEP.
    let liar = MacAddr([0x0a, 0xee, 0, 0, 0, 1]);
    let garp = crate::wire::build_gratuitous_arp(liar, PEER, None);
    s.ingress(Ingress::Uplink(UplinkId(0)), &garp, Instant::ZERO);
    assert_eq!(s.vtep_neighbors()[0], (PEER, Some(PEER_MAC)));
    // A flood of requests for the VTEP leaves a bounded queue.
    let ask = build_arp_request(PEER_MAC, PEER, LOCAL);
    for _ in 0..10_000 {
        s.ingress(Ingress::Uplink(UplinkId(0)), &ask, Instant::ZERO);
    }
    assert!(own_frames(&mut s).len() <= crate::overlay::neighbors::MAX_QUEUED);
}

#[test]
fn overlay_ports_are_not_announced_on_the_underlay() {
    let mut s = switch();
    own_frames(&mut s);
    s.add_port(
        PortSpec {
            id: PortId(9),
            mac: mac(9),
            group: GroupId(0),
        },
        Instant::ZERO,
    )
    .unwrap();
    assert!(
        own_frames(&mut s).iter().all(|(_, k)| k.src_mac != mac(9)),
        "no RARP for an overlay port"
    );
}

#[test]
fn with_no_usable_uplink_the_refresh_does_not_spin() {
    let mut s = switch();
    resolve_peers(&mut s);
    for u in [UplinkId(0), UplinkId(1)] {
        s.team_mut()
            .set_link(u, crate::teaming::LinkState::Down, Instant::ZERO)
            .unwrap();
    }
    own_frames(&mut s);
    s.handle_timeout(Instant::from_secs(61));
    assert!(s.poll_at() > Instant::from_secs(61), "the next round is later, not now");
}

#[test]
fn one_remote_vtep_cannot_fill_the_mac_table() {
    let mut s = switch();
    s.macs = MacTable::with_limits(
        MacTable::DEFAULT_AGEING,
        MacLimits {
            total: 100,
            per_port: 4,
        },
    );
    for p in [1u8, 2, 3] {
        s.macs.add_static(
            if p == 3 { None } else { overlay::domain(0) },
            mac(p),
            PortId(u32::from(p)),
        );
    }
    resolve_peers(&mut s);
    for i in 0..10u8 {
        let inner = udp([0x02, 0, 0, 0, 0x66, i], [0xff; 6], None);
        s.ingress(
            Ingress::Uplink(UplinkId(0)),
            &vxlan(PEER, PEER_MAC, LOCAL, 5001, &inner),
            Instant::ZERO,
        );
    }
    assert_eq!(s.mac_table().learned(), 4, "per VTEP, as per port");
    assert_eq!(s.uplink_counters(UplinkId(0)).unwrap().mac_limit, 6);
}

/// The attack: a VM of an ordinary untagged group (port 3) whose network the physical
/// switch joins to the underlay sends VXLAN from a listed remote's address (its frames come back
/// to the VTEP on an uplink), and ARP claiming that address. None of it enters the segment or
/// moves the remote.
#[test]
fn a_vm_cannot_speak_for_a_remote_vtep() {
    let mut s = switch();
    resolve_peers(&mut s);
    let inner = udp(FAR_VM, mac(2).0, None);
    let vm = mac(3);
    let hijack = vxlan(PEER, vm, LOCAL, 5001, &inner);
    let claim = build_arp_request(vm, PEER, LOCAL);
    let reply = build_arp_reply(vm, PEER, UPLINK_MAC, LOCAL);
    for (i, f) in [&hijack, &claim, &reply, &hijack].into_iter().enumerate() {
        assert!(
            s.ingress(Ingress::Uplink(UplinkId(0)), f, Instant::ZERO).is_empty(),
            "frame {i} went somewhere"
        );
    }
    let up = s.uplink_counters(UplinkId(0)).unwrap();
    assert_eq!(up.drops(DropReason::TunnelSpoof), 4);
    assert!(own_frames(&mut s).is_empty(), "no answer to the VM's request");
    assert_eq!(
        s.vtep_neighbors(),
        vec![(PEER, Some(PEER_MAC)), (OTHER_PEER, Some(OTHER_MAC))],
        "the remote not moved"
    );
    // The MAC a VM changed to (a group that accepts MAC changes) is a local port's too.
    let mut s = switch();
    resolve_peers(&mut s);
    let changed = MacAddr([0x02, 0, 0, 0, 0, 0x33]);
    s.macs.learn(None, changed, Location::Port(PortId(3)), Instant::ZERO);
    let hijack = vxlan(PEER, changed, LOCAL, 5001, &inner);
    assert!(s
        .ingress(Ingress::Uplink(UplinkId(0)), &hijack, Instant::ZERO)
        .is_empty());
    assert_eq!(
        s.uplink_counters(UplinkId(0)).unwrap().drops(DropReason::TunnelSpoof),
        1
    );
    // The remote's own frames still flow.
    let out = s.ingress(
        Ingress::Uplink(UplinkId(0)),
        &vxlan(PEER, PEER_MAC, LOCAL, 5001, &inner),
        Instant::ZERO,
    );
    assert_eq!(targets(&out), vec![Egress::Port(PortId(2))]);
}

/// VXLAN from a listed remote's address is taken only from the MAC ARP found it at: from any
/// other MAC (a host outside the switch) it is dropped and the remote asked for again; before
/// ARP found it, the frame waits for ARP.
#[test]
fn vxlan_is_taken_only_from_the_mac_arp_found() {
    let mut s = switch();
    own_frames(&mut s);
    let inner = udp(FAR_VM, mac(2).0, None);
    let early = vxlan(PEER, PEER_MAC, LOCAL, 5001, &inner);
    assert!(s
        .ingress(Ingress::Uplink(UplinkId(0)), &early, Instant::ZERO)
        .is_empty());
    let up = s.uplink_counters(UplinkId(0)).unwrap();
    assert_eq!(up.drops(DropReason::VtepUnresolved), 1);
    let asked = own_frames(&mut s);
    assert_eq!(asked.len(), 1);
    assert_eq!((asked[0].1.arp_op, asked[0].1.dst_ip), (Some(1), Some(PEER.into())));
    assert_eq!(s.vtep_neighbors()[0], (PEER, None), "nothing learned from VXLAN");
    // The answer finds it; then a stranger's MAC with the remote's address is refused.
    let answer = build_arp_reply(PEER_MAC, PEER, UPLINK_MAC, LOCAL);
    s.ingress(Ingress::Uplink(UplinkId(0)), &answer, Instant::from_secs(1));
    let stranger = MacAddr([0x0a, 0, 0, 0, 0, 0x66]);
    let t = Instant::from_secs(2);
    assert!(s
        .ingress(
            Ingress::Uplink(UplinkId(0)),
            &vxlan(PEER, stranger, LOCAL, 5001, &inner),
            t
        )
        .is_empty());
    assert_eq!(
        s.uplink_counters(UplinkId(0)).unwrap().drops(DropReason::TunnelSpoof),
        1
    );
    assert_eq!(own_frames(&mut s).len(), 1, "the remote asked for again");
    assert_eq!(s.vtep_neighbors()[0], (PEER, Some(PEER_MAC)));
    let out = s.ingress(Ingress::Uplink(UplinkId(0)), &early, t);
    assert_eq!(targets(&out), vec![Egress::Port(PortId(2))]);
}
