//! Receive mode: one host's receive (and send) path, frame by frame, on cores with stated
//! costs; the seed's NIC experiments (`nic-technology-vsphere.txt`) as variants of one setup.
//!
//! Model. TCP streams, each with a window of segments in flight, cross one link of the NIC's
//! speed (frames with their 24 bytes of preamble, gap and FCS). The NIC steers each frame to a
//! receive queue with the engine's own code: one queue, NetQueue filters
//! ([`teamster_core::rx::netqueue`]: VM MACs, or VXLAN inner MACs; placed evenly or packed by
//! Dynamic NetQueue every `packing_interval_ms`), or RSS ([`teamster_core::rx::RssConfig`]:
//! Toeplitz over the real frame's outer or inner headers). A full queue drops the frame.
//! Each queue has its own core. A core asleep is woken `coalesce_us` after a frame reaches its
//! queue (interrupt moderation) and pays `wakeup`; it then polls up to `budget` frames at a
//! time, paying per frame `rx` (+`rx_byte`), `decap` for VXLAN, `checksum_byte` where the NIC
//! does not verify checksums, `gro` per segment for software GRO; the batch's segments are
//! coalesced by the real [`teamster_core::offload::Gro`] (GRO, or LRO in the NIC, where the
//! driver then pays `rx` per coalesced frame); each resulting frame pays `switch`, and `copy`
//! (+`copy_byte`) into the VM, or with SplitRx `handoff` to the VM's worker thread (its own
//! core, which pays `wakeup` when woken and the copy). The batch's frames leave the core when
//! the batch is done. A VM's vCPUs (by flow with guest RSS, else vCPU 0) each consume their
//! frames at `guest` (+`guest_byte`); a consumed frame's segments leave their stream's window,
//! which lets the sender send more. Send mode: each VM's send thread (a host core) takes TSO
//! super-frames of `tso_segments` segments and pays `switch` and `tx` (+`encap` for VXLAN) per
//! super-frame when the NIC segments, or per segment `segment` (+`segment_byte`), `encap` and
//! `tx` when it must cut them itself; the guest's own work, `guest` (+`guest_byte`) per
//! super-frame, is counted but not queued (a vCPU is never the limit there); the wire sends
//! segments in order, and a segment sent leaves its window. The send side's transmit
//! scheduler (the default's FIFO or NetIOC's per-port turns), the guests' moderated completion
//! interrupts and the ACKs are in [`engine`]'s `send` module, which opens with that model. A
//! ping probe (if `[ping]`) goes to VM 0 through the same queues and vCPU 0; its round trip is
//! taken as twice the measured one-way receive latency (the reply crossing an identical host).
//!
//! Measured after the warm-up: TCP payload delivered (Gbps), hypervisor cores busy (queues,
//! workers, send threads), guest cores busy, host cores per Gbps, queues that took frames,
//! drops, ping. Not modelled: ACK traffic and TCP's congestion control (the window is fixed),
//! cache effects beyond the per-byte costs, cores shared by several threads.
//!
//! Costs. The defaults are Teamster's own stages, from its benchmarks on the development
//! machine (`cargo bench -p teamster-core --bench core -- rx/`): `checksum_byte` 0.14 ns
//! (6.9 GiB/s), `gro` 540 ns per segment (45 segments of 1448 B in 24 µs, checksum verified),
//! `segment_byte` 0.21 ns (64 KiB cut at 4.8 GiB/s, checksums included) less the checksum;
//! and the live data plane's per-frame costs (`bench/live/RESULTS.md`: 2.4-8.2 µs per frame
//! through AF_PACKET, of which `rx`, `switch` and `copy` take the low end). The seed's
//! scenarios state their own costs for the seed's vSphere hosts, fitted where the file says
//! to the seed's baseline figure; the figures compared with the seed's improvements are the
//! model's output.

pub mod engine;
pub mod flows;
pub mod scenario;
#[cfg(test)]
mod send_tests;
#[cfg(test)]
mod tests;

pub use engine::Measured;
pub use scenario::{resolve, ReceivePlan};

use crate::expect::Verdict;
use crate::run::{Row, RunOutput};
use scenario::{Compare, Expect, Metric};

/// Every variant's figures, in the file's order.
#[derive(Debug, Clone)]
pub struct ReceiveRun {
    pub variants: Vec<(String, Measured)>,
}

