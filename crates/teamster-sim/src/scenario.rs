//! Scenario files: the host, its workloads, a timeline of events and the expectations.
//!
//! A scenario is TOML. Unknown keys are errors. Every error names the file, the key and what was
//! expected, and is reported before anything runs or is written. See `scenarios/README.md` for
//! the format with examples.

use crate::demand::{Demand, DemandSpec};
use crate::expect::ExpectSpec;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use teamster_core::teaming::{Damping, FailoverOrder, LbtConfig, Policy, PortGroupSpec, UplinkId};
use teamster_core::units::Bandwidth;
use teamster_core::wire::MacAddr;

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
    pub lbt: LbtFile,
    pub uplinks: Vec<UplinkFile>,
    pub port_groups: Vec<GroupFile>,
    pub ports: Vec<PortFile>,
    #[serde(default)]
    pub events: Vec<EventFile>,
    #[serde(default)]
    pub expect: Vec<ExpectSpec>,
}

fn one() -> f64 {
    1.0
}
fn yes() -> bool {
    true
}

/// Load-Based Teaming knobs (defaults as vSphere: 30 s, 0.75, 30 s).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LbtFile {
    #[serde(default = "default_window")]
    pub window_s: f64,
    #[serde(default = "default_threshold")]
    pub threshold: f64,
    #[serde(default = "default_window")]
    pub period_s: f64,
    /// "teamster" (default) or "vsphere": see `teamster_core::teaming::lbt`.
    #[serde(default)]
    pub damping: Damping,
}

fn default_window() -> f64 {
    30.0
}
fn default_threshold() -> f64 {
    0.75
}

