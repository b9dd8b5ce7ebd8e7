//! `teamster bench sched`: the NetIOC scheduler's CPU cost, enqueue + dequeue on one core.
//!
//! The workload is the rte_sched peer's fair comparison (`shared/peers/rte_sched`, RESULTS.md, "A
//! workload on which both schedulers can be compared fairly"), built the way its `bench.c` builds
//! it so that both run the very same leaf sequence: N leaf queues of 64 packets with tail drop; a
//! closed loop that enqueues a burst of 32 packets and then dequeues a burst of 32; packets
//! charged `len + 24` bytes. Leaves come from a 2^20-entry table filled by splitmix64 from seed
//! 0x1234567: the generator first shuffles the N leaves (a Fisher-Yates permutation, drawing
//! `j < i + 1` as the high 32 bits of a draw times `i + 1`, shifted down 32), then per entry draws
//! either a uniform leaf the same way (`--dist uniform`, the default) or a Zipf (s = 1) rank by
//! inverse CDF (53-bit uniform, binary search for the first cumulative weight at or above it)
//! mapped to a leaf through the permutation (`--dist zipf`). The scheduler's clock advances by
//! each dequeued packet's time on a 100 Gbit/s virtual port, so the figure is the cost of the
//! scheduling decision, not pacing. `--backlog K` pre-loads K packets per leaf before timing
//! (the peer's `--backlog`, which counts packets in all).
//!
//! Packet metadata (always on: it is what a data plane pays, and what rte_sched pays through its
//! mbufs). Every packet owns a 64-byte [`Meta`] record (one cache line, like an `rte_mbuf`'s first
//! line) in a pool preallocated before timing, `backlog + 65536` records as the peer's mempool,
//! with a LIFO free list as a mempool's per-core cache. The scheduler queues the record's `u32`
//! index. At enqueue the harness takes a record, writes it whole (length, leaf, sequence number,
//! enqueue time, flow hash, a few mbuf-like fields), and gives it back on a tail drop; at dequeue
//! it reads the record, checks its leaf and length against the scheduler's answer and folds its
//! sequence number and queueing delay into a checksum (printed, so no read can be optimised
//! away), then frees it. Records are read once the burst of up to 32 has been dequeued, as a
//! transmit loop handles what `rte_sched_port_dequeue` returns.
//!
//! Trees: `fifo` (no scheduler: one first-in first-out queue, tail drop at 64 per leaf, the
//! baseline), `limits` (every leaf: no reservation, equal shares, a limit of 800 Gbit/s that never
//! binds: rte_sched's own semantics) and `reservations` (half the leaves reserve together half
//! the port, shares 1-100 spread over the leaves, no limits).

use nix::time::{clock_gettime, ClockId};
use serde_json::json;
use std::process::ExitCode;
use teamster_core::ioc::{NodeId, NodeSpec, Scheduler, SharedLimits, Shares, Tree};
use teamster_core::units::Bandwidth;
use teamster_core::Instant;

const BURST: usize = 32;
const QUEUE: usize = 64;
const PORT_BPS: f64 = 100e9;

/// The tree shapes the benchmark knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TreeKind {
    Limits,
    Reservations,
    /// No scheduler: one FIFO queue, the baseline the scheduler's cost is compared with.
    Fifo,
}

/// Builds a flat tree of `leaves` ports of the given kind.
fn tree(kind: TreeKind, leaves: usize) -> Tree {
    let mut t = Tree::new("uplink");
    for i in 0..leaves {
        let spec = match kind {
            TreeKind::Limits | TreeKind::Fifo => NodeSpec {
                name: format!("p{i}"),
                reservation: Bandwidth::ZERO,
                shares: Shares::NORMAL,
                limit: Some(Bandwidth::from_gbps(800)),
            },
            TreeKind::Reservations => NodeSpec {
                name: format!("p{i}"),
                reservation: if i % 2 == 0 {
                    Bandwidth::from_bps_f64(PORT_BPS * 0.5 / (leaves as f64 / 2.0).ceil())
                } else {
                    Bandwidth::ZERO
                },
                shares: Shares::new(1 + (i as u32 * 37) % 100).expect("1-100"),
                limit: None,
            },
        };
        t.add(NodeId::ROOT, spec).expect("unique names");
    }
    t
}

