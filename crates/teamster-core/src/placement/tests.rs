use super::*;
use proptest::prelude::*;

/// A host of one 10G uplink (75% cap) whose VM traffic class reserves `class` for its VMs.
fn tree(class: Bandwidth) -> Tree {
    let mut t = Tree::new("uplink");
    let spec = NodeSpec {
        name: "vm".into(),
        reservation: class,
        shares: Shares::NORMAL,
        limit: None,
    };
    t.add(NodeId::ROOT, spec).unwrap();
    t
}

fn vm(name: &str, reservation: Bandwidth) -> Vm {
    Vm {
        name: name.into(),
        vnics: vec![Vnic {
            pool: "vm".into(),
            reservation,
            shares: Shares::NORMAL,
            limit: None,
        }],
    }
}

fn fig2_cluster() -> Cluster {
    let mut c = Cluster::default();
    for h in ["host1", "host2"] {
        let t = tree(Bandwidth::from_mbps(7500));
        c.add_host(h, t, Bandwidth::from_gbps(10), ReservationCap::default())
            .unwrap();
    }
    c.set_quota("vm", Bandwidth::from_gbps(15));
    c
}

/// The NetIOC seed's Figure 2 on two hosts: VM1 reserves 7.5G on host 1; VM2's 4.5G does not
/// fit there (the class holds 75% of the uplink) and goes to host 2; VM3's 3G fits only on
/// host 2; a fourth VM fits nowhere, and the refusal says why for each host.
#[test]
fn figure_2_places_each_vm_where_its_reservation_fits() {
    let mut c = fig2_cluster();
    c.place_on(vm("vm1", Bandwidth::from_mbps(7500)), "host1").unwrap();
    let vm2 = vm("vm2", Bandwidth::from_mbps(4500));
    let host1 = c.host("host1").unwrap().admits(&vm2);
    assert!(host1.as_ref().unwrap_err().contains("vm2"), "{host1:?}");
    let p = c.place(vm2).unwrap();
    assert_eq!(p.host, "host2");
    // Host 2 has the more room, so it is the only one placement had to look at.
    assert_eq!(
        p.considered,
        vec![("host2".to_string(), Ok(Bandwidth::from_mbps(3000)))]
    );
    assert_eq!(p.headroom, Bandwidth::from_mbps(3000));
    let p = c.place(vm("vm3", Bandwidth::from_gbps(3))).unwrap();
    assert_eq!((p.host.as_str(), p.headroom), ("host2", Bandwidth::ZERO));
    let e = c.place(vm("vm4", Bandwidth::from_mbps(100))).unwrap_err();
    assert!(e.to_string().contains("pool `vm`"), "the cluster quota is spent: {e}");
    c.set_quota("vm", Bandwidth::from_gbps(20));
    let e = c.place(vm("vm4", Bandwidth::from_mbps(100))).unwrap_err();
    assert_eq!(e.reasons.len(), 2, "{e}");
    assert!(
        e.to_string().contains("host1: ") && e.to_string().contains("host2: "),
        "{e}"
    );
    assert_eq!(c.host_of("vm3"), Some("host2"));
    assert!(c.place(vm("vm3", Bandwidth::ZERO)).is_err(), "a VM is placed once");
}

#[test]
fn a_vm_goes_where_the_most_headroom_is_left() {
    let mut c = fig2_cluster();
    c.place_on(vm("a", Bandwidth::from_gbps(2)), "host2").unwrap();
    assert_eq!(c.place(vm("b", Bandwidth::from_gbps(1))).unwrap().host, "host1");
    assert_eq!(c.place(vm("c", Bandwidth::from_gbps(1))).unwrap().host, "host1");
    // Equal headroom: the host with fewer VMs, then the first by name.
    assert_eq!(c.place(vm("d", Bandwidth::ZERO)).unwrap().host, "host2");
    let e = c.place_on(vm("e", Bandwidth::from_gbps(9)), "host1").unwrap_err();
    assert!(e.contains("e#0"), "{e}");
    assert!(c.place_on(vm("f", Bandwidth::ZERO), "host9").is_err());
    let mut missing = vm("g", Bandwidth::ZERO);
    missing.vnics[0].pool = "nfs".into();
    let e = c.place(missing).unwrap_err();
    assert!(e.to_string().contains("no pool `nfs`"), "{e}");
}

