use super::*;
use crate::ioc::{NodeSpec, Shares};
use crate::units::Bandwidth;
use proptest::prelude::*;

fn spec(name: &str, r_mbit: u64, shares: u32, limit_mbit: Option<u64>) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        reservation: Bandwidth::from_mbps(r_mbit),
        shares: Shares::new(shares).unwrap(),
        limit: limit_mbit.map(Bandwidth::from_mbps),
    }
}

/// The live test's tree: `vm` (60M) holding vm1 (60M), vm2 (limit 10M) and vm3, beside an
/// idle `management` class.
fn three_vms() -> (Tree, Vec<NodeId>) {
    let mut t = Tree::new("uplink");
    t.add(NodeId::ROOT, spec("management", 10, 50, None)).unwrap();
    let vm = t.add(NodeId::ROOT, spec("vm", 60, 50, None)).unwrap();
    let leaves = vec![
        t.add(vm, spec("vm1", 60, 50, None)).unwrap(),
        t.add(vm, spec("vm2", 0, 50, Some(10))).unwrap(),
        t.add(vm, spec("vm3", 0, 50, None)).unwrap(),
    ];
    (t, leaves)
}

const MBYTE: u64 = 1_000_000 / 8;

#[test]
fn the_rates_are_the_fluid_allocation_with_every_port_greedy() {
    let (t, leaves) = three_vms();
    let mut ids = ClassIds::default();
    let p = plan(&t, &leaves, 100e6, &|_| 1.0, &mut ids).unwrap();
    let rate = |n: &str| p.class(ids.get(n).unwrap()).unwrap().rate;
    // 75 / 10 / 15 Mbit/s less the floors (a few kB/s).
    for (n, mbit) in [("vm1", 75), ("vm2", 10), ("vm3", 15)] {
        let want = mbit * MBYTE;
        assert!(
            rate(n).abs_diff(want) < 5_000,
            "{n}: {} B/s, want about {want}",
            rate(n)
        );
    }
    assert_eq!(rate("vm"), rate("vm1") + rate("vm2") + rate("vm3"));
    assert!(
        ids.get("management").is_none(),
        "a class without ports gets no HTB class"
    );
    let vm2 = p.class(ids.get("vm2").unwrap()).unwrap();
    assert_eq!(vm2.ceil, 10 * MBYTE, "a limit is the ceil");
    let root = p.class(ROOT).unwrap();
    assert_eq!((root.rate, root.ceil, root.parent), (100 * MBYTE, 100 * MBYTE, 0));
    let default = p.class(UNCLASSIFIED).unwrap();
    assert_eq!((default.parent, default.ceil), (ROOT, 100 * MBYTE));
    let leaf_sum: u64 = p.classes.iter().filter(|c| c.queue.is_some()).map(|c| c.rate).sum();
    assert!(leaf_sum <= root.rate, "{leaf_sum} > {}", root.rate);
}

#[test]
fn quanta_carry_the_whole_paths_shares() {
    // Two pools of shares 100 and 25 under one class; the first holds two ports of equal
    // shares, the second one: path weights 0.4, 0.4, 0.2.
    let mut t = Tree::new("uplink");
    let vm = t.add(NodeId::ROOT, spec("vm", 0, 50, None)).unwrap();
    let a = t.add(vm, spec("a", 0, 100, None)).unwrap();
    let b = t.add(vm, spec("b", 0, 25, None)).unwrap();
    let leaves = vec![
        t.add(a, spec("a1", 0, 50, None)).unwrap(),
        t.add(a, spec("a2", 0, 50, None)).unwrap(),
        t.add(b, spec("b1", 0, 50, None)).unwrap(),
    ];
    let mut ids = ClassIds::default();
    let p = plan(&t, &leaves, 1e9, &|_| 1.0, &mut ids).unwrap();
    let q = |n: &str| p.class(ids.get(n).unwrap()).unwrap().quantum;
    assert_eq!((q("a1"), q("a2"), q("b1")), (MAX_QUANTUM, MAX_QUANTUM, MAX_QUANTUM / 2));
    assert_eq!(q("a"), 0, "an inner class's quantum is not sent");
    // The rates follow the same shares: 400 / 400 / 200 Mbit/s.
    let r = |n: &str| p.class(ids.get(n).unwrap()).unwrap().rate as f64 / MBYTE as f64;
    assert!(
        (r("a1") - 400.0).abs() < 0.1 && (r("b1") - 200.0).abs() < 0.1,
        "{} {}",
        r("a1"),
        r("b1")
    );
    assert!(needs_shaping(&t, &leaves));
}