/// How the benchmark draws each packet's leaf (the peer's `--dist`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Dist {
    /// Every leaf equally likely.
    #[default]
    Uniform,
    /// Zipf with s = 1 over the leaves, ranks scattered over leaf ids by a random permutation.
    Zipf,
}

impl Dist {
    /// The name the peer prints in its `dist` field.
    fn name(self) -> &'static str {
        match self {
            Dist::Uniform => "uniform",
            Dist::Zipf => "zipf",
        }
    }
}

/// Entries in the leaf table (2^20, the peer's `PATH_TABLE_SIZE`).
const TABLE_BITS: u32 = 20;
/// The seed of the leaf table's generator (the peer's default `--seed`).
const SEED: u64 = 0x1234567;

/// The splitmix64 generator (Steele, Lea and Flood), as the peer draws with it.
struct SplitMix64(u64);

impl SplitMix64 {
    /// The next 64-bit draw.
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A draw below `n`: the high 32 bits scaled by `n` (multiply-shift, no modulo bias to speak of).
    fn below(&mut self, n: u32) -> u32 {
        (((self.next() >> 32) * u64::from(n)) >> 32) as u32
    }

    /// A uniform draw in [0, 1) with 53 bits.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
    }
}

/// The leaf table (leaf indices 0..n, not node ids), drawn as the module documentation says: the
/// permutation first, then one draw per entry, so that it is entry for entry the peer's table.
fn leaf_table(n: usize, dist: Dist) -> Vec<u32> {
    let n32 = u32::try_from(n).expect("at most 2^20 leaves");
    let mut rng = SplitMix64(SEED);
    let mut perm: Vec<u32> = (0..n32).collect();
    for i in (1..n).rev() {
        let j = rng.below(i as u32 + 1) as usize;
        perm.swap(i, j);
    }
    // Zipf s = 1: cumulative weights 1/(k+1), normalised (summed in rank order, as the peer does).
    let cdf: Vec<f64> = match dist {
        Dist::Uniform => Vec::new(),
        Dist::Zipf => {
            let mut sum = 0.0;
            let mut c: Vec<f64> = (0..n)
                .map(|k| {
                    sum += 1.0 / (k + 1) as f64;
                    sum
                })
                .collect();
            c.iter_mut().for_each(|x| *x /= sum);
            c
        }
    };
    (0..1usize << TABLE_BITS)
        .map(|_| match dist {
            Dist::Uniform => rng.below(n32),
            Dist::Zipf => {
                let u = rng.unit();
                // The first rank whose cumulative weight reaches u.
                let rank = cdf.partition_point(|&c| c < u).min(n - 1);
                perm[rank]
            }
        })
        .collect()
}

/// A packet's metadata record: one cache line, as the first line of an `rte_mbuf`. The harness
/// writes every field at enqueue and reads them at dequeue (see the module documentation).
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy, Default)]
struct Meta {
    /// Bytes the scheduler is charged (`pkt_len + 24`).
    len: u32,
    /// The leaf (node id) the packet was queued on.
    leaf: u32,
    /// Sequence number: packets offered before this one.
    seq: u64,
    /// Engine time of the enqueue, in nanoseconds.
    enq_ns: u64,
    /// A flow hash, as receive-side scaling would have left it.
    hash: u32,
    /// Input port, VLAN tag and offload flags, as a data plane would carry them.
    port: u16,
    vlan: u16,
    ol_flags: u64,
    /// Where the frame's bytes would start in its buffer.
    data_off: u16,
    nb_segs: u16,
    packet_type: u32,
    buf: u64,
}

const _: () = assert!(std::mem::size_of::<Meta>() == 64);

/// The metadata pool: records, the LIFO free list of their indices, and what dequeues read.
struct Pool {
    meta: Vec<Meta>,
    free: Vec<u32>,
    /// Packets offered so far (the next sequence number).
    seq: u64,
    /// Sum of sequence numbers and queueing delays read at dequeue (printed; keeps the reads).
    checksum: u64,
    /// Records whose leaf or length disagreed with the scheduler's answer (must stay 0).
    mismatched: u64,
    /// Bursts skipped because the pool had no free record (the peer's `pool_empty`).
    pool_empty: u64,
}

