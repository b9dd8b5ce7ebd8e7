//! Windows Server's distributions (Hyper-V Port, Address Hash, Dynamic, and the load-based
//! Dynamic) and the team modes, on the team.

use super::tests::{group, mac, map, team};
use super::*;
use crate::wire::FlowKey;
use crate::Instant;
use core::net::Ipv4Addr;
use core::time::Duration;

fn tcp(src_port: u16) -> FlowKey {
    FlowKey {
        src_mac: mac(1),
        dst_mac: mac(99),
        ether_type: 0x0800,
        src_ip: Some(Ipv4Addr::new(10, 0, 0, 1).into()),
        dst_ip: Some(Ipv4Addr::new(10, 0, 0, 2).into()),
        ip_proto: Some(6),
        src_port: Some(src_port),
        dst_port: Some(5201),
        ..Default::default()
    }
}

fn us(n: u64) -> Instant {
    Instant::from_nanos(n * 1_000)
}

fn with_gap(mut g: PortGroupSpec, gap: Duration) -> PortGroupSpec {
    g.tuning.flowlet_gap = gap;
    g
}

#[test]
fn hyperv_port_spreads_by_port_whatever_the_ids() {
    // Port-ID would put IDs 0, 2, 4, 6 all on the first of two uplinks.
    let t = team(&[10.0, 10.0], group(Policy::PORT_ID, &[0, 1], &[], true), [0, 2, 4, 6]);
    assert_eq!(map(&t, [0, 2, 4, 6]), [Some(0); 4]);
    let t = team(
        &[10.0, 10.0],
        group(Policy::HYPERV_PORT, &[0, 1], &[], true),
        [0, 2, 4, 6],
    );
    assert_eq!(map(&t, [0, 2, 4, 6]), [Some(0), Some(1), Some(0), Some(1)]);
    // Every flow of a port takes its uplink, and it takes floods there.
    for p in [0u32, 2] {
        let u = t.port_uplink(PortId(p));
        assert!((0..50).all(|s| t.select(PortId(p), Some(&tcp(s))) == u));
        assert_eq!(t.port_receive_uplink(PortId(p)), u);
        assert!(t.takes_flood(PortId(p), u.unwrap()));
        assert!(!t.takes_flood(PortId(p), UplinkId(1 - u.unwrap().0)));
    }
}

#[test]
fn hyperv_port_rehomes_evenly_when_the_policy_changes() {
    let mut t = team(&[10.0, 10.0, 10.0], group(Policy::PORT_ID, &[0], &[], true), 0..6);
    let order = FailoverOrder {
        active: vec![UplinkId(0), UplinkId(1), UplinkId(2)],
        standby: vec![],
    };
    t.reconfigure_group(GroupId(0), Policy::HYPERV_PORT, order, true, Instant::ZERO)
        .unwrap();
    let mut per = [0; 3];
    for u in map(&t, 0..6) {
        per[u.unwrap()] += 1;
    }
    assert_eq!(per, [2, 2, 2]);
}

#[test]
fn address_hash_spreads_flows_and_keeps_arp_and_receive_on_the_primary() {
    let t = team(&[10.0, 10.0], group(Policy::ADDRESS_HASH, &[1, 0], &[], true), [7]);
    let mut per = [0; 2];
    for s in 0..400 {
        per[t.select(PortId(7), Some(&tcp(30_000 + s))).unwrap().0] += 1;
    }
    assert!(per.iter().all(|&n| (150..=250).contains(&n)), "{per:?}");
    // The primary is the first active uplink: uplink 1 here.
    let arp = FlowKey {
        arp_op: Some(1),
        ..tcp(1)
    };
    assert_eq!(t.select(PortId(7), Some(&arp)), Some(UplinkId(1)));
    assert_eq!(t.port_uplink(PortId(7)), Some(UplinkId(1)));
    assert!(t.takes_flood(PortId(7), UplinkId(1)) && !t.takes_flood(PortId(7), UplinkId(0)));
    // Operators see the flows per member: 40 flows sending in second 0, shown in second 1.
    let mut t = t;
    for s in 0..40 {
        t.select_frame(PortId(7), Some(&tcp(30_000 + s)), 1000, Instant::from_millis(500));
    }
    let (shares, counters) = t.flowlets(GroupId(0), Instant::from_millis(1500)).unwrap();
    let buckets: u32 = shares.iter().map(|m| m.active_buckets).sum();
    assert_eq!(shares.len(), 2, "{shares:?}");
    assert!((30..=40).contains(&buckets), "{buckets} buckets for 40 flows");
    let bps: f64 = shares.iter().map(|m| m.bps).sum();
    assert_eq!(bps, 40.0 * 1000.0 * 8.0);
    assert_eq!(counters.flowlet_moves, 0);
    assert!(t.flowlets(GroupId(0), Instant::from_millis(3000)).unwrap().0.is_empty());
}

