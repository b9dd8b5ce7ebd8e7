//! Fluid scenario files: the host, its workloads, a timeline of events and the expectations.
//!
//! A scenario is TOML. The host's tables (`[lbt]`, `reservation_cap`, `[[uplinks]]`,
//! `[[port_groups]]`, `[[traffic_classes]]`, `[[pools]]` and the shared part of `[[ports]]`) are
//! the host model of [`teamster_core::host`], checked by the same code as `switch.toml`; a port
//! adds its demand curves (`tx`, `rx`), its `flows` and `jitter`. Unknown keys are errors. Every
//! error names the file, the key and what was expected, and is reported before anything runs or
//! is written. See `scenarios/README.md` for the format with examples.

use crate::demand::{Demand, DemandSpec};
use crate::expect::ExpectSpec;
use crate::timeline;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use teamster_core::host::{self, ClassEntry, GroupEntry, Host, HostSpec, LbtSection, PoolEntry, UplinkDesc};
use teamster_core::teaming::{Damping, FailoverOrder, Policy, UplinkId};
use teamster_core::units::Bandwidth;
use teamster_core::wire::MacAddr;

pub use teamster_core::host::parse_toml;

/// A scenario as written in its file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Seed of the run's random choices.
    #[serde(default)]
    pub seed: u64,
    /// Simulated time, in seconds.
    pub duration_s: f64,
    /// Clock step, in seconds (default 1, at least 0.001).
    #[serde(default = "one")]
    pub step_s: f64,
    #[serde(default)]
    pub lbt: LbtSection,
    pub reservation_cap: Option<f64>,
    pub uplinks: Vec<UplinkFile>,
    pub port_groups: Vec<GroupEntry>,
    #[serde(default)]
    pub traffic_classes: Vec<ClassEntry>,
    #[serde(default)]
    pub pools: Vec<PoolEntry>,
    pub ports: Vec<PortFile>,
    #[serde(default)]
    pub events: Vec<EventFile>,
    #[serde(default)]
    pub expect: Vec<ExpectSpec>,
}

fn one() -> f64 {
    1.0
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UplinkFile {
    pub name: String,
    pub capacity: Bandwidth,
    /// Its receive queues (VMQs), 1 to 4096 (default 1): what the summary's VMQ count adds up.
    #[serde(default = "one_queue")]
    pub rx_queues: u32,
}

pub(crate) fn one_queue() -> u32 {
    1
}

/// Refuses a `duration_s` that is not a number of seconds above 0 and up to a day (the packet
/// and migration models' bound).
pub(crate) fn check_day(duration_s: f64) -> Result<(), String> {
    if duration_s.is_finite() && duration_s > 0.0 && duration_s <= 86_400.0 {
        Ok(())
    } else {
        Err(format!(
            "duration_s = {duration_s}: expected seconds between 0 and 86400"
        ))
    }
}

/// Refuses receive queue counts out of 1 to 4096, naming the key.
pub(crate) fn check_queues<'a>(names_and_queues: impl Iterator<Item = (&'a str, u32)>) -> Result<(), String> {
    for (i, (name, q)) in names_and_queues.enumerate() {
        if !(1..=4096).contains(&q) {
            return Err(format!(
                "uplinks[{i}].rx_queues: {q} for `{name}` is out of range 1-4096"
            ));
        }
    }
    Ok(())
}

teamster_core::port_entry! {
    /// A `[[ports]]` entry of a fluid scenario.
    pub struct PortFile {
        /// Send demand.
        pub tx: DemandSpec,
        /// Receive demand (default none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub rx: Option<DemandSpec>,
        /// Parallel IP flows the demand is split across (they matter under IP hash); default 1.
        #[serde(default = "crate::scenario::one_flow")]
        pub flows: u32,
        /// Relative random jitter on the demand each step, in [0, 1): 0.02 = ±2 %.
        #[serde(default)]
        pub jitter: f64,
    }
}

pub(crate) fn one_flow() -> u32 {
    1
}

/// A timeline event.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum EventFile {
    LinkDown {
        at_s: f64,
        uplink: String,
    },
    LinkUp {
        at_s: f64,
        uplink: String,
    },
    /// Change a group's policy (and optionally its failover order and failback).
    Policy {
        at_s: f64,
        group: String,
        policy: Policy,
        active: Option<Vec<String>>,
        standby: Option<Vec<String>>,
        failback: Option<bool>,
    },
}

impl EventFile {
    pub fn at_s(&self) -> f64 {
        match self {
            EventFile::LinkDown { at_s, .. } | EventFile::LinkUp { at_s, .. } | EventFile::Policy { at_s, .. } => *at_s,
        }
    }
}

