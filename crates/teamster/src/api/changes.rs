//! The changes an operator may make to a running switch, and how each edits the configuration.
//!
//! A change edits a copy of the [`SwitchFile`]; the copy is then checked whole (names,
//! interfaces, admission control) exactly as at start-up, saved, and only then handed to the
//! data plane. So a change is all or nothing, and what runs is always what a restart would load.

use crate::live::config::{PortFile, PortOrigin, SwitchFile};
use serde::{Deserialize, Deserializer};
use teamster_core::ioc::Shares;
use teamster_core::teaming::Policy;
use teamster_core::units::Bandwidth;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::ToSchema;

/// New NetIOC controls for a port; fields left out keep their value.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PortChange {
    /// Minimum guaranteed send rate, e.g. "500M" (bits per second; "MB" is refused).
    #[serde(default, deserialize_with = "some")]
    #[schema(schema_with = bandwidth_schema, required = false)]
    pub reservation: Option<Bandwidth>,
    /// Share of the excess: 1-100, or "low" (25), "normal" (50), "high" (100).
    #[serde(default, deserialize_with = "some")]
    #[schema(schema_with = shares_schema, required = false)]
    pub shares: Option<Shares>,
    /// Cap on the send rate, e.g. "1G"; null removes the limit.
    #[serde(default, deserialize_with = "present")]
    #[schema(schema_with = limit_schema, required = false)]
    pub limit: Option<Option<Bandwidth>>,
    /// true: the port takes its MAC over from a host outside that uses it (at once, if it
    /// waits for it now); false: it waits until such a host is gone.
    #[serde(default, deserialize_with = "some")]
    #[schema(nullable = false, required = false)]
    pub mac_takeover: Option<bool>,
}

/// The bandwidth strings [`Bandwidth`] accepts, as a regular expression: a decimal number, an
/// optional k/M/G/T prefix, an optional lower-case-b bit unit, spaces around; the whole part has
/// at most as many significant digits as keeps the value within u64 bits/s for that prefix
/// (so a few 20-digit values the parser takes, up to 18446744073709551615, fall outside it).
fn bandwidth_pattern() -> String {
    let unit = r"(?:b(?:[iI][tT][sS]?(?:/[sS])?|[pP][sS]|/[sS])?)?";
    let forms: Vec<String> = [("", 19), ("[kK]", 16), ("[mM]", 13), ("[gG]", 10), ("[tT]", 7)]
        .iter()
        .map(|(prefix, digits)| format!(r"(?:0*[0-9]{{1,{digits}}}(?:\.[0-9]*)?|\.[0-9]+)\s*{prefix}\s*{unit}"))
        .collect();
    format!(r"^\s*(?:{})\s*$", forms.join("|"))
}

/// A bandwidth in JSON: a string with units ("10G", "750Mbps", "1.5 Gbit/s") or a number of
/// bits/s.
pub(super) fn bandwidth_schema() -> Schema {
    OneOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(bandwidth_pattern()))
                .examples(["500M", "10Gbps"])
                .description(Some(
                    "a decimal number with an optional k/M/G/T prefix and bit unit (\"B\", bytes, is refused)",
                )),
        )
        // Up to u64::MAX bits/s; as a float, strictly below 2^64.
        .item(
            ObjectBuilder::new()
                .schema_type(Type::Number)
                .minimum(Some(0.0))
                .exclusive_maximum(Some(18_446_744_073_709_551_616.0)),
        )
        .into()
}

/// A bandwidth or null (no limit).
pub(super) fn limit_schema() -> Schema {
    match bandwidth_schema() {
        Schema::OneOf(mut one) => {
            one.items.push(ObjectBuilder::new().schema_type(Type::Null).into());
            Schema::OneOf(one)
        }
        other => other,
    }
}

/// The share strings [`Shares`] accepts: low, normal, high, or a whole number from 1 to 100
/// (leading zeros and a plus sign allowed, as Rust's integer parser allows them).
const SHARES_PATTERN: &str = r"^\s*(?:low|normal|high|\+?0*(?:100|[1-9][0-9]?))\s*$";

/// Shares: 1-100, or low, normal or high.
pub(super) fn shares_schema() -> Schema {
    OneOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(1.0))
                .maximum(Some(100.0)),
        )
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(SHARES_PATTERN)),
        )
        .into()
}

/// The teaming policies by name.
pub(super) fn policy_schema() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(Policy::names().iter().copied()))
        .into()
}

/// The team modes by name.
fn mode_schema() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(teamster_core::teaming::TeamMode::ALL.map(|m| m.name())))
        .into()
}

