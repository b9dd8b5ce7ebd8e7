//! What a frame's sender left to the hardware, carried with the frame through the switch.
//!
//! Model. A stack that hands a frame to a device with offloads (a virtio-net guest, a veth with
//! TSO on) may leave two things undone, as the virtio-net header describes them:
//! - a *partial checksum*: the TCP/UDP checksum field at `start + offset` holds only the
//!   pseudo-header sum, and the device is to sum from `start` to the end of the frame;
//! - *segmentation* (GSO/TSO): the frame is a super-frame whose payload, after headers of
//!   [`Offload::header_len`] bytes, is to be cut into segments of `size` bytes, each sent with a
//!   copy of the headers. A super-frame always has a partial checksum too.
//!
//! The switch forwards such a frame as it is to an interface that takes offloads (the kernel
//! then segments for a device that cannot), and finishes the work in software only where it
//! must: [`Offload::finish_checksum`] before handing the frame to an interface that takes
//! complete frames only, and [`super::segment_tcp`] where a super-frame must be cut (see the
//! data plane). A super-frame is counted at its *wire* length ([`Offload::wire_len`]): the
//! segments' bytes, headers repeated, which is what links carry and what NetIOC must charge.
//!
//! Nothing here trusts the sender: [`Offload::check`] refuses a request whose offsets fall
//! outside the frame, whose segmentation kind does not match the frame's own headers, or whose
//! TCP segments are smaller than any real stack sends ([`MIN_TCP_SEGMENT`]).

use super::checksum::fill_l4_checksum;

/// The smallest TCP segment a request may ask for: Linux's own floor on the MSS (TCP_MIN_MSS).
/// A smaller one comes from no real stack, and would turn one 64 KiB super-frame into thousands
/// of segments wherever it is cut: a sender's cheap way to make the switch (or the kernel) work.
pub const MIN_TCP_SEGMENT: u16 = 88;

/// A partial checksum: sum from `start` to the end of the frame, store at `start + offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartialChecksum {
    pub start: u16,
    pub offset: u16,
}

/// The protocol a super-frame is segmented as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GsoKind {
    TcpV4,
    TcpV6,
    /// UDP segmentation offload (each segment a UDP datagram; Linux UDP GSO).
    UdpL4,
}

/// Segmentation left to the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gso {
    pub kind: GsoKind,
    /// Payload bytes per segment (the MSS for TCP).
    pub size: u16,
    /// The sender set ECN's CWR on the super-frame: the device keeps it on the first segment.
    pub ecn: bool,
}

/// What the sender left to the device, if anything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offload {
    pub csum: Option<PartialChecksum>,
    pub gso: Option<Gso>,
}

/// Why an offload request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffloadError {
    /// The checksum's start or field lies outside the frame, or inside the Ethernet header.
    ChecksumOutside,
    /// Segmentation without a partial checksum, of size 0, or of a kind the frame is not.
    BadSegmentation,
}

impl Offload {
    /// Nothing left to the device: a complete frame.
    pub const NONE: Offload = Offload { csum: None, gso: None };

    /// Whether the frame is complete as it is.
    pub fn is_none(&self) -> bool {
        self.csum.is_none() && self.gso.is_none()
    }

    /// Checks the request against the frame it came with: offsets inside the frame and past the
    /// Ethernet header, and segmentation only of the frame's own transport (TCP over the IP
    /// version named, or UDP), at the transport header the checksum starts at.
    pub fn check(&self, frame: &[u8]) -> Result<(), OffloadError> {
        if let Some(c) = self.csum {
            let field = usize::from(c.start) + usize::from(c.offset);
            if c.start < 14 || field + 2 > frame.len() {
                return Err(OffloadError::ChecksumOutside);
            }
        }
        if let Some(g) = self.gso {
            let (Some(c), Some(l4)) = (self.csum, transport(frame)) else {
                return Err(OffloadError::BadSegmentation);
            };
            let kind_matches = match g.kind {
                GsoKind::TcpV4 => l4.proto == 6 && l4.v4,
                GsoKind::TcpV6 => l4.proto == 6 && !l4.v4,
                GsoKind::UdpL4 => l4.proto == 17,
            };
            let least = if l4.proto == 6 { MIN_TCP_SEGMENT } else { 1 };
            if g.size < least || !kind_matches || usize::from(c.start) != l4.start || l4.header_end > frame.len() {
                return Err(OffloadError::BadSegmentation);
            }
        }
        Ok(())
    }

