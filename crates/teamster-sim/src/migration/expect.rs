//! What a migration scenario states about its run.
//!
//! | kind | holds when |
//! |---|---|
//! | `finish-between` | every migration finished, the last one between `min_s` and `max_s` |
//! | `member-rate` | `host`'s `uplink` carried a mean rate in `direction` (`send` or `receive`) over [`from_s`, `to_s`) of at least `min` (default 0) and at most `max` (default none) |
//! | `host-rate` | the same for the sum of `host`'s uplinks |
//! | `one-member-per-migration` | every migration's stream left on one member of its source host and arrived on one member of its destination, from start to finish |
//!
//! Rates are on the wire (Ethernet frames with preamble and gap), as a NIC's counters show
//! them. A window must end by the time the run does.

use super::engine::MigrationRun;
use super::scenario::MigrationPlan;
use crate::expect::Verdict;
use crate::run::gbps;
use serde::Deserialize;
use teamster_core::units::Bandwidth;

/// An expectation of a migration scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum MigrationExpect {
    FinishBetween {
        min_s: f64,
        max_s: f64,
        name: Option<String>,
    },
    MemberRate {
        host: String,
        uplink: String,
        direction: Way,
        from_s: f64,
        to_s: f64,
        #[serde(default)]
        min: Bandwidth,
        max: Option<Bandwidth>,
        name: Option<String>,
    },
    HostRate {
        host: String,
        direction: Way,
        from_s: f64,
        to_s: f64,
        #[serde(default)]
        min: Bandwidth,
        max: Option<Bandwidth>,
        name: Option<String>,
    },
    OneMemberPerMigration {
        name: Option<String>,
    },
}

/// Which way a member's traffic goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Way {
    Send,
    Receive,
}

impl std::fmt::Display for Way {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Way::Send => "send",
            Way::Receive => "receive",
        })
    }
}

impl MigrationExpect {
    /// Refuses unknown hosts or uplinks and empty or backwards ranges.
    pub fn check(&self, plan: &MigrationPlan) -> Result<(), String> {
        let host = |name: &str| {
            plan.hosts
                .iter()
                .find(|h| h.name == name)
                .ok_or_else(|| format!("host: no host named `{name}`"))
        };
        let window = |from_s: f64, to_s: f64| {
            if from_s.is_finite() && to_s.is_finite() && 0.0 <= from_s && from_s < to_s && to_s <= plan.file.duration_s
            {
                Ok(())
            } else {
                Err(format!(
                    "from_s = {from_s}, to_s = {to_s}: expected 0 <= from_s < to_s <= duration_s"
                ))
            }
        };
        let range = |min: Bandwidth, max: Option<Bandwidth>| match max {
            Some(max) if max < min => Err(format!("max = {max} is below min = {min}")),
            _ => Ok(()),
        };
        match self {
            MigrationExpect::FinishBetween { min_s, max_s, .. } => {
                if min_s.is_finite() && max_s.is_finite() && 0.0 <= *min_s && min_s <= max_s {
                    Ok(())
                } else {
                    Err(format!(
                        "min_s = {min_s}, max_s = {max_s}: expected 0 <= min_s <= max_s"
                    ))
                }
            }
            MigrationExpect::MemberRate {
                host: h,
                uplink,
                from_s,
                to_s,
                min,
                max,
                ..
            } => {
                let hp = host(h)?;
                if !hp.host.uplinks.iter().any(|u| &u.name == uplink) {
                    return Err(format!("uplink: host `{h}` has no uplink named `{uplink}`"));
                }
                window(*from_s, *to_s)?;
                range(*min, *max)
            }
            MigrationExpect::HostRate {
                host: h,
                from_s,
                to_s,
                min,
                max,
                ..
            } => {
                host(h)?;
                window(*from_s, *to_s)?;
                range(*min, *max)
            }
            MigrationExpect::OneMemberPerMigration { .. } => Ok(()),
        }
    }
}

