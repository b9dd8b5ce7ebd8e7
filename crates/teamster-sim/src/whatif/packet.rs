//! A what-if at packet fidelity: the past (or the changed past) as a packet-mode host, for
//! questions where queues and TCP's windows matter (a reservation for a TCP sender, a limit
//! that makes a greedy sender back off).
//!
//! Model. Packet mode's sources send at one rate from start to end, so a port's curve becomes
//! one source: a port estimated greedy (held down and backing off, see [`super::demand`]) is a
//! TCP stream (one per flow it was measured with); any other port a constant bit rate at its mean
//! demand over the window. Uplinks down all along are left out of the host (packet mode has no
//! link events). The run is bounded: at most [`SECONDS`] of simulated time and about [`PACKETS`]
//! full-size frames at the host's summed uplink capacity, whichever is less, so a 2 x 1 Gbit/s
//! host runs 20 s and a 4 x 25 Gbit/s host well under a second. What a packet run leaves out: a
//! port's changes within the window (it sends its mean), and every second past the run's length.

use super::demand::{Estimated, How};
use crate::run::RunOutput;
use crate::scenario::{EventFile, Scenario};
use std::collections::BTreeMap;
use toml::{Table, Value};

/// The most simulated seconds a packet what-if runs.
pub const SECONDS: f64 = 20.0;
/// About how many full-size frames a packet what-if's run may carry.
pub const PACKETS: f64 = 5e6;

/// The simulated seconds a packet run of `scenario` lasts (see the module documentation).
pub fn seconds(scenario: &Scenario) -> f64 {
    let capacity: f64 = scenario.file.uplinks.iter().map(|u| u.capacity.bps_f64()).sum();
    let by_packets = PACKETS * 1500.0 * 8.0 / capacity.max(1.0);
    scenario.file.duration_s.min(SECONDS).min(by_packets).max(0.1)
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
fn host(scenario: &Scenario, estimates: &BTreeMap<String, Estimated>) -> Result<String, String> {
    let f = &scenario.file;
    let mut down = Vec::new();
    for e in &f.events {
        match e {
            EventFile::LinkDown { at_s, uplink } if *at_s <= 0.0 => down.push(uplink.clone()),
            other => {
                return Err(format!(
                    "packet fidelity takes uplinks down all along, not events in time (one at {} s)",
                    other.at_s()
                ))
            }
        }
    }
    let mut doc = Table::new();
    doc.insert("name".into(), Value::String(format!("{} (packets)", f.name)));
    doc.insert("mode".into(), Value::String("packet".into()));
    doc.insert("duration_s".into(), Value::Float(seconds(scenario)));
    doc.insert("lbt".into(), value(&f.lbt)?);
    if let Some(cap) = f.reservation_cap {
        doc.insert("reservation_cap".into(), Value::Float(cap));
    }
    let uplinks: Vec<Value> = f
        .uplinks
        .iter()
        .filter(|u| !down.contains(&u.name))
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
        let Value::Table(mut t) = value(g)? else {
            return Err(format!("port group `{}`: not a table", g.name));
        };
        for key in ["active", "standby"] {
            if let Some(Value::Array(names)) = t.get_mut(key) {
                names.retain(|n| n.as_str().is_none_or(|n| !down.iter().any(|d| d == n)));
            }
        }
        groups.push(Value::Table(t));
    }
    doc.insert("port_groups".into(), Value::Array(groups));
    let classes = f.traffic_classes.iter().map(value).collect::<Result<Vec<_>, _>>()?;
    doc.insert("traffic_classes".into(), Value::Array(classes));
    let pools = f.pools.iter().map(value).collect::<Result<Vec<_>, _>>()?;
    doc.insert("pools".into(), Value::Array(pools));
    let mut ports = Vec::new();
    for (entry, plan) in f.ports.iter().zip(&scenario.ports) {
        let Value::Table(mut t) = value(entry)? else {
            return Err(format!("port `{}`: not a table", entry.name));
        };
        for key in ["tx", "rx", "flows", "jitter"] {
            t.remove(key);
        }
        let mut source = Table::new();
        let greedy = estimates.get(&entry.name).is_some_and(|e| e.summary.how == How::Greedy);
        if greedy {
            source.insert("kind".into(), Value::String("tcp-stream".into()));
            source.insert("streams".into(), Value::Integer(i64::from(entry.flows.max(1))));
        } else {
            let secs = f.duration_s.max(1.0) as usize;
            let mean = (0..secs).map(|s| plan.tx.at(s as f64)).sum::<f64>() / secs as f64;
            source.insert("kind".into(), Value::String("cbr".into()));
            // A port that sent nothing sends a trickle (a rate of 0 is not a source).
            source.insert(
                "rate".into(),
                Value::String(format!("{}", mean.max(8_000.0).round() as u64)),
            );
        }
        t.insert("source".into(), Value::Table(source));
        ports.push(Value::Table(t));
    }
    doc.insert("ports".into(), Value::Array(ports));
    toml::to_string(&doc).map_err(|e| format!("writing the packet host: {e}"))
}

/// Runs `scenario` at packet fidelity.
pub fn run(scenario: &Scenario, estimates: &BTreeMap<String, Estimated>) -> Result<RunOutput, String> {
    let text = host(scenario, estimates)?;
    let file: crate::packet::scenario::PacketFile = crate::scenario::parse_toml(&text)?;
    let plan = crate::packet::scenario::resolve(&file)?;
    crate::packet::engine::run(&plan)
}