    /// The request for the same frame after a 4-byte VLAN tag was inserted (`delta` 4) or
    /// removed (`delta` -4) after the MAC addresses: offsets past them move with the payload.
    /// The switch edits frames in no other way.
    pub fn shifted(self, delta: isize) -> Offload {
        let csum = self.csum.map(|c| PartialChecksum {
            start: (c.start as isize + delta).clamp(0, u16::MAX as isize) as u16,
            offset: c.offset,
        });
        Offload { csum, gso: self.gso }
    }

    /// The bytes each segment repeats (Ethernet, IP and transport headers) if the frame is a
    /// super-frame whose request [`check`](Self::check) accepted.
    pub fn header_len(&self, frame: &[u8]) -> Option<usize> {
        self.gso?;
        transport(frame).map(|l4| l4.header_end)
    }

    /// The segments the frame becomes on the wire (1 unless it is a super-frame).
    pub fn segments(&self, frame: &[u8]) -> usize {
        match (self.gso, self.header_len(frame)) {
            (Some(g), Some(h)) if frame.len() > h => (frame.len() - h).div_ceil(usize::from(g.size.max(1))),
            _ => 1,
        }
    }

    /// The frame's length on the wire: its segments' lengths added up, headers repeated.
    pub fn wire_len(&self, frame: &[u8]) -> usize {
        let extra = self.header_len(frame).unwrap_or(0) * (self.segments(frame) - 1);
        frame.len() + extra
    }

    /// Completes a partial checksum in software; the request then carries none. Returns false
    /// (leaving frame and request alone) if the frame is not a TCP or UDP segment whose
    /// checksum can be computed.
    pub fn finish_checksum(&mut self, frame: &mut [u8]) -> bool {
        if self.csum.is_none() {
            return true;
        }
        if !fill_l4_checksum(frame) {
            return false;
        }
        self.csum = None;
        true
    }
}

/// Where a frame's transport header lies.
struct Transport {
    v4: bool,
    proto: u8,
    /// Offset of the TCP/UDP header.
    start: usize,
    /// Offset of the first payload byte.
    header_end: usize,
}