#[test]
fn address_hash_moves_only_the_failed_members_flows() {
    let mut t = team(
        &[10.0, 10.0, 10.0],
        group(Policy::ADDRESS_HASH, &[0, 1, 2], &[], true),
        [7],
    );
    let before: Vec<_> = (0..300).map(|s| t.select(PortId(7), Some(&tcp(s)))).collect();
    t.set_link(UplinkId(2), LinkState::Down, Instant::ZERO).unwrap();
    for (s, b) in before.iter().enumerate() {
        let now = t.select(PortId(7), Some(&tcp(s as u16)));
        if *b != Some(UplinkId(2)) {
            assert_eq!(now, *b, "flow {s} moved off a healthy member");
        } else {
            assert!(matches!(now, Some(UplinkId(0 | 1))));
        }
    }
}

#[test]
fn dynamic_moves_a_flow_only_after_an_idle_gap() {
    let gap = Duration::from_micros(500);
    let mut t = team(
        &[10.0, 10.0],
        with_gap(group(Policy::DYNAMIC, &[0, 1], &[], true), gap),
        [1],
    );
    let flow = tcp(40_000);
    let first = t.select_frame(PortId(1), Some(&flow), 1500, us(0)).unwrap();
    // Its member fails: the bucket moves at once (its queued frames are lost anyway).
    t.set_link(first, LinkState::Down, us(10)).unwrap();
    let other = t.select_frame(PortId(1), Some(&flow), 1500, us(20)).unwrap();
    assert_ne!(other, first);
    // The member returns; within the burst (frames 100 µs apart) the flow stays where it is.
    t.set_link(first, LinkState::Up, us(30)).unwrap();
    for k in 0..50 {
        assert_eq!(
            t.select_frame(PortId(1), Some(&flow), 1500, us(40 + 100 * k)),
            Some(other)
        );
    }
    // After a gap as long as the flowlet gap, it takes its target again.
    let at = us(40 + 100 * 49) + gap;
    assert_eq!(t.select_frame(PortId(1), Some(&flow), 1500, at), Some(first));
    let (shares, counters) = t.flowlets(GroupId(0), at).unwrap();
    assert_eq!((counters.forced_moves, counters.flowlet_moves), (1, 1));
    assert_eq!(shares.len(), 1);
    assert_eq!((shares[0].uplink, shares[0].active_buckets), (first, 1));
}

/// Sends `bytes_per_ms` of each flow every millisecond (a burst, then a pause longer than the
/// gap) from `from_ms` for `ms` milliseconds, running the team's timers.
fn bursts(t: &mut Team, flows: &[(FlowKey, usize)], from_ms: u64, ms: u64) {
    for k in from_ms..from_ms + ms {
        let at = Instant::from_millis(k);
        if t.poll_at().is_some_and(|p| p <= at) {
            t.handle_timeout(at);
        }
        for (f, bytes) in flows {
            t.select_frame(PortId(1), Some(f), *bytes, at);
        }
    }
}

/// The members' shares of bits/s at `now`, by uplink.
fn split(t: &Team, now: Instant) -> Vec<(usize, u32, f64)> {
    let (shares, _) = t.flowlets(GroupId(0), now).unwrap();
    shares.iter().map(|s| (s.uplink.0, s.active_buckets, s.bps)).collect()
}

/// `n` flows whose first frames came while member 1 was down, so that all of them target
/// member 0; member 1 is back up afterwards.
fn started_on_one_member(t: &mut Team, n: u16) -> Vec<FlowKey> {
    t.set_link(UplinkId(1), LinkState::Down, Instant::ZERO).unwrap();
    let flows: Vec<FlowKey> = (1..=n).map(tcp).collect();
    for f in &flows {
        assert_eq!(
            t.select_frame(PortId(1), Some(f), 1500, Instant::ZERO),
            Some(UplinkId(0))
        );
    }
    t.set_link(UplinkId(1), LinkState::Up, Instant::ZERO).unwrap();
    flows
}

