//! Team behaviour: placement, failover, failback, notify-switch frames, policies and LBT.

use super::*;
use crate::units::Bandwidth;
use crate::wire::{parse, FlowKey, MacAddr, ETHERTYPE_RARP};
use core::net::Ipv4Addr;

pub(super) fn mac(n: u32) -> MacAddr {
    let b = n.to_be_bytes();
    MacAddr([0x02, 0, b[0], b[1], b[2], b[3]])
}

pub(crate) fn uplinks(caps_gbps: &[f64]) -> Vec<UplinkSpec> {
    caps_gbps
        .iter()
        .enumerate()
        .map(|(i, c)| UplinkSpec {
            name: format!("uplink{}", i + 1),
            capacity: Bandwidth::from_bps_f64(c * 1e9),
        })
        .collect()
}

pub(super) fn group(policy: Policy, active: &[usize], standby: &[usize], failback: bool) -> PortGroupSpec {
    PortGroupSpec {
        mode: Default::default(),
        tuning: Default::default(),
        lacp: Default::default(),
        name: "pg".into(),
        policy,
        order: FailoverOrder {
            active: active.iter().map(|&u| UplinkId(u)).collect(),
            standby: standby.iter().map(|&u| UplinkId(u)).collect(),
        },
        failback,
        notify_switches: true,
        vlan: Some(10),
    }
}

/// A team with one group and ports `ids`.
pub(super) fn team(caps: &[f64], g: PortGroupSpec, ids: impl IntoIterator<Item = u32>) -> Team {
    let mut t = Team::new(uplinks(caps), LbtConfig::default()).unwrap();
    let gid = t.add_group(g).unwrap();
    for id in ids {
        t.add_port(PortSpec {
            id: PortId(id),
            mac: mac(id),
            group: gid,
        })
        .unwrap();
    }
    t
}

pub(super) fn drain(t: &mut Team) -> (Vec<PortMove>, Vec<(UplinkId, Vec<u8>)>) {
    let (mut moves, mut frames) = (vec![], vec![]);
    while let Some(e) = t.poll_effect() {
        match e {
            Effect::PortMoved(m) => moves.push(m),
            Effect::Transmit { uplink, frame } => frames.push((uplink, frame)),
        }
    }
    (moves, frames)
}

pub(super) fn map(t: &Team, ids: impl IntoIterator<Item = u32>) -> Vec<Option<usize>> {
    ids.into_iter().map(|i| t.port_uplink(PortId(i)).map(|u| u.0)).collect()
}

#[test]
fn originating_port_id_places_by_id_modulo_active() {
    let t = team(&[10.0, 10.0, 10.0], group(Policy::PORT_ID, &[0, 1, 2], &[], true), 0..6);
    assert_eq!(map(&t, 0..6), [Some(0), Some(1), Some(2), Some(0), Some(1), Some(2)]);
}

#[test]
fn failover_moves_only_the_failed_uplinks_ports_and_notifies() {
    let mut t = team(
        &[10.0, 10.0, 10.0],
        group(Policy::PORT_ID, &[0, 1, 2], &[], true),
        0..300,
    );
    let before = map(&t, 0..300);
    t.set_link(UplinkId(1), LinkState::Down, Instant::from_secs(5)).unwrap();
    let after = map(&t, 0..300);
    let (moves, frames) = drain(&mut t);
    let mut moved_to = [0usize; 3];
    for (b, a) in before.iter().zip(&after) {
        if *b == Some(1) {
            assert_ne!(*a, Some(1));
            moved_to[a.unwrap()] += 1;
        } else {
            assert_eq!(a, b, "a port on a healthy uplink moved");
        }
    }
    // Disruption vs perfect: exactly the 100 ports of uplink 2 moved, spread evenly (ideal 50/50).
    assert_eq!(moves.len(), 100);
    assert!(moved_to[0].abs_diff(moved_to[2]) <= 20, "spread {moved_to:?}");
    assert!(moves
        .iter()
        .all(|m| m.reason == MoveReason::LinkDown && m.from == Some(UplinkId(1))));
    // One RARP per moved MAC, on its new uplink, tagged with the group's VLAN.
    assert_eq!(frames.len(), 100);
    for (m, (uplink, frame)) in moves.iter().zip(&frames) {
        assert_eq!(Some(*uplink), m.to);
        let k = parse(frame).unwrap();
        assert_eq!(
            (k.ether_type, k.vlan, k.src_mac),
            (ETHERTYPE_RARP, Some(10), mac(m.port.0))
        );
    }
}