#[test]
fn plain_trees_need_no_shaping() {
    let mut t = Tree::new("uplink");
    t.add(NodeId::ROOT, spec("management", 10, 100, None)).unwrap();
    let vm = t.add(NodeId::ROOT, spec("vm", 0, 50, None)).unwrap();
    let leaves = vec![
        t.add(vm, spec("p1", 0, 50, None)).unwrap(),
        t.add(vm, spec("p2", 0, 50, None)).unwrap(),
    ];
    assert!(
        !needs_shaping(&t, &leaves),
        "the idle class's reservation and shares ask nothing of the ports"
    );
    let mut limited = t.clone();
    let p2 = limited.find("p2").unwrap();
    limited.set_controls(p2, spec("p2", 0, 50, Some(5))).unwrap();
    assert!(needs_shaping(&limited, &leaves));
    let mut uneven = t.clone();
    uneven.set_controls(p2, spec("p2", 0, 100, None)).unwrap();
    assert!(needs_shaping(&uneven, &leaves));
    let mut reserved = t;
    reserved.set_controls(vm, spec("vm", 1, 50, None)).unwrap();
    assert!(needs_shaping(&reserved, &leaves));
}

#[test]
fn a_spread_ports_limit_is_split_and_a_tiny_one_still_covers_the_rate() {
    let (t, leaves) = three_vms();
    let mut ids = ClassIds::default();
    let p = plan(&t, &leaves, 100e6, &|_| 0.5, &mut ids).unwrap();
    assert_eq!(p.class(ids.get("vm2").unwrap()).unwrap().ceil, 5 * MBYTE);
    for c in &p.classes {
        assert!(c.rate >= 1 && c.ceil >= c.rate, "{c:?}");
        assert!(c.burst >= 3036 && c.cburst >= 3036, "{c:?}");
    }
}

#[test]
fn queues_hold_five_milliseconds_and_at_least_a_super_frame() {
    assert_eq!(leaf_queue(1_250_000_000), 6_250_000, "5 ms at 10 Gbit/s");
    assert_eq!(
        leaf_queue(1_250_000),
        SUPER_FRAME + 3036,
        "at 10 Mbit/s: one super-frame"
    );
}

#[test]
fn class_ids_are_stable_and_freed_with_their_node() {
    let (mut t, mut leaves) = three_vms();
    let mut ids = ClassIds::default();
    let first = plan(&t, &leaves, 100e6, &|_| 1.0, &mut ids).unwrap();
    let vm3 = ids.get("vm3").unwrap();
    // vm2 goes (its port detached): its minor is freed, the others keep theirs.
    leaves.retain(|l| t.node(*l).spec.name != "vm2");
    let second = plan(&t, &leaves, 100e6, &|_| 1.0, &mut ids).unwrap();
    assert_eq!(ids.get("vm3"), Some(vm3));
    assert!(ids.get("vm2").is_none());
    let ops = diff(&first, &second);
    let vm2 = first.classes.iter().find(|c| c.name == "vm2").unwrap().minor;
    assert_eq!(ops.first(), Some(&Op::Delete(vm2)), "{ops:?}");
    assert!(ops.iter().all(|o| !matches!(o, Op::Create(_))), "{ops:?}");
    // A new port takes the lowest free minor, vm2's.
    let vm = t.find("vm").unwrap();
    leaves.push(t.add(vm, spec("vm4", 0, 50, None)).unwrap());
    plan(&t, &leaves, 100e6, &|_| 1.0, &mut ids).unwrap();
    assert_eq!(ids.get("vm4"), Some(vm2));
}

#[test]
fn the_diff_deletes_children_first_and_creates_parents_first() {
    let (t, leaves) = three_vms();
    let mut ids = ClassIds::default();
    let full = plan(&t, &leaves, 100e6, &|_| 1.0, &mut ids).unwrap();
    let create = diff(&UplinkPlan::default(), &full);
    assert_eq!(create.len(), full.classes.len());
    let order: Vec<u16> = create
        .iter()
        .map(|o| match o {
            Op::Create(c) => c.minor,
            other => panic!("{other:?}"),
        })
        .collect();
    for (k, c) in full.classes.iter().enumerate() {
        let parent_at = order.iter().position(|m| *m == c.parent);
        assert!(
            c.parent == 0 || parent_at.is_some_and(|p| p < k),
            "{c:?} before its parent"
        );
    }
    let gone = diff(&full, &UplinkPlan::default());
    let deleted: Vec<u16> = gone
        .iter()
        .map(|o| match o {
            Op::Delete(m) => *m,
            other => panic!("{other:?}"),
        })
        .collect();
    let vm = ids.get("vm").unwrap();
    let pos = |m: u16| deleted.iter().position(|d| *d == m).unwrap();
    assert!(pos(ids.get("vm1").unwrap()) < pos(vm) && pos(vm) < pos(ROOT));
    assert!(diff(&full, &full).is_empty());
}

