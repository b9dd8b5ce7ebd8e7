//! Partial checksums completed on what the program hands up.
//!
//! A guest (or a host behind an uplink) that sends over a veth or tap with checksum offload on
//! leaves its TCP and UDP checksums partial (the kernel's CHECKSUM_PARTIAL): the checksum field
//! holds only the sum of the pseudo-header, and whoever puts the frame on a wire completes it.
//! A frame the program forwards keeps that state and is completed on its way out; a frame it
//! hands up reaches user space as bytes, and the engine would send the seed as if it were the
//! checksum (the first SYN of a Dynamic bucket, punted for the engine to place, was dropped by
//! the receiver for it). The punt's metadata cannot say which frames are partial (a tc program
//! sees no `ip_summed`), so this reads the frame: [`complete_partial`] leaves a valid checksum
//! alone, completes a field that holds exactly the pseudo-header's sum, and leaves anything
//! else (a guest's own bad checksum is not ours to mend).
//!
//! Written here because etherparse computes a checksum but does not say whether a field holds a
//! partial one; it does the parsing and the sums.

use etherparse::checksum::Sum16BitWords;
use etherparse::{NetSlice, SlicedPacket, TransportSlice};

/// What [`complete_partial`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checksum {
    /// Not an unfragmented TCP or UDP frame over IPv4 or IPv6 (or one too short to hold it).
    NotApplicable,
    /// The checksum was valid (or UDP over IPv4 without one).
    Valid,
    /// The field held the pseudo-header's sum: now the whole checksum.
    Completed,
    /// Neither: left as the sender made it.
    Invalid,
}

/// Completes the TCP or UDP checksum of `frame` (an Ethernet frame, tags allowed) if it is
/// partial; see the module documentation.
pub fn complete_partial(frame: &mut [u8]) -> Checksum {
    let Some((at, seed, correct, udp_v4)) = inspect(frame) else {
        return Checksum::NotApplicable;
    };
    let now = u16::from_be_bytes([frame[at], frame[at + 1]]);
    if now == correct || (now == 0 && udp_v4) {
        return Checksum::Valid;
    }
    if now == seed {
        frame[at..at + 2].copy_from_slice(&correct.to_be_bytes());
        return Checksum::Completed;
    }
    Checksum::Invalid
}

/// Where `frame`'s L4 checksum field is (its offset), the pseudo-header's sum (what a partial
/// checksum's field holds), the checksum it should hold, and whether it is UDP over IPv4 (whose
/// zero means "no checksum").
fn inspect(frame: &[u8]) -> Option<(usize, u16, u16, bool)> {
    let p = SlicedPacket::from_ethernet(frame).ok()?;
    let (src, dst, ipv4): (Vec<u8>, Vec<u8>, bool) = match p.net.as_ref()? {
        NetSlice::Ipv4(v4) => {
            if v4.header().is_fragmenting_payload() {
                return None;
            }
            (v4.header().source().to_vec(), v4.header().destination().to_vec(), true)
        }
        NetSlice::Ipv6(v6) => {
            if v6.is_payload_fragmented() {
                return None;
            }
            (v6.header().source().to_vec(), v6.header().destination().to_vec(), false)
        }
        _ => return None,
    };
    let (segment, proto, offset) = match p.transport.as_ref()? {
        TransportSlice::Tcp(t) => (t.slice(), 6u8, 16usize),
        TransportSlice::Udp(u) => (u.slice(), 17u8, 6usize),
        _ => return None,
    };
    let start = (segment.as_ptr() as usize).checked_sub(frame.as_ptr() as usize)?;
    let len = segment.len();
    let mut pseudo = Sum16BitWords::new();
    for w in src.chunks_exact(4).chain(dst.chunks_exact(4)) {
        pseudo = pseudo.add_4bytes([w[0], w[1], w[2], w[3]]);
    }
    pseudo = pseudo.add_2bytes([0, proto]);
    pseudo = if ipv4 {
        pseudo.add_2bytes(u16::try_from(len).ok()?.to_be_bytes())
    } else {
        pseudo.add_4bytes(u32::try_from(len).ok()?.to_be_bytes())
    };
    // (etherparse sums in native byte order: `to_be` gives the field's value.) The
    // pseudo-header's sum, folded, not complemented: what a partial checksum's field holds.
    let seed = (!pseudo.ones_complement()).to_be();
    // The whole sum, the field counted as zero.
    let sum = pseudo.add_slice(&segment[..offset]).add_slice(&segment[offset + 2..]);
    let correct = if proto == 17 {
        sum.to_ones_complement_with_no_zero().to_be()
    } else {
        sum.ones_complement().to_be()
    };
    Some((start + offset, seed, correct, proto == 17 && ipv4))
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;

    fn tcp4() -> Vec<u8> {
        let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(40000, 5201, 7, 64240)
            .syn();
        let mut v = Vec::new();
        b.write(&mut v, &[1, 2, 3]).unwrap();
        v
    }

    fn udp6() -> Vec<u8> {
        let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv6([0xfd; 16], [0xfe; 16], 64)
            .udp(5000, 53);
        let mut v = Vec::new();
        b.write(&mut v, &[9; 11]).unwrap();
        v
    }

    fn udp4() -> Vec<u8> {
        let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(5000, 53);
        let mut v = Vec::new();
        b.write(&mut v, &[9; 11]).unwrap();
        v
    }

    /// The frame with its L4 checksum replaced by what a sender with checksum offload leaves.
    fn partial(mut f: Vec<u8>) -> (Vec<u8>, Vec<u8>) {
        let (at, seed, _, _) = inspect(&f).unwrap();
        let whole = f.clone();
        f[at..at + 2].copy_from_slice(&seed.to_be_bytes());
        (f, whole)
    }

    #[test]
    fn a_partial_checksum_is_completed_and_a_valid_one_left() {
        for built in [tcp4(), udp6(), udp4()] {
            let mut valid = built.clone();
            assert_eq!(complete_partial(&mut valid), Checksum::Valid);
            assert_eq!(valid, built, "a valid checksum is not touched");
            let (mut f, whole) = partial(built);
            assert_ne!(f, whole);
            assert_eq!(complete_partial(&mut f), Checksum::Completed);
            assert_eq!(f, whole, "completed to what the sender's stack would have written");
        }
    }

    #[test]
    fn what_is_neither_is_left_as_sent() {
        let mut f = tcp4();
        let (at, seed, _, _) = inspect(&f).unwrap();
        f[at..at + 2].copy_from_slice(&(seed ^ 0x0101).to_be_bytes());
        let sent = f.clone();
        assert_eq!(complete_partial(&mut f), Checksum::Invalid);
        assert_eq!(f, sent);
        // UDP over IPv4 without a checksum.
        let mut u = udp4();
        let (at, ..) = inspect(&u).unwrap();
        u[at..at + 2].copy_from_slice(&[0, 0]);
        assert_eq!(complete_partial(&mut u), Checksum::Valid);
        // Not TCP or UDP, or not even IP, or cut short.
        let mut arp = vec![0xffu8; 12];
        arp.extend([0x08, 0x06]);
        arp.extend([0u8; 28]);
        assert_eq!(complete_partial(&mut arp), Checksum::NotApplicable);
        let mut short = tcp4();
        short.truncate(40);
        assert_eq!(complete_partial(&mut short), Checksum::NotApplicable);
    }
}
