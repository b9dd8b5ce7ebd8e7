//! Cluster scenario files: several hosts of one shape, VMs placed on them, and a timeline.
//!
//! The file says `mode = "cluster"`, and has:
//! - `fidelity`: `packet` (every packet through each host's real switch and NetIOC scheduler)
//!   or `fluid` (each uplink's rate shared by the NetIOC allocator, `step_s` apart; default 1 s);
//! - `[host]`: the shape every host has, as a packet scenario's host: `uplinks` (with
//!   `effective`), `port_groups`, `traffic_classes`, `pools`, `reservation_cap`, `lbt`, and
//!   `derived`: classes and pools whose reservation on a host is what its VMs there reserve
//!   (a cluster pool is consumed so on each host); `queue_packets` (packet fidelity, default 128);
//! - `hosts`: the hosts' names, or a count (`host01`, `host02`, ...);
//! - `[[quotas]]`: `pool` and `quota`, a pool's reservations over the whole cluster;
//! - `[[vms]]`: as a packet scenario's `[[ports]]` (`name`, `id`, `mac`, `group`, `pool` or
//!   `class`, `reservation`, `shares`, `limit`, `source`), plus `host` (placed there by hand;
//!   none: by placement) and `power_on_s` (default 0);
//! - `[generate]`: `vms` more VMs named `vm0001`..., in `group` and `pool`, each with a
//!   reservation drawn uniformly from `reservation = [min, max]` (rounded to 10 Mbit/s) by the
//!   scenario's `seed`, and a `source` (default greedy);
//! - `[drs]`: `delay_s`, how long after a fault remediation acts (default 60; DRS acts within
//!   minutes), `switchover_s`, how long a migrating VM sends nowhere (default 0.3 s, its
//!   stun time), and `traffic_s`, a migration's own traffic (packet fidelity): for that long
//!   before the switch-over the VM runs at its source while a greedy vMotion stream sends
//!   from there in the host's `live-migration` class (default 0: none);
//! - `[[events]]`: `set-reservation` (`vm`, `reservation`), `uplink-down` / `uplink-up`
//!   (`host`, `uplink`), `host-down` (`host`: its VMs stop, and are restarted elsewhere when
//!   remediation runs), `migrate` (`vm`, `to`: by hand, refused unless `to` admits it);
//! - `[[expect]]`: see [`super::expect`].

use crate::packet::scenario::UplinkFile;
use crate::packet::source::SourceSpec;
use serde::Deserialize;
use teamster_core::host::{ClassEntry, GroupEntry, LbtSection, PoolEntry};
use teamster_core::units::Bandwidth;

/// The traffic class a migration's own stream is in.
pub const MIGRATION_CLASS: &str = "live-migration";

/// How closely a cluster run models each host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fidelity {
    Packet,
    Fluid,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    pub name: String,
    pub mode: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub seed: u64,
    pub duration_s: f64,
    pub fidelity: Fidelity,
    #[serde(default = "one_second")]
    pub step_s: f64,
    pub host: HostShape,
    pub hosts: HostNames,
    #[serde(default)]
    pub quotas: Vec<QuotaEntry>,
    #[serde(default)]
    pub vms: Vec<VmFile>,
    pub generate: Option<Generate>,
    #[serde(default)]
    pub drs: Drs,
    #[serde(default)]
    pub events: Vec<ClusterEvent>,
    #[serde(default)]
    pub expect: Vec<ClusterExpect>,
}

fn one_second() -> f64 {
    1.0
}

/// The shape every host of the cluster has.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostShape {
    pub uplinks: Vec<UplinkFile>,
    pub port_groups: Vec<GroupEntry>,
    #[serde(default)]
    pub traffic_classes: Vec<ClassEntry>,
    #[serde(default)]
    pub pools: Vec<PoolEntry>,
    pub reservation_cap: Option<f64>,
    #[serde(default)]
    pub lbt: LbtSection,
    #[serde(default)]
    pub derived: Vec<String>,
    #[serde(default = "default_queue")]
    pub queue_packets: usize,
}

fn default_queue() -> usize {
    128
}

/// The hosts' names, or how many.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum HostNames {
    Count(usize),
    Names(Vec<String>),
}

impl HostNames {
    /// The names: as given, or `host01`.. for a count.
    pub fn names(&self) -> Vec<String> {
        match self {
            HostNames::Names(n) => n.clone(),
            HostNames::Count(n) => {
                let width = n.to_string().len().max(2);
                (1..=*n).map(|i| format!("host{i:0width$}")).collect()
            }
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaEntry {
    pub pool: String,
    pub quota: Bandwidth,
}

teamster_core::port_entry! {
    /// A `[[vms]]` entry: a VM with one vNIC.
    pub struct VmFile {
        /// Its traffic source.
        pub source: SourceSpec,
        /// The host it is placed on by hand (none: placement chooses).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub host: Option<String>,
        /// When it powers on (default 0).
        #[serde(default)]
        pub power_on_s: f64,
    }
}

/// Random VMs for what-if runs at scale.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Generate {
    pub vms: usize,
    pub group: String,
    pub pool: Option<String>,
    pub reservation: [Bandwidth; 2],
    pub source: Option<SourceSpec>,
}

/// When DRS acts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Drs {
    #[serde(default = "default_delay")]
    pub delay_s: f64,
    #[serde(default = "default_switchover")]
    pub switchover_s: f64,
    /// A migration's own traffic: its pre-copy, in seconds (0: none).
    #[serde(default)]
    pub traffic_s: f64,
}

impl Default for Drs {
    fn default() -> Drs {
        Drs {
            delay_s: default_delay(),
            switchover_s: default_switchover(),
            traffic_s: 0.0,
        }
    }
}

fn default_delay() -> f64 {
    60.0
}
fn default_switchover() -> f64 {
    0.3
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum ClusterEvent {
    SetReservation {
        at_s: f64,
        vm: String,
        reservation: Bandwidth,
    },
    UplinkDown {
        at_s: f64,
        host: String,
        uplink: String,
    },
    UplinkUp {
        at_s: f64,
        host: String,
        uplink: String,
    },
    HostDown {
        at_s: f64,
        host: String,
    },
    Migrate {
        at_s: f64,
        vm: String,
        to: String,
    },
}

impl ClusterEvent {
    pub fn at_s(&self) -> f64 {
        match self {
            ClusterEvent::SetReservation { at_s, .. }
            | ClusterEvent::UplinkDown { at_s, .. }
            | ClusterEvent::UplinkUp { at_s, .. }
            | ClusterEvent::HostDown { at_s, .. }
            | ClusterEvent::Migrate { at_s, .. } => *at_s,
        }
    }
}

/// An `[[expect]]` entry (see [`super::expect`] for what each kind states).
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum ClusterExpect {
    VmRateNear {
        vm: String,
        from_s: f64,
        to_s: f64,
        rate: Bandwidth,
        tolerance: f64,
        name: Option<String>,
    },
    Migrated {
        vm: String,
        to: String,
        from_s: f64,
        to_s: f64,
        name: Option<String>,
    },
    Fault {
        host: String,
        from_s: f64,
        to_s: f64,
        reason: String,
        name: Option<String>,
    },
    RefusalsAtMost {
        count: usize,
        name: Option<String>,
    },
    ViolatedAtMost {
        at_s: f64,
        count: usize,
        name: Option<String>,
    },
    MigrationsBetween {
        min: usize,
        max: usize,
        name: Option<String>,
    },
}