/// With derived nodes (the class and the pool reserve what their VMs reserve, as the bundled
/// scenarios and the controller configure them), headroom is what the root could still give:
/// a new VM goes to the host with the most of it, not the one with fewer VMs.
#[test]
fn headroom_with_derived_nodes_is_what_the_root_could_still_give() {
    let mut c = Cluster::default();
    for h in ["host1", "host2"] {
        let mut t = tree(Bandwidth::ZERO);
        let vm_class = t.find("vm").unwrap();
        let spec = NodeSpec {
            name: "vm-pool".into(),
            reservation: Bandwidth::ZERO,
            shares: Shares::NORMAL,
            limit: None,
        };
        t.add(vm_class, spec).unwrap();
        c.add_host(h, t, Bandwidth::from_gbps(10), ReservationCap::default())
            .unwrap();
        c.derive(h, "vm").unwrap();
        c.derive(h, "vm-pool").unwrap();
    }
    let in_pool = |name: &str, mbps: u64| {
        let mut v = vm(name, Bandwidth::from_mbps(mbps));
        v.vnics[0].pool = "vm-pool".into();
        v
    };
    // host1: one VM holding 6.5G of the 7.5G the cap allows; host2: two VMs holding 0.5G.
    c.place_on(in_pool("big", 6500), "host1").unwrap();
    c.place_on(in_pool("s1", 250), "host2").unwrap();
    c.place_on(in_pool("s2", 250), "host2").unwrap();
    assert_eq!(
        c.host("host1").unwrap().headroom_with(&[]).unwrap(),
        Bandwidth::from_mbps(1000)
    );
    assert_eq!(
        c.host("host2").unwrap().headroom_with(&[]).unwrap(),
        Bandwidth::from_mbps(7000)
    );
    let placed = c.place(in_pool("new", 100)).unwrap();
    assert_eq!(placed.host, "host2", "{placed:?}");
    assert_eq!(placed.headroom, Bandwidth::from_mbps(6900));
    // A VM only host2 can hold still goes there; one neither can is refused.
    assert_eq!(c.place(in_pool("wide", 5000)).unwrap().host, "host2");
    assert!(c.place(in_pool("huge", 7000)).is_err());
}

/// A host marked unavailable (it stopped reporting) keeps its VMs and receives none: not by
/// placement, even with the most headroom, not by hand, not by a migration, not by remediation.
#[test]
fn an_unavailable_host_receives_no_vm() {
    let mut c = fig2_cluster();
    c.place_on(vm("a", Bandwidth::from_gbps(5)), "host1").unwrap();
    c.set_unavailable("host2", Some("not responding".into())).unwrap();
    assert!(c.set_unavailable("host9", None).is_err());
    let placed = c.place(vm("b", Bandwidth::from_gbps(1))).unwrap();
    assert_eq!(placed.host, "host1");
    assert!(placed.considered.iter().all(|(h, _)| h != "host2"), "{placed:?}");
    let b = vm("b2", Bandwidth::from_gbps(1));
    assert_eq!(c.host("host2").unwrap().admits(&b), Err("not responding".to_string()));
    let e = c.place_on(vm("c", Bandwidth::ZERO), "host2").unwrap_err();
    assert!(e.contains("not responding"), "{e}");
    let e = c.migrate("a", "host2").unwrap_err();
    assert!(e.contains("not responding"), "{e}");
    // host1 over its admission: the only other host is unavailable, so it stays a fault.
    c.set_reservation("a", 0, Bandwidth::from_gbps(7)).unwrap();
    let remedy = c.remediate();
    assert!(remedy.migrations.is_empty(), "{:?}", remedy.migrations);
    assert_eq!(remedy.faults.len(), 1);
    // host1 unavailable and over its admission, host2 available: host1's VMs are not moved
    // (it may still be forwarding for them).
    c.set_unavailable("host2", None).unwrap();
    c.set_unavailable("host1", Some("silent".into())).unwrap();
    let remedy = c.remediate();
    assert!(remedy.migrations.is_empty(), "{remedy:?}");
    assert!(
        remedy.faults[0].why.contains("not moved while it is unavailable"),
        "{remedy:?}"
    );
    c.set_unavailable("host1", None).unwrap();
    // Available again: remediation moves a VM there.
    c.set_unavailable("host2", None).unwrap();
    let remedy = c.remediate();
    assert_eq!(remedy.migrations.len(), 1, "{remedy:?}");
    assert_eq!(remedy.migrations[0].to, "host2");
}

