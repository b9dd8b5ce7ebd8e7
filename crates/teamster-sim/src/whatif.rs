//! What-if: a host's recent past as a scenario, changes applied to it, and the two fluid runs
//! compared port by port and uplink by uplink.
//!
//! Model. The *past* is a fluid scenario whose ports offer what the switch measured (each
//! port's `tx` a `points` curve of its delivered rate, a point a second): run as it is, it is the
//! model of what happened (the *baseline*), which says how well the model fits this host. The
//! *change* is the same scenario edited ([`apply`]): a port's NetIOC controls, an uplink down or
//! at another capacity, a group's teaming policy, a port added with a demand or removed. Run
//! again, it is the *prediction*. [`answer`] gives, per port, the measured mean, the baseline's
//! and the prediction's, whether its reservation holds in the prediction, and the uplink it
//! ends on; per uplink its mean utilisation in both runs; and the moves (Load-Based Teaming's
//! among them) the prediction makes, with their times.
//!
//! Demands, not deliveries: the switch counts a port's rate where it takes its frames, and beside
//! it what its NetIOC queue turned away, marked and held ([`Evidence`]); [`demand`] estimates
//! from these what each port wanted each second (what it offered, or all it could get for a
//! sender that backed off), and the past offers that. The answer gives each port's estimate,
//! how it was made and its low and high ends; without evidence a port is taken to want what it
//! was measured at, and one measured at its limit or on a full uplink is named as uncertain.
//!
//! What the fluid model leaves out, and the answer says so: latency and queues, bursts shorter
//! than the step (a second), TCP's own dynamics (a flow is a rate, not a window). The packet
//! model ([`Fidelity::Packet`]) has queues and TCP's windows, at a bounded cost: see
//! [`packet`].
//!
//! Bad input (an unknown port, uplink or group, a change admission control refuses) is an error
//! naming it; nothing here touches a switch.

pub mod demand;
mod packet;
mod series;

pub use demand::{Estimate, Evidence, How};
pub use series::Series;

use crate::run::RunOutput;
use crate::scenario::Scenario;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use teamster_core::ioc::Shares;
use teamster_core::teaming::Policy;
use teamster_core::units::Bandwidth;
use toml::{Table, Value};

/// One change to the past.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Change {
    /// A port's NetIOC controls; those left out keep their value (`limit = "none"` removes one).
    Port {
        port: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reservation: Option<Bandwidth>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shares: Option<Shares>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<LimitChange>,
    },
    /// An uplink down for the whole window.
    UplinkDown { uplink: String },
    /// An uplink at another capacity.
    UplinkCapacity { uplink: String, capacity: Bandwidth },
    /// A traffic class's (by its class name, `vm` or `nfs` say) or a pool's NetIOC controls;
    /// those left out keep their value.
    Node {
        node: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reservation: Option<Bandwidth>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shares: Option<Shares>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<LimitChange>,
    },
    /// A port group's teaming policy.
    Policy { group: String, policy: Policy },
    /// A port group's failover order: its active uplinks, and its standby ones if given.
    Order {
        group: String,
        active: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        standby: Option<Vec<String>>,
    },
    /// A port added to `group`, sending `tx` all along or as `profile` says over the window
    /// (one of the two), with the NetIOC controls given.
    AddPort {
        name: String,
        group: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tx: Option<Bandwidth>,
        /// A demand curve ([`crate::demand`]: constant, ramp, step, on-off or points; not csv,
        /// which would read a file).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        profile: Option<crate::demand::DemandSpec>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reservation: Option<Bandwidth>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<Bandwidth>,
    },
    /// A port removed.
    RemovePort { port: String },
}

/// A new limit: a rate, or `"none"` for none.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LimitChange {
    To(Bandwidth),
    Remove,
}

impl Serialize for LimitChange {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            LimitChange::To(b) => b.serialize(s),
            LimitChange::Remove => s.serialize_str("none"),
        }
    }
}

