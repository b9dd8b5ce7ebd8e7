//! What a cluster scenario states about its run.
//!
//! | kind | holds when |
//! |---|---|
//! | `vm-rate-near` | VM `vm`'s mean send rate over [`from_s`, `to_s`) is within `tolerance` (a fraction) of `rate` |
//! | `migrated` | VM `vm` migrated (or restarted) to host `to` at a time in [`from_s`, `to_s`] |
//! | `fault` | host `host` had a fault at a time in [`from_s`, `to_s`] whose reason contains `reason` |
//! | `refusals-at-most` | at most `count` power-ons, reservation changes or migrations were refused |
//! | `violated-at-most` | at `at_s`, at most `count` reservations cannot be kept |
//! | `migrations-between` | the run made from `min` to `max` migrations and restarts |
//!
//! Every kind takes an optional `name`.

use super::decide::Decisions;
use super::plan::ClusterPlan;
pub use super::scenario::ClusterExpect;
use crate::expect::{ExpectSpec, Verdict};
use crate::run::RunOutput;

/// Refuses unknown VMs and hosts, backwards or out-of-run windows and bad tolerances.
pub fn check(x: &ClusterExpect, plan: &ClusterPlan) -> Result<(), String> {
    let vm = |v: &str| {
        plan.vm_index(v)
            .map(|_| ())
            .ok_or_else(|| format!("vm: no VM named `{v}`"))
    };
    let host = |key: &str, h: &str| {
        (plan.hosts.iter().any(|n| n == h))
            .then_some(())
            .ok_or_else(|| format!("{key}: no host named `{h}`"))
    };
    let window = |from_s: f64, to_s: f64| {
        if from_s.is_finite() && to_s.is_finite() && 0.0 <= from_s && from_s <= to_s && to_s <= plan.file.duration_s {
            Ok(())
        } else {
            Err(format!(
                "from_s = {from_s}, to_s = {to_s}: expected 0 <= from_s <= to_s <= duration_s"
            ))
        }
    };
    match x {
        ClusterExpect::VmRateNear {
            vm: v,
            from_s,
            to_s,
            tolerance,
            ..
        } => {
            vm(v)?;
            window(*from_s, *to_s)?;
            if to_s - from_s < 1.0 {
                return Err("from_s, to_s: a window of at least 1 s (the run's rows)".into());
            }
            if !(tolerance.is_finite() && *tolerance > 0.0 && *tolerance < 1.0) {
                return Err(format!("tolerance = {tolerance}: expected a fraction in (0, 1)"));
            }
            Ok(())
        }
        ClusterExpect::Migrated {
            vm: v,
            to,
            from_s,
            to_s,
            ..
        } => {
            vm(v)?;
            host("to", to)?;
            window(*from_s, *to_s)
        }
        ClusterExpect::Fault {
            host: h,
            from_s,
            to_s,
            reason,
            ..
        } => {
            host("host", h)?;
            if reason.is_empty() {
                return Err("reason: expected words the fault's reason contains".into());
            }
            window(*from_s, *to_s)
        }
        ClusterExpect::ViolatedAtMost { at_s, .. } => window(*at_s, *at_s),
        ClusterExpect::MigrationsBetween { min, max, .. } if min > max => {
            Err(format!("min = {min} is above max = {max}"))
        }
        _ => Ok(()),
    }
}

/// Judges `x` against the run and its decisions.
pub fn evaluate(x: &ClusterExpect, plan: &ClusterPlan, run: &RunOutput, d: &Decisions) -> Verdict {
    let verdict = |name: &Option<String>, default: String, held: bool, detail: String| Verdict {
        name: name.clone().unwrap_or(default),
        held,
        detail,
    };
    match x {
        ClusterExpect::VmRateNear {
            vm,
            from_s,
            to_s,
            rate,
            tolerance,
            name,
        } => {
            let spec = ExpectSpec::PortRateNear {
                port: vm.clone(),
                from_s: *from_s,
                to_s: *to_s,
                rate: *rate,
                tolerance: *tolerance,
                name: name.clone(),
            };
            crate::expect::evaluate(&spec, run, None)
        }
        ClusterExpect::Migrated {
            vm,
            to,
            from_s,
            to_s,
            name,
        } => {
            let found = (d.migrations.iter()).find(|m| {
                plan.vms[m.vm].vm.name == *vm && plan.hosts[m.to] == *to && *from_s <= m.t_s && m.t_s <= *to_s
            });
            let detail = match found {
                Some(m) => format!("{vm} moved to {to} at {} s", m.t_s),
                None => format!("no move of {vm} to {to} in [{from_s}, {to_s}] s"),
            };
            verdict(name, format!("{vm} migrates to {to}"), found.is_some(), detail)
        }
        ClusterExpect::Fault {
            host,
            from_s,
            to_s,
            reason,
            name,
        } => {
            let found = (d.faults.iter())
                .find(|(t, h, why)| h == host && *from_s <= *t && *t <= *to_s && why.contains(reason.as_str()));
            let detail = match found {
                Some((t, _, why)) => format!("at {t} s: {why}"),
                None => format!(
                    "no fault on {host} in [{from_s}, {to_s}] s naming `{reason}`; faults: {:?}",
                    d.faults
                ),
            };
            verdict(name, format!("fault on {host}: {reason}"), found.is_some(), detail)
        }
        ClusterExpect::RefusalsAtMost { count, name } => verdict(
            name,
            format!("at most {count} refusals"),
            d.refusals.len() <= *count,
            format!(
                "{} refused: {:?}",
                d.refusals.len(),
                d.refusals.iter().take(5).collect::<Vec<_>>()
            ),
        ),
        ClusterExpect::ViolatedAtMost { at_s, count, name } => {
            let now = (d.violated.iter())
                .rev()
                .find(|(t, _)| t <= at_s)
                .map_or(0, |(_, c)| *c);
            verdict(
                name,
                format!("at most {count} reservations broken at {at_s} s"),
                now <= *count,
                format!("{now} reservations cannot be kept at {at_s} s"),
            )
        }
        ClusterExpect::MigrationsBetween { min, max, name } => {
            let n = d.migrations.len();
            verdict(
                name,
                format!("{min} to {max} migrations"),
                (*min..=*max).contains(&n),
                format!("{n} migrations and restarts"),
            )
        }
    }
}
