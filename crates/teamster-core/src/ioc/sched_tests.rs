//! The packet scheduler against the fluid allocator: long-run throughput per node within 1%.

use super::*;
use crate::units::Bandwidth;
use crate::Instant;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// A leaf's traffic: greedy (always backlogged) or constant bit rate at `d` bits/s.
#[derive(Debug, Clone, Copy)]
enum Source {
    Greedy,
    Cbr(f64),
}

/// Sends `packets` packets of `len` bytes over a link of `cap` bits/s scheduled by `tree`, with
/// the engine clock starting at `epoch_ns` (the uptime when the run begins), and returns each
/// node's throughput (bits/s) measured after the first fifth of the run.
fn measure(tree: &Tree, cap: f64, sources: &[(NodeId, Source)], packets: usize, len: u32, epoch_ns: u64) -> Vec<f64> {
    let at = |t: f64| Instant::from_nanos(epoch_ns + t as u64);
    let mut s: Scheduler<()> = Scheduler::new(tree, &[]);
    let mut shared = SharedLimits::default();
    let mut next_arrival: Vec<f64> = vec![0.0; sources.len()];
    for (leaf, src) in sources {
        if let Source::Greedy = src {
            s.enqueue(*leaf, len, (), at(0.0));
            s.enqueue(*leaf, len, (), at(0.0));
        }
    }
    let per_packet = f64::from(len) * 8.0 / cap * 1e9;
    let mut bits = vec![0.0; tree.len()];
    let (mut t, mut sent, mut start) = (0.0f64, 0usize, None);
    while sent < packets {
        for (k, (leaf, src)) in sources.iter().enumerate() {
            if let Source::Cbr(d) = src {
                while next_arrival[k] <= t && *d > 0.0 {
                    s.enqueue(*leaf, len, (), at(next_arrival[k]));
                    next_arrival[k] += f64::from(len) * 8.0 / d * 1e9;
                }
            }
        }
        let now = at(t);
        match s.dequeue(now, &mut shared) {
            Some((leaf, l, ())) => {
                sent += 1;
                if sent == packets / 5 {
                    start = Some(t);
                    bits.iter_mut().for_each(|b| *b = 0.0);
                }
                let mut at = Some(leaf);
                while let Some(id) = at {
                    bits[id.0] += f64::from(l) * 8.0;
                    at = tree.node(id).parent;
                }
                if sources
                    .iter()
                    .any(|(n, src)| *n == leaf && matches!(src, Source::Greedy))
                {
                    s.enqueue(leaf, len, (), now);
                }
                t += per_packet;
            }
            None => {
                // Idle link: jump to the next arrival or limit release.
                let arrival = sources
                    .iter()
                    .zip(&next_arrival)
                    .filter(|((_, src), _)| matches!(src, Source::Cbr(d) if *d > 0.0))
                    .map(|(_, a)| *a)
                    .fold(f64::INFINITY, f64::min);
                let release = s
                    .next_eligible(now, &shared)
                    .map_or(f64::INFINITY, |i| i.as_nanos().saturating_sub(epoch_ns) as f64);
                let next = arrival.min(release);
                assert!(next.is_finite(), "scheduler stalled with nothing to wait for");
                t = next.max(t + 1.0);
            }
        }
    }
    let span = (t - start.unwrap_or(0.0)) / 1e9;
    bits.iter().map(|b| b / span).collect()
}

/// Compares measured and fluid throughput of every node; within 1% of the fluid figure, or
/// 0.02% of the link for nodes whose fluid share is under 2% of it (a few packets there already
/// exceed 1%).
fn check(tree: &Tree, cap: f64, sources: &[(NodeId, Source)], packets: usize) -> Result<(), String> {
    check_at(tree, cap, sources, packets, 1500, 0)
}

/// [`check`] with `len`-byte packets and the engine clock starting at `epoch_ns`.
fn check_at(
    tree: &Tree,
    cap: f64,
    sources: &[(NodeId, Source)],
    packets: usize,
    len: u32,
    epoch_ns: u64,
) -> Result<(), String> {
    let got = measure(tree, cap, sources, packets, len, epoch_ns);
    let mut demand = vec![None; tree.len()];
    for (leaf, src) in sources {
        demand[leaf.0] = Some(match src {
            Source::Greedy => f64::INFINITY,
            Source::Cbr(d) => *d,
        });
    }
    // Leaves without a source offer nothing.
    for id in tree.ids() {
        if tree.node(id).children.is_empty() && !sources.iter().any(|(n, _)| *n == id) {
            demand[id.0] = Some(0.0);
        }
    }
    let want = allocate(tree, cap, &demand);
    for id in tree.ids() {
        let (g, w) = (got[id.0], want.get(id));
        let tolerance = if w >= 0.02 * cap { 0.01 * w } else { 0.0002 * cap };
        if (g - w).abs() > tolerance {
            return Err(format!(
                "{}: measured {:.4} Gbit/s, fluid {:.4} Gbit/s (tolerance {:.4})",
                tree.node(id).spec.name,
                g / 1e9,
                w / 1e9,
                tolerance / 1e9
            ));
        }
    }
    Ok(())
}

