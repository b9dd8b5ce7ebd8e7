//! Packet-mode scenario files: a host with NetIOC, sources, a timeline and expectations.
//!
//! The file says `mode = "packet"`. Beside the fluid scenario's `uplinks` (with an optional
//! `effective` rate) and `port_groups`, it has:
//! - `[[traffic_classes]]` and `[[pools]]` as in [`teamster_core::host`]: `class` (management, vm, nfs, iscsi, storage, live-migration,
//!   replication, fault-tolerance, backup), `reservation`, `shares` (1-100 or low/normal/high,
//!   default the class's: vm high, others normal), `limit`;
//! - `[[pools]]`: network resource pools under the `vm` class: `name`, `reservation`, `shares`,
//!   `limit`;
//! - `[[ports]]`: `name`, `id`, `mac`, `group`, then `pool` (a VM port) or `class` (system
//!   traffic such as NFS or vMotion), its own `reservation`, `shares` (default normal), `limit`,
//!   a `source` (see [`super::source`]), `start_s` and `stop_s`;
//! - `[[events]]`: `set-controls` (`node`, and any of `reservation`, `shares`, `limit` =
//!   "unlimited" or a bandwidth; the rest stay) through admission control, `queueing`
//!   (`queueing` = "netioc" or "fifo"), or `link-down` and `link-up` (`uplink`);
//! - `queueing` (default netioc), `queue_packets` per port (default 128), `queue_ms` (each
//!   uplink's byte budget, as milliseconds of sending at its capacity, shared fairly between
//!   ports as the live switch does; default none: packets per port only), `fifo_packets`
//!   (default 1024), `reservation_cap` (default 0.75).
//!
//! A port with neither `pool` nor `class` sits directly under the `vm` class. Every name (class,
//! pool, port) is unique. The initial tree must pass admission control.

use super::engine::{Discipline, HostPlan, PlanEvent, PortPlan, UplinkPlan};
use super::source::SourceSpec;
use crate::expect::ExpectSpec;
use crate::timeline::Timeline;
use serde::Deserialize;
use teamster_core::host::{self, ClassEntry, GroupEntry, HostSpec, LbtSection, PoolEntry, UplinkDesc};
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
    pub lbt: LbtSection,
    #[serde(default = "netioc")]
    pub queueing: Discipline,
    #[serde(default = "default_queue")]
    pub queue_packets: usize,
    #[serde(default = "default_fifo")]
    pub fifo_packets: usize,
    pub queue_ms: Option<f64>,
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
    /// Its receive queues (VMQs), 1 to 4096 (default 1).
    #[serde(default = "crate::scenario::one_queue")]
    pub rx_queues: u32,
}

teamster_core::port_entry! {
    /// A `[[ports]]` entry of a packet scenario.
    pub struct PortFile {
        /// Its traffic source.
        pub source: SourceSpec,
        /// When the source starts, in seconds (default 0).
        #[serde(default)]
        pub start_s: f64,
        /// When it stops (default: runs to the end).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub stop_s: Option<f64>,
    }
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
    /// An uplink's link goes down (its queue's frames are lost) or comes back.
    LinkDown {
        at_s: f64,
        uplink: String,
    },
    LinkUp {
        at_s: f64,
        uplink: String,
    },
}

