//! Packet fidelity: each host runs the packet engine (its real switch, team and NetIOC
//! scheduler) over its stays, and the runs are joined into one, VMs as ports.

use super::decide::Decisions;
use super::plan::ClusterPlan;
use super::stays::HostStays;
use crate::packet::engine::{self, Discipline, HostPlan, PlanEvent, PortPlan};
use crate::run::{Row, RunOutput};

/// Runs every host in packet mode, on as many threads as the machine has cores.
pub fn run(plan: &ClusterPlan, d: &Decisions) -> Result<RunOutput, String> {
    let hosts: Vec<(HostStays, HostPlan)> = (0..plan.hosts.len()).map(|h| host_plan(plan, d, h)).collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut outputs: Vec<Option<Result<RunOutput, String>>> = vec![None; hosts.len()];
    for chunk in (0..hosts.len()).collect::<Vec<_>>().chunks(threads) {
        std::thread::scope(|s| {
            let hosts = &hosts;
            let handles: Vec<_> = (chunk.iter())
                .map(|&h| (h, s.spawn(move || engine::run(&hosts[h].1))))
                .collect();
            for (h, handle) in handles {
                outputs[h] = Some(handle.join().unwrap_or_else(|_| Err("a host's run panicked".into())));
            }
        });
    }
    let mut runs = Vec::new();
    for (h, o) in outputs.into_iter().enumerate() {
        runs.push(
            o.expect("every host ran")
                .map_err(|e| format!("{}: {e}", plan.hosts[h]))?,
        );
    }
    Ok(join(plan, d, &hosts, runs))
}

/// Host `h`'s packet-mode plan: a port per stay, the tree replaced at each change of controls.
fn host_plan<'a>(plan: &'a ClusterPlan, d: &Decisions, h: usize) -> (HostStays<'a>, HostPlan) {
    let stays = HostStays::new(plan, d, h);
    let tree = stays.tree(d, &[]);
    let mut ports: Vec<PortPlan> = (stays.stays.iter().enumerate())
        .map(|(k, &s)| {
            let stay = &d.stays[s];
            let v = &plan.vms[stay.vm];
            let (id, mac) = stays.port(d, k);
            PortPlan {
                name: v.vm.name.clone(),
                id,
                mac,
                group: v.group,
                leaf: stays.leaf(&tree, k),
                source: v.source.clone(),
                start_s: stay.from_s,
                stop_s: stay.to_s,
            }
        })
        .collect();
    // Each migration's own stream: a greedy sender of jumbo frames in the migration class.
    for &x in &stays.transfers {
        let t = &d.transfers[x];
        let b = (x as u32).to_be_bytes();
        ports.push(PortPlan {
            name: format!("vmotion~{x}"),
            id: 0xC000_0000 | x as u32,
            mac: teamster_core::wire::MacAddr([0x02, 0x59, b[0], b[1], b[2], b[3]]),
            group: 0,
            leaf: stays.transfer_leaf(&tree, x),
            source: crate::packet::source::SourceSpec::Greedy { bytes: 9000 },
            start_s: t.from_s,
            stop_s: Some(t.to_s),
        });
    }
    let mut events: Vec<(f64, PlanEvent)> = Vec::new();
    for (t, controls) in &d.controls[h] {
        events.push((*t, PlanEvent::ReplaceTree(stays.tree(d, controls))));
    }
    for &(t, uplink, up) in &d.links[h] {
        events.push((t, PlanEvent::Link { uplink, up }));
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    let host = plan.cluster.host(&plan.hosts[h]).expect("a host of the plan");
    let hp = HostPlan {
        uplinks: plan.uplinks.clone(),
        groups: plan.groups.clone(),
        lbt: plan.lbt,
        tree,
        reservation_cap: host.cap,
        ports,
        security: plan.file.host.port_groups.iter().map(|g| g.security).collect(),
        discipline: Discipline::Netioc,
        queue_packets: plan.file.host.queue_packets,
        queue_ms: None,
        fifo_packets: 1024,
        events,
        duration_s: plan.file.duration_s,
    };
    (stays, hp)
}

/// The hosts' runs as one: uplinks named `host/uplink`, a VM's rates summed over its stays.
fn join(plan: &ClusterPlan, d: &Decisions, hosts: &[(HostStays, HostPlan)], runs: Vec<RunOutput>) -> RunOutput {
    let mut out = super::output(plan, d);
    let nv = plan.vms.len();
    let rows = runs.iter().map(|r| r.rows.len()).min().unwrap_or(0);
    for i in 0..rows {
        let mut row = Row {
            t_s: runs[0].rows[i].t_s,
            uplink_tx: Vec::new(),
            uplink_rx: Vec::new(),
            offered_tx: vec![0.0; nv],
            delivered_tx: vec![0.0; nv],
            offered_rx: vec![0.0; nv],
            delivered_rx: vec![0.0; nv],
        };
        for (h, r) in runs.iter().enumerate() {
            row.uplink_tx.extend(&r.rows[i].uplink_tx);
            row.uplink_rx.extend(&r.rows[i].uplink_rx);
            for (k, &s) in hosts[h].0.stays.iter().enumerate() {
                let vm = d.stays[s].vm;
                row.offered_tx[vm] += r.rows[i].offered_tx[k];
                row.delivered_tx[vm] += r.rows[i].delivered_tx[k];
            }
        }
        out.rows.push(row);
    }
    for (h, r) in runs.into_iter().enumerate() {
        out.packets += r.packets;
        for (k, &s) in hosts[h].0.stays.iter().enumerate() {
            let vm = d.stays[s].vm;
            out.latencies[vm].extend(&r.latencies[k]);
            out.reordered[vm] += r.reordered[k];
            out.member_changes[vm] += r.member_changes[k];
            if d.stays[s].to_s.is_none() {
                out.port_uplinks[vm] = r.port_uplinks[k].as_ref().map(|u| format!("{}/{u}", plan.hosts[h]));
            }
        }
        for mut m in r.moves {
            m.from = m.from.map(|u| format!("{}/{u}", plan.hosts[h]));
            m.to = m.to.map(|u| format!("{}/{u}", plan.hosts[h]));
            out.moves.push(m);
        }
    }
    for l in &mut out.latencies {
        l.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out.moves.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    out
}
