use super::*;
use proptest::prelude::*;

/// An IPv4/UDP frame of `len` bytes from 10.0.0.1:`sport` to 10.0.0.2:9.
fn udp(sport: u16, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len.max(42)];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&9u16.to_be_bytes());
    f
}

fn no_mark(_: &mut u32) -> bool {
    false
}

/// Frames are identified by a number; the queue under test holds numbers.
fn queue() -> IngressQueue<u32> {
    IngressQueue::new(1 << 30, 1 << 20)
}

#[test]
fn a_sparse_flow_goes_out_before_the_bulk_queued_ahead_of_it() {
    let mut q = queue();
    let t = Instant::ZERO;
    for i in 0..500 {
        q.enqueue(1, i, (1500, 1500), t, &mut |_| panic!("no drop"));
    }
    q.enqueue(2, 9999, (84, 84), t, &mut |_| panic!("no drop"));
    let order: Vec<u32> = (0..501)
        .map_while(|_| q.dequeue(t, &mut no_mark, &mut |_| {}))
        .collect();
    let at = order.iter().position(|&i| i == 9999).unwrap();
    // A FIFO would send it 501st; a new flow waits at most for the bulk flow's quantum (two
    // frames: a frame may start while any deficit is left).
    assert!(at <= 2, "the ping went out {}th", at + 1);
    assert_eq!(order.len(), 501);
    assert!(order.iter().filter(|&&i| i != 9999).is_sorted(), "a flow's order holds");
}

#[test]
fn only_new_flows_go_ahead() {
    let mut q = queue();
    let t = Instant::ZERO;
    for i in 0..10 {
        q.enqueue(1, i, (1500, 1500), t, &mut |_| {});
    }
    // The bulk flow is new too until it has used its quantum.
    assert_eq!(q.dequeue_new(t, &mut no_mark, &mut |_| {}), Some(0));
    assert_eq!(q.dequeue_new(t, &mut no_mark, &mut |_| {}), Some(1));
    assert_eq!(q.dequeue_new(t, &mut no_mark, &mut |_| {}), None, "now an old flow");
    q.enqueue(2, 100, (84, 84), t, &mut |_| {});
    assert_eq!(q.dequeue_new(t, &mut no_mark, &mut |_| {}), Some(100));
    assert_eq!(q.dequeue_new(t, &mut no_mark, &mut |_| {}), None);
    assert_eq!(q.dequeue(t, &mut no_mark, &mut |_| {}), Some(2));
    assert_eq!(q.len(), 7);
}

#[test]
fn bulk_flows_share_by_bytes() {
    let mut q = queue();
    let t = Instant::ZERO;
    // Flow 1 sends 1500-byte frames, flow 2 500-byte ones: equal bytes means three of flow 2's
    // frames per one of flow 1's.
    for i in 0..3000 {
        q.enqueue(1, i, (1500, 1500), t, &mut |_| {});
        q.enqueue(2, 100_000 + i, (500, 500), t, &mut |_| {});
    }
    let (mut a, mut b) = (0u64, 0u64);
    for _ in 0..2000 {
        match q.dequeue(t, &mut no_mark, &mut |_| {}).unwrap() {
            i if i < 100_000 => a += 1500,
            _ => b += 500,
        }
    }
    let ratio = a as f64 / b as f64;
    assert!((0.95..=1.05).contains(&ratio), "bytes {a} against {b}");
}

#[test]
fn over_budget_the_longest_flow_loses_its_oldest_frames() {
    let mut q: IngressQueue<u32> = IngressQueue::new(1 << 30, 100);
    let t = Instant::ZERO;
    let mut dropped = Vec::new();
    for i in 0..10 {
        q.enqueue(7, 1000 + i, (100, 100), t, &mut |d| dropped.push(d));
    }
    for i in 0..200 {
        q.enqueue(3, i, (1500, 1500), t, &mut |d| dropped.push(d));
        assert!(q.len() <= 100);
    }
    // The flood's oldest frames, in order, half its backlog at a time; none of the small flow's.
    assert!(dropped.len() >= 110, "{} dropped", dropped.len());
    assert_eq!(dropped, (0..dropped.len() as u32).collect::<Vec<_>>());
    let out: Vec<u32> = (0..100)
        .map_while(|_| q.dequeue(t, &mut no_mark, &mut |_| {}))
        .collect();
    assert_eq!(out.iter().filter(|&&i| i >= 1000).count(), 10);
    assert_eq!(out.len() + dropped.len(), 210);
    assert_eq!(q.take_counts(), (dropped.len() as u64, 0));
}

