//! RFC 1071 Internet checksum, and TCP/UDP checksum completion over IPv4 and IPv6.

/// The one's-complement sum of `data` (as big-endian 16-bit words, odd byte padded), folded to
/// 16 bits and not yet complemented, starting from `initial`.
fn sum(data: &[u8], initial: u32) -> u32 {
    let mut acc = u64::from(initial);
    let mut chunks = data.chunks_exact(2);
    for w in &mut chunks {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u64::from(u16::from_be_bytes([*last, 0]));
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u32
}

/// The Internet checksum (RFC 1071) of `data`.
pub fn internet_checksum(data: &[u8]) -> u16 {
    !(sum(data, 0) as u16)
}

/// Where a frame's TCP or UDP checksum is, and what it covers: the protocol, the transport
/// header's offset and length (header and payload), the pseudo-header's sum, and the checksum
/// field's offset. None if it is not an unfragmented TCP or UDP segment over IPv4 or IPv6 that
/// fits in the frame.
fn locate_l4(frame: &[u8]) -> Option<(u8, usize, usize, u32, usize)> {
    let (ether_type, ip) = crate::wire::network_layer(frame)?;
    let (proto, l4, l4_len, pseudo) = match ether_type {
        0x0800 => {
            let h = frame.get(ip..ip + 20)?;
            let ihl = usize::from(h[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
            let fragmented = u16::from_be_bytes([h[6], h[7]]) & 0x3fff != 0;
            if h[0] >> 4 != 4 || ihl < 20 || total < ihl || ip + total > frame.len() || fragmented {
                return None;
            }
            let proto = h[9];
            let l4_len = total - ihl;
            let mut p = sum(&h[12..20], 0);
            p = sum(&[0, proto], p);
            p = sum(&(l4_len as u16).to_be_bytes(), p);
            (proto, ip + ihl, l4_len, p)
        }
        0x86dd => {
            let h = frame.get(ip..ip + 40)?;
            let payload = usize::from(u16::from_be_bytes([h[4], h[5]]));
            // Only a TCP or UDP header straight after the fixed header (no extension headers).
            let proto = h[6];
            if h[0] >> 4 != 6 || ip + 40 + payload > frame.len() {
                return None;
            }
            let mut p = sum(&h[8..40], 0);
            p = sum(&(payload as u32).to_be_bytes(), p);
            p = sum(&[0, 0, 0, proto], p);
            (proto, ip + 40, payload, p)
        }
        _ => return None,
    };
    let field = match proto {
        6 if l4_len >= 20 => l4 + 16,
        17 if l4_len >= 8 => l4 + 6,
        _ => return None,
    };
    Some((proto, l4, l4_len, pseudo, field))
}

/// True if a frame's TCP or UDP checksum is right (a UDP checksum of zero means none); false
/// if it is wrong or the frame is not an unfragmented TCP or UDP segment over IPv4 or IPv6.
pub fn l4_checksum_valid(frame: &[u8]) -> bool {
    let Some((proto, l4, l4_len, pseudo, field)) = locate_l4(frame) else {
        return false;
    };
    if proto == 17 && frame[field..field + 2] == [0, 0] {
        return true;
    }
    sum(&frame[l4..l4 + l4_len], pseudo) == 0xffff
}

/// Recomputes the TCP or UDP checksum of an Ethernet frame in place. Returns false (and leaves
/// the frame alone) if it is not an unfragmented TCP or UDP segment over IPv4 or IPv6 that fits
/// in the frame.
pub fn fill_l4_checksum(frame: &mut [u8]) -> bool {
    let Some((proto, l4, l4_len, pseudo, field)) = locate_l4(frame) else {
        return false;
    };
    frame[field] = 0;
    frame[field + 1] = 0;
    let mut c = !(sum(&frame[l4..l4 + l4_len], pseudo) as u16);
    if proto == 17 && c == 0 {
        c = 0xffff; // UDP: zero means "no checksum"
    }
    frame[field..field + 2].copy_from_slice(&c.to_be_bytes());
    true
}

/// A TCP segment's checksum checked, and its payload's one's-complement sum, in one pass:
/// (valid, payload sum), `data` being the payload's offset. None if the frame is not an
/// unfragmented TCP segment (over IPv4 or IPv6) with its payload at `data`.
pub(crate) fn tcp_payload_sum(frame: &[u8], data: usize) -> Option<(bool, u32)> {
    let (proto, l4, l4_len, pseudo, _) = locate_l4(frame)?;
    if proto != 6 || data < l4 + 20 || data > l4 + l4_len || (data - l4) % 2 != 0 {
        return None;
    }
    let payload = sum(&frame[data..l4 + l4_len], 0);
    Some((sum(&frame[l4..data], pseudo + payload) == 0xffff, payload))
}

/// Adds the one's-complement sum `b` of bytes that start at an odd offset (`odd`) or an even one
/// to the sum `a`: a sum of bytes shifted by one is the byte-swapped sum.
pub(crate) fn add_sums(a: u32, b: u32, odd: bool) -> u32 {
    let b = if odd { ((b & 0xff) << 8) | (b >> 8) } else { b };
    let mut s = a + b;
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s
}

/// Writes a TCP segment's checksum from its headers and its payload's sum (as
/// [`tcp_payload_sum`] and [`add_sums`] give it), without reading the payload; false if the
/// frame is not a TCP segment with its payload at `data`.
pub(crate) fn fill_tcp_checksum_with(frame: &mut [u8], data: usize, payload_sum: u32) -> bool {
    let Some((6, l4, l4_len, pseudo, field)) = locate_l4(frame) else {
        return false;
    };
    if data < l4 + 20 || data > l4 + l4_len {
        return false;
    }
    frame[field] = 0;
    frame[field + 1] = 0;
    let c = !(sum(&frame[l4..data], pseudo + payload_sum) as u16);
    frame[field..field + 2].copy_from_slice(&c.to_be_bytes());
    true
}

/// Completes the TCP or UDP checksum of a frame whose sender left it to offload, and leaves
/// every other frame alone; returns whether it wrote one. A checksum left to offload
/// (CHECKSUM_PARTIAL) holds the pseudo-header's sum, uncomplemented: that is what is looked
/// for, so a frame that carries no such mark costs only the pseudo-header's sum, and a frame
/// whose complete checksum is wrong stays wrong. A complete checksum that happens to equal the
/// pseudo-header's sum is recomputed to the same value.
pub fn complete_partial_l4_checksum(frame: &mut [u8]) -> bool {
    let Some((_, _, _, pseudo, field)) = locate_l4(frame) else {
        return false;
    };
    let held = u16::from_be_bytes([frame[field], frame[field + 1]]);
    // One's complement has two zeros: the folded sum may be written either way.
    let partial = held == pseudo as u16 || (pseudo as u16 == 0xffff && held == 0);
    partial && fill_l4_checksum(frame)
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{PacketBuilder, SlicedPacket, TransportSlice, VlanId};
    use proptest::prelude::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: the sum of these words is 0xddf2; the checksum its complement.
        assert_eq!(
            internet_checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            !0xddf2
        );
    }

    /// Checks the L4 checksum with etherparse's independent implementation.
    fn valid(frame: &[u8]) -> bool {
        let p = SlicedPacket::from_ethernet(frame).unwrap();
        let payload = match &p.transport {
            Some(TransportSlice::Tcp(t)) => t.payload(),
            Some(TransportSlice::Udp(u)) => u.payload(),
            _ => return false,
        };
        match (&p.net, &p.transport) {
            (Some(etherparse::NetSlice::Ipv4(ip)), Some(TransportSlice::Tcp(t))) => {
                t.to_header()
                    .calc_checksum_ipv4(&ip.header().to_header(), payload)
                    .unwrap()
                    == t.checksum()
            }
            (Some(etherparse::NetSlice::Ipv6(ip)), Some(TransportSlice::Tcp(t))) => {
                t.to_header()
                    .calc_checksum_ipv6(&ip.header().to_header(), payload)
                    .unwrap()
                    == t.checksum()
            }
            (Some(etherparse::NetSlice::Ipv4(ip)), Some(TransportSlice::Udp(u))) => {
                u.to_header()
                    .calc_checksum_ipv4(&ip.header().to_header(), payload)
                    .unwrap()
                    == u.checksum()
            }
            (Some(etherparse::NetSlice::Ipv6(ip)), Some(TransportSlice::Udp(u))) => {
                u.to_header()
                    .calc_checksum_ipv6(&ip.header().to_header(), payload)
                    .unwrap()
                    == u.checksum()
            }
            _ => false,
        }
    }

    fn frames(payload: &[u8]) -> Vec<Vec<u8>> {
        let (a, b) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let mut out = Vec::new();
        let mut f = Vec::new();
        PacketBuilder::ethernet2(a, b)
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(1, 2, 3, 4)
            .write(&mut f, payload)
            .unwrap();
        out.push(f);
        let mut f = Vec::new();
        PacketBuilder::ethernet2(a, b)
            .single_vlan(VlanId::try_new(7).unwrap())
            .ipv6([1; 16], [2; 16], 64)
            .tcp(5, 6, 7, 8)
            .write(&mut f, payload)
            .unwrap();
        out.push(f);
        let mut f = Vec::new();
        PacketBuilder::ethernet2(a, b)
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(9, 10)
            .write(&mut f, payload)
            .unwrap();
        out.push(f);
        let mut f = Vec::new();
        PacketBuilder::ethernet2(a, b)
            .ipv6([3; 16], [4; 16], 64)
            .udp(11, 12)
            .write(&mut f, payload)
            .unwrap();
        out.push(f);
        out
    }

    proptest! {
        /// A checksum field holding anything (a partial sum, garbage) is completed correctly.
        #[test]
        fn completes_any_partial_checksum(payload in proptest::collection::vec(any::<u8>(), 0..300), junk in any::<u16>()) {
            for mut f in frames(&payload) {
                prop_assert!(valid(&f));
                // Corrupt the checksum the way CHECKSUM_PARTIAL leaves it, then complete it.
                let l4_csum = locate(&f);
                f[l4_csum..l4_csum + 2].copy_from_slice(&junk.to_be_bytes());
                prop_assert!(fill_l4_checksum(&mut f));
                prop_assert!(valid(&f));
            }
        }

        /// A checksum holding the pseudo-header's sum (as CHECKSUM_PARTIAL leaves it) is
        /// completed; a complete one is left as it is, and so is a wrong one of any other value.
        #[test]
        fn completes_only_what_was_left_to_offload(payload in proptest::collection::vec(any::<u8>(), 0..300), junk in any::<u16>()) {
            for f in frames(&payload) {
                let mut same = f.clone();
                prop_assert!(!complete_partial_l4_checksum(&mut same) || same == f);
                prop_assert_eq!(&same, &f);
                let at = locate(&f);
                let (_, _, _, pseudo, field) = locate_l4(&f).unwrap();
                prop_assert_eq!(field, at);
                let mut partial = f.clone();
                partial[at..at + 2].copy_from_slice(&(pseudo as u16).to_be_bytes());
                prop_assert!(complete_partial_l4_checksum(&mut partial));
                prop_assert_eq!(&partial, &f);
                let mut wrong = f.clone();
                wrong[at..at + 2].copy_from_slice(&junk.to_be_bytes());
                if junk != pseudo as u16 && junk != u16::from_be_bytes([f[at], f[at + 1]]) {
                    prop_assert!(!complete_partial_l4_checksum(&mut wrong));
                    prop_assert!(!valid(&wrong));
                }
            }
        }

        #[test]
        fn never_panics_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            let mut b = bytes.clone();
            let _ = fill_l4_checksum(&mut b);
            let _ = complete_partial_l4_checksum(&mut b);
        }
    }

    /// Where the L4 checksum field of one of `frames()` is.
    fn locate(f: &[u8]) -> usize {
        let p = SlicedPacket::from_ethernet(f).unwrap();
        let l4_start = match &p.transport {
            Some(TransportSlice::Tcp(t)) => t.slice().as_ptr() as usize - f.as_ptr() as usize + 16,
            Some(TransportSlice::Udp(u)) => u.slice().as_ptr() as usize - f.as_ptr() as usize + 6,
            _ => unreachable!(),
        };
        l4_start
    }

    #[test]
    fn leaves_other_frames_alone() {
        let mut arp = crate::wire::build_rarp(crate::wire::MacAddr([2, 0, 0, 0, 0, 9]), None);
        let before = arp.clone();
        assert!(!fill_l4_checksum(&mut arp));
        assert_eq!(arp, before);
        let mut frag = frames(&[1; 40]).remove(0);
        frag[14 + 6] = 0x20; // MF set
        assert!(!fill_l4_checksum(&mut frag));
    }
}