/// Address Hash's field sets by name.
fn hash_fields_schema() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(teamster_core::teaming::HashFields::ALL.map(|h| h.name())))
        .into()
}

/// The `[port_groups.lacp]` table.
fn lacp_schema() -> Schema {
    let names = |v: &[&str]| {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(v.iter().copied()))
    };
    let number = || {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(1))
            .maximum(Some(65535))
    };
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .property("activity", names(&["active", "passive"]))
        .property("rate", names(&["fast", "slow"]))
        .property("key", number())
        .property("system_priority", number())
        .property("port_priority", number())
        .property(
            "system_mac",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some("^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$")),
        )
        .property("fallback", names(&["active-backup", "down"]))
        .additional_properties(Some(utoipa::openapi::schema::AdditionalProperties::FreeForm(false)))
        .into()
}

/// A port group's teaming; fields left out keep their value.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupChange {
    /// port-id, source-mac, ip-hash, ip-hash-l4, load-based, hyperv-port, address-hash, dynamic
    /// or lbt-dynamic.
    #[serde(default, deserialize_with = "some")]
    #[schema(schema_with = policy_schema, required = false)]
    pub policy: Option<Policy>,
    /// Active uplinks, by name, in failover order.
    #[serde(default, deserialize_with = "some")]
    #[schema(nullable = false, required = false)]
    pub active: Option<Vec<String>>,
    /// Standby uplinks, by name, in failover order.
    #[serde(default, deserialize_with = "some")]
    #[schema(nullable = false, required = false)]
    pub standby: Option<Vec<String>>,
    /// Return ports to their home uplink when it recovers.
    #[serde(default, deserialize_with = "some")]
    #[schema(nullable = false, required = false)]
    pub failback: Option<bool>,
    /// switch-independent (default), static or lacp.
    #[serde(default, deserialize_with = "some")]
    #[schema(schema_with = mode_schema, required = false)]
    pub mode: Option<teamster_core::teaming::TeamMode>,
    /// What address-hash and the flowlet policies hash: transport-ports (default),
    /// ip-addresses or mac-addresses.
    #[serde(default, deserialize_with = "some")]
    #[schema(schema_with = hash_fields_schema, required = false)]
    pub hash_fields: Option<teamster_core::teaming::HashFields>,
    /// dynamic, lbt-dynamic: idle gap in µs after which a flow may change member (1 to
    /// 60,000,000; default 10,000).
    #[serde(default, deserialize_with = "whole_number")]
    #[schema(nullable = false, required = false, minimum = 1, maximum = 60_000_000)]
    pub flowlet_gap_us: Option<u64>,
    /// dynamic, lbt-dynamic: rebalancing interval in ms (1 to 60,000; default 1,000).
    #[serde(default, deserialize_with = "whole_number")]
    #[schema(nullable = false, required = false, minimum = 1, maximum = 60_000)]
    pub rebalance_ms: Option<u64>,
    /// mode lacp: activity, rate, key, system_priority, port_priority, system_mac, fallback
    /// (each optional; the table replaces the group's).
    #[serde(default, deserialize_with = "some")]
    #[schema(schema_with = lacp_schema, required = false)]
    pub lacp: Option<teamster_core::host::LacpEntry>,
}

/// A port group's mode and policy knobs, as a change or an addition gives them; fields left
/// out keep their value (or take the default in an addition).
#[derive(Debug, Clone, Default)]
struct TeamingChange {
    lacp: Option<teamster_core::host::LacpEntry>,
    mode: Option<teamster_core::teaming::TeamMode>,
    hash_fields: Option<teamster_core::teaming::HashFields>,
    flowlet_gap_us: Option<u64>,
    rebalance_ms: Option<u64>,
}

macro_rules! teaming_of {
    ($c:expr) => {
        TeamingChange {
            lacp: $c.lacp.clone(),
            mode: $c.mode,
            hash_fields: $c.hash_fields,
            flowlet_gap_us: $c.flowlet_gap_us,
            rebalance_ms: $c.rebalance_ms,
        }
    };
}

impl TeamingChange {
    fn is_empty(&self) -> bool {
        self.lacp.is_none()
            && self.mode.is_none()
            && self.hash_fields.is_none()
            && self.flowlet_gap_us.is_none()
            && self.rebalance_ms.is_none()
    }