#[test]
fn a_class_that_changes_parent_is_created_again_with_its_children() {
    let mut old = UplinkPlan::default();
    let class = |minor: u16, parent: u16| HtbClass {
        name: format!("n{minor}"),
        minor,
        parent,
        rate: 1000,
        ceil: 1000,
        quantum: 0,
        burst: 3036,
        cburst: 3036,
        queue: None,
    };
    old.classes = vec![class(1, 0), class(2, 1), class(3, 2), class(4, 3), class(5, 1)];
    let mut new = old.clone();
    new.classes[2].parent = 5;
    let ops = diff(&old, &new);
    assert_eq!(
        ops,
        vec![
            Op::Delete(4),
            Op::Delete(3),
            Op::Create(new.classes[2].clone()),
            Op::Create(new.classes[3].clone())
        ]
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// Random trees: each port's rate is its greedy allocation (less a floor), every inner
    /// class's is its children's sum, rates add up to at most the capacity, every ceil covers
    /// its rate and sits under its parent's, and the minors are unique.
    #[test]
    fn plans_keep_htbs_invariants(raw in proptest::collection::vec((0usize..100, 0u8..100, 1u32..=100, proptest::option::of(1u8..100), any::<bool>()), 1..30), gbit in 1u64..40) {
        let cap = gbit as f64 * 1e9;
        let mut t = Tree::new("uplink");
        for (i, &(parent, r, s, l, _)) in raw.iter().enumerate() {
            // Small reservations so that most trees pass admission; some do not, and the
            // allocation scales them.
            let r = if r < 60 { 0 } else { u64::from(r - 60) * gbit * 5 };
            let l = l.map(|l| r + u64::from(l) * gbit * 10);
            t.add(NodeId(parent % (i + 1)), spec(&format!("n{i}"), r, s, l)).unwrap();
        }
        let leaves: Vec<NodeId> = t
            .ids()
            .skip(1)
            .filter(|id| t.node(*id).children.is_empty() && raw[id.0 - 1].4)
            .collect();
        let mut ids = ClassIds::default();
        let p = plan(&t, &leaves, cap, &|_| 1.0, &mut ids).unwrap();
        let capacity = (cap / 8.0) as u64;
        let fl = floor(capacity, p.classes.len());
        let mut seen = BTreeSet::new();
        for c in &p.classes {
            prop_assert!(seen.insert(c.minor), "minor {} twice", c.minor);
            prop_assert!(c.rate >= 1 && c.ceil >= c.rate, "{:?}", c);
            if c.parent != 0 {
                let parent = p.class(c.parent).expect("parents exist");
                prop_assert!(c.ceil <= parent.ceil.max(c.rate), "{:?} over its parent", c);
                let kids: u64 = p.classes.iter().filter(|k| k.parent == c.minor).map(|k| k.rate).sum();
                if c.queue.is_none() && c.minor != ROOT {
                    prop_assert_eq!(c.rate, kids.max(fl));
                }
            }
        }
        let leaf_sum: u64 = p.classes.iter().filter(|c| c.queue.is_some()).map(|c| c.rate).sum();
        prop_assert!(leaf_sum <= capacity.max(fl * p.classes.len() as u64), "{} > {}", leaf_sum, capacity);
        let demand: Vec<Option<f64>> = t
            .ids()
            .map(|id| (!leaves.contains(&id) && t.node(id).children.is_empty()).then_some(0.0))
            .collect();
        let alloc = allocate(&t, cap, &demand);
        for l in &leaves {
            let c = p.class(ids.get(&t.node(*l).spec.name).unwrap()).unwrap();
            let want = alloc.get(*l) / 8.0;
            // Off by at most the floors taken off the whole capacity.
            let slack = (fl * (leaves.len() as u64 + 2)) as f64 + 1.0;
            prop_assert!((c.rate as f64 - want).abs() <= slack, "{}: {} B/s, allocation {want}", c.name, c.rate);
        }
        prop_assert_eq!(diff(&p, &p), vec![]);
        prop_assert_eq!(plan(&t, &leaves, cap, &|_| 1.0, &mut ids).unwrap(), p);
    }
}
