//! Port security (forged transmits, MAC changes, promiscuous mode) and the MAC table's bounds,
//! tried as a hostile VM and a hostile physical network would.

use super::tests::{mac, targets, udp, REMOTE};
use super::*;
use crate::teaming::{FailoverOrder, LbtConfig, Policy, PortGroupSpec, PortSpec, UplinkSpec};
use crate::units::Bandwidth;
use crate::wire::MacAddr;
use proptest::prelude::*;

const ALL_REJECT: SecurityPolicy = SecurityPolicy {
    mac_changes: Verdict::Reject,
    forged_transmits: Verdict::Reject,
    promiscuous: Verdict::Reject,
    link_local: LinkLocal::NONE,
};

fn policy(mac_changes: Verdict, forged_transmits: Verdict, promiscuous: Verdict) -> SecurityPolicy {
    SecurityPolicy {
        mac_changes,
        forged_transmits,
        promiscuous,
        link_local: LinkLocal::NONE,
    }
}

/// Two uplinks; on VLAN 10 group "vms" (`vms` policy) with ports 1 and 2 and group "ids"
/// (promiscuous) with port 3; on VLAN 20 group "other" (promiscuous) with port 4.
fn switch(vms: SecurityPolicy, limits: MacLimits) -> Switch {
    let uplinks = (1..=2)
        .map(|i| UplinkSpec {
            name: format!("uplink{i}"),
            capacity: Bandwidth::from_gbps(10),
        })
        .collect();
    let mut t = Team::new(uplinks, LbtConfig::default()).unwrap();
    for (name, vlan) in [("vms", 10), ("ids", 10), ("other", 20)] {
        t.add_group(PortGroupSpec {
            mode: Default::default(),
            tuning: Default::default(),
            lacp: Default::default(),
            name: name.into(),
            policy: Policy::PORT_ID,
            order: FailoverOrder {
                active: vec![UplinkId(0), UplinkId(1)],
                standby: vec![],
            },
            failback: true,
            notify_switches: true,
            vlan: Some(vlan),
        })
        .unwrap();
    }
    for (id, g) in [(1, 0), (2, 0), (3, 1), (4, 2)] {
        t.add_port(PortSpec {
            id: PortId(id),
            mac: mac(id as u8),
            group: GroupId(g),
        })
        .unwrap();
    }
    let sniffer = policy(Verdict::Reject, Verdict::Reject, Verdict::Accept);
    Switch::with_config(
        t,
        SwitchConfig {
            ageing: MacTable::DEFAULT_AGEING,
            mac_limits: limits,
            security: vec![vms, sniffer, sniffer],
            overlays: Vec::new(),
        },
    )
}

/// An ARP reply claiming 10.0.0.100 is at `src` (what a VM impersonating a host sends).
fn arp_from(src: [u8; 6]) -> Vec<u8> {
    let mut f = Vec::with_capacity(60);
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 2]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[10, 0, 0, 100]);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&[10, 0, 0, 1]);
    f.resize(60, 0);
    f
}

/// The remote host announces itself from uplink 1, VM1 then sends ten ARP frames with its MAC;
/// returns where VM2's next frame to the remote host goes and what became of the remote host's
/// next frame to VM2.
fn impersonate_remote(s: &mut Switch) -> (Vec<Egress>, Vec<Egress>) {
    let t = |ms: u64| Instant::from_nanos(ms * 1_000_000);
    s.ingress(Ingress::Uplink(UplinkId(0)), &udp(REMOTE, [0xff; 6], Some(10)), t(0));
    for k in 1..=10 {
        s.ingress(Ingress::Port(PortId(1)), &arp_from(REMOTE), t(k));
    }
    let to_remote = s.ingress(Ingress::Port(PortId(2)), &udp(mac(2).0, REMOTE, None), t(20));
    let from_remote = s.ingress(Ingress::Uplink(UplinkId(0)), &udp(REMOTE, mac(2).0, Some(10)), t(21));
    (targets(&to_remote), targets(&from_remote))
}

