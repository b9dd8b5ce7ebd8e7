use super::*;
use crate::offload::{Gro, Gso, GsoKind, PartialChecksum};
use crate::wire::parse;
use core::net::{Ipv4Addr, Ipv6Addr};
use etherparse::PacketBuilder;
use proptest::prelude::*;

const VM_A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
const VM_B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];

/// A VM's TCP segment (ACK) of `payload` from `sport`, sequence `seq`, checksum complete.
fn inner_tcp(sport: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    PacketBuilder::ethernet2(VM_A, VM_B)
        .ipv4([192, 168, 0, 1], [192, 168, 0, 2], 64)
        .tcp(sport, 80, seq, 4000)
        .ack(1)
        .write(&mut f, payload)
        .unwrap();
    f
}

fn ends(v6: bool) -> TunnelEnds {
    let (s, d): (IpAddr, IpAddr) = if v6 {
        (
            Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1).into(),
            Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2).into(),
        )
    } else {
        (Ipv4Addr::new(10, 0, 0, 1).into(), Ipv4Addr::new(10, 0, 0, 2).into())
    };
    TunnelEnds::new(MacAddr([2, 1, 1, 1, 1, 1]), MacAddr([2, 2, 2, 2, 2, 2]), s, d).unwrap()
}

fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 13 % 251) as u8).collect()
}

#[test]
fn vnis_are_24_bits() {
    assert_eq!(Vni::new(0).unwrap().get(), 0);
    assert_eq!(Vni::new(0xff_ffff).unwrap().get(), 0xff_ffff);
    assert_eq!(
        Vni::new(1 << 24).unwrap_err(),
        "VNI 16777216 is out of range 0-16777215"
    );
    assert!(Vni::new(u64::MAX).is_err());
}

#[test]
fn tunnel_ends_are_one_family_and_real_addresses() {
    let m = MacAddr([2, 0, 0, 0, 0, 1]);
    let v4: IpAddr = Ipv4Addr::new(10, 0, 0, 1).into();
    let v6: IpAddr = Ipv6Addr::LOCALHOST.into();
    assert!(TunnelEnds::new(m, m, v4, v6)
        .unwrap_err()
        .contains("different families"));
    assert!(TunnelEnds::new(m, m, Ipv4Addr::UNSPECIFIED.into(), v4).is_err());
    assert!(TunnelEnds::new(m, m, Ipv4Addr::new(224, 0, 0, 1).into(), v4).is_err());
}

#[test]
fn encapsulated_frames_parse_and_open_to_the_same_inner_frame() {
    for v6 in [false, true] {
        let inner = inner_tcp(1000, 7, &payload(100));
        let vni = Vni::new(5001).unwrap();
        let f = encapsulate(&inner, vni, &ends(v6)).unwrap();
        assert_eq!(f.len(), inner.len() + ends(v6).overhead());
        // The frame parser sees VXLAN with the inner flow.
        let k = parse(&f).unwrap();
        let vx = k.vxlan.expect("a VXLAN frame");
        assert_eq!((vx.vni, vx.inner.dst_mac), (5001, MacAddr(VM_B)));
        assert_eq!(k.dst_port, Some(VXLAN_PORT));
        assert!(k.src_port.unwrap() >= 49152);
        // Outer checksums are right (IPv6: UDP's computed; IPv4: header's, UDP's zero).
        assert!(l4_checksum_valid(&f));
        if !v6 {
            assert_eq!(internet_checksum(&f[14..34]), 0);
            assert_eq!(&f[40..42], &[0, 0], "IPv4 outer UDP checksum is zero");
        }
        let d = decapsulate(&f).unwrap();
        assert_eq!(
            (d.vni, d.remote, d.local, d.inner),
            (vni, ends(v6).src_ip, ends(v6).dst_ip, &inner[..])
        );
    }
}

#[test]
fn the_source_port_follows_the_inner_flow() {
    let a = source_port(&inner_tcp(1000, 1, b"x"));
    assert_eq!(
        a,
        source_port(&inner_tcp(1000, 99, b"other data")),
        "one flow, one port"
    );
    let ports: std::collections::HashSet<u16> = (0..64).map(|p| source_port(&inner_tcp(2000 + p, 1, b"x"))).collect();
    assert!(ports.len() > 50, "64 flows over {} source ports", ports.len());
    assert!(ports.iter().all(|p| *p >= 49152));
    // Anything at all gets a port in range, even a runt.
    assert!(source_port(&[1, 2, 3]) >= 49152);
}

#[test]
fn outer_padding_is_not_taken_as_inner_bytes() {
    let inner = inner_tcp(1000, 7, b"");
    let mut f = encapsulate(&inner, Vni::new(1).unwrap(), &ends(false)).unwrap();
    f.extend_from_slice(&[0; 6]);
    assert_eq!(decapsulate(&f).unwrap().inner, &inner[..]);
}

