//! The optimised scheduler against the reference (`sched_reference`, the layout before it):
//! random trees, random controls and shared limit buckets, random operations on two uplinks,
//! and every answer (packet, length, item, queue length, next release) must be identical.

use super::sched_reference as reference;
use super::*;
use crate::units::Bandwidth;
use crate::Instant;
use proptest::prelude::*;

/// A node: parent pick, reservation (fraction of 10 Gbit/s, 0 if under 0.4), shares, limit.
type RawNode = (usize, f64, u32, Option<f64>);
/// An operation: kind, node pick, length, time step.
type Op = (u8, usize, u32, u64);

fn spec(name: &str, r: f64, s: u32, l: Option<f64>) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        reservation: Bandwidth::from_bps_f64(r),
        shares: Shares::new(s).unwrap(),
        limit: l.map(Bandwidth::from_bps_f64),
    }
}

const CAP: f64 = 10e9;

fn raw_spec(i: usize, &(_, r, s, l): &RawNode) -> NodeSpec {
    let r = if r < 0.4 { 0.0 } else { (r - 0.4) * 0.2 * CAP };
    spec(&format!("n{i}"), r, s, l.map(|f| r + f * CAP))
}

/// Runs `ops` on both implementations and fails at the first answer that differs.
fn run_case(raw: &[RawNode], buckets: &[Option<f64>], ops: &[Op], start: u64) -> Result<(), TestCaseError> {
    let mut t = Tree::new("uplink");
    for (i, node) in raw.iter().enumerate() {
        let parent = if i == 0 { 0 } else { node.0 % (i + 1) };
        t.add(NodeId(parent), raw_spec(i, node)).unwrap();
    }
    let leaves: Vec<NodeId> = t.ids().skip(1).filter(|id| t.node(*id).children.is_empty()).collect();
    let (mut new_shared, mut ref_shared) = (SharedLimits::default(), reference::SharedLimits::default());
    let (mut new_pairs, mut ref_pairs) = (Vec::new(), Vec::new());
    for (k, leaf) in leaves.iter().enumerate() {
        if let Some(rate) = buckets[k % buckets.len()] {
            new_pairs.push((*leaf, new_shared.add(rate * CAP)));
            ref_pairs.push((*leaf, ref_shared.add(rate * CAP)));
        }
    }
    let mut ours: Vec<Scheduler<u32>> = (0..2).map(|_| Scheduler::new(&t, &new_pairs)).collect();
    // Some cases start every round count near its wrap, so that renumbering happens mid-run.
    if start % 3 == 1 {
        for s in ours.iter_mut() {
            (0..t.len()).for_each(|p| s.set_round(p, u32::MAX - 20));
        }
    }
    let mut theirs: Vec<reference::Scheduler<u32>> =
        (0..2).map(|_| reference::Scheduler::new(&t, &ref_pairs)).collect();
    let mut now = start;
    for (k, &(kind, pick, len, step)) in ops.iter().enumerate() {
        let u = k % 2;
        // Mostly small steps (100 ns .. 10 us), some up to 10 ms, a few past the rebase threshold.
        now += match step % 64 {
            0 => Scheduler::<u32>::REBASE_NS + step,
            1..=8 => 0,
            9..=14 => step * 100,
            _ => 100 + step % 10_000,
        };
        let at = Instant::from_nanos(now);
        let leaf = leaves[pick % leaves.len()];
        match kind {
            0..=4 => {
                if ours[u].queued(leaf) < 8 {
                    ours[u].enqueue(leaf, len, k as u32, at);
                    theirs[u].enqueue(leaf, len, k as u32, at);
                }
            }
            5..=10 => {
                let a = ours[u].dequeue(at, &mut new_shared);
                let b = theirs[u].dequeue(at, &mut ref_shared);
                prop_assert_eq!(a, b, "dequeue at op {}", k);
            }
            11 => {
                // New controls for some node (a leaf or an inner node), as an operator would set.
                let id = NodeId(1 + pick % raw.len());
                let node = &raw[(pick / 7 + k) % raw.len()];
                let s = NodeSpec {
                    name: format!("n{}", id.0 - 1),
                    ..raw_spec(id.0, node)
                };
                ours[u].set_controls(id, &s, at);
                theirs[u].set_controls(id, &s, at);
                if let Some(&(_, b)) = new_pairs.iter().find(|(l, _)| *l == id) {
                    let rate = s.limit.map(|l| l.bps_f64());
                    new_shared.set(b, rate);
                    let (_, rb) = ref_pairs.iter().find(|(l, _)| *l == id).unwrap();
                    ref_shared.set(*rb, rate);
                }
            }
            _ => {
                let a = ours[u].next_eligible(at, &new_shared);
                let b = theirs[u].next_eligible(at, &ref_shared);
                prop_assert_eq!(a, b, "next_eligible at op {}", k);
            }
        }
        for l in &leaves {
            prop_assert_eq!(ours[u].queued(*l), theirs[u].queued(*l));
        }
    }
    // Drain both completely, far in the future: the same packets in the same order.
    let far = Instant::from_nanos(now + 1_000_000_000_000);
    for u in 0..2 {
        loop {
            let a = ours[u].dequeue(far, &mut new_shared);
            let b = theirs[u].dequeue(far, &mut ref_shared);
            prop_assert_eq!(a, b, "drain");
            if a.is_none() {
                break;
            }
        }
    }
    Ok(())
}