#[test]
fn a_vm_cannot_take_an_outside_hosts_mac_by_default() {
    let mut s = switch(ALL_REJECT, MacLimits::default());
    let (to_remote, from_remote) = impersonate_remote(&mut s);
    let home = s.team().port_uplink(PortId(2)).unwrap();
    assert_eq!(
        to_remote,
        [Egress::Uplink(home), Egress::Port(PortId(3))],
        "to the uplink (and the IDS port's copy), never to VM1"
    );
    assert_eq!(from_remote, [Egress::Port(PortId(2)), Egress::Port(PortId(3))]);
    let vm1 = s.port_counters(PortId(1)).unwrap();
    // Sent frames are counted by the data plane (`Switch::count_sent`); the outputs are above.
    assert_eq!(vm1.drops(DropReason::ForgedTransmit), 10);
    assert_eq!(
        s.mac_table().lookup(Some(10), MacAddr(REMOTE), Instant::from_secs(1)),
        Some(Location::Remote(UplinkId(0)))
    );
    assert_eq!(s.uplink_counters(UplinkId(0)).unwrap().drops(DropReason::Reflection), 0);
}

#[test]
fn accepting_both_mac_changes_and_forged_transmits_lets_the_attack_through() {
    // What the defaults prevent (and what the switch did before they existed).
    let bridge = policy(Verdict::Accept, Verdict::Accept, Verdict::Reject);
    let mut s = switch(bridge, MacLimits::default());
    let (to_remote, from_remote) = impersonate_remote(&mut s);
    assert_eq!(to_remote, [Egress::Port(PortId(1)), Egress::Port(PortId(3))]);
    assert!(from_remote.is_empty(), "the remote host's frames now look reflected");
    assert_eq!(s.uplink_counters(UplinkId(0)).unwrap().drops(DropReason::Reflection), 1);
}

#[test]
fn forged_transmits_accepted_without_mac_changes_sends_but_never_receives() {
    let mut s = switch(
        policy(Verdict::Reject, Verdict::Accept, Verdict::Reject),
        MacLimits::default(),
    );
    let (to_remote, from_remote) = impersonate_remote(&mut s);
    let home = s.team().port_uplink(PortId(2)).unwrap();
    assert_eq!(to_remote, [Egress::Uplink(home), Egress::Port(PortId(3))]);
    assert_eq!(from_remote, [Egress::Port(PortId(2)), Egress::Port(PortId(3))]);
    assert_eq!(
        s.port_counters(PortId(1)).unwrap().total_drops(),
        0,
        "its ARP frames went out"
    );
    // A reply to an address it sent from but may not receive on: not flooded to it.
    let x = [0x02, 0, 0, 0, 0, 0x77];
    s.ingress(Ingress::Port(PortId(1)), &udp(x, mac(2).0, None), Instant::from_secs(1));
    let reply = s.ingress(Ingress::Port(PortId(2)), &udp(mac(2).0, x, None), Instant::from_secs(1));
    assert!(!targets(&reply).contains(&Egress::Port(PortId(1))));
    assert_eq!(s.mac_table().learned_behind(PortId(1)), 0);
}

#[test]
fn mac_changes_accepted_move_the_ports_one_effective_mac() {
    let mut s = switch(
        policy(Verdict::Accept, Verdict::Reject, Verdict::Reject),
        MacLimits::default(),
    );
    let now = Instant::from_secs(1);
    let (x, y) = ([0x02, 0, 0, 0, 0, 0x77], [0x02, 0, 0, 0, 0, 0x78]);
    let to = |s: &mut Switch, dst| targets(&s.ingress(Ingress::Port(PortId(2)), &udp(mac(2).0, dst, None), now));
    // The guest changes to x: frames from x pass, frames to x reach it.
    assert!(!s
        .ingress(Ingress::Port(PortId(1)), &udp(x, [0xff; 6], None), now)
        .is_empty());
    assert_eq!(to(&mut s, x), [Egress::Port(PortId(1)), Egress::Port(PortId(3))]);
    // Then to y: x is forgotten (unknown unicast again), y is its address.
    s.ingress(Ingress::Port(PortId(1)), &udp(y, [0xff; 6], None), now);
    assert_eq!(s.mac_table().lookup(Some(10), MacAddr(x), now), None);
    assert_eq!(to(&mut s, y)[0], Egress::Port(PortId(1)));
    assert_eq!(s.mac_table().learned_behind(PortId(1)), 1, "one address at a time");
    // Never to another port's configured MAC.
    let stolen = s.ingress(Ingress::Port(PortId(1)), &udp(mac(2).0, [0xff; 6], None), now);
    assert!(stolen.is_empty());
    assert_eq!(s.port_counters(PortId(1)).unwrap().drops(DropReason::ForgedTransmit), 1);
    // Back to the configured MAC: y is forgotten.
    s.ingress(Ingress::Port(PortId(1)), &udp(mac(1).0, [0xff; 6], None), now);
    assert_eq!(s.mac_table().learned_behind(PortId(1)), 0);
}

