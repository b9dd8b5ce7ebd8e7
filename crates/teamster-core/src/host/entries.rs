//! The serde shapes of a host file's shared tables: `[lbt]`, `[[port_groups]]`,
//! `[[traffic_classes]]`, `[[pools]]`, and the shared part of a `[[ports]]` entry.

use crate::ioc::Shares;
use crate::teaming::{Damping, LbtConfig, Policy};
use crate::units::Bandwidth;
use core::time::Duration;
use serde::{Deserialize, Serialize};

/// Load-Based Teaming knobs (defaults as vSphere: 30 s, 0.75, 30 s).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LbtSection {
    #[serde(default = "thirty")]
    pub window_s: f64,
    #[serde(default = "three_quarters")]
    pub threshold: f64,
    #[serde(default = "thirty")]
    pub period_s: f64,
    /// "teamster" (default) or "vsphere": see `teamster_core::teaming::lbt`.
    #[serde(default)]
    pub damping: Damping,
}

fn thirty() -> f64 {
    30.0
}
fn three_quarters() -> f64 {
    0.75
}

impl Default for LbtSection {
    fn default() -> Self {
        LbtSection {
            window_s: 30.0,
            threshold: 0.75,
            period_s: 30.0,
            damping: Damping::default(),
        }
    }
}

impl LbtSection {
    /// The longest window or period accepted: a day. Longer spans are almost certainly a unit
    /// mistake, and would overflow the meters' arithmetic.
    pub const MAX_S: f64 = 86_400.0;

    /// The team's knobs, checked: each out-of-range value is an error naming its key.
    pub fn config(&self) -> Result<LbtConfig, String> {
        let secs = |k: &str, v: f64, min: f64| {
            if v.is_finite() && v >= min && v <= Self::MAX_S {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(format!("lbt.{k} = {v}: expected seconds from {min} to {}", Self::MAX_S))
            }
        };
        let lbt = LbtConfig {
            window: secs("window_s", self.window_s, 0.03)?,
            threshold: self.threshold,
            period: secs("period_s", self.period_s, 0.001)?,
            damping: self.damping,
        };
        lbt.validate().map_err(|e| format!("lbt.threshold: {e}"))?;
        Ok(lbt)
    }
}

fn yes() -> bool {
    true
}

/// A `[[port_groups]]` entry.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GroupEntry {
    pub name: String,
    /// The load-balancing policy, by name (`port-id`, `load-based`, ...).
    pub policy: Policy,
    /// Active uplinks, by name, in failover order.
    pub active: Vec<String>,
    /// Standby uplinks, by name, in failover order.
    #[serde(default)]
    pub standby: Vec<String>,
    #[serde(default = "yes")]
    pub failback: bool,
    #[serde(default = "yes")]
    pub notify_switches: bool,
    pub vlan: Option<u16>,
    /// MAC address changes, forged transmits, promiscuous mode: each rejected unless accepted.
    #[serde(default, skip_serializing_if = "crate::switch::SecurityPolicy::is_default")]
    pub security: crate::switch::SecurityPolicy,
}

/// A `[[traffic_classes]]` entry: a system traffic class's controls.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClassEntry {
    pub class: String,
    #[serde(default)]
    pub reservation: Bandwidth,
    pub shares: Option<Shares>,
    pub limit: Option<Bandwidth>,
}

/// A `[[pools]]` entry: a network resource pool under the `vm` class.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PoolEntry {
    pub name: String,
    #[serde(default)]
    pub reservation: Bandwidth,
    pub shares: Option<Shares>,
    pub limit: Option<Bandwidth>,
}

/// The fields every file's `[[ports]]` entry shares, borrowed from it.
#[derive(Debug, Clone, Copy)]
pub struct PortCommon<'a> {
    pub name: &'a str,
    pub id: Option<u32>,
    pub mac: Option<&'a str>,
    pub group: &'a str,
    pub pool: Option<&'a str>,
    pub class: Option<&'a str>,
    pub reservation: Bandwidth,
    pub shares: Option<Shares>,
    pub limit: Option<Bandwidth>,
}

/// A file's port entry (declared with [`port_entry!`](crate::port_entry)).
pub trait PortEntry {
    /// Its shared fields.
    fn common(&self) -> PortCommon<'_>;
}
