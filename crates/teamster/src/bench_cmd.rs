//! `teamster bench sched`: the NetIOC scheduler's CPU cost, enqueue + dequeue on one core.
//!
//! The workload follows the rte_sched peer's fair comparison (`shared/peers/rte_sched`): N leaf
//! queues of 64 packets with tail drop; a closed loop that enqueues a burst of 32 packets to
//! leaves drawn uniformly (a 2^20-entry table filled by splitmix64 from seed 0x1234567) and then
//! dequeues a burst of 32; packets charged `len + 24` bytes. The scheduler's clock advances by
//! each dequeued packet's time on a 100 Gbit/s virtual port, so the figure is the cost of the
//! scheduling decision, not pacing. Each packet carries a `u32` buffer index, as a data plane's
//! would. `--backlog K` pre-loads K packets per leaf before timing (the peer's `--backlog`).
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

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn thread_cpu_s() -> f64 {
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(0.0, |t| t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9)
}

/// Runs one configuration and returns its JSON result line.
pub fn run(kind: TreeKind, leaves: usize, pkt_len: u32, packets: u64, backlog: u64) -> serde_json::Value {
    if kind == TreeKind::Fifo {
        return run_fifo(leaves, pkt_len, packets, backlog);
    }
    let t = tree(kind, leaves);
    let mut s: Scheduler<u32> = Scheduler::new(&t, &[]);
    let mut shared = SharedLimits::default();
    let mut seed = 0x1234567u64;
    let table: Vec<u32> = (0..1 << 20)
        .map(|_| (splitmix64(&mut seed) % leaves as u64) as u32 + 1)
        .collect();
    let charged = pkt_len + 24;
    let per_packet_ns = f64::from(charged) * 8.0 / PORT_BPS * 1e9;
    let (mut clock, mut pick, mut dropped) = (0.0f64, 0usize, 0u64);
    // An optional standing backlog: pre-load `backlog` packets before timing.
    for k in 0..backlog {
        let leaf = NodeId(table[pick & ((1 << 20) - 1)] as usize);
        pick += 1;
        if s.queued(leaf) < QUEUE {
            s.enqueue(leaf, charged, k as u32, Instant::ZERO);
        }
    }
    let mut step = |s: &mut Scheduler<u32>, target: u64| {
        let mut done = 0u64;
        while done < target {
            let now = Instant::from_nanos(clock as u64);
            for _ in 0..BURST {
                let leaf = NodeId(table[pick & ((1 << 20) - 1)] as usize);
                pick += 1;
                if s.queued(leaf) < QUEUE {
                    s.enqueue(leaf, charged, pick as u32, now);
                } else {
                    dropped += 1;
                }
            }
            for _ in 0..BURST {
                let now = Instant::from_nanos(clock as u64);
                match s.dequeue(now, &mut shared) {
                    Some(_) => {
                        clock += per_packet_ns;
                        done += 1;
                    }
                    None => break,
                }
            }
        }
        done
    };
    step(&mut s, packets / 50 + 100_000);
    let (w0, c0) = (std::time::Instant::now(), thread_cpu_s());
    let done = step(&mut s, packets);
    let (wall, cpu) = (w0.elapsed().as_secs_f64(), thread_cpu_s() - c0);
    json!({
        "impl": "teamster",
        "tree": match kind { TreeKind::Limits => "limits", TreeKind::Reservations => "reservations", TreeKind::Fifo => "fifo" },
        "leaves": leaves,
        "pkt_len": pkt_len,
        "burst": BURST,
        "qsize": QUEUE,
        "packets": done,
        "mpps": done as f64 / wall / 1e6,
        "ns_per_pkt": wall * 1e9 / done as f64,
        "cpu_ns_per_pkt": cpu * 1e9 / done as f64,
        "cpu_share": cpu / wall,
        "dropped": dropped,
        "backlog": backlog,
    })
}

/// The same closed loop through one FIFO queue (per-leaf counts for the tail drop): the cost of
/// queueing without scheduling.
fn run_fifo(leaves: usize, pkt_len: u32, packets: u64, backlog: u64) -> serde_json::Value {
    let mut seed = 0x1234567u64;
    let table: Vec<u32> = (0..1 << 20)
        .map(|_| (splitmix64(&mut seed) % leaves as u64) as u32)
        .collect();
    let mut queue: std::collections::VecDeque<(u32, u32)> = std::collections::VecDeque::new();
    let mut per_leaf = vec![0usize; leaves];
    let (mut pick, mut dropped) = (0usize, 0u64);
    let push = |queue: &mut std::collections::VecDeque<(u32, u32)>,
                per_leaf: &mut Vec<usize>,
                pick: &mut usize,
                dropped: &mut u64| {
        let leaf = table[*pick & ((1 << 20) - 1)];
        *pick += 1;
        if per_leaf[leaf as usize] < QUEUE {
            per_leaf[leaf as usize] += 1;
            queue.push_back((leaf, pkt_len + 24));
        } else {
            *dropped += 1;
        }
    };
    for _ in 0..backlog {
        push(&mut queue, &mut per_leaf, &mut pick, &mut dropped);
    }
    let mut step = |target: u64, queue: &mut std::collections::VecDeque<(u32, u32)>, per_leaf: &mut Vec<usize>| {
        let mut done = 0u64;
        while done < target {
            for _ in 0..BURST {
                push(queue, per_leaf, &mut pick, &mut dropped);
            }
            for _ in 0..BURST {
                match queue.pop_front() {
                    Some((leaf, _)) => {
                        per_leaf[leaf as usize] -= 1;
                        done += 1;
                    }
                    None => break,
                }
            }
        }
        done
    };
    step(packets / 50 + 100_000, &mut queue, &mut per_leaf);
    let (w0, c0) = (std::time::Instant::now(), thread_cpu_s());
    let done = step(packets, &mut queue, &mut per_leaf);
    let (wall, cpu) = (w0.elapsed().as_secs_f64(), thread_cpu_s() - c0);
    json!({
        "impl": "teamster", "tree": "fifo", "leaves": leaves, "pkt_len": pkt_len, "burst": BURST, "qsize": QUEUE,
        "packets": done, "mpps": done as f64 / wall / 1e6, "ns_per_pkt": wall * 1e9 / done as f64,
        "cpu_ns_per_pkt": cpu * 1e9 / done as f64, "cpu_share": cpu / wall, "backlog": backlog,
    })
}

/// `teamster bench sched`: one JSON line per configuration, or a table.
pub fn sched_cmd(
    kinds: &[TreeKind],
    leaves: &[usize],
    lens: &[u32],
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
            "{:<13} {:>7} {:>8} {:>9} {:>11} {:>15}",
            "tree", "leaves", "pkt_len", "Mpps", "ns/packet", "CPU ns/packet"
        );
    }
    for &kind in kinds {
        for &n in leaves {
            for &len in lens {
                let r = run(kind, n, len, packets, backlog_per_leaf * n as u64);
                if json_out {
                    println!("{r}");
                } else {
                    println!(
                        "{:<13} {:>7} {:>8} {:>9.2} {:>11.1} {:>15.1}",
                        r["tree"].as_str().unwrap_or(""),
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
