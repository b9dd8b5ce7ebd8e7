//! NIC teaming: a team of uplinks shared by ports, with failover, failback, switch notification
//! and load balancing.
//!
//! Model. A [`Team`] owns a set of uplinks, each with a capacity, a link state and load meters.
//! Ports belong to port groups; a group has a load-balancing [`Policy`], an explicit
//! [`FailoverOrder`] (active uplinks, then standby uplinks in order; every other uplink is unused
//! by the group), and failback on or off.
//!
//! Every port has a *home* uplink, one of its group's active uplinks, chosen by the group's
//! policy, and a *current* uplink that carries its traffic: its home while that is up, else its
//! failover choice ([`failover`]). A per-port policy sends every frame of a port on its current
//! uplink; a per-flow policy (IP hash) picks an uplink per frame and homes only the port's
//! frames it cannot hash.
//!
//! Policies. Each policy is one file implementing the small [`TeamingPolicy`] trait
//! ([`policy`] states what a policy decides and what the team keeps), listed by name in the
//! [`registry`]: originating port ID (`port-id`, [`port_id`]), source MAC hash (`source-mac`,
//! [`source_mac`]), IP hash over addresses or addresses and ports (`ip-hash`, `ip-hash-l4`,
//! [`ip_hash`](mod@ip_hash)), Load-Based Teaming (`load-based`, [`load_based`], which starts
//! from port-ID homes and then moves ports off saturated uplinks as [`lbt`] describes), and
//! Windows Server's three: Hyper-V Port (`hyperv-port`, [`hyperv_port`]), Address Hash
//! (`address-hash`, [`address_hash`](mod@address_hash)) and Dynamic (`dynamic`, with its
//! load-based variant `lbt-dynamic`, [`dynamic`], sending per [`flowlet`]).
//!
//! Modes. A group is switch independent, or switch dependent (a static or LACP bundle on the
//! physical switch): [`mode`] says what changes on receive and which policies each allows.
//!
//! Notify switches. Each move of a port to a new uplink emits [`Effect::Transmit`] of one RARP
//! frame from the port's MAC (tagged with the group's VLAN) on the new uplink, so physical
//! switches relearn where the MAC lives.
//!
//! Every decision here is a pure function of the configuration, the calls made and the `now`
//! passed in: the team is deterministic.

pub mod address_hash;
mod bundle;
mod census;
pub mod dynamic;
pub mod failover;
pub mod flowlet;
mod hash;
pub mod hyperv_port;
pub mod ip_hash;
pub mod lacp;
pub mod lbt;
pub mod load_based;
mod meter;
pub mod mode;
pub mod policy;
pub mod port_id;
pub mod registry;
pub mod source_mac;
mod state;
mod team;
pub mod tuning;
mod uplink_changes;

#[cfg(test)]
mod lbt_rule_tests;
#[cfg(test)]
mod lbt_tests;
#[cfg(test)]
mod policy_tests;
#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod windows_tests;

pub use address_hash::{address_hash, HashFields};
pub use hash::{fnv1a64, ip_hash, mac_pair_hash, rendezvous_pick, source_mac_hash, uplink_salt};
pub use lbt::{Damping, LbtConfig, LbtDecision};
pub use meter::RateMeter;
pub use mode::TeamMode;
pub use policy::{
    FlowletCounters, MemberShare, Policy, PolicyKnobs, PortView, Rates, Rehome, TeamView, TeamingPolicy, UnknownPolicy,
};
pub use team::{Team, TeamError};
pub use tuning::PolicyTuning;

use crate::units::Bandwidth;
use crate::wire::MacAddr;
use crate::Instant;
use core::fmt;

/// Index of an uplink in its team, in configuration order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UplinkId(pub usize);