fn case() -> impl Strategy<Value = (Vec<RawNode>, Vec<Option<f64>>, Vec<Op>, u64)> {
    (
        proptest::collection::vec(
            (
                0usize..100,
                0.0f64..1.0,
                1u32..=100,
                // Limits from 1 Mbit/s (where the slack is the 3000-byte burst) to half the link.
                proptest::option::weighted(0.4, prop_oneof![0.0001f64..0.003, 0.003f64..0.5]),
            ),
            1..10,
        ),
        proptest::collection::vec(proptest::option::weighted(0.4, 0.001f64..0.3), 1..6),
        proptest::collection::vec((0u8..13, 0usize..1000, 60u32..9000, 0u64..100_000), 1..600),
        prop_oneof![
            Just(0u64),
            Just(1),
            Just(365 * 24 * 3600 * 1_000_000_000u64),
            0u64..1u64 << 40
        ],
    )
}

#[test]
fn the_optimised_scheduler_decides_as_the_reference() {
    let mut runner = super::sched_tests::random_tree_runner(400);
    runner
        .run(&case(), |(raw, buckets, ops, start)| {
            run_case(&raw, &buckets, &ops, start)
        })
        .unwrap();
}

/// Thousands of backlogged leaves with equal tags (the benchmark's shape), where the order among
/// ties is all there is to compare; the round count wraps on the way.
#[test]
fn many_equal_leaves_come_out_in_the_same_order() {
    let mut t = Tree::new("uplink");
    for i in 0..1024 {
        t.add(NodeId::ROOT, spec(&format!("p{i}"), 0.0, 50, Some(800e9)))
            .unwrap();
    }
    let mut ours: Scheduler<u32> = Scheduler::new(&t, &[]);
    // The root's round count wraps (and is renumbered) a few rounds in, among thousands of ties.
    ours.set_round(0, u32::MAX - 5);
    let mut theirs: reference::Scheduler<u32> = reference::Scheduler::new(&t, &[]);
    let (mut a, mut b) = (SharedLimits::default(), reference::SharedLimits::default());
    let mut x = 0x1234_5678u64;
    let mut clock = 0u64;
    for k in 0..200_000u32 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let leaf = NodeId(1 + (x % 1024) as usize);
        let now = Instant::from_nanos(clock);
        if ours.queued(leaf) < 16 {
            ours.enqueue(leaf, 88, k, now);
            theirs.enqueue(leaf, 88, k, now);
        }
        if k % 3 != 0 {
            assert_eq!(ours.dequeue(now, &mut a), theirs.dequeue(now, &mut b), "packet {k}");
            clock += 7;
        }
    }
    // Drain: the queues go from the tournament tree back to the heap on the way.
    loop {
        let now = Instant::from_nanos(clock);
        let got = ours.dequeue(now, &mut a);
        assert_eq!(got, theirs.dequeue(now, &mut b), "drain");
        if got.is_none() {
            break;
        }
        clock += 7;
    }
}
