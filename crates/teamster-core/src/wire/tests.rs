//! Parser and builder tests: each supported layer, truncation at every length, random bytes.

use super::*;
use core::net::{Ipv4Addr, Ipv6Addr};
use etherparse::{PacketBuilder, VlanId};
use proptest::prelude::*;

const A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

fn eth(ether_type: u16) -> Vec<u8> {
    let mut f = B.to_vec();
    f.extend_from_slice(&A);
    f.extend_from_slice(&ether_type.to_be_bytes());
    f
}

/// An IPv4 header with `options` (a multiple of 4 bytes) and the given fragment fields.
fn ipv4_header(proto: u8, payload_len: usize, options: &[u8], frag_offset: u16, more: bool) -> Vec<u8> {
    let ihl = (20 + options.len()) / 4;
    let total = (ihl * 4 + payload_len) as u16;
    let flags_frag = (if more { 0x2000 } else { 0 }) | frag_offset;
    let mut h = vec![0x40 | ihl as u8, 0];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&[0, 1]);
    h.extend_from_slice(&flags_frag.to_be_bytes());
    h.extend_from_slice(&[64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    h.extend_from_slice(options);
    h
}

fn tcp_header(sport: u16, dport: u16) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
    t
}

fn udp_frame(dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2(A, B)
        .ipv4([192, 168, 1, 1], [192, 168, 1, 2], 64)
        .udp(40000, dport)
        .write(&mut out, payload)
        .unwrap();
    out
}

#[test]
fn ethernet_ipv4_tcp() {
    let mut f = Vec::new();
    PacketBuilder::ethernet2(A, B)
        .ipv4([10, 1, 1, 1], [10, 2, 2, 2], 64)
        .tcp(1234, 80, 1, 1000)
        .write(&mut f, b"hello")
        .unwrap();
    let k = parse(&f).unwrap();
    assert_eq!(k.src_mac, MacAddr(A));
    assert_eq!(k.dst_mac, MacAddr(B));
    assert_eq!(k.ether_type, 0x0800);
    assert_eq!(k.src_ip, Some(Ipv4Addr::new(10, 1, 1, 1).into()));
    assert_eq!(k.dst_ip, Some(Ipv4Addr::new(10, 2, 2, 2).into()));
    assert_eq!((k.ip_proto, k.src_port, k.dst_port), (Some(6), Some(1234), Some(80)));
    assert!(!k.fragment && k.vlan.is_none() && k.vxlan.is_none());
}

#[test]
fn single_and_double_vlan_tags() {
    let mut f = Vec::new();
    PacketBuilder::ethernet2(A, B)
        .single_vlan(VlanId::try_new(100).unwrap())
        .ipv4([1, 1, 1, 1], [2, 2, 2, 2], 64)
        .udp(5, 6)
        .write(&mut f, &[])
        .unwrap();
    let k = parse(&f).unwrap();
    assert_eq!((k.vlan, k.inner_vlan, k.ether_type), (Some(100), None, 0x0800));
    assert_eq!((k.src_port, k.dst_port), (Some(5), Some(6)));

    let mut f = Vec::new();
    PacketBuilder::ethernet2(A, B)
        .double_vlan(VlanId::try_new(200).unwrap(), VlanId::try_new(30).unwrap())
        .ipv6([1; 16], [2; 16], 64)
        .tcp(7, 8, 0, 100)
        .write(&mut f, &[])
        .unwrap();
    let k = parse(&f).unwrap();
    assert_eq!((k.vlan, k.inner_vlan, k.ether_type), (Some(200), Some(30), 0x86dd));
    assert_eq!(k.src_ip, Some(Ipv6Addr::from([1; 16]).into()));
    assert_eq!((k.ip_proto, k.src_port, k.dst_port), (Some(6), Some(7), Some(8)));
}