#[test]
fn flows_starting_together_spread_at_once() {
    // A bucket's first flowlet takes the least loaded member: four flows whose first frames
    // come together end up two and two, before any rebalance.
    let g = group(Policy::DYNAMIC, &[0, 1], &[], true);
    let mut t = team(&[10.0, 10.0], g, [1]);
    let mut on = [0; 2];
    for f in (1..=4).map(tcp) {
        on[t.select_frame(PortId(1), Some(&f), 1500, us(10)).unwrap().0] += 1;
    }
    assert_eq!(on, [2, 2]);
}

#[test]
fn dynamic_rebalances_colliding_flows_by_bytes_at_flowlet_boundaries() {
    let g = with_gap(group(Policy::DYNAMIC, &[0, 1], &[], true), Duration::from_micros(200));
    let mut t = team(&[10.0, 10.0], g, [1]);
    let flows: Vec<_> = started_on_one_member(&mut t, 4)
        .into_iter()
        .map(|f| (f, 100_000))
        .collect();
    bursts(&mut t, &flows, 0, 999);
    assert_eq!(
        split(&t, Instant::from_millis(999)).len(),
        1,
        "all four start on one member"
    );
    bursts(&mut t, &flows, 999, 3000);
    let s = split(&t, Instant::from_millis(3999));
    assert_eq!(s.iter().map(|m| m.1).collect::<Vec<_>>(), [2, 2], "{s:?}");
}

#[test]
fn a_data_plane_that_sends_on_its_own_feeds_the_rebalance() {
    // Four flows start on member 0 through the engine (their first frames); from then on a data
    // plane of its own (the kernel path) sends them, a burst a millisecond, and tells the
    // engine what it saw: one flow three times the bytes of each other. The rebalance evens
    // the bytes out as it does for frames the engine sends itself: the heavy flow alone on one
    // member, the three others on the other.
    let g = with_gap(group(Policy::DYNAMIC, &[0, 1], &[], true), Duration::from_micros(200));
    let mut t = team(&[10.0, 10.0], g, [1]);
    started_on_one_member(&mut t, 4);
    let placed = |t: &Team| -> Vec<usize> {
        t.flowlet_buckets(GroupId(0))
            .unwrap()
            .into_iter()
            .enumerate()
            .filter(|(_, b)| b.target.is_some())
            .map(|(i, _)| i)
            .collect()
    };
    let buckets = placed(&t);
    assert_eq!(buckets.len(), 4, "four flows, four buckets");
    let target_of = |t: &Team, b: usize| t.flowlet_buckets(GroupId(0)).unwrap()[b].target;
    for k in 1..3000u64 {
        let at = Instant::from_millis(k);
        if t.poll_at().is_some_and(|p| p <= at) {
            t.handle_timeout(at);
        }
        for (i, &b) in buckets.iter().enumerate() {
            // Each millisecond is a new flowlet (the gap is 200 µs): it takes the target.
            let seen = flowlet::BucketState {
                target: None,
                current: target_of(&t, b),
                last_seen: Some(at),
                flowlet_at: Some(at),
            };
            let bytes = if i == 0 { 300_000 } else { 100_000 };
            t.flowlet_seen(GroupId(0), b, seen, bytes, at);
        }
    }
    let heavy = target_of(&t, buckets[0]).unwrap();
    let with_heavy = buckets.iter().filter(|b| target_of(&t, **b) == Some(heavy)).count();
    assert_eq!(with_heavy, 1, "the heavy flow shares its member with none");
    let (shares, counters) = t.flowlets(GroupId(0), Instant::from_millis(2999)).unwrap();
    let mut buckets_on: Vec<u32> = shares.iter().map(|s| s.active_buckets).collect();
    buckets_on.sort();
    assert_eq!(buckets_on, [1, 3], "{shares:?}");
    assert!(counters.retargets >= 1 && counters.flowlet_moves >= 1, "{counters:?}");
    // What the data plane saw before the engine's own last send is not taken.
    let b = buckets[0];
    let before = t.flowlet_buckets(GroupId(0)).unwrap()[b];
    let stale = flowlet::BucketState {
        current: Some(UplinkId(1 - before.current.unwrap().0)),
        last_seen: Some(Instant::from_millis(5)),
        ..before
    };
    t.flowlet_seen(GroupId(0), b, stale, 1, Instant::from_millis(3000));
    assert_eq!(t.flowlet_buckets(GroupId(0)).unwrap()[b], before);
}

