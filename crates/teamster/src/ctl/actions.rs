//! The `ctl` commands that add and remove objects of a running switch (ports, port groups,
//! uplinks), each as the API request it makes.

use super::segment;
use clap::Subcommand;
use serde_json::{json, Value};

/// Adding and removing ports.
#[derive(Subcommand)]
pub(super) enum PortAction {
    /// Add a port (saved in switch.toml), like `ovs-vsctl add-port`; its interface need not
    /// exist yet.
    Add(Box<PortAddArgs>),
    /// Remove a port (and from switch.toml), like `ovs-vsctl del-port`.
    Del { name: String },
}

/// Adding and removing port groups.
#[derive(Subcommand)]
pub(super) enum GroupAction {
    /// Add a port group (saved in switch.toml), after the others; its security policy is the
    /// default (all rejected).
    Add(Box<GroupAddArgs>),
    /// Remove a port group no port or port rule uses.
    Del { name: String },
}

/// What `group add` takes.
#[derive(clap::Args)]
pub(super) struct GroupAddArgs {
    name: String,
    /// port-id, source-mac, ip-hash, ip-hash-l4, load-based, hyperv-port, address-hash, dynamic
    /// or lbt-dynamic.
    #[arg(long)]
    policy: String,
    /// Active uplinks in order, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    active: Vec<String>,
    /// Standby uplinks in order, comma-separated.
    #[arg(long, value_delimiter = ',')]
    standby: Vec<String>,
    /// 802.1Q VLAN on the uplinks (1-4094).
    #[arg(long)]
    vlan: Option<u16>,
    /// Return ports to their home uplink when it recovers (default true).
    #[arg(long)]
    failback: Option<bool>,
    /// Send RARPs for moved ports (default true).
    #[arg(long)]
    notify_switches: Option<bool>,
    #[command(flatten)]
    teaming: TeamingArgs,
}

/// A group's mode and policy knobs, as `group` and `group add` take them.
#[derive(clap::Args, Default)]
pub(super) struct TeamingArgs {
    /// switch-independent (default), static or lacp.
    #[arg(long)]
    mode: Option<String>,
    /// What address-hash and the flowlet policies hash: transport-ports (default),
    /// ip-addresses or mac-addresses.
    #[arg(long)]
    hash_fields: Option<String>,
    /// dynamic, lbt-dynamic: idle gap in µs after which a flow may change member.
    #[arg(long)]
    flowlet_gap_us: Option<u64>,
    /// dynamic, lbt-dynamic: rebalancing interval in ms.
    #[arg(long)]
    rebalance_ms: Option<u64>,
}

impl TeamingArgs {
    /// Puts the knobs given into a change or addition body.
    pub(super) fn insert_into(&self, body: &mut serde_json::Map<String, Value>) {
        if let Some(m) = &self.mode {
            body.insert("mode".into(), json!(m));
        }
        if let Some(h) = &self.hash_fields {
            body.insert("hash_fields".into(), json!(h));
        }
        if let Some(g) = self.flowlet_gap_us {
            body.insert("flowlet_gap_us".into(), json!(g));
        }
        if let Some(r) = self.rebalance_ms {
            body.insert("rebalance_ms".into(), json!(r));
        }
    }
}

/// The request a `group add` or `group del` makes.
pub(super) fn group_action(action: &GroupAction) -> (&'static str, String, Option<Value>) {
    match action {
        GroupAction::Add(a) => {
            let mut body = json!({"name": a.name, "policy": a.policy, "active": a.active, "standby": a.standby});
            if let Some(v) = a.vlan {
                body["vlan"] = json!(v);
            }
            if let Some(f) = a.failback {
                body["failback"] = json!(f);
            }
            if let Some(n) = a.notify_switches {
                body["notify_switches"] = json!(n);
            }
            if let Some(map) = body.as_object_mut() {
                a.teaming.insert_into(map);
            }
            ("POST", "/api/v1/port-groups".into(), Some(body))
        }
        GroupAction::Del { name } => ("DELETE", format!("/api/v1/port-groups/{}", segment(name)), None),
    }
}