impl UplinkId {
    /// This uplink's ID once uplink `removed` has left the team: None if it is the one gone,
    /// one less if it came after it, else the same.
    pub fn after_removal(self, removed: UplinkId) -> Option<UplinkId> {
        match self {
            x if x == removed => None,
            x if x > removed => Some(UplinkId(x.0 - 1)),
            x => Some(x),
        }
    }
}

/// Index of a port group in its team, in configuration order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupId(pub usize);

/// A virtual switch port ID, as the originating-port-ID policy hashes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortId(pub u32);

impl fmt::Display for PortId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "port {}", self.0)
    }
}

/// Whether an uplink can carry traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    Up,
    Down,
}

/// Traffic direction, seen from the host: send (to the network) or receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    Tx,
    Rx,
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::Tx => "tx",
            Direction::Rx => "rx",
        })
    }
}

/// How many fields an IP hash covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpHashMode {
    /// Source and destination addresses.
    L3,
    /// Addresses and TCP/UDP ports.
    L3L4,
}

/// A group's explicit failover order. Uplinks in neither list are unused by the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailoverOrder {
    /// Uplinks that carry traffic while up.
    pub active: Vec<UplinkId>,
    /// Uplinks used, first live one first, only when no active uplink is up.
    pub standby: Vec<UplinkId>,
}

/// An uplink as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UplinkSpec {
    pub name: String,
    pub capacity: Bandwidth,
}

/// A port group as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortGroupSpec {
    pub name: String,
    pub policy: Policy,
    pub order: FailoverOrder,
    /// Return ports to their home uplink when it recovers.
    pub failback: bool,
    /// Send a RARP for each moved port (vSphere's "notify switches").
    pub notify_switches: bool,
    /// VLAN the group's frames carry on the uplinks, if any.
    pub vlan: Option<u16>,
    /// How the physical switch sees the group's uplinks.
    pub mode: TeamMode,
    /// The policy's knobs (hash fields, flowlet gap, rebalance interval).
    pub tuning: PolicyTuning,
    /// LACP's settings, used when `mode` is `lacp`.
    pub lacp: lacp::LacpSettings,
}

/// A port as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    pub id: PortId,
    pub mac: MacAddr,
    pub group: GroupId,
}

/// Why a port changed uplink.
#[derive(Debug, Clone, PartialEq)]
pub enum MoveReason {
    /// Its uplink went down.
    LinkDown,
    /// An uplink came up and the port had none.
    LinkUp,
    /// Its home uplink (or an active one, from a standby) recovered and failback is on.
    Failback,
    /// The group's policy or failover order changed.
    PolicyChange,
    /// Load-Based Teaming moved it.
    LoadBased(LbtDecision),
}

impl fmt::Display for MoveReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MoveReason::LinkDown => f.write_str("link down"),
            MoveReason::LinkUp => f.write_str("link up"),
            MoveReason::Failback => f.write_str("failback"),
            MoveReason::PolicyChange => f.write_str("policy change"),
            MoveReason::LoadBased(d) => d.fmt(f),
        }
    }
}

/// A port's move from one uplink to another (`None`: no uplink).
#[derive(Debug, Clone, PartialEq)]
pub struct PortMove {
    pub at: Instant,
    pub port: PortId,
    pub from: Option<UplinkId>,
    pub to: Option<UplinkId>,
    pub reason: MoveReason,
}

/// What the team asks its driver (the data plane or the simulator) to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Report a port's move.
    PortMoved(PortMove),
    /// Send this frame out of this uplink.
    Transmit { uplink: UplinkId, frame: Vec<u8> },
}

/// Send and receive utilisation, as fractions of capacity.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Utilisation {
    pub tx: f64,
    pub rx: f64,
}

impl Utilisation {
    /// The fraction in one direction.
    pub fn get(self, d: Direction) -> f64 {
        match d {
            Direction::Tx => self.tx,
            Direction::Rx => self.rx,
        }
    }
    /// The larger of the two directions.
    pub fn max(self) -> f64 {
        self.tx.max(self.rx)
    }
}