#[test]
fn failback_on_returns_ports_home_and_off_leaves_them() {
    for failback in [true, false] {
        let mut t = team(&[10.0, 10.0], group(Policy::PORT_ID, &[0, 1], &[], failback), 0..4);
        t.set_link(UplinkId(0), LinkState::Down, Instant::from_secs(1)).unwrap();
        assert_eq!(map(&t, 0..4), [Some(1); 4]);
        drain(&mut t);
        t.set_link(UplinkId(0), LinkState::Up, Instant::from_secs(2)).unwrap();
        let (moves, frames) = drain(&mut t);
        if failback {
            assert_eq!(map(&t, 0..4), [Some(0), Some(1), Some(0), Some(1)]);
            assert_eq!(moves.len(), 2);
            assert!(moves.iter().all(|m| m.reason == MoveReason::Failback));
            assert!(frames.iter().all(|(u, _)| *u == UplinkId(0)));
        } else {
            assert_eq!(map(&t, 0..4), [Some(1); 4]);
            assert!(moves.is_empty() && frames.is_empty());
        }
    }
}

#[test]
fn standby_is_used_in_order_only_when_no_active_is_up() {
    // Active: uplink1; standby: uplink3 then uplink2; uplink4 unused.
    let mut t = team(&[10.0; 4], group(Policy::PORT_ID, &[0], &[2, 1], true), 0..3);
    assert_eq!(map(&t, 0..3), [Some(0); 3]);
    t.set_link(UplinkId(0), LinkState::Down, Instant::ZERO).unwrap();
    assert_eq!(map(&t, 0..3), [Some(2); 3], "first standby");
    t.set_link(UplinkId(2), LinkState::Down, Instant::ZERO).unwrap();
    assert_eq!(map(&t, 0..3), [Some(1); 3], "second standby");
    t.set_link(UplinkId(1), LinkState::Down, Instant::ZERO).unwrap();
    assert_eq!(map(&t, 0..3), [None; 3], "the unused uplink4 is never used");
    t.set_link(UplinkId(3), LinkState::Up, Instant::ZERO).unwrap();
    t.set_link(UplinkId(1), LinkState::Up, Instant::ZERO).unwrap();
    assert_eq!(map(&t, 0..3), [Some(1); 3], "attach when a standby returns");
    t.set_link(UplinkId(0), LinkState::Up, Instant::ZERO).unwrap();
    assert_eq!(map(&t, 0..3), [Some(0); 3], "failback from standby to active");
}

#[test]
fn source_mac_hash_is_deterministic_and_spread() {
    let t = team(&[10.0, 10.0], group(Policy::SOURCE_MAC, &[0, 1], &[], true), 0..1000);
    let on0 = map(&t, 0..1000).iter().filter(|u| **u == Some(0)).count();
    assert!((400..600).contains(&on0), "{on0} of 1000 on uplink1");
    for id in [3u32, 77, 512] {
        let expect = source_mac_hash(mac(id)) % 2;
        assert_eq!(t.port_uplink(PortId(id)), Some(UplinkId(expect as usize)));
    }
}

fn flow(i: u32, sport: u16) -> FlowKey {
    FlowKey {
        src_ip: Some(Ipv4Addr::from(0x0a00_0000 + i).into()),
        dst_ip: Some(Ipv4Addr::new(192, 168, 0, 1).into()),
        src_port: Some(sport),
        dst_port: Some(443),
        ip_proto: Some(6),
        ..Default::default()
    }
}

#[test]
fn ip_hash_spreads_flows_and_fails_over_resiliently() {
    for mode in [Policy::IP_HASH, Policy::IP_HASH_L4] {
        let mut t = team(&[10.0; 4], group(mode, &[0, 1, 2, 3], &[], true), [1]);
        let flows: Vec<FlowKey> = (0..4000).map(|i| flow(i, 10_000 + (i % 50) as u16)).collect();
        let before: Vec<_> = flows.iter().map(|f| t.select(PortId(1), Some(f)).unwrap()).collect();
        let mut per = [0usize; 4];
        before.iter().for_each(|u| per[u.0] += 1);
        // Fairness vs perfect 1000 per uplink.
        assert!(per.iter().all(|&n| (850..1150).contains(&n)), "{mode:?} {per:?}");
        t.set_link(UplinkId(3), LinkState::Down, Instant::ZERO).unwrap();
        let mut moved = 0;
        for (f, b) in flows.iter().zip(&before) {
            let a = t.select(PortId(1), Some(f)).unwrap();
            assert_ne!(a, UplinkId(3));
            if *b != UplinkId(3) {
                assert_eq!(a, *b, "a flow on a healthy uplink moved");
            } else {
                moved += 1;
            }
        }
        assert_eq!(
            moved, per[3],
            "disruption equals the ideal: only the failed uplink's flows"
        );
    }
    // Non-IP frames use the port's source-MAC home.
    let t = team(&[10.0; 2], group(Policy::IP_HASH, &[0, 1], &[], true), [9]);
    assert_eq!(t.select(PortId(9), Some(&FlowKey::default())), t.port_uplink(PortId(9)));
}