#[test]
fn what_is_not_a_vxlan_frame_is_refused_and_named() {
    let inner = inner_tcp(1000, 7, b"data");
    let good = encapsulate(&inner, Vni::new(1).unwrap(), &ends(false)).unwrap();
    let good6 = encapsulate(&inner, Vni::new(1).unwrap(), &ends(true)).unwrap();
    assert_eq!(decapsulate(&inner), Err(DecapError::NotVxlan));
    let mut other_port = good.clone();
    other_port[36..38].copy_from_slice(&4790u16.to_be_bytes());
    assert_eq!(decapsulate(&other_port), Err(DecapError::NotVxlan));
    let mut frag = good.clone();
    frag[20] = 0x20; // more fragments
    assert_eq!(decapsulate(&frag), Err(DecapError::Fragment));
    let mut no_i = good.clone();
    no_i[42] = 0;
    assert_eq!(decapsulate(&no_i), Err(DecapError::NoVni));
    let mut corrupt = good6.clone();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    assert_eq!(decapsulate(&corrupt), Err(DecapError::Checksum));
    for cut in [10, 30, 40, 45, 60] {
        assert!(
            matches!(decapsulate(&good[..cut]), Err(DecapError::Truncated(_))),
            "cut at {cut}"
        );
    }
    let mut short = good.clone();
    short[38..40].copy_from_slice(&(16u16 + 10).to_be_bytes());
    assert_eq!(decapsulate(&short), Err(DecapError::ShortInner));
    // A UDP length past the IP packet's.
    let mut long = good.clone();
    long[16..18].copy_from_slice(&(20u16 + 30).to_be_bytes());
    assert_eq!(decapsulate(&long), Err(DecapError::Truncated("UDP datagram")));
    // IPv6 requires a UDP checksum.
    let mut unsummed = good6.clone();
    unsummed[60..62].copy_from_slice(&[0, 0]);
    assert_eq!(decapsulate(&unsummed), Err(DecapError::Checksum));
}

#[test]
fn over_ipv6_nothing_is_left_to_the_uplink_inside_the_tunnel() {
    let (f, o) = super_frame(20_000, 1448);
    let all = TunnelOffloads {
        checksum: true,
        tso: true,
        mtu: 1500,
    };
    let out = encapsulate_frames(&f, o, Vni::new(9).unwrap(), &ends(true), all).unwrap();
    assert!(out.len() > 1 && out.iter().all(|(_, left)| left.is_none()));
    for (outer, _) in &out {
        let d = decapsulate(outer).unwrap();
        assert!(l4_checksum_valid(d.inner));
    }
}

#[test]
fn ends_of_two_families_built_by_hand_send_nothing() {
    let mut e = ends(false);
    e.dst_ip = Ipv6Addr::LOCALHOST.into();
    let mut buf = vec![1, 2, 3];
    assert!(!encapsulate_into(
        b"0123456789abcdef",
        Vni::new(1).unwrap(),
        &e,
        &mut buf
    ));
    assert_eq!(buf, [1, 2, 3]);
}

#[test]
fn an_inner_frame_too_long_for_a_datagram_is_refused() {
    let inner = vec![0u8; MAX_INNER + 21];
    assert!(encapsulate(&inner[..MAX_INNER + 1], Vni::new(1).unwrap(), &ends(false)).is_none());
    let f = encapsulate(&inner[..MAX_INNER], Vni::new(1).unwrap(), &ends(false)).unwrap();
    assert_eq!(&f[16..18], &[0xff, 0xff], "IPv4 total length 65535");
    assert!(encapsulate(&inner, Vni::new(1).unwrap(), &ends(true)).is_none());
    assert!(encapsulate(&inner[..MAX_INNER + 20], Vni::new(1).unwrap(), &ends(true)).is_some());
}

/// A TSO super-frame as a guest hands it over: checksum field holding junk, left to the device.
fn super_frame(len: usize, mss: u16) -> (Vec<u8>, Offload) {
    let mut f = inner_tcp(4000, 1_000_000, &payload(len));
    f[50] ^= 0x5a;
    let o = Offload {
        csum: Some(PartialChecksum { start: 34, offset: 16 }),
        gso: Some(Gso {
            kind: GsoKind::TcpV4,
            size: mss,
            ecn: false,
        }),
    };
    (f, o)
}

const NO_OFFLOADS: TunnelOffloads = TunnelOffloads {
    checksum: false,
    tso: false,
    mtu: 1500,
};

