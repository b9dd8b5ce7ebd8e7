//! VXLAN (RFC 7348): an overlay port group's frames carried between hosts inside UDP.
//!
//! Model. An overlay network is a 24-bit VXLAN network identifier ([`Vni`]) and the tunnel end
//! points (VTEPs) of the hosts that carry it. Sending, a VM's Ethernet frame becomes the payload
//! of a UDP datagram to port 4789 from this host's VTEP to a remote one: outer Ethernet, IPv4 or
//! IPv6, UDP, then the 8-byte VXLAN header (flags with the I bit, the VNI) and the inner frame
//! unchanged ([`encapsulate`]). The UDP source port is taken from a hash of the inner flow (RFC
//! 7348 §5, 49152-65535), so that the physical network's ECMP and the receiver's RSS spread a
//! VTEP pair's flows as they would spread the VMs' own. The outer UDP checksum is zero over
//! IPv4 (as RFC 7348 recommends) and computed over IPv6 (RFC 8200 requires one).
//!
//! An uplink that cannot checksum or segment *inside* a tunnel leaves that work to software:
//! [`encapsulate_frames`] completes a partial inner checksum, and cuts a TSO super-frame into
//! inner segments that fit the uplink's MTU less the tunnel's headers, before encapsulating
//! each; an uplink that can gets the frame whole, with the offload request moved past the outer
//! headers. Receiving, [`decapsulate`] checks the outer headers (UDP to 4789, not a fragment, a
//! valid UDP checksum if one is set, the I flag) and gives the VNI, the sending VTEP and the
//! inner frame; what to accept (a known VNI, a listed VTEP) is the caller's policy.

use super::checksum::{fill_l4_checksum, internet_checksum, l4_checksum_valid};
use super::request::Offload;
use super::segment::segment_tcp;
use crate::wire::{MacAddr, VXLAN_PORT};
use core::fmt;
use core::net::IpAddr;

/// The VXLAN header's length, and its flags byte with the I (valid VNI) bit.
const VXLAN_HEADER: usize = 8;
const FLAG_I: u8 = 0x08;
/// The first UDP source port RFC 7348 recommends for the flow hash (the dynamic range).
const SOURCE_PORT_BASE: u16 = 49152;

/// A VXLAN network identifier: 24 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Vni(u32);

impl Vni {
    /// The largest VNI, 2^24 - 1.
    pub const MAX: u32 = 0x00ff_ffff;

    /// `value` as a VNI, or an error saying the range.
    pub fn new(value: u64) -> Result<Vni, String> {
        u32::try_from(value)
            .ok()
            .filter(|v| *v <= Vni::MAX)
            .map(Vni)
            .ok_or_else(|| format!("VNI {value} is out of range 0-{}", Vni::MAX))
    }

    pub fn get(self) -> u32 {
        self.0
    }
}

impl fmt::Display for Vni {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// One direction of a tunnel: the outer addresses a frame is sent with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TunnelEnds {
    pub src_mac: MacAddr,
    /// The next hop's MAC (the remote VTEP's, or its router's).
    pub dst_mac: MacAddr,
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    pub ttl: u8,
}

impl TunnelEnds {
    /// The ends, checked: both addresses of one family, neither unspecified nor multicast
    /// as a source.
    pub fn new(src_mac: MacAddr, dst_mac: MacAddr, src_ip: IpAddr, dst_ip: IpAddr) -> Result<TunnelEnds, String> {
        if src_ip.is_ipv4() != dst_ip.is_ipv4() {
            return Err(format!(
                "VTEP addresses {src_ip} and {dst_ip} are of different families"
            ));
        }
        if src_ip.is_unspecified() || src_ip.is_multicast() || dst_ip.is_unspecified() {
            return Err(format!("{src_ip} -> {dst_ip} cannot carry a tunnel"));
        }
        Ok(TunnelEnds {
            src_mac,
            dst_mac,
            src_ip,
            dst_ip,
            ttl: 64,
        })
    }

    /// The bytes the tunnel adds in front of the inner frame.
    pub fn overhead(&self) -> usize {
        overhead(self.src_ip.is_ipv6())
    }
}

/// Outer Ethernet, IP, UDP and VXLAN headers: 50 bytes over IPv4, 70 over IPv6.
pub fn overhead(v6: bool) -> usize {
    14 + if v6 { 40 } else { 20 } + 8 + VXLAN_HEADER
}

