//! A what-if at packet fidelity: the past (or the changed past) as a packet-mode host, for
//! questions where queues and TCP's windows matter (a reservation for a TCP sender, a limit
//! that makes a greedy sender back off).
//!
//! Model. Packet mode's sources send at one rate from start to end, so a port's curve becomes
//! one source: a port estimated greedy (held down and backing off, see [`super::demand`]) is a
//! TCP stream (one per flow it was measured with); any other port a constant bit rate at its mean
//! demand over the window, at most its group's fastest uplink (what is beyond it would only be
//! dropped at its queue). An uplink down all along is left out of every group's failover order
//! (its standbys take over); other uplinks go down and come back when the scenario says (a TCP
//! stream whose frames a failure drops then stalls: the model's streams have no retransmission
//! timer). The run is
//! bounded: at most [`SECONDS`] of simulated time and about [`PACKETS`] full-size frames at the
//! larger of the host's summed uplink capacity and its ports' summed sending rates, whichever is
//! less; a host for which that is under [`LEAST_SECONDS`] (about 30 Gbit/s or more) is refused
//! ([`super::WhatIfError::Unsupported`]), as is a change of teaming policy in time. A 2 x 1
//! Gbit/s host runs 10 s. What a packet run leaves out: a port's changes within the window (it
//! sends its mean), and every second past the run's length.

use super::demand::{Estimated, How};
use crate::run::RunOutput;
use crate::scenario::{EventFile, Scenario};
use std::collections::BTreeMap;
use toml::{Table, Value};

/// The most simulated seconds a packet what-if runs.
pub const SECONDS: f64 = 10.0;
/// The fewest: packet mode reports a second at a time, the first from its slow start.
pub const LEAST_SECONDS: f64 = 2.0;
/// About how many full-size frames a packet what-if's run may carry.
pub const PACKETS: f64 = 5e6;

/// Why a scenario cannot be run at packet fidelity (not the changes' fault, nor the past's).
#[derive(Debug, Clone, PartialEq)]
pub struct Unsupported(pub String);

/// Each port's constant rate for a run of `scenario` (None: a greedy TCP stream), by the
/// module documentation's rule.
fn rates(scenario: &Scenario, estimates: &BTreeMap<String, Estimated>) -> Vec<Option<f64>> {
    let f = &scenario.file;
    let fastest = |group: &str| {
        f.port_groups
            .iter()
            .find(|g| g.name == group)
            .map(|g| {
                let names = g.active.iter().chain(g.standby.iter());
                names
                    .filter_map(|n| f.uplinks.iter().find(|u| u.name == *n))
                    .map(|u| u.capacity.bps_f64())
                    .fold(0.0, f64::max)
            })
            .unwrap_or(0.0)
    };
    let secs = f.duration_s.max(1.0) as usize;
    f.ports
        .iter()
        .zip(&scenario.ports)
        .map(|(entry, plan)| {
            if estimates.get(&entry.name).is_some_and(|e| e.summary.how == How::Greedy) {
                return None;
            }
            let mean = (0..secs).map(|s| plan.tx.at(s as f64)).sum::<f64>() / secs as f64;
            // A port that sent nothing sends a trickle (a rate of 0 is not a source).
            Some(mean.min(fastest(&entry.group)).max(8_000.0))
        })
        .collect()
}

/// The simulated seconds a packet run of `scenario` with sources at `rates` lasts (see the
/// module documentation), or why it cannot run.
fn seconds(scenario: &Scenario, rates: &[Option<f64>]) -> Result<f64, Unsupported> {
    let capacity: f64 = scenario.file.uplinks.iter().map(|u| u.capacity.bps_f64()).sum();
    let sending: f64 = rates.iter().flatten().sum();
    let busiest = capacity.max(sending).max(1.0);
    let by_frames = PACKETS * 1500.0 * 8.0 / busiest;
    // A window shorter than the least is run for the least (its sources send their means).
    let secs = scenario.file.duration_s.clamp(LEAST_SECONDS, SECONDS).min(by_frames);
    if secs < LEAST_SECONDS {
        return Err(Unsupported(format!(
            "the packet model would carry over {PACKETS:.0} frames in {LEAST_SECONDS} s here ({:.1} Gbit/s of uplinks and senders); the fluid model answers",
            busiest / 1e9
        )));
    }
    Ok(secs.floor())
}

/// What the answer says of a packet run of a `window_s` window.
pub fn notes(window_s: f64) -> Vec<String> {
    vec![format!(
        "packet model: each port sends its mean demand over the {window_s} s window (a TCP stream where it backed off, else a constant rate) for at most {SECONDS} s or about {PACKETS:.0} frames; it has queues and TCP's windows but not the window's changes over time"
    )]
}

/// `value` as a TOML value (the scenario's own types all serialize).
fn value<T: serde::Serialize>(v: &T) -> Result<Value, String> {
    Value::try_from(v).map_err(|e| e.to_string())
}

