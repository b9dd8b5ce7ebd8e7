//! Expectations: what a scenario states about its own run, checked against the recorded rows.
//!
//! "Total" means the total offered send rate of all ports, summed per row; "moves" are
//! Load-Based Teaming moves (failover moves are not counted), numbered from 1. Each
//! expectation has a default name, which `name = "..."` overrides.
//!
//! | kind | holds when |
//! |---|---|
//! | `uplink-idle-while-total-below` | `uplink` carries at most `tolerance` (default 0) in every row whose total is below `total` |
//! | `move-when-uplink-passes` | move `move` leaves `uplink`, its window mean was over `threshold`, and it comes at or after the first row where `uplink` passed `threshold` of capacity, within `within_s` (default 60) |
//! | `move-after-total-passes` | move `move` comes at or after the first row whose total passed `total` (and within `within_s`, if given) |
//! | `uplinks-balanced` | from `from_s` on, the uplinks' mean send utilisations differ by at most `tolerance` of the largest |
//! | `delivered-matches-baseline` | from `from_s` on, the mean total delivered (send + receive) is within `tolerance` of the `baseline` scenario's |
//! | `moves-spaced` | no two moves are less than `min_s` apart |
//! | `delivered-at-most` | no row delivers more than `limit` in total (send) |
//! | `move-count` | the number of moves is between `min` and `max` |
//! | `uplink-utilisation-at-most` | from `from_s` (default 0) to `to_s` (default the end), `uplink`'s send and receive stay at or under `max` of its capacity in every row |
//! | `port-rate-near` | packet mode: `port`'s mean delivered rate over [`from_s`, `to_s`) is within `tolerance` (a fraction) of `rate` |
//! | `port-rate-at-least` | packet mode: each of `ports` delivers at least `min` in every row from `from_s` (to `to_s`) |
//! | `admission-rejected` | packet mode: a change to `node` at `at_s` was refused by admission control |
//! | `latency-at-most` | packet mode: the `percentile` (0-100) of `port`'s TCP_RR latency over [`from_s`, `to_s`) is at most `max_us` |
//! | `latency-ratio` | packet mode: `port`'s `percentile` latency over `slower` ([from, to]) is at least `factor` times that over `faster` |
//! | `delivered-fraction-at-least` | from `from_s` to `to_s` (defaults: the whole run), every row delivers at least `fraction` of what was offered (send + receive) |

use crate::run::{gbps, pct, RunOutput};
use serde::{Deserialize, Serialize};
use std::path::Path;

mod packet;
pub use packet::latency;
use teamster_core::units::Bandwidth;

/// An expectation as written in a scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum ExpectSpec {
    UplinkIdleWhileTotalBelow {
        uplink: String,
        total: Bandwidth,
        #[serde(default)]
        tolerance: Bandwidth,
        name: Option<String>,
    },
    MoveWhenUplinkPasses {
        #[serde(rename = "move")]
        nth: usize,
        uplink: String,
        threshold: f64,
        within_s: Option<f64>,
        name: Option<String>,
    },
    MoveAfterTotalPasses {
        #[serde(rename = "move")]
        nth: usize,
        total: Bandwidth,
        within_s: Option<f64>,
        name: Option<String>,
    },
    UplinksBalanced {
        from_s: f64,
        tolerance: f64,
        name: Option<String>,
    },
    DeliveredMatchesBaseline {
        baseline: String,
        from_s: f64,
        tolerance: f64,
        name: Option<String>,
    },
    MovesSpaced {
        min_s: f64,
        name: Option<String>,
    },
    DeliveredAtMost {
        limit: Bandwidth,
        name: Option<String>,
    },
    MoveCount {
        min: usize,
        max: usize,
        name: Option<String>,
    },
    UplinkUtilisationAtMost {
        uplink: String,
        max: f64,
        from_s: Option<f64>,
        to_s: Option<f64>,
        name: Option<String>,
    },
    DeliveredFractionAtLeast {
        fraction: f64,
        from_s: Option<f64>,
        to_s: Option<f64>,
        name: Option<String>,
    },
    PortRateNear {
        port: String,
        from_s: f64,
        to_s: f64,
        rate: Bandwidth,
        tolerance: f64,
        name: Option<String>,
    },
    PortRateAtLeast {
        ports: Vec<String>,
        from_s: f64,
        to_s: Option<f64>,
        min: Bandwidth,
        name: Option<String>,
    },
    AdmissionRejected {
        node: String,
        at_s: f64,
        name: Option<String>,
    },
    LatencyAtMost {
        port: String,
        percentile: f64,
        from_s: f64,
        to_s: f64,
        max_us: f64,
        name: Option<String>,
    },
    LatencyRatio {
        port: String,
        percentile: f64,
        faster: [f64; 2],
        slower: [f64; 2],
        factor: f64,
        name: Option<String>,
    },
}