/// A closed host (heard again after a failure, held down) receives no VM, but unlike an
/// unavailable one its own VMs may be moved off it when it is over its admission.
#[test]
fn a_closed_host_receives_no_vm_but_may_lose_its_own() {
    let mut c = fig2_cluster();
    c.place_on(vm("a", Bandwidth::from_gbps(5)), "host1").unwrap();
    c.set_closed("host2", Some("held down".into())).unwrap();
    let placed = c.place(vm("b", Bandwidth::from_gbps(1))).unwrap();
    assert_eq!(placed.host, "host1", "host2 has the most headroom, and is closed");
    assert!(c.migrate("a", "host2").unwrap_err().contains("held down"));
    c.set_closed("host2", None).unwrap();
    c.set_closed("host1", Some("held down".into())).unwrap();
    c.set_reservation("a", 0, Bandwidth::from_gbps(7)).unwrap();
    let remedy = c.remediate();
    assert_eq!(remedy.migrations.len(), 1, "{remedy:?}");
    assert_eq!(remedy.migrations[0].from, "host1");
}

proptest! {
    /// Whatever the hosts and VMs, every VM placed passes admission on its host with all the
    /// others there, the pool's quota holds, and the same input gives the same placement.
    #[test]
    fn every_placement_passes_admission_and_is_deterministic(
        hosts in prop::collection::vec(1u64..=40, 1..6),
        vms in prop::collection::vec(0u64..=40, 0..40),
        quota in 1u64..=400,
    ) {
        let build = || {
            let mut c = Cluster::default();
            for (i, g) in hosts.iter().enumerate() {
                let class = Bandwidth::from_mbps(g * 1000 * 3 / 4);
                let t = tree(class);
                c.add_host(&format!("h{i}"), t, Bandwidth::from_gbps(*g), ReservationCap::default()).unwrap();
            }
            c.set_quota("vm", Bandwidth::from_gbps(quota));
            let placed: Vec<Option<String>> = vms
                .iter()
                .enumerate()
                .map(|(i, r)| c.place(vm(&format!("v{i}"), Bandwidth::from_mbps(r * 250))).ok().map(|p| p.host))
                .collect();
            (c, placed)
        };
        let (c, placed) = build();
        for h in c.hosts() {
            prop_assert!(h.headroom_with(&[]).is_ok(), "host {} over its admission", h.name);
        }
        let total: u64 = c.hosts().flat_map(|h| &h.vms).map(|v| v.reservation().bps()).sum();
        prop_assert!(total <= Bandwidth::from_gbps(quota).bps());
        prop_assert_eq!(placed, build().1);
    }
}

