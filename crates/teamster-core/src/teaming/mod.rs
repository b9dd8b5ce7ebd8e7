//! NIC teaming: a team of uplinks shared by ports, with failover, failback, switch notification
//! and load balancing.
//!
//! Model. A [`Team`] owns a set of uplinks, each with a capacity and a link state. Ports belong
//! to port groups; a group has a load-balancing [`Policy`], an explicit [`FailoverOrder`]
//! (active uplinks, then standby uplinks in order; every other uplink is unused by the group),
//! and failback on or off.
//!
//! Every port has a *home* uplink, one of its group's active uplinks, chosen by the policy
//! (originating port ID, source MAC hash; Load-Based Teaming starts from port ID and then moves
//! homes), and a *current* uplink that carries its traffic. Under IP hash a port's IP flows are
//! spread over the active uplinks per flow, and the home carries its non-IP frames.
//!
//! Failover. When an uplink goes down, only the ports currently on it move: to one of the group's
//! remaining live active uplinks, or else to the first live standby in order. Under static
//! policies the active uplink is chosen by rendezvous hashing on the port, so the choice is
//! deterministic and spread; under Load-Based Teaming, which is capacity-aware, the moved ports
//! are placed largest first where their resulting utilisation is lowest. Ports on healthy
//! uplinks never move. When an uplink comes up, a port with nowhere to go attaches at once; with
//! failback on, ports whose home it is return to it, and ports parked on a standby return to an
//! active uplink. With failback off, ports stay where they are until their uplink fails.
//!
//! Notify switches. Each move of a port to a new uplink emits [`Effect::Transmit`] of one RARP
//! frame from the port's MAC (tagged with the group's VLAN) on the new uplink, so physical
//! switches relearn where the MAC lives.
//!
//! Load-Based Teaming is described in [`lbt`]. Every decision here is a pure function of the
//! configuration, the calls made and the `now` passed in: the team is deterministic.

mod hash;
pub mod lbt;
mod meter;
mod team;

#[cfg(test)]
mod tests;

pub use hash::{ip_hash, rendezvous_pick, source_mac_hash};
pub use lbt::{LbtConfig, LbtDecision};
pub use meter::RateMeter;
pub use team::{Team, TeamError};

use crate::units::Bandwidth;
use crate::wire::MacAddr;
use crate::Instant;
use core::fmt;

/// Index of an uplink in its team, in configuration order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UplinkId(pub usize);

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

/// A port group's load-balancing policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Home = active\[port ID mod number of active uplinks\] (vSphere's default).
    OriginatingPortId,
    /// Home = active\[FNV-1a(source MAC) mod number of active uplinks\].
    SourceMacHash,
    /// Per flow: active\[[`ip_hash`] mod number of active uplinks\]; non-IP frames use the
    /// source-MAC home. Meant for a static EtherChannel upstream.
    IpHash(IpHashMode),
    /// Starts as originating port ID; then [`lbt`] moves ports off saturated uplinks.
    LoadBased,
}

impl Policy {
    /// The index into the active list that this policy picks as a port's home.
    fn home_index(self, port: PortId, mac: MacAddr, active_len: usize) -> usize {
        let n = active_len.max(1) as u32;
        (match self {
            Policy::OriginatingPortId | Policy::LoadBased => port.0 % n,
            Policy::SourceMacHash | Policy::IpHash(_) => source_mac_hash(mac) % n,
        }) as usize
    }
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
            MoveReason::LoadBased(d) => write!(
                f,
                "load-based: {} mean {:.2}% > {:.0}%",
                d.direction,
                100.0 * d.from_before.get(d.direction),
                100.0 * d.threshold
            ),
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