#[test]
fn ipv4_options_and_fragments() {
    let tcp = tcp_header(1000, 2000);
    let mut f = eth(0x0800);
    f.extend(ipv4_header(6, tcp.len(), &[1, 1, 1, 0], 0, false)); // NOP NOP NOP EOL
    f.extend(&tcp);
    let k = parse(&f).unwrap();
    assert_eq!((k.src_port, k.dst_port), (Some(1000), Some(2000)), "options skipped");
    assert!(!k.fragment);

    // First fragment (MF set): ports are not trusted, the key says fragment.
    let mut f = eth(0x0800);
    f.extend(ipv4_header(6, tcp.len(), &[], 0, true));
    f.extend(&tcp);
    let k = parse(&f).unwrap();
    assert!(k.fragment);
    assert_eq!((k.src_port, k.dst_port, k.ip_proto), (None, None, Some(6)));

    // A later fragment: payload is not a TCP header at all.
    let mut f = eth(0x0800);
    f.extend(ipv4_header(6, 8, &[], 185, false));
    f.extend([0xde; 8]);
    let k = parse(&f).unwrap();
    assert!(k.fragment && k.src_port.is_none());
}

#[test]
fn ipv6_extension_headers_are_walked() {
    let tcp = tcp_header(443, 55555);
    // Hop-by-hop (8 bytes, next = destination options), destination options (8 bytes, next = TCP).
    let hbh = [60u8, 0, 1, 4, 0, 0, 0, 0];
    let dst = [6u8, 0, 1, 4, 0, 0, 0, 0];
    let payload_len = (hbh.len() + dst.len() + tcp.len()) as u16;
    let mut f = eth(0x86dd);
    f.extend([0x60, 0, 0, 0]);
    f.extend(payload_len.to_be_bytes());
    f.extend([0 /* next: hop-by-hop */, 64]);
    f.extend([0x20; 16]);
    f.extend([0x30; 16]);
    f.extend(hbh);
    f.extend(dst);
    f.extend(&tcp);
    let k = parse(&f).unwrap();
    assert_eq!((k.ip_proto, k.src_port, k.dst_port), (Some(6), Some(443), Some(55555)));
    assert_eq!(k.dst_ip, Some(Ipv6Addr::from([0x30; 16]).into()));

    // Fragment header (next = UDP, offset 0, M set): a fragment, no ports.
    let frag = [17u8, 0, 0, 1, 0, 0, 0, 7];
    let mut f = eth(0x86dd);
    f.extend([0x60, 0, 0, 0]);
    f.extend(((frag.len() + 8) as u16).to_be_bytes());
    f.extend([44, 64]);
    f.extend([0x20; 16]);
    f.extend([0x30; 16]);
    f.extend(frag);
    f.extend([0, 1, 0, 2, 0, 8, 0, 0]);
    let k = parse(&f).unwrap();
    assert!(k.fragment);
    assert_eq!((k.ip_proto, k.src_port), (Some(17), None));
}

#[test]
fn arp_and_rarp() {
    let mac = MacAddr(A);
    let garp = build_gratuitous_arp(mac, Ipv4Addr::new(10, 0, 0, 7), None);
    assert_eq!(garp.len(), 60);
    let k = parse(&garp).unwrap();
    assert_eq!((k.ether_type, k.arp_op), (ETHERTYPE_ARP, Some(1)));
    assert_eq!(k.src_ip, Some(Ipv4Addr::new(10, 0, 0, 7).into()));
    assert_eq!(k.dst_ip, k.src_ip, "gratuitous: target = sender");
    assert_eq!(k.dst_mac, MacAddr::BROADCAST);

    let rarp = build_rarp(mac, Some(42));
    assert_eq!(rarp.len(), 60);
    let k = parse(&rarp).unwrap();
    assert_eq!((k.ether_type, k.arp_op, k.vlan), (ETHERTYPE_RARP, Some(3), Some(42)));
    assert_eq!((k.src_mac, k.dst_mac), (mac, MacAddr::BROADCAST));

    // A RARP body cut short is an error, not a guess.
    let mut cut = eth(ETHERTYPE_RARP);
    cut.extend([0, 1, 8, 0, 6, 4, 0, 3, 1, 2]);
    assert!(matches!(parse(&cut), Err(ParseError::Truncated { layer: "RARP", .. })));
}

