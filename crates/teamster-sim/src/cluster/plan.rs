//! A cluster scenario checked and resolved: the host shape built once, VMs with their vNICs,
//! the timeline in time order. Every error names its key; nothing runs until all is checked.

use super::scenario::{ClusterEvent, ClusterFile, Fidelity, VmFile};
use crate::packet::engine::UplinkPlan;
use crate::packet::source::SourceSpec;
use crate::timeline::Timeline;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use teamster_core::host::{self, HostSpec, UplinkDesc};
use teamster_core::ioc::{NodeId, Shares};
use teamster_core::placement::{Cluster, Vm, Vnic};
use teamster_core::teaming::{LbtConfig, PortGroupSpec};
use teamster_core::units::Bandwidth;
use teamster_core::wire::MacAddr;

/// The largest cluster a scenario may describe.
pub const MAX_HOSTS: usize = 256;
/// The most VMs a scenario may describe.
pub const MAX_VMS: usize = 20_000;
/// The most rates (rows times VMs and uplinks) a run keeps.
pub const MAX_CELLS: f64 = 2e7;
/// VM IDs from here up are the hosts' own, for a VM back on a host it left.
pub const FIRST_STAY_ID: u32 = 0x8000_0000;

/// A VM, resolved.
#[derive(Debug, Clone)]
pub struct VmPlan {
    pub vm: Vm,
    pub id: u32,
    pub mac: MacAddr,
    pub group: usize,
    pub source: SourceSpec,
    /// Host index, when placed by hand.
    pub host: Option<usize>,
    pub power_on_s: f64,
}

/// A timeline event, resolved to indices.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    SetReservation { vm: usize, reservation: Bandwidth },
    Link { host: usize, uplink: usize, up: bool },
    HostDown { host: usize },
    Migrate { vm: usize, to: usize },
}

/// A whole cluster, ready to decide and run.
#[derive(Debug, Clone)]
pub struct ClusterPlan {
    pub file: ClusterFile,
    pub fidelity: Fidelity,
    pub hosts: Vec<String>,
    pub uplinks: Vec<UplinkPlan>,
    pub groups: Vec<PortGroupSpec>,
    pub lbt: LbtConfig,
    /// The cluster as it starts: hosts without VMs, quotas, derived nodes.
    pub cluster: Cluster,
    pub vms: Vec<VmPlan>,
    /// In time order (file order at one instant).
    pub events: Vec<(f64, Action)>,
}

impl ClusterPlan {
    /// The index of VM `name`.
    pub fn vm_index(&self, name: &str) -> Option<usize> {
        self.vms.iter().position(|v| v.vm.name == name)
    }
}