#[test]
fn a_flow_a_data_plane_reports_busy_is_not_moved() {
    // Two flows on member 0 that never pause, sent by a data plane of its own that tells the
    // engine every 100 ms (each report's last send is at the report, its flowlet began at the
    // start, more than two rebalance intervals before). The rebalance would even them out if
    // they paused: they do not, as of each report, however long ago that report is at the
    // rebalance (60 ms here, six gaps of 10 ms).
    let g = group(Policy::DYNAMIC, &[0, 1], &[], true);
    let mut t = team(&[10.0, 10.0], g, [1]);
    started_on_one_member(&mut t, 2);
    let buckets: Vec<usize> = t
        .flowlet_buckets(GroupId(0))
        .unwrap()
        .into_iter()
        .enumerate()
        .filter(|(_, b)| b.target.is_some())
        .map(|(i, _)| i)
        .collect();
    for k in 30..80u64 {
        let at = Instant::from_millis(100 * k);
        for &b in &buckets {
            let seen = flowlet::BucketState {
                target: None,
                current: Some(UplinkId(0)),
                last_seen: Some(at),
                flowlet_at: Some(Instant::ZERO),
            };
            t.flowlet_seen(GroupId(0), b, seen, 10_000_000, at);
        }
        // The rebalance runs between two reports.
        let later = at + Duration::from_millis(60);
        if t.poll_at().is_some_and(|p| p <= later) {
            t.handle_timeout(later);
        }
    }
    let (_, counters) = t.flowlets(GroupId(0), Instant::from_millis(8000)).unwrap();
    assert_eq!(counters.retargets, 0, "a flow that never pauses is not retargeted");
}

#[test]
fn a_flow_that_never_pauses_stays_on_its_member() {
    let g = group(Policy::DYNAMIC, &[0, 1], &[], true);
    let mut t = team(&[10.0, 10.0], g, [1]);
    let flows = started_on_one_member(&mut t, 2);
    let home = UplinkId(0);
    // Frames every 100 µs (never a 10 ms gap) for five seconds: rebalancing runs five times.
    for k in 0..50_000u64 {
        let at = us(100 * k);
        if t.poll_at().is_some_and(|p| p <= at) {
            t.handle_timeout(at);
        }
        for f in &flows {
            assert_eq!(t.select_frame(PortId(1), Some(f), 1500, at), Some(home), "frame {k}");
        }
    }
    assert_eq!(t.flowlets(GroupId(0), us(5_000_000)).unwrap().1.flowlet_moves, 0);
}

#[test]
fn lbt_dynamic_is_capacity_aware_and_quiet_below_the_threshold() {
    // 10 GbE + 1 GbE. Dynamic balances bytes: the 1 GbE member gets as much as the 10 GbE one.
    // The load-based variant moves flowlets only while a member is over 75 % of its capacity.
    let gap = Duration::from_micros(200);
    let run = |policy: Policy, bytes: usize| {
        let mut t = team(&[10.0, 1.0], with_gap(group(policy, &[0, 1], &[], true), gap), [1]);
        let flows: Vec<_> = (2..18).map(|s| (tcp(s), bytes)).collect();
        bursts(&mut t, &flows, 0, 6000);
        let s = split(&t, Instant::from_millis(5999));
        let bps = |u: usize| s.iter().find(|m| m.0 == u).map_or(0.0, |m| m.2);
        (bps(0) / 10e9, bps(1) / 1e9)
    };
    // 16 flows of 100 kB per ms: 12.8 Gbit/s offered in all. Dynamic's first flowlets alternate
    // (6.4 per member); the load-based variant places them by utilisation from the start.
    let (dyn10, dyn1) = run(Policy::DYNAMIC, 100_000);
    let (lbt10, lbt1) = run(Policy::LBT_DYNAMIC, 100_000);
    eprintln!("utilisation 10G/1G: dynamic {dyn10:.2}/{dyn1:.2}, lbt-dynamic {lbt10:.2}/{lbt1:.2}");
    assert!(dyn1 > 5.0, "dynamic is speed-blind: {dyn1}");
    assert!(lbt1 < dyn1 / 4.0 && lbt10 > dyn10, "{lbt10} {lbt1}");
    // 16 flows of 2 kB per ms (256 Mbit/s): nobody near 75 %, nothing moves.
    let mut t = team(
        &[10.0, 1.0],
        with_gap(group(Policy::LBT_DYNAMIC, &[0, 1], &[], true), gap),
        [1],
    );
    let flows: Vec<_> = (2..18).map(|s| (tcp(s), 2_000)).collect();
    bursts(&mut t, &flows, 0, 5000);
    assert_eq!(
        t.flowlets(GroupId(0), Instant::from_millis(5000)).unwrap().1.retargets,
        0
    );
}