#[test]
fn a_nested_hypervisor_learns_its_guests_within_the_port_limit() {
    let nested = policy(Verdict::Accept, Verdict::Accept, Verdict::Reject);
    let mut s = switch(
        nested,
        MacLimits {
            total: 100,
            per_port: 3,
        },
    );
    let now = Instant::from_secs(1);
    for n in 0..5u8 {
        let inner = [0x02, 0xee, 0, 0, 0, n];
        let out = s.ingress(Ingress::Port(PortId(1)), &udp(inner, [0xff; 6], None), now);
        assert!(!out.is_empty(), "forwarded whether learned or not");
    }
    assert_eq!(s.mac_table().learned_behind(PortId(1)), 3);
    assert_eq!(s.port_counters(PortId(1)).unwrap().mac_limit, 2);
    // A learned inner guest is reached directly; one past the limit is flooded to the ports that
    // may own unknown addresses (the nested hypervisor and port 2, same policy) and the uplink.
    let first = s.ingress(
        Ingress::Uplink(UplinkId(1)),
        &udp(REMOTE, [0x02, 0xee, 0, 0, 0, 0], Some(10)),
        now,
    );
    assert_eq!(targets(&first), [Egress::Port(PortId(1)), Egress::Port(PortId(3))]);
    let past = s.ingress(
        Ingress::Port(PortId(2)),
        &udp(mac(2).0, [0x02, 0xee, 0, 0, 0, 4], None),
        now,
    );
    assert!(targets(&past).contains(&Egress::Port(PortId(1))));
}

#[test]
fn promiscuous_ports_see_their_vlan_and_only_what_is_switched() {
    let mut s = switch(ALL_REJECT, MacLimits::default());
    let now = Instant::from_secs(1);
    let port = |s: &mut Switch, p, f: &[u8]| targets(&s.ingress(Ingress::Port(PortId(p)), f, now));
    let up = |s: &mut Switch, u, f: &[u8]| targets(&s.ingress(Ingress::Uplink(UplinkId(u)), f, now));
    // Between two other ports, and to the uplink.
    assert_eq!(
        port(&mut s, 1, &udp(mac(1).0, mac(2).0, None)),
        [Egress::Port(PortId(2)), Egress::Port(PortId(3))]
    );
    let home = s.team().port_uplink(PortId(1)).unwrap();
    assert_eq!(
        port(&mut s, 1, &udp(mac(1).0, REMOTE, None)),
        [Egress::Uplink(home), Egress::Port(PortId(3))]
    );
    // Unknown unicast from the receive uplink reaches the sniffer only; from the other uplink,
    // nobody (it got the same frame from the receive uplink).
    let unknown = udp(REMOTE, [0x02, 0, 0, 0, 0, 0x55], Some(10));
    assert_eq!(up(&mut s, 0, &unknown), [Egress::Port(PortId(3))]);
    assert!(up(&mut s, 1, &unknown).is_empty());
    // A frame for port 1 from either uplink: port 1 and the copy.
    assert_eq!(
        up(&mut s, 1, &udp(REMOTE, mac(1).0, Some(10))),
        [Egress::Port(PortId(1)), Egress::Port(PortId(3))]
    );
    // Dropped frames are not copied; VLAN 20's sniffer (port 4) saw none of the above.
    assert!(port(&mut s, 1, &arp_from(REMOTE)).is_empty());
    assert!(port(&mut s, 1, &udp(mac(1).0, mac(1).0, None)).is_empty());
    // (Sent frames are counted by the data plane; the copies each port got are asserted above.)
    // The sniffer's own frames are not copied back to it.
    assert_eq!(
        port(&mut s, 3, &udp(mac(3).0, mac(1).0, None)),
        [Egress::Port(PortId(1))]
    );
}