/// The UDP source port for an inner frame: a hash of its addresses and ports folded into
/// 49152-65535, so that one inner flow always takes one path and different flows spread.
pub fn source_port(inner: &[u8]) -> u16 {
    // FNV-1a over the inner MACs, IP addresses and ports (where present): cheap, and no
    // secret is needed because the switch does not rely on the spread for anything.
    let mut h: u32 = 0x811c_9dc5;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h = (h ^ u32::from(*b)).wrapping_mul(0x0100_0193);
        }
    };
    eat(inner.get(..12).unwrap_or(inner));
    if let Some((et, ip)) = crate::wire::network_layer(inner) {
        let (addrs, l4) = match et {
            0x0800 => (
                inner.get(ip + 12..ip + 20),
                ip + usize::from(inner.get(ip).map_or(5, |b| b & 0x0f)) * 4,
            ),
            0x86dd => (inner.get(ip + 8..ip + 40), ip + 40),
            _ => (None, 0),
        };
        if let Some(a) = addrs {
            eat(a);
            eat(inner.get(l4..l4 + 4).unwrap_or(&[]));
        }
    }
    SOURCE_PORT_BASE + (h ^ (h >> 16)) as u16 % (u16::MAX - SOURCE_PORT_BASE + 1)
}

/// The largest inner frame a tunnel over IPv4 carries (its IP packet's length must fit 16
/// bits); over IPv6, where the length excludes the IP header, 20 bytes more.
pub const MAX_INNER: usize = u16::MAX as usize - 20 - 8 - VXLAN_HEADER;

/// Wraps `inner` for the tunnel `ends` in network `vni`; None if it is too long for one
/// datagram ([`MAX_INNER`]).
pub fn encapsulate(inner: &[u8], vni: Vni, ends: &TunnelEnds) -> Option<Vec<u8>> {
    let mut f = Vec::with_capacity(ends.overhead() + inner.len());
    encapsulate_into(inner, vni, ends, &mut f).then_some(f)
}

/// Appends `inner`, wrapped as [`encapsulate`] wraps it, to `f` (a buffer the caller reuses);
/// false, appending nothing, if it is too long for one datagram.
pub fn encapsulate_into(inner: &[u8], vni: Vni, ends: &TunnelEnds, f: &mut Vec<u8>) -> bool {
    let v6 = ends.src_ip.is_ipv6();
    if inner.len() > MAX_INNER + if v6 { 20 } else { 0 } {
        return false;
    }
    let start = f.len();
    f.extend_from_slice(&ends.dst_mac.0);
    f.extend_from_slice(&ends.src_mac.0);
    let udp_len = 8 + VXLAN_HEADER + inner.len();
    match (ends.src_ip, ends.dst_ip) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            f.extend_from_slice(&0x0800u16.to_be_bytes());
            let total = (20 + udp_len) as u16;
            let ip_at = f.len();
            // Version/IHL, DSCP, total length, ID 0, DF (VTEPs must not fragment, RFC 7348
            // §4.3), TTL, UDP.
            f.extend_from_slice(&[0x45, 0]);
            f.extend_from_slice(&total.to_be_bytes());
            f.extend_from_slice(&[0, 0, 0x40, 0, ends.ttl, 17, 0, 0]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
            let c = internet_checksum(&f[ip_at..ip_at + 20]);
            f[ip_at + 10..ip_at + 12].copy_from_slice(&c.to_be_bytes());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            f.extend_from_slice(&0x86ddu16.to_be_bytes());
            f.extend_from_slice(&[0x60, 0, 0, 0]);
            f.extend_from_slice(&(udp_len as u16).to_be_bytes());
            f.extend_from_slice(&[17, ends.ttl]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
        }
        _ => {
            // Ends built by hand with two families: nothing is sent.
            f.truncate(start);
            return false;
        }
    }
    f.extend_from_slice(&source_port(inner).to_be_bytes());
    f.extend_from_slice(&VXLAN_PORT.to_be_bytes());
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    let vni = ends_vni(vni);
    f.extend_from_slice(&[FLAG_I, 0, 0, 0, vni[0], vni[1], vni[2], 0]);
    f.extend_from_slice(inner);
    if v6 {
        fill_l4_checksum(&mut f[start..]);
    }
    true
}

fn ends_vni(vni: Vni) -> [u8; 3] {
    let b = vni.0.to_be_bytes();
    [b[1], b[2], b[3]]
}

