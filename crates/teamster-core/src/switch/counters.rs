//! Per-interface counters, with drops kept by reason, and MAC-learning refusals.

use core::fmt;

/// Why the switch dropped a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The frame did not parse.
    Malformed,
    /// Arrived on an uplink with the source MAC of a local port (our own frame reflected back).
    Reflection,
    /// Broadcast, multicast or unknown unicast from an uplink that is not the group's receive uplink.
    NotReceiveUplink,
    /// No live uplink to send it on.
    NoUplink,
    /// A VLAN-tagged frame from a VM port (ports are access ports).
    TaggedOnAccessPort,
    /// From an uplink, on a VLAN no port group uses.
    UnknownVlan,
    /// From a port the switch does not know.
    UnknownPort,
    /// Addressed to the port it came from.
    Hairpin,
    /// From a port whose group rejects forged transmits, with a source MAC other than the port's
    /// effective MAC (see [`super::security`]).
    ForgedTransmit,
}

impl DropReason {
    /// Every reason, in counter order.
    pub const ALL: [DropReason; 9] = [
        DropReason::Malformed,
        DropReason::Reflection,
        DropReason::NotReceiveUplink,
        DropReason::NoUplink,
        DropReason::TaggedOnAccessPort,
        DropReason::UnknownVlan,
        DropReason::UnknownPort,
        DropReason::Hairpin,
        DropReason::ForgedTransmit,
    ];

    /// A stable name for metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Malformed => "malformed",
            DropReason::Reflection => "reflection",
            DropReason::NotReceiveUplink => "not_receive_uplink",
            DropReason::NoUplink => "no_uplink",
            DropReason::TaggedOnAccessPort => "tagged_on_access_port",
            DropReason::UnknownVlan => "unknown_vlan",
            DropReason::UnknownPort => "unknown_port",
            DropReason::Hairpin => "hairpin",
            DropReason::ForgedTransmit => "forged_transmit",
        }
    }

    fn index(self) -> usize {
        DropReason::ALL.iter().position(|r| *r == self).expect("listed in ALL")
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Packets and bytes in each direction, and drops by reason, of one port or uplink.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Frames whose new source MAC was not learned because a MAC-table limit was reached. The
    /// frames themselves were switched as usual: this is not a drop.
    pub mac_limit: u64,
    drops: [u64; DropReason::ALL.len()],
}

impl Counters {
    pub(crate) fn rx(&mut self, bytes: usize) {
        self.rx_packets += 1;
        self.rx_bytes += bytes as u64;
    }

    pub(crate) fn tx(&mut self, bytes: usize) {
        self.tx_packets += 1;
        self.tx_bytes += bytes as u64;
    }

    pub(crate) fn drop(&mut self, why: DropReason) {
        self.drops[why.index()] += 1;
    }

    /// Frames dropped for `why`.
    pub fn drops(&self, why: DropReason) -> u64 {
        self.drops[why.index()]
    }

    /// All drops.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }
}