/// A source MAC from a counter, spread over the address space (splitmix64), locally
/// administered unicast.
fn random_mac(n: u64) -> [u8; 6] {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let b = z.to_be_bytes();
    [(b[0] & 0xfc) | 0x02, b[1], b[2], b[3], b[4], b[5]]
}

#[test]
fn a_million_random_source_macs_keep_the_table_within_its_bound() {
    const FLOOD: u64 = 1_000_000;
    let limits = MacLimits::default();
    let nested = policy(Verdict::Accept, Verdict::Accept, Verdict::Reject);
    let mut s = switch(nested, limits);
    let statics = s.mac_table().len();
    let mut frame = udp(REMOTE, mac(1).0, Some(10));
    let mut largest = 0;
    // From the physical network, to a local port (so every frame is delivered, too).
    for n in 0..FLOOD {
        frame[6..12].copy_from_slice(&random_mac(n));
        let out = s.ingress(Ingress::Uplink(UplinkId(0)), &frame, Instant::from_nanos(n * 1000));
        assert_eq!(
            out.len(),
            2,
            "delivered (with the sniffer's copy) whether learned or not"
        );
        largest = largest.max(s.mac_table().len());
    }
    assert_eq!(largest, statics + limits.total);
    let refused = s.uplink_counters(UplinkId(0)).unwrap().mac_limit;
    assert!(
        refused >= FLOOD - limits.total as u64 - 10,
        "{refused} refusals counted"
    );
    // From a nested-hypervisor port: held to the per-port limit (the total is full: none).
    let mut frame = udp(mac(1).0, [0xff; 6], None);
    for n in FLOOD..FLOOD + 100_000 {
        frame[6..12].copy_from_slice(&random_mac(n));
        s.ingress(Ingress::Port(PortId(1)), &frame, Instant::from_secs(1));
    }
    assert_eq!(s.mac_table().len(), statics + limits.total);
    assert_eq!(s.mac_table().learned_behind(PortId(1)), 0);
    let (full, full_bytes) = (s.mac_table().capacity(), s.mac_table().approx_bytes());
    s.handle_timeout(Instant::from_secs(1 + 300));
    let after = s.mac_table().capacity();
    eprintln!(
        "1M-MAC flood: table {} entries (limit {} + {statics} static), capacity {full} (~{} KiB); \
         after ageing: {} entries, capacity {after} (~{} KiB)",
        statics + limits.total,
        limits.total,
        full_bytes / 1024,
        s.mac_table().len(),
        s.mac_table().approx_bytes() / 1024
    );
    assert_eq!(s.mac_table().len(), statics);
    assert!(after < full / 8, "the map shrank: {full} -> {after}");
    // After ageing a port flood is held to the per-port limit.
    for n in 0..100_000 {
        frame[6..12].copy_from_slice(&random_mac(n));
        s.ingress(Ingress::Port(PortId(1)), &frame, Instant::from_secs(400));
    }
    assert_eq!(s.mac_table().learned_behind(PortId(1)), limits.per_port);
}

proptest! {
    /// Whatever a port under the default policy sends, it teaches the MAC table nothing, and
    /// nothing with another source MAC leaves it.
    #[test]
    fn a_port_under_the_default_policy_never_teaches_the_table(
        frames in proptest::collection::vec((any::<[u8; 6]>(), any::<[u8; 6]>(), proptest::collection::vec(any::<u8>(), 0..40)), 1..20)
    ) {
        let mut s = switch(ALL_REJECT, MacLimits::default());
        let statics = s.mac_table().len();
        for (src, dst, tail) in frames {
            let mut f = udp(src, dst, None);
            f.extend_from_slice(&tail);
            let out = s.ingress(Ingress::Port(PortId(1)), &f, Instant::ZERO);
            prop_assert!(out.is_empty() || src == mac(1).0);
        }
        prop_assert_eq!(s.mac_table().len(), statics);
    }
}
