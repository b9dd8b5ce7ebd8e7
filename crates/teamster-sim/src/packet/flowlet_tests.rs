//! Dynamic's flowlets through the packet engine: where TCP would see reordering, and where a
//! flow may move.

use super::engine::{run, Discipline, HostPlan, PortPlan, UplinkPlan};
use super::source::SourceSpec;
use crate::run::RunOutput;
use core::time::Duration;
use teamster_core::ioc::admission::ReservationCap;
use teamster_core::ioc::{NodeId, NodeSpec, Shares, Tree};
use teamster_core::teaming::{FailoverOrder, LbtConfig, Policy, PolicyTuning, PortGroupSpec, UplinkId};
use teamster_core::units::Bandwidth;
use teamster_core::wire::MacAddr;

/// Two 10 GbE uplinks (9.4 Gbit/s effective, 5 ms queue budgets as the data plane's default)
/// under one `dynamic` group with `gap`, and a port per source.
fn team_of_two(gap: Duration, sources: Vec<SourceSpec>, duration_s: f64) -> HostPlan {
    let mut tree = Tree::new("team");
    let ports = sources
        .into_iter()
        .enumerate()
        .map(|(i, source)| {
            let spec = NodeSpec {
                name: format!("vm{}", i + 1),
                reservation: Bandwidth::ZERO,
                shares: Shares::NORMAL,
                limit: None,
            };
            PortPlan {
                name: format!("vm{}", i + 1),
                id: i as u32,
                mac: MacAddr([2, 0, 0, 0, 0, i as u8 + 1]),
                group: 0,
                leaf: tree.add(NodeId::ROOT, spec).unwrap(),
                source,
                start_s: 0.0,
                stop_s: None,
            }
        })
        .collect();
    let uplink = |name: &str| UplinkPlan {
        name: name.into(),
        capacity: Bandwidth::from_gbps(10),
        rate_bps: 9.4e9,
    };
    HostPlan {
        uplinks: vec![uplink("uplink1"), uplink("uplink2")],
        groups: vec![PortGroupSpec {
            name: "vms".into(),
            policy: Policy::DYNAMIC,
            order: FailoverOrder {
                active: vec![UplinkId(0), UplinkId(1)],
                standby: vec![],
            },
            failback: true,
            notify_switches: true,
            vlan: None,
            mode: Default::default(),
            lacp: Default::default(),
            tuning: PolicyTuning {
                flowlet_gap: gap,
                ..PolicyTuning::default()
            },
        }],
        lbt: LbtConfig::default(),
        tree,
        reservation_cap: ReservationCap::default(),
        ports,
        security: Vec::new(),
        discipline: Discipline::Netioc,
        queue_packets: 1024,
        queue_ms: Some(5.0),
        fifo_packets: 1024,
        events: Vec::new(),
        duration_s,
    }
}

/// A port per bulk stream in `bulk` (100 µs RTT, 40-packet window: 4.8 Gbit/s that never
/// pauses), and a port of eight bursty streams (15 ms RTT, 2,000-packet window: a 2.5 ms burst,
/// then an idle gap longer than the default flowlet gap, every RTT; 1.6 Gbit/s each); flowlets
/// rebalanced every 100 ms. The bulk streams stop at 3 s.
fn mixed(gap: Duration, bulk: usize) -> RunOutput {
    let mut sources = vec![
        SourceSpec::TcpStream {
            streams: 1,
            bytes: 1500,
            rtt_us: 100.0,
            max_window: 40,
        };
        bulk
    ];
    sources.push(SourceSpec::TcpStream {
        streams: 8,
        bytes: 1500,
        rtt_us: 15_000.0,
        max_window: 2000,
    });
    let mut plan = team_of_two(gap, sources, 8.0);
    plan.groups[0].tuning.rebalance = Duration::from_millis(100);
    // The bulk streams stop at 3 s, leaving their member the lighter: flowlets move to it.
    for p in &mut plan.ports[..bulk] {
        p.stop_s = Some(3.0);
    }
    run(&plan).unwrap()
}

#[test]
fn flowlets_move_between_bursts_without_reordering_and_a_long_flow_stays() {
    let out = mixed(PolicyTuning::DEFAULT_FLOWLET_GAP, 1);
    let bursty = out.ports.len() - 1;
    eprintln!(
        "default gap: member changes {:?}, reordered {:?}, packets {}",
        out.member_changes, out.reordered, out.packets
    );
    assert_eq!(out.reordered.iter().sum::<u64>(), 0, "{:?}", out.reordered);
    for p in 0..bursty {
        assert_eq!(out.member_changes[p], 0, "bulk flow {p} changed member");
    }
    assert!(
        out.member_changes[bursty] > 0,
        "no flowlet ever moved: the test shows nothing"
    );
}