/// Checks and resolves a cluster file (its expectations are checked by [`super::resolve`]).
pub fn resolve(f: ClusterFile) -> Result<ClusterPlan, String> {
    if f.mode != "cluster" {
        return Err(format!("mode = \"{}\": expected \"cluster\" here", f.mode));
    }
    crate::scenario::check_day(f.duration_s)?;
    if !(f.step_s.is_finite() && (0.001..=60.0).contains(&f.step_s)) {
        return Err(format!("step_s = {}: expected 0.001 to 60 seconds", f.step_s));
    }
    let drs = &f.drs;
    if !(drs.delay_s.is_finite() && (0.001..=3600.0).contains(&drs.delay_s)) {
        return Err(format!("drs.delay_s = {}: expected 0.001 to 3600 seconds", drs.delay_s));
    }
    if !(drs.switchover_s.is_finite() && (0.0..=60.0).contains(&drs.switchover_s)) {
        return Err(format!(
            "drs.switchover_s = {}: expected 0 to 60 seconds",
            drs.switchover_s
        ));
    }
    if !(drs.traffic_s.is_finite() && (0.0..=3600.0).contains(&drs.traffic_s)) {
        return Err(format!("drs.traffic_s = {}: expected 0 to 3600 seconds", drs.traffic_s));
    }
    if drs.traffic_s > 0.0 && f.fidelity == Fidelity::Fluid {
        return Err("drs.traffic_s: a migration's own traffic is modelled at packet fidelity only".into());
    }
    let shape = &f.host;
    if !(1..=1 << 20).contains(&shape.queue_packets) {
        return Err("host.queue_packets: expected 1 to 1048576".into());
    }
    for (i, u) in shape.uplinks.iter().enumerate() {
        let rate = u.effective.unwrap_or(u.capacity);
        if rate.bps() == 0 || rate > u.capacity {
            return Err(format!(
                "host.uplinks[{i}].effective: {rate} must be above zero and at most the capacity {}",
                u.capacity
            ));
        }
    }
    let built = host::build(
        HostSpec::<VmFile> {
            lbt: &shape.lbt,
            reservation_cap: shape.reservation_cap,
            uplinks: (shape.uplinks.iter())
                .map(|u| UplinkDesc {
                    name: u.name.clone(),
                    capacity: u.capacity,
                })
                .collect(),
            port_groups: &shape.port_groups,
            traffic_classes: &shape.traffic_classes,
            pools: &shape.pools,
            ports: &[],
        },
        &mut |_, _| None,
    )
    .map_err(|e| format!("host.{e}"))?;
    let count = match &f.hosts {
        super::scenario::HostNames::Count(n) => *n,
        super::scenario::HostNames::Names(n) => n.len(),
    };
    if !(1..=MAX_HOSTS).contains(&count) {
        return Err(format!("hosts: expected 1 to {MAX_HOSTS} hosts"));
    }
    if f.drs.traffic_s > 0.0 && built.tree.find(super::scenario::MIGRATION_CLASS).is_none() {
        return Err(format!(
            "drs.traffic_s: the host has no `{}` traffic class for the migrations' traffic",
            super::scenario::MIGRATION_CLASS
        ));
    }
    let hosts = f.hosts.names();
    for id in built.tree.ids() {
        let name = &built.tree.node(id).spec.name;
        if name.contains(['#', '~']) {
            return Err(format!(
                "host: `{name}`: `#` and `~` are kept for the hosts' leaf names"
            ));
        }
    }
    let mut cluster = Cluster::default();
    let smallest = shape
        .uplinks
        .iter()
        .map(|u| u.capacity)
        .min()
        .expect("built: one at least");
    for (i, h) in hosts.iter().enumerate() {
        host::check_name(&format!("hosts[{i}]"), h)?;
        cluster
            .add_host(h, built.tree.clone(), smallest, built.reservation_cap)
            .map_err(|e| format!("hosts[{i}]: {e}"))?;
        for (k, node) in shape.derived.iter().enumerate() {
            cluster
                .derive(h, node)
                .map_err(|_| format!("host.derived[{k}]: `{node}` is not a traffic class or pool of the host"))?;
        }
    }
    for (i, q) in f.quotas.iter().enumerate() {
        if built.tree.find(&q.pool).is_none_or(|id| id == NodeId::ROOT) {
            return Err(format!("quotas[{i}].pool: no class or pool named `{}`", q.pool));
        }
        cluster.set_quota(&q.pool, q.quota);
    }
    let vms = resolve_vms(&f, &built.groups, &built.tree, &hosts)?;
    // Every row holds a rate per VM and uplink: bound what a run keeps.
    let rows = if f.fidelity == Fidelity::Fluid {
        f.duration_s / f.step_s
    } else {
        f.duration_s
    };
    let cells = rows * (vms.len() + hosts.len() * shape.uplinks.len()) as f64;
    if cells > MAX_CELLS {
        return Err(format!(
            "duration_s, step_s, vms: {rows:.0} rows of {} VMs and {} uplinks are over the {MAX_CELLS:.0} rates a run keeps",
            vms.len(),
            hosts.len() * shape.uplinks.len()
        ));
    }
    let mut timeline = Timeline::new(f.duration_s);
    let mut events = Vec::new();
    let vm = |key: &str, name: &str| {
        (vms.iter().position(|v| v.vm.name == name)).ok_or_else(|| format!("{key}.vm: no VM named `{name}`"))
    };
    let host = |key: &str, name: &str| {
        (hosts.iter().position(|h| h == name)).ok_or_else(|| format!("{key}: no host named `{name}`"))
    };
    for (i, e) in f.events.iter().enumerate() {
        let key = format!("events[{i}]");
        let at_s = timeline.time(&key, e.at_s())?;
        let (object, action) = match e {
            ClusterEvent::SetReservation { vm: v, reservation, .. } => {
                let v = vm(&key, v)?;
                let action = Action::SetReservation {
                    vm: v,
                    reservation: *reservation,
                };
                (format!("VM `{}`", vms[v].vm.name), action)
            }
            ClusterEvent::UplinkDown { host: h, uplink, .. } | ClusterEvent::UplinkUp { host: h, uplink, .. } => {
                let h = host(&format!("{key}.host"), h)?;
                let u = (shape.uplinks.iter().position(|u| &u.name == uplink))
                    .ok_or_else(|| format!("{key}.uplink: no uplink named `{uplink}`"))?;
                let up = matches!(e, ClusterEvent::UplinkUp { .. });
                (
                    format!("{}/{uplink}", hosts[h]),
                    Action::Link { host: h, uplink: u, up },
                )
            }
            ClusterEvent::HostDown { host: h, .. } => {
                let h = host(&format!("{key}.host"), h)?;
                (format!("host `{}`", hosts[h]), Action::HostDown { host: h })
            }
            ClusterEvent::Migrate { vm: v, to, .. } => {
                let v = vm(&key, v)?;
                let to = host(&format!("{key}.to"), to)?;
                (format!("VM `{}`", vms[v].vm.name), Action::Migrate { vm: v, to })
            }
        };
        timeline.claim(&key, at_s, object)?;
        events.push((at_s, action));
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    if f.fidelity == Fidelity::Fluid {
        for (i, v) in vms.iter().enumerate() {
            if !matches!(v.source, SourceSpec::Greedy { .. } | SourceSpec::Cbr { .. }) {
                return Err(format!(
                    "vms[{i}].source: fluid fidelity models greedy and cbr sources; use fidelity = \"packet\" for TCP"
                ));
            }
        }
    }
    let uplinks: Vec<UplinkPlan> = (shape.uplinks.iter())
        .map(|u| UplinkPlan {
            name: u.name.clone(),
            capacity: u.capacity,
            rate_bps: u.effective.unwrap_or(u.capacity).bps_f64(),
        })
        .collect();
    Ok(ClusterPlan {
        fidelity: f.fidelity,
        hosts,
        uplinks,
        groups: built.groups,
        lbt: built.lbt,
        cluster,
        vms,
        events,
        file: f,
    })
}

/// The VMs of the file and of its `[generate]` section, checked.
fn resolve_vms(
    f: &ClusterFile,
    groups: &[PortGroupSpec],
    tree: &teamster_core::ioc::Tree,
    hosts: &[String],
) -> Result<Vec<VmPlan>, String> {
    let generated = f.generate.as_ref().map_or(0, |g| g.vms);
    if f.vms.len() + generated > MAX_VMS {
        return Err(format!("vms: at most {MAX_VMS} VMs, listed and generated together"));
    }
    let group = |key: &str, name: &str| {
        (groups.iter().position(|g| g.name == name)).ok_or_else(|| format!("{key}.group: no port group named `{name}`"))
    };
    let pool = |key: &str, pool: Option<&str>| {
        let name = pool.unwrap_or("vm");
        match tree.find(name) {
            Some(id) if id != NodeId::ROOT => Ok(name.to_string()),
            _ => Err(format!("{key}: no class or pool named `{name}`")),
        }
    };
    let mut out: Vec<VmPlan> = Vec::new();
    for (i, v) in f.vms.iter().enumerate() {
        let key = format!("vms[{i}]");
        host::check_name(&format!("{key}.name"), &v.name)?;
        if v.name.contains(['#', '~']) {
            return Err(format!(
                "{key}.name: `{}`: `#` and `~` are kept for the hosts' leaf names",
                v.name
            ));
        }
        if out.iter().any(|o| o.vm.name == v.name) || tree.find(&v.name).is_some() {
            return Err(format!("{key}.name: `{}` is used twice", v.name));
        }
        v.source.check().map_err(|e| format!("{key}.source.{e}"))?;
        let p = pool(&format!("{key}.pool"), v.pool.as_deref().or(v.class.as_deref()))?;
        let host = match &v.host {
            None => None,
            Some(h) => {
                Some((hosts.iter().position(|n| n == h)).ok_or_else(|| format!("{key}.host: no host named `{h}`"))?)
            }
        };
        if !(v.power_on_s.is_finite() && v.power_on_s >= 0.0 && v.power_on_s < f.duration_s) {
            return Err(format!(
                "{key}.power_on_s = {}: expected seconds from 0 to before duration_s",
                v.power_on_s
            ));
        }
        let mac = match &v.mac {
            Some(m) => m.parse::<MacAddr>().map_err(|e| format!("{key}.mac: {e}"))?,
            None => vm_mac(i),
        };
        if mac.is_multicast() || mac == MacAddr([0; 6]) || out.iter().any(|o| o.mac == mac) {
            return Err(format!("{key}.mac: {mac} is not a unicast MAC of its own"));
        }
        let vnic = Vnic {
            pool: p,
            reservation: v.reservation,
            shares: v.shares.unwrap_or(Shares::NORMAL),
            limit: v.limit,
        };
        teamster_core::ioc::admission::check_controls(&key, &node_spec(&v.name, &vnic))?;
        out.push(VmPlan {
            vm: Vm {
                name: v.name.clone(),
                vnics: vec![vnic],
            },
            id: match v.id {
                Some(id) if id >= FIRST_STAY_ID => {
                    return Err(format!(
                        "{key}.id: {id} is at or above {FIRST_STAY_ID}, kept for the hosts"
                    ))
                }
                id => id.unwrap_or(i as u32 + 1),
            },
            mac,
            group: group(&key, &v.group)?,
            source: v.source.clone(),
            host,
            power_on_s: v.power_on_s,
        });
    }
    if let Some(g) = &f.generate {
        let [lo, hi] = g.reservation;
        if lo > hi {
            return Err(format!("generate.reservation: {lo} is above {hi}"));
        }
        let source = g.source.clone().unwrap_or(SourceSpec::Greedy { bytes: 9000 });
        source.check().map_err(|e| format!("generate.source.{e}"))?;
        let gi = group("generate", &g.group)?;
        let p = pool("generate.pool", g.pool.as_deref())?;
        let mut rng = ChaCha8Rng::seed_from_u64(f.seed ^ 0x7673_6d73);
        // Multiples of 10 Mbit/s inside [lo, hi]; lo itself when none is.
        let step = 10_000_000;
        let (a, b) = (lo.bps().div_ceil(step), hi.bps() / step);
        for k in 0..g.vms {
            let n = out.len();
            let r = if a <= b {
                rng.random_range(a..=b) * step
            } else {
                lo.bps()
            };
            out.push(VmPlan {
                vm: Vm {
                    name: format!("vm{:04}", k + 1),
                    vnics: vec![Vnic {
                        pool: p.clone(),
                        reservation: Bandwidth::from_bps(r),
                        shares: Shares::NORMAL,
                        limit: None,
                    }],
                },
                id: n as u32 + 1,
                mac: vm_mac(n),
                group: gi,
                source: source.clone(),
                host: None,
                power_on_s: 0.0,
            });
            if out[..n]
                .iter()
                .any(|o| o.vm.name == out[n].vm.name || o.id == out[n].id)
            {
                return Err(format!("generate: VM `{}` clashes with a listed VM", out[n].vm.name));
            }
        }
    }
    for (i, v) in out.iter().enumerate() {
        if out[..i].iter().any(|o| o.id == v.id) {
            return Err(format!("vms[{i}].id: {} is another VM's ID", v.id));
        }
    }
    Ok(out)
}

/// VM `i`'s MAC when its entry gives none: 02:56 and its index, locally administered.
fn vm_mac(i: usize) -> MacAddr {
    let b = (i as u32 + 1).to_be_bytes();
    MacAddr([0x02, 0x56, b[0], b[1], b[2], b[3]])
}

/// The NetIOC node of VM `name`'s vNIC.
pub fn node_spec(name: &str, v: &Vnic) -> teamster_core::ioc::NodeSpec {
    teamster_core::ioc::NodeSpec {
        name: name.to_string(),
        reservation: v.reservation,
        shares: v.shares,
        limit: v.limit,
    }
}
