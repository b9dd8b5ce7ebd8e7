//! A what-if's answer second by second, for charts: each port's measured, modelled and
//! predicted send rate on one time axis, and each uplink's send rate in the model of the past
//! and with the change. A second's value is the mean of the run's steps within it.

use crate::run::RunOutput;
use crate::scenario::Scenario;
use serde::Serialize;

/// A port's rates a second, bits/s (None where it has none: measured for a port the change
/// adds, predicted for one it removes).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PortSeries {
    pub name: String,
    pub reservation_bps: f64,
    pub measured: Vec<Option<f64>>,
    pub baseline: Vec<Option<f64>>,
    pub predicted: Vec<Option<f64>>,
}

/// An uplink's send rate a second, bits/s, in both runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UplinkSeries {
    pub name: String,
    /// Its capacity in the past, and with the change (another, for an uplink-capacity change).
    pub capacity_bps: f64,
    pub predicted_capacity_bps: f64,
    pub baseline: Vec<f64>,
    pub predicted: Vec<f64>,
}

/// The answer a second at a time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Series {
    pub t_s: Vec<f64>,
    pub ports: Vec<PortSeries>,
    pub uplinks: Vec<UplinkSeries>,
}

/// `out`'s per-step values (`value(row)`) as `secs` per-second means; a second without a step
/// holds the last value before it.
fn per_second(out: &RunOutput, secs: usize, value: impl Fn(&crate::run::Row) -> f64) -> Vec<f64> {
    let mut sum = vec![0.0; secs];
    let mut n = vec![0u32; secs];
    for r in &out.rows {
        let i = r.t_s.max(0.0) as usize;
        if i < secs {
            sum[i] += value(r);
            n[i] += 1;
        }
    }
    let mut last = 0.0;
    sum.iter()
        .zip(&n)
        .map(|(s, k)| {
            if *k > 0 {
                last = s / f64::from(*k);
            }
            last
        })
        .collect()
}

impl Series {
    /// The series of `secs` seconds from the measured rates (by port), the changed scenario (for
    /// reservations) and the two runs.
    pub fn new(
        measured: &[(String, Vec<f64>)],
        changed: &Scenario,
        before: &RunOutput,
        after: &RunOutput,
        secs: usize,
    ) -> Series {
        let port = |out: &RunOutput, name: &str| {
            out.ports
                .iter()
                .position(|p| p == name)
                .map(|i| per_second(out, secs, |r| r.delivered_tx[i]))
        };
        let spread = |v: Option<Vec<f64>>| match v {
            Some(v) => v.into_iter().map(Some).collect(),
            None => vec![None; secs],
        };
        let mut names: Vec<&str> = measured.iter().map(|(n, _)| n.as_str()).collect();
        for p in &after.ports {
            if !names.contains(&p.as_str()) {
                names.push(p);
            }
        }
        let ports = names
            .into_iter()
            .map(|name| PortSeries {
                name: name.to_string(),
                reservation_bps: changed
                    .file
                    .ports
                    .iter()
                    .find(|p| p.name == name)
                    .map_or(0.0, |p| p.reservation.bps_f64()),
                measured: spread(
                    measured
                        .iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, v)| v.iter().copied().take(secs).collect()),
                ),
                baseline: spread(port(before, name)),
                predicted: spread(port(after, name)),
            })
            .collect();
        let uplinks = before
            .uplinks
            .iter()
            .enumerate()
            .map(|(i, name)| UplinkSeries {
                name: name.clone(),
                capacity_bps: before.capacities.get(i).copied().unwrap_or(0.0),
                predicted_capacity_bps: after
                    .uplinks
                    .iter()
                    .position(|u| u == name)
                    .and_then(|j| after.capacities.get(j).copied())
                    .unwrap_or(0.0),
                baseline: per_second(before, secs, |r| r.uplink_tx[i]),
                predicted: match after.uplinks.iter().position(|u| u == name) {
                    Some(j) => per_second(after, secs, |r| r.uplink_tx[j]),
                    None => vec![0.0; secs],
                },
            })
            .collect();
        Series {
            t_s: (0..secs).map(|t| t as f64).collect(),
            ports,
            uplinks,
        }
    }
}