/// Four constant-rate streams of 6, 2, 6 and 2 Gbit/s (a frame every 2 to 6 µs, never a pause)
/// under flowlet gap `gap`: the first frames alternate members, so one member is offered
/// 12 Gbit/s, each 6 Gbit/s stream queueing for its fair 4.7, while the other carries 4; the
/// rebalance retargets one of the queued streams.
fn constant_streams(gap: Duration) -> RunOutput {
    let cbr = |gbps: u64| SourceSpec::Cbr {
        rate: Bandwidth::from_gbps(gbps),
        bytes: 1500,
    };
    let mut plan = team_of_two(gap, vec![cbr(6), cbr(2), cbr(6), cbr(2)], 3.0);
    plan.groups[0].tuning.rebalance = Duration::from_millis(100);
    run(&plan).unwrap()
}

#[test]
fn a_gap_shorter_than_the_queues_reorders_and_the_default_does_not() {
    // The detector can fail: with flowlets cut at 1 µs, a stream retargeted away from the
    // queueing member sends its next frame on the other at once, overtaking its frames still
    // queued. Under the default gap the same stream never pauses long enough to move.
    let short = constant_streams(Duration::from_micros(1));
    let default = constant_streams(PolicyTuning::DEFAULT_FLOWLET_GAP);
    eprintln!(
        "1 µs gap: member changes {:?}, reordered {:?}; default gap: {:?}, {:?}",
        short.member_changes, short.reordered, default.member_changes, default.reordered
    );
    assert!(short.reordered.iter().sum::<u64>() > 0, "{:?}", short.member_changes);
    assert_eq!(default.reordered.iter().sum::<u64>(), 0);
    assert_eq!(default.member_changes.iter().sum::<u64>(), 0);
}

/// Delivered Gbit/s from 4 s to the end (12 s), in all and per uplink, and packets reordered,
/// under `policy` (default flowlet gap, rebalancing every 250 ms; LBT window and period 2 s)
/// on a team of a 10 GbE member and one of `second_gbps`, the VM homed on the second: one VM
/// of eight bursty TCP streams of jumbo frames (up to 12.8 Gbit/s offered).
fn one_busy_vm(policy: Policy, second_gbps: u64) -> (f64, [f64; 2], u64) {
    let source = SourceSpec::TcpStream {
        streams: 8,
        bytes: 9000,
        rtt_us: 15_000.0,
        max_window: 334,
    };
    let mut plan = team_of_two(PolicyTuning::DEFAULT_FLOWLET_GAP, vec![source], 12.0);
    plan.uplinks[1].capacity = Bandwidth::from_gbps(second_gbps);
    plan.uplinks[1].rate_bps = 0.94e9 * second_gbps as f64;
    let g = &mut plan.groups[0];
    g.policy = policy;
    g.order.active = vec![UplinkId(1), UplinkId(0)];
    g.tuning.rebalance = Duration::from_millis(250);
    plan.lbt = LbtConfig {
        window: Duration::from_secs(2),
        period: Duration::from_secs(2),
        ..LbtConfig::default()
    };
    let out = run(&plan).unwrap();
    let rows: Vec<_> = out.rows.iter().filter(|r| r.t_s >= 4.0).collect();
    let n = rows.len() as f64;
    let per_uplink = [0, 1].map(|u| rows.iter().map(|r| r.uplink_tx[u]).sum::<f64>() / n / 1e9);
    (per_uplink.iter().sum(), per_uplink, out.reordered.iter().sum())
}

#[test]
fn load_based_dynamic_against_both_parents() {
    // 10 GbE + 1 GbE. Dynamic evens out bytes, blind to speed, and keeps half the VM's
    // flowlets on the 1 GbE member; the load-based Dynamic moves them towards the headroom.
    // LBT moves the whole VM to the 10 GbE member at once, mid-burst (TCP sees reordering),
    // and then leaves the 1 GbE member idle.
    let mixed = [Policy::LOAD_BASED, Policy::DYNAMIC, Policy::LBT_DYNAMIC].map(|p| one_busy_vm(p, 1));
    // 10 GbE + 10 GbE: the VM offers more than one member carries. LBT moves ports, so one VM
    // never exceeds one member; both Dynamics split its flowlets.
    let equal = [Policy::LOAD_BASED, Policy::DYNAMIC, Policy::LBT_DYNAMIC].map(|p| one_busy_vm(p, 10));
    for (what, r) in [("10G + 1G", &mixed), ("10G + 10G", &equal)] {
        eprintln!(
            "{what}: Gbit/s (10G, other), reordered: load-based {:.2?}, dynamic {:.2?}, lbt-dynamic {:.2?}",
            r[0], r[1], r[2]
        );
    }
    let [lbt, dynamic, both] = mixed;
    assert!(
        both.0 > dynamic.0 * 1.5,
        "mixed: lbt-dynamic {both:?} vs dynamic {dynamic:?}"
    );
    let [lbt_eq, _, both_eq] = equal;
    assert!(lbt_eq.0 < 9.5, "LBT split a port: {lbt_eq:?}");
    assert!(
        both_eq.0 > lbt_eq.0 * 1.15,
        "equal: lbt-dynamic {both_eq:?} vs load-based {lbt_eq:?}"
    );
    assert!(both.0 > lbt.0, "mixed: lbt-dynamic {both:?} vs load-based {lbt:?}");
    assert_eq!(
        [dynamic.2, both.2, equal[1].2, equal[2].2],
        [0; 4],
        "flowlets reordered TCP"
    );
}