/// The TCP or UDP header of an Ethernet frame (up to two VLAN tags, IPv4 without fragments or
/// IPv6 without extension headers), if the frame has one.
fn transport(frame: &[u8]) -> Option<Transport> {
    let (et, ip) = crate::wire::network_layer(frame)?;
    let (v4, proto, start) = match et {
        0x0800 => {
            let ihl = usize::from(frame.get(ip)? & 0x0f) * 4;
            let frag = u16::from_be_bytes([*frame.get(ip + 6)?, *frame.get(ip + 7)?]) & 0x3fff != 0;
            if frame[ip] >> 4 != 4 || ihl < 20 || frag {
                return None;
            }
            (true, *frame.get(ip + 9)?, ip + ihl)
        }
        0x86dd if frame.get(ip)? >> 4 == 6 => (false, *frame.get(ip + 6)?, ip + 40),
        _ => return None,
    };
    let header_end = match proto {
        6 => start + usize::from(frame.get(start + 12)? >> 4) * 4,
        17 => start + 8,
        _ => return None,
    };
    (header_end <= frame.len()).then_some(Transport {
        v4,
        proto,
        start,
        header_end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 TCP frame (`tags` VLAN tags) with `payload` bytes after a 32-byte TCP header.
    fn tcp4(tags: usize, payload: usize) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        for _ in 0..tags {
            f.extend_from_slice(&[0x81, 0x00, 0, 10]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let total = (20 + 32 + payload) as u16;
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        f.extend(ip);
        let mut tcp = vec![0u8; 32];
        tcp[12] = 8 << 4;
        f.extend(tcp);
        f.resize(f.len() + payload, 0x5a);
        f
    }

    fn tso(start: u16, size: u16, kind: GsoKind) -> Offload {
        Offload {
            csum: Some(PartialChecksum { start, offset: 16 }),
            gso: Some(Gso { kind, size, ecn: false }),
        }
    }

    #[test]
    fn wire_length_repeats_the_headers_per_segment() {
        // 66 bytes of headers, 10,000 of payload in 1,448-byte segments: 7 segments.
        let f = tcp4(0, 10_000);
        let o = tso(34, 1448, GsoKind::TcpV4);
        assert_eq!(o.check(&f), Ok(()));
        assert_eq!(o.header_len(&f), Some(66));
        assert_eq!(o.segments(&f), 7);
        assert_eq!(o.wire_len(&f), f.len() + 6 * 66);
        // A complete frame is its own length.
        assert_eq!(Offload::NONE.wire_len(&f), f.len());
        assert_eq!(Offload::NONE.segments(&f), 1);
    }

    #[test]
    fn a_tag_moves_the_checksum_start_with_the_payload() {
        let untagged = tcp4(0, 3000);
        let tagged = tcp4(1, 3000);
        let o = tso(34, 1448, GsoKind::TcpV4);
        let t = o.shifted(4);
        assert_eq!(t.csum.unwrap().start, 38);
        assert_eq!(t.check(&tagged), Ok(()));
        assert_eq!(t.wire_len(&tagged), tagged.len() + 2 * 70);
        assert_eq!(t.shifted(-4), o);
        assert_eq!(o.check(&untagged), Ok(()));
    }

    #[test]
    fn requests_that_do_not_match_the_frame_are_refused() {
        let f = tcp4(0, 3000);
        let csum_only = |start, offset| Offload {
            csum: Some(PartialChecksum { start, offset }),
            gso: None,
        };
        assert_eq!(csum_only(34, 16).check(&f), Ok(()));
        assert_eq!(csum_only(10, 16).check(&f), Err(OffloadError::ChecksumOutside));
        assert_eq!(csum_only(34, u16::MAX).check(&f), Err(OffloadError::ChecksumOutside));
        assert_eq!(
            csum_only(f.len() as u16 - 1, 0).check(&f),
            Err(OffloadError::ChecksumOutside)
        );
        // Segmentation of the wrong kind, at the wrong header, of size 0, or without a checksum.
        for bad in [
            tso(34, 1448, GsoKind::TcpV6),
            tso(34, 1448, GsoKind::UdpL4),
            tso(30, 1448, GsoKind::TcpV4),
            tso(34, 0, GsoKind::TcpV4),
            tso(34, MIN_TCP_SEGMENT - 1, GsoKind::TcpV4),
            Offload {
                csum: None,
                gso: tso(34, 1448, GsoKind::TcpV4).gso,
            },
        ] {
            assert_eq!(bad.check(&f), Err(OffloadError::BadSegmentation), "{bad:?}");
        }
        // Not IP at all.
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(
            tso(34, 1448, GsoKind::TcpV4).check(&arp),
            Err(OffloadError::BadSegmentation)
        );
    }

    #[test]
    fn finishing_a_checksum_clears_the_request() {
        let partial = tcp4(0, 100);
        let mut full = partial.clone();
        assert!(fill_l4_checksum(&mut full));
        assert_ne!(full, partial);
        let mut f = partial.clone();
        let mut o = Offload {
            csum: Some(PartialChecksum { start: 34, offset: 16 }),
            gso: None,
        };
        assert!(o.finish_checksum(&mut f));
        assert!(o.is_none());
        assert_eq!(f, full, "the checksum written is the full one");
    }

    proptest::proptest! {
        /// Whatever a sender claims, checking and measuring never panics, and an accepted request
        /// describes offsets inside the frame.
        #[test]
        fn any_request_is_checked_safely(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            start: u16, offset: u16, size: u16, kind in 0u8..3, gso: bool,
        ) {
            let kind = [GsoKind::TcpV4, GsoKind::TcpV6, GsoKind::UdpL4][kind as usize];
            let o = Offload {
                csum: Some(PartialChecksum { start, offset }),
                gso: gso.then_some(Gso { kind, size, ecn: false }),
            };
            if o.check(&bytes).is_ok() {
                proptest::prop_assert!(usize::from(start) + usize::from(offset) + 2 <= bytes.len());
                proptest::prop_assert!(o.wire_len(&bytes) >= bytes.len());
            }
            let _ = (o.segments(&bytes), o.header_len(&bytes));
        }
    }
}
