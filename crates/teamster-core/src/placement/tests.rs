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
    let p = c.place(vm("vm2", Bandwidth::from_mbps(4500))).unwrap();
    assert_eq!(p.host, "host2");
    let host1 = &p.considered.iter().find(|(h, _)| h == "host1").unwrap().1;
    assert!(host1.as_ref().unwrap_err().contains("vm2"), "{host1:?}");
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