    /// Writes the given fields into `g`.
    fn apply(&self, g: &mut teamster_core::host::GroupEntry) {
        if let Some(m) = self.mode {
            g.mode = m;
        }
        if let Some(l) = &self.lacp {
            g.lacp = Some(l.clone());
        }
        if let Some(h) = self.hash_fields {
            g.hash_fields = h;
        }
        if let Some(us) = self.flowlet_gap_us {
            g.flowlet_gap_us = Some(us);
        }
        if let Some(ms) = self.rebalance_ms {
            g.rebalance_ms = Some(ms);
        }
    }
}

/// Declares a request body that makes a port, a `[[ports]]` entry of `switch.toml`: the
/// body's own fields (`interface`, `group` and `mac` among them, each saying what it is to that
/// body), then the fields every such body shares, declared here once (the NetIOC controls and
/// the backend), then its own again after `then`; and `entry`, the `[[ports]]` entry the body
/// makes. The bodies: [`PortAdd`] (`POST /api/v1/ports`) and each of the libvirt hook's
/// [`DomainPort`](super::domain_changes::DomainPort)s (`PUT /api/v1/domains/{domain}/ports`).
/// Each refuses fields it does not have, so the hook's cannot name its port or take a MAC over.
macro_rules! port_body {
    ($(#[$($meta:tt)*])* pub struct $name:ident { $($first:tt)* } then { $($last:tt)* }) => {
        $(#[$($meta)*])*
        #[derive(Debug, Clone, serde::Deserialize, utoipa::ToSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $($first)*
            /// Its network resource pool, or
            #[serde(default)]
            #[schema(nullable = false, required = false)]
            pub pool: Option<String>,
            /// its traffic class; neither: under the `vm` class.
            #[serde(default)]
            #[schema(nullable = false, required = false)]
            pub class: Option<String>,
            /// Minimum guaranteed send rate (default none).
            #[serde(default, deserialize_with = "crate::api::changes::some")]
            #[schema(schema_with = crate::api::changes::bandwidth_schema, required = false)]
            pub reservation: Option<teamster_core::units::Bandwidth>,
            /// Share of the excess (default normal, 50).
            #[serde(default, deserialize_with = "crate::api::changes::some")]
            #[schema(schema_with = crate::api::changes::shares_schema, required = false)]
            pub shares: Option<teamster_core::ioc::Shares>,
            /// Cap on the send rate (default none).
            #[serde(default, deserialize_with = "crate::api::changes::some")]
            #[schema(schema_with = crate::api::changes::bandwidth_schema, required = false)]
            pub limit: Option<teamster_core::units::Bandwidth>,
            /// af_packet (default), af_xdp or auto.
            #[serde(default, deserialize_with = "crate::api::changes::some")]
            #[schema(nullable = false, required = false)]
            pub backend: Option<crate::live::config::BackendSetting>,
            $($last)*
        }

        impl $name {
            /// The `[[ports]]` entry this body makes, named `name`, from `origin` (owned by
            /// `owner`): its MAC as given, never taken over from a host outside (a body that
            /// may say otherwise sets `mac_takeover` itself).
            pub fn entry(
                &self,
                name: String,
                origin: crate::live::config::PortOrigin,
                owner: Option<String>,
            ) -> crate::live::config::PortFile {
                crate::live::config::PortFile {
                    name,
                    id: None,
                    mac: Some(self.mac.clone()),
                    group: self.group.clone(),
                    pool: self.pool.clone(),
                    class: self.class.clone(),
                    reservation: self.reservation.unwrap_or_default(),
                    shares: self.shares,
                    limit: self.limit,
                    interface: self.interface.clone(),
                    backend: self.backend.unwrap_or_default(),
                    origin,
                    owner,
                    mac_takeover: false,
                }
            }
        }
    };
}
pub(super) use port_body;

port_body! {
    /// A port to add to the running switch (as a `[[ports]]` entry of `switch.toml`).
    pub struct PortAdd {
        /// Unique among ports, pools and traffic classes: 1-64 characters, no `/`.
        pub name: String,
        /// The host end of the VM's interface: a tap (`vnet3`) or a veth; it need not exist yet
        /// (the port attaches when it appears).
        pub interface: String,
        /// Its port group.
        pub group: String,
        /// The MAC the VM uses on this port (unicast, not all-zero, not another port's).
        pub mac: String,
    }
    then {
        /// Take `mac` over from a host outside that uses it (default false: the port waits until
        /// that host is quiet, its frames from the MAC dropped as `mac_conflict`).
        #[serde(default, deserialize_with = "some")]
        #[schema(nullable = false, required = false)]
        pub mac_takeover: Option<bool>,
    }
}

/// A port group to add to the running switch (as a `[[port_groups]]` entry; its security
/// policy is the default, all rejected: change it in `switch.toml` and reload).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupAdd {
    /// Unique among port groups: 1-64 characters, no `/`.
    pub name: String,
    /// port-id, source-mac, ip-hash, ip-hash-l4, load-based, hyperv-port, address-hash, dynamic
    /// or lbt-dynamic.
    #[schema(schema_with = policy_schema)]
    pub policy: Policy,
    /// Active uplinks, by name, in failover order (at least one).
    pub active: Vec<String>,
    /// Standby uplinks, by name, in failover order.
    #[serde(default)]
    #[schema(nullable = false, required = false)]
    pub standby: Vec<String>,
    /// Return ports to their home uplink when it recovers (default true).
    #[serde(default = "yes")]
    #[schema(nullable = false, required = false)]
    pub failback: bool,
    /// Send RARPs for moved ports (default true).
    #[serde(default = "yes")]
    #[schema(nullable = false, required = false)]
    pub notify_switches: bool,
    /// 802.1Q VLAN on the uplinks, 1-4094 (default none: untagged).
    #[serde(default, deserialize_with = "vlan_number")]
    #[schema(nullable = false, required = false, minimum = 1, maximum = 4094)]
    pub vlan: Option<u16>,
    /// switch-independent (default), static or lacp.
    #[serde(default, deserialize_with = "some")]
    #[schema(schema_with = mode_schema, required = false)]
    pub mode: Option<teamster_core::teaming::TeamMode>,
    /// What address-hash and the flowlet policies hash: transport-ports (default),
    /// ip-addresses or mac-addresses.
    #[serde(default, deserialize_with = "some")]
    #[schema(schema_with = hash_fields_schema, required = false)]
    pub hash_fields: Option<teamster_core::teaming::HashFields>,
    /// dynamic, lbt-dynamic: idle gap in µs after which a flow may change member (1 to
    /// 60,000,000; default 10,000).
    #[serde(default, deserialize_with = "whole_number")]
    #[schema(nullable = false, required = false, minimum = 1, maximum = 60_000_000)]
    pub flowlet_gap_us: Option<u64>,
    /// dynamic, lbt-dynamic: rebalancing interval in ms (1 to 60,000; default 1,000).
    #[serde(default, deserialize_with = "whole_number")]
    #[schema(nullable = false, required = false, minimum = 1, maximum = 60_000)]
    pub rebalance_ms: Option<u64>,
    /// mode lacp: activity, rate, key, system_priority, port_priority, system_mac, fallback
    /// (each optional; the table replaces the group's).
    #[serde(default, deserialize_with = "some")]
    #[schema(schema_with = lacp_schema, required = false)]
    pub lacp: Option<teamster_core::host::LacpEntry>,
}

