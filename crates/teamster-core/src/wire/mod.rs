//! Frames on the wire: parsing into a [`FlowKey`], and building the frames the engine sends.
//!
//! The parser walks Ethernet II, up to two 802.1Q/802.1ad tags, then ARP or RARP, IPv4 (with
//! options; a fragment carries no ports) or IPv6 (with extension headers), then TCP or UDP. A UDP
//! datagram to port 4789 is VXLAN (RFC 7348): its 8-byte header must have the I flag set, and the
//! inner Ethernet frame is parsed into [`FlowKey::vxlan`] (one level deep; a VXLAN frame inside a
//! VXLAN frame is kept as plain UDP).
//!
//! Every malformed or truncated frame yields a [`ParseError`]; the parser never panics, and is
//! fuzzed (`fuzz/` in this crate). Header slicing is done by the `etherparse` crate; only the
//! VXLAN and RARP layers, which it does not decode, are read here.

mod ecn;
mod frames;
pub mod lacp;
mod link_control;
mod parse;

pub use ecn::{carries_tcp, mark_congestion};
pub use frames::{
    build_arp_probe, build_arp_reply, build_arp_request, build_gratuitous_arp, build_rarp, ETHERTYPE_ARP,
    ETHERTYPE_RARP,
};
pub use link_control::{link_control, LinkControl, ETHERTYPE_LLDP, ETHERTYPE_MAC_CONTROL};
pub use parse::parse;

use core::fmt;
use core::net::IpAddr;

/// The EtherType after up to two 802.1Q/802.1ad tags, and the offset of the header it names
/// (IPv4, IPv6, ...), or None if the frame ends before either. Shared by everything that edits
/// a frame in place (checksums, segmentation, ECN marks, offload requests), which needs offsets
/// rather than the parser's slices.
pub fn network_layer(frame: &[u8]) -> Option<(u16, usize)> {
    let ether_type = |at: usize| frame.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    let mut off = 12;
    let mut et = ether_type(off)?;
    for _ in 0..2 {
        if et == 0x8100 || et == 0x88a8 {
            off += 4;
            et = ether_type(off)?;
        }
    }
    Some((et, off + 2))
}

/// The UDP destination port that marks VXLAN (IANA).
pub const VXLAN_PORT: u16 = 4789;

/// A 48-bit IEEE MAC address.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// The broadcast address ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);

    /// True for group (multicast or broadcast) addresses.
    pub fn is_multicast(self) -> bool {
        self.0[0] & 1 == 1
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl core::str::FromStr for MacAddr {
    type Err = String;
    /// Parses `aa:bb:cc:dd:ee:ff` (or with `-`).
    fn from_str(s: &str) -> Result<Self, String> {
        let mut out = [0u8; 6];
        let parts: Vec<&str> = s.split([':', '-']).collect();
        if parts.len() != 6 {
            return Err(format!(
                "`{s}` is not a MAC address: expected six hex octets like 02:00:00:00:00:01"
            ));
        }
        for (o, p) in out.iter_mut().zip(parts) {
            if p.len() != 2 {
                return Err(format!(
                    "`{s}` is not a MAC address: octet `{p}` must be two hex digits"
                ));
            }
            *o = u8::from_str_radix(p, 16).map_err(|_| format!("`{s}` is not a MAC address: `{p}` is not hex"))?;
        }
        Ok(MacAddr(out))
    }
}

/// What the engine needs to know about a frame to switch, hash and account it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct FlowKey {
    /// Ethernet source address.
    pub src_mac: MacAddr,
    /// Ethernet destination address.
    pub dst_mac: MacAddr,
    /// The outer VLAN ID (first tag), if tagged.
    pub vlan: Option<u16>,
    /// The inner VLAN ID of a double-tagged (QinQ) frame.
    pub inner_vlan: Option<u16>,
    /// The EtherType after the tags.
    pub ether_type: u16,
    /// IP source address, or the ARP/RARP sender protocol address.
    pub src_ip: Option<IpAddr>,
    /// IP destination address, or the ARP/RARP target protocol address.
    pub dst_ip: Option<IpAddr>,
    /// IP protocol number (IPv6: the upper-layer protocol after extension headers).
    pub ip_proto: Option<u8>,
    /// TCP/UDP source port; absent for fragments and other protocols.
    pub src_port: Option<u16>,
    /// TCP/UDP destination port; absent for fragments and other protocols.
    pub dst_port: Option<u16>,
    /// True if the IP payload is a fragment (first or later).
    pub fragment: bool,
    /// ARP/RARP operation code (1 request, 2 reply, 3/4 reverse request/reply).
    pub arp_op: Option<u16>,
    /// For VXLAN frames, the VNI and the inner frame's key.
    pub vxlan: Option<Box<Vxlan>>,
}

/// The VXLAN layer of a frame.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Vxlan {
    /// The 24-bit VXLAN network identifier.
    pub vni: u32,
    /// The encapsulated frame.
    pub inner: FlowKey,
}

/// Why a frame could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The frame ends inside a header (or a length field points past its end).
    #[error("truncated {layer} header: {detail}")]
    Truncated { layer: &'static str, detail: String },
    /// A header is present but its content is invalid.
    #[error("malformed {layer} header: {detail}")]
    Malformed { layer: &'static str, detail: String },
}

#[cfg(test)]
mod tests;