/// Builds the host; errors carry the key path.
pub fn resolve(f: &PacketFile) -> Result<HostPlan, String> {
    if f.mode != "packet" {
        return Err(format!("mode = \"{}\": expected \"packet\" here", f.mode));
    }
    crate::scenario::check_day(f.duration_s)?;
    if !(1..=1 << 20).contains(&f.queue_packets) || !(1..=1 << 24).contains(&f.fifo_packets) {
        return Err("queue_packets and fifo_packets: expected 1 to 1048576 and 1 to 16777216".into());
    }
    if let Some(ms) = f.queue_ms {
        if !(ms.is_finite() && (0.01..=10_000.0).contains(&ms)) {
            return Err(format!("queue_ms = {ms}: expected milliseconds from 0.01 to 10000"));
        }
    }
    for (i, u) in f.uplinks.iter().enumerate() {
        let rate = u.effective.unwrap_or(u.capacity);
        if rate.bps() == 0 || rate > u.capacity {
            return Err(format!(
                "uplinks[{i}].effective: {rate} must be above zero and at most the capacity {}",
                u.capacity
            ));
        }
    }
    let host = host::build(
        HostSpec {
            lbt: &f.lbt,
            reservation_cap: f.reservation_cap,
            uplinks: f
                .uplinks
                .iter()
                .map(|u| UplinkDesc {
                    name: u.name.clone(),
                    capacity: u.capacity,
                })
                .collect(),
            port_groups: &f.port_groups,
            traffic_classes: &f.traffic_classes,
            pools: &f.pools,
            ports: &f.ports,
        },
        // A port without a MAC gets 02:54 and its index: locally administered, unique.
        &mut |i, _| {
            let b = (i as u32 + 1).to_be_bytes();
            Some(MacAddr([0x02, 0x54, b[0], b[1], b[2], b[3]]))
        },
    )?;
    let uplinks: Vec<UplinkPlan> = f
        .uplinks
        .iter()
        .map(|u| UplinkPlan {
            name: u.name.clone(),
            capacity: u.capacity,
            rate_bps: u.effective.unwrap_or(u.capacity).bps_f64(),
        })
        .collect();
    let mut ports: Vec<PortPlan> = Vec::new();
    for (i, (p, hp)) in f.ports.iter().zip(&host.ports).enumerate() {
        let key = format!("ports[{i}]");
        p.source.check().map_err(|e| format!("{key}.source.{e}"))?;
        let start_s = p.start_s;
        if !(start_s.is_finite() && start_s >= 0.0 && start_s < f.duration_s) {
            return Err(format!(
                "{key}.start_s = {start_s}: expected seconds from 0 to before duration_s"
            ));
        }
        if let Some(stop) = p
            .stop_s
            .filter(|s| !(s.is_finite() && *s > start_s && *s <= f.duration_s))
        {
            return Err(format!(
                "{key}.stop_s = {stop}: expected seconds after start_s, at most duration_s"
            ));
        }
        ports.push(PortPlan {
            name: p.name.clone(),
            id: hp.id.0,
            mac: hp.mac,
            group: hp.group.0,
            leaf: hp.leaf,
            source: p.source.clone(),
            start_s,
            stop_s: p.stop_s,
        });
    }
    let tree = host.tree.clone();
    let mut timeline = Timeline::new(f.duration_s);
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
                let at_s = timeline.time(&key, *at_s)?;
                let id = tree
                    .find(node)
                    .filter(|n| n.0 != 0)
                    .ok_or_else(|| format!("{key}.node: no class, pool or port named `{node}`"))?;
                timeline.claim(&key, at_s, format!("`{node}`"))?;
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
                teamster_core::ioc::admission::check_controls(&key, &spec)?;
                (at_s, PlanEvent::SetControls { node: id, spec })
            }
            EventFile::Queueing { at_s, queueing } => {
                let at_s = timeline.time(&key, *at_s)?;
                timeline.claim(&key, at_s, "the queueing discipline".into())?;
                (at_s, PlanEvent::Discipline(*queueing))
            }
            EventFile::LinkDown { at_s, uplink } | EventFile::LinkUp { at_s, uplink } => {
                let at_s = timeline.time(&key, *at_s)?;
                let i = f
                    .uplinks
                    .iter()
                    .position(|u| u.name == *uplink)
                    .ok_or_else(|| format!("{key}.uplink: no uplink named `{uplink}`"))?;
                timeline.claim(&key, at_s, format!("uplink `{uplink}`"))?;
                let up = matches!(e, EventFile::LinkUp { .. });
                (at_s, PlanEvent::Link { uplink: i, up })
            }
        };
        events.push((at_s, ev));
    }
    // Stable: events at the same instant keep their file order.
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(HostPlan {
        security: f.port_groups.iter().map(|g| g.security).collect(),
        uplinks,
        groups: host.groups,
        lbt: host.lbt,
        tree,
        reservation_cap: host.reservation_cap,
        ports,
        discipline: f.queueing,
        queue_packets: f.queue_packets,
        queue_ms: f.queue_ms,
        fifo_packets: f.fifo_packets,
        events,
        duration_s: f.duration_s,
    })
}