fn yes() -> bool {
    true
}

/// A VLAN ID as JSON Schema's `integer` allows it: any number with no fractional part (`20`,
/// `20.0`), refusing null; the range is checked with the rest of the configuration.
fn vlan_number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u16>, D::Error> {
    let v = f64::deserialize(d)?;
    if v.fract() != 0.0 || !(0.0..=f64::from(u16::MAX)).contains(&v) {
        return Err(serde::de::Error::custom(format!(
            "vlan: {v} is not a VLAN ID (1 to 4094)"
        )));
    }
    Ok(Some(v as u16))
}

/// A count given as a JSON number without a fraction (`441` or `441.0`), 0 to 2^53.
fn whole_number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let v = f64::deserialize(d)?;
    if v.fract() != 0.0 || !(0.0..=9_007_199_254_740_992.0).contains(&v) {
        return Err(serde::de::Error::custom(format!(
            "{v} is not a whole number from 0 to 2^53"
        )));
    }
    Ok(Some(v as u64))
}

/// Why a change was refused before it was checked against the host.
#[derive(Debug, Clone, PartialEq)]
pub enum ChangeError {
    /// No such port, group or uplink.
    NotFound(String),
    /// The body asks for nothing, or for something impossible.
    Invalid(String),
    /// The object exists already, or cannot be changed this way.
    Conflict(String),
}

/// The index of the object of `items` named `name`, or "no WHAT named `name`".
pub(super) fn named<T>(
    items: &[T],
    name: &str,
    name_of: impl Fn(&T) -> &String,
    what: &str,
) -> Result<usize, ChangeError> {
    items
        .iter()
        .position(|x| name_of(x) == name)
        .ok_or_else(|| ChangeError::NotFound(format!("no {what} named `{name}`")))
}

