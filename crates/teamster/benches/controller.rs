//! The cluster controller's cost per change, in memory (no store, no network), at 100 hosts
//! with 3,000 VMs, 1,000 hosts with 3,000 VMs and 1,000 hosts with 30,000 VMs (issue 31's
//! scale): a power-on and a reservation raised until its host migrates a VM, each as the
//! controller makes it (a copy of the state, placement on the view kept in step, the delta a
//! store writes), taken apart (the copy, the view brought in step, the delta), and for
//! comparison the placement view built from nothing and the whole state serialised (what each
//! change cost and wrote before). A report that changes nothing (`touch`) is timed too. Hosts
//! have the load generator's shape (two 25G uplinks, the vm class and a pool, both derived);
//! VMs reserve 100M each, spread evenly. A change's cost should follow the hosts (placement
//! reads each host's standing once) and not the VMs: compare 1,000 hosts at 3,000 and 30,000.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::hint::black_box;
use teamster::controller::state::{ClusterState, HostReport, HostShape, PowerOn, VmChange, VmRecord};
use teamster_core::units::Bandwidth;

const SHAPE: &str = r#"{"uplinks": [{"name": "uplink1", "capacity": "25G"}, {"name": "uplink2", "capacity": "25G"}],
    "traffic_classes": [{"class": "vm"}], "pools": [{"name": "vm-pool"}], "derived": ["vm", "vm-pool"]}"#;

/// A cluster of `hosts` hosts holding `vms` VMs, built directly (placing 30,000 VMs one
/// change at a time is what is being measured), with its placement view kept as a running
/// controller has it after a change.
fn cluster(hosts: usize, vms: usize) -> ClusterState {
    let shape: HostShape = serde_json::from_str(SHAPE).unwrap();
    let mut s = ClusterState::default();
    for h in 0..hosts {
        s.register(&format!("host{h}"), shape.clone(), 1).unwrap();
    }
    for v in 0..vms {
        let rec = VmRecord {
            mac: Some(format!(
                "02:00:{:02x}:{:02x}:{:02x}:01",
                v >> 16,
                (v >> 8) & 0xff,
                v & 0xff
            )),
            group: None,
            pool: "vm-pool".into(),
            reservation: Bandwidth::from_mbps(100),
            shares: Default::default(),
            limit: None,
            host: format!("host{}", v % hosts),
            moving_from: None,
        };
        s.vms.insert(format!("vm{v}"), rec);
    }
    s.generation += 1;
    s.placement(2).unwrap();
    s
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("controller");
    g.sample_size(10);
    for (hosts, vms) in [(100, 3_000), (1_000, 3_000), (1_000, 30_000)] {
        let s = cluster(hosts, vms);
        let id = |what: &str| BenchmarkId::new(what, format!("{hosts}h-{vms}vm"));
        let req = || -> PowerOn {
            serde_json::from_value(serde_json::json!({"name": "new", "pool": "vm-pool", "reservation": "100M"}))
                .unwrap()
        };
        g.bench_function(id("power-on, whole change"), |b| {
            b.iter(|| {
                let mut next = s.clone();
                next.power_on(req(), 2).unwrap();
                black_box(next.delta(&s).unwrap())
            })
        });
        // vm0 on host0 (18.75G reservable, 100M per VM) raised until the host migrates one VM.
        let raise = || VmChange {
            reservation: Some(Bandwidth::from_bps(
                18_750_000_000 - (vms / hosts - 2) as u64 * 100_000_000,
            )),
            ..VmChange::default()
        };
        g.bench_function(id("reservation raised, one migration, whole change"), |b| {
            b.iter(|| {
                let mut next = s.clone();
                let out = next.set_vm("vm0", raise(), 2).unwrap();
                assert_eq!(out.migrations.len(), 1);
                black_box(next.delta(&s).unwrap())
            })
        });
        g.bench_function(id("copy of the state"), |b| b.iter(|| black_box(s.clone())));
        g.bench_function(id("placement view kept in step"), |b| {
            b.iter(|| black_box(s.cluster(2).unwrap()))
        });
        let mut cold = ClusterState::default();
        (cold.hosts, cold.vms) = (s.hosts.clone(), s.vms.clone());
        g.bench_function(id("placement view built from nothing"), |b| {
            b.iter(|| black_box(cold.cluster(2).unwrap()))
        });
        let mut next = s.clone();
        next.power_on(req(), 2).unwrap();
        g.bench_function(id("delta"), |b| b.iter(|| black_box(next.delta(&s).unwrap())));
        g.bench_function(id("whole state serialised"), |b| {
            b.iter(|| black_box(serde_json::to_vec(&s).unwrap()))
        });
        let mut touched = s.clone();
        let report = HostReport {
            attached: (0..vms).filter(|v| v % hosts == 0).map(|v| format!("vm{v}")).collect(),
            ..HostReport::default()
        };
        g.bench_function(id("report that changes nothing"), |b| {
            b.iter(|| black_box(touched.touch("host0", &report, 2).unwrap()))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