#[test]
fn vxlan_inner_frame() {
    let mut inner = Vec::new();
    PacketBuilder::ethernet2([0x02, 0, 0, 0, 1, 1], [0x02, 0, 0, 0, 2, 2])
        .ipv4([172, 16, 0, 1], [172, 16, 0, 2], 64)
        .tcp(3333, 4444, 0, 100)
        .write(&mut inner, &[])
        .unwrap();
    let mut payload = vec![0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0];
    payload.extend(&inner);
    let k = parse(&udp_frame(VXLAN_PORT, &payload)).unwrap();
    assert_eq!(k.dst_port, Some(4789));
    let vx = k.vxlan.expect("VXLAN decoded");
    assert_eq!(vx.vni, 0x123456);
    assert_eq!(vx.inner.src_mac, MacAddr([0x02, 0, 0, 0, 1, 1]));
    assert_eq!((vx.inner.src_port, vx.inner.dst_port), (Some(3333), Some(4444)));

    // No I flag: malformed. Short header or inner frame: truncated.
    let mut bad = payload.clone();
    bad[0] = 0;
    assert!(matches!(
        parse(&udp_frame(VXLAN_PORT, &bad)),
        Err(ParseError::Malformed { layer: "VXLAN", .. })
    ));
    assert!(matches!(
        parse(&udp_frame(VXLAN_PORT, &payload[..5])),
        Err(ParseError::Truncated { layer: "VXLAN", .. })
    ));
    assert!(matches!(
        parse(&udp_frame(VXLAN_PORT, &payload[..20])),
        Err(ParseError::Truncated {
            layer: "VXLAN inner frame",
            ..
        })
    ));
    // Other UDP ports are not VXLAN.
    assert!(parse(&udp_frame(4790, &payload)).unwrap().vxlan.is_none());
}

#[test]
fn every_truncation_of_valid_frames_is_an_error_or_a_shorter_key() {
    let mut frames = vec![build_rarp(MacAddr(A), Some(7))];
    let mut f = Vec::new();
    PacketBuilder::ethernet2(A, B)
        .double_vlan(VlanId::try_new(1).unwrap(), VlanId::try_new(2).unwrap())
        .ipv4([1, 2, 3, 4], [5, 6, 7, 8], 1)
        .tcp(1, 2, 3, 4)
        .write(&mut f, &[9; 10])
        .unwrap();
    frames.push(f);
    for frame in frames {
        for len in 0..frame.len() {
            // Must not panic; a cut inside any header must be reported.
            if let Ok(k) = parse(&frame[..len]) {
                assert!(len >= 14, "a frame shorter than Ethernet parsed: {k:?}");
            }
        }
    }
    assert!(matches!(
        parse(&[0u8; 13]),
        Err(ParseError::Truncated { layer: "Ethernet", .. })
    ));
}

#[test]
fn mac_addresses_parse_and_print() {
    let m: MacAddr = "02:00:00:aa:bb:0c".parse().unwrap();
    assert_eq!(m.to_string(), "02:00:00:aa:bb:0c");
    assert!("02:00:00:aa:bb".parse::<MacAddr>().is_err());
    assert!("02:00:00:aa:bb:zz".parse::<MacAddr>().is_err());
    assert!(MacAddr::BROADCAST.is_multicast() && !m.is_multicast());
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse(&bytes);
    }

    #[test]
    fn corrupted_vxlan_frames_never_panic(flip in 0usize..120, value in any::<u8>(), cut in 0usize..130) {
        let mut inner = Vec::new();
        PacketBuilder::ethernet2(A, B).ipv6([3; 16], [4; 16], 5).udp(1, 2).write(&mut inner, &[1, 2, 3]).unwrap();
        let mut payload = vec![0x08, 0, 0, 0, 0, 0, 1, 0];
        payload.extend(inner);
        let mut f = udp_frame(VXLAN_PORT, &payload);
        if flip < f.len() { f[flip] = value; }
        f.truncate(cut.max(1));
        let _ = parse(&f);
    }
}