/// Deserialises a field that is present into Some, refusing null: leaving a field out keeps
/// its value, and null would be ambiguous.
pub(super) fn some<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// Deserialises a field that is present (even as null) into Some, so that `"limit": null`
/// (remove the limit) differs from leaving `limit` out (keep it).
pub(super) fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<Bandwidth>>, D::Error> {
    Option::<Bandwidth>::deserialize(d).map(Some)
}

/// The configuration with port `name`'s controls changed.
pub fn change_port(f: &SwitchFile, name: &str, c: &PortChange) -> Result<SwitchFile, ChangeError> {
    if c.reservation.is_none() && c.shares.is_none() && c.limit.is_none() && c.mac_takeover.is_none() {
        return Err(ChangeError::Invalid(
            "nothing to change: give reservation, shares, limit or mac_takeover".into(),
        ));
    }
    let mut new = f.clone();
    let port = &mut new.ports[named(&f.ports, name, |p| &p.name, "port")?];
    if let Some(r) = c.reservation {
        port.reservation = r;
    }
    if let Some(s) = c.shares {
        port.shares = Some(s);
    }
    if let Some(l) = c.limit {
        port.limit = l;
    }
    if let Some(t) = c.mac_takeover {
        port.mac_takeover = t;
    }
    Ok(new)
}

/// The configuration with port group `name`'s teaming changed.
pub fn change_group(f: &SwitchFile, name: &str, c: &GroupChange) -> Result<SwitchFile, ChangeError> {
    if c.policy.is_none()
        && c.active.is_none()
        && c.standby.is_none()
        && c.failback.is_none()
        && teaming_of!(c).is_empty()
    {
        return Err(ChangeError::Invalid(
            "nothing to change: give policy, mode, active, standby, failback, hash_fields, flowlet_gap_us, rebalance_ms or lacp"
                .into(),
        ));
    }
    let mut new = f.clone();
    let group = &mut new.port_groups[named(&f.port_groups, name, |g| &g.name, "port group")?];
    if let Some(p) = c.policy {
        group.policy = p;
    }
    if let Some(a) = &c.active {
        group.active = a.clone();
    }
    if let Some(s) = &c.standby {
        group.standby = s.clone();
    }
    if let Some(b) = c.failback {
        group.failback = b;
    }
    teaming_of!(c).apply(group);
    Ok(new)
}

/// The configuration with port `p` added (saved with the file; shown as added through the API
/// until a restart).
pub fn add_port(f: &SwitchFile, p: &PortAdd) -> Result<SwitchFile, ChangeError> {
    if let Some(o) = f.ports.iter().find(|o| o.name == p.name) {
        let how = match o.origin {
            PortOrigin::Matched => " (matched by a port rule)",
            PortOrigin::Assigned => " (a VM the cluster controller assigns here)",
            PortOrigin::Libvirt => " (a libvirt domain's, made by the hook)",
            _ => "",
        };
        return Err(ChangeError::Conflict(format!("a port named `{}` exists{how}", p.name)));
    }
    let mut new = f.clone();
    new.ports.push(PortFile {
        mac_takeover: p.mac_takeover.unwrap_or(false),
        ..p.entry(p.name.clone(), PortOrigin::Api, None)
    });
    Ok(new)
}

/// The configuration without port `name`. A port matched by a port rule goes when its
/// interface goes; removing it by hand is refused (the rule would take the interface again).
pub fn remove_port(f: &SwitchFile, name: &str) -> Result<SwitchFile, ChangeError> {
    let i = named(&f.ports, name, |p| &p.name, "port")?;
    if f.ports[i].origin == PortOrigin::Assigned {
        return Err(ChangeError::Conflict(format!(
            "port `{name}` is a VM the cluster controller assigns to this host: power it off or move it there (`teamster ctl vm`)"
        )));
    }
    if f.ports[i].origin == PortOrigin::Matched {
        return Err(ChangeError::Conflict(format!(
            "port `{name}` was matched by a port rule on interface {}: it is removed when the interface goes (or change the rule)",
            f.ports[i].interface
        )));
    }
    let mut new = f.clone();
    new.ports.remove(i);
    Ok(new)
}