impl<'de> Deserialize<'de> for LimitChange {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if text == "none" {
            return Ok(LimitChange::Remove);
        }
        text.parse::<Bandwidth>()
            .map(LimitChange::To)
            .map_err(|e| serde::de::Error::custom(format!("limit `{text}`: {e} (or \"none\")")))
    }
}

/// Which model answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fidelity {
    /// Rates a step at a time (the default): seconds for an hour's window.
    #[default]
    Fluid,
    /// Packets, queues and TCP's windows (see [`packet`]).
    Packet,
}

/// A what-if as `teamster-sim --whatif` reads it: the past, the changes, what the switch
/// measured of each port beside its rate (by port name), and the model.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub scenario: String,
    #[serde(default)]
    pub changes: Vec<Change>,
    #[serde(default)]
    pub evidence: BTreeMap<String, Evidence>,
    #[serde(default)]
    pub fidelity: Fidelity,
}

/// A port in the answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PortAnswer {
    pub name: String,
    /// Its mean send rate over the window as measured (None: a port the change adds).
    pub measured_bps: Option<f64>,
    /// The model of the past: its mean delivered send rate.
    pub baseline_bps: Option<f64>,
    /// With the change (None: a port the change removes).
    pub predicted_bps: Option<f64>,
    pub reservation_bps: f64,
    /// Whether the prediction gives it its reservation, or all it offered if that is less (to
    /// within 1% of the reservation), every second of the window; None without a reservation.
    pub reservation_holds: Option<bool>,
    /// The uplink it ends on in the model of the past, and with the change.
    pub uplink_before: Option<String>,
    pub uplink_after: Option<String>,
    /// Held down while measured (see [`demand`]), or, without evidence, measured at its limit
    /// or on a full uplink: it may have wanted more than it got.
    pub may_want_more: bool,
    /// Its demand as estimated from the evidence (None: none given, or a port the change adds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub demand: Option<Estimate>,
}

/// An uplink in the answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UplinkAnswer {
    pub name: String,
    /// Mean send utilisation of its capacity (0-1), in the model of the past and with the change.
    pub baseline_utilisation: f64,
    pub predicted_utilisation: f64,
}

/// A move the prediction makes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MoveAnswer {
    pub t_s: f64,
    pub port: String,
    pub from: Option<String>,
    pub to: Option<String>,
    pub reason: String,
}

/// What a what-if answers; see the module documentation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Answer {
    pub window_s: f64,
    pub changes: Vec<Change>,
    pub ports: Vec<PortAnswer>,
    pub uplinks: Vec<UplinkAnswer>,
    pub moves: Vec<MoveAnswer>,
    /// What the model leaves out, and what this answer cannot tell.
    pub notes: Vec<String>,
    /// The scenario with the change (`teamster simulate` runs it again).
    pub scenario: String,
    /// Which model answered.
    pub fidelity: Fidelity,
    /// Second by second: each port's measured, modelled and predicted send rate and each
    /// uplink's send rate in both runs.
    pub series: Series,
}

/// Applies `changes` to scenario `text`, giving the changed scenario's text. An unknown name or
/// a repeated port name is an error naming it; the result is checked when it is loaded.
pub fn apply(text: &str, changes: &[Change]) -> Result<String, String> {
    let mut doc: Table = toml::from_str(text).map_err(|e| format!("the scenario: {e}"))?;
    for (i, c) in changes.iter().enumerate() {
        apply_one(&mut doc, c).map_err(|e| format!("changes[{i}]: {e}"))?;
    }
    if let Some(Value::String(name)) = doc.get_mut("name") {
        name.push_str(" (what if)");
    }
    toml::to_string(&doc).map_err(|e| format!("writing the scenario: {e}"))
}

/// The `[[kind]]` array of `doc` (empty if absent).
fn array<'a>(doc: &'a mut Table, kind: &str) -> &'a mut Vec<Value> {
    let v = doc.entry(kind).or_insert_with(|| Value::Array(Vec::new()));
    if !v.is_array() {
        *v = Value::Array(Vec::new());
    }
    v.as_array_mut().expect("an array")
}

