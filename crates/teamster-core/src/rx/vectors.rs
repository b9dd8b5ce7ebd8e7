//! The RSS specification's verification vectors ("Verifying the RSS Hash Calculation"; the same
//! tables are in Intel's 82599 datasheet, DPDK's `test_thash.c` and VPP's Toeplitz test), and
//! the symmetric key's property, through the same path frames take.

use super::rss::{hash_input, HashTypes, Indirection, RssConfig};
use super::toeplitz::{toeplitz, MICROSOFT_KEY, SYMMETRIC_KEY};
use crate::wire::{FlowKey, Vxlan};
use core::net::IpAddr;

/// (source, source port, destination, destination port, IP-only hash, with-TCP hash).
const VECTORS: [(&str, u16, &str, u16, u32, u32); 8] = [
    ("66.9.149.187", 2794, "161.142.100.80", 1766, 0x323e8fc2, 0x51ccc178),
    ("199.92.111.2", 14230, "65.69.140.83", 4739, 0xd718262a, 0xc626b0ea),
    ("24.19.198.95", 12898, "12.22.207.184", 38024, 0xd2d0a5de, 0x5c2b394a),
    ("38.27.205.30", 48228, "209.142.163.6", 2217, 0x82989176, 0xafc7327f),
    ("153.39.163.191", 44251, "202.188.127.2", 1303, 0x5d1809c5, 0x10e828a2),
    (
        "3ffe:2501:200:1fff::7",
        2794,
        "3ffe:2501:200:3::1",
        1766,
        0x2cc18cd5,
        0x40207d3d,
    ),
    (
        "3ffe:501:8::260:97ff:fe40:efab",
        14230,
        "ff02::1",
        4739,
        0x0f0c461c,
        0xdde51bbf,
    ),
    (
        "3ffe:1900:4545:3:200:f8ff:fe21:67cf",
        44251,
        "fe80::200:f8ff:fe21:67cf",
        38024,
        0x4b61e985,
        0x02d1feef,
    ),
];

fn tcp(src: &str, sport: u16, dst: &str, dport: u16) -> FlowKey {
    FlowKey {
        src_ip: Some(src.parse::<IpAddr>().unwrap()),
        dst_ip: Some(dst.parse::<IpAddr>().unwrap()),
        ip_proto: Some(6),
        src_port: Some(sport),
        dst_port: Some(dport),
        ..Default::default()
    }
}

#[test]
fn the_specification_vectors_hash_as_published() {
    let rss = RssConfig::new(1).unwrap();
    let ip_only = HashTypes {
        tcp_ipv4: false,
        tcp_ipv6: false,
        ..HashTypes::default()
    };
    for (src, sport, dst, dport, ip, with_tcp) in VECTORS {
        let f = tcp(src, sport, dst, dport);
        assert_eq!(rss.hash(&f), Some(with_tcp), "{src} -> {dst}, TCP");
        let two = hash_input(&f, ip_only).unwrap();
        assert_eq!(toeplitz(&MICROSOFT_KEY, two.as_bytes()), ip, "{src} -> {dst}, IP");
    }
}

#[test]
fn the_first_vector_hashes_the_documented_bytes() {
    let f = tcp(VECTORS[0].0, VECTORS[0].1, VECTORS[0].2, VECTORS[0].3);
    let input = hash_input(&f, HashTypes::default()).unwrap();
    assert_eq!(
        input.as_bytes(),
        [0x42, 0x09, 0x95, 0xbb, 0xa1, 0x8e, 0x64, 0x50, 0x0a, 0xea, 0x06, 0xe6]
    );
}

