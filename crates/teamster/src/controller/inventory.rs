//! The cluster's inventory: what the controller records of each host (its shape as it
//! registered it, when it was heard, whether it is down, the VMs leaving it) and of each VM
//! (its controls and the one host it is assigned to), and how a host's shape becomes the
//! NetIOC tree placement checks.

use crate::live::controller_config::Isolation;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use teamster_core::host::{self, ClassEntry, HostSpec, LbtSection, PoolEntry, UplinkDesc};
use teamster_core::ioc::Shares;
use teamster_core::placement::{Vm, Vnic};
use teamster_core::units::Bandwidth;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UplinkRecord {
    pub name: String,
    #[schema(value_type = String, example = "10G")]
    pub capacity: Bandwidth,
    #[serde(default = "yes")]
    pub up: bool,
}

fn yes() -> bool {
    true
}

/// What a host registers: its shape, from its switch.toml.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HostShape {
    pub uplinks: Vec<UplinkRecord>,
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    pub traffic_classes: Vec<ClassEntry>,
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    pub pools: Vec<PoolEntry>,
    /// Classes and pools whose reservation on the host is what its VMs there reserve.
    #[serde(default)]
    pub derived: Vec<String>,
    pub reservation_cap: Option<f64>,
    /// What the host does when cut off from the controller: with "keep" it goes on forwarding
    /// for its VMs, so they are never restarted elsewhere when it goes down.
    #[serde(default, skip_serializing_if = "Isolation::is_default")]
    pub isolation: Isolation,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostRecord {
    pub shape: HostShape,
    pub registered_s: u64,
    pub reported_s: u64,
    /// Each uplink's measured send rate at the last report, bits/s (kept in memory only: a
    /// measure, not a decision).
    #[serde(skip)]
    pub loads: BTreeMap<String, f64>,
    /// Since when the host is down (it stopped reporting: [`super::state::ClusterState::fail_silent`]);
    /// cleared by its next report or registration.
    #[serde(default)]
    pub down_since_s: Option<u64>,
    /// When it was last heard again after being down: it takes no new VMs for a host timeout
    /// after that ([`super::state::ClusterState::held_down`]).
    #[serde(default)]
    pub up_again_s: Option<u64>,
    /// When its VMs were last tried elsewhere, while it is down (in memory only).
    #[serde(skip)]
    pub restart_tried_s: u64,
    /// VMs that left it and that it has not yet reported detached: their destinations are not
    /// told to attach them until it has ([`super::handover`]).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub departing: BTreeSet<String>,
    /// The MACs of those of them that were powered off (VM name to MAC): no other VM takes
    /// such a MAC until the host has let go of it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub departing_macs: BTreeMap<String, String>,
    /// Since when each departing VM has waited for the host to let go, and whether the wait
    /// was reported overdue (in memory only: a controller that starts counts from its start;
    /// [`super::handover`]).
    #[serde(skip)]
    pub waiting: BTreeMap<String, Waiting>,
}

/// How long a departing VM has waited for its host to let go ([`super::handover`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiting {
    pub since_s: u64,
    /// Its wait was reported overdue.
    pub told: bool,
}

impl Waiting {
    pub fn since(now_s: u64) -> Waiting {
        Waiting {
            since_s: now_s,
            told: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VmRecord {
    /// The VM's MAC on its vNIC and its port group, for the host that attaches its port.
    #[serde(default)]
    pub mac: Option<String>,
    #[serde(default)]
    pub group: Option<String>,
    pub pool: String,
    pub reservation: Bandwidth,
    pub shares: Shares,
    pub limit: Option<Bandwidth>,
    pub host: String,
    /// The source of a migration its destination has not confirmed yet.
    pub moving_from: Option<String>,
}

impl HostRecord {
    /// Records VM `name` as leaving the host at `now_s` (powered off there: with its MAC), to
    /// be held until the host reports it detached ([`super::handover`]).
    pub fn depart(&mut self, name: &str, mac: Option<&String>, now_s: u64) {
        self.departing.insert(name.to_string());
        self.waiting.insert(name.to_string(), Waiting::since(now_s));
        if let Some(mac) = mac {
            self.departing_macs.insert(name.to_string(), mac.clone());
        }
    }

    /// Keeps of the departing VMs only those in `keep`, with their MACs and waits.
    pub fn keep_departing(&mut self, keep: BTreeSet<String>) {
        self.departing_macs.retain(|n, _| keep.contains(n));
        self.waiting.retain(|n, _| keep.contains(n));
        self.departing = keep;
    }

    /// Whether the host is down and detaches its VMs when cut off: it has let go of every VM
    /// (it did so by its own timer before the controller failed it), and its `departing` set is
    /// emptied when it is failed ([`super::handover`]).
    pub fn gone_quiet(&self) -> bool {
        self.down_since_s.is_some() && self.shape.isolation != Isolation::Keep
    }
}

/// A host's NetIOC tree and reservation cap from its shape, checked as `switch.toml` is.
pub fn build_host(shape: &HostShape) -> Result<(teamster_core::ioc::Tree, teamster_core::ioc::ReservationCap), String> {
    let no_ports: &[crate::live::config::PortFile] = &[];
    let built = host::build(
        HostSpec {
            lbt: &LbtSection::default(),
            reservation_cap: shape.reservation_cap,
            uplinks: (shape.uplinks.iter())
                .map(|u| UplinkDesc {
                    name: u.name.clone(),
                    capacity: u.capacity,
                })
                .collect(),
            port_groups: &[],
            traffic_classes: &shape.traffic_classes,
            pools: &shape.pools,
            ports: no_ports,
        },
        &mut |_, _| None,
    )?;
    for (i, d) in shape.derived.iter().enumerate() {
        if built
            .tree
            .find(d)
            .is_none_or(|id| id == teamster_core::ioc::NodeId::ROOT)
        {
            return Err(format!("derived[{i}]: no traffic class or pool named `{d}`"));
        }
    }
    Ok((built.tree, built.reservation_cap))
}

pub(super) fn vm_of(name: &str, v: &VmRecord) -> Vm {
    Vm {
        name: name.to_string(),
        vnics: vec![Vnic {
            pool: v.pool.clone(),
            reservation: v.reservation,
            shares: v.shares,
            limit: v.limit,
        }],
    }
}