#[test]
fn the_memory_budget_holds_too() {
    let mut q: IngressQueue<u32> = IngressQueue::new(15_000, 1 << 20);
    let mut dropped = 0;
    for i in 0..100 {
        q.enqueue((i % 3) as usize, i, (1500, 1500), Instant::ZERO, &mut |_| dropped += 1);
        assert!(q.memory() <= 15_000);
    }
    assert_eq!(dropped + q.len(), 100);
    assert!(
        q.len() >= 5,
        "dropping half the largest queue must leave most of the budget: {}",
        q.len()
    );
}

#[test]
fn memory_is_what_the_buffers_hold_not_the_frames_length() {
    // Short frames kept in large buffers (a super-frame buffer holding a 2100-byte frame): the
    // budget is the buffers'.
    let mut q: IngressQueue<u32> = IngressQueue::new(1 << 20, 1 << 20);
    for i in 0..100 {
        q.enqueue(1, i, (2100, 65_600), Instant::ZERO, &mut |_| {});
    }
    assert!(q.memory() <= 1 << 20);
    assert!(q.len() <= 15, "{} frames of 64 KiB buffers in 1 MiB", q.len());
}

#[test]
fn a_flow_emptied_by_a_budget_drop_starts_afresh_under_codel() {
    let mut q: IngressQueue<u32> = IngressQueue::new(100_000, 1 << 20);
    let t0 = Instant::from_secs(1);
    // Flow 1 is in CoDel's dropping state, holding one large frame.
    q.enqueue(1, 1, (60_000, 60_000), t0, &mut |_| {});
    let f = &mut q.flows[1];
    (f.dropping, f.count, f.first_above, f.drop_next) = (true, 5, Some(t0), t0);
    // Another flow's frame takes the budget: flow 1, the largest, loses its frame.
    let mut dropped = Vec::new();
    q.enqueue(2, 2, (50_000, 50_000), t0, &mut |d| dropped.push(d));
    assert_eq!(dropped, [1]);
    q.take_counts();
    // Five seconds later flow 1 returns (before the loop has visited it empty) and its frames
    // wait 6 ms (over the target) for a busy switch: a fresh flow is judged from now, not
    // dropped for the old episode.
    let back = t0 + Duration::from_secs(5);
    for k in 0..20 {
        q.enqueue(1, 100 + k, (1500, 1500), back, &mut |_| {});
    }
    let later = back + Duration::from_millis(6);
    let out: Vec<u32> = (0..21)
        .map_while(|_| q.dequeue(later, &mut no_mark, &mut |_| {}))
        .collect();
    assert_eq!(q.take_counts(), (0, 0), "dropped {} of 21", 21 - out.len());
}

#[test]
fn memory_is_bounded_by_the_frame_budget_whichever_flows_held_the_frames() {
    // A VM that moves its backlog from flow to flow must not leave every flow queue sized for
    // the whole budget.
    let mut q: IngressQueue<u32> = IngressQueue::new(1 << 30, 64);
    let t = Instant::ZERO;
    for f in 0..FLOWS {
        for i in 0..100 {
            q.enqueue(f, i, (100, 100), t, &mut |_| {});
        }
        while q.dequeue(t, &mut no_mark, &mut |_| {}).is_some() {}
    }
    assert!(q.slots.len() <= 65, "{} slots for a budget of 64 frames", q.slots.len());
}

/// A flow offered twice what the switch forwards, for `secs` simulated seconds: returns the
/// frames dropped and the wait of the last frames sent (ms).
fn overload(secs: u64, mark: bool) -> (u64, u64, f64) {
    let mut q: IngressQueue<(u32, Instant)> = IngressQueue::new(1 << 30, 1 << 20);
    let step = Duration::from_micros(100);
    let mut now = Instant::ZERO;
    let mut last_wait = 0.0;
    for i in 0..(secs * 10_000) as u32 {
        for _ in 0..2 {
            q.enqueue(5, (i, now), (1500, 1500), now, &mut |_| {});
        }
        let mut marker = |_: &mut (u32, Instant)| mark;
        if let Some((_, at)) = q.dequeue(now, &mut marker, &mut |_| {}) {
            last_wait = now.saturating_duration_since(at).as_secs_f64() * 1e3;
        }
        now = now + step;
    }
    let (dropped, marked) = q.take_counts();
    (dropped, marked, last_wait)
}