#[test]
fn fragments_udp_and_other_protocols_hash_their_addresses_and_non_ip_nothing() {
    let rss = RssConfig::new(4).unwrap();
    let (src, sport, dst, dport, ip, _) = VECTORS[0];
    let mut frag = tcp(src, sport, dst, dport);
    frag.fragment = true;
    assert_eq!(
        rss.hash(&frag),
        Some(ip),
        "a fragment, the first one too, hashes the 2-tuple"
    );
    let mut udp = tcp(src, sport, dst, dport);
    udp.ip_proto = Some(17);
    assert_eq!(rss.hash(&udp), Some(ip), "UDP is off by default: the 2-tuple");
    let mut on = rss.clone();
    on.types.udp_ipv4 = true;
    assert_eq!(on.hash(&udp), Some(VECTORS[0].5), "UDP on: the same layout as TCP");
    let mut gre = tcp(src, sport, dst, dport);
    gre.ip_proto = Some(47);
    (gre.src_port, gre.dst_port) = (None, None);
    assert_eq!(rss.hash(&gre), Some(ip));
    let mut no_ip = rss.clone();
    no_ip.types.ipv4 = false;
    assert_eq!(no_ip.hash(&gre), None, "an unhashed type takes the default queue");
    assert_eq!(no_ip.queue(&gre), 0);
    assert_eq!(rss.hash(&FlowKey::default()), None, "not IP");
    let arp = FlowKey {
        arp_op: Some(1),
        ..tcp(src, sport, dst, dport)
    };
    assert_eq!(rss.hash(&arp), None, "ARP's addresses are not hashed");
}

#[test]
fn vxlan_frames_hash_their_inner_headers() {
    let inner = tcp(VECTORS[1].0, VECTORS[1].1, VECTORS[1].2, VECTORS[1].3);
    let outer = FlowKey {
        ip_proto: Some(17),
        vxlan: Some(Box::new(Vxlan { vni: 5001, inner })),
        ..tcp("192.0.2.1", 49152, "192.0.2.2", 4789)
    };
    let mut rss = RssConfig::new(8).unwrap();
    assert_eq!(rss.hash(&outer), Some(VECTORS[1].5));
    rss.inner = false;
    assert_ne!(rss.hash(&outer), Some(VECTORS[1].5), "outer: the tunnel's addresses");
}

#[test]
fn the_symmetric_key_hashes_both_directions_alike() {
    let mut rss = RssConfig::new(16).unwrap();
    rss.key = super::RssKey::new(&SYMMETRIC_KEY).unwrap();
    for (src, sport, dst, dport, _, _) in VECTORS {
        let there = rss.hash(&tcp(src, sport, dst, dport)).unwrap();
        let back = rss.hash(&tcp(dst, dport, src, sport)).unwrap();
        assert_eq!(there, back, "{src} <-> {dst}");
        assert_eq!(there >> 16, there & 0xffff, "a 16-bit period");
    }
    // The first two of the reference notes' computed values (not a published table).
    assert_eq!(
        rss.hash(&tcp(VECTORS[0].0, VECTORS[0].1, VECTORS[0].2, VECTORS[0].3)),
        Some(0x9fcc9fcc)
    );
    assert_eq!(
        rss.hash(&tcp(VECTORS[1].0, VECTORS[1].1, VECTORS[1].2, VECTORS[1].3)),
        Some(0x60d760d7)
    );
}

#[test]
fn the_table_maps_hashes_to_queues_and_refuses_queues_past_the_count() {
    let t = Indirection::round_robin(128, 3).unwrap();
    assert_eq!(t.entries().len(), 128);
    assert_eq!((t.queue(0), t.queue(1), t.queue(2), t.queue(3)), (0, 1, 2, 0));
    assert_eq!(t.queue(0x51ccc178), t.entries()[0x51ccc178 % 128]);
    let e = Indirection::new(vec![0, 1, 9, 2], 8).unwrap_err();
    assert!(e.contains("entry 2: queue 9 is past the queue count 8"), "{e}");
    assert!(Indirection::round_robin(128, 0).is_err());
    assert!(Indirection::round_robin(0, 4).is_err());
    assert!(Indirection::round_robin(8192, 4).is_err());
    // Every queue gets an equal share of a round-robin table's entries.
    let t = Indirection::round_robin(128, 4).unwrap();
    for q in 0..4 {
        assert_eq!(t.entries().iter().filter(|e| **e == q).count(), 32);
    }
}