/// Figure 2 as DRS plays it: three VMs on host 1 with no reservation; VM1 reserves 7.5G
/// (fits); VM2's 4.5G breaks host 1's admission and VM2 alone moves to host 2; VM3's 3G breaks
/// it again and VM3 moves to host 2 as well, which then holds 4.5 + 3 = 7.5G.
#[test]
fn figure_2_remediation_moves_vm2_then_vm3() {
    let mut c = fig2_cluster();
    for v in ["vm1", "vm2", "vm3"] {
        c.place_on(vm(v, Bandwidth::ZERO), "host1").unwrap();
    }
    c.set_reservation("vm1", 0, Bandwidth::from_mbps(7500)).unwrap();
    assert_eq!(c.remediate(), Remedy::default(), "fits: nothing moves");
    c.set_reservation("vm2", 0, Bandwidth::from_mbps(4500)).unwrap();
    assert_eq!(c.violations(), ["host1"]);
    let r = c.remediate();
    let moves: Vec<_> = r.migrations.iter().map(|m| (m.vm.as_str(), m.to.as_str())).collect();
    assert_eq!((moves, r.faults.len()), (vec![("vm2", "host2")], 0));
    c.set_reservation("vm3", 0, Bandwidth::from_gbps(3)).unwrap();
    let r = c.remediate();
    let moves: Vec<_> = r.migrations.iter().map(|m| (m.vm.as_str(), m.to.as_str())).collect();
    assert_eq!(moves, vec![("vm3", "host2")]);
    assert!(c.violations().is_empty());
    // A quota the change would break is refused, and nothing changes.
    let e = c.set_reservation("vm1", 0, Bandwidth::from_gbps(9)).unwrap_err();
    assert!(e.contains("pool `vm`"), "{e}");
    assert!(c.set_reservation("nobody", 0, Bandwidth::ZERO).is_err());
    assert!(c.set_reservation("vm1", 3, Bandwidth::ZERO).is_err());
    // Host 2 loses half its uplink: nowhere can take 7.5G more: a fault naming the host.
    c.set_capacity("host2", Bandwidth::from_gbps(5)).unwrap();
    let r = c.remediate();
    assert_eq!(r.faults.len(), 1, "{r:?}");
    assert_eq!(r.faults[0].host, "host2");
}

proptest! {
    /// Whatever the cluster and the changes, remediation never leaves more hosts violating
    /// than before, never makes a host that admitted its VMs violate, and mends every host it
    /// reports no fault for.
    #[test]
    fn remediation_never_makes_things_worse(
        hosts in prop::collection::vec(4u64..=40, 2..6),
        vms in prop::collection::vec(0u64..=20, 0..30),
        changes in prop::collection::vec((any::<prop::sample::Index>(), 0u64..=40), 0..8),
        shrink in any::<Option<(prop::sample::Index, u64)>>(),
    ) {
        let mut c = Cluster::default();
        for (i, g) in hosts.iter().enumerate() {
            let t = tree(Bandwidth::from_mbps(g * 750));
            c.add_host(&format!("h{i}"), t, Bandwidth::from_gbps(*g), ReservationCap::default()).unwrap();
        }
        let mut names = Vec::new();
        for (i, r) in vms.iter().enumerate() {
            let name = format!("v{i}");
            if c.place(vm(&name, Bandwidth::from_mbps(r * 250))).is_ok() {
                names.push(name);
            }
        }
        if !names.is_empty() {
            for (pick, r) in &changes {
                let _ = c.set_reservation(&names[pick.index(names.len())], 0, Bandwidth::from_mbps(r * 250));
            }
        }
        if let Some((pick, g)) = shrink {
            let h = format!("h{}", pick.index(hosts.len()));
            c.set_capacity(&h, Bandwidth::from_gbps(g % 40 + 1)).unwrap();
        }
        let before = c.violations();
        let violated = c.violated_reservations();
        let fine: Vec<String> = c.hosts().map(|h| h.name.clone()).filter(|h| !before.contains(h)).collect();
        let r = c.remediate();
        let after = c.violations();
        prop_assert!(after.len() <= before.len(), "{before:?} -> {after:?}");
        prop_assert!(c.violated_reservations() <= violated, "more reservations violated");
        for h in &fine {
            prop_assert!(!after.contains(h), "{h} admitted its VMs before and not after");
        }
        for h in &after {
            prop_assert!(r.faults.iter().any(|f| &f.host == h), "{h} violates without a fault");
        }
        prop_assert_eq!(c.hosts().map(|h| h.vms.len()).sum::<usize>(), names.len(), "no VM lost or doubled");
    }
}