/// The entry of `[[kind]]` named `name`, or an error naming it.
fn named<'a>(doc: &'a mut Table, kind: &str, what: &str, name: &str) -> Result<&'a mut Table, String> {
    array(doc, kind)
        .iter_mut()
        .filter_map(Value::as_table_mut)
        .find(|t| t.get("name").and_then(Value::as_str) == Some(name))
        .ok_or_else(|| format!("no {what} named `{name}`"))
}

/// Written as plain bits/s, which every Bandwidth field reads back exactly.
fn rate(b: Bandwidth) -> Value {
    Value::String(b.bps().to_string())
}

/// Sets the NetIOC controls given on entry `t` (a port, class or pool).
fn set_controls(t: &mut Table, reservation: Option<Bandwidth>, shares: Option<Shares>, limit: Option<LimitChange>) {
    if let Some(r) = reservation {
        t.insert("reservation".into(), rate(r));
    }
    if let Some(s) = shares {
        t.insert("shares".into(), Value::Integer(i64::from(s.get())));
    }
    match limit {
        Some(LimitChange::To(l)) => {
            t.insert("limit".into(), rate(l));
        }
        Some(LimitChange::Remove) => {
            t.remove("limit");
        }
        None => {}
    }
}

/// The `[[traffic_classes]]` entry of class `node`, or the `[[pools]]` entry named `node`; a
/// class the scenario does not list yet (at its defaults) is added, for the loader to check.
fn node<'a>(doc: &'a mut Table, node: &str) -> Result<&'a mut Table, String> {
    let is_class = |v: &Value| v.get("class").and_then(Value::as_str) == Some(node);
    let is_pool = |v: &Value| v.get("name").and_then(Value::as_str) == Some(node);
    if array(doc, "pools").iter().any(is_pool) {
        return array(doc, "pools")
            .iter_mut()
            .find(|v| is_pool(v))
            .and_then(Value::as_table_mut)
            .ok_or_else(|| format!("pool `{node}`: not a table"));
    }
    let classes = array(doc, "traffic_classes");
    if !classes.iter().any(is_class) {
        let known = teamster_core::ioc::TrafficClass::ALL.iter().any(|c| c.name() == node);
        if !known {
            return Err(format!("no traffic class or pool named `{node}`"));
        }
        let mut t = Table::new();
        t.insert("class".into(), Value::String(node.to_string()));
        classes.push(Value::Table(t));
    }
    classes
        .iter_mut()
        .find(|v| is_class(v))
        .and_then(Value::as_table_mut)
        .ok_or_else(|| format!("class `{node}`: not a table"))
}