#[test]
fn an_uplink_with_tunnel_offloads_gets_the_frame_whole() {
    let (f, o) = super_frame(20_000, 1448);
    let all = TunnelOffloads {
        checksum: true,
        tso: true,
        mtu: 1500,
    };
    let out = encapsulate_frames(&f, o, Vni::new(9).unwrap(), &ends(false), all).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1, o, "the request stays, for the inner frame");
    assert_eq!(decapsulate(&out[0].0).unwrap().inner, &f[..]);
}

#[test]
fn a_partial_checksum_the_uplink_cannot_complete_is_completed() {
    let (f, o) = super_frame(500, 1448);
    let csum_only = Offload { gso: None, ..o };
    let out = encapsulate_frames(&f, csum_only, Vni::new(9).unwrap(), &ends(false), NO_OFFLOADS).unwrap();
    assert_eq!(out.len(), 1);
    assert!(out[0].1.is_none());
    assert!(l4_checksum_valid(decapsulate(&out[0].0).unwrap().inner));
    // A super-frame that fits one segment is that segment.
    let out = encapsulate_frames(&f, o, Vni::new(9).unwrap(), &ends(false), NO_OFFLOADS).unwrap();
    assert_eq!(out.len(), 1);
    assert!(l4_checksum_valid(decapsulate(&out[0].0).unwrap().inner));
}

#[test]
fn a_bad_request_or_a_super_frame_of_udp_is_refused() {
    let (f, mut o) = super_frame(5000, 1448);
    o.csum = Some(PartialChecksum {
        start: 34,
        offset: 60_000,
    });
    assert!(encapsulate_frames(&f, o, Vni::new(9).unwrap(), &ends(false), NO_OFFLOADS).is_none());
}

proptest! {
    /// A super-frame sent through a tunnel whose uplink cannot segment inside it: every outer
    /// frame fits the MTU, opens to an inner segment no larger than the sender's MSS with a
    /// valid checksum, and coalescing the inner segments gives back the super-frame's bytes.
    #[test]
    fn software_segmentation_in_the_tunnel_keeps_the_byte_stream(len in 1usize..60_000, mss in 88u16..9000, mtu in 1280usize..9000, v6 in any::<bool>()) {
        let (f, o) = super_frame(len, mss);
        let e = ends(v6);
        let uplink = TunnelOffloads { mtu, ..NO_OFFLOADS };
        let out = encapsulate_frames(&f, o, Vni::new(77).unwrap(), &e, uplink).unwrap();
        let mut gro = Gro::new();
        let mut merged = Vec::new();
        for (outer, left) in &out {
            prop_assert!(left.is_none());
            prop_assert!(outer.len() <= mtu + 14, "{} bytes for MTU {}", outer.len(), mtu);
            let d = decapsulate(outer).unwrap();
            prop_assert_eq!(d.vni.get(), 77);
            prop_assert!(l4_checksum_valid(d.inner));
            prop_assert!(d.inner.len() - 54 <= usize::from(mss));
            gro.receive(d.inner.to_vec(), &mut merged);
        }
        gro.flush(&mut merged);
        let mut stream = Vec::new();
        for m in &merged {
            prop_assert!(l4_checksum_valid(&m.frame));
            stream.extend_from_slice(&m.frame[54..]);
        }
        prop_assert_eq!(stream, payload(len));
    }

    /// Completed once and wrapped for a VTEP, a super-frame's pieces open to segments no larger
    /// than the sender's MSS, with valid checksums, that coalesce back to its bytes.
    #[test]
    fn completed_pieces_keep_the_byte_stream(len in 1usize..60_000, mss in 88u16..9000) {
        let (f, o) = super_frame(len, mss);
        let pieces = complete_inner(&f, o, u16::MAX as usize - 50).unwrap();
        let mut gro = Gro::new();
        let mut merged = Vec::new();
        for p in &pieces {
            let mut outer = Vec::new();
            prop_assert!(encapsulate_into(p, Vni::new(3).unwrap(), &ends(false), &mut outer));
            let d = decapsulate(&outer).unwrap();
            prop_assert!(l4_checksum_valid(d.inner));
            prop_assert!(d.inner.len() - 54 <= usize::from(mss));
            gro.receive(d.inner.to_vec(), &mut merged);
        }
        gro.flush(&mut merged);
        let stream: Vec<u8> = merged.iter().flat_map(|m| m.frame[54..].to_vec()).collect();
        prop_assert_eq!(stream, payload(len));
    }

    /// Whatever bytes arrive, opening them never panics, and what opens lies inside the frame.
    #[test]
    fn decapsulation_takes_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(d) = decapsulate(&bytes) {
            prop_assert!(d.inner.len() >= 14 && d.inner.len() <= bytes.len());
        }
    }
}
