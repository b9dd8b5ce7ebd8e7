//! The tables a switch gives, rule by rule (no kernel needed).

use super::*;
use std::time::Duration;
use teamster_core::switch::{MacLimits, SecurityPolicy, SwitchConfig, Verdict};
use teamster_core::teaming::{FailoverOrder, LbtConfig, LinkState, PortGroupSpec, PortSpec, Team, UplinkSpec};
use teamster_core::units::Bandwidth;

fn mac(n: u8) -> MacAddr {
    MacAddr([2, 0, 0, 0, 0, n])
}

/// Two uplinks; group 0 untagged port-id over both, group 1 VLAN 10 with `policy`, MAC changes
/// accepted; ports 1 (group 0) and 2, 3 (group 1).
fn switch(policy: Policy) -> Switch {
    let open = SecurityPolicy {
        mac_changes: Verdict::Accept,
        ..SecurityPolicy::default()
    };
    switch_with(policy, open)
}

/// Ports 1 (group a, untagged) and 2, 3 (group b, VLAN 10, `policy`, security `b`); uplink 1 has
/// its own MAC.
fn switch_with(policy: Policy, b: SecurityPolicy) -> Switch {
    let uplinks = (0..2)
        .map(|i| UplinkSpec {
            name: format!("up{i}"),
            capacity: Bandwidth::from_gbps(10),
        })
        .collect();
    let mut team = Team::new(uplinks, LbtConfig::default()).unwrap();
    for (name, vlan, policy) in [("a", None, Policy::PORT_ID), ("b", Some(10), policy)] {
        team.add_group(PortGroupSpec {
            name: name.into(),
            policy,
            order: FailoverOrder {
                active: vec![UplinkId(0), UplinkId(1)],
                standby: vec![],
            },
            failback: true,
            notify_switches: false,
            vlan,
            mode: Default::default(),
            tuning: Default::default(),
            lacp: Default::default(),
        })
        .unwrap();
    }
    for (id, g) in [(1, 0), (2, 1), (3, 1)] {
        team.add_port(PortSpec {
            id: PortId(id),
            mac: mac(id as u8),
            group: GroupId(g),
        })
        .unwrap();
    }
    let mut s = Switch::with_config(
        team,
        SwitchConfig {
            ageing: Duration::from_secs(300),
            mac_limits: MacLimits {
                total: 100,
                per_port: 7,
            },
            security: vec![SecurityPolicy::default(), b],
            overlays: Vec::new(),
        },
    );
    s.set_uplink_mac(UplinkId(1), Some(MacAddr([0x0e, 0, 0, 0, 0, 1])));
    s
}

/// Ports 1-3 on ifindex 11-13 (port 2 a veth with its peer elsewhere), uplinks on 20 and 21.
fn interfaces() -> Interfaces {
    let b = |ifindex, peer| Binding {
        ifindex,
        peer,
        priority: 0,
    };
    Interfaces {
        ports: [
            (PortId(1), b(11, false)),
            (PortId(2), b(12, true)),
            (PortId(3), b(13, false)),
        ]
        .into(),
        uplinks: [(UplinkId(0), b(20, false)), (UplinkId(1), b(21, false))].into(),
    }
}

#[test]
fn ports_carry_their_group_security_domain_and_uplink() {
    let s = switch(Policy::IP_HASH_L4);
    let t = Tables::build(&s, &interfaces(), &mut Slots::default(), Instant::ZERO).unwrap();
    let p2 = t.ifaces[&12];
    assert_eq!((p2.kind, p2.id, p2.domain, p2.group), (abi::KIND_PORT, 2, 10, 1));
    assert_eq!(p2.flags, abi::PORT_PEER | abi::PORT_MAC_CHANGES_OK);
    let p1 = t.ifaces[&11];
    assert_eq!((p1.domain, p1.flags), (abi::DOMAIN_UNTAGGED, 0));
    let current = s.team().port_uplink(PortId(2)).unwrap();
    let ifindex = interfaces().uplinks[&current].ifindex;
    assert_eq!(t.slots[&p2.uplink].ifindex, ifindex);
    assert_eq!(t.groups[1].policy, abi::POLICY_IP_L3L4);
    assert_eq!(t.groups[0].policy, abi::POLICY_PORT);
    assert_eq!(t.config.limit_per_port, 7);
    assert_eq!(t.config.ageing_ns, 300_000_000_000);
    // Uplink 1's MAC is known (reflections), uplink 0's is not.
    assert_eq!(t.own_macs.len(), 1);
    assert_eq!(t.ifaces[&21].flags, abi::UPLINK_HAS_MAC);
    assert_eq!(t.ifaces[&20].flags, 0);
    // The configured MACs are static entries in their domains.
    let key = FdbKey {
        domain: 10,
        mac: mac(3).0,
    };
    assert_eq!(t.statics.get(&key), Some(&t.ifaces[&13].slot));
    assert_eq!(t.statics.len(), 3);
}