impl Pool {
    /// A pool of `n` records, all free, allocated and touched before timing.
    fn new(n: usize) -> Pool {
        Pool {
            meta: vec![Meta::default(); n],
            free: (0..n as u32).rev().collect(),
            seq: 0,
            checksum: 0,
            mismatched: 0,
            pool_empty: 0,
        }
    }

    /// Takes a record and writes it for a packet of `len` charged bytes to `leaf` at `now_ns`.
    #[inline]
    fn write(&mut self, leaf: u32, len: u32, now_ns: u64) -> Option<u32> {
        let idx = self.free.pop()?;
        let seq = self.seq;
        self.seq += 1;
        self.meta[idx as usize] = Meta {
            len,
            leaf,
            seq,
            enq_ns: now_ns,
            hash: (seq as u32).wrapping_mul(0x9e37_79b9),
            port: (leaf & 0xffff) as u16,
            vlan: 100,
            ol_flags: 1 << 3,
            data_off: 128,
            nb_segs: 1,
            packet_type: 0x11,
            buf: u64::from(idx) << 11,
        };
        Some(idx)
    }

    /// Reads the record of a packet the queue gave back, checks it against the queue's answer,
    /// folds it into the checksum and frees it.
    #[inline]
    fn read(&mut self, idx: u32, leaf: u32, len: u32, now_ns: u64) {
        let m = &self.meta[idx as usize];
        if m.leaf != leaf || m.len != len || m.nb_segs != 1 {
            self.mismatched += 1;
        }
        self.checksum = self
            .checksum
            .wrapping_add(m.seq)
            .wrapping_add(now_ns.wrapping_sub(m.enq_ns))
            .wrapping_add(u64::from(m.hash ^ u32::from(m.port)));
        self.free.push(idx);
    }
}

/// What the closed loop drives: the scheduler, or the FIFO baseline.
trait Queue {
    /// Packets waiting on `leaf`.
    fn queued(&self, leaf: u32) -> usize;
    /// Queues record `idx` of `len` bytes on `leaf`.
    fn enqueue(&mut self, leaf: u32, len: u32, idx: u32, now: Instant);
    /// The next packet: `(leaf, len, idx)`.
    fn dequeue(&mut self, now: Instant) -> Option<(u32, u32, u32)>;
}

/// The NetIOC scheduler with its (unused) shared limit buckets.
struct Sched(Scheduler<u32>, SharedLimits);

impl Queue for Sched {
    #[inline]
    fn queued(&self, leaf: u32) -> usize {
        self.0.queued(NodeId(leaf as usize))
    }
    #[inline]
    fn enqueue(&mut self, leaf: u32, len: u32, idx: u32, now: Instant) {
        self.0.enqueue(NodeId(leaf as usize), len, idx, now);
    }
    #[inline]
    fn dequeue(&mut self, now: Instant) -> Option<(u32, u32, u32)> {
        self.0
            .dequeue(now, &mut self.1)
            .map(|(l, len, idx)| (l.0 as u32, len, idx))
    }
}

/// No scheduler: one FIFO of `(leaf, len, idx)`, with per-leaf counts for the tail drop.
struct Fifo(std::collections::VecDeque<(u32, u32, u32)>, Vec<usize>);

impl Queue for Fifo {
    #[inline]
    fn queued(&self, leaf: u32) -> usize {
        self.1[leaf as usize]
    }
    #[inline]
    fn enqueue(&mut self, leaf: u32, len: u32, idx: u32, _: Instant) {
        self.1[leaf as usize] += 1;
        self.0.push_back((leaf, len, idx));
    }
    #[inline]
    fn dequeue(&mut self, _: Instant) -> Option<(u32, u32, u32)> {
        let (leaf, len, idx) = self.0.pop_front()?;
        self.1[leaf as usize] -= 1;
        Some((leaf, len, idx))
    }
}

/// This thread's CPU time in seconds (the steadier figure on a shared machine).
fn thread_cpu_s() -> f64 {
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(0.0, |t| t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9)
}

/// One benchmark configuration.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub kind: TreeKind,
    pub leaves: usize,
    pub pkt_len: u32,
    pub packets: u64,
    /// Packets pre-loaded in all (not per leaf).
    pub backlog: u64,
    pub dist: Dist,
}

