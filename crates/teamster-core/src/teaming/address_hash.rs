//! Address Hash (Windows Server's `TransportPorts`, `IPAddresses` and `MacAddresses`), per flow.
//!
//! A frame takes `active[h mod n]` over the group's `n` active uplinks, where `h` is
//! [`address_hash`] over the fields the group's [`HashFields`] name, falling back as Windows
//! does when a frame lacks them:
//! - `transport-ports` (the default): source and destination IP addresses and TCP/UDP ports
//!   (the 4-tuple) for unfragmented TCP and UDP over IPv4 and IPv6; the two addresses (the
//!   2-tuple) for other IP and for fragments (so a datagram's fragments stay together);
//!   source and destination MACs for non-IP frames;
//! - `ip-addresses`: the 2-tuple for IP, MACs otherwise;
//! - `mac-addresses`: source and destination MACs for every frame.
//!
//! ARP and RARP take the port's current uplink, whose home is the group's first active uplink
//! (the *primary*): Windows sends address resolution on the primary, and in switch-independent
//! mode a frame sent on another member carries that member's MAC as its source (see
//! [`TeamingPolicy::rewrites_source`]), so the physical switches learn every VM's MAC on the
//! primary only and all the team's inbound traffic arrives there, which is also the group's
//! receive uplink for floods. If the hashed
//! uplink is down, the flow takes a rendezvous pick on `h` among the live active uplinks (only
//! the failed uplink's flows move), else the first live standby.

use super::hash::{ip_fold, mac_pair_hash, spread};
use super::policy::{PolicyEntry, PortView, TeamView, TeamingPolicy};
pub use super::tuning::HashFields;
use super::{Policy, PortSpec, UplinkId};
use crate::wire::FlowKey;

/// The Address Hash key of a frame over `fields`, with Windows' fallbacks; None for ARP and
/// RARP, which take the port's own uplink.
///
/// The fields are packed into 64 bits (each IP address folded to 32 bits as in
/// [`super::ip_hash`](fn@super::ip_hash), the ports beside them) and mixed with SplitMix64's
/// finaliser, whose every output bit depends on every input bit: Linux gives outgoing
/// connections even source ports, so a hash whose low bit leans on the port's low bit (the IP
/// hash's fold) would put every connection of a VM on one member of two.
pub fn address_hash(flow: &FlowKey, fields: HashFields) -> Option<u32> {
    if flow.arp_op.is_some() {
        return None;
    }
    let ips = match (flow.src_ip, flow.dst_ip, fields) {
        (Some(s), Some(d), HashFields::TransportPorts | HashFields::IpAddresses) => {
            Some((u64::from(ip_fold(s)) << 32) | u64::from(ip_fold(d)))
        }
        _ => None,
    };
    let key = match (ips, flow.src_port, flow.dst_port, fields) {
        (Some(ips), Some(sp), Some(dp), HashFields::TransportPorts) => {
            ips ^ ((u64::from(sp) << 16) | u64::from(dp)).rotate_left(24) ^ 0x4e34
        }
        (Some(ips), ..) => ips,
        (None, ..) => 0x4d41_4300_0000_0000 | u64::from(mac_pair_hash(flow.src_mac, flow.dst_mac)),
    };
    Some((spread(key) >> 32) as u32)
}

/// `active[h mod n]` if live, else the rendezvous fallback; shared with the flowlet policies'
/// first assignment.
pub(super) fn hashed_uplink(team: &TeamView<'_>, h: u32) -> Option<UplinkId> {
    let active = &team.order().active;
    let primary = active[h as usize % active.len()];
    if team.is_up(primary) {
        Some(primary)
    } else {
        team.fallback(u64::from(h), None)
    }
}

#[derive(Debug, Clone)]
struct AddressHash(HashFields);

impl TeamingPolicy for AddressHash {
    /// The primary: where address resolution goes, and (switch independent) where the team
    /// receives.
    fn home(&self, team: &TeamView<'_>, _port: &PortSpec) -> UplinkId {
        team.order().active[0]
    }

    fn per_flow(&self) -> bool {
        true
    }