#[test]
fn codel_drops_a_flow_that_outruns_the_switch_and_the_drops_grow() {
    // An unresponsive flow at twice the rate: CoDel cannot bring its wait to the target (the
    // budget would); what must hold is that it starts dropping after an interval above target
    // and drops more the longer it lasts.
    let (one, _, _) = overload(1, false);
    let (three, _, _) = overload(3, false);
    assert!(one > 0, "no drop in a second of overload");
    assert!(three > 2 * one, "drops do not grow: {one} in 1 s, {three} in 3 s");
}

#[test]
fn codel_marks_instead_of_dropping_where_the_frame_allows() {
    let (dropped, marked, _) = overload(1, true);
    assert_eq!(dropped, 0);
    assert!(marked > 0);
}

#[test]
fn a_queue_that_drains_within_the_target_is_never_dropped() {
    let mut q = queue();
    let mut now = Instant::ZERO;
    // Bursts of 40 frames every 10 ms, drained at one frame per 100 us: each burst waits up to
    // 4 ms, under the target.
    for i in 0..100_000u32 {
        if i % 100 == 0 {
            for k in 0..40 {
                q.enqueue(1, i * 100 + k, (1500, 1500), now, &mut |_| {});
            }
        }
        q.dequeue(now, &mut no_mark, &mut |_| panic!("dropped under the target"));
        now = now + Duration::from_micros(100);
    }
    assert_eq!(q.take_counts(), (0, 0));
}

#[test]
fn a_flow_is_one_queue_and_ports_spread_flows() {
    let q: IngressQueue<u32> = queue();
    assert_eq!(q.flow_of(&udp(1000, 100)), q.flow_of(&udp(1000, 1400)));
    let buckets: std::collections::HashSet<usize> = (0..1000).map(|p| q.flow_of(&udp(p, 100))).collect();
    // 1000 flows into 1024 queues: about 630 distinct expected; a hash ignoring ports gives 1.
    assert!(buckets.len() > 550, "{} queues for 1000 flows", buckets.len());
    let mut fragment = udp(1000, 100);
    fragment[20] = 0x20; // more fragments: the ports are not read
    let mut other = udp(2000, 100);
    other[20] = 0x20;
    assert_eq!(q.flow_of(&fragment), q.flow_of(&other));
}

proptest! {
    /// Whatever is offered, malformed frames included, every frame leaves exactly once (sent or
    /// dropped), in order within its flow, and the budget holds.
    #[test]
    fn every_frame_leaves_once(
        ops in proptest::collection::vec((any::<bool>(), proptest::collection::vec(any::<u8>(), 0..80), 1u32..3000, 0u64..20_000), 1..400)
    ) {
        let mut q: IngressQueue<(usize, u32)> = IngressQueue::new(20_000, 16);
        let mut now = Instant::ZERO;
        let mut gone = Vec::new();
        let mut sent_per_flow: std::collections::HashMap<usize, u32> = Default::default();
        for (i, (push, frame, len, dt)) in ops.iter().enumerate() {
            now = now + Duration::from_micros(*dt);
            if *push {
                let f = q.flow_of(frame);
                q.enqueue(f, (f, i as u32), (*len, *len), now, &mut |d| gone.push(d.1));
                prop_assert!(q.len() <= 16 && q.bytes() <= 20_000);
            } else if let Some((f, i)) = q.dequeue(now, &mut |_| false, &mut |d| gone.push(d.1)) {
                let last = sent_per_flow.entry(f).or_insert(0);
                prop_assert!(i >= *last, "flow {} out of order", f);
                *last = i;
                gone.push(i);
            }
        }
        while let Some((_, i)) = q.dequeue(now, &mut |_| false, &mut |d| gone.push(d.1)) {
            gone.push(i);
        }
        let pushed = ops.iter().filter(|o| o.0).count();
        gone.sort_unstable();
        let before = gone.len();
        gone.dedup();
        prop_assert_eq!(before, gone.len(), "a frame left twice");
        prop_assert_eq!(gone.len(), pushed);
        prop_assert!(q.is_empty() && q.bytes() == 0);
    }
}
