//! The allocator against the public vectors (reference §7), its properties, and admission.

use super::admission::{admit, set_controls};
use super::*;
use crate::units::Bandwidth;
use proptest::prelude::*;

const G: f64 = 1e9;
const INF: f64 = f64::INFINITY;

fn bw(gbps: f64) -> Bandwidth {
    Bandwidth::from_bps_f64(gbps * G)
}

/// One child of `parent`: (reservation, shares, limit or INF) in Gbit/s.
fn node(t: &mut Tree, parent: NodeId, name: &str, r: f64, s: u32, l: f64) -> NodeId {
    let spec = NodeSpec {
        name: name.into(),
        reservation: bw(r),
        shares: Shares::new(s).unwrap(),
        limit: l.is_finite().then(|| bw(l)),
    };
    t.add(parent, spec).unwrap()
}

/// A flat tree of (R, S, L, demand) children; returns their allocations in Gbit/s.
fn flat(cap: f64, children: &[(f64, u32, f64, f64)]) -> Vec<f64> {
    let mut t = Tree::new("uplink");
    let mut demand = vec![None];
    for (i, &(r, s, l, d)) in children.iter().enumerate() {
        node(&mut t, NodeId::ROOT, &format!("n{i}"), r, s, l);
        demand.push(d.is_finite().then_some(d * G));
    }
    let a = allocate(&t, cap * G, &demand);
    (1..=children.len()).map(|i| a.0[i] / G).collect()
}

fn close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 0.0015, "got {got:?}, want {want:?}");
    }
}

#[test]
fn tv1_netioc_white_paper() {
    close(
        &flat(9.4, &[(7.5, 50, INF, INF), (0.0, 50, INF, INF), (0.0, 50, INF, INF)]),
        &[8.133, 0.633, 0.633],
    );
    // Before the reservation: equal shares, ~3.1 each.
    close(&flat(9.4, &[(0.0, 50, INF, INF); 3]), &[3.133, 3.133, 3.133]);
}

#[test]
fn tv2_limit_and_tv3_idle_reservation() {
    close(
        &flat(9.4, &[(7.5, 50, INF, INF), (0.0, 50, INF, INF), (0.0, 50, 0.3, INF)]),
        &[8.3, 0.8, 0.3],
    );
    close(
        &flat(9.4, &[(7.5, 50, INF, 2.0), (0.0, 50, INF, INF), (0.0, 50, INF, INF)]),
        &[2.0, 3.7, 3.7],
    );
}

#[test]
fn tv4_overload_splits_in_proportion_to_reservations() {
    close(
        &flat(5.0, &[(4.0, 50, INF, INF), (2.0, 50, INF, INF), (1.0, 50, INF, INF)]),
        &[2.857, 1.429, 0.714],
    );
}

#[test]
fn tv5_tv6_hfsc_examples() {
    // Shares 5 : 2.5 : 2.5 written as 50 : 25 : 25; B idle.
    close(
        &flat(10.0, &[(0.0, 50, INF, INF), (0.0, 25, INF, 0.0), (0.0, 25, 2.5, INF)]),
        &[7.5, 0.0, 2.5],
    );
    close(
        &flat(10.0, &[(8.0, 50, INF, INF), (0.0, 25, INF, 0.0), (0.0, 25, INF, INF)]),
        &[9.333, 0.0, 0.667],
    );
}

#[test]
fn tv7_tv8_tv9() {
    close(
        &flat(100.0, &[(1.0, 9, 80.0, INF), (30.0, 1, 40.0, INF)]),
        &[63.1, 36.9],
    );
    close(
        &flat(100.0, &[(5.0, 4, 30.0, INF), (5.0, 6, 30.0, INF), (5.0, 8, 30.0, INF)]),
        &[30.0, 30.0, 30.0],
    );
    let tv9 = [
        (1.0, 50, INF, INF),
        (1.0, 100, INF, INF),
        (1.0, 50, INF, INF),
        (1.0, 50, INF, INF),
        (0.5, 100, INF, INF),
    ];
    close(&flat(10.0, &tv9), &[1.786, 2.571, 1.786, 1.786, 2.071]);
}

