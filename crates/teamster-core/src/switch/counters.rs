//! Per-interface counters, with drops kept by reason, and MAC-learning refusals.
//!
//! `rx_*` count frames the switch took in; `tx_*` count frames the interface's device took, as
//! the caller reports them through [`Switch::count_sent`](super::Switch::count_sent): segments
//! after software segmentation, never frames queued or dropped.

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
    /// A slow-protocol frame (LACP, Marker; EtherType 0x8809) from a VM port, which may not
    /// speak for the team to the physical switch, or from an uplink that runs no LACP; never
    /// forwarded.
    SlowProtocol,
    /// A VXLAN frame to this host's VTEP that no overlay takes: malformed, from a VTEP no
    /// overlay group lists, with a VNI none uses, tagged inside, or for no port of its segment.
    Tunnel,
    /// A frame for a remote VTEP whose MAC is not known yet (it is being asked for by ARP), or
    /// leaving by an uplink whose own MAC is not known; counted once per VTEP not reached.
    VtepUnresolved,
    /// A link-control frame (see [`crate::wire::LinkControl`]: BPDUs, PAUSE and PFC, EAPOL,
    /// LLDP, the rest of 802.1D's reserved block, Cisco's PVST+, CDP, VTP and DTP), never
    /// forwarded: from a VM, from an uplink (LLDP excepted for groups that ask for it), or
    /// inside a tunnel.
    LinkControl,
    /// A frame to this host's VTEP (VXLAN or ARP) that no remote VTEP could have sent: from the
    /// MAC of a local port (a VM on a network the underlay shares), or VXLAN from a listed
    /// remote's address but not from the MAC that remote was found at by ARP.
    TunnelSpoof,
    /// A port's configured MAC in use by a host outside (learned on an uplink or behind a
    /// remote VTEP), which the port did not take over: the port's frames from it, while the
    /// port waits for the address to be free; or, on an uplink, a frame from a host outside
    /// using the MAC of a port whose claim stands (see `switch::claims`).
    MacConflict,
}

impl DropReason {
    /// Every reason, in counter order.
    pub const ALL: [DropReason; 15] = [
        DropReason::Malformed,
        DropReason::Reflection,
        DropReason::NotReceiveUplink,
        DropReason::NoUplink,
        DropReason::TaggedOnAccessPort,
        DropReason::UnknownVlan,
        DropReason::UnknownPort,
        DropReason::Hairpin,
        DropReason::ForgedTransmit,
        DropReason::SlowProtocol,
        DropReason::Tunnel,
        DropReason::VtepUnresolved,
        DropReason::LinkControl,
        DropReason::TunnelSpoof,
        DropReason::MacConflict,
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
            DropReason::SlowProtocol => "slow_protocol",
            DropReason::Tunnel => "tunnel",
            DropReason::VtepUnresolved => "vtep_unresolved",
            DropReason::LinkControl => "link_control",
            DropReason::TunnelSpoof => "tunnel_spoof",
            DropReason::MacConflict => "mac_conflict",
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

    pub(crate) fn sent(&mut self, packets: u64, bytes: u64) {
        self.tx_packets += packets;
        self.tx_bytes += bytes;
    }

    pub(crate) fn drop(&mut self, why: DropReason) {
        self.drops[why.index()] += 1;
    }

    /// Adds `n` frames dropped for `why` (counted by a data plane that switched them elsewhere).
    pub fn add_drops(&mut self, why: DropReason, n: u64) {
        self.drops[why.index()] += n;
    }

    /// Adds every count of `other` to these.
    pub fn add(&mut self, other: &Counters) {
        self.rx_packets += other.rx_packets;
        self.rx_bytes += other.rx_bytes;
        self.tx_packets += other.tx_packets;
        self.tx_bytes += other.tx_bytes;
        self.mac_limit += other.mac_limit;
        for (a, b) in self.drops.iter_mut().zip(other.drops) {
            *a += b;
        }
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

#[cfg(test)]
mod tests {
    use crate::switch::{Egress, Ingress, Switch};
    use crate::teaming::{
        FailoverOrder, LbtConfig, Policy, PortGroupSpec, PortId, PortSpec, Team, UplinkId, UplinkSpec,
    };
    use crate::units::Bandwidth;
    use crate::Instant;

    fn switch() -> Switch {
        let uplinks = vec![UplinkSpec {
            name: "uplink1".into(),
            capacity: Bandwidth::from_gbps(10),
        }];
        let mut team = Team::new(uplinks, LbtConfig::default()).unwrap();
        let g = team
            .add_group(PortGroupSpec {
                mode: Default::default(),
                tuning: Default::default(),
                lacp: Default::default(),
                name: "vms".into(),
                policy: Policy::PORT_ID,
                order: FailoverOrder {
                    active: vec![UplinkId(0)],
                    standby: vec![],
                },
                failback: true,
                notify_switches: true,
                vlan: None,
            })
            .unwrap();
        for i in 1..=2u8 {
            team.add_port(PortSpec {
                id: PortId(u32::from(i)),
                mac: crate::wire::MacAddr([2, 0, 0, 0, 0, i]),
                group: g,
            })
            .unwrap();
        }
        Switch::new(team, core::time::Duration::from_secs(300))
    }

    /// A broadcast from port 1: to port 2 and to the uplink.
    fn broadcast() -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x88, 0xb5]);
        f.resize(60, 0);
        f
    }

    #[test]
    fn tx_counts_only_what_the_devices_report() {
        let mut s = switch();
        let out = s.ingress(Ingress::Port(PortId(1)), &broadcast(), Instant::ZERO);
        assert_eq!(out.len(), 2, "{out:?}");
        // Deciding where a frame goes sends nothing yet.
        assert_eq!(s.uplink_counters(UplinkId(0)).unwrap().tx_packets, 0);
        assert_eq!(s.port_counters(PortId(2)).unwrap().tx_packets, 0);
        assert_eq!(s.port_counters(PortId(1)).unwrap().rx_packets, 1);
        // The data plane cut a 9000-byte super-frame into 7 segments and sent them.
        s.count_sent(Egress::Uplink(UplinkId(0)), 7, 9100);
        s.count_sent(Egress::Port(PortId(2)), 1, 60);
        let u = s.uplink_counters(UplinkId(0)).unwrap();
        assert_eq!((u.tx_packets, u.tx_bytes), (7, 9100));
        let p = s.port_counters(PortId(2)).unwrap();
        assert_eq!((p.tx_packets, p.tx_bytes), (1, 60));
        // An uplink the switch does not have is ignored, not a panic.
        s.count_sent(Egress::Uplink(UplinkId(9)), 1, 1);
    }
}