fn apply_one(doc: &mut Table, c: &Change) -> Result<(), String> {
    match c {
        Change::Port {
            port,
            reservation,
            shares,
            limit,
        } => set_controls(named(doc, "ports", "port", port)?, *reservation, *shares, *limit),
        Change::Node {
            node: name,
            reservation,
            shares,
            limit,
        } => set_controls(node(doc, name)?, *reservation, *shares, *limit),
        Change::Order { group, active, standby } => {
            for u in active.iter().chain(standby.iter().flatten()) {
                named(doc, "uplinks", "uplink", u)?;
            }
            let list = |v: &[String]| Value::Array(v.iter().cloned().map(Value::String).collect());
            let g = named(doc, "port_groups", "port group", group)?;
            g.insert("active".into(), list(active));
            if let Some(s) = standby {
                g.insert("standby".into(), list(s));
            }
        }
        Change::UplinkDown { uplink } => {
            named(doc, "uplinks", "uplink", uplink)?;
            // Down all along already (the past has it down): nothing more to say.
            let already = array(doc, "events").iter().any(|e| {
                e.get("kind").and_then(Value::as_str) == Some("link-down")
                    && e.get("uplink").and_then(Value::as_str) == Some(uplink.as_str())
                    && e.get("at_s").and_then(Value::as_float) == Some(0.0)
            });
            if already {
                return Ok(());
            }
            let mut e = Table::new();
            e.insert("kind".into(), Value::String("link-down".into()));
            e.insert("at_s".into(), Value::Float(0.0));
            e.insert("uplink".into(), Value::String(uplink.clone()));
            array(doc, "events").push(Value::Table(e));
        }
        Change::UplinkCapacity { uplink, capacity } => {
            named(doc, "uplinks", "uplink", uplink)?.insert("capacity".into(), rate(*capacity));
        }
        Change::Policy { group, policy } => {
            named(doc, "port_groups", "port group", group)?.insert("policy".into(), Value::String(policy.to_string()));
        }
        Change::AddPort {
            name,
            group,
            tx,
            profile,
            reservation,
            limit,
        } => {
            if named(doc, "ports", "port", name).is_ok() {
                return Err(format!("a port named `{name}` is there already"));
            }
            named(doc, "port_groups", "port group", group)?;
            let mut p = Table::new();
            p.insert("name".into(), Value::String(name.clone()));
            p.insert("group".into(), Value::String(group.clone()));
            let demand = match (tx, profile) {
                (Some(tx), None) => {
                    let mut d = Table::new();
                    d.insert("kind".into(), Value::String("constant".into()));
                    d.insert("rate".into(), rate(*tx));
                    Value::Table(d)
                }
                (None, Some(crate::demand::DemandSpec::Csv { .. })) => {
                    return Err(format!(
                        "port `{name}`: a csv profile reads a file; give its points instead"
                    ))
                }
                (None, Some(spec)) => Value::try_from(spec).map_err(|e| format!("port `{name}`: profile: {e}"))?,
                _ => {
                    return Err(format!(
                        "port `{name}`: give what it sends as tx or as a profile, one of the two"
                    ))
                }
            };
            p.insert("tx".into(), demand);
            if let Some(r) = reservation {
                p.insert("reservation".into(), rate(*r));
            }
            if let Some(l) = limit {
                p.insert("limit".into(), rate(*l));
            }
            array(doc, "ports").push(Value::Table(p));
        }
        Change::RemovePort { port } => {
            named(doc, "ports", "port", port)?;
            array(doc, "ports").retain(|p| p.get("name").and_then(Value::as_str) != Some(port.as_str()));
        }
    }
    Ok(())
}

/// Each port's mean delivered send rate over `out`'s rows, by name.
fn means(out: &RunOutput) -> Vec<(String, f64)> {
    let n = out.rows.len().max(1) as f64;
    out.ports
        .iter()
        .enumerate()
        .map(|(i, name)| {
            (
                name.clone(),
                out.rows.iter().map(|r| r.delivered_tx[i]).sum::<f64>() / n,
            )
        })
        .collect()
}

/// Why a what-if has no answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WhatIfError {
    /// The changes do not fit this past: a name it does not have, what admission control
    /// refuses, a change the scenario cannot take.
    #[error("{0}")]
    Changes(String),
    /// The past itself does not load or run (its writer's fault, not the changes').
    #[error("the past: {0}")]
    Past(String),
    /// The model asked for cannot answer this question (the packet model: a host too fast
    /// for its bound, a change of policy in time).
    #[error("{0}")]
    Unsupported(String),
}