#[test]
fn hierarchical_vector() {
    let mut t = Tree::new("uplink");
    let vmotion = node(&mut t, NodeId::ROOT, "live-migration", 1.0, 50, INF);
    let iscsi = node(&mut t, NodeId::ROOT, "iscsi", 1.0, 100, INF);
    let vm = node(&mut t, NodeId::ROOT, "vm", 2.0, 100, INF);
    let gold = node(&mut t, vm, "gold", 1.5, 100, INF);
    let default = node(&mut t, vm, "default", 0.0, 50, INF);
    let a = node(&mut t, gold, "a", 1.0, 50, INF);
    let b = node(&mut t, gold, "b", 0.0, 50, 1.5);
    let c = node(&mut t, default, "c", 0.0, 50, INF);
    let mut demand = vec![None; t.len()];
    demand[iscsi.0] = Some(0.0);
    let x = allocate(&t, 10.0 * G, &demand);
    let got: Vec<f64> = [vmotion, iscsi, vm, gold, default, a, b, c]
        .iter()
        .map(|&n| x.get(n) / G)
        .collect();
    close(&got, &[3.333, 0.0, 6.667, 4.944, 1.722, 3.444, 1.5, 1.722]);
}

#[test]
fn waterfill_caps_and_weights() {
    let w = waterfill(10.0, &[1.0, 1.0, 2.0], &[1.0, INF, INF]);
    close(&w, &[1.0, 3.0, 6.0]);
    close(&waterfill(10.0, &[1.0, 0.0], &[INF, INF]), &[10.0, 0.0]);
    close(&waterfill(10.0, &[1.0, 1.0], &[2.0, 3.0]), &[2.0, 3.0]);
}

#[test]
fn tv10_admission_at_75_percent() {
    let mut t = Tree::new("uplink");
    for (name, r) in [
        ("management", 1.0),
        ("iscsi", 1.0),
        ("fault-tolerance", 1.0),
        ("live-migration", 1.0),
        ("vm", 0.5),
    ] {
        node(&mut t, NodeId::ROOT, name, r, 50, INF);
    }
    let cap = ReservationCap::default();
    admit(&t, bw(10.0), cap).unwrap();
    let nfs = node(&mut t, NodeId::ROOT, "nfs", 0.0, 50, INF);
    let before = t.clone();
    let spec = |r| NodeSpec {
        name: "nfs".into(),
        reservation: bw(r),
        shares: Shares::NORMAL,
        limit: None,
    };
    let e = set_controls(&mut t, nfs, spec(3.5), bw(10.0), cap).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`nfs`: reservation 3.5Gbps does not fit: 3Gbps is free of 7.5Gbps (75% of uplink `uplink` (10Gbps))"
    );
    assert_eq!(t, before, "a refused change changes nothing");
    set_controls(&mut t, nfs, spec(3.0), bw(10.0), cap).unwrap();
    assert_eq!(t.node(nfs).spec.reservation, bw(3.0));
    // At a 100% cap 3.5 would fit.
    let mut t2 = before.clone();
    set_controls(&mut t2, nfs, spec(3.5), bw(10.0), ReservationCap::new(1.0).unwrap()).unwrap();
    assert!(ReservationCap::new(1.01).is_err() && ReservationCap::new(0.0).is_err());
}

#[test]
fn pools_fit_their_class_and_ports_their_pool() {
    let mut t = Tree::new("uplink");
    let vm = node(&mut t, NodeId::ROOT, "vm", 7.5, 100, INF);
    let pool = node(&mut t, vm, "pool", 7.5, 50, INF);
    let vm1 = node(&mut t, pool, "vm1", 0.0, 50, INF);
    let vm2 = node(&mut t, pool, "vm2", 0.0, 50, INF);
    let cap = ReservationCap::default();
    let spec = |n: &str, r| NodeSpec {
        name: n.into(),
        reservation: bw(r),
        shares: Shares::NORMAL,
        limit: None,
    };
    set_controls(&mut t, vm1, spec("vm1", 7.5), bw(10.0), cap).unwrap();
    // The NetIOC paper's step b: a 4.5G reservation for VM2 no longer fits on this host.
    let e = set_controls(&mut t, vm2, spec("vm2", 4.5), bw(10.0), cap).unwrap_err();
    assert!(
        matches!(&e, AdmissionError::DoesNotFit { node, free, .. } if node == "vm2" && *free == Bandwidth::ZERO),
        "{e}"
    );
    assert!(e.to_string().contains("the reservation of `pool`"), "{e}");
    assert_eq!(t.node(vm2).spec.reservation, Bandwidth::ZERO);
    // A pool cannot grow past its class, nor shrink under its ports.
    let e = set_controls(&mut t, pool, spec("pool", 8.0), bw(10.0), cap).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("`pool`: reservation 8Gbps does not fit: 7.5Gbps is free"),
        "{e}"
    );
    let e = set_controls(&mut t, pool, spec("pool", 5.0), bw(10.0), cap).unwrap_err();
    assert!(matches!(e, AdmissionError::BelowChildren { .. }), "{e}");
    // Limits below reservations are refused by the tree itself.
    let e = set_controls(
        &mut t,
        vm2,
        NodeSpec {
            limit: Some(bw(0.1)),
            ..spec("vm2", 0.2)
        },
        bw(10.0),
        cap,
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("limit 100Mbps is below the reservation 200Mbps"),
        "{e}"
    );
}