/// The program reads an output's kind, flags and MAC from its slot, a port's group policy from
/// the port, and a domain only when it must: the copies agree with what they copy.
#[test]
fn what_a_frame_needs_is_copied_where_it_is_read() {
    let s = switch(Policy::IP_HASH_L4);
    let t = Tables::build(&s, &interfaces(), &mut Slots::default(), Instant::ZERO).unwrap();
    assert_eq!(t.slots.len(), t.ifaces.len());
    for (ifindex, i) in &t.ifaces {
        let info = t.slots[&i.slot];
        assert_eq!(
            (info.ifindex, info.kind, info.flags, info.mac),
            (*ifindex, i.kind, i.flags, i.mac)
        );
    }
    assert_eq!(t.ifaces[&12].policy, abi::POLICY_IP_L3L4);
    assert_eq!(t.ifaces[&11].policy, abi::POLICY_PORT);
    assert_eq!(t.slots[&t.ifaces[&21].slot].mac, [0x0e, 0, 0, 0, 0, 1]);
    assert!(t.ifaces.values().all(|i| i.flags & abi::PORT_PROMISCUOUS_PEERS == 0));

    // Promiscuous ports in VLAN 10: its ports read their domain for every frame; port 1's
    // untagged domain has none, so port 1 does not.
    let promiscuous = SecurityPolicy {
        promiscuous: Verdict::Accept,
        ..SecurityPolicy::default()
    };
    let s = switch_with(Policy::PORT_ID, promiscuous);
    let t = Tables::build(&s, &interfaces(), &mut Slots::default(), Instant::ZERO).unwrap();
    for (ifindex, peers) in [(11, false), (12, true), (13, true)] {
        assert_eq!(
            t.ifaces[&ifindex].flags & abi::PORT_PROMISCUOUS_PEERS != 0,
            peers,
            "ifindex {ifindex}"
        );
    }
    assert_eq!(t.domains[&10].promiscuous, 2);
}

#[test]
fn floods_come_in_on_each_ports_receive_uplink_and_move_with_a_failover() {
    let mut s = switch(Policy::PORT_ID);
    let mut slots = Slots::default();
    let t = Tables::build(&s, &interfaces(), &mut slots, Instant::ZERO).unwrap();
    let bits = |t: &Tables, dom: u16| {
        t.domains[&dom].members[..t.domains[&dom].count as usize]
            .iter()
            .map(|m| m.rx_uplinks)
            .collect::<Vec<_>>()
    };
    assert_eq!(bits(&t, 10), [1, 1], "the group's first live uplink (0)");
    s.team_mut()
        .set_link(UplinkId(0), LinkState::Down, Instant::ZERO)
        .unwrap();
    let t = Tables::build(&s, &interfaces(), &mut slots, Instant::ZERO).unwrap();
    assert_eq!(bits(&t, 10), [2, 2]);
    let up1 = slots.of(21).unwrap();
    assert!(t
        .ifaces
        .values()
        .filter(|i| i.kind == abi::KIND_PORT)
        .all(|i| i.uplink == up1));
    assert_eq!(t.groups[1].active[0].up, 0);
    assert_eq!(t.groups[1].active[1].up, 1);
}