/// What an uplink can do inside a tunnel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TunnelOffloads {
    /// Completes an inner TCP/UDP checksum.
    pub checksum: bool,
    /// Segments an inner TCP super-frame (VXLAN TSO).
    pub tso: bool,
    /// The uplink's MTU (its IP packets' largest size).
    pub mtu: usize,
}

/// The complete frames `inner` (with its sender's request `offload`) becomes when nothing is
/// left to the uplink inside a tunnel: a super-frame cut at the sender's segment size (and so
/// that each inner IP packet is at most `max_ip` bytes), each piece checksummed; else the
/// frame with its checksum completed. Done once, the pieces can be wrapped for every remote
/// VTEP a frame is flooded to. None as for [`encapsulate_frames`].
pub fn complete_inner(inner: &[u8], offload: Offload, max_ip: usize) -> Option<Vec<Vec<u8>>> {
    offload.check(inner).ok()?;
    if let Some(gso) = offload.gso {
        let (_, inner_ip) = crate::wire::network_layer(inner)?;
        let headers = offload.header_len(inner)? - inner_ip;
        let mtu = max_ip.min(headers + usize::from(gso.size));
        if inner.len() - inner_ip > mtu {
            return segment_tcp(inner, mtu);
        }
    }
    let mut whole = inner.to_vec();
    let mut o = Offload { gso: None, ..offload };
    o.finish_checksum(&mut whole).then_some(vec![whole])
}

/// The frames to send for `inner` (with the offload its sender asked for), each with the
/// request left to the uplink for its *inner* frame (which starts [`TunnelEnds::overhead`]
/// bytes in): the work the uplink cannot do inside the tunnel is done here first. An inner
/// super-frame the uplink cannot segment is cut to fit `mtu` less the tunnel's headers; a
/// partial inner checksum the uplink cannot complete is completed. None if the request does
/// not fit the frame, a super-frame cannot be cut (not TCP), or the frame is too long.
pub fn encapsulate_frames(
    inner: &[u8],
    offload: Offload,
    vni: Vni,
    ends: &TunnelEnds,
    uplink: TunnelOffloads,
) -> Option<Vec<(Vec<u8>, Offload)>> {
    offload.check(inner).ok()?;
    // Over IPv6 the outer UDP checksum covers the inner frame as it is now: what the uplink
    // would change in it afterwards would make that checksum wrong, so nothing is left to it.
    let uplink = if ends.src_ip.is_ipv6() {
        TunnelOffloads {
            checksum: false,
            tso: false,
            ..uplink
        }
    } else {
        uplink
    };
    if let (Some(gso), false) = (offload.gso, uplink.tso) {
        // The inner IP packet may be as large as the outer MTU less the outer IP, UDP and
        // VXLAN headers and the inner Ethernet header (with its tags), and its payload no
        // larger than the sender's segment size.
        let (_, inner_ip) = crate::wire::network_layer(inner)?;
        let headers = offload.header_len(inner)? - inner_ip;
        let inner_mtu = (uplink.mtu + 14)
            .checked_sub(ends.overhead() + inner_ip)?
            .min(headers + usize::from(gso.size));
        if inner.len() - inner_ip > inner_mtu {
            let pieces = segment_tcp(inner, inner_mtu)?;
            return pieces
                .iter()
                .map(|p| encapsulate(p, vni, ends).map(|f| (f, Offload::NONE)))
                .collect();
        }
    }
    // A super-frame the uplink can segment, or one that fits one segment, goes whole.
    let offload = match offload.gso {
        Some(_) if !uplink.tso => Offload { gso: None, ..offload },
        _ => offload,
    };
    if offload.csum.is_some() && !uplink.checksum {
        let mut whole = inner.to_vec();
        let mut o = offload;
        if !o.finish_checksum(&mut whole) {
            return None;
        }
        return Some(vec![(encapsulate(&whole, vni, ends)?, o)]);
    }
    Some(vec![(encapsulate(inner, vni, ends)?, offload)])
}

/// Whether `frame` is a UDP datagram to the VXLAN port (over IPv4 or IPv6, unfragmented as far
/// as its first bytes say): a cheap test before anything is opened.
pub fn is_vxlan(frame: &[u8]) -> bool {
    let Some((et, ip)) = crate::wire::network_layer(frame) else {
        return false;
    };
    let udp = match et {
        0x0800 if frame.get(ip + 9) == Some(&17) => ip + usize::from(frame[ip] & 0x0f) * 4,
        0x86dd if frame.get(ip + 6) == Some(&17) => ip + 40,
        _ => return false,
    };
    frame.get(udp + 2..udp + 4) == Some(&VXLAN_PORT.to_be_bytes()[..])
}

