//! Load-Based Teaming through the team: when it moves, what, where, how often, under either rule.

use super::tests::{drain, group, mac, map, team, uplinks};
use super::*;
use core::time::Duration;

/// Drives `t` for `secs` seconds: each port sends `rates(port, second)` Gbit/s (and a tenth of
/// it as receive) through its current uplink; LBT runs every second. Returns the moves.
fn drive(t: &mut Team, rates: &dyn Fn(u32, u64) -> f64, ports: &[u32], from: u64, secs: u64) -> Vec<PortMove> {
    drive_in_steps(t, rates, ports, from, secs, 1)
}

/// As [`drive`], in `per_s` steps per second (for meters whose buckets are shorter than 1 s).
fn drive_in_steps(
    t: &mut Team,
    rates: &dyn Fn(u32, u64) -> f64,
    ports: &[u32],
    from: u64,
    secs: u64,
    per_s: u64,
) -> Vec<PortMove> {
    let mut moves = vec![];
    for k in from * per_s..(from + secs) * per_s {
        let now = Instant::from_nanos(k * 1_000_000_000 / per_s);
        t.handle_timeout(now);
        for &p in ports {
            if let Some(u) = t.port_uplink(PortId(p)) {
                let bytes = (rates(p, k / per_s) * 1e9 / 8.0 / per_s as f64) as u64;
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
        // Ten steps a second: the short window's buckets are 100 ms.
        drive_in_steps(
            &mut t,
            &|p, s| 0.5 + 0.01 * f64::from(p) + (s as f64) * 0.002,
            &ports,
            0,
            600,
            10,
        )
    };
    let a = run(LbtConfig::default());
    assert_eq!(a, run(LbtConfig::default()));
    assert!(!a.is_empty());
    let fast = run(LbtConfig {
        window: Duration::from_secs(3),
        period: Duration::from_secs(5),
        threshold: 0.5,
        ..Default::default()
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
        .map(|&k| rendezvous_pick(k, [1usize, 2].map(|u| (u, uplink_salt(&format!("uplink{}", u + 1))))).map(UplinkId))
        .collect();
    s.set_link(UplinkId(0), LinkState::Down, Instant::ZERO).unwrap();
    assert_eq!(vec![s.port_uplink(PortId(0)), s.port_uplink(PortId(3))], expect);
}

/// A team of two 10 GbE uplinks, one LBT group under `damping`, and ports `ids` (homes by port
/// ID: even IDs on uplink1, odd on uplink2).
fn lbt_team(damping: Damping, ids: &[u32]) -> Team {
    let lbt = LbtConfig {
        damping,
        ..Default::default()
    };
    let mut t = Team::new(uplinks(&[10.0, 10.0]), lbt).unwrap();
    let g = t.add_group(group(Policy::LOAD_BASED, &[0, 1], &[], true)).unwrap();
    for &id in ids {
        t.add_port(PortSpec {
            id: PortId(id),
            mac: mac(id),
            group: g,
        })
        .unwrap();
    }
    t
}

/// The anti-phase load: ports 0 and 2 (uplink1) send `on` Gbit/s in even minutes, ports 1 and 3
/// (uplink2) in odd minutes; port 4 (uplink1), if present, sends `steady` Gbit/s throughout.
fn anti_phase(on: f64, steady: f64) -> impl Fn(u32, u64) -> f64 {
    move |p, s| {
        let even_minute = (s / 60) % 2 == 0;
        match p {
            0 | 2 if even_minute => on,
            1 | 3 if !even_minute => on,
            4 => steady,
            _ => 0.0,
        }
    }
}

#[test]
fn anti_phase_load_settles_under_teamster_and_ping_pongs_under_vsphere() {
    // Two on/off ports per uplink in anti-phase: the plain rule moves an idle-looking port (by
    // its lagging mean) every period, for ever; judged by recent rates the team settles at once.
    let ports = [0, 1, 2, 3];
    let rates = anti_phase(4.0, 0.0);
    let plain = drive(&mut lbt_team(Damping::Vsphere, &ports), &rates, &ports, 0, 1200);
    assert!(plain.len() >= 35, "the plain rule: {} moves", plain.len());
    let mut t = lbt_team(Damping::Teamster, &ports);
    let moves = drive(&mut t, &rates, &ports, 0, 1200);
    assert_eq!(moves.len(), 2, "{moves:?}");
    // Settled: one on/off port of each phase per uplink, 4 Gbit/s each at any time.
    let on1: Vec<u32> = ports
        .into_iter()
        .filter(|&p| t.port_uplink(PortId(p)) == Some(UplinkId(0)))
        .collect();
    assert_eq!(on1.len(), 2);
    assert!(
        on1.iter().any(|p| p % 2 == 0) && on1.iter().any(|p| p % 2 == 1),
        "{on1:?}"
    );

    // With a steady port between them, the recent rate alone is not enough: the steady port is
    // the smallest relief on whichever uplink wakes, and bounces. The hold settles it.
    let ports = [0, 1, 2, 3, 4];
    let rates = anti_phase(3.0, 2.0);
    let plain = drive(&mut lbt_team(Damping::Vsphere, &ports), &rates, &ports, 0, 1200);
    assert!(plain.len() >= 18, "the plain rule: {} moves", plain.len());
    assert!(
        plain.iter().filter(|m| m.port == PortId(4)).count() >= 18,
        "the steady port bounces"
    );
    let mut t = lbt_team(Damping::Teamster, &ports);
    let moves = drive(&mut t, &rates, &ports, 0, 1200);
    assert!(
        moves.len() <= 3 && moves.iter().all(|m| m.at < Instant::from_secs(200)),
        "{moves:?}"
    );
    let second = moves
        .iter()
        .find(|m| m.port != PortId(4))
        .expect("another port relieves");
    let MoveReason::LoadBased(d) = &second.reason else {
        panic!()
    };
    assert!(!d.held && d.from_after.tx <= 0.75);
    // And it stays settled: neither uplink passes 75% over the last ten minutes.
    let (mut worst, now) = (0.0f64, Instant::from_secs(1200));
    for s in 600..1200u64 {
        let mut load = [0.0; 2];
        for p in ports {
            load[t.port_uplink(PortId(p)).unwrap().0] += rates(p, s);
        }
        worst = worst.max(load[0].max(load[1]) / 10.0);
    }
    assert!(worst <= 0.75, "worst utilisation {worst}");
    assert!(t.utilisation(UplinkId(0), now).unwrap().max() <= 0.75);
}

/// SplitMix64: a small deterministic generator for the population test (no I/O, no crate).
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[test]
fn population_of_steady_loads_against_the_ideal() {
    // 300 random hosts: 4-9 ports at 0.5-3.5 Gbit/s on two 10 GbE uplinks, homes by port ID. The
    // ideal, by brute force over every placement: the fewest moves from the start to a placement
    // with both uplinks at or under 75%. LBT (either rule; the loads are steady) must reach such
    // a placement in nearly every feasible host, with few moves beyond the ideal.
    let mut seed = 9;
    let (mut feasible, mut reached, mut extra_moves, mut needing) = (0, [0; 2], [0usize; 2], 0);
    for _ in 0..300 {
        let n = 4 + (next(&mut seed) % 6) as u32;
        let rate: Vec<f64> = (0..n).map(|_| 0.5 + (next(&mut seed) % 3000) as f64 / 1000.0).collect();
        // Port IDs put about three ports in four on uplink1 at the start.
        let ids: Vec<u32> = (0..n).map(|p| 2 * p + u32::from(next(&mut seed) % 4 == 0)).collect();
        let start: Vec<usize> = ids.iter().map(|id| (id % 2) as usize).collect();
        let ideal = (0u32..1 << n)
            .filter(|mask| {
                let on2: f64 = (0..n).filter(|p| mask >> p & 1 == 1).map(|p| rate[p as usize]).sum();
                let total: f64 = rate.iter().sum();
                on2 <= 7.5 && total - on2 <= 7.5
            })
            .map(|mask| {
                (0..n as usize)
                    .filter(|&p| (mask >> p & 1) as usize != start[p])
                    .count()
            })
            .min();
        let Some(ideal) = ideal else { continue };
        feasible += 1;
        needing += usize::from(ideal > 0);
        for (k, damping) in [Damping::Teamster, Damping::Vsphere].into_iter().enumerate() {
            let mut t = lbt_team(damping, &ids);
            let moves = drive(&mut t, &|id, _| rate[id as usize / 2], &ids, 0, 900);
            let mut load = [0.0; 2];
            for (p, id) in ids.iter().enumerate() {
                load[t.port_uplink(PortId(*id)).unwrap().0] += rate[p];
            }
            if load[0] <= 7.5 + 1e-9 && load[1] <= 7.5 + 1e-9 {
                reached[k] += 1;
                extra_moves[k] += moves.len() - ideal;
            }
        }
    }
    // Figures (seed 9): of 300 hosts 196 are feasible, 117 of them need a move. Teamster's rule
    // settles 190 under 75% (97%) with no move beyond the ideal; the 6 it misses stop with one
    // uplink at 75-78%, where no single port both relieves it and fits on the other (the ideal
    // gets there through two moves, or a swap, that LBT does not make). The plain rule settles
    // 184, with 62 moves beyond the ideal: it misjudges ports by means still filling at start.
    println!(
        "population: {feasible} feasible ({needing} need moves); reached {reached:?}; extra moves {extra_moves:?}"
    );
    assert!(feasible >= 150 && needing >= 80, "the population tests something");
    assert!(
        reached[0] * 100 >= feasible * 95,
        "teamster: {} of {feasible}",
        reached[0]
    );
    assert!(
        extra_moves[0] * 10 <= reached[0],
        "teamster: {} extra moves",
        extra_moves[0]
    );
    assert!(
        reached[1] * 100 >= feasible * 90,
        "vsphere: {} of {feasible}",
        reached[1]
    );
    assert!(
        reached[0] >= reached[1] && extra_moves[0] <= extra_moves[1],
        "teamster no worse"
    );
}