/// Runs each variant of the plan.
pub fn run(plan: &ReceivePlan) -> Result<ReceiveRun, String> {
    let h = &plan.header;
    let ns = |ms: f64| (ms * 1e6) as u64;
    let mut variants = Vec::new();
    for (name, setup) in &plan.variants {
        let m = engine::run(setup, h.seed, ns(h.duration_ms), ns(plan.warmup_ms()))
            .map_err(|e| format!("variant `{name}`: {e}"))?;
        variants.push((name.clone(), m));
    }
    Ok(ReceiveRun { variants })
}

impl ReceiveRun {
    fn metric(&self, variant: &str, m: Metric) -> f64 {
        let v = &self.variants.iter().find(|(n, _)| n == variant).expect("checked").1;
        match m {
            Metric::Throughput => v.throughput_gbps,
            Metric::HostCpu => v.host_cpu,
            Metric::CpuPerGbps => v.cpu_per_gbps,
            Metric::TotalCpu => v.host_cpu + v.guest_cpu,
            Metric::Ping => v.ping_us.unwrap_or(f64::NAN),
            Metric::QueuesUsed => f64::from(v.queues_used),
            Metric::SendLatency => v.send_latency_us.unwrap_or(f64::NAN),
            Metric::GuestIrqs => v.guest_irqs_per_s / 1e3,
        }
    }

    /// The run as rows for the report: one "port" per variant, its delivered throughput per ms.
    pub fn output(&self) -> RunOutput {
        let names: Vec<String> = self.variants.iter().map(|(n, _)| n.clone()).collect();
        let mut out = RunOutput::new(Vec::new(), Vec::new(), names);
        let buckets = self.variants.iter().map(|(_, m)| m.series.len()).max().unwrap_or(0);
        for b in 0..buckets {
            let d: Vec<f64> = self
                .variants
                .iter()
                .map(|(_, m)| m.series.get(b).copied().unwrap_or(0.0) * 1e9)
                .collect();
            out.rows.push(Row {
                t_s: b as f64 / 1e3,
                uplink_tx: Vec::new(),
                uplink_rx: Vec::new(),
                offered_tx: vec![0.0; d.len()],
                offered_rx: vec![0.0; d.len()],
                delivered_rx: vec![0.0; d.len()],
                delivered_tx: d,
            });
        }
        for (name, m) in &self.variants {
            for (t, e) in &m.events {
                out.events.push((*t, format!("{name}: {e}")));
            }
        }
        out
    }
}

fn unit(m: Metric) -> &'static str {
    match m {
        Metric::Throughput => " Gbps",
        Metric::HostCpu => " cores",
        Metric::CpuPerGbps => " cores/Gbps",
        Metric::TotalCpu => " cores",
        Metric::Ping => " us",
        Metric::QueuesUsed => " queues",
        Metric::SendLatency => " us",
        Metric::GuestIrqs => "k/s",
    }
}

/// Judges one expectation, stating the seed's figure and the simulated one side by side.
pub fn evaluate(x: &Expect, run: &ReceiveRun) -> Verdict {
    let value = run.metric(&x.variant, x.metric);
    let (sim, what, u) = match (&x.to, x.compare) {
        (Some(to), Compare::Ratio) => (
            value / run.metric(to, x.metric),
            format!("{} of `{}` / `{to}`", x.metric.name(), x.variant),
            "x",
        ),
        (Some(to), Compare::Difference) => (
            value - run.metric(to, x.metric),
            format!("{} of `{}` - `{to}`", x.metric.name(), x.variant),
            unit(x.metric),
        ),
        (None, _) => (value, format!("{} of `{}`", x.metric.name(), x.variant), unit(x.metric)),
    };
    let (held, bound) = match (x.seed, x.tolerance) {
        (Some(seed), Some(tol)) => (
            (sim - seed).abs() <= tol * seed,
            format!("within {}%", (tol * 1000.0).round() / 10.0),
        ),
        _ => (
            x.min.is_none_or(|m| sim >= m) && x.max.is_none_or(|m| sim <= m),
            format!(
                "in [{}, {}]",
                x.min.map_or("-".into(), |m| format!("{m}")),
                x.max.map_or("-".into(), |m| format!("{m}"))
            ),
        ),
    };
    let seed = x.seed.map_or_else(|| "-".to_string(), |s| format!("{s}{u}"));
    let source = if x.source.is_empty() {
        String::new()
    } else {
        format!(" ({})", x.source)
    };
    Verdict {
        name: what,
        held: held && sim.is_finite(),
        detail: format!(
            "seed {seed}{source}, simulated {sim:.prec$}{u}, {bound}",
            prec = if u == "x" { 3 } else { 2 }
        ),
    }
}
