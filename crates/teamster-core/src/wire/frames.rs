//! Frames the engine originates: RARP to notify physical switches of a moved MAC, and
//! gratuitous ARP to announce an IPv4 address.
//!
//! Both are padded to the 60-byte Ethernet minimum (the NIC appends the FCS).

use super::MacAddr;
use core::net::Ipv4Addr;
use etherparse::{ArpHardwareId, ArpOperation, ArpPacket, EtherType, Ethernet2Header, SingleVlanHeader, VlanId};

/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// EtherType of RARP, used as a MAC-learning announcement.
pub const ETHERTYPE_RARP: u16 = 0x8035;
/// RARP "request reverse" operation code (RFC 903).
const RARP_REQUEST: u16 = 3;
/// The shortest Ethernet frame without FCS.
const MIN_FRAME: usize = 60;

/// Builds a broadcast RARP request from `mac`, tagged with `vlan` if given, as ESXi sends on
/// failover so that physical switches relearn the MAC on its new uplink.
pub fn build_rarp(mac: MacAddr, vlan: Option<u16>) -> Vec<u8> {
    let arp = ArpPacket::new(
        ArpHardwareId::ETHERNET,
        EtherType::IPV4,
        ArpOperation(RARP_REQUEST),
        &mac.0,
        &[0; 4],
        &mac.0,
        &[0; 4],
    );
    frame(mac, vlan, ETHERTYPE_RARP, arp)
}

/// Builds a broadcast gratuitous ARP request announcing that `ip` is at `mac`.
pub fn build_gratuitous_arp(mac: MacAddr, ip: Ipv4Addr, vlan: Option<u16>) -> Vec<u8> {
    arp_request(mac, ip, ip, vlan)
}

/// Builds a broadcast ARP request from `mac` at `ip` asking who has `target`.
pub fn build_arp_request(mac: MacAddr, ip: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    arp_request(mac, ip, target, None)
}

/// A broadcast ARP request from `mac` at `ip` for `target`, tagged with `vlan` if given.
fn arp_request(mac: MacAddr, ip: Ipv4Addr, target: Ipv4Addr, vlan: Option<u16>) -> Vec<u8> {
    let arp = ArpPacket::new(
        ArpHardwareId::ETHERNET,
        EtherType::IPV4,
        ArpOperation::REQUEST,
        &mac.0,
        &ip.octets(),
        &[0; 6],
        &target.octets(),
    );
    frame(mac, vlan, ETHERTYPE_ARP, arp)
}

/// Builds an ARP probe (RFC 5227: sender address 0.0.0.0) from `mac` asking `to_mac` alone
/// whether it still has `target`, tagged with `vlan` if given: a live host answers to `mac`,
/// and no host's ARP cache learns anything from it.
pub fn build_arp_probe(mac: MacAddr, to_mac: MacAddr, target: Ipv4Addr, vlan: Option<u16>) -> Vec<u8> {
    let mut f = arp_request(mac, Ipv4Addr::UNSPECIFIED, target, vlan);
    f[..6].copy_from_slice(&to_mac.0);
    f
}

/// Builds an ARP reply from `mac` at `ip` to `to_mac` at `to_ip`, sent to `to_mac` alone.
pub fn build_arp_reply(mac: MacAddr, ip: Ipv4Addr, to_mac: MacAddr, to_ip: Ipv4Addr) -> Vec<u8> {
    let arp = ArpPacket::new(
        ArpHardwareId::ETHERNET,
        EtherType::IPV4,
        ArpOperation::REPLY,
        &mac.0,
        &ip.octets(),
        &to_mac.0,
        &to_ip.octets(),
    );
    let mut f = frame(mac, None, ETHERTYPE_ARP, arp);
    f[..6].copy_from_slice(&to_mac.0);
    f
}

/// Wraps an ARP body in a broadcast Ethernet header (and 802.1Q tag) and pads it.
fn frame(
    src: MacAddr,
    vlan: Option<u16>,
    ether_type: u16,
    arp: Result<ArpPacket, etherparse::err::arp::ArpNewError>,
) -> Vec<u8> {
    // Lengths are fixed above (6-byte MACs, 4-byte IPv4), so construction cannot fail.
    let arp = arp.expect("ARP with Ethernet/IPv4 address sizes is always valid");
    let mut out = Vec::with_capacity(MIN_FRAME);
    let vlan_id = vlan.and_then(|v| VlanId::try_new(v).ok());
    let eth = Ethernet2Header {
        source: src.0,
        destination: MacAddr::BROADCAST.0,
        ether_type: if vlan_id.is_some() {
            EtherType::VLAN_TAGGED_FRAME
        } else {
            EtherType(ether_type)
        },
    };
    out.extend_from_slice(&eth.to_bytes());
    if let Some(vlan_id) = vlan_id {
        let tag = SingleVlanHeader {
            pcp: Default::default(),
            drop_eligible_indicator: false,
            vlan_id,
            ether_type: EtherType(ether_type),
        };
        out.extend_from_slice(&tag.to_bytes());
    }
    out.extend_from_slice(&arp.to_bytes());
    out.resize(out.len().max(MIN_FRAME), 0);
    out
}
