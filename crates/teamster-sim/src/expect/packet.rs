//! Judging the packet-mode expectations: per-port rates, admission refusals, RR latency.

use super::{ExpectSpec, Verdict};
use crate::run::RunOutput;

/// Judges a packet-mode expectation (the fluid kinds are judged in the parent module).
pub fn evaluate(spec: &ExpectSpec, run: &RunOutput) -> Verdict {
    let index = |name: &str| run.ports.iter().position(|p| p == name).unwrap_or(0);
    let mean = |i: usize, from: f64, to: f64| {
        let rows: Vec<_> = run.rows.iter().filter(|r| r.t_s >= from && r.t_s < to).collect();
        rows.iter().map(|r| r.delivered_tx[i]).sum::<f64>() / rows.len().max(1) as f64
    };
    let (name, held, detail) = match spec {
        ExpectSpec::PortRateNear {
            port,
            from_s,
            to_s,
            rate,
            tolerance,
            name,
        } => {
            let got = mean(index(port), *from_s, *to_s);
            let want = rate.bps_f64();
            (
                name.clone().unwrap_or(format!(
                    "{port} gets {rate} ±{} from {from_s:.0} to {to_s:.0} s",
                    crate::run::pct(*tolerance)
                )),
                want > 0.0 && (got - want).abs() <= tolerance * want,
                format!(
                    "{port} averaged {:.3} Gbps ({:+.2}% of {rate})",
                    got / 1e9,
                    (got - want) / want * 100.0
                ),
            )
        }
        ExpectSpec::PortRateAtLeast {
            ports,
            from_s,
            to_s,
            min,
            name,
        } => {
            let rows: Vec<_> = run
                .rows
                .iter()
                .filter(|r| r.t_s >= *from_s && to_s.is_none_or(|e| r.t_s < e))
                .collect();
            let mut worst = (f64::INFINITY, String::new(), 0.0);
            for p in ports {
                let i = index(p);
                for r in &rows {
                    if r.delivered_tx[i] < worst.0 {
                        worst = (r.delivered_tx[i], p.clone(), r.t_s);
                    }
                }
            }
            (
                name.clone().unwrap_or(format!(
                    "each of {} ports gets at least {min} every second from {from_s:.0} s",
                    ports.len()
                )),
                !rows.is_empty() && worst.0 >= min.bps_f64(),
                format!(
                    "minimum {:.0} Mbps ({} at {:.0} s) over {} s",
                    worst.0 / 1e6,
                    worst.1,
                    worst.2,
                    rows.len()
                ),
            )
        }
        ExpectSpec::AdmissionRejected { node, at_s, name } => {
            let hit = run
                .rejections
                .iter()
                .find(|(t, e)| (t - at_s).abs() < 1e-6 && e.contains(&format!("`{node}`")));
            (
                name.clone()
                    .unwrap_or(format!("admission control rejects the change to {node} at {at_s:.0} s")),
                hit.is_some(),
                hit.map_or_else(
                    || {
                        format!(
                            "no rejection naming {node} at {at_s:.0} s ({} rejections in all)",
                            run.rejections.len()
                        )
                    },
                    |(_, e)| format!("rejected: {e}"),
                ),
            )
        }
        ExpectSpec::LatencyAtMost {
            port,
            percentile,
            from_s,
            to_s,
            max_us,
            name,
        } => {
            let (q, n) = latency(run, index(port), *percentile, *from_s, *to_s);
            (
                name.clone().unwrap_or(format!(
                    "{port} p{percentile:.0} latency at most {max_us:.0} µs from {from_s:.0} to {to_s:.0} s"
                )),
                n > 0 && q <= *max_us,
                format!("p{percentile:.0} {q:.1} µs over {n} transactions"),
            )
        }
        ExpectSpec::LatencyRatio {
            port,
            percentile,
            faster,
            slower,
            factor,
            name,
        } => {
            let (f, nf) = latency(run, index(port), *percentile, faster[0], faster[1]);
            let (s, ns) = latency(run, index(port), *percentile, slower[0], slower[1]);
            (
                name.clone().unwrap_or(format!(
                    "{port} p{percentile:.0} latency over {:.0}-{:.0} s is at least {factor}x that over {:.0}-{:.0} s",
                    slower[0], slower[1], faster[0], faster[1]
                )),
                nf > 0 && ns > 0 && s >= factor * f,
                format!(
                    "p{percentile:.0}: {s:.1} µs ({ns} transactions) vs {f:.1} µs ({nf} transactions): {:.1}x",
                    s / f
                ),
            )
        }
        _ => unreachable!("fluid kinds are judged by the parent module"),
    };
    Verdict { name, held, detail }
}

/// The `q`-th percentile of port `i`'s RR latencies completed in [from, to), and their count.
pub fn latency(run: &RunOutput, i: usize, q: f64, from: f64, to: f64) -> (f64, usize) {
    let mut v: Vec<f64> = run.latencies.get(i).map_or(Vec::new(), |l| {
        l.iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .map(|(_, x)| *x)
            .collect()
    });
    if v.is_empty() {
        return (f64::NAN, 0);
    }
    v.sort_by(f64::total_cmp);
    let k = ((q / 100.0) * (v.len() - 1) as f64).round() as usize;
    (v[k], v.len())
}