/// The verdict on one expectation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    pub name: String,
    pub held: bool,
    pub detail: String,
}

/// The names a scenario defines, for checking expectations before anything runs.
#[derive(Debug, Clone, Default)]
pub struct Names {
    pub uplinks: Vec<String>,
    pub ports: Vec<String>,
    /// NetIOC classes, pools and ports (packet mode).
    pub nodes: Vec<String>,
}

impl ExpectSpec {
    /// Checks names and numbers against the scenario before anything runs.
    pub fn check(&self, names: &Names, dir: &Path) -> Result<(), String> {
        let uplink = |name: &str| {
            if names.uplinks.iter().any(|u| u == name) {
                Ok(())
            } else {
                Err(format!("uplink: no uplink named `{name}`"))
            }
        };
        let port = |k: &str, name: &str| {
            if names.ports.iter().any(|p| p == name) {
                Ok(())
            } else {
                Err(format!("{k}: no port named `{name}`"))
            }
        };
        let percentile = |p: f64| {
            if (0.0..=100.0).contains(&p) {
                Ok(())
            } else {
                Err(format!("percentile = {p}: expected 0 to 100"))
            }
        };
        let fraction = |k: &str, v: f64| {
            if v.is_finite() && v > 0.0 && v <= 1.0 {
                Ok(())
            } else {
                Err(format!("{k} = {v}: expected a fraction in (0, 1]"))
            }
        };
        let seconds = |k: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(format!("{k} = {v}: expected a non-negative number of seconds"))
            }
        };
        let span = |from: Option<f64>, to: Option<f64>| {
            from.map_or(Ok(()), |v| seconds("from_s", v))?;
            to.map_or(Ok(()), |v| seconds("to_s", v))?;
            match (from, to) {
                (Some(a), Some(b)) if b <= a => Err(format!("to_s ({b}) must be after from_s ({a})")),
                _ => Ok(()),
            }
        };
        let nth = |n: usize| {
            if n >= 1 {
                Ok(())
            } else {
                Err("move: moves are numbered from 1".to_string())
            }
        };
        match self {
            ExpectSpec::UplinkIdleWhileTotalBelow { uplink: u, .. } => uplink(u),
            ExpectSpec::MoveWhenUplinkPasses {
                nth: n,
                uplink: u,
                threshold,
                within_s,
                ..
            } => {
                nth(*n)?;
                uplink(u)?;
                fraction("threshold", *threshold)?;
                within_s.map_or(Ok(()), |w| seconds("within_s", w))
            }
            ExpectSpec::MoveAfterTotalPasses { nth: n, within_s, .. } => {
                nth(*n)?;
                within_s.map_or(Ok(()), |w| seconds("within_s", w))
            }
            ExpectSpec::UplinksBalanced { from_s, tolerance, .. } => {
                seconds("from_s", *from_s)?;
                fraction("tolerance", *tolerance)
            }
            ExpectSpec::DeliveredMatchesBaseline {
                baseline,
                from_s,
                tolerance,
                ..
            } => {
                seconds("from_s", *from_s)?;
                fraction("tolerance", *tolerance)?;
                if dir.join(baseline).is_file() {
                    Ok(())
                } else {
                    Err(format!("baseline: no file `{}`", dir.join(baseline).display()))
                }
            }
            ExpectSpec::MovesSpaced { min_s, .. } => seconds("min_s", *min_s),
            ExpectSpec::DeliveredAtMost { .. } => Ok(()),
            ExpectSpec::UplinkUtilisationAtMost {
                uplink: u,
                max,
                from_s,
                to_s,
                ..
            } => {
                uplink(u)?;
                fraction("max", *max)?;
                span(*from_s, *to_s)
            }
            ExpectSpec::DeliveredFractionAtLeast {
                fraction: f,
                from_s,
                to_s,
                ..
            } => {
                fraction("fraction", *f)?;
                span(*from_s, *to_s)
            }
            ExpectSpec::PortRateNear {
                port: p,
                from_s,
                to_s,
                tolerance,
                ..
            } => {
                port("port", p)?;
                span(Some(*from_s), Some(*to_s))?;
                fraction("tolerance", *tolerance)
            }
            ExpectSpec::PortRateAtLeast {
                ports, from_s, to_s, ..
            } => {
                if ports.is_empty() {
                    return Err("ports: expected at least one port".into());
                }
                for (i, p) in ports.iter().enumerate() {
                    port(&format!("ports[{i}]"), p)?;
                }
                span(Some(*from_s), *to_s)
            }
            ExpectSpec::AdmissionRejected { node, at_s, .. } => {
                seconds("at_s", *at_s)?;
                if names.nodes.iter().any(|n| n == node) {
                    Ok(())
                } else {
                    Err(format!("node: no class, pool or port named `{node}`"))
                }
            }
            ExpectSpec::LatencyAtMost {
                port: p,
                percentile: q,
                from_s,
                to_s,
                max_us,
                ..
            } => {
                port("port", p)?;
                percentile(*q)?;
                span(Some(*from_s), Some(*to_s))?;
                seconds("max_us", *max_us)
            }
            ExpectSpec::LatencyRatio {
                port: p,
                percentile: q,
                faster,
                slower,
                factor,
                ..
            } => {
                port("port", p)?;
                percentile(*q)?;
                span(Some(faster[0]), Some(faster[1])).map_err(|e| format!("faster: {e}"))?;
                span(Some(slower[0]), Some(slower[1])).map_err(|e| format!("slower: {e}"))?;
                if factor.is_finite() && *factor > 0.0 {
                    Ok(())
                } else {
                    Err(format!("factor = {factor}: expected a positive number"))
                }
            }
            ExpectSpec::MoveCount { min, max, .. } => {
                if min <= max {
                    Ok(())
                } else {
                    Err(format!("min ({min}) is greater than max ({max})"))
                }
            }
        }
    }

    /// The baseline scenario this expectation compares against, if any.
    pub fn baseline(&self) -> Option<&str> {
        match self {
            ExpectSpec::DeliveredMatchesBaseline { baseline, .. } => Some(baseline),
            _ => None,
        }
    }
}