#[test]
fn lbt_dynamic_moves_flowlets_off_a_member_over_the_threshold() {
    // Twelve flows of 0.8 Gbit/s all on one 10 GbE member (96 %): the round moves flowlets to
    // the other until the busy one is under 75 %, a cut of more than a tenth, so it stands.
    let gap = Duration::from_micros(200);
    let mut t = team(
        &[10.0, 10.0],
        with_gap(group(Policy::LBT_DYNAMIC, &[0, 1], &[], true), gap),
        [1],
    );
    let flows: Vec<_> = started_on_one_member(&mut t, 12)
        .into_iter()
        .map(|f| (f, 100_000))
        .collect();
    bursts(&mut t, &flows, 0, 6000);
    let s = split(&t, Instant::from_millis(5999));
    let util = |u: usize| s.iter().find(|m| m.0 == u).map_or(0.0, |m| m.2) / 10e9;
    let retargets = t.flowlets(GroupId(0), Instant::from_millis(5999)).unwrap().1.retargets;
    eprintln!("utilisation {:.2}/{:.2}, {retargets} retargets", util(0), util(1));
    assert!((3..=4).contains(&retargets), "{retargets}");
    assert!(util(0) <= 0.76 && util(1) >= 0.2, "{s:?}");
}

#[test]
fn modes_refuse_what_the_bundle_cannot_use() {
    let mut g = group(Policy::LOAD_BASED, &[0, 1], &[], true);
    g.mode = TeamMode::Lacp;
    let mut t = Team::new(super::tests::uplinks(&[10.0, 10.0]), LbtConfig::default()).unwrap();
    let e = t.add_group(g.clone()).unwrap_err().to_string();
    assert!(e.contains("switch independent only"), "{e}");
    g.policy = Policy::ADDRESS_HASH;
    g.order.standby = vec![UplinkId(1)];
    g.order.active = vec![UplinkId(0)];
    let e = t.add_group(g.clone()).unwrap_err().to_string();
    assert!(e.contains("no standby"), "{e}");
    g.order = FailoverOrder {
        active: vec![UplinkId(0), UplinkId(1)],
        standby: vec![],
    };
    g.tuning.flowlet_gap = Duration::ZERO;
    let e = t.add_group(g.clone()).unwrap_err().to_string();
    assert!(e.contains("flowlet_gap_us"), "{e}");
    g.tuning = PolicyTuning::default();
    t.add_group(g).unwrap();
}

#[test]
fn a_switch_dependent_group_takes_floods_on_every_live_member() {
    let mut g = group(Policy::HYPERV_PORT, &[0, 1], &[], true);
    g.mode = TeamMode::Static;
    let mut t = team(&[10.0, 10.0], g, [1, 2]);
    for p in [1, 2] {
        assert!(t.takes_flood(PortId(p), UplinkId(0)) && t.takes_flood(PortId(p), UplinkId(1)));
    }
    t.set_link(UplinkId(1), LinkState::Down, Instant::ZERO).unwrap();
    assert!(t.takes_flood(PortId(2), UplinkId(0)) && !t.takes_flood(PortId(2), UplinkId(1)));
}

#[test]
fn the_census_counts_what_the_groups_fields_tell_apart() {
    let mut g = group(Policy::ADDRESS_HASH, &[0, 1], &[], true);
    g.tuning.hash_fields = HashFields::IpAddresses;
    let mut t = team(&[10.0, 10.0], g, [7]);
    for s in 0..40 {
        t.select_frame(PortId(7), Some(&tcp(30_000 + s)), 1000, Instant::from_millis(500));
    }
    // Forty connections between two addresses: one bucket, on one member.
    let (shares, _) = t.flowlets(GroupId(0), Instant::from_millis(1500)).unwrap();
    assert_eq!(shares.len(), 1, "{shares:?}");
    assert_eq!(shares[0].active_buckets, 1);
    assert_eq!(shares[0].bps, 40.0 * 1000.0 * 8.0);
}
