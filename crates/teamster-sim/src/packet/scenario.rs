//! Packet-mode scenario files: a host with NetIOC, sources, a timeline and expectations.
//!
//! The file says `mode = "packet"`. Beside the fluid scenario's `uplinks` (with an optional
//! `effective` rate) and `port_groups`, it has:
//! - `[[traffic_classes]]` and `[[pools]]` as in [`crate::host`]: `class` (management, vm, nfs, iscsi, storage, live-migration,
//!   replication, fault-tolerance, backup), `reservation`, `shares` (1-100 or low/normal/high,
//!   default the class's: vm high, others normal), `limit`;
//! - `[[pools]]`: network resource pools under the `vm` class: `name`, `reservation`, `shares`,
//!   `limit`;
//! - `[[ports]]`: `name`, `id`, `mac`, `group`, then `pool` (a VM port) or `class` (system
//!   traffic such as NFS or vMotion), its own `reservation`, `shares` (default normal), `limit`,
//!   a `source` (see [`super::source`]), `start_s` and `stop_s`;
//! - `[[events]]`: `set-controls` (`node`, and any of `reservation`, `shares`, `limit` =
//!   "unlimited" or a bandwidth; the rest stay) through admission control, or `queueing`
//!   (`queueing` = "netioc" or "fifo");
//! - `queueing` (default netioc), `queue_packets` per port (default 128), `fifo_packets`
//!   (default 1024), `reservation_cap` (default 0.75).
//!
//! A port with neither `pool` nor `class` sits directly under the `vm` class. Every name (class,
//! pool, port) is unique. The initial tree must pass admission control.

use super::engine::{Discipline, HostPlan, PlanEvent, PortPlan, UplinkPlan};
use super::source::SourceSpec;
use crate::expect::ExpectSpec;
use crate::host::{build_tree, ClassFile, PoolFile, PortControls};
use crate::scenario::{GroupFile, LbtFile};
use serde::Deserialize;
use teamster_core::ioc::admission::{admit, ReservationCap};
use teamster_core::ioc::{NodeSpec, Shares};
use teamster_core::units::Bandwidth;
use teamster_core::wire::MacAddr;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PacketFile {
    pub name: String,
    pub mode: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub seed: u64,
    pub duration_s: f64,
    #[serde(default)]
    pub lbt: LbtFile,
    #[serde(default = "netioc")]
    pub queueing: Discipline,
    #[serde(default = "default_queue")]
    pub queue_packets: usize,
    #[serde(default = "default_fifo")]
    pub fifo_packets: usize,
    pub reservation_cap: Option<f64>,
    pub uplinks: Vec<UplinkFile>,
    pub port_groups: Vec<GroupFile>,
    #[serde(default)]
    pub traffic_classes: Vec<ClassFile>,
    #[serde(default)]
    pub pools: Vec<PoolFile>,
    pub ports: Vec<PortFile>,
    #[serde(default)]
    pub events: Vec<EventFile>,
    #[serde(default)]
    pub expect: Vec<ExpectSpec>,
}