    fn rewrites_source(&self) -> bool {
        true
    }

    fn select(&self, team: &TeamView<'_>, port: &PortView<'_>, flow: &FlowKey) -> Option<UplinkId> {
        match address_hash(flow, self.0) {
            Some(h) => hashed_uplink(team, h),
            None => port.current(),
        }
    }
}

static ENTRY: PolicyEntry = PolicyEntry {
    name: "address-hash",
    build: |knobs| Box::new(AddressHash(knobs.tuning.hash_fields)),
};

impl Policy {
    /// Windows Server's Address Hash: `"address-hash"`.
    pub const ADDRESS_HASH: Policy = Policy::new(&ENTRY);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::MacAddr;
    use core::net::Ipv6Addr;

    fn tcp6(sport: u16) -> FlowKey {
        FlowKey {
            src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
            src_ip: Some(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1).into()),
            dst_ip: Some(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2).into()),
            ip_proto: Some(6),
            src_port: Some(sport),
            dst_port: Some(5201),
            ..Default::default()
        }
    }

    #[test]
    fn fields_and_fallbacks_are_as_windows_documents() {
        let f = tcp6(40000);
        let four = address_hash(&f, HashFields::TransportPorts).unwrap();
        let two = address_hash(&f, HashFields::IpAddresses).unwrap();
        let macs = address_hash(&f, HashFields::MacAddresses).unwrap();
        assert!(four != two && two != macs && four != macs);
        // Each covers its fields and no others.
        let other_port = tcp6(40002);
        assert_ne!(address_hash(&other_port, HashFields::TransportPorts), Some(four));
        assert_eq!(address_hash(&other_port, HashFields::IpAddresses), Some(two));
        let other_mac = FlowKey {
            src_mac: MacAddr([2, 0, 0, 0, 0, 9]),
            ..f.clone()
        };
        assert_eq!(address_hash(&other_mac, HashFields::TransportPorts), Some(four));
        assert_ne!(address_hash(&other_mac, HashFields::MacAddresses), Some(macs));
        // A fragment carries no ports: the 2-tuple.
        let frag = FlowKey {
            src_port: None,
            dst_port: None,
            fragment: true,
            ..f.clone()
        };
        assert_eq!(address_hash(&frag, HashFields::TransportPorts), Some(two));
        // Non-IP: the MACs, under every setting.
        let raw = FlowKey {
            src_mac: f.src_mac,
            dst_mac: f.dst_mac,
            ether_type: 0x88b5,
            ..Default::default()
        };
        for h in HashFields::ALL {
            assert_eq!(address_hash(&raw, h), Some(macs), "{h}");
        }
        let arp = FlowKey { arp_op: Some(1), ..f };
        assert_eq!(address_hash(&arp, HashFields::TransportPorts), None);
    }

    #[test]
    fn four_tuples_spread_over_members_and_two_tuples_do_not() {
        // Even source ports only, as Linux gives outgoing connections, and consecutive ones.
        for ports in [
            (30000..32000).step_by(2).collect::<Vec<u16>>(),
            (40000..41000).collect(),
        ] {
            for n in [2, 3, 4] {
                let mut seen = vec![0usize; n];
                for &sport in &ports {
                    let h = address_hash(&tcp6(sport), HashFields::TransportPorts).unwrap();
                    seen[h as usize % n] += 1;
                }
                let ideal = ports.len() / n;
                assert!(
                    seen.iter().all(|&c| c.abs_diff(ideal) < ideal / 5),
                    "{n} members: {seen:?}"
                );
            }
        }
        let one = address_hash(&tcp6(1), HashFields::IpAddresses);
        assert!((2..100).all(|s| address_hash(&tcp6(s), HashFields::IpAddresses) == one));
    }

    #[test]
    fn names_round_trip() {
        for h in HashFields::ALL {
            assert_eq!(h.name().parse::<HashFields>().unwrap(), h);
            assert_eq!(serde_json::to_string(&h).unwrap(), format!("\"{h}\""));
        }
        let e = serde_json::from_str::<HashFields>("\"TransportPorts\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("transport-ports"), "{e}");
    }
}