/// A leaf of a flat test tree: reservation, shares, limit (Gbit/s) and its source.
type Leaf = (f64, u32, Option<f64>, Source);

/// A random test tree: capacity, nodes (parent, reservation fraction, shares, limit fraction),
/// and per-leaf CBR rates as fractions of the capacity (None: greedy).
type RandomCase = (f64, Vec<(usize, f64, u32, Option<f64>)>, Vec<Option<f64>>);

fn spec(name: &str, r: f64, s: u32, l: Option<f64>) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        reservation: Bandwidth::from_bps_f64(r * 1e9),
        shares: Shares::new(s).unwrap(),
        limit: l.map(|l| Bandwidth::from_bps_f64(l * 1e9)),
    }
}

/// A flat tree of (R, S, L) leaves with sources.
fn flat(children: &[Leaf]) -> (Tree, Vec<(NodeId, Source)>) {
    let mut t = Tree::new("uplink");
    let sources = children
        .iter()
        .enumerate()
        .map(|(i, &(r, s, l, src))| (t.add(NodeId::ROOT, spec(&format!("n{i}"), r, s, l)).unwrap(), src))
        .collect();
    (t, sources)
}

const G: f64 = 1e9;

#[test]
fn public_vectors_at_packet_level() {
    use Source::*;
    let vectors: Vec<(f64, Vec<Leaf>)> = vec![
        (
            9.4,
            vec![
                (7.5, 50, None, Greedy),
                (0.0, 50, None, Greedy),
                (0.0, 50, None, Greedy),
            ],
        ), // TV1
        (
            9.4,
            vec![
                (7.5, 50, None, Greedy),
                (0.0, 50, None, Greedy),
                (0.0, 50, Some(0.3), Greedy),
            ],
        ), // TV2
        (
            9.4,
            vec![
                (7.5, 50, None, Cbr(2.0 * G)),
                (0.0, 50, None, Greedy),
                (0.0, 50, None, Greedy),
            ],
        ), // TV3
        (
            5.0,
            vec![
                (4.0, 50, None, Greedy),
                (2.0, 50, None, Greedy),
                (1.0, 50, None, Greedy),
            ],
        ), // TV4
        (10.0, vec![(0.0, 50, None, Greedy), (0.0, 25, Some(2.5), Greedy)]), // TV5
        (10.0, vec![(8.0, 50, None, Greedy), (0.0, 25, None, Greedy)]),      // TV6
        (100.0, vec![(1.0, 9, Some(80.0), Greedy), (30.0, 1, Some(40.0), Greedy)]), // TV7
        (
            100.0,
            vec![
                (5.0, 4, Some(30.0), Greedy),
                (5.0, 6, Some(30.0), Greedy),
                (5.0, 8, Some(30.0), Greedy),
            ],
        ), // TV8
        (
            10.0,
            vec![
                (1.0, 50, None, Greedy),
                (1.0, 100, None, Greedy),
                (1.0, 50, None, Greedy),
                (1.0, 50, None, Greedy),
                (0.5, 100, None, Greedy),
            ],
        ), // TV9
    ];
    for (i, (cap, children)) in vectors.iter().enumerate() {
        let (t, sources) = flat(children);
        check(&t, cap * G, &sources, 200_000).unwrap_or_else(|e| panic!("vector {}: {e}", i + 1));
    }
}

#[test]
fn hierarchical_vector_at_packet_level() {
    let mut t = Tree::new("uplink");
    let vmotion = t.add(NodeId::ROOT, spec("live-migration", 1.0, 50, None)).unwrap();
    t.add(NodeId::ROOT, spec("iscsi", 1.0, 100, None)).unwrap(); // idle: no source
    let vm = t.add(NodeId::ROOT, spec("vm", 2.0, 100, None)).unwrap();
    let gold = t.add(vm, spec("gold", 1.5, 100, None)).unwrap();
    let default = t.add(vm, spec("default", 0.0, 50, None)).unwrap();
    let a = t.add(gold, spec("a", 1.0, 50, None)).unwrap();
    let b = t.add(gold, spec("b", 0.0, 50, Some(1.5))).unwrap();
    let c = t.add(default, spec("c", 0.0, 50, None)).unwrap();
    let sources: Vec<(NodeId, Source)> = [vmotion, a, b, c].iter().map(|&n| (n, Source::Greedy)).collect();
    check(&t, 10.0 * G, &sources, 300_000).unwrap();
}