/// Judges `spec` against `run`.
pub fn evaluate(spec: &MigrationExpect, run: &MigrationRun) -> Verdict {
    let (name, held, detail) = match spec {
        MigrationExpect::FinishBetween { min_s, max_s, name } => {
            let unfinished = run.streams.iter().filter(|s| s.finish_s.is_none()).count();
            let last = run.streams.iter().filter_map(|s| s.finish_s).fold(0.0, f64::max);
            (
                name.clone()
                    .unwrap_or(format!("the last migration finishes between {min_s} and {max_s} s")),
                unfinished == 0 && (*min_s..=*max_s).contains(&last),
                if unfinished == 0 {
                    format!("the last of {} migrations finished at {last:.2} s", run.streams.len())
                } else {
                    format!(
                        "{unfinished} of {} migrations had not finished by {:.2} s",
                        run.streams.len(),
                        run.end_s
                    )
                },
            )
        }
        MigrationExpect::MemberRate {
            host,
            uplink,
            direction,
            from_s,
            to_s,
            min,
            max,
            name,
        } => {
            let label = format!("{host}:{uplink}");
            let column = run.output.uplinks.iter().position(|u| *u == label);
            let mean = column.and_then(|c| window_mean(run, *direction, &[c], *from_s, *to_s));
            rate_verdict(name, &label, *direction, *from_s, *to_s, *min, *max, mean, run.end_s)
        }
        MigrationExpect::HostRate {
            host,
            direction,
            from_s,
            to_s,
            min,
            max,
            name,
        } => {
            let prefix = format!("{host}:");
            let columns: Vec<usize> = (0..run.output.uplinks.len())
                .filter(|&c| run.output.uplinks[c].starts_with(&prefix))
                .collect();
            let mean = window_mean(run, *direction, &columns, *from_s, *to_s);
            rate_verdict(name, host, *direction, *from_s, *to_s, *min, *max, mean, run.end_s)
        }
        MigrationExpect::OneMemberPerMigration { name } => {
            let spread: Vec<String> = run
                .streams
                .iter()
                .filter(|s| s.send_members.len() != 1 || s.receive_members.len() != 1)
                .map(|s| {
                    format!(
                        "{} ({} sending, {} receiving)",
                        s.name,
                        s.send_members.len(),
                        s.receive_members.len()
                    )
                })
                .collect();
            (
                name.clone().unwrap_or("each migration stays on one member".into()),
                spread.is_empty(),
                if spread.is_empty() {
                    format!("{} migrations, each on one member at each end", run.streams.len())
                } else {
                    format!("on more or fewer than one member: {}", spread.join(", "))
                },
            )
        }
    };
    Verdict { name, held, detail }
}

/// The mean over [`from_s`, `to_s`) of the summed columns, if the run lasted that long.
fn window_mean(run: &MigrationRun, way: Way, columns: &[usize], from_s: f64, to_s: f64) -> Option<f64> {
    let last = run.output.rows.last()?;
    if to_s > last.t_s + 0.1 + 1e-9 {
        return None;
    }
    let rows: Vec<f64> = run
        .output
        .rows
        .iter()
        .filter(|r| r.t_s + 1e-9 >= from_s && r.t_s + 1e-9 < to_s)
        .map(|r| {
            let v = match way {
                Way::Send => &r.uplink_tx,
                Way::Receive => &r.uplink_rx,
            };
            columns.iter().map(|&c| v[c]).sum::<f64>()
        })
        .collect();
    (!rows.is_empty()).then(|| rows.iter().sum::<f64>() / rows.len() as f64)
}

#[allow(clippy::too_many_arguments)]
fn rate_verdict(
    name: &Option<String>,
    what: &str,
    way: Way,
    from_s: f64,
    to_s: f64,
    min: Bandwidth,
    max: Option<Bandwidth>,
    mean: Option<f64>,
    end_s: f64,
) -> (String, bool, String) {
    let bounds = match max {
        Some(max) => format!("between {min} and {max}"),
        None => format!("at least {min}"),
    };
    let name = name
        .clone()
        .unwrap_or(format!("{what} {way}s {bounds} over [{from_s}, {to_s}) s"));
    match mean {
        None => (name, false, format!("the run ended at {end_s:.2} s, before {to_s} s")),
        Some(m) => (
            name,
            m >= min.bps_f64() && max.is_none_or(|x| m <= x.bps_f64()),
            format!("{what} {way} mean {} over [{from_s}, {to_s}) s", gbps(m)),
        ),
    }
}
