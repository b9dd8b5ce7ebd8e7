//! Cluster mode: several hosts, VMs placed and moved by `core::placement` as DRS places and
//! moves them for NetIOC reservations, each host run by the same engines as one-host scenarios.
//!
//! A run is two steps. [`decide::decide`] makes every placement decision over the timeline
//! (power-ons, reservation changes, faults, remediation after `drs.delay_s`, failures); it
//! needs no measured rates, so it runs first. Then each host runs its share: in packet
//! fidelity ([`packet`]) the packet engine, every packet through the host's switch and NetIOC
//! scheduler; in fluid fidelity ([`fluid`]) each uplink's rate shared by the NetIOC allocator
//! among the VMs the host's team maps to it, `step_s` apart. The output has the hosts' uplinks
//! as `host/uplink` and the VMs as ports (a VM's rate summed over the hosts it was on), the
//! migrations as moves, and the cluster's counts over time (reservations that cannot be kept,
//! migrations, faults, refusals).

pub mod decide;
pub mod expect;
pub mod fluid;
pub mod packet;
pub mod plan;
pub mod scenario;
pub mod stays;

pub use plan::ClusterPlan;
pub use scenario::{ClusterFile, Fidelity};

use crate::run::{ClusterRow, MoveRecord, RunOutput};
use decide::Decisions;

/// Checks and resolves a cluster file, its expectations included.
pub fn resolve(f: ClusterFile) -> Result<ClusterPlan, String> {
    let plan = plan::resolve(f)?;
    for (i, x) in plan.file.expect.iter().enumerate() {
        expect::check(x, &plan).map_err(|e| format!("expect[{i}].{e}"))?;
    }
    Ok(plan)
}

/// Decides and runs a resolved cluster.
pub fn run(plan: &ClusterPlan) -> Result<(RunOutput, Decisions), String> {
    let d = decide::decide(plan);
    let out = match plan.fidelity {
        Fidelity::Packet => packet::run(plan, &d)?,
        Fidelity::Fluid => fluid::run(plan, &d),
    };
    Ok((out, d))
}

/// A run's output before any host has run: names, the decisions as moves, events and
/// refusals, and the cluster's counts.
fn output(plan: &ClusterPlan, d: &Decisions) -> RunOutput {
    let uplinks = (plan.hosts.iter())
        .flat_map(|h| plan.uplinks.iter().map(move |u| format!("{h}/{}", u.name)))
        .collect();
    let capacities = (plan.hosts.iter())
        .flat_map(|_| plan.uplinks.iter().map(|u| u.rate_bps))
        .collect();
    let names = plan.vms.iter().map(|v| v.vm.name.clone()).collect();
    let mut out = RunOutput::new(uplinks, capacities, names);
    out.port_uplinks = vec![None; plan.vms.len()];
    out.events = d.log.clone();
    out.rejections = (d.refusals.iter())
        .map(|(t, vm, why)| (*t, format!("{vm}: {why}")))
        .collect();
    out.moves = (d.migrations.iter())
        .map(|m| MoveRecord {
            t_s: m.t_s,
            port: plan.vms[m.vm].vm.name.clone(),
            from: m.from.map(|h| plan.hosts[h].clone()),
            to: Some(plan.hosts[m.to].clone()),
            reason: if m.from.is_some() { "migration" } else { "restart" }.into(),
            lbt: None,
        })
        .collect();
    let queues: Vec<u32> = plan.file.host.uplinks.iter().map(|u| u.rx_queues).collect();
    out.teams = crate::run::team_lines(&plan.groups, &queues);
    out.cluster = counts(d);
    out
}

/// The cluster's counts at each instant one of them changed.
fn counts(d: &Decisions) -> Vec<ClusterRow> {
    let mut times: Vec<f64> = (d.violated.iter().map(|(t, _)| *t))
        .chain(d.migrations.iter().map(|m| m.t_s))
        .chain(d.faults.iter().map(|f| f.0))
        .chain(d.refusals.iter().map(|r| r.0))
        .collect();
    times.sort_by(f64::total_cmp);
    times.dedup();
    (times.into_iter())
        .map(|t| ClusterRow {
            t_s: t,
            violated: (d.violated.iter())
                .rev()
                .find(|(at, _)| *at <= t)
                .map_or(0, |(_, c)| *c),
            migrations: d.migrations.iter().filter(|m| m.t_s <= t).count(),
            faults: d.faults.iter().filter(|f| f.0 <= t).count(),
            refusals: d.refusals.iter().filter(|r| r.0 <= t).count(),
        })
        .collect()
}

#[cfg(test)]
mod tests;
