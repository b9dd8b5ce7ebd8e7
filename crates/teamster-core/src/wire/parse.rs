//! The frame parser behind [`super::parse`].

use super::{FlowKey, MacAddr, ParseError, Vxlan, ETHERTYPE_RARP, VXLAN_PORT};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use etherparse::{err, ArpPacketSlice, LinkExtSlice, LinkSlice, NetSlice, SlicedPacket, TransportSlice};

/// Parses an Ethernet II frame (without FCS) into its [`FlowKey`].
pub fn parse(frame: &[u8]) -> Result<FlowKey, ParseError> {
    parse_at_depth(frame, 0)
}

/// Parses one frame; `depth` counts VXLAN encapsulations already opened.
fn parse_at_depth(frame: &[u8], depth: u8) -> Result<FlowKey, ParseError> {
    let sliced = SlicedPacket::from_ethernet(frame).map_err(slice_error)?;
    let mut key = FlowKey::default();
    let mut payload: &[u8] = &[];
    if let Some(LinkSlice::Ethernet2(eth)) = &sliced.link {
        key.src_mac = MacAddr(eth.source());
        key.dst_mac = MacAddr(eth.destination());
        key.ether_type = eth.ether_type().0;
        payload = eth.payload_slice();
    }
    for ext in &sliced.link_exts {
        if let LinkExtSlice::Vlan(tag) = ext {
            let id = tag.vlan_identifier().value();
            if key.vlan.is_none() {
                key.vlan = Some(id);
            } else if key.inner_vlan.is_none() {
                key.inner_vlan = Some(id);
            }
            key.ether_type = tag.ether_type().0;
            payload = tag.payload_slice();
        }
    }
    match &sliced.net {
        Some(NetSlice::Ipv4(ip)) => {
            let h = ip.header();
            key.src_ip = Some(IpAddr::V4(Ipv4Addr::from(h.source())));
            key.dst_ip = Some(IpAddr::V4(Ipv4Addr::from(h.destination())));
            key.ip_proto = Some(ip.payload_ip_number().0);
            key.fragment = ip.is_payload_fragmented();
        }
        Some(NetSlice::Ipv6(ip)) => {
            let h = ip.header();
            key.src_ip = Some(IpAddr::V6(Ipv6Addr::from(h.source())));
            key.dst_ip = Some(IpAddr::V6(Ipv6Addr::from(h.destination())));
            key.ip_proto = Some(ip.payload().ip_number.0);
            key.fragment = ip.is_payload_fragmented();
        }
        Some(NetSlice::Arp(arp)) => read_arp(arp, &mut key),
        None if key.ether_type == ETHERTYPE_RARP => {
            let arp = ArpPacketSlice::from_slice(payload).map_err(|e| ParseError::Truncated {
                layer: "RARP",
                detail: e.to_string(),
            })?;
            read_arp(&arp, &mut key);
        }
        None => {}
    }
    match &sliced.transport {
        Some(TransportSlice::Tcp(tcp)) => {
            key.src_port = Some(tcp.source_port());
            key.dst_port = Some(tcp.destination_port());
        }
        Some(TransportSlice::Udp(udp)) => {
            key.src_port = Some(udp.source_port());
            key.dst_port = Some(udp.destination_port());
            if udp.destination_port() == VXLAN_PORT && depth == 0 {
                key.vxlan = Some(Box::new(parse_vxlan(udp.payload(), depth)?));
            }
        }
        _ => {}
    }
    Ok(key)
}

/// Copies the ARP/RARP operation and, for IPv4-over-Ethernet, the protocol addresses.
fn read_arp(arp: &ArpPacketSlice<'_>, key: &mut FlowKey) {
    key.arp_op = Some(arp.operation().0);
    let v4 = |b: &[u8]| <[u8; 4]>::try_from(b).ok().map(|a| IpAddr::V4(Ipv4Addr::from(a)));
    key.src_ip = v4(arp.sender_protocol_addr());
    key.dst_ip = v4(arp.target_protocol_addr());
}

/// Reads the VXLAN header (RFC 7348: flags with the I bit, 24-bit VNI) and parses the inner frame.
fn parse_vxlan(payload: &[u8], depth: u8) -> Result<Vxlan, ParseError> {
    let Some(header) = payload.get(..8) else {
        return Err(ParseError::Truncated {
            layer: "VXLAN",
            detail: format!("need 8 bytes, have {}", payload.len()),
        });
    };
    if header[0] & 0x08 == 0 {
        return Err(ParseError::Malformed {
            layer: "VXLAN",
            detail: format!("I flag not set (flags {:#04x})", header[0]),
        });
    }
    let vni = u32::from_be_bytes([0, header[4], header[5], header[6]]);
    let inner = parse_at_depth(&payload[8..], depth + 1).map_err(|e| match e {
        ParseError::Truncated { detail, .. } => ParseError::Truncated {
            layer: "VXLAN inner frame",
            detail,
        },
        ParseError::Malformed { detail, .. } => ParseError::Malformed {
            layer: "VXLAN inner frame",
            detail,
        },
    })?;
    Ok(Vxlan { vni, inner })
}

/// Maps etherparse's slicing errors onto ours, keeping its description.
fn slice_error(e: err::packet::SliceError) -> ParseError {
    use err::packet::SliceError as S;
    let layer = match &e {
        S::Len(l) => {
            return ParseError::Truncated {
                layer: layer_name(l.layer),
                detail: e.to_string(),
            }
        }
        S::LinuxSll(_) => "Linux SLL",
        S::Macsec(_) => "MACsec",
        S::Ip(_) | S::Ipv4(_) | S::Ipv4Exts(_) => "IPv4",
        S::Ipv6(_) | S::Ipv6Exts(_) => "IPv6",
        S::Tcp(_) => "TCP",
    };
    ParseError::Malformed {
        layer,
        detail: e.to_string(),
    }
}

/// A short name for the layer etherparse reports a length error in.
fn layer_name(layer: err::Layer) -> &'static str {
    use err::Layer as L;
    match layer {
        L::Ethernet2Header | L::EtherPayload => "Ethernet",
        L::VlanHeader => "802.1Q",
        L::IpHeader => "IP",
        L::Ipv4Header | L::Ipv4Packet | L::IpAuthHeader => "IPv4",
        L::Ipv6Header | L::Ipv6Packet | L::Ipv6ExtHeader => "IPv6",
        L::Ipv6FragHeader | L::Ipv6RouteHeader | L::Ipv6DestOptionsHeader | L::Ipv6HopByHopHeader => "IPv6",
        L::TcpHeader => "TCP",
        L::UdpHeader | L::UdpPayload => "UDP",
        L::Arp => "ARP",
        _ => "frame",
    }
}