/// Runs one configuration and returns its JSON result line.
pub fn run(c: Config) -> serde_json::Value {
    match c.kind {
        TreeKind::Fifo => {
            let fifo = Fifo(std::collections::VecDeque::new(), vec![0; c.leaves + 1]);
            drive(c, fifo)
        }
        kind => drive(
            c,
            Sched(Scheduler::new(&tree(kind, c.leaves), &[]), SharedLimits::default()),
        ),
    }
}

/// The closed loop of the module documentation over queue `q`: pre-load, warm up, time.
fn drive<Q: Queue>(c: Config, mut q: Q) -> serde_json::Value {
    // Node ids: the root is 0, leaf i is i + 1.
    let table: Vec<u32> = leaf_table(c.leaves, c.dist).into_iter().map(|l| l + 1).collect();
    let mask = (1usize << TABLE_BITS) - 1;
    let mut pool = Pool::new(c.backlog as usize + 65_536);
    let charged = c.pkt_len + 24;
    let per_packet_ns = f64::from(charged) * 8.0 / PORT_BPS * 1e9;
    let (mut clock, mut pick, mut dropped) = (0.0f64, 0usize, 0u64);
    // An optional standing backlog: offer `backlog` packets before timing.
    for _ in 0..c.backlog {
        let leaf = table[pick & mask];
        pick += 1;
        let Some(idx) = pool.write(leaf, charged, 0) else { break };
        if q.queued(leaf) < QUEUE {
            q.enqueue(leaf, charged, idx, Instant::ZERO);
        } else {
            pool.free.push(idx);
            dropped += 1;
        }
    }
    let mut out = [(0u32, 0u32, 0u32, 0u64); BURST];
    let mut step = |q: &mut Q, pool: &mut Pool, target: u64| {
        let mut done = 0u64;
        while done < target {
            let now_ns = clock as u64;
            let now = Instant::from_nanos(now_ns);
            if pool.free.len() >= BURST {
                for _ in 0..BURST {
                    let leaf = table[pick & mask];
                    pick += 1;
                    let idx = pool.write(leaf, charged, now_ns).expect("a burst's records are free");
                    if q.queued(leaf) < QUEUE {
                        q.enqueue(leaf, charged, idx, now);
                    } else {
                        pool.free.push(idx);
                        dropped += 1;
                    }
                }
            } else {
                pool.pool_empty += 1;
            }
            // Dequeue a burst, as rte_sched_port_dequeue hands one back, then handle each
            // packet's record, as a transmit loop would.
            let mut n = 0;
            while n < BURST {
                let now_ns = clock as u64;
                let Some((leaf, len, idx)) = q.dequeue(Instant::from_nanos(now_ns)) else {
                    break;
                };
                out[n] = (leaf, len, idx, now_ns);
                clock += per_packet_ns;
                n += 1;
            }
            for &(leaf, len, idx, now_ns) in &out[..n] {
                pool.read(idx, leaf, len, now_ns);
            }
            done += n as u64;
        }
        done
    };
    step(&mut q, &mut pool, c.packets / 50 + 100_000);
    let (w0, c0) = (std::time::Instant::now(), thread_cpu_s());
    let done = step(&mut q, &mut pool, c.packets);
    let (wall, cpu) = (w0.elapsed().as_secs_f64(), thread_cpu_s() - c0);
    assert_eq!(
        pool.mismatched, 0,
        "a dequeued packet's metadata disagreed with the scheduler"
    );
    json!({
        "impl": "teamster",
        "tree": match c.kind { TreeKind::Limits => "limits", TreeKind::Reservations => "reservations", TreeKind::Fifo => "fifo" },
        "leaves": c.leaves,
        "pkt_len": c.pkt_len,
        "dist": c.dist.name(),
        "burst": BURST,
        "qsize": QUEUE,
        "packets": done,
        "mpps": done as f64 / wall / 1e6,
        "ns_per_pkt": wall * 1e9 / done as f64,
        "cpu_ns_per_pkt": cpu * 1e9 / done as f64,
        "cpu_share": cpu / wall,
        "dropped": dropped,
        "pool_empty": pool.pool_empty,
        "backlog": c.backlog,
        "meta_bytes": std::mem::size_of::<Meta>(),
        "checksum": pool.checksum,
    })
}

