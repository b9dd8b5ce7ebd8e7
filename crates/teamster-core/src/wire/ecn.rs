//! Marking a frame Congestion Experienced (RFC 3168), in place.
//!
//! A frame whose IP header says ECN-capable transport (ECT(0) or ECT(1)) may carry a congestion
//! mark instead of being dropped: the two ECN bits of the IPv4 TOS byte or the IPv6 traffic
//! class become CE (11), and the IPv4 header checksum is updated incrementally (RFC 1624). A
//! frame that is not IP, not ECN-capable (Not-ECT) or too short is left alone: it must be
//! dropped instead. A super-frame marked here passes the mark to every segment cut from it,
//! since segmentation copies the IP header.

/// Marks `frame` CE if it carries ECN; returns whether it now carries CE.
pub fn mark_congestion(frame: &mut [u8]) -> bool {
    let Some((et, ip)) = super::network_layer(frame) else {
        return false;
    };
    match et {
        0x0800 if frame.len() >= ip + 20 && frame[ip] >> 4 == 4 => {
            let ecn = frame[ip + 1] & 3;
            if ecn == 0 {
                return false;
            }
            if ecn == 3 {
                return true;
            }
            let old = u16::from_be_bytes([frame[ip], frame[ip + 1]]);
            frame[ip + 1] |= 3;
            let new = u16::from_be_bytes([frame[ip], frame[ip + 1]]);
            // RFC 1624: HC' = ~(~HC + ~m + m'), in one's-complement arithmetic.
            let hc = u16::from_be_bytes([frame[ip + 10], frame[ip + 11]]);
            let mut sum = u32::from(!hc) + u32::from(!old) + u32::from(new);
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            frame[ip + 10..ip + 12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
            true
        }
        0x86dd if frame.len() >= ip + 40 && frame[ip] >> 4 == 6 => {
            // Traffic class: the low nibble of byte 0 and the high nibble of byte 1; its ECN
            // bits are bits 5 and 4 of byte 1.
            if (frame[ip + 1] >> 4) & 3 == 0 {
                return false;
            }
            frame[ip + 1] |= 0x30;
            true
        }
        _ => false,
    }
}

/// Whether `frame` carries TCP (over IPv4, or IPv6 without extension headers): a sender that
/// slows down when its packets are dropped or marked, unlike a UDP sender at a fixed rate. What
/// a what-if tells a port's demand by (`teamster_sim::whatif::demand`).
pub fn carries_tcp(frame: &[u8]) -> bool {
    const TCP: u8 = 6;
    match super::network_layer(frame) {
        Some((0x0800, ip)) => frame.len() >= ip + 20 && frame[ip] >> 4 == 4 && frame[ip + 9] == TCP,
        Some((0x86dd, ip)) => frame.len() >= ip + 40 && frame[ip] >> 4 == 6 && frame[ip + 6] == TCP,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_is_told_from_udp_over_either_ip() {
        let mut v4 = vec![0u8; 14 + 20 + 20];
        v4[12..14].copy_from_slice(&[0x08, 0x00]);
        v4[14] = 0x45;
        v4[14 + 9] = 6;
        assert!(carries_tcp(&v4));
        v4[14 + 9] = 17;
        assert!(!carries_tcp(&v4));
        let mut v6 = vec![0u8; 14 + 40 + 20];
        v6[12..14].copy_from_slice(&[0x86, 0xdd]);
        v6[14] = 0x60;
        v6[14 + 6] = 6;
        assert!(carries_tcp(&v6));
        assert!(!carries_tcp(&v6[..50]), "too short for its header");
        assert!(!carries_tcp(&[0u8; 10]));
    }
    use crate::offload::internet_checksum;

    fn ipv4(tos: u8) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x81, 0x00, 0, 5, 0x08, 0x00];
        let mut ip = vec![
            0x45, tos, 0, 28, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        let c = internet_checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend(ip);
        f.extend([0u8; 8]);
        f
    }

    #[test]
    fn ect_ipv4_is_marked_with_a_valid_header_checksum() {
        for ect in [1u8, 2] {
            let mut f = ipv4(0xb8 | ect);
            assert!(mark_congestion(&mut f));
            assert_eq!(f[19], 0xbb, "DSCP kept, ECN = CE");
            assert_eq!(internet_checksum(&f[18..38]), 0, "header checksum still valid");
        }
        let mut ce = ipv4(3);
        let before = ce.clone();
        assert!(mark_congestion(&mut ce));
        assert_eq!(ce, before, "already CE: unchanged");
    }

    #[test]
    fn frames_without_ecn_are_left_alone() {
        let mut not_ect = ipv4(0xb8);
        let before = not_ect.clone();
        assert!(!mark_congestion(&mut not_ect));
        assert_eq!(not_ect, before);
        let mut arp = ipv4(1);
        arp[16..18].copy_from_slice(&[0x08, 0x06]);
        assert!(!mark_congestion(&mut arp));
        assert!(!mark_congestion(&mut [0u8; 10]));
    }

    #[test]
    fn ect_ipv6_is_marked() {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd];
        f.extend([0x6b, 0x90, 0, 0, 0, 0, 17, 64]); // traffic class 0xb9: ECT(1)
        f.extend([0u8; 32]);
        assert!(mark_congestion(&mut f));
        assert_eq!((f[14], f[15]), (0x6b, 0xb0), "traffic class 0xbb");
        f[15] = 0x80; // traffic class 0xb8: Not-ECT
        assert!(!mark_congestion(&mut f));
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_are_marked_safely(mut bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80)) {
            let _ = mark_congestion(&mut bytes);
        }
    }
}