#[test]
fn slots_stay_while_interfaces_stay_and_freed_ones_are_reported() {
    let s = switch(Policy::PORT_ID);
    let mut slots = Slots::default();
    let t1 = Tables::build(&s, &interfaces(), &mut slots, Instant::ZERO).unwrap();
    let mut ifs = interfaces();
    // Port 2's veth is deleted and comes back under a new ifindex.
    ifs.ports.insert(
        PortId(2),
        Binding {
            ifindex: 99,
            peer: true,
            priority: 0,
        },
    );
    let t2 = Tables::build(&s, &ifs, &mut slots, Instant::ZERO).unwrap();
    assert_eq!(t2.freed, [t1.ifaces[&12].slot]);
    assert_ne!(
        t2.ifaces[&99].slot, t1.ifaces[&12].slot,
        "not a slot freed by the same build"
    );
    let t2b = Tables::build(&s, &ifs, &mut slots, Instant::ZERO).unwrap();
    assert!(t2b.freed.is_empty());
    // Port 1's comes back too: it takes the slot freed two builds ago, the lowest free.
    ifs.ports.insert(
        PortId(1),
        Binding {
            ifindex: 98,
            peer: false,
            priority: 0,
        },
    );
    let t2c = Tables::build(&s, &ifs, &mut slots, Instant::ZERO).unwrap();
    assert_eq!(t2c.freed, [t1.ifaces[&11].slot]);
    assert_eq!(
        slots.of(98),
        Some(t1.ifaces[&12].slot),
        "the lowest free slot, a build later"
    );
    for i in [13, 20, 21] {
        assert_eq!(t1.ifaces[&i].slot, t2.ifaces[&i].slot);
    }
    // A port without an interface is not in the tables, nor in its domain's flood list.
    ifs.ports.remove(&PortId(3));
    let t3 = Tables::build(&s, &ifs, &mut slots, Instant::ZERO).unwrap();
    assert_eq!(t3.domains[&10].count, 1);
    assert!(!t3.statics.values().any(|s| *s == t1.ifaces[&13].slot));
}

#[test]
fn every_teaming_policy_runs_on_the_kernel_path_with_its_fields_and_gap() {
    let expect = [
        ("port-id", abi::POLICY_PORT),
        ("source-mac", abi::POLICY_PORT),
        ("hyperv-port", abi::POLICY_PORT),
        ("load-based", abi::POLICY_PORT),
        ("ip-hash", abi::POLICY_IP_L3),
        ("ip-hash-l4", abi::POLICY_IP_L3L4),
        ("address-hash", abi::POLICY_ADDRESS),
        ("dynamic", abi::POLICY_FLOWLET),
        ("lbt-dynamic", abi::POLICY_FLOWLET),
    ];
    assert_eq!(Policy::all().len(), expect.len(), "a policy without a code here");
    for (name, code) in expect {
        let policy: Policy = name.parse().unwrap();
        let mut s = switch(policy);
        let mut spec = s.team().group(GroupId(1)).unwrap().clone();
        spec.tuning.hash_fields = HashFields::IpAddresses;
        spec.tuning.flowlet_gap = Duration::from_micros(2500);
        s.team_mut().reconfigure(GroupId(1), &spec, Instant::ZERO).unwrap();
        let t = Tables::build(&s, &interfaces(), &mut Slots::default(), Instant::ZERO).unwrap();
        assert_eq!(t.groups[1].policy, code, "{name}");
        assert_eq!(t.ifaces[&12].policy, code, "{name}: the port's copy");
        assert_eq!(t.groups[1].fields, abi::FIELDS_IP_ADDRESSES, "{name}");
        assert_eq!(t.groups[1].gap_ns, 2_500_000, "{name}");
        assert_eq!(t.groups[0].fields, abi::FIELDS_TRANSPORT_PORTS, "the default");
    }
}

#[test]
fn a_ports_netioc_class_is_its_priority_and_uplinks_carry_none() {
    let s = switch(Policy::PORT_ID);
    let mut ifs = interfaces();
    let class = teamster_core::ioc::htb::priority(7);
    ifs.ports.get_mut(&PortId(2)).unwrap().priority = class;
    ifs.uplinks.get_mut(&UplinkId(0)).unwrap().priority = class;
    let t = Tables::build(&s, &ifs, &mut Slots::default(), Instant::ZERO).unwrap();
    assert_eq!(t.ifaces[&12].priority, 0x7473_0007);
    assert_eq!(t.ifaces[&11].priority, 0, "no class: the uplink's default");
    assert_eq!(t.ifaces[&20].priority, 0, "only a port's frames are classified");
}

#[test]
fn an_overlay_group_is_refused_even_before_its_ports_attach() {
    let s = switch(Policy::PORT_ID);
    let overlay =
        teamster_core::overlay::Overlay::new(5001, "192.0.2.1".parse().unwrap(), vec!["192.0.2.2".parse().unwrap()])
            .unwrap();
    let mut config = SwitchConfig {
        overlays: vec![None, Some(overlay)],
        ..SwitchConfig::default()
    };
    config.security = vec![SecurityPolicy::default(); 2];
    let s = Switch::with_config(s.team().clone(), config);
    let e = Tables::build(&s, &Interfaces::default(), &mut Slots::default(), Instant::ZERO).unwrap_err();
    assert_eq!(e, Unsupported::Overlay("b".into()));
}