/// Scenario `text` (the past, or the past with the changes) with each port that has
/// `evidence` offering its estimated demand (see [`demand`]) instead of what it was measured
/// at, and the estimates by port name. A port's greedy demand is the fastest uplink its group
/// may use in this scenario, among those not down all along. Evidence for a port the scenario
/// does not have is an error if `every` (the past must have them all; a change may remove one).
fn estimated(
    text: &str,
    evidence: &BTreeMap<String, Evidence>,
    every: bool,
) -> Result<(String, BTreeMap<String, demand::Estimated>), String> {
    if evidence.is_empty() {
        return Ok((text.to_string(), BTreeMap::new()));
    }
    let mut doc: Table = toml::from_str(text).map_err(|e| e.to_string())?;
    let rate = |v: Option<&Value>| v.and_then(Value::as_str).and_then(|s| s.parse::<Bandwidth>().ok());
    let down: Vec<String> = array(&mut doc, "events")
        .iter()
        .filter(|e| {
            e.get("kind").and_then(Value::as_str) == Some("link-down")
                && e.get("at_s").and_then(number).is_some_and(|t| t <= 0.0)
        })
        .filter_map(|e| Some(e.get("uplink")?.as_str()?.to_string()))
        .collect();
    let capacities: BTreeMap<String, f64> = array(&mut doc, "uplinks")
        .iter()
        .filter_map(|u| Some((u.get("name")?.as_str()?.to_string(), rate(u.get("capacity"))?.bps_f64())))
        .filter(|(name, _)| !down.contains(name))
        .collect();
    let fastest: BTreeMap<String, f64> = array(&mut doc, "port_groups")
        .iter()
        .filter_map(|g| {
            let names = ["active", "standby"]
                .iter()
                .filter_map(|k| g.get(*k).and_then(Value::as_array))
                .flatten()
                .filter_map(Value::as_str);
            let most = names.filter_map(|n| capacities.get(n)).copied().fold(0.0, f64::max);
            Some((g.get("name")?.as_str()?.to_string(), most))
        })
        .collect();
    let any = capacities.values().copied().fold(0.0, f64::max);
    let mut out = BTreeMap::new();
    for p in array(&mut doc, "ports").iter_mut().filter_map(Value::as_table_mut) {
        let name = p.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
        let Some(ev) = evidence.get(&name) else { continue };
        let group = p.get("group").and_then(Value::as_str).unwrap_or_default();
        let greedy = fastest.get(group).copied().filter(|g| *g > 0.0).unwrap_or(any);
        let Some(points) = p
            .get_mut("tx")
            .and_then(Value::as_table_mut)
            .filter(|t| t.get("kind").and_then(Value::as_str) == Some("points"))
            .and_then(|t| t.get_mut("points"))
        else {
            return Err(format!("port `{name}`: evidence needs its tx as measured points"));
        };
        let offered: Vec<[f64; 2]> = points
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|pt| {
                let pt = pt.as_array()?;
                Some([number(pt.first()?)?, number(pt.get(1)?)?])
            })
            .collect();
        let e = demand::estimate(&offered, ev, greedy);
        *points = Value::Array(
            e.demand
                .iter()
                .map(|[t, d]| Value::Array(vec![Value::Float(*t), Value::Float(*d)]))
                .collect(),
        );
        out.insert(name, e);
    }
    if let Some(missing) = evidence.keys().find(|n| !out.contains_key(*n)).filter(|_| every) {
        return Err(format!("evidence for `{missing}`: no such port"));
    }
    let text = toml::to_string(&doc).map_err(|e| e.to_string())?;
    Ok((text, out))
}

/// A TOML number as f64.
fn number(v: &Value) -> Option<f64> {
    v.as_float().or_else(|| v.as_integer().map(|i| i as f64))
}

/// The past and the changed past, run by the model `fidelity` names.
fn runs(
    fidelity: Fidelity,
    past: &Scenario,
    changed: &Scenario,
    estimates: &BTreeMap<String, demand::Estimated>,
) -> Result<(RunOutput, RunOutput), WhatIfError> {
    let changes = |e: String| WhatIfError::Changes(format!("with the change: {e}"));
    Ok(match fidelity {
        Fidelity::Fluid => (
            crate::fluid::run(past).map_err(WhatIfError::Past)?,
            crate::fluid::run(changed).map_err(changes)?,
        ),
        Fidelity::Packet => {
            let failed = |e: packet::Failed, blame: &dyn Fn(String) -> WhatIfError| match e {
                packet::Failed::Unsupported(m) => WhatIfError::Unsupported(m),
                packet::Failed::Run(m) => blame(m),
            };
            (
                packet::run(past, estimates).map_err(|e| failed(e, &WhatIfError::Past))?,
                packet::run(changed, estimates).map_err(|e| failed(e, &changes))?,
            )
        }
    })
}

