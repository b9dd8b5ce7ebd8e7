//! Core benchmarks: flow-key parsing (report as Mpps: criterion's elements/s), uplink selection
//! per policy (ns per decision), one Load-Based Teaming evaluation for 1,000 ports on 4 uplinks
//! (µs), the NetIOC scheduler's enqueue + dequeue (elements/s = packets/s; `teamster bench
//! sched` runs the full matrix against the rte_sched peer's workload), and the receive path's
//! stages: the RSS hash and queue of a parsed frame (ns per frame), the Internet checksum and
//! software segmentation of a 64 KiB TCP super-frame (bytes/s), and receive coalescing of its
//! 45 segments back into one (elements/s = segments/s). These are the per-stage costs the
//! simulator's CPU model starts from.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use etherparse::{PacketBuilder, VlanId};
use std::hint::black_box;
use teamster_core::teaming::{
    Direction, FailoverOrder, LbtConfig, Policy, PortGroupSpec, PortId, PortSpec, Team, UplinkId, UplinkSpec,
};
use teamster_core::units::Bandwidth;
use teamster_core::wire::{parse, FlowKey, MacAddr};
use teamster_core::Instant;

fn frames() -> Vec<(&'static str, Vec<u8>)> {
    let (a, b) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let mut tcp4 = Vec::new();
    PacketBuilder::ethernet2(a, b)
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .tcp(1234, 80, 1, 100)
        .write(&mut tcp4, &[0; 6])
        .unwrap();
    let mut vlan6 = Vec::new();
    PacketBuilder::ethernet2(a, b)
        .single_vlan(VlanId::try_new(100).unwrap())
        .ipv6([1; 16], [2; 16], 64)
        .udp(5000, 53)
        .write(&mut vlan6, &[0; 18])
        .unwrap();
    let mut vxlan = vec![0x08, 0, 0, 0, 0, 0, 42, 0];
    vxlan.extend_from_slice(&tcp4);
    let mut outer = Vec::new();
    PacketBuilder::ethernet2(a, b)
        .ipv4([192, 168, 0, 1], [192, 168, 0, 2], 64)
        .udp(40000, 4789)
        .write(&mut outer, &vxlan)
        .unwrap();
    vec![
        ("ipv4-tcp-64B", tcp4),
        ("vlan-ipv6-udp", vlan6),
        ("vxlan-inner-tcp", outer),
    ]
}

fn bench_parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse");
    g.throughput(Throughput::Elements(1));
    for (name, frame) in frames() {
        g.bench_with_input(BenchmarkId::from_parameter(name), &frame, |bn, f| {
            bn.iter(|| parse(black_box(f)).unwrap())
        });
    }
    g.finish();
}

/// A team of 4 x 10 GbE uplinks with one group using `policy` and `ports` ports.
fn team(policy: Policy, ports: u32) -> Team {
    let uplinks = (0..4)
        .map(|i| UplinkSpec {
            name: format!("uplink{i}"),
            capacity: Bandwidth::from_gbps(10),
        })
        .collect();
    let mut t = Team::new(uplinks, LbtConfig::default()).unwrap();
    let g = t
        .add_group(PortGroupSpec {
            mode: Default::default(),
            tuning: Default::default(),
            lacp: Default::default(),
            name: "pg".into(),
            policy,
            order: FailoverOrder {
                active: (0..4).map(UplinkId).collect(),
                standby: vec![],
            },
            failback: true,
            notify_switches: true,
            vlan: None,
        })
        .unwrap();
    for i in 0..ports {
        let b = i.to_be_bytes();
        t.add_port(PortSpec {
            id: PortId(i),
            mac: MacAddr([2, 0, b[0], b[1], b[2], b[3]]),
            group: g,
        })
        .unwrap();
    }
    t
}

fn bench_select(c: &mut Criterion) {
    let flows: Vec<FlowKey> = frames().iter().map(|(_, f)| parse(f).unwrap()).collect();
    let mut g = c.benchmark_group("select");
    g.throughput(Throughput::Elements(1));
    let policies = [
        ("port-id", Policy::PORT_ID),
        ("source-mac", Policy::SOURCE_MAC),
        ("ip-hash-l3", Policy::IP_HASH),
        ("ip-hash-l3l4", Policy::IP_HASH_L4),
        ("load-based", Policy::LOAD_BASED),
    ];
    for (name, policy) in policies {
        let t = team(policy, 1000);
        let mut i = 0u32;
        g.bench_function(name, |bn| {
            bn.iter(|| {
                i = (i + 7) % 1000;
                t.select(black_box(PortId(i)), Some(black_box(&flows[(i % 3) as usize])))
            })
        });
    }
    g.finish();
}

