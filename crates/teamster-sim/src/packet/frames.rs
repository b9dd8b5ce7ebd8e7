//! The headers packet mode hands the switch: an Ethernet, IPv4 and TCP header per flow (what
//! the switch reads: MACs, VLAN, addresses, ports), standing for a frame of the packet's length.
//! The payload is never built; the switch counts and meters the packet at its wire length
//! ([`teamster_core::switch::Switch::ingress_elided`]).

use core::net::Ipv4Addr;
use etherparse::PacketBuilder;
use teamster_core::wire::MacAddr;

/// The remote host every port's traffic goes to, and its MAC.
pub const REMOTE_IP: Ipv4Addr = Ipv4Addr::new(172, 16, 0, 1);
pub const REMOTE_MAC: MacAddr = MacAddr([0x02, 0xee, 0, 0, 0, 1]);
/// The remote host's TCP port.
pub const REMOTE_PORT: u16 = 5001;

/// A flow's headers from `src` to `dst`, with an 802.1Q tag for `vlan` if given (frames from an
/// uplink carry their group's tag; frames from a port do not).
pub fn headers(
    (src_mac, src_ip, src_port): (MacAddr, Ipv4Addr, u16),
    (dst_mac, dst_ip, dst_port): (MacAddr, Ipv4Addr, u16),
    vlan: Option<u16>,
) -> Vec<u8> {
    let eth = PacketBuilder::ethernet2(src_mac.0, dst_mac.0);
    let tcp = |b: etherparse::PacketBuilderStep<etherparse::IpHeaders>| b.tcp(src_port, dst_port, 0, 65_535);
    let mut out = Vec::with_capacity(64);
    let written = match vlan {
        None => tcp(eth.ipv4(src_ip.octets(), dst_ip.octets(), 64)).write(&mut out, &[]),
        Some(v) => tcp(eth
            .single_vlan(etherparse::VlanId::try_new(v).expect("a group VLAN is 1-4094"))
            .ipv4(src_ip.octets(), dst_ip.octets(), 64))
        .write(&mut out, &[]),
    };
    written.expect("a header-only TCP frame always builds");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_parse_as_the_flow_they_stand_for() {
        let mac = MacAddr([2, 0, 0, 0, 0, 7]);
        let h = headers(
            (mac, Ipv4Addr::new(10, 0, 0, 7), 40_000),
            (REMOTE_MAC, REMOTE_IP, REMOTE_PORT),
            Some(100),
        );
        let key = teamster_core::wire::parse(&h).unwrap();
        assert_eq!((key.src_mac, key.dst_mac, key.vlan), (mac, REMOTE_MAC, Some(100)));
        assert_eq!((key.src_port, key.dst_port), (Some(40_000), Some(REMOTE_PORT)));
        assert_eq!(key.dst_ip, Some(REMOTE_IP.into()));
    }
}