/// Runs the past in `req` and the same with its changes, and compares them (see the module
/// documentation). `path` names the scenario in errors.
pub fn answer(req: &Request, path: &Path) -> Result<Answer, WhatIfError> {
    let load = |t: &str| Scenario::from_str(t, path).map_err(|e| e.to_string());
    // The past must load as it was given before its demands are estimated.
    load(&req.scenario).map_err(WhatIfError::Past)?;
    let (text, estimates) = estimated(&req.scenario, &req.evidence, true).map_err(WhatIfError::Past)?;
    let past = load(&text).map_err(WhatIfError::Past)?;
    // Estimated again with the change: a greedy port wants what its uplinks carry then.
    let changed_raw = apply(&req.scenario, &req.changes).map_err(WhatIfError::Changes)?;
    let (changed_text, _) = estimated(&changed_raw, &req.evidence, false).map_err(WhatIfError::Changes)?;
    let changed = load(&changed_text).map_err(|e| WhatIfError::Changes(format!("with the change: {e}")))?;
    let (before, after) = runs(req.fidelity, &past, &changed, &estimates)?;
    let window_s = past.file.duration_s;
    let steps = window_s.max(1.0) as usize;
    // Measured, a second at a time: what it got where the evidence tells, else what it offered.
    let measured_series: Vec<(String, Vec<f64>)> = past
        .ports
        .iter()
        .map(|p| {
            let got = estimates
                .get(&p.name)
                .map(|e| crate::demand::Demand::Piecewise(e.delivered.iter().map(|[t, v]| (*t, *v)).collect()));
            let at = |t: f64| got.as_ref().map_or_else(|| p.tx.at(t), |g| g.at(t));
            (p.name.clone(), (0..steps).map(|t| at(t as f64)).collect())
        })
        .collect();
    let measured: Vec<(String, f64)> = measured_series
        .iter()
        .map(|(n, v)| (n.clone(), v.iter().sum::<f64>() / steps as f64))
        .collect();
    let baseline = means(&before);
    let predicted = means(&after);
    let uplink_of = |out: &RunOutput, name: &str| {
        out.ports
            .iter()
            .position(|p| p == name)
            .and_then(|i| out.port_uplinks.get(i).cloned().flatten())
    };
    let mut names: Vec<String> = past.ports.iter().map(|p| p.name.clone()).collect();
    for p in &changed.ports {
        if !names.contains(&p.name) {
            names.push(p.name.clone());
        }
    }
    let find = |v: &[(String, f64)], n: &str| v.iter().find(|(m, _)| m == n).map(|(_, x)| *x);
    let mut ports = Vec::new();
    let mut uncertain = Vec::new();
    let mut greedy = Vec::new();
    for name in names {
        let entry = changed.file.ports.iter().find(|p| p.name == name);
        let reservation_bps = entry.map_or(0.0, |p| p.reservation.bps_f64());
        let holds = (reservation_bps > 0.0).then(|| {
            let i = after.ports.iter().position(|p| *p == name);
            i.is_some_and(|i| {
                after
                    .rows
                    .iter()
                    .all(|r| r.delivered_tx[i] >= 0.99 * reservation_bps.min(r.offered_tx[i]))
            })
        });
        let m = find(&measured, &name);
        let estimate = estimates.get(&name).map(|e| e.summary.clone());
        let may_want_more = match &estimate {
            Some(e) => e.how != How::Measured,
            // Without evidence: at its limit, or on an uplink the model of the past fills.
            None => {
                let limit = past
                    .file
                    .ports
                    .iter()
                    .find(|p| p.name == name)
                    .and_then(|p| p.limit.map(|l| l.bps_f64()));
                let at_limit = matches!((m, limit), (Some(m), Some(l)) if m >= 0.95 * l);
                let on_full = uplink_of(&before, &name).is_some_and(|u| {
                    before
                        .uplinks
                        .iter()
                        .position(|x| *x == u)
                        .is_some_and(|i| utilisation(&before, i) >= 0.95)
                });
                m.is_some() && (at_limit || on_full)
            }
        };
        if estimate.as_ref().is_some_and(|e| e.how == How::Greedy) {
            greedy.push(name.clone());
        } else if may_want_more && estimate.is_none() {
            uncertain.push(name.clone());
        }
        ports.push(PortAnswer {
            measured_bps: m,
            baseline_bps: find(&baseline, &name),
            predicted_bps: find(&predicted, &name),
            reservation_bps,
            reservation_holds: holds,
            uplink_before: uplink_of(&before, &name),
            uplink_after: uplink_of(&after, &name),
            may_want_more,
            demand: estimate,
            name,
        });
    }
    let uplinks = before
        .uplinks
        .iter()
        .enumerate()
        .map(|(i, name)| UplinkAnswer {
            name: name.clone(),
            baseline_utilisation: utilisation(&before, i),
            predicted_utilisation: after
                .uplinks
                .iter()
                .position(|u| u == name)
                .map_or(0.0, |j| utilisation(&after, j)),
        })
        .collect();
    let moves = after
        .moves
        .iter()
        .map(|m| MoveAnswer {
            t_s: m.t_s,
            port: m.port.clone(),
            from: m.from.clone(),
            to: m.to.clone(),
            reason: m.reason.clone(),
        })
        .collect();
    let mut notes = match req.fidelity {
        Fidelity::Fluid => vec![
            "fluid model: rates per second, max-min and NetIOC sharing per uplink; it leaves out latency and queues, bursts shorter than a second, and TCP's own dynamics".to_string(),
        ],
        Fidelity::Packet => packet::notes(window_s),
    };
    if estimates.is_empty() {
        notes.push("a port's demand is the rate it was measured at: what it got, not what it wanted".to_string());
    } else {
        notes.push(
            "a port's demand is estimated from what its NetIOC queue turned away, marked and held (see each port's demand)"
                .to_string(),
        );
    }
    if !greedy.is_empty() {
        notes.push(format!(
            "uncertain: {} held down and backing off (as TCP does), modelled as greedy: wanting all its fastest uplink carries; it got at least its demand's low end",
            greedy.join(", ")
        ));
    }
    let busy: Vec<&PortAnswer> = ports
        .iter()
        .filter(|p| p.measured_bps.is_some_and(|m| m > 0.0))
        .collect();
    if busy.len() > 1 && busy.iter().all(|p| p.may_want_more) {
        notes.push(
            "uncertain: every port that sent was held down, so none shows what it wanted; the prediction shares out what the model assumes each wants, not what was seen"
                .to_string(),
        );
    }
    if !uncertain.is_empty() {
        notes.push(format!(
            "uncertain: {} measured at a limit or on a full uplink, so may have wanted more than the prediction gives it",
            uncertain.join(", ")
        ));
    }
    // A packet run is shorter than its window: the series is as long as the run.
    let secs = match req.fidelity {
        Fidelity::Fluid => steps,
        Fidelity::Packet => before.rows.len().min(steps),
    };
    let series = Series::new(&measured_series, &changed, &before, &after, secs);
    Ok(Answer {
        window_s,
        changes: req.changes.clone(),
        ports,
        uplinks,
        moves,
        notes,
        scenario: changed_text,
        fidelity: req.fidelity,
        series,
    })
}

/// Uplink `i`'s mean send utilisation over `out`'s rows.
fn utilisation(out: &RunOutput, i: usize) -> f64 {
    let cap = out.capacities.get(i).copied().unwrap_or(0.0);
    if cap <= 0.0 || out.rows.is_empty() {
        return 0.0;
    }
    out.rows.iter().map(|r| r.uplink_tx[i]).sum::<f64>() / out.rows.len() as f64 / cap
}

#[cfg(test)]
mod tests;
