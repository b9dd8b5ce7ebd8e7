//! Team behaviour: placement, failover, failback, notify-switch frames, policies and LBT.

use super::*;
use crate::units::Bandwidth;
use crate::wire::{parse, FlowKey, MacAddr, ETHERTYPE_RARP};
use core::net::Ipv4Addr;
use core::time::Duration;

fn mac(n: u32) -> MacAddr {
    let b = n.to_be_bytes();
    MacAddr([0x02, 0, b[0], b[1], b[2], b[3]])
}

fn uplinks(caps_gbps: &[f64]) -> Vec<UplinkSpec> {
    caps_gbps
        .iter()
        .enumerate()
        .map(|(i, c)| UplinkSpec {
            name: format!("uplink{}", i + 1),
            capacity: Bandwidth::from_bps_f64(c * 1e9),
        })
        .collect()
}

fn group(policy: Policy, active: &[usize], standby: &[usize], failback: bool) -> PortGroupSpec {
    PortGroupSpec {
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
fn team(caps: &[f64], g: PortGroupSpec, ids: impl IntoIterator<Item = u32>) -> Team {
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

fn drain(t: &mut Team) -> (Vec<PortMove>, Vec<(UplinkId, Vec<u8>)>) {
    let (mut moves, mut frames) = (vec![], vec![]);
    while let Some(e) = t.poll_effect() {
        match e {
            Effect::PortMoved(m) => moves.push(m),
            Effect::Transmit { uplink, frame } => frames.push((uplink, frame)),
        }
    }
    (moves, frames)
}

fn map(t: &Team, ids: impl IntoIterator<Item = u32>) -> Vec<Option<usize>> {
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

// ---- Load-Based Teaming ----

/// Drives `t` for `secs` seconds: each port sends `rates[port]` Gbit/s (and a tenth of it as
/// receive) through its current uplink; LBT runs at every second. Returns the moves.
fn drive(t: &mut Team, rates: &dyn Fn(u32, u64) -> f64, ports: &[u32], from: u64, secs: u64) -> Vec<PortMove> {
    let mut moves = vec![];
    for s in from..from + secs {
        let now = Instant::from_secs(s);
        t.handle_timeout(now);
        for &p in ports {
            if let Some(u) = t.port_uplink(PortId(p)) {
                let bytes = (rates(p, s) * 1e9 / 8.0) as u64;
                t.account(PortId(p), u, Direction::Tx, bytes, now);
                t.account(PortId(p), u, Direction::Rx, bytes / 10, now);
            }
        }
        while let Some(e) = t.poll_effect() {
            if let Effect::PortMoved(m) = e {
                moves.push(m);
            }
        }
    }
    moves
}

#[test]
fn lbt_moves_one_port_when_an_uplink_passes_the_threshold() {
    // Ports 0, 2, 4, 6 all hash to uplink1 (port ID mod 2 = 0).
    let ports = [0, 2, 4, 6];
    let mut t = team(&[10.0, 10.0], group(Policy::LOAD_BASED, &[0, 1], &[], true), ports);
    // 1.8 Gbit/s each = 7.2 Gbit/s: under 75%, nothing moves in 120 s.
    assert!(drive(&mut t, &|_, _| 1.8, &ports, 0, 120).is_empty());
    assert_eq!(t.utilisation(UplinkId(1), Instant::from_secs(120)).unwrap().tx, 0.0);
    // 2.0 Gbit/s each = 8 Gbit/s = 80%: exactly one port moves, once the window mean passes 75%.
    let moves = drive(&mut t, &|_, _| 2.0, &ports, 120, 120);
    assert_eq!(moves.len(), 1, "{moves:?}");
    let m = &moves[0];
    let MoveReason::LoadBased(d) = &m.reason else {
        panic!("{m:?}")
    };
    assert_eq!((m.from, m.to), (Some(UplinkId(0)), Some(UplinkId(1))));
    assert_eq!(d.direction, Direction::Tx);
    assert!(
        d.from_before.tx > 0.75 && d.from_after.tx <= 0.75 && d.to_after.tx <= 0.75,
        "{d:?}"
    );
    // k s after the step the mean is (7.2 (30 - k) + 8 k) / 30, over 7.5 once k > 11.25.
    assert_eq!(m.at, Instant::from_secs(132));
    assert_eq!(d.port, PortId(0), "equal ports: the lowest ID");
}

#[test]
fn lbt_moves_at_most_once_per_period_and_never_over_threshold() {
    let ports: Vec<u32> = (0..8).map(|i| i * 2).collect(); // all on uplink1
    let mut t = team(
        &[10.0, 10.0],
        group(Policy::LOAD_BASED, &[0, 1], &[], true),
        ports.clone(),
    );
    let moves = drive(&mut t, &|_, _| 1.5, &ports, 0, 400); // 12 Gbit/s offered
    assert!(moves.len() >= 2);
    for w in moves.windows(2) {
        assert!(
            w[1].at - w[0].at >= Duration::from_secs(30),
            "{:?} then {:?}",
            w[0].at,
            w[1].at
        );
    }
    for m in &moves {
        let MoveReason::LoadBased(d) = &m.reason else { panic!() };
        assert!(d.to_after.max() <= 0.75);
    }
    // LBT is not a balancer: it stops as soon as no uplink passes 75%. 5 ports = 7.5 Gbit/s is
    // at, not past, the threshold, so it settles at 5 + 3.
    let on0 = map(&t, ports.iter().copied()).iter().filter(|u| **u == Some(0)).count();
    assert_eq!(on0, 5);
    assert_eq!(moves.len(), 3);
}

#[test]
fn lbt_respects_mixed_link_speeds() {
    // uplink1 10 GbE carries a 6 Gbit/s port and a 0.5 Gbit/s port and a 1.5 Gbit/s one (8 Gbit/s);
    // uplink2 is 1 GbE: only the 0.5 Gbit/s port fits under 750 Mbit/s there.
    let ports = [0, 2, 4];
    let rate = |p: u32, _| match p {
        0 => 6.0,
        2 => 0.5,
        _ => 1.5,
    };
    let mut t = team(&[10.0, 1.0], group(Policy::LOAD_BASED, &[0, 1], &[], true), ports);
    let moves = drive(&mut t, &rate, &ports, 0, 200);
    assert_eq!(moves.len(), 1, "{moves:?}");
    assert_eq!((moves[0].port, moves[0].to), (PortId(2), Some(UplinkId(1))));
    let MoveReason::LoadBased(d) = &moves[0].reason else {
        panic!()
    };
    // It moved while its mean was still rising towards 0.5 Gbit/s; 1 GbE stays under 75%.
    assert!(d.to_after.tx > 0.4 && d.to_after.tx <= 0.75, "{d:?}");
    assert!(
        drive(&mut t, &rate, &ports, 200, 200).is_empty(),
        "the 6 and 1.5 Gbit/s ports never fit on 1 GbE"
    );
}

#[test]
fn lbt_relieves_a_saturated_slow_uplink() {
    // Ports 1 and 3 hash to active[1] = uplink2 (1 GbE); each sends 0.45 Gbit/s: 90% of 1 GbE.
    let ports = [1, 3];
    let mut t = team(&[10.0, 1.0], group(Policy::LOAD_BASED, &[0, 1], &[], true), ports);
    assert_eq!(map(&t, ports), [Some(1), Some(1)]);
    let moves = drive(&mut t, &|_, _| 0.45, &ports, 0, 100);
    assert_eq!(moves.len(), 1);
    assert_eq!((moves[0].from, moves[0].to), (Some(UplinkId(1)), Some(UplinkId(0))));
}

#[test]
fn link_failure_in_the_middle_of_an_lbt_window() {
    // Three uplinks; ports 0,3,6 on uplink1, 1,4,7 on uplink2, 2,5,8 on uplink3; 2 Gbit/s each.
    let ports: Vec<u32> = (0..9).collect();
    let mut t = team(
        &[10.0; 3],
        group(Policy::LOAD_BASED, &[0, 1, 2], &[], true),
        ports.clone(),
    );
    assert!(
        drive(&mut t, &|_, _| 2.0, &ports, 0, 45).is_empty(),
        "6 Gbit/s per uplink: balanced"
    );
    // uplink2 fails 15 s into a window: its three ports fail over at once (not an LBT move).
    t.set_link(UplinkId(1), LinkState::Down, Instant::from_secs(45))
        .unwrap();
    let (failover, _) = drain(&mut t);
    assert_eq!(failover.len(), 3);
    assert!(failover.iter().all(|m| m.reason == MoveReason::LinkDown));
    // The survivors now carry 9 and 9 (or 8 and 10) Gbit/s: both over 75%. LBT must never pick
    // the dead uplink, and cannot fit any 2 Gbit/s port anywhere: no LBT move at all.
    let moves = drive(&mut t, &|_, _| 2.0, &ports, 45, 120);
    assert!(moves.is_empty(), "{moves:?}");
    assert!(map(&t, ports.iter().copied()).iter().all(|u| *u != Some(1)));
    // uplink2 returns: failback takes its ports home, and the team is balanced again.
    t.set_link(UplinkId(1), LinkState::Up, Instant::from_secs(165)).unwrap();
    let (failback, _) = drain(&mut t);
    assert_eq!(failback.len(), 3);
    assert!(failback
        .iter()
        .all(|m| m.reason == MoveReason::Failback && m.to == Some(UplinkId(1))));
    let moves = drive(&mut t, &|_, _| 2.0, &ports, 165, 120);
    assert!(moves.is_empty(), "{moves:?}");
    let per: Vec<usize> = (0..3)
        .map(|u| map(&t, ports.iter().copied()).iter().filter(|x| **x == Some(u)).count())
        .collect();
    assert_eq!(per, [3, 3, 3]);
}

#[test]
fn lbt_on_a_dead_uplinks_stale_window_does_not_move_ports_to_it() {
    // Two uplinks; all four ports on uplink1 at 2.2 Gbit/s (88%). uplink2 dies just before LBT
    // would fire: nothing can move, then it returns and LBT uses it.
    let ports = [0, 2, 4, 6];
    let mut t = team(&[10.0; 2], group(Policy::LOAD_BASED, &[0, 1], &[], false), ports);
    assert!(drive(&mut t, &|_, _| 2.2, &ports, 0, 20).is_empty());
    t.set_link(UplinkId(1), LinkState::Down, Instant::from_secs(20))
        .unwrap();
    assert!(drive(&mut t, &|_, _| 2.2, &ports, 20, 60).is_empty());
    t.set_link(UplinkId(1), LinkState::Up, Instant::from_secs(80)).unwrap();
    let moves = drive(&mut t, &|_, _| 2.2, &ports, 80, 5);
    assert_eq!(moves.len(), 1);
    assert_eq!(moves[0].to, Some(UplinkId(1)));
}

#[test]
fn lbt_is_deterministic_and_its_knobs_apply() {
    let run = |lbt: LbtConfig| {
        let ports: Vec<u32> = (0..6).map(|i| i * 2).collect();
        let mut t = Team::new(uplinks(&[10.0, 10.0]), lbt).unwrap();
        let g = t.add_group(group(Policy::LOAD_BASED, &[0, 1], &[], true)).unwrap();
        for &p in &ports {
            t.add_port(PortSpec {
                id: PortId(p),
                mac: mac(p),
                group: g,
            })
            .unwrap();
        }
        drive(
            &mut t,
            &|p, s| 0.5 + 0.01 * f64::from(p) + (s as f64) * 0.002,
            &ports,
            0,
            600,
        )
    };
    let a = run(LbtConfig::default());
    assert_eq!(a, run(LbtConfig::default()));
    assert!(!a.is_empty());
    let fast = run(LbtConfig {
        window: Duration::from_secs(3),
        period: Duration::from_secs(5),
        threshold: 0.5,
    });
    assert!(fast[0].at < a[0].at, "lower threshold and shorter window fire earlier");
    assert!(fast.windows(2).all(|w| w[1].at - w[0].at >= Duration::from_secs(5)));
    let MoveReason::LoadBased(d) = &fast[0].reason else {
        panic!()
    };
    assert_eq!(d.threshold, 0.5);
}

#[test]
fn only_lbt_groups_are_moved() {
    let mut t = Team::new(uplinks(&[10.0, 10.0]), LbtConfig::default()).unwrap();
    let fixed = t.add_group(group(Policy::PORT_ID, &[0, 1], &[], true)).unwrap();
    let lbt = t
        .add_group(PortGroupSpec {
            name: "lbt".into(),
            ..group(Policy::LOAD_BASED, &[0, 1], &[], true)
        })
        .unwrap();
    t.add_port(PortSpec {
        id: PortId(0),
        mac: mac(0),
        group: fixed,
    })
    .unwrap();
    t.add_port(PortSpec {
        id: PortId(2),
        mac: mac(2),
        group: lbt,
    })
    .unwrap();
    // The static port is the big one; only the LBT port may move.
    let moves = drive(&mut t, &|p, _| if p == 0 { 7.0 } else { 1.0 }, &[0, 2], 0, 100);
    assert_eq!(moves.len(), 1);
    assert_eq!(moves[0].port, PortId(2));
}

#[test]
fn lbt_failover_places_ports_by_headroom_on_mixed_speeds() {
    // uplink1 and uplink2 10 GbE, uplink3 1 GbE. Ports 0 and 3 (4 and 0.3 Gbit/s) live on uplink1,
    // port 1 (2 Gbit/s) on uplink2, port 2 (0.2 Gbit/s) on uplink3.
    let ports = [0, 1, 2, 3];
    let rate = |p: u32, _| [4.0, 2.0, 0.2, 0.3][p as usize];
    let mut t = team(
        &[10.0, 10.0, 1.0],
        group(Policy::LOAD_BASED, &[0, 1, 2], &[], true),
        ports,
    );
    assert!(drive(&mut t, &rate, &ports, 0, 40).is_empty());
    t.set_link(UplinkId(0), LinkState::Down, Instant::from_secs(40))
        .unwrap();
    let (moves, _) = drain(&mut t);
    // The 4 Gbit/s port goes to the 10 GbE uplink2 (60%), never to 1 GbE (420%). The 0.3 Gbit/s
    // port then fits best on 1 GbE (50%) rather than uplink2 (63%).
    assert_eq!(moves.len(), 2);
    assert_eq!((moves[0].port, moves[0].to), (PortId(0), Some(UplinkId(1))));
    assert_eq!((moves[1].port, moves[1].to), (PortId(3), Some(UplinkId(2))));
    assert!(moves.iter().all(|m| m.reason == MoveReason::LinkDown));
    // Static policies keep the load-blind rendezvous choice (predictable for upstream configs).
    let mut s = team(
        &[10.0, 10.0, 1.0],
        group(Policy::PORT_ID, &[0, 1, 2], &[], true),
        [0, 3],
    );
    let expect: Vec<Option<UplinkId>> = [0u64, 3]
        .iter()
        .map(|&k| rendezvous_pick(k, [1usize, 2]).map(UplinkId))
        .collect();
    s.set_link(UplinkId(0), LinkState::Down, Instant::ZERO).unwrap();
    assert_eq!(vec![s.port_uplink(PortId(0)), s.port_uplink(PortId(3))], expect);
}