fn netioc() -> Discipline {
    Discipline::Netioc
}
fn default_queue() -> usize {
    128
}
fn default_fifo() -> usize {
    1024
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UplinkFile {
    pub name: String,
    pub capacity: Bandwidth,
    pub effective: Option<Bandwidth>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortFile {
    pub name: String,
    pub id: Option<u32>,
    pub mac: Option<String>,
    pub group: String,
    pub pool: Option<String>,
    pub class: Option<String>,
    #[serde(default)]
    pub reservation: Bandwidth,
    pub shares: Option<Shares>,
    pub limit: Option<Bandwidth>,
    pub source: SourceSpec,
    #[serde(default)]
    pub start_s: f64,
    pub stop_s: Option<f64>,
}

/// A limit in an event: a bandwidth, or "unlimited".
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum LimitFile {
    Bandwidth(Bandwidth),
    Unlimited(Unlimited),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unlimited {
    Unlimited,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum EventFile {
    SetControls {
        at_s: f64,
        node: String,
        reservation: Option<Bandwidth>,
        shares: Option<Shares>,
        limit: Option<LimitFile>,
    },
    Queueing {
        at_s: f64,
        queueing: Discipline,
    },
}

/// Builds the host; errors carry the key path.
pub fn resolve(f: &PacketFile) -> Result<HostPlan, String> {
    if f.mode != "packet" {
        return Err(format!("mode = \"{}\": expected \"packet\" here", f.mode));
    }
    if !(f.duration_s.is_finite() && f.duration_s > 0.0 && f.duration_s <= 86_400.0) {
        return Err(format!(
            "duration_s = {}: expected seconds between 0 and 86400",
            f.duration_s
        ));
    }
    if !(1..=1 << 20).contains(&f.queue_packets) || !(1..=1 << 24).contains(&f.fifo_packets) {
        return Err("queue_packets and fifo_packets: expected 1 to 1048576 and 1 to 16777216".into());
    }
    let cap = match f.reservation_cap {
        Some(c) => ReservationCap::new(c).map_err(|e| format!("reservation_cap: {e}"))?,
        None => ReservationCap::default(),
    };
    let lbt = crate::scenario::lbt_config(&f.lbt)?;
    if f.uplinks.is_empty() {
        return Err("uplinks: expected at least one [[uplinks]] table".into());
    }
    let mut uplinks = Vec::new();
    for (i, u) in f.uplinks.iter().enumerate() {
        if f.uplinks[..i].iter().any(|o| o.name == u.name) {
            return Err(format!("uplinks[{i}].name: `{}` is used twice", u.name));
        }
        let rate = u.effective.unwrap_or(u.capacity);
        if u.capacity.bps() == 0 || rate.bps() == 0 || rate > u.capacity {
            return Err(format!(
                "uplinks[{i}]: capacity must be above zero and effective at most the capacity"
            ));
        }
        uplinks.push(UplinkPlan {
            name: u.name.clone(),
            capacity: u.capacity,
            rate_bps: rate.bps_f64(),
        });
    }
    let names: Vec<&str> = f.uplinks.iter().map(|u| u.name.as_str()).collect();
    let groups = crate::scenario::resolve_groups(&f.port_groups, &names)?;

    if f.ports.is_empty() {
        return Err("ports: expected at least one [[ports]] table".into());
    }
    let controls: Vec<PortControls> = f
        .ports
        .iter()
        .enumerate()
        .map(|(i, p)| PortControls {
            key: format!("ports[{i}]"),
            name: &p.name,
            pool: p.pool.as_deref(),
            class: p.class.as_deref(),
            reservation: p.reservation,
            shares: p.shares,
            limit: p.limit,
        })
        .collect();
    let (tree, leaves) = build_tree(&f.uplinks[0].name, &f.traffic_classes, &f.pools, &controls)?;
    let mut ports: Vec<PortPlan> = Vec::new();
    for (i, p) in f.ports.iter().enumerate() {
        let key = format!("ports[{i}]");
        let leaf = leaves[i];
        p.source.check().map_err(|e| format!("{key}.source.{e}"))?;
        let id = p.id.unwrap_or(i as u32 + 1);
        if let Some(o) = ports.iter().find(|o| o.id == id) {
            return Err(format!("{key}.id: {id} is already the ID of port `{}`", o.name));
        }
        let mac = match &p.mac {
            Some(m) => m.parse::<MacAddr>().map_err(|e| format!("{key}.mac: {e}"))?,
            None => {
                let b = (i as u32 + 1).to_be_bytes();
                MacAddr([0x02, 0x54, b[0], b[1], b[2], b[3]])
            }
        };
        if let Some(o) = ports.iter().find(|o| o.mac == mac) {
            return Err(format!("{key}.mac: {mac} is already the MAC of port `{}`", o.name));
        }
        let group = f
            .port_groups
            .iter()
            .position(|g| g.name == p.group)
            .ok_or_else(|| format!("{key}.group: no port group named `{}`", p.group))?;
        let start_s = p.start_s;
        if !(start_s.is_finite() && start_s >= 0.0) || p.stop_s.is_some_and(|s| !(s.is_finite() && s > start_s)) {
            return Err(format!("{key}: start_s must be >= 0 and stop_s after it"));
        }
        ports.push(PortPlan {
            name: p.name.clone(),
            id,
            mac,
            group,
            leaf,
            source: p.source.clone(),
            start_s,
            stop_s: p.stop_s,
        });
    }
    let smallest = uplinks.iter().map(|u| u.capacity).min().expect("at least one uplink");
    admit(&tree, smallest, cap).map_err(|e| format!("admission control: {e}"))?;
    let mut events = Vec::new();
    for (i, e) in f.events.iter().enumerate() {
        let key = format!("events[{i}]");
        let (at_s, ev) = match e {
            EventFile::SetControls {
                at_s,
                node,
                reservation,
                shares,
                limit,
            } => {
                let id = tree
                    .find(node)
                    .filter(|n| n.0 != 0)
                    .ok_or_else(|| format!("{key}.node: no class, pool or port named `{node}`"))?;
                let old = &tree.node(id).spec;
                let spec = NodeSpec {
                    name: old.name.clone(),
                    reservation: reservation.unwrap_or(old.reservation),
                    shares: shares.unwrap_or(old.shares),
                    limit: match limit {
                        None => old.limit,
                        Some(LimitFile::Bandwidth(b)) => Some(*b),
                        Some(LimitFile::Unlimited(_)) => None,
                    },
                };
                if let Some(l) = spec.limit.filter(|l| *l < spec.reservation) {
                    return Err(format!(
                        "{key}.limit: {l} is below the reservation {}",
                        spec.reservation
                    ));
                }
                (*at_s, PlanEvent::SetControls { node: id, spec })
            }
            EventFile::Queueing { at_s, queueing } => (*at_s, PlanEvent::Discipline(*queueing)),
        };
        if !(at_s.is_finite() && at_s >= 0.0) {
            return Err(format!(
                "{key}.at_s = {at_s}: expected a non-negative number of seconds"
            ));
        }
        events.push((at_s, ev));
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(HostPlan {
        uplinks,
        groups,
        lbt,
        tree,
        reservation_cap: cap,
        ports,
        discipline: f.queueing,
        queue_packets: f.queue_packets,
        fifo_packets: f.fifo_packets,
        events,
        duration_s: f.duration_s,
    })
}
