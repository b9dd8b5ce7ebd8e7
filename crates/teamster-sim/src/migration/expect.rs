//! What a migration scenario states about its run.
//!
//! | kind | holds when |
//! |---|---|
//! | `finish-between` | every migration finished, the last one between `min_s` and `max_s` |
//! | `rate` | `host`'s `uplink` (all its uplinks together if none is named) carried a mean rate in `direction` (`send` or `receive`) over [`from_s`, `to_s`) of at least `min` (default 0) and at most `max` (default none) |
//! | `one-member-per-migration` | every migration's stream left on one member of its source host and arrived on one member of its destination, from start to finish |
//!
//! Rates are on the wire (Ethernet frames with preamble and gap), as a NIC's counters show
//! them, averaged over the rows wholly inside the window: a window must be at least a row long
//! (0.1 s, longer for runs over 500 s) and end by the time the run does; a rate needs a `min`
//! above 0 or a `max`.

use super::engine::MigrationRun;
use super::scenario::{MigrationExpect, MigrationPlan, Way};
use crate::expect::Verdict;
use crate::run::gbps;
use teamster_core::units::Bandwidth;

/// Refuses unknown hosts or uplinks, empty or backwards ranges, windows shorter than a row and
/// rates that cannot fail.
pub fn check(spec: &MigrationExpect, plan: &MigrationPlan) -> Result<(), String> {
    let host = |name: &str| {
        plan.hosts
            .iter()
            .find(|h| h.name == name)
            .ok_or_else(|| format!("host: no host named `{name}`"))
    };
    let row_s = plan.row_steps() as f64 * plan.file.step_s;
    let window = |from_s: f64, to_s: f64| {
        if !(from_s.is_finite() && to_s.is_finite() && 0.0 <= from_s && from_s < to_s && to_s <= plan.file.duration_s) {
            Err(format!(
                "from_s = {from_s}, to_s = {to_s}: expected 0 <= from_s < to_s <= duration_s"
            ))
        } else if to_s - from_s < row_s - 1e-9 {
            Err(format!(
                "from_s = {from_s}, to_s = {to_s}: shorter than the run's rows ({row_s} s)"
            ))
        } else {
            Ok(())
        }
    };
    let range = |min: Bandwidth, max: Option<Bandwidth>| match max {
        Some(max) if max < min => Err(format!("max = {max} is below min = {min}")),
        None if min == Bandwidth::ZERO => Err("give a min above 0 or a max: as it is, it cannot fail".into()),
        _ => Ok(()),
    };
    match spec {
        MigrationExpect::FinishBetween { min_s, max_s, .. } => {
            if min_s.is_finite() && max_s.is_finite() && 0.0 <= *min_s && min_s <= max_s {
                Ok(())
            } else {
                Err(format!(
                    "min_s = {min_s}, max_s = {max_s}: expected 0 <= min_s <= max_s"
                ))
            }
        }
        MigrationExpect::Rate {
            host: h,
            uplink,
            from_s,
            to_s,
            min,
            max,
            ..
        } => {
            let hp = host(h)?;
            if let Some(uplink) = uplink {
                if !hp.host.uplinks.iter().any(|u| &u.name == uplink) {
                    return Err(format!("uplink: host `{h}` has no uplink named `{uplink}`"));
                }
            }
            window(*from_s, *to_s)?;
            range(*min, *max)
        }
        MigrationExpect::OneMemberPerMigration { .. } => Ok(()),
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
        MigrationExpect::Rate {
            host,
            uplink,
            direction,
            from_s,
            to_s,
            min,
            max,
            name,
        } => {
            // Uplink columns are named `host:uplink`.
            let label = match uplink {
                Some(u) => format!("{host}:{u}"),
                None => host.clone(),
            };
            let columns: Vec<usize> = (0..run.output.uplinks.len())
                .filter(|&c| match uplink {
                    Some(_) => run.output.uplinks[c] == label,
                    None => run.output.uplinks[c].starts_with(&format!("{host}:")),
                })
                .collect();
            let mean = window_mean(run, *direction, &columns, *from_s, *to_s);
            rate_verdict(name, &label, *direction, *from_s, *to_s, *min, *max, mean, run.end_s)
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

/// The mean over the rows wholly inside [`from_s`, `to_s`) of the summed columns, weighted by
/// their length; none if the run ended before `to_s` or no row fits.
fn window_mean(run: &MigrationRun, way: Way, columns: &[usize], from_s: f64, to_s: f64) -> Option<f64> {
    if to_s > run.end_s + 1e-9 {
        return None;
    }
    let (mut sum, mut len) = (0.0, 0.0);
    for r in &run.output.rows {
        let l = run.row_s.min(run.end_s - r.t_s);
        if r.t_s + 1e-9 >= from_s && r.t_s + l <= to_s + 1e-9 && l > 0.0 {
            let v = match way {
                Way::Send => &r.uplink_tx,
                Way::Receive => &r.uplink_rx,
            };
            sum += columns.iter().map(|&c| v[c]).sum::<f64>() * l;
            len += l;
        }
    }
    (len > 0.0).then(|| sum / len)
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
        None if to_s > end_s => (name, false, format!("the run ended at {end_s:.2} s, before {to_s} s")),
        None => (name, false, "no whole row of the run falls inside the window".into()),
        Some(m) => (
            name,
            // To rounding: a member full to its capacity may sum to a hair over it.
            m >= min.bps_f64() * (1.0 - 1e-9) && max.is_none_or(|x| m <= x.bps_f64() * (1.0 + 1e-9)),
            format!("{what} {way} mean {} over [{from_s}, {to_s}) s", gbps(m)),
        ),
    }
}