fn bench_lbt(c: &mut Criterion) {
    // 1,000 ports on 4 uplinks, uneven load so that uplink0 is saturated and a move is found.
    let mut t = team(Policy::LOAD_BASED, 1000);
    for s in 0..31u64 {
        let now = Instant::from_secs(s);
        for p in 0..1000u32 {
            let u = t.port_uplink(PortId(p)).unwrap();
            let gbps = if u.0 == 0 { 0.032 } else { 0.02 };
            t.account(PortId(p), u, Direction::Tx, (gbps * 1e9 / 8.0) as u64, now);
            t.account(PortId(p), u, Direction::Rx, (gbps * 1e8 / 8.0) as u64, now);
        }
    }
    let now = Instant::from_secs(31);
    assert!(
        t.lbt_decision(now).is_some(),
        "the benchmark must exercise a real move decision"
    );
    c.bench_function("lbt-evaluate/1000-ports-4-uplinks", |bn| {
        bn.iter(|| t.lbt_decision(black_box(now)))
    });
}

fn bench_sched(c: &mut Criterion) {
    use teamster_core::ioc::{NodeId, NodeSpec, Scheduler, SharedLimits, Shares, Tree};
    let mut g = c.benchmark_group("sched");
    g.throughput(Throughput::Elements(32));
    for leaves in [16usize, 1024, 4096] {
        for (kind, reserve) in [("limits", false), ("reservations", true)] {
            let mut t = Tree::new("uplink");
            for i in 0..leaves {
                let spec = NodeSpec {
                    name: format!("p{i}"),
                    reservation: if reserve && i % 2 == 0 {
                        Bandwidth::from_bps_f64(50e9 / (leaves as f64 / 2.0).ceil())
                    } else {
                        Bandwidth::ZERO
                    },
                    shares: Shares::new(1 + (i as u32 * 37) % 100).unwrap(),
                    limit: (!reserve).then(|| Bandwidth::from_gbps(800)),
                };
                t.add(NodeId::ROOT, spec).unwrap();
            }
            let mut s: Scheduler<u32> = Scheduler::new(&t, &[]);
            let mut shared = SharedLimits::default();
            let (mut clock, mut x) = (0u64, 0x1234567u64);
            g.bench_function(BenchmarkId::new(kind, leaves), |bn| {
                bn.iter(|| {
                    // A burst of 32 packets in (uniform leaves, 64 per leaf at most), 32 out.
                    for _ in 0..32 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let leaf = NodeId(1 + (x % leaves as u64) as usize);
                        if s.queued(leaf) < 64 {
                            s.enqueue(leaf, 88, x as u32, Instant::from_nanos(clock));
                        }
                    }
                    for _ in 0..32 {
                        if s.dequeue(Instant::from_nanos(clock), &mut shared).is_some() {
                            clock += 7; // 88 B at 100 Gbit/s
                        }
                    }
                })
            });
        }
    }
    g.finish();
}

fn bench_rx(c: &mut Criterion) {
    use teamster_core::offload::{internet_checksum, segment_tcp, Gro};
    use teamster_core::rx::RssConfig;
    let mut g = c.benchmark_group("rx");
    g.throughput(Throughput::Elements(1));
    let rss = RssConfig::new(8).unwrap();
    for (name, frame) in frames() {
        let key = parse(&frame).unwrap();
        g.bench_with_input(BenchmarkId::new("rss-queue", name), &key, |bn, k| {
            bn.iter(|| rss.queue(black_box(k)))
        });
    }
    // A 64 KiB TCP super-frame: 45 segments of 1448 bytes (the last shorter) at a 1500 MTU.
    let mut big = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .tcp(1234, 80, 1, 100)
        .ack(9)
        .psh()
        .write(&mut big, &vec![7u8; 65_000])
        .unwrap();
    let pieces = segment_tcp(&big, 1500).unwrap();
    g.throughput(Throughput::Bytes(big.len() as u64));
    g.bench_function("checksum-64KiB", |bn| {
        bn.iter(|| internet_checksum(black_box(&big[34..])))
    });
    g.bench_function("segment-64KiB-mtu1500", |bn| {
        bn.iter(|| segment_tcp(black_box(&big), 1500))
    });
    g.throughput(Throughput::Elements(pieces.len() as u64));
    g.bench_function("gro-45-segments", |bn| {
        bn.iter_batched(
            || pieces.clone(),
            |ps| {
                let mut gro = Gro::new();
                let mut out = Vec::with_capacity(2);
                for p in ps {
                    gro.receive(p, &mut out);
                }
                gro.flush(&mut out);
                out
            },
            criterion::BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench_parse, bench_select, bench_lbt, bench_sched, bench_rx);
criterion_main!(benches);