#[test]
fn policy_change_rehomes_ports() {
    let mut t = team(&[10.0; 2], group(Policy::PORT_ID, &[0, 1], &[], true), [0, 2, 4]);
    assert_eq!(map(&t, [0, 2, 4]), [Some(0); 3]);
    let g = GroupId(0);
    let order = t.group(g).unwrap().order.clone();
    t.reconfigure_group(g, Policy::SOURCE_MAC, order, true, Instant::from_secs(3))
        .unwrap();
    let (moves, _) = drain(&mut t);
    for id in [0u32, 2, 4] {
        let expect = UplinkId((source_mac_hash(mac(id)) % 2) as usize);
        assert_eq!(t.port_uplink(PortId(id)), Some(expect));
    }
    assert!(moves.iter().all(|m| m.reason == MoveReason::PolicyChange));
    // An invalid order is refused and nothing changes.
    let bad = FailoverOrder {
        active: vec![UplinkId(0), UplinkId(0)],
        standby: vec![],
    };
    assert!(t
        .reconfigure_group(g, Policy::LOAD_BASED, bad, true, Instant::ZERO)
        .is_err());
    assert_eq!(t.group(g).unwrap().policy, Policy::SOURCE_MAC);
}

#[test]
fn bad_configuration_is_refused() {
    assert_eq!(
        Team::new(vec![], LbtConfig::default()).unwrap_err(),
        TeamError::NoUplinks
    );
    let mut two = uplinks(&[1.0, 1.0]);
    two[1].name = "uplink1".into();
    assert!(matches!(
        Team::new(two, LbtConfig::default()),
        Err(TeamError::DuplicateUplink(_))
    ));
    let lbt = LbtConfig {
        threshold: 1.5,
        ..Default::default()
    };
    assert!(matches!(Team::new(uplinks(&[1.0]), lbt), Err(TeamError::Lbt(_))));
    let mut t = Team::new(uplinks(&[1.0, 1.0]), LbtConfig::default()).unwrap();
    assert!(t.add_group(group(Policy::LOAD_BASED, &[], &[0], true)).is_err());
    assert!(t.add_group(group(Policy::LOAD_BASED, &[0, 5], &[], true)).is_err());
    assert!(t.add_group(group(Policy::LOAD_BASED, &[0], &[0], true)).is_err());
    let g = t.add_group(group(Policy::LOAD_BASED, &[0, 1], &[], true)).unwrap();
    t.add_port(PortSpec {
        id: PortId(1),
        mac: mac(1),
        group: g,
    })
    .unwrap();
    assert!(matches!(
        t.add_port(PortSpec {
            id: PortId(1),
            mac: mac(2),
            group: g
        }),
        Err(TeamError::DuplicatePort(_))
    ));
    assert!(matches!(
        t.add_port(PortSpec {
            id: PortId(2),
            mac: mac(1),
            group: g
        }),
        Err(TeamError::DuplicateMac { .. })
    ));
    assert!(matches!(
        t.add_port(PortSpec {
            id: PortId(3),
            mac: mac(3),
            group: GroupId(7)
        }),
        Err(TeamError::UnknownGroup(7))
    ));
}

/// A removed port leaves the team: its ID is unknown, the others keep theirs and their
/// uplinks, and it may be added again.
#[test]
fn a_port_can_leave_the_team() {
    let mut t = team(&[10.0, 10.0], group(Policy::PORT_ID, &[0, 1], &[], true), 1..=4);
    let ids: Vec<PortId> = t.ports().map(|p| p.id).collect();
    assert!(ids.len() >= 2, "the fixture has ports");
    let before: Vec<_> = ids.iter().map(|&p| t.port_uplink(p)).collect();
    let spec = t.remove_port(ids[0]).unwrap();
    assert!(t.port_uplink(ids[0]).is_none());
    assert!(matches!(t.remove_port(ids[0]), Err(TeamError::UnknownPort(_))));
    for (k, &p) in ids.iter().enumerate().skip(1) {
        assert_eq!(t.port_uplink(p), before[k], "port {p:?} stays where it was");
    }
    t.add_port(spec).unwrap();
    assert!(t.port_uplink(ids[0]).is_some());
}