/// Judges `spec` on `run`; `baseline` is the baseline's run for `delivered-matches-baseline`.
pub fn evaluate(spec: &ExpectSpec, run: &RunOutput, baseline_run: Option<&RunOutput>) -> Verdict {
    let lbt_moves: Vec<_> = run.moves.iter().filter(|m| m.lbt.is_some()).collect();
    let uplink_index = |name: &str| run.uplinks.iter().position(|u| u == name).unwrap_or(0);
    let first_row = |pred: &dyn Fn(&crate::run::Row) -> bool| run.rows.iter().find(|r| pred(r)).map(|r| r.t_s);
    let (name, held, detail) = match spec {
        ExpectSpec::UplinkIdleWhileTotalBelow {
            uplink,
            total,
            tolerance,
            name,
        } => {
            let u = uplink_index(uplink);
            let rows: Vec<_> = run
                .rows
                .iter()
                .filter(|r| r.total_offered_tx() < total.bps_f64())
                .collect();
            let max = rows.iter().map(|r| r.uplink_tx[u] + r.uplink_rx[u]).fold(0.0, f64::max);
            (
                name.clone()
                    .unwrap_or(format!("{uplink} idle while the total is below {total}")),
                !rows.is_empty() && max <= tolerance.bps_f64(),
                format!(
                    "{uplink} carried at most {} over the {} s whose total was below {total}",
                    gbps(max),
                    rows.len()
                ),
            )
        }
        ExpectSpec::MoveWhenUplinkPasses {
            nth,
            uplink,
            threshold,
            within_s,
            name,
        } => {
            let u = uplink_index(uplink);
            let within = within_s.unwrap_or(60.0);
            let cross = first_row(&|r| r.uplink_tx[u].max(r.uplink_rx[u]) > threshold * run.capacities[u]);
            let name = name.clone().unwrap_or(format!(
                "move {nth} happens when {uplink} passes {:.0}%",
                threshold * 100.0
            ));
            match (lbt_moves.get(nth - 1), cross) {
                (Some(m), Some(c)) => {
                    let d = m.lbt.expect("filtered to LBT moves");
                    let ok = m.from.as_deref() == Some(uplink.as_str())
                        && d.from_before.max() > *threshold
                        && m.t_s >= c
                        && m.t_s - c <= within;
                    let detail = format!(
                        "move {nth} ({} {}→{}) at {:.0} s; {uplink} first passed {:.0}% at {c:.0} s; its window mean was {:.1}% at the move",
                        m.port,
                        m.from.as_deref().unwrap_or("-"),
                        m.to.as_deref().unwrap_or("-"),
                        m.t_s,
                        threshold * 100.0,
                        d.from_before.max() * 100.0
                    );
                    (name, ok, detail)
                }
                (m, c) => (
                    name,
                    false,
                    format!(
                        "move {nth}: {}; {uplink} passed {:.0}%: {}",
                        found(m.is_some()),
                        threshold * 100.0,
                        at(c)
                    ),
                ),
            }
        }
        ExpectSpec::MoveAfterTotalPasses {
            nth,
            total,
            within_s,
            name,
        } => {
            let cross = first_row(&|r| r.total_offered_tx() > total.bps_f64());
            let name = name
                .clone()
                .unwrap_or(format!("move {nth} happens after the total passes {total}"));
            match (lbt_moves.get(nth - 1), cross) {
                (Some(m), Some(c)) => {
                    let ok = m.t_s >= c && within_s.is_none_or(|w| m.t_s - c <= w);
                    (
                        name,
                        ok,
                        format!(
                            "move {nth} ({}) at {:.0} s; the total passed {total} at {c:.0} s",
                            m.port, m.t_s
                        ),
                    )
                }
                (m, c) => (
                    name,
                    false,
                    format!("move {nth}: {}; total passed {total}: {}", found(m.is_some()), at(c)),
                ),
            }
        }
        ExpectSpec::UplinksBalanced {
            from_s,
            tolerance,
            name,
        } => {
            let rows: Vec<_> = run.rows.iter().filter(|r| r.t_s >= *from_s).collect();
            let means: Vec<f64> = (0..run.uplinks.len())
                .map(|u| rows.iter().map(|r| r.uplink_tx[u]).sum::<f64>() / rows.len().max(1) as f64)
                .collect();
            let utils: Vec<f64> = means.iter().zip(&run.capacities).map(|(m, c)| m / c).collect();
            let (hi, lo) = (
                utils.iter().cloned().fold(0.0, f64::max),
                utils.iter().cloned().fold(f64::MAX, f64::min),
            );
            let spread = if hi > 0.0 { (hi - lo) / hi } else { 0.0 };
            let each: Vec<String> = run
                .uplinks
                .iter()
                .zip(&means)
                .zip(&utils)
                .map(|((n, m), u)| format!("{n} {} ({:.1}%)", gbps(*m), u * 100.0))
                .collect();
            (
                name.clone().unwrap_or(format!(
                    "uplinks within {} of each other from {from_s:.0} s",
                    pct(*tolerance)
                )),
                !rows.is_empty() && spread <= *tolerance,
                format!(
                    "mean send from {from_s:.0} s: {}; spread {:.1}%",
                    each.join(", "),
                    spread * 100.0
                ),
            )
        }
        ExpectSpec::DeliveredMatchesBaseline {
            baseline,
            from_s,
            tolerance,
            name,
        } => {
            let mean = |r: &RunOutput| {
                let rows: Vec<_> = r.rows.iter().filter(|x| x.t_s >= *from_s).collect();
                rows.iter().map(|x| x.total_delivered()).sum::<f64>() / rows.len().max(1) as f64
            };
            let name = name
                .clone()
                .unwrap_or(format!("delivered within {} of {baseline}", pct(*tolerance)));
            match baseline_run {
                None => (name, false, "the baseline did not run".into()),
                Some(b) => {
                    let (a, bm) = (mean(run), mean(b));
                    let diff = if bm > 0.0 { (a - bm).abs() / bm } else { f64::INFINITY };
                    let detail = format!(
                        "mean delivered from {from_s:.0} s: {} vs baseline {} ({:+.2}%)",
                        gbps(a),
                        gbps(bm),
                        (a - bm) / bm * 100.0
                    );
                    (name, diff <= *tolerance, detail)
                }
            }
        }
        ExpectSpec::MovesSpaced { min_s, name } => {
            let gaps: Vec<f64> = lbt_moves.windows(2).map(|w| w[1].t_s - w[0].t_s).collect();
            let least = gaps.iter().cloned().fold(f64::INFINITY, f64::min);
            (
                name.clone().unwrap_or(format!("no two moves within {min_s:.0} s")),
                least >= min_s - 1e-9,
                if gaps.is_empty() {
                    format!("{} move(s): nothing to space", lbt_moves.len())
                } else {
                    format!("{} moves; closest two {least:.0} s apart", lbt_moves.len())
                },
            )
        }
        ExpectSpec::DeliveredAtMost { limit, name } => {
            let max = run.rows.iter().map(|r| r.total_delivered_tx()).fold(0.0, f64::max);
            (
                name.clone().unwrap_or(format!("delivers at most {limit}")),
                max <= limit.bps_f64() * (1.0 + 1e-9),
                format!("peak total delivered (send) {}", gbps(max)),
            )
        }
        ExpectSpec::MoveCount { min, max, name } => (
            name.clone().unwrap_or(if min == max {
                format!("exactly {min} move(s)")
            } else {
                format!("between {min} and {max} moves")
            }),
            (*min..=*max).contains(&lbt_moves.len()),
            format!("{} load-based move(s)", lbt_moves.len()),
        ),
        ExpectSpec::UplinkUtilisationAtMost {
            uplink,
            max,
            from_s,
            to_s,
            name,
        } => {
            let u = uplink_index(uplink);
            let rows: Vec<_> = run.rows.iter().filter(|r| in_span(r.t_s, *from_s, *to_s)).collect();
            let peak = rows
                .iter()
                .map(|r| r.uplink_tx[u].max(r.uplink_rx[u]) / run.capacities[u])
                .fold(0.0, f64::max);
            (
                name.clone().unwrap_or(format!(
                    "{uplink} stays at or under {:.0}%{}",
                    max * 100.0,
                    span_text(*from_s, *to_s)
                )),
                !rows.is_empty() && peak <= *max + 1e-12,
                format!("{uplink} peaked at {:.1}% over {} s", peak * 100.0, rows.len()),
            )
        }
        ExpectSpec::DeliveredFractionAtLeast {
            fraction,
            from_s,
            to_s,
            name,
        } => {
            let rows: Vec<_> = run.rows.iter().filter(|r| in_span(r.t_s, *from_s, *to_s)).collect();
            let worst = rows
                .iter()
                .map(|r| {
                    let offered = r.offered_tx.iter().sum::<f64>() + r.offered_rx.iter().sum::<f64>();
                    if offered > 0.0 {
                        r.total_delivered() / offered
                    } else {
                        1.0
                    }
                })
                .fold(1.0, f64::min);
            (
                name.clone().unwrap_or(format!(
                    "delivers at least {:.1}% of the offered load{}",
                    fraction * 100.0,
                    span_text(*from_s, *to_s)
                )),
                !rows.is_empty() && worst >= *fraction - 1e-9,
                format!(
                    "worst second delivered {:.2}% of its offered load over {} s",
                    worst * 100.0,
                    rows.len()
                ),
            )
        }
        other => return packet::evaluate(other, run),
    };
    Verdict { name, held, detail }
}

fn in_span(t: f64, from: Option<f64>, to: Option<f64>) -> bool {
    from.is_none_or(|f| t >= f) && to.is_none_or(|e| t < e)
}

fn span_text(from: Option<f64>, to: Option<f64>) -> String {
    match (from, to) {
        (None, None) => String::new(),
        (Some(f), None) => format!(" from {f:.0} s"),
        (None, Some(e)) => format!(" until {e:.0} s"),
        (Some(f), Some(e)) => format!(" from {f:.0} to {e:.0} s"),
    }
}

fn found(yes: bool) -> &'static str {
    if yes {
        "found"
    } else {
        "never happened"
    }
}

fn at(t: Option<f64>) -> String {
    t.map_or("never".into(), |t| format!("at {t:.0} s"))
}