#[test]
fn an_idle_node_banks_no_credit() {
    // n0 idle for the first half, then greedy: it must not get more than its share afterwards.
    let (t, _) = flat(&[(0.0, 50, None, Source::Greedy), (0.0, 50, None, Source::Greedy)]);
    let mut s: Scheduler<()> = Scheduler::new(&t, &[]);
    let mut shared = SharedLimits::default();
    let (n0, n1) = (NodeId(1), NodeId(2));
    let mut sent = [0u32; 2];
    for k in 0..20_000u64 {
        let now = Instant::from_nanos(k * 1200);
        if s.queued(n1) < 2 {
            s.enqueue(n1, 1500, (), now);
        }
        if k >= 10_000 && s.queued(n0) < 2 {
            s.enqueue(n0, 1500, (), now);
        }
        let (leaf, _, ()) = s.dequeue(now, &mut shared).unwrap();
        if k >= 10_000 {
            sent[usize::from(leaf == n1)] += 1;
        }
    }
    assert!(sent[0].abs_diff(sent[1]) <= 2, "after waking: {sent:?}");
}

#[test]
fn a_vnic_limit_is_shared_across_uplinks() {
    // One vNIC with a 1 Gbit/s limit sends greedily on two 10 Gbit/s uplinks: 1 Gbit/s in total.
    let mut t = Tree::new("uplink");
    let leaf = t.add(NodeId::ROOT, spec("vnic", 0.0, 50, None)).unwrap();
    let mut shared = SharedLimits::default();
    let limit = shared.add(1e9);
    let mut up: [Scheduler<()>; 2] = [
        Scheduler::new(&t, &[(leaf, limit)]),
        Scheduler::new(&t, &[(leaf, limit)]),
    ];
    let mut bits = 0.0;
    let step = 1200u64; // one 1500 B packet at 10 Gbit/s
    for k in 0..200_000u64 {
        let now = Instant::from_nanos(k * step);
        for s in up.iter_mut() {
            if s.queued(leaf) < 2 {
                s.enqueue(leaf, 1500, (), now);
            }
            if let Some((_, len, ())) = s.dequeue(now, &mut shared) {
                bits += f64::from(len) * 8.0;
            }
        }
    }
    let rate = bits / (200_000.0 * step as f64 / 1e9);
    assert!((rate - 1e9).abs() < 0.01e9, "{rate}");
}

/// A random tree of up to 12 nodes, with sources on its leaves.
fn random_case() -> impl Strategy<Value = RandomCase> {
    (
        1.0f64..10.0,
        proptest::collection::vec(
            (
                0usize..100,
                0.0f64..1.0,
                1u32..=100,
                proptest::option::weighted(0.3, 0.05f64..1.0),
            ),
            1..12,
        ),
        proptest::collection::vec(proptest::option::weighted(0.3, 0.01f64..0.6), 12),
    )
}

/// A property-test runner over `cases` random trees from a fixed seed, which keeps CI
/// reproducible; TEAMSTER_RANDOM_TREES=N explores N fresh trees instead.
pub(super) fn random_tree_runner(cases: u32) -> TestRunner {
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    match std::env::var("TEAMSTER_RANDOM_TREES").ok().and_then(|n| n.parse().ok()) {
        Some(n) => TestRunner::new(Config { cases: n, ..config }),
        None => TestRunner::new_with_rng(
            config,
            proptest::test_runner::TestRng::deterministic_rng(proptest::test_runner::RngAlgorithm::ChaCha),
        ),
    }
}

#[test]
fn matches_the_allocator_on_a_thousand_random_trees() {
    // (See a_limited_node_picked_late_keeps_its_limit for what an earlier run of this found.)
    let mut runner = random_tree_runner(1000);
    runner
        .run(&random_case(), |(cap, raw, cbr)| {
            // Reservations are fractions of the capacity, scaled to fit at each level; limits are
            // fractions of the capacity above the node's reservation; sources greedy or CBR.
            let mut t = Tree::new("uplink");
            let mut res = vec![cap];
            let mut used = vec![0.0];
            for (i, (p, r, s, l)) in raw.iter().enumerate() {
                let parent = if i == 0 { 0 } else { p % (i + 1) };
                let quota = (res[parent] - used[parent]).max(0.0);
                let r = if p % 3 == 0 { 0.0 } else { (r * cap * 0.5).min(quota) };
                used[parent] += r;
                let l = l.map(|f| r + f * cap);
                t.add(NodeId(parent), spec(&format!("n{i}"), r, *s, l)).unwrap();
                res.push(r);
                used.push(0.0);
            }
            let sources: Vec<(NodeId, Source)> = t
                .ids()
                .skip(1)
                .filter(|id| t.node(*id).children.is_empty())
                .map(|id| {
                    (
                        id,
                        cbr[id.0 % cbr.len()].map_or(Source::Greedy, |f| Source::Cbr(f * cap * G)),
                    )
                })
                .collect();
            check(&t, cap * G, &sources, 40_000).map_err(|e| TestCaseError::fail(format!("{e}\ntree: {t:#?}")))
        })
        .unwrap();
}