/// A host whose VM class is derived (it reserves what its VMs reserve), so the uplink's 75%
/// cap is what binds, on an uplink of `gbps`.
fn derived_cluster(gbps: &[u64]) -> Cluster {
    let mut c = Cluster::default();
    for (i, g) in gbps.iter().enumerate() {
        let h = format!("host{}", i + 1);
        c.add_host(
            &h,
            tree(Bandwidth::ZERO),
            Bandwidth::from_gbps(*g),
            ReservationCap::default(),
        )
        .unwrap();
        c.derive(&h, "vm").unwrap();
    }
    c
}

/// A derived class is refused for the uplink's cap, and names it; a derived node that is not
/// there is an error.
#[test]
fn a_derived_class_reserves_what_its_vms_do() {
    let mut c = derived_cluster(&[10]);
    c.place_on(vm("vm1", Bandwidth::from_mbps(7500)), "host1").unwrap();
    let e = c.place_on(vm("vm2", Bandwidth::from_mbps(4500)), "host1").unwrap_err();
    assert!(e.contains("75% of uplink"), "{e}");
    let tree = c.host("host1").unwrap().tree_with(&[]).unwrap();
    let class = tree.node(tree.find("vm").unwrap());
    assert_eq!(class.spec.reservation, Bandwidth::from_mbps(7500));
    assert!(c.derive("host1", "nfs").is_err() && c.derive("host9", "vm").is_err());
    assert!(c.derive("host1", "uplink").is_err(), "the root is the uplink");
}

/// No one VM is enough: remediation moves the two whose reservations total least (3G + 2G),
/// where greedy moving the largest first would move 4G + 2G.
#[test]
fn remediation_moves_the_fewest_vms_then_the_least_bandwidth() {
    let mut c = derived_cluster(&[12, 12]);
    for (v, g) in [("a", 4), ("b", 3), ("c", 2)] {
        c.place_on(vm(v, Bandwidth::from_gbps(g)), "host1").unwrap();
    }
    c.set_capacity("host1", Bandwidth::from_gbps(6)).unwrap();
    assert_eq!(c.violated_reservations(), 3);
    let r = c.remediate();
    let mut moved: Vec<_> = r.migrations.iter().map(|m| (m.vm.as_str(), m.to.as_str())).collect();
    moved.sort();
    assert_eq!(moved, [("b", "host2"), ("c", "host2")], "{r:?}");
    assert_eq!((c.violated_reservations(), r.faults.len()), (0, 0));
}

#[test]
fn subsets_are_enumerated_once_each() {
    let mut seen = Vec::new();
    super::remediate::for_each_subset(5, 3, &mut |s| seen.push(s.to_vec()));
    assert_eq!(seen.len(), 10);
    assert_eq!((seen[0].clone(), seen[9].clone()), (vec![0, 1, 2], vec![2, 3, 4]));
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, seen);
    assert_eq!(super::remediate::binomial(31, 3), 4495);
}

#[test]
fn a_migration_by_hand_is_refused_where_the_vm_does_not_fit() {
    let mut c = fig2_cluster();
    c.place_on(vm("vm1", Bandwidth::from_mbps(7500)), "host1").unwrap();
    c.place_on(vm("vm2", Bandwidth::from_gbps(1)), "host2").unwrap();
    let e = c.migrate("vm2", "host1").unwrap_err();
    assert!(e.contains("host1 does not admit vm2"), "{e}");
    assert!(c.migrate("vm2", "host2").is_err() && c.migrate("vm2", "host9").is_err());
    assert!(c.migrate("nobody", "host1").is_err());
    assert_eq!(c.host_of("vm2"), Some("host2"), "a refusal changes nothing");
    assert!(c.migrate("vm1", "host2").is_err(), "1G + 7.5G is over host 2's 7.5G");
    c.set_reservation("vm2", 0, Bandwidth::ZERO).unwrap();
    let m = c.migrate("vm1", "host2").unwrap();
    assert_eq!((m.from.as_str(), m.reservation), ("host1", Bandwidth::from_mbps(7500)));
    let vms = c.remove_host("host2").unwrap();
    assert_eq!(vms.len(), 2);
    assert!(c.host("host2").is_none() && c.host_of("vm1").is_none());
}

