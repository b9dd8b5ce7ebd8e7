//! The virtio-net header: how a packet socket with `PACKET_VNET_HDR` (and a tap with
//! `IFF_VNET_HDR`) passes a frame's offload request with it.
//!
//! Model. Ten bytes precede every frame read from or written to such a socket: `flags`
//! (`NEEDS_CSUM`: the checksum is partial, to be summed from `csum_start` and stored at
//! `csum_start + csum_offset`; `DATA_VALID`: already verified), `gso_type` (none, TCPv4, TCPv6,
//! UDP-L4, with an ECN bit), `hdr_len` (a hint at the header bytes; the kernel itself may give
//! the skb's linear length), `gso_size` (payload bytes per segment), `csum_start` and
//! `csum_offset`. The fields are little-endian on a little-endian host (the packet socket uses
//! the legacy virtio byte order, which is the host's). [`parse`] turns a header into a checked
//! [`Offload`]; [`build`] writes one for a frame to send. The legacy UDP fragmentation offload
//! (UFO, type 3) is refused: Linux no longer produces it, and it cannot be segmented here.

use teamster_core::offload::{Gso, GsoKind, Offload, OffloadError, PartialChecksum};

/// Length of `struct virtio_net_hdr` (without the mergeable-buffers count).
pub const LEN: usize = 10;

const NEEDS_CSUM: u8 = 1;
const GSO_NONE: u8 = 0;
const GSO_TCPV4: u8 = 1;
const GSO_TCPV6: u8 = 4;
const GSO_UDP_L4: u8 = 5;
const GSO_ECN: u8 = 0x80;

fn u16_at(h: &[u8; LEN], at: usize) -> u16 {
    u16::from_le_bytes([h[at], h[at + 1]])
}

/// The offload request a header describes, checked against the frame it came with.
pub fn parse(h: &[u8; LEN], frame: &[u8]) -> Result<Offload, OffloadError> {
    let csum = (h[0] & NEEDS_CSUM != 0).then(|| PartialChecksum {
        start: u16_at(h, 6),
        offset: u16_at(h, 8),
    });
    let kind = match h[1] & !GSO_ECN {
        GSO_NONE => None,
        GSO_TCPV4 => Some(GsoKind::TcpV4),
        GSO_TCPV6 => Some(GsoKind::TcpV6),
        GSO_UDP_L4 => Some(GsoKind::UdpL4),
        _ => return Err(OffloadError::BadSegmentation),
    };
    let gso = kind.map(|kind| Gso {
        kind,
        size: u16_at(h, 4),
        ecn: h[1] & GSO_ECN != 0,
    });
    let o = Offload { csum, gso };
    o.check(frame)?;
    Ok(o)
}

/// The header for sending `frame` with request `o` (already checked against it).
pub fn build(o: &Offload, frame: &[u8]) -> [u8; LEN] {
    let mut h = [0u8; LEN];
    if let Some(c) = o.csum {
        h[0] = NEEDS_CSUM;
        h[6..8].copy_from_slice(&c.start.to_le_bytes());
        h[8..10].copy_from_slice(&c.offset.to_le_bytes());
    }
    if let Some(g) = o.gso {
        h[1] = match g.kind {
            GsoKind::TcpV4 => GSO_TCPV4,
            GsoKind::TcpV6 => GSO_TCPV6,
            GsoKind::UdpL4 => GSO_UDP_L4,
        } | if g.ecn { GSO_ECN } else { 0 };
        let hdr = o.header_len(frame).unwrap_or(0) as u16;
        h[2..4].copy_from_slice(&hdr.to_le_bytes());
        h[4..6].copy_from_slice(&g.size.to_le_bytes());
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv6 TCP frame with a 20-byte TCP header and `payload` bytes.
    fn tcp6(payload: usize) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd];
        let mut ip = vec![0x60, 0, 0, 0, 0, 0, 6, 64];
        ip[4..6].copy_from_slice(&((20 + payload) as u16).to_be_bytes());
        ip.extend([1u8; 16]);
        ip.extend([2u8; 16]);
        f.extend(ip);
        let mut tcp = vec![0u8; 20];
        tcp[12] = 5 << 4;
        f.extend(tcp);
        f.resize(f.len() + payload, 7);
        f
    }

    #[test]
    fn a_header_round_trips_through_parse_and_build() {
        let f = tcp6(4000);
        let o = Offload {
            csum: Some(PartialChecksum { start: 54, offset: 16 }),
            gso: Some(Gso {
                kind: GsoKind::TcpV6,
                size: 1440,
                ecn: true,
            }),
        };
        let h = build(&o, &f);
        assert_eq!(h[0], NEEDS_CSUM);
        assert_eq!(h[1], GSO_TCPV6 | GSO_ECN);
        assert_eq!(u16_at(&h, 2), 74, "hdr_len: Ethernet, IPv6 and TCP headers");
        assert_eq!(parse(&h, &f), Ok(o));
        // No request: all zeros, and back.
        assert_eq!(build(&Offload::NONE, &f), [0; LEN]);
        assert_eq!(parse(&[0; LEN], &f), Ok(Offload::NONE));
    }

    #[test]
    fn headers_that_lie_about_the_frame_are_refused() {
        let f = tcp6(4000);
        let mut h = build(
            &Offload {
                csum: Some(PartialChecksum { start: 54, offset: 16 }),
                gso: Some(Gso {
                    kind: GsoKind::TcpV6,
                    size: 1440,
                    ecn: false,
                }),
            },
            &f,
        );
        let good = h;
        h[1] = 3; // UFO
        assert_eq!(parse(&h, &f), Err(OffloadError::BadSegmentation));
        h = good;
        h[1] = GSO_TCPV4; // the frame is IPv6
        assert_eq!(parse(&h, &f), Err(OffloadError::BadSegmentation));
        h = good;
        h[6..8].copy_from_slice(&60_000u16.to_le_bytes());
        assert_eq!(parse(&h, &f), Err(OffloadError::ChecksumOutside));
        // DATA_VALID alone is no request: the frame is complete.
        assert_eq!(parse(&[2, 0, 0, 0, 0, 0, 0, 0, 0, 0], &f), Ok(Offload::NONE));
    }

    proptest::proptest! {
        /// Any ten bytes with any frame: parsed or refused, never a panic.
        #[test]
        fn any_header_is_parsed_safely(
            h in proptest::array::uniform10(proptest::prelude::any::<u8>()),
            frame in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
        ) {
            if let Ok(o) = parse(&h, &frame) {
                proptest::prop_assert!(o.check(&frame).is_ok());
            }
        }
    }
}
