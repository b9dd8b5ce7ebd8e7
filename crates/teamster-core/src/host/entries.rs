//! The serde shapes of a host file's shared tables: `[lbt]`, `[[port_groups]]`,
//! `[[traffic_classes]]`, `[[pools]]`, and the shared part of a `[[ports]]` entry.

use crate::ioc::Shares;
use crate::teaming::lacp::{LacpActivity, LacpFallback, LacpRate, LacpSettings};
use crate::teaming::{Damping, HashFields, LbtConfig, Policy, PolicyTuning, TeamMode};
use crate::units::Bandwidth;
use crate::wire::MacAddr;
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
    /// The load-balancing policy, by name (`port-id`, `load-based`, `dynamic`, ...).
    pub policy: Policy,
    /// `switch-independent` (the default), `static` or `lacp`: how the physical switch sees the
    /// group's uplinks.
    #[serde(default, skip_serializing_if = "is_default")]
    pub mode: TeamMode,
    /// What `address-hash` (and the flowlet policies' buckets) hash: `transport-ports` (the
    /// default), `ip-addresses` or `mac-addresses`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub hash_fields: HashFields,
    /// `dynamic`, `lbt-dynamic`: the idle gap, in µs, after which a flow may change member
    /// (default 10,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flowlet_gap_us: Option<u64>,
    /// `dynamic`, `lbt-dynamic`: how often, in ms, flowlets are rebalanced (default 1,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebalance_ms: Option<u64>,
    /// `mode = "lacp"`: the `[port_groups.lacp]` table (every key optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lacp: Option<LacpEntry>,
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
    /// The `[port_groups.overlay]` table: the group is a VXLAN segment (no `vlan` then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlay: Option<OverlayEntry>,
}

/// A port group's VXLAN segment, as written: its VNI, this host's VTEP address and the remote
/// VTEPs that carry it (IPv4).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OverlayEntry {
    pub vni: u64,
    pub local_vtep: core::net::Ipv4Addr,
    pub remote_vteps: Vec<core::net::Ipv4Addr>,
}

impl OverlayEntry {
    /// The segment, checked; errors name the key under `key`.
    pub fn overlay(&self, key: &str) -> Result<crate::overlay::Overlay, String> {
        crate::overlay::Overlay::new(self.vni, self.local_vtep, self.remote_vteps.clone())
            .map_err(|e| format!("{key}.{e}"))
    }
}

impl GroupEntry {
    /// The group's policy tuning, from its knobs and the defaults; range-checked by
    /// [`PolicyTuning::validate`].
    pub fn tuning(&self) -> PolicyTuning {
        let d = PolicyTuning::default();
        PolicyTuning {
            hash_fields: self.hash_fields,
            flowlet_gap: self.flowlet_gap_us.map_or(d.flowlet_gap, Duration::from_micros),
            rebalance: self.rebalance_ms.map_or(d.rebalance, Duration::from_millis),
        }
    }
}

/// A `[port_groups.lacp]` table. Numbers are read wide so that an out-of-range one gets an
/// error naming it rather than a type error.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LacpEntry {
    /// `active` (default: sends LACPDUs unasked) or `passive` (only answers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity: Option<LacpActivity>,
    /// `fast` (default: LACPDUs every second, a partner timed out after 3 s) or `slow` (30 s,
    /// 90 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<LacpRate>,
    /// The actor key, 1-65535 (default 1): members with the same key may aggregate.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "whole")]
    pub key: Option<i64>,
    /// 1-65535 (default 32768).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "whole")]
    pub system_priority: Option<i64>,
    /// 1-65535 (default 32768).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "whole")]
    pub port_priority: Option<i64>,
    /// The actor system ID (default: the live switch takes its first member's MAC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_mac: Option<String>,
    /// `active-backup` (default: with no partner at all, the first live member carries the
    /// traffic) or `down`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<LacpFallback>,
}

impl LacpEntry {
    /// The settings, checked under `key` (`port_groups[0].lacp`); `system` is the system ID to
    /// use when the table gives none.
    pub fn settings(&self, key: &str, system: MacAddr) -> Result<LacpSettings, String> {
        let d = LacpSettings::default();
        let number = |name: &str, v: Option<i64>, default: u16| match v {
            None => Ok(default),
            Some(n) if (1..=65535).contains(&n) => Ok(n as u16),
            Some(n) => Err(format!("{key}.{name}: {n} is out of range 1-65535")),
        };
        let system = match &self.system_mac {
            None => system,
            Some(text) => {
                let mac = text.parse::<MacAddr>().map_err(|e| format!("{key}.system_mac: {e}"))?;
                if mac == MacAddr::default() || mac.is_multicast() {
                    return Err(format!("{key}.system_mac: {mac} is not a unicast MAC"));
                }
                mac
            }
        };
        Ok(LacpSettings {
            activity: self.activity.unwrap_or(d.activity),
            rate: self.rate.unwrap_or(d.rate),
            system_priority: number("system_priority", self.system_priority, d.system_priority)?,
            system,
            key: number("key", self.key, d.key)?,
            port_priority: number("port_priority", self.port_priority, d.port_priority)?,
            fallback: self.fallback.unwrap_or(d.fallback),
        })
    }
}

/// An integer, also written as a float without a fraction (`5.0`, as JSON clients may send
/// it); other floats are refused.
fn whole<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    struct Whole;
    impl serde::de::Visitor<'_> for Whole {
        type Value = i64;
        fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.write_str("a whole number")
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<i64, E> {
            Ok(v)
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<i64, E> {
            Ok(i64::try_from(v).unwrap_or(i64::MAX))
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<i64, E> {
            if v.fract() == 0.0 && v.abs() < 9.0e15 {
                Ok(v as i64)
            } else {
                Err(E::custom(format!("{v} is not a whole number")))
            }
        }
    }
    d.deserialize_any(Whole).map(Some)
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
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