/// A VM no host can hold stays where it is: remediation does not empty its host for nothing.
#[test]
fn a_host_that_cannot_be_mended_keeps_its_vms() {
    let mut c = derived_cluster(&[10, 10]);
    for (v, g) in [("a", 2), ("b", 2), ("big", 3)] {
        c.place_on(vm(v, Bandwidth::from_gbps(g)), "host1").unwrap();
    }
    c.set_reservation("big", 0, Bandwidth::from_gbps(9)).unwrap();
    let r = c.remediate();
    assert!(r.migrations.is_empty(), "{r:?}");
    assert_eq!(r.faults.len(), 1);
    assert_eq!(c.host("host1").unwrap().vms.len(), 3);
    let mut capped = vm("capped", Bandwidth::ZERO);
    capped.vnics[0].limit = Some(Bandwidth::from_gbps(1));
    c.place_on(capped, "host2").unwrap();
    let e = c.set_reservation("capped", 0, Bandwidth::from_gbps(2)).unwrap_err();
    assert!(e.contains("above its limit"), "{e}");
}

/// A host of the test below: a 10G or 25G uplink, two classes (`vm` reserving `class_mbps`,
/// `infra` 1G) and a pool `gold` under `vm` reserving `pool_mbps`; `derived` picks which of
/// `vm` and `gold` are derived, `limits` their limits.
fn standing_host(
    class_mbps: u64,
    pool_mbps: u64,
    derived: u8,
    big: bool,
    limits: (Option<u64>, Option<u64>),
) -> Cluster {
    let mut t = Tree::new("uplink");
    let spec = |name: &str, mbps: u64, limit: Option<u64>| NodeSpec {
        name: name.into(),
        reservation: Bandwidth::from_mbps(mbps),
        shares: Shares::NORMAL,
        // A limit below the reservation is not a tree the host would have.
        limit: limit.map(|l| Bandwidth::from_mbps(l.max(mbps))),
    };
    let vm = t.add(NodeId::ROOT, spec("vm", class_mbps, limits.0)).unwrap();
    t.add(NodeId::ROOT, spec("infra", 1000, None)).unwrap();
    t.add(vm, spec("gold", pool_mbps, limits.1)).unwrap();
    let capacity = Bandwidth::from_gbps(if big { 25 } else { 10 });
    let mut c = Cluster::default();
    c.add_host("h", t, capacity, ReservationCap::default()).unwrap();
    for (bit, node) in [(1, "vm"), (2, "gold")] {
        if derived & bit != 0 {
            c.derive("h", node).unwrap();
        }
    }
    c
}

/// Host `name` of [`standing_host`]'s shape, added to `c`.
fn add_standing_host(c: &mut Cluster, name: &str, (class_mbps, pool_mbps, derived, big, limits): HostDraw) {
    let one = standing_host(class_mbps, pool_mbps, derived, big, limits);
    let h = one.host("h").unwrap();
    c.add_host(name, h.tree.clone(), h.capacity, h.cap).unwrap();
    for id in &h.derived {
        c.derive(name, &h.tree.node(*id).spec.name).unwrap();
    }
}

/// What [`standing_host`] is drawn from.
type HostDraw = (u64, u64, u8, bool, (Option<u64>, Option<u64>));

fn a_host() -> impl Strategy<Value = HostDraw> {
    (
        0u64..8_000,
        0u64..8_000,
        0u8..4,
        any::<bool>(),
        (prop::option::of(1u64..10_000), prop::option::of(1u64..10_000)),
    )
}

/// A change to a cluster in the test below.
#[derive(Debug, Clone)]
enum Step {
    /// A VM of these vNICs, assumed on host `n` as it is (the host may come out over).
    Assume(usize, Vec<Vnic>),
    /// A VM placed by placement, if a host admits it.
    Place(Vec<Vnic>),
    /// VM `n`'s first reservation set, if the quota allows.
    Raise(usize, u64),
    /// VM `n` taken off.
    Remove(usize),
    /// Host `n`'s capacity.
    Capacity(usize, u64),
    /// Host `n` marked unavailable (0), closed (1) or neither (2).
    Mark(usize, u8),
    Settle,
    Remediate,
}