impl Default for LbtFile {
    fn default() -> Self {
        LbtFile {
            window_s: 30.0,
            threshold: 0.75,
            period_s: 30.0,
            damping: Damping::default(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UplinkFile {
    pub name: String,
    pub capacity: Bandwidth,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GroupFile {
    pub name: String,
    pub policy: Policy,
    pub active: Vec<String>,
    #[serde(default)]
    pub standby: Vec<String>,
    #[serde(default = "yes")]
    pub failback: bool,
    #[serde(default = "yes")]
    pub notify_switches: bool,
    pub vlan: Option<u16>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortFile {
    pub name: String,
    /// Virtual port ID (what originating-port-ID hashes); default: 1 + the port's index.
    pub id: Option<u32>,
    /// Default: generated from the seed.
    pub mac: Option<String>,
    pub group: String,
    /// Send demand.
    pub tx: DemandSpec,
    /// Receive demand (default none).
    pub rx: Option<DemandSpec>,
    /// Parallel IP flows the demand is split across (they matter under IP hash); default 1.
    #[serde(default = "one_flow")]
    pub flows: u32,
    /// Relative random jitter on the demand each step, in [0, 1): 0.02 = ±2 %.
    #[serde(default)]
    pub jitter: f64,
}

fn one_flow() -> u32 {
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
    pub lbt: LbtConfig,
    pub ports: Vec<PortPlan>,
    pub groups: Vec<PortGroupSpec>,
    pub events: Vec<Event>,
}

/// A port ready to simulate.
#[derive(Debug, Clone)]
pub struct PortPlan {
    pub name: String,
    pub id: u32,
    pub mac: Option<MacAddr>,
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
}

/// The `[lbt]` table as the team's knobs, checked.
pub fn lbt_config(f: &LbtFile) -> Result<LbtConfig, String> {
    let secs = |k: &str, v: f64| {
        if v.is_finite() && v > 0.0 {
            Ok(core::time::Duration::from_secs_f64(v))
        } else {
            Err(format!("lbt.{k} = {v}: expected a positive number of seconds"))
        }
    };
    let lbt = LbtConfig {
        window: secs("window_s", f.window_s)?,
        threshold: f.threshold,
        period: secs("period_s", f.period_s)?,
        damping: f.damping,
    };
    lbt.validate().map_err(|e| format!("[lbt]: {e}"))?;
    Ok(lbt)
}

/// The index of the uplink named `name`; the error, under `key`, lists the known ones.
pub fn uplink_index(uplinks: &[&str], key: &str, name: &str) -> Result<UplinkId, String> {
    uplinks
        .iter()
        .position(|u| *u == name)
        .map(UplinkId)
        .ok_or_else(|| format!("{key}: no uplink named `{name}` (uplinks: {})", uplinks.join(", ")))
}

/// A failover order from uplink names, under `key`.
pub fn failover_order(
    uplinks: &[&str],
    key: &str,
    active: &[String],
    standby: &[String],
) -> Result<FailoverOrder, String> {
    let list = |k: &str, names: &[String]| {
        names
            .iter()
            .enumerate()
            .map(|(j, n)| uplink_index(uplinks, &format!("{key}.{k}[{j}]"), n))
            .collect::<Result<Vec<_>, _>>()
    };
    Ok(FailoverOrder {
        active: list("active", active)?,
        standby: list("standby", standby)?,
    })
}

/// Resolves `[[port_groups]]` against the uplinks' names; errors carry the key path.
pub fn resolve_groups(groups: &[GroupFile], uplinks: &[&str]) -> Result<Vec<PortGroupSpec>, String> {
    let mut out = Vec::new();
    for (i, g) in groups.iter().enumerate() {
        let key = format!("port_groups[{i}]");
        if groups[..i].iter().any(|o| o.name == g.name) {
            return Err(format!("{key}.name: `{}` is used twice", g.name));
        }
        if g.active.is_empty() {
            return Err(format!("{key}.active: expected at least one active uplink"));
        }
        if let Some(v) = g.vlan.filter(|v| !(1..=4094).contains(v)) {
            return Err(format!("{key}.vlan: {v} is out of range 1-4094"));
        }
        out.push(PortGroupSpec {
            name: g.name.clone(),
            policy: g.policy,
            order: failover_order(uplinks, &key, &g.active, &g.standby)?,
            failback: g.failback,
            notify_switches: g.notify_switches,
            vlan: g.vlan,
        });
    }
    Ok(out)
}

/// A team of these uplinks with these port groups (ports are added by the caller).
pub fn build_team(
    uplinks: impl IntoIterator<Item = (String, teamster_core::units::Bandwidth)>,
    lbt: LbtConfig,
    groups: &[PortGroupSpec],
) -> Result<teamster_core::teaming::Team, String> {
    let specs = uplinks
        .into_iter()
        .map(|(name, capacity)| teamster_core::teaming::UplinkSpec { name, capacity })
        .collect();
    let mut team = teamster_core::teaming::Team::new(specs, lbt).map_err(|e| e.to_string())?;
    for g in groups {
        team.add_group(g.clone()).map_err(|e| e.to_string())?;
    }
    Ok(team)
}

/// Parses the TOML into the file model; a shape error leads with the key path (`ports[0].tx`)
/// and keeps the TOML parser's line, column and caret.
pub fn parse_toml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    let de = toml::Deserializer::parse(text).map_err(|e| e.to_string().trim_end().to_string())?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        if path == "." {
            inner.trim_end().to_string()
        } else {
            format!("{path}: {}", inner.trim_end())
        }
    })
}

/// Checks the numbers and resolves every name; errors carry the key path.
fn resolve(file: ScenarioFile, path: &Path, dir: &Path) -> Result<Scenario, String> {
    if !(file.duration_s.is_finite() && file.duration_s > 0.0) {
        return Err(format!(
            "duration_s = {}: expected a positive number of seconds",
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
    let lbt = lbt_config(&file.lbt)?;
    // Teamster's LBT rule judges ports by their rate over the window's last tenth: a coarser
    // step would leave it empty between steps, and every port would look idle.
    let lbt_used = file.port_groups.iter().any(|g| g.policy == Policy::LOAD_BASED)
        || (file.events.iter()).any(|e| matches!(e, EventFile::Policy { policy, .. } if *policy == Policy::LOAD_BASED));
    if lbt_used && lbt.damping == Damping::Teamster && file.step_s > file.lbt.window_s / 10.0 {
        return Err(format!(
            "step_s = {}: Load-Based Teaming with damping = \"teamster\" needs at most lbt.window_s / 10 = {} \
             (its recent rate covers a tenth of the window)",
            file.step_s,
            file.lbt.window_s / 10.0
        ));
    }
    if file.uplinks.is_empty() {
        return Err("uplinks: expected at least one [[uplinks]] table".into());
    }
    for (i, u) in file.uplinks.iter().enumerate() {
        if file.uplinks[..i].iter().any(|o| o.name == u.name) {
            return Err(format!("uplinks[{i}].name: `{}` is used twice", u.name));
        }
        if u.capacity.bps() == 0 {
            return Err(format!("uplinks[{i}].capacity: must be greater than zero"));
        }
    }
    let names: Vec<&str> = file.uplinks.iter().map(|u| u.name.as_str()).collect();
    let uplink = |key: &str, name: &str| uplink_index(&names, key, name);
    let order = |key: &str, active: &[String], standby: &[String]| failover_order(&names, key, active, standby);
    let groups = resolve_groups(&file.port_groups, &names)?;
    let group = |key: &str, name: &str| {
        file.port_groups.iter().position(|g| g.name == name).ok_or_else(|| {
            let known: Vec<&str> = file.port_groups.iter().map(|g| g.name.as_str()).collect();
            format!(
                "{key}: no port group named `{name}` (port groups: {})",
                known.join(", ")
            )
        })
    };
    if file.ports.is_empty() {
        return Err("ports: expected at least one [[ports]] table".into());
    }
    let load = |f: &str| std::fs::read_to_string(dir.join(f)).map_err(|e| format!("{}: {e}", dir.join(f).display()));
    let mut ports: Vec<PortPlan> = Vec::new();
    for (i, p) in file.ports.iter().enumerate() {
        let key = format!("ports[{i}]");
        if ports.iter().any(|o| o.name == p.name) {
            return Err(format!("{key}.name: `{}` is used twice", p.name));
        }
        let id = p.id.unwrap_or(i as u32 + 1);
        if let Some(o) = ports.iter().find(|o| o.id == id) {
            return Err(format!("{key}.id: {id} is already the ID of port `{}`", o.name));
        }
        let mac = match &p.mac {
            Some(m) => Some(m.parse::<MacAddr>().map_err(|e| format!("{key}.mac: {e}"))?),
            None => None,
        };
        if let Some(o) = ports.iter().find(|o| mac.is_some() && o.mac == mac) {
            return Err(format!(
                "{key}.mac: {} is already the MAC of port `{}`",
                mac.unwrap_or_default(),
                o.name
            ));
        }
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
            id,
            mac,
            group: group(&format!("{key}.group"), &p.group)?,
            tx,
            rx,
            flows: p.flows,
            jitter: p.jitter,
        });
    }
    let mut events = Vec::new();
    for (i, e) in file.events.iter().enumerate() {
        let key = format!("events[{i}]");
        let at_s = e.at_s();
        if !(at_s.is_finite() && at_s >= 0.0) {
            return Err(format!(
                "{key}.at_s = {at_s}: expected a non-negative number of seconds"
            ));
        }
        events.push(match e {
            EventFile::LinkDown { uplink: u, .. } => Event::Link {
                at_s,
                uplink: uplink(&format!("{key}.uplink"), u)?,
                up: false,
            },
            EventFile::LinkUp { uplink: u, .. } => Event::Link {
                at_s,
                uplink: uplink(&format!("{key}.uplink"), u)?,
                up: true,
            },
            EventFile::Policy {
                group: g,
                policy,
                active,
                standby,
                failback,
                ..
            } => {
                let gi = group(&format!("{key}.group"), g)?;
                let mut o = groups[gi].order.clone();
                if let Some(a) = active {
                    o.active = order(&key, a, &[])?.active;
                }
                if let Some(s) = standby {
                    o.standby = order(&key, &[], s)?.standby;
                }
                if o.active.is_empty() {
                    return Err(format!("{key}.active: expected at least one active uplink"));
                }
                Event::Policy {
                    at_s,
                    group: gi,
                    policy: *policy,
                    order: o,
                    failback: failback.unwrap_or(groups[gi].failback),
                }
            }
        });
    }
    events.sort_by(|a, b| a.at_s().total_cmp(&b.at_s()));
    let names = crate::expect::Names {
        uplinks: file.uplinks.iter().map(|u| u.name.clone()).collect(),
        ports: file.ports.iter().map(|p| p.name.clone()).collect(),
        nodes: Vec::new(),
    };
    for (i, x) in file.expect.iter().enumerate() {
        x.check(&names, dir).map_err(|e| format!("expect[{i}]: {e}"))?;
    }
    Ok(Scenario {
        file,
        path: path.to_path_buf(),
        lbt,
        ports,
        groups,
        events,
    })
}