/// A received VXLAN frame, opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decapsulated<'a> {
    pub vni: Vni,
    /// The sending VTEP.
    pub remote: IpAddr,
    /// The VTEP address it was sent to.
    pub local: IpAddr,
    pub inner: &'a [u8],
}

/// Why a frame is not a VXLAN frame this host can open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecapError {
    #[error("not a UDP datagram to port 4789")]
    NotVxlan,
    #[error("an IP fragment (VXLAN is not reassembled)")]
    Fragment,
    #[error("truncated {0}")]
    Truncated(&'static str),
    #[error("bad outer UDP checksum")]
    Checksum,
    #[error("VXLAN header without the I flag")]
    NoVni,
    #[error("inner frame shorter than an Ethernet header")]
    ShortInner,
}

/// Opens a VXLAN frame: checks the outer headers and returns the VNI, the VTEPs and the inner
/// frame (bounded by the UDP length, so outer padding is not taken as inner bytes).
pub fn decapsulate(frame: &[u8]) -> Result<Decapsulated<'_>, DecapError> {
    let (et, ip) = crate::wire::network_layer(frame).ok_or(DecapError::Truncated("Ethernet header"))?;
    // Where the UDP header starts, the IP payload's length, and the two VTEPs.
    let (udp, ip_payload, remote, local) = match et {
        0x0800 => {
            let h = frame.get(ip..ip + 20).ok_or(DecapError::Truncated("IPv4 header"))?;
            let ihl = usize::from(h[0] & 0x0f) * 4;
            if h[0] >> 4 != 4 {
                return Err(DecapError::NotVxlan);
            }
            if h[9] != 17 {
                return Err(DecapError::NotVxlan);
            }
            if u16::from_be_bytes([h[6], h[7]]) & 0x3fff != 0 {
                return Err(DecapError::Fragment);
            }
            let ip4 = |at: usize| IpAddr::from(<[u8; 4]>::try_from(&h[at..at + 4]).expect("4 bytes"));
            if ihl < 20 {
                return Err(DecapError::Truncated("IPv4 header"));
            }
            let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
            (ip + ihl, total.saturating_sub(ihl), ip4(12), ip4(16))
        }
        0x86dd => {
            let h = frame.get(ip..ip + 40).ok_or(DecapError::Truncated("IPv6 header"))?;
            if h[0] >> 4 != 6 || h[6] != 17 {
                return Err(DecapError::NotVxlan);
            }
            let ip6 = |at: usize| IpAddr::from(<[u8; 16]>::try_from(&h[at..at + 16]).expect("16 bytes"));
            (ip + 40, usize::from(u16::from_be_bytes([h[4], h[5]])), ip6(8), ip6(24))
        }
        _ => return Err(DecapError::NotVxlan),
    };
    let u = frame.get(udp..udp + 8).ok_or(DecapError::Truncated("UDP header"))?;
    if u16::from_be_bytes([u[2], u[3]]) != VXLAN_PORT {
        return Err(DecapError::NotVxlan);
    }
    let udp_len = usize::from(u16::from_be_bytes([u[4], u[5]]));
    if udp_len < 8 + VXLAN_HEADER || udp_len > ip_payload || frame.len() < udp + udp_len {
        return Err(DecapError::Truncated("UDP datagram"));
    }
    // A zero UDP checksum means none over IPv4; IPv6 requires one (RFC 8200 §8.1).
    let unsummed = u[6..8] == [0, 0];
    if (unsummed && et != 0x0800) || (!unsummed && !l4_checksum_valid(&frame[..udp + udp_len])) {
        return Err(DecapError::Checksum);
    }
    let v = &frame[udp + 8..udp + 16];
    if v[0] & FLAG_I == 0 {
        return Err(DecapError::NoVni);
    }
    let inner = &frame[udp + 16..udp + udp_len];
    if inner.len() < 14 {
        return Err(DecapError::ShortInner);
    }
    Ok(Decapsulated {
        vni: Vni(u32::from_be_bytes([0, v[4], v[5], v[6]])),
        remote,
        local,
        inner,
    })
}

#[cfg(test)]
#[path = "vxlan_tests.rs"]
mod tests;