fn a_step() -> impl Strategy<Value = Step> {
    let vnics = || prop::collection::vec(a_vnic(), 1..3);
    prop_oneof![
        (0usize..8, vnics()).prop_map(|(h, v)| Step::Assume(h, v)),
        vnics().prop_map(Step::Place),
        (0usize..40, 0u64..6_000).prop_map(|(v, r)| Step::Raise(v, r)),
        (0usize..40).prop_map(Step::Remove),
        (0usize..8, prop::sample::select(vec![5u64, 10, 25])).prop_map(|(h, g)| Step::Capacity(h, g)),
        (0usize..8, 0u8..3).prop_map(|(h, m)| Step::Mark(h, m)),
        Just(Step::Settle),
        Just(Step::Remediate),
    ]
}

fn a_vnic() -> impl Strategy<Value = Vnic> {
    // The root (named `uplink`) and a VM's leaf (`vm0#0`) are drawn too: a vNIC may sit
    // under the root, and never under another VM.
    let pool = prop::sample::select(vec!["vm", "gold", "infra", "nope", "uplink", "vm0#0"]);
    (pool, 0u64..6_000, prop::option::of(0u64..8_000)).prop_map(|(pool, r, limit)| Vnic {
        pool: pool.into(),
        reservation: Bandwidth::from_mbps(r),
        shares: Shares::NORMAL,
        limit: limit.map(Bandwidth::from_mbps),
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The standing (a host's tree with its VMs, kept between changes) gives the same answer
    /// as building the tree with the new VMs and checking all of it, for any VMs already there
    /// and any asked: admitted with the same headroom, or refused with the same reason. Hosts
    /// with derived classes and pools (with limits or not), VMs with several vNICs, pools the
    /// host lacks, limits below reservations, names taken and hosts over their admission are
    /// all drawn.
    #[test]
    fn the_standing_answers_as_the_whole_tree_does(
        class_mbps in 0u64..8_000, pool_mbps in 0u64..8_000, derived in 0u8..4, big: bool,
        limits in (prop::option::of(1u64..10_000), prop::option::of(1u64..10_000)),
        there in prop::collection::vec(prop::collection::vec(a_vnic(), 1..3), 0..6),
        asked in prop::collection::vec((0usize..8, prop::collection::vec(a_vnic(), 1..3)), 0..3),
    ) {
        let mut c = standing_host(class_mbps, pool_mbps, derived, big, limits);
        for (i, vnics) in there.into_iter().enumerate() {
            // Assumed as they are: the host may come out over its admission.
            let _ = c.assume(Vm { name: format!("vm{i}"), vnics }, "h");
        }
        let h = c.host("h").unwrap();
        let asked: Vec<Vm> = (asked.into_iter())
            .map(|(n, vnics)| Vm { name: format!("vm{n}"), vnics })
            .collect();
        let asked: Vec<&Vm> = asked.iter().collect();
        prop_assert_eq!(h.headroom_kept(&asked), h.headroom_with(&asked));
        prop_assert_eq!(c.standing("h").unwrap(), h.headroom_with(&[]));
    }
}

/// A host's standing follows its changes: a VM placed, its reservation raised, the host's
/// capacity lost, the VM taken off; each time the same as the whole tree's.
#[test]
fn the_standing_follows_each_change_of_its_host() {
    let mut c = fig2_cluster();
    let whole = |c: &Cluster, h: &str| c.host(h).unwrap().headroom_with(&[]);
    let check = |c: &Cluster| {
        for h in ["host1", "host2"] {
            assert_eq!(c.standing(h).unwrap(), whole(c, h), "{h}");
        }
    };
    check(&c);
    c.place_on(vm("a", Bandwidth::from_gbps(3)), "host1").unwrap();
    check(&c);
    let copy = c.clone();
    c.set_reservation("a", 0, Bandwidth::from_gbps(7)).unwrap();
    check(&c);
    check(&copy);
    let reserved = |c: &Cluster| c.host("host1").unwrap().vms[0].reservation();
    assert_eq!(reserved(&copy), Bandwidth::from_gbps(3), "the copy is as it was");
    assert_eq!(reserved(&c), Bandwidth::from_gbps(7));
    c.set_capacity("host1", Bandwidth::from_gbps(5)).unwrap();
    check(&c);
    assert!(c.standing("host1").unwrap().is_err(), "7G no longer fits 75% of 5G");
    assert_eq!(c.violations(), vec!["host1".to_string()]);
    c.remove_vm("a").unwrap();
    check(&c);
    c.set_capacity("host1", Bandwidth::from_gbps(10)).unwrap();
    check(&c);
    assert!(c.violations().is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The ranking chooses as reading every host does: after any changes (VMs assumed over
    /// admission, placed, raised and taken off, capacities lost, hosts marked and unmarked,
    /// remediation), settled or not, a VM asked (with VMs on their way to hosts, and a host
    /// left out, as remediation asks) goes to the same host with the same headroom, or to none;
    /// and the hosts in violation are the same.
    #[test]
    fn the_ranking_chooses_as_reading_every_host_does(
        hosts in prop::collection::vec(a_host(), 1..6),
        steps in prop::collection::vec(a_step(), 0..24),
        asked in prop::collection::vec(a_vnic(), 1..3),
        arriving in prop::collection::vec((0usize..8, prop::collection::vec(a_vnic(), 1..2)), 0..3),
        from in prop::option::of(0usize..8),
    ) {
        let mut c = Cluster::default();
        let names: Vec<String> = (0..hosts.len()).map(|i| format!("host{i}")).collect();
        for (name, draw) in names.iter().zip(hosts) {
            add_standing_host(&mut c, name, draw);
        }
        let host = |n: usize| names[n % names.len()].as_str();
        let mut vms: Vec<String> = Vec::new();
        for (i, step) in steps.into_iter().enumerate() {
            let name = format!("vm{i}");
            match step {
                Step::Assume(h, vnics) => {
                    c.assume(Vm { name: name.clone(), vnics }, host(h)).unwrap();
                    vms.push(name);
                }
                Step::Place(vnics) if c.place(Vm { name: name.clone(), vnics: vnics.clone() }).is_ok() => {
                    vms.push(name);
                }
                Step::Raise(v, mbps) if !vms.is_empty() => {
                    let _ = c.set_reservation(&vms[v % vms.len()], 0, Bandwidth::from_mbps(mbps));
                }
                Step::Remove(v) if !vms.is_empty() => {
                    c.remove_vm(&vms.remove(v % vms.len())).unwrap();
                }
                Step::Capacity(h, g) => c.set_capacity(host(h), Bandwidth::from_gbps(g)).unwrap(),
                Step::Mark(h, m) => {
                    let why = Some("marked".to_string());
                    c.set_unavailable(host(h), if m == 0 { why.clone() } else { None }).unwrap();
                    c.set_closed(host(h), if m == 1 { why } else { None }).unwrap();
                }
                Step::Settle => c.settle(),
                Step::Remediate => {
                    c.remediate();
                }
                _ => {}
            }
            let whole: Vec<String> = (c.hosts())
                .filter(|h| h.headroom_with(&[]).is_err())
                .map(|h| h.name.clone())
                .collect();
            prop_assert_eq!(c.violations(), whole);
        }
        let asked = Vm { name: "asked".into(), vnics: asked };
        let arriving: Vec<(String, Vm)> = (arriving.into_iter().enumerate())
            .map(|(i, (h, vnics))| (host(h).to_string(), Vm { name: format!("arriving{i}"), vnics }))
            .collect();
        let arriving: Vec<(&str, &Vm)> = arriving.iter().map(|(h, v)| (h.as_str(), v)).collect();
        let from = from.map(host);
        for arriving in [&[][..], &arriving[..]] {
            let ranked = c.best_for(&asked, arriving, from).best;
            prop_assert_eq!(ranked, c.read_all(&asked, arriving, from).best);
        }
        c.settle();
        let ranked = c.best_for(&asked, &arriving, from).best;
        prop_assert_eq!(ranked, c.read_all(&asked, &arriving, from).best);
    }
}