#[test]
fn shares_and_classes_parse() {
    assert_eq!("low".parse::<Shares>(), Ok(Shares::LOW));
    assert_eq!("high".parse::<Shares>().unwrap().get(), 100);
    assert_eq!("37".parse::<Shares>().unwrap().get(), 37);
    for bad in ["0", "101", "-5", "medium", "1.5"] {
        assert!(bad.parse::<Shares>().is_err(), "{bad}");
    }
    assert_eq!(
        "live-migration".parse::<TrafficClass>(),
        Ok(TrafficClass::LiveMigration)
    );
    assert!("vmotion"
        .parse::<TrafficClass>()
        .unwrap_err()
        .contains("expected one of management"));
    assert_eq!(TrafficClass::VirtualMachine.default_shares(), Shares::HIGH);
    assert_eq!(TrafficClass::Nfs.default_shares(), Shares::NORMAL);
    assert_eq!(TrafficClass::Storage.vsphere_name(), "vSAN Traffic");
}

#[test]
fn tree_files_build_and_report_bad_nodes() {
    let ok = r#"{"capacity": "9.4G", "nodes": [{"name": "vm", "reservation": "4.8G", "children": [{"name": "vm1", "shares": 50, "demand": "10G"}]}, {"name": "nfs", "shares": "normal", "limit": "2G", "demand": "10G"}]}"#;
    let f: spec::TreeFile = serde_json::from_str(ok).unwrap();
    let b = f.build().unwrap();
    let vm = b.tree.find("vm").unwrap();
    assert_eq!(
        b.tree.node(vm).spec.shares,
        Shares::HIGH,
        "the vm class defaults to high"
    );
    assert_eq!(b.demand[b.tree.find("nfs").unwrap().0], Some(10e9));
    let x = allocate(&b.tree, b.capacity.bps_f64(), &b.demand);
    // Excess 9.4 - 4.8 = 4.6G split 100 : 50 (nfs stays under its 2G limit).
    assert!((x.get(b.tree.find("nfs").unwrap()) - 4.6e9 / 3.0).abs() < 1.0);
    assert!((x.get(vm) - (4.8e9 + 4.6e9 * 2.0 / 3.0)).abs() < 1.0);

    let dup = r#"{"capacity": "1G", "nodes": [{"name": "a"}, {"name": "b", "children": [{"name": "a"}]}]}"#;
    let e = serde_json::from_str::<spec::TreeFile>(dup)
        .unwrap()
        .build()
        .unwrap_err();
    assert_eq!(e, "nodes[1].children[0] (`a`).name: `a` is used by another node");
    let low = r#"{"capacity": "1G", "nodes": [{"name": "a", "reservation": "500M", "limit": "100M"}]}"#;
    let e = serde_json::from_str::<spec::TreeFile>(low)
        .unwrap()
        .build()
        .unwrap_err();
    assert_eq!(e, "nodes[0] (`a`).limit: 100Mbps is below the reservation 500Mbps");
    assert!(
        serde_json::from_str::<spec::TreeFile>(r#"{"capacity": "1G", "nodes": [{"name": "a", "shares": 101}]}"#)
            .is_err()
    );
    assert!(serde_json::from_str::<spec::TreeFile>(r#"{"capacity": "-1G"}"#).is_err());
    assert!(serde_json::from_str::<spec::TreeFile>(r#"{"capacity": "1G", "colour": 1}"#).is_err());
}

// ---- properties over random trees ----

/// One random node: (parent index, 0 = root; reservation; shares; limit; demand), in Gbit/s.
type RandomNode = (usize, f64, u32, Option<f64>, Option<f64>);

/// A random tree: its capacity and nodes, parents before children.
#[derive(Debug, Clone)]
struct Random {
    cap: f64,
    nodes: Vec<RandomNode>,
}

fn random_tree() -> impl Strategy<Value = Random> {
    (
        0.5f64..40.0,
        proptest::collection::vec(
            (
                0usize..100,
                0.0f64..4.0,
                1u32..=100,
                proptest::option::of(0.0f64..10.0),
                proptest::option::of(0.0f64..12.0),
            ),
            1..14,
        ),
    )
        .prop_map(|(cap, raw)| {
            let nodes = raw
                .into_iter()
                .enumerate()
                .map(|(i, (p, r, s, l, d))| {
                    // Parent: the root or an earlier node; a limit never below the reservation.
                    let parent = if i == 0 { 0 } else { p % (i + 1) };
                    let r = if p % 3 == 0 { 0.0 } else { r };
                    (parent, r, s, l.map(|l| l + r), d)
                })
                .collect();
            Random { cap, nodes }
        })
}

fn build(r: &Random) -> (Tree, Vec<Option<f64>>) {
    let mut t = Tree::new("uplink");
    let mut demand = vec![None];
    // Demands sit on leaves; an inner node's demand is its children's.
    let is_parent = |i: usize| r.nodes.iter().any(|n| n.0 == i + 1);
    for (i, &(parent, res, s, l, d)) in r.nodes.iter().enumerate() {
        let d = if is_parent(i) { None } else { d };
        let spec = NodeSpec {
            name: format!("n{i}"),
            reservation: bw(res),
            shares: Shares::new(s).unwrap(),
            limit: l.map(bw),
        };
        t.add(NodeId(parent), spec).unwrap();
        demand.push(d.map(|d| d * G));
    }
    (t, demand)
}

/// Each node's top (the least of limit, demand and the children's tops), as the allocator sees it.
fn tops(t: &Tree, demand: &[Option<f64>]) -> Vec<f64> {
    let mut top = vec![INF; t.len()];
    for i in (0..t.len()).rev() {
        let n = t.node(NodeId(i));
        let mut v = n.spec.limit.map_or(INF, |l| l.bps_f64()).min(demand[i].unwrap_or(INF));
        if !n.children.is_empty() {
            v = v.min(n.children.iter().map(|c| top[c.0]).sum());
        }
        top[i] = v;
    }
    top
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn work_conserving_and_within_limit_and_demand(r in random_tree()) {
        let (t, demand) = build(&r);
        let x = allocate(&t, r.cap * G, &demand);
        let top = tops(&t, &demand);
        let eps = 1e-6 * G;
        prop_assert!((x.0[0] - (r.cap * G).min(top[0])).abs() < eps, "root {} vs {}", x.0[0], top[0]);
        for id in t.ids() {
            let n = t.node(id);
            prop_assert!(x.get(id) <= top[id.0] + eps, "{} over its top", n.spec.name);
            prop_assert!(x.get(id) >= -eps);
            if !n.children.is_empty() {
                let sum: f64 = n.children.iter().map(|c| x.get(*c)).sum();
                prop_assert!((sum - x.get(id)).abs() < eps, "{}: children {} vs {}", n.spec.name, sum, x.get(id));
            }
        }
    }

    #[test]
    fn reservations_are_met_when_they_fit(r in random_tree()) {
        // Make the reservations fit, top down: each node's children share at most its own
        // reservation (the root's: the capacity), scaled down in proportion if they exceed it.
        // Reservations are whole bits (rounded down), or rounding could break the fit by a bit.
        let mut r = r;
        let whole_bits = |g: f64| (g * G).floor() / G;
        r.nodes.iter_mut().for_each(|n| n.1 = whole_bits(n.1));
        for p in 0..=r.nodes.len() {
            let quota = if p == 0 { r.cap } else { r.nodes[p - 1].1 };
            let sum: f64 = r.nodes.iter().filter(|n| n.0 == p).map(|n| n.1).sum();
            if sum > quota {
                r.nodes
                    .iter_mut()
                    .filter(|n| n.0 == p)
                    .for_each(|n| n.1 = whole_bits(n.1 * quota / sum * 0.999_999));
            }
        }
        let (t, demand) = build(&r);
        prop_assert!(admit(&t, bw(r.cap), ReservationCap::new(1.0).unwrap()).is_ok());
        let x = allocate(&t, r.cap * G, &demand);
        let top = tops(&t, &demand);
        for id in t.ids().skip(1) {
            let want = t.node(id).spec.reservation.bps_f64().min(top[id.0]);
            prop_assert!(x.get(id) >= want - 1e-6 * G, "{}: {} < {}", t.node(id).spec.name, x.get(id), want);
        }
    }

    #[test]
    fn monotone_in_capacity(r in random_tree(), more in 0.0f64..20.0) {
        let (t, demand) = build(&r);
        let a = allocate(&t, r.cap * G, &demand);
        let b = allocate(&t, (r.cap + more) * G, &demand);
        for id in t.ids() {
            prop_assert!(b.get(id) >= a.get(id) - 1e-6 * G, "{} fell from {} to {}", t.node(id).spec.name, a.get(id), b.get(id));
        }
    }
}