/// A scenario that failed to load: the file and what is wrong, with the key.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ScenarioError {
    pub file: String,
    pub message: String,
}

/// A checked scenario, with names resolved and curves loaded.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub file: ScenarioFile,
    pub path: PathBuf,
    /// The host the file describes, checked and built (team, tree, groups, `[lbt]` knobs).
    pub host: Host,
    pub ports: Vec<PortPlan>,
    pub events: Vec<Event>,
}

/// A port ready to simulate.
#[derive(Debug, Clone)]
pub struct PortPlan {
    pub name: String,
    pub id: u32,
    pub mac: MacAddr,
    pub group: usize,
    pub tx: Demand,
    pub rx: Demand,
    pub flows: u32,
    pub jitter: f64,
}

/// A resolved timeline event.
#[derive(Debug, Clone)]
pub enum Event {
    Link {
        at_s: f64,
        uplink: UplinkId,
        up: bool,
    },
    Policy {
        at_s: f64,
        group: usize,
        policy: Policy,
        order: FailoverOrder,
        failback: bool,
    },
}

impl Event {
    pub fn at_s(&self) -> f64 {
        match self {
            Event::Link { at_s, .. } | Event::Policy { at_s, .. } => *at_s,
        }
    }
}

impl Scenario {
    /// Reads and checks a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
            file: name.clone(),
            message: format!("cannot read: {e}"),
        })?;
        Scenario::from_str(&text, path)
    }

    /// Parses and checks scenario text; `path` names it in errors and anchors relative files.
    pub fn from_str(text: &str, path: &Path) -> Result<Scenario, ScenarioError> {
        let err = |message: String| ScenarioError {
            file: path.display().to_string(),
            message,
        };
        let file = parse_toml(text).map_err(err)?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        resolve(file, path, &dir).map_err(err)
    }

    /// Index of the uplink named `name`.
    pub fn uplink_index(&self, name: &str) -> Option<usize> {
        self.file.uplinks.iter().position(|u| u.name == name)
    }

    /// True if the file gives Network I/O Control anything to do (classes, pools or a port's
    /// controls): the fluid engine then shares each uplink's send bandwidth by the NetIOC tree
    /// instead of max-min per flow.
    pub fn uses_netioc(&self) -> bool {
        let f = &self.file;
        !f.traffic_classes.is_empty()
            || !f.pools.is_empty()
            || f.ports
                .iter()
                .any(|p| p.reservation.bps() > 0 || p.shares.is_some() || p.limit.is_some() || p.class.is_some())
    }
}