/// The configuration with port group `g` added after the others.
pub fn add_group(f: &SwitchFile, g: &GroupAdd) -> Result<SwitchFile, ChangeError> {
    if f.port_groups.iter().any(|o| o.name == g.name) {
        return Err(ChangeError::Conflict(format!("a port group named `{}` exists", g.name)));
    }
    let mut new = f.clone();
    new.port_groups.push(teamster_core::host::GroupEntry {
        name: g.name.clone(),
        policy: g.policy,
        active: g.active.clone(),
        standby: g.standby.clone(),
        failback: g.failback,
        notify_switches: g.notify_switches,
        vlan: g.vlan,
        security: Default::default(),
        mode: Default::default(),
        hash_fields: Default::default(),
        flowlet_gap_us: None,
        rebalance_ms: None,
        lacp: None,
        overlay: None,
    });
    teaming_of!(g).apply(new.port_groups.last_mut().expect("just pushed"));
    Ok(new)
}

/// The configuration without port group `name`, which no port and no port rule may use.
pub fn remove_group(f: &SwitchFile, name: &str) -> Result<SwitchFile, ChangeError> {
    let i = named(&f.port_groups, name, |g| &g.name, "port group")?;
    let users: Vec<&str> = f
        .ports
        .iter()
        .filter(|p| p.group == name)
        .map(|p| p.name.as_str())
        .collect();
    if !users.is_empty() {
        return Err(ChangeError::Conflict(format!(
            "port group `{name}` still has ports: {} (remove or move them first)",
            users.join(", ")
        )));
    }
    if let Some(k) = f.port_rules.iter().position(|r| r.group == name) {
        return Err(ChangeError::Conflict(format!(
            "port group `{name}` is port_rules[{k}]'s group (change the rule in switch.toml first)"
        )));
    }
    let mut new = f.clone();
    new.port_groups.remove(i);
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::config::parse_file;

    use crate::live::config::ONE_PORT as FILE;

    /// Every road a port takes ends in the same planned port, made by one function
    /// (`config::port_plan`): one VM on vnet0 in the file (as at start or a reload), added
    /// through the API, set by the libvirt hook, matched by a port rule or assigned by the
    /// cluster controller, is planned alike but for its name (the hook's and a rule's are the
    /// switch's choice) and origin.
    #[test]
    fn every_road_plans_the_same_port() {
        use crate::live::config::{check, port_from, AllThere, PortRule, SwitchPlan};
        use teamster_dp::datapath::PortPlan;
        let planned = |f: &SwitchFile| -> (PortPlan, String) {
            let SwitchPlan { datapath, .. } = check(f, &AllThere).unwrap();
            let [p] = &datapath.ports[..] else {
                panic!("one port: {:?}", datapath.ports)
            };
            let spec = &datapath.tree.node(p.leaf).spec;
            let controls = format!("{} {} {:?}", spec.reservation, spec.shares.get(), spec.limit);
            let unnamed = PortPlan {
                name: String::new(),
                ..p.clone()
            };
            (unnamed, controls)
        };
        let file = parse_file(FILE).unwrap();
        let none = SwitchFile {
            ports: Vec::new(),
            ..file.clone()
        };
        let api: PortAdd = serde_json::from_str(
            r#"{"name": "vm1", "interface": "vnet0", "group": "vms", "mac": "52:54:00:00:00:01", "limit": "2G"}"#,
        )
        .unwrap();
        let hook: crate::api::domain_changes::DomainPorts = serde_json::from_str(
            r#"{"ports": [{"interface": "vnet0", "group": "vms", "mac": "52:54:00:00:00:01", "limit": "2G"}]}"#,
        )
        .unwrap();
        let rule = PortRule {
            pattern: "vnet*".into(),
            mac_prefix: None,
            group: "vms".into(),
            vm_mac: Default::default(),
            pool: None,
            class: None,
            reservation: Bandwidth::ZERO,
            shares: None,
            limit: Some(Bandwidth::from_gbps(2)),
            backend: Default::default(),
        };
        let assignment = crate::controller::view::Assignment {
            vm: "vm1".into(),
            mac: Some("52:54:00:00:00:01".into()),
            group: None,
            pool: "vm".into(),
            reservation: Bandwidth::ZERO,
            shares: Shares::NORMAL,
            limit: Some(Bandwidth::from_gbps(2)),
            moving_from: None,
        };
        let section = crate::live::controller_config::ControllerSection {
            url: None,
            socket: None,
            token_file: None,
            ca: None,
            cert: None,
            key: None,
            endpoints: Vec::new(),
            host: "h1".into(),
            interface: "vnet0".into(),
            group: "vms".into(),
            derived: Vec::new(),
            interval_ms: None,
            isolation: Default::default(),
        };
        let mut assigned = none.clone();
        assigned
            .ports
            .push(crate::api::agent::port_of(&none, &section, &assignment).unwrap());
        let mut matched = none.clone();
        matched
            .ports
            .push(port_from(&rule, "vnet0", "52:54:00:00:00:01".parse().unwrap()));
        let roads = [
            ("the file", file.clone()),
            ("the API", add_port(&none, &api).unwrap()),
            (
                "the hook",
                crate::api::domain_changes::set_domain_ports(&none, "web", &hook.ports)
                    .unwrap()
                    .0,
            ),
            ("a port rule", matched),
            ("the controller", assigned),
        ];
        let want = planned(&file);
        assert_eq!(want.0.mac.to_string(), "52:54:00:00:00:01");
        for (road, f) in roads {
            assert_eq!(planned(&f), want, "{road}");
        }
    }

    /// Parses a body as the API does (axum's JSON extractor reports the field's path).
    fn port_change(json: &str) -> Result<PortChange, String> {
        let de = &mut serde_json::Deserializer::from_str(json);
        serde_path_to_error::deserialize(de).map_err(|e| e.to_string())
    }

    #[test]
    fn a_port_change_edits_only_what_it_names() {
        let f = parse_file(FILE).unwrap();
        let new = change_port(&f, "vm1", &port_change(r#"{"reservation": "500M"}"#).unwrap()).unwrap();
        assert_eq!(new.ports[0].reservation, Bandwidth::from_mbps(500));
        assert_eq!(new.ports[0].limit, Some(Bandwidth::from_gbps(2)));
        let new = change_port(&f, "vm1", &port_change(r#"{"limit": null}"#).unwrap()).unwrap();
        assert_eq!(new.ports[0].limit, None);
        let new = change_port(&f, "vm1", &port_change(r#"{"mac_takeover": true}"#).unwrap()).unwrap();
        assert!(new.ports[0].mac_takeover && new.ports[0].limit.is_some());
        assert!(port_change(r#"{"mac_takeover": null}"#).is_err());
        assert_eq!(
            change_port(&f, "vm9", &port_change(r#"{"shares": 10}"#).unwrap()).unwrap_err(),
            ChangeError::NotFound("no port named `vm9`".into())
        );
        assert!(matches!(
            change_port(&f, "vm1", &port_change("{}").unwrap()),
            Err(ChangeError::Invalid(_))
        ));
    }

    /// A port added through the API is saved and marked as such; one matched by a rule is
    /// neither saved nor removable by hand.
    #[test]
    fn ports_are_added_and_removed_by_name() {
        let f = parse_file(FILE).unwrap();
        let body =
            r#"{"name": "vm2", "interface": "vnet1", "group": "vms", "mac": "52:54:00:00:00:02", "limit": "1G"}"#;
        let add: PortAdd = serde_json::from_str(body).unwrap();
        let new = add_port(&f, &add).unwrap();
        assert_eq!(new.ports.len(), 2);
        assert_eq!(new.ports[1].origin, PortOrigin::Api);
        assert_eq!(new.ports[1].limit, Some(Bandwidth::from_gbps(1)));
        assert!(crate::live::config::render(&new).contains("name = \"vm2\""));
        assert!(matches!(add_port(&new, &add), Err(ChangeError::Conflict(_))));
        let back = remove_port(&new, "vm2").unwrap();
        assert_eq!(back.ports.len(), 1);
        assert!(matches!(remove_port(&back, "vm2"), Err(ChangeError::NotFound(_))));
        let mut matched = new.clone();
        matched.ports[1].origin = PortOrigin::Matched;
        assert!(
            !crate::live::config::render(&matched).contains("vm2"),
            "matched ports are not saved"
        );
        assert!(matches!(remove_port(&matched, "vm2"), Err(ChangeError::Conflict(_))));
        for bad in [
            r#"{"name": "x", "interface": "v", "group": "vms"}"#,
            r#"{"name": "x", "interface": "v", "group": "vms", "mac": "m", "colour": "red"}"#,
            r#"{"name": "x", "interface": "v", "group": "vms", "mac": "m", "shares": 0}"#,
        ] {
            assert!(serde_json::from_str::<PortAdd>(bad).is_err(), "{bad}");
        }
    }

    /// A team's mode and knobs change through `PATCH` as at start: applied, saved, and refused
    /// by the same checks (naming the key) when the result is wrong.
    #[test]
    fn a_group_change_sets_mode_and_knobs_under_the_start_checks() {
        struct Fake;
        impl crate::live::config::Interfaces for Fake {
            fn exists(&self, _: &str) -> bool {
                true
            }
            fn speed_mbps(&self, _: &str) -> Option<u64> {
                Some(10_000)
            }
        }
        let f = parse_file(FILE).unwrap();
        let change = |json: &str| {
            let de = &mut serde_json::Deserializer::from_str(json);
            let c: GroupChange = serde_path_to_error::deserialize(de).map_err(|e| e.to_string())?;
            let new = change_group(&f, "vms", &c).map_err(|e| format!("{e:?}"))?;
            crate::live::config::check(&new, &Fake).map(|_| new)
        };
        let new = change(
            r#"{"policy": "dynamic", "mode": "lacp", "flowlet_gap_us": 2500.0, "lacp": {"rate": "slow", "key": 7}}"#,
        )
        .unwrap();
        let g = &new.port_groups[0];
        assert_eq!(
            (g.policy, g.mode),
            (Policy::DYNAMIC, teamster_core::teaming::TeamMode::Lacp)
        );
        assert_eq!(g.flowlet_gap_us, Some(2500));
        let saved = crate::live::config::render(&new);
        assert!(
            saved.contains("mode = \"lacp\"") && saved.contains("key = 7"),
            "{saved}"
        );
        for (json, says) in [
            (r#"{"mode": "lacp", "policy": "load-based"}"#, "port_groups[0].policy"),
            (r#"{"flowlet_gap_us": 0}"#, "port_groups[0].flowlet_gap_us"),
            (
                r#"{"mode": "lacp", "lacp": {"key": 70000}}"#,
                "port_groups[0].lacp.key: 70000 is out of range",
            ),
            (
                r#"{"lacp": {"rate": "fast"}}"#,
                "port_groups[0].lacp: LACP settings need",
            ),
            (r#"{"mode": "lacp", "lacp": {"colour": 1}}"#, "unknown field `colour`"),
            (r#"{"hash_fields": "ports"}"#, "hash_fields"),
            (r#"{"rebalance_ms": 1.5}"#, "rebalance_ms"),
        ] {
            let e = change(json).unwrap_err();
            assert!(e.contains(says), "{json}: `{says}` not in {e}");
        }
    }

    #[test]
    fn bad_bodies_name_the_field() {
        for (body, want) in [
            (r#"{"reservation": "5GB"}"#, "bytes"),
            (r#"{"shares": 500}"#, "1 to 100"),
            (r#"{"limit": -3}"#, "limit"),
            (r#"{"reserve": "1G"}"#, "unknown field `reserve`"),
        ] {
            let e = port_change(body).unwrap_err();
            assert!(e.contains(want), "{body}: `{want}` not in {e}");
        }
    }

    /// Checks that `pattern` matches exactly the strings `accepts` takes: `cases`, and 20,000
    /// random strings over `alphabet`.
    fn agrees(pattern: &str, accepts: impl Fn(&str) -> bool, cases: &[&str], alphabet: &str) {
        let re = regex_lite::Regex::new(pattern).unwrap();
        let alphabet: Vec<char> = alphabet.chars().collect();
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let random: Vec<String> = (0..20_000)
            .map(|_| {
                let len = (next() % 9) as usize;
                (0..len)
                    .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                    .collect()
            })
            .collect();
        for s in cases.iter().map(|s| s.to_string()).chain(random) {
            let accepted = accepts(&s);
            assert_eq!(re.is_match(&s), accepted, "`{s}`: the parser says {accepted}");
        }
    }

    #[test]
    fn the_bandwidth_pattern_matches_what_the_parser_accepts() {
        let cases = [
            "10G",
            "10Gbps",
            "750M",
            "1.5 Gbit/s",
            "100 kbps",
            "1000000",
            ".5",
            "1.",
            " 7 T ",
            "5bPs",
            "9999999T",
            "10GB",
            "1.2.3",
            ".",
            "",
            "abc",
            "1e3",
            "10 Gx",
            "99999999T",
            "00000000000000000000012G",
            "1 0G",
            "Ü",
            "5 G B",
            "12345678901234567G",
        ];
        agrees(
            &bandwidth_pattern(),
            |s| s.parse::<Bandwidth>().is_ok(),
            &cases,
            "0123456789. kKmMgGtTbBiIpPsS/x",
        );
    }

    #[test]
    fn the_shares_pattern_matches_what_the_parser_accepts() {
        let cases = [
            "low", "normal", "high", "1", "100", "101", "0", "007", "+5", "-5", " 50 ", "High", "50.0", "",
        ];
        agrees(
            SHARES_PATTERN,
            |s| s.parse::<Shares>().is_ok(),
            &cases,
            "0123456789+- lowhigLOW.",
        );
    }
}