/// What `port add` takes.
#[derive(clap::Args)]
pub(super) struct PortAddArgs {
    name: String,
    /// The host end of the VM's interface (a tap such as vnet3, or a veth).
    #[arg(long)]
    interface: String,
    /// Its port group.
    #[arg(long)]
    group: String,
    /// The MAC the VM uses on this port.
    #[arg(long)]
    mac: String,
    /// Its network resource pool.
    #[arg(long)]
    pool: Option<String>,
    /// Its traffic class (instead of a pool).
    #[arg(long)]
    class: Option<String>,
    /// Minimum guaranteed send rate, e.g. 500M.
    #[arg(long)]
    reservation: Option<String>,
    /// 1-100, or low, normal, high.
    #[arg(long)]
    shares: Option<String>,
    /// Cap on the send rate, e.g. 1G.
    #[arg(long)]
    limit: Option<String>,
    /// af_packet (the default), af_xdp or auto.
    #[arg(long)]
    backend: Option<String>,
    /// Take the MAC over from a host outside that uses it (a gateway's, say); without it the
    /// port waits until that host is quiet.
    #[arg(long)]
    mac_takeover: bool,
}

/// The request a `port add` or `port del` makes.
pub(super) fn port_action(action: &PortAction) -> (&'static str, String, Option<Value>) {
    match action {
        PortAction::Add(a) => {
            let PortAddArgs {
                name,
                interface,
                group,
                mac,
                pool,
                class,
                reservation,
                shares,
                limit,
                backend,
                mac_takeover,
            } = a.as_ref();
            let mut body = serde_json::Map::new();
            body.insert("name".into(), json!(name));
            body.insert("interface".into(), json!(interface));
            body.insert("group".into(), json!(group));
            body.insert("mac".into(), json!(mac));
            let optional = [
                ("pool", pool),
                ("class", class),
                ("reservation", reservation),
                ("shares", shares),
                ("limit", limit),
                ("backend", backend),
            ];
            for (k, v) in optional {
                if let Some(v) = v {
                    body.insert(k.into(), json!(v));
                }
            }
            if *mac_takeover {
                body.insert("mac_takeover".into(), json!(true));
            }
            ("POST", "/api/v1/ports".into(), Some(Value::Object(body)))
        }
        PortAction::Del { name } => ("DELETE", format!("/api/v1/ports/{}", segment(name)), None),
    }
}

/// Adding and removing uplinks.
#[derive(Subcommand)]
pub(super) enum UplinkAction {
    /// Add an uplink (saved in switch.toml), after the others; no port group uses it until its
    /// failover order names it (`ctl group NAME --active ...`).
    Add(Box<UplinkAddArgs>),
    /// Remove an uplink no port group's failover order lists.
    Del { name: String },
}

/// What `uplink add` takes.
#[derive(clap::Args)]
pub(super) struct UplinkAddArgs {
    name: String,
    /// The physical interface.
    #[arg(long)]
    interface: String,
    /// Its capacity, e.g. 10G (default: the link speed the interface reports).
    #[arg(long)]
    capacity: Option<String>,
    /// Added administratively down (out of use).
    #[arg(long)]
    down: bool,
    /// af_packet (the default), af_xdp or auto.
    #[arg(long)]
    backend: Option<String>,
}

/// The request an `uplink add` or `uplink del` makes.
pub(super) fn uplink_action(action: &UplinkAction) -> (&'static str, String, Option<Value>) {
    match action {
        UplinkAction::Add(a) => {
            let mut body = json!({"name": a.name, "interface": a.interface});
            if let Some(c) = &a.capacity {
                body["capacity"] = json!(c);
            }
            if a.down {
                body["admin"] = json!("down");
            }
            if let Some(b) = &a.backend {
                body["backend"] = json!(b);
            }
            ("POST", "/api/v1/uplinks".into(), Some(body))
        }
        UplinkAction::Del { name } => ("DELETE", format!("/api/v1/uplinks/{}", segment(name)), None),
    }
}