/// Checks the numbers and resolves every name; errors carry the key path.
fn resolve(file: ScenarioFile, path: &Path, dir: &Path) -> Result<Scenario, String> {
    if !(file.duration_s.is_finite() && file.duration_s > 0.0 && file.duration_s <= 1e7) {
        return Err(format!(
            "duration_s = {}: expected seconds between 0 and 10000000",
            file.duration_s
        ));
    }
    if !(file.step_s.is_finite() && file.step_s >= 0.001 && file.step_s <= file.duration_s) {
        return Err(format!(
            "step_s = {}: expected seconds between 0.001 and duration_s",
            file.step_s
        ));
    }
    if file.duration_s / file.step_s > 1e8 {
        return Err("duration_s / step_s is over 100 million steps: use a larger step_s".into());
    }
    check_queues(file.uplinks.iter().map(|u| (u.name.as_str(), u.rx_queues)))?;
    // Teamster's LBT rule judges ports by their rate over the window's last tenth: a coarser
    // step would leave it empty between steps, and every port would look idle.
    let lbt_used = file.port_groups.iter().any(|g| g.policy == Policy::LOAD_BASED)
        || (file.events.iter()).any(|e| matches!(e, EventFile::Policy { policy, .. } if *policy == Policy::LOAD_BASED));
    if lbt_used && file.lbt.damping == Damping::Teamster && file.step_s > file.lbt.window_s / 10.0 {
        return Err(format!(
            "step_s = {}: Load-Based Teaming with damping = \"teamster\" needs at most lbt.window_s / 10 = {} \
             (its recent rate covers a tenth of the window)",
            file.step_s,
            file.lbt.window_s / 10.0
        ));
    }
    // MACs a port leaves out are drawn from the seed: locally administered, unicast, distinct.
    let mut macs = timeline::SeededMacs::new(file.seed);
    let host = host::build(
        HostSpec {
            lbt: &file.lbt,
            reservation_cap: file.reservation_cap,
            uplinks: file
                .uplinks
                .iter()
                .map(|u| UplinkDesc {
                    name: u.name.clone(),
                    capacity: u.capacity,
                })
                .collect(),
            port_groups: &file.port_groups,
            traffic_classes: &file.traffic_classes,
            pools: &file.pools,
            ports: &file.ports,
        },
        &mut |_, taken| Some(macs.next(taken)),
    )?;
    let names: Vec<&str> = file.uplinks.iter().map(|u| u.name.as_str()).collect();
    let load = |f: &str| std::fs::read_to_string(dir.join(f)).map_err(|e| format!("{}: {e}", dir.join(f).display()));
    let mut ports: Vec<PortPlan> = Vec::new();
    for (i, (p, hp)) in file.ports.iter().zip(&host.ports).enumerate() {
        let key = format!("ports[{i}]");
        if p.flows == 0 || p.flows > 65_536 {
            return Err(format!("{key}.flows: {} is out of range 1-65536", p.flows));
        }
        if !(0.0..1.0).contains(&p.jitter) {
            return Err(format!("{key}.jitter: {} is out of range [0, 1)", p.jitter));
        }
        let tx = p.tx.build(&load).map_err(|e| format!("{key}.tx: {e}"))?;
        let rx = match &p.rx {
            Some(r) => r.build(&load).map_err(|e| format!("{key}.rx: {e}"))?,
            None => Demand::Constant(0.0),
        };
        ports.push(PortPlan {
            name: p.name.clone(),
            id: hp.id.0,
            mac: hp.mac,
            group: hp.group.0,
            tx,
            rx,
            flows: p.flows,
            jitter: p.jitter,
        });
    }
    let group = |key: &str, name: &str| {
        file.port_groups.iter().position(|g| g.name == name).ok_or_else(|| {
            let known: Vec<&str> = file.port_groups.iter().map(|g| g.name.as_str()).collect();
            format!(
                "{key}: no port group named `{name}` (port groups: {})",
                known.join(", ")
            )
        })
    };
    let mut events = Vec::new();
    let mut checks = timeline::Timeline::new(file.duration_s);
    for (i, e) in file.events.iter().enumerate() {
        let key = format!("events[{i}]");
        let at_s = checks.time(&key, e.at_s())?;
        events.push(match e {
            EventFile::LinkDown { uplink, .. } | EventFile::LinkUp { uplink, .. } => {
                let up = matches!(e, EventFile::LinkUp { .. });
                let u = host::uplink_index(&names, &format!("{key}.uplink"), uplink)?;
                checks.claim(&key, at_s, format!("uplink `{uplink}`"))?;
                Event::Link { at_s, uplink: u, up }
            }
            EventFile::Policy {
                group: g,
                policy,
                active,
                standby,
                failback,
                ..
            } => {
                let gi = group(&format!("{key}.group"), g)?;
                checks.claim(&key, at_s, format!("port group `{g}`"))?;
                let old = &file.port_groups[gi];
                let order = host::failover_order(
                    &names,
                    &key,
                    active.as_ref().unwrap_or(&old.active),
                    standby.as_ref().unwrap_or(&old.standby),
                )?;
                Event::Policy {
                    at_s,
                    group: gi,
                    policy: *policy,
                    order,
                    failback: failback.unwrap_or(old.failback),
                }
            }
        });
    }
    // Stable: events at the same instant keep their file order.
    let mut order: Vec<usize> = (0..events.len()).collect();
    order.sort_by(|&a, &b| events[a].at_s().total_cmp(&events[b].at_s()).then(a.cmp(&b)));
    let mut up = vec![true; names.len()];
    for &k in &order {
        if let Event::Link { at_s, uplink, up: to } = &events[k] {
            if up[uplink.0] == *to {
                return Err(format!(
                    "events[{k}]: uplink `{}` is already {} at {at_s} s",
                    names[uplink.0],
                    if *to { "up" } else { "down" }
                ));
            }
            up[uplink.0] = *to;
        }
    }
    let events: Vec<Event> = order.into_iter().map(|k| events[k].clone()).collect();
    let names = crate::expect::Names {
        uplinks: file.uplinks.iter().map(|u| u.name.clone()).collect(),
        ports: file.ports.iter().map(|p| p.name.clone()).collect(),
        nodes: Vec::new(),
    };
    for (i, x) in file.expect.iter().enumerate() {
        x.check(&names, dir).map_err(|e| format!("expect[{i}]: {e}"))?;
    }
    Ok(Scenario {
        host,
        file,
        path: path.to_path_buf(),
        ports,
        events,
    })
}