/// `teamster bench sched`: one JSON line per configuration, or a table.
pub fn sched_cmd(
    kinds: &[TreeKind],
    leaves: &[usize],
    lens: &[u32],
    dists: &[Dist],
    packets: u64,
    backlog_per_leaf: u64,
    json_out: bool,
) -> ExitCode {
    if leaves.iter().any(|&n| n == 0 || n > 1 << 20) || lens.iter().any(|&l| !(60..=9000).contains(&l)) || packets == 0
    {
        eprintln!("error: --leaves must be 1 to 1048576, --pkt-len 60 to 9000 bytes, --packets above 0");
        return ExitCode::from(2);
    }
    if !json_out {
        println!(
            "{:<13} {:>8} {:>7} {:>8} {:>9} {:>11} {:>15}",
            "tree", "dist", "leaves", "pkt_len", "Mpps", "ns/packet", "CPU ns/packet"
        );
    }
    for &kind in kinds {
        for &dist in dists {
            for &n in leaves {
                for &len in lens {
                    let r = run(Config {
                        kind,
                        leaves: n,
                        pkt_len: len,
                        packets,
                        backlog: backlog_per_leaf * n as u64,
                        dist,
                    });
                    if json_out {
                        println!("{r}");
                        continue;
                    }
                    println!(
                        "{:<13} {:>8} {:>7} {:>8} {:>9.2} {:>11.1} {:>15.1}",
                        r["tree"].as_str().unwrap_or(""),
                        dist.name(),
                        n,
                        len,
                        r["mpps"].as_f64().unwrap_or(0.0),
                        r["ns_per_pkt"].as_f64().unwrap_or(0.0),
                        r["cpu_ns_per_pkt"].as_f64().unwrap_or(0.0)
                    );
                }
            }
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An FNV-style hash over the table (offset 1469598103934665603), to compare it whole with the
    /// peer's.
    fn fnv(t: &[u32]) -> u64 {
        t.iter().fold(1_469_598_103_934_665_603u64, |h, &p| {
            (h ^ u64::from(p)).wrapping_mul(0x100_0000_01b3)
        })
    }

    /// The first entries and a hash of the whole table, as the rte_sched peer's `bench.c`
    /// (seed 0x1234567, TC mode one) builds them: both harnesses offer the same leaf sequence.
    #[test]
    fn the_leaf_table_is_the_peers() {
        for (n, dist, first, hash) in [
            (1024, Dist::Uniform, [905, 657, 567, 737], 8_031_510_455_729_880_689u64),
            (1024, Dist::Zipf, [817, 65, 90, 625], 14_166_065_016_249_993_387),
            (4096, Dist::Uniform, [1962, 2166, 295, 715], 1_575_423_432_407_958_982),
            (4096, Dist::Zipf, [2797, 2249, 3207, 3815], 6_266_348_436_352_927_590),
        ] {
            let t = leaf_table(n, dist);
            assert_eq!(t[..4], first, "{n} {dist:?}");
            assert_eq!(fnv(&t), hash, "{n} {dist:?}");
        }
    }

    /// Zipf s = 1 over 1024 leaves: the hottest leaf gets 1/H(1024) of the packets (about 13%).
    #[test]
    fn zipf_is_skewed_as_s_equals_one() {
        let t = leaf_table(1024, Dist::Zipf);
        let mut counts = vec![0usize; 1024];
        t.iter().for_each(|&l| counts[l as usize] += 1);
        let top = *counts.iter().max().expect("leaves");
        let h: f64 = (1..=1024).map(|k| 1.0 / f64::from(k)).sum();
        let want = t.len() as f64 / h;
        assert!((top as f64 - want).abs() < 0.02 * want, "{top} vs {want}");
    }

    /// Every configuration's loop runs, the metadata checks out and both trees answer.
    #[test]
    fn a_short_run_checks_its_metadata() {
        for kind in [TreeKind::Limits, TreeKind::Fifo, TreeKind::Reservations] {
            for dist in [Dist::Uniform, Dist::Zipf] {
                let r = run(Config {
                    kind,
                    leaves: 64,
                    pkt_len: 64,
                    packets: 2000,
                    backlog: 16 * 64,
                    dist,
                });
                assert!(r["packets"].as_u64().unwrap() >= 2000, "{r}");
                assert_eq!(r["meta_bytes"], 64);
            }
        }
    }
}
