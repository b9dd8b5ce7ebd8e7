//! Link-control frames (BPDUs, PAUSE, EAPOL, LLDP, Cisco's protocols) are never forwarded,
//! tried from a VM, from the physical network and inside a tunnel; LLDP reaches the ports of a
//! group that asks for it, and only those.

use super::tests::{mac, switch_with, targets, udp};
use super::*;

/// A frame of `len` bytes to `dst` from `src`, EtherType (or 802.3 length) `et`, after `tag`.
fn control(dst: [u8; 6], src: MacAddr, tag: Option<u16>, et: u16) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&src.0);
    if let Some(v) = tag {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&v.to_be_bytes());
    }
    f.extend_from_slice(&et.to_be_bytes());
    f.resize(64, 0);
    f
}

fn reserved(last: u8) -> [u8; 6] {
    [0x01, 0x80, 0xc2, 0, 0, last]
}

/// One of each kind the issue names, and the rest of the block.
fn every_kind(src: MacAddr, tag: Option<u16>) -> Vec<Vec<u8>> {
    let mut frames = vec![
        control(reserved(0), src, tag, 0x0026),                          // STP config BPDU
        control(reserved(0), src, tag, 0x0007),                          // TCN BPDU
        control([0x01, 0x00, 0x0c, 0xcc, 0xcc, 0xcd], src, tag, 0x0032), // PVST+
        control([0x01, 0x00, 0x0c, 0xcc, 0xcc, 0xcc], src, tag, 0x0040), // CDP, VTP, DTP
        control(reserved(1), src, tag, 0x8808),                          // PAUSE, PFC
        control([0x02, 0, 0, 0, 0, 0x77], src, tag, 0x8808),             // MAC control, unicast
        control(reserved(3), src, tag, 0x888e),                          // EAPOL
        control(reserved(0x0e), src, tag, 0x88cc),                       // LLDP
    ];
    frames.extend((4..=0x0f).map(|b| control(reserved(b), src, tag, 0x0800)));
    frames
}

fn lldp_for(group: usize) -> SwitchConfig {
    let mut security = vec![SecurityPolicy::default(); 2];
    security[group].link_local = LinkLocal::LLDP;
    SwitchConfig {
        security,
        ..SwitchConfig::default()
    }
}

#[test]
fn a_vms_link_control_frames_go_nowhere_and_are_counted() {
    // Even in a group that takes LLDP from its uplinks: what its VMs send stays dropped.
    let mut s = switch_with(lldp_for(0));
    let frames = every_kind(mac(1), None);
    for f in &frames {
        let out = s.ingress(Ingress::Port(PortId(1)), f, Instant::ZERO);
        assert!(out.is_empty(), "{:02x?} went to {:?}", &f[..14], targets(&out));
    }
    // A VLAN tag does not make one forwardable.
    for f in every_kind(mac(1), Some(10)) {
        assert!(s.ingress(Ingress::Port(PortId(1)), &f, Instant::ZERO).is_empty());
    }
    let c = s.port_counters(PortId(1)).unwrap();
    assert_eq!(c.drops(DropReason::LinkControl), 2 * frames.len() as u64);
    assert_eq!(c.total_drops(), 2 * frames.len() as u64, "no other reason");
    // An ordinary multicast still floods.
    let ordinary = udp(mac(1).0, [0x01, 0x00, 0x5e, 0, 0, 1], None);
    assert_eq!(s.ingress(Ingress::Port(PortId(1)), &ordinary, Instant::ZERO).len(), 2);
}

#[test]
fn an_uplinks_link_control_frames_reach_no_vm_unless_its_group_takes_lldp() {
    let neighbour = MacAddr([0x0a, 0, 0, 0, 0, 0x42]);
    let mut s = switch_with(SwitchConfig::default());
    let frames = every_kind(neighbour, None);
    for u in [UplinkId(0), UplinkId(1)] {
        for f in &frames {
            assert!(s.ingress(Ingress::Uplink(u), f, Instant::ZERO).is_empty());
        }
    }
    let c = s.uplink_counters(UplinkId(0)).unwrap();
    assert_eq!(c.drops(DropReason::LinkControl), frames.len() as u64);
    // Group "a" (ports 1, 2; VLAN 10) asks for LLDP: each of its ports takes it from each
    // uplink of its order, untagged as it came; group "b" (port 3) does not, and nothing else
    // passes.
    let mut s = switch_with(lldp_for(0));
    let lldp = control(reserved(0x0e), neighbour, None, 0x88cc);
    for u in [UplinkId(0), UplinkId(1)] {
        let out = s.ingress(Ingress::Uplink(u), &lldp, Instant::ZERO);
        let mut to = targets(&out);
        to.sort_by_key(|e| format!("{e:?}"));
        assert_eq!(to, [Egress::Port(PortId(1)), Egress::Port(PortId(2))]);
        assert!(out.iter().all(|o| o.frame == lldp), "delivered as it came");
    }
    let lldp_kind = Some(crate::wire::LinkControl::Lldp);
    for f in frames.iter().filter(|f| crate::wire::link_control(f) != lldp_kind) {
        assert!(s.ingress(Ingress::Uplink(UplinkId(0)), f, Instant::ZERO).is_empty());
    }
    // Tagged LLDP is not link-local LLDP: dropped.
    let tagged = control(reserved(0x0e), neighbour, Some(10), 0x88cc);
    assert!(s
        .ingress(Ingress::Uplink(UplinkId(0)), &tagged, Instant::ZERO)
        .is_empty());
    let c = s.uplink_counters(UplinkId(0)).unwrap();
    assert_eq!(c.drops(DropReason::LinkControl), frames.len() as u64);
    assert!(
        s.mac_table().lookup(None, neighbour, Instant::ZERO).is_none(),
        "nothing learned"
    );
}