/// The packet-mode scenario for `scenario` (see the module documentation).
fn host(scenario: &Scenario, estimates: &BTreeMap<String, Estimated>) -> Result<String, Unsupported> {
    let f = &scenario.file;
    let written = |e: String| Unsupported(format!("writing the packet host: {e}"));
    let mut events = Vec::new();
    // Down all along: out of every group's order (the standbys take over at once), not taken
    // down at 0 s, which would lose the first frames of every TCP stream on it for good (the
    // packet model's streams have no retransmission timer).
    let mut down = Vec::new();
    for e in &f.events {
        if let EventFile::LinkDown { at_s, uplink } = e {
            if *at_s <= 0.0 {
                down.push(uplink.clone());
                continue;
            }
        }
        let (kind, uplink) = match e {
            EventFile::LinkDown { uplink, .. } => ("link-down", uplink),
            EventFile::LinkUp { uplink, .. } => ("link-up", uplink),
            EventFile::Policy { at_s, .. } => {
                return Err(Unsupported(format!(
                "the packet model takes no change of teaming policy in time (one at {at_s} s); the fluid model answers"
            )))
            }
        };
        let mut t = Table::new();
        t.insert("kind".into(), Value::String(kind.into()));
        t.insert("at_s".into(), Value::Float(e.at_s()));
        t.insert("uplink".into(), Value::String(uplink.clone()));
        events.push(Value::Table(t));
    }
    let rates = rates(scenario, estimates);
    let mut doc = Table::new();
    doc.insert("name".into(), Value::String(format!("{} (packets)", f.name)));
    doc.insert("mode".into(), Value::String("packet".into()));
    doc.insert("duration_s".into(), Value::Float(seconds(scenario, &rates)?));
    doc.insert("lbt".into(), value(&f.lbt).map_err(written)?);
    if let Some(cap) = f.reservation_cap {
        doc.insert("reservation_cap".into(), Value::Float(cap));
    }
    let uplinks: Vec<Value> = f
        .uplinks
        .iter()
        .map(|u| {
            let mut t = Table::new();
            t.insert("name".into(), Value::String(u.name.clone()));
            t.insert("capacity".into(), Value::String(u.capacity.bps().to_string()));
            t.insert("rx_queues".into(), Value::Integer(i64::from(u.rx_queues)));
            Value::Table(t)
        })
        .collect();
    doc.insert("uplinks".into(), Value::Array(uplinks));
    let mut groups = Vec::new();
    for g in &f.port_groups {
        let mut g = g.clone();
        g.active.retain(|u| !down.contains(u));
        g.standby.retain(|u| !down.contains(u));
        if g.active.is_empty() {
            g.active = std::mem::take(&mut g.standby);
        }
        if g.active.is_empty() {
            return Err(Unsupported(format!(
                "port group `{}` has every uplink down, which the packet model does not take; the fluid model answers",
                g.name
            )));
        }
        groups.push(value(&g).map_err(written)?);
    }
    doc.insert("port_groups".into(), Value::Array(groups));
    let classes = f
        .traffic_classes
        .iter()
        .map(value)
        .collect::<Result<Vec<_>, _>>()
        .map_err(written)?;
    doc.insert("traffic_classes".into(), Value::Array(classes));
    let pools = f
        .pools
        .iter()
        .map(value)
        .collect::<Result<Vec<_>, _>>()
        .map_err(written)?;
    doc.insert("pools".into(), Value::Array(pools));
    let mut ports = Vec::new();
    for (entry, rate) in f.ports.iter().zip(&rates) {
        let Ok(Value::Table(mut t)) = value(entry) else {
            return Err(written(format!("port `{}`: not a table", entry.name)));
        };
        for key in ["tx", "rx", "flows", "jitter"] {
            t.remove(key);
        }
        let mut source = Table::new();
        match rate {
            None => {
                source.insert("kind".into(), Value::String("tcp-stream".into()));
                source.insert("streams".into(), Value::Integer(i64::from(entry.flows.max(1))));
            }
            Some(bps) => {
                source.insert("kind".into(), Value::String("cbr".into()));
                source.insert("rate".into(), Value::String(format!("{}", bps.round() as u64)));
            }
        }
        t.insert("source".into(), Value::Table(source));
        ports.push(Value::Table(t));
    }
    doc.insert("ports".into(), Value::Array(ports));
    if !events.is_empty() {
        doc.insert("events".into(), Value::Array(events));
    }
    toml::to_string(&doc).map_err(|e| written(e.to_string()))
}

/// Why a packet run has no output.
#[derive(Debug, Clone, PartialEq)]
pub enum Failed {
    /// The packet model cannot take this scenario.
    Unsupported(String),
    /// The packet host does not load or run (its scenario's fault).
    Run(String),
}

/// Runs `scenario` at packet fidelity.
pub fn run(scenario: &Scenario, estimates: &BTreeMap<String, Estimated>) -> Result<RunOutput, Failed> {
    let text = host(scenario, estimates).map_err(|Unsupported(e)| Failed::Unsupported(e))?;
    let file: crate::packet::scenario::PacketFile = crate::scenario::parse_toml(&text).map_err(Failed::Run)?;
    let plan = crate::packet::scenario::resolve(&file).map_err(Failed::Run)?;
    let out = crate::packet::engine::run(&plan).map_err(Failed::Run)?;
    if out.rows.is_empty() {
        return Err(Failed::Run("the packet run reported no second".into()));
    }
    Ok(out)
}