/// Found by the random trees: n2 is capped by its limit and competes with n1 under n0, which in
/// turn competes at the root. When n2's limit clock could lag `now` by only two frames, service
/// it missed while n0 waited its turn was lost for good and went to n1 (+1.2% over the fluid
/// figure). The limit clock may now lag by 1 ms while busy.
#[test]
fn a_limited_node_picked_late_keeps_its_limit() {
    let mut t = Tree::new("uplink");
    let n0 = t.add(NodeId::ROOT, spec("n0", 0.041456310, 89, None)).unwrap();
    let n1 = t.add(n0, spec("n1", 0.0, 1, None)).unwrap();
    let n2 = t.add(n0, spec("n2", 0.041456310, 31, Some(0.416622668))).unwrap();
    let n3 = t.add(NodeId::ROOT, spec("n3", 0.090027219, 3, None)).unwrap();
    let n4 = t.add(n1, spec("n4", 0.0, 1, None)).unwrap();
    let n5 = t.add(n2, spec("n5", 0.0, 1, None)).unwrap();
    let n6 = t.add(NodeId::ROOT, spec("n6", 0.308681902, 18, None)).unwrap();
    let n7 = t.add(n1, spec("n7", 0.0, 1, None)).unwrap();
    let n8 = t.add(n1, spec("n8", 0.0, 1, None)).unwrap();
    let sources: Vec<(NodeId, Source)> = [n3, n4, n5, n6, n7, n8].iter().map(|&n| (n, Source::Greedy)).collect();
    check(&t, 1e9, &sources, 400_000).unwrap();
}

/// One year of uptime, in nanoseconds of engine time.
const YEAR_NS: u64 = 365 * 24 * 3600 * 1_000_000_000;

/// Tags are times in nanoseconds: a year after start they would be ~3.2e16, where an f64 step
/// is 4 ns, 40% of a 128-byte frame at 100 Gbit/s (without rebasing, TV7 was 2.2% off). The
/// same vectors must hold within the same tolerance a year after start as at start.
#[test]
fn a_year_of_uptime_keeps_the_allocation() {
    use Source::*;
    let vectors: Vec<(f64, Vec<Leaf>)> = vec![
        (100.0, vec![(1.0, 9, Some(80.0), Greedy), (30.0, 1, Some(40.0), Greedy)]), // TV7
        (
            100.0,
            vec![
                (5.0, 4, Some(30.0), Greedy),
                (5.0, 6, Some(30.0), Greedy),
                (5.0, 8, Some(30.0), Greedy),
            ],
        ), // TV8
        (
            40.0,
            vec![
                (7.5, 50, None, Greedy),
                (0.0, 50, None, Cbr(2.0 * G)),
                (0.0, 50, Some(3.0), Greedy),
            ],
        ),
    ];
    for (i, (cap, children)) in vectors.iter().enumerate() {
        let (t, sources) = flat(children);
        for epoch in [0, YEAR_NS] {
            check_at(&t, cap * G, &sources, 1_000_000, 128, epoch)
                .unwrap_or_else(|e| panic!("vector {} at {} years: {e}", i + 1, epoch / YEAR_NS));
        }
    }
}

/// A limit shared across uplinks holds a year after start as it does at start.
#[test]
fn a_shared_limit_holds_a_year_after_start() {
    let mut t = Tree::new("uplink");
    let leaf = t.add(NodeId::ROOT, spec("vnic", 0.0, 50, None)).unwrap();
    for epoch in [0, YEAR_NS] {
        let mut shared = SharedLimits::default();
        let limit = shared.add(30e9);
        let mut up: [Scheduler<()>; 2] = [
            Scheduler::new(&t, &[(leaf, limit)]),
            Scheduler::new(&t, &[(leaf, limit)]),
        ];
        let mut bits = 0.0;
        let step = 10u64; // one 125 B packet at 100 Gbit/s
        for k in 0..2_000_000u64 {
            let now = Instant::from_nanos(epoch + k * step);
            for s in up.iter_mut() {
                if s.queued(leaf) < 2 {
                    s.enqueue(leaf, 125, (), now);
                }
                if let Some((_, len, ())) = s.dequeue(now, &mut shared) {
                    bits += f64::from(len) * 8.0;
                }
            }
        }
        let rate = bits / (2_000_000.0 * step as f64 / 1e9);
        assert!((rate - 30e9).abs() < 0.01 * 30e9, "{} years: {rate}", epoch / YEAR_NS);
    }
}
