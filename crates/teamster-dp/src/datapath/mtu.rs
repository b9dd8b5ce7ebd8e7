//! Fitting a frame to the interface it leaves by: its MTU, as Linux applies it to a packet
//! socket (the Ethernet header on top, and 4 bytes more for a frame carrying a VLAN tag; one
//! tag, not two). A frame that does not fit is cut into segments if it is a TCP super-frame a
//! stack handed over for offload; otherwise it is refused here, and counted as `oversize` on
//! that interface, rather than handed to the kernel to be refused later as a `tx_error`.

/// The largest frame an interface with `mtu` takes from a packet socket: the MTU and the
/// Ethernet header, and 4 bytes more if the frame carries a VLAN tag (Linux allows one tag over
/// the MTU, not two).
fn frame_limit(frame: &[u8], mtu: usize) -> usize {
    let tagged = frame.len() >= 14 && matches!(u16::from_be_bytes([frame[12], frame[13]]), 0x8100 | 0x88a8);
    mtu + 14 + if tagged { 4 } else { 0 }
}

/// Fits a frame to an interface's MTU and hands each resulting frame to `out`: the frame as is,
/// or its pieces when it is a TCP super-frame a stack handed over for offload. Returns false
/// (handing over nothing) if it is too large and cannot be split, so that it is counted as
/// `oversize` here rather than refused by the kernel later as a `tx_error`.
pub(super) fn fit(frame: Vec<u8>, mtu: usize, out: &mut dyn FnMut(Vec<u8>)) -> bool {
    let limit = frame_limit(&frame, mtu);
    if frame.len() <= limit {
        out(frame);
        return true;
    }
    match teamster_core::offload::segment_tcp(&frame, mtu) {
        Some(pieces) if pieces.iter().all(|p| p.len() <= limit) => {
            pieces.into_iter().for_each(out);
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame with `tags` VLAN tags carrying an IPv4 packet of `ip_len` bytes of `proto`.
    fn frame(tags: usize, proto: u8, ip_len: usize) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        for _ in 0..tags {
            f.extend_from_slice(&[0x81, 0x00, 0, 10]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
        ip[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
        if proto == 6 {
            // TCP header: ports, seq, ack, data offset 5, ACK.
            ip.extend_from_slice(&[0, 1, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
        }
        ip.resize(ip_len, 0x5a);
        f.extend(ip);
        f
    }

    fn fitted(f: Vec<u8>, mtu: usize) -> Option<Vec<usize>> {
        let mut out = Vec::new();
        fit(f, mtu, &mut |p| out.push(p.len())).then_some(out)
    }

    #[test]
    fn frames_over_the_mtu_are_cut_or_refused_never_left_to_the_kernel() {
        // Fits as it is: untagged up to MTU + 14, tagged up to MTU + 18.
        assert_eq!(fitted(frame(0, 17, 1500), 1500), Some(vec![1514]));
        assert_eq!(fitted(frame(1, 17, 1500), 1500), Some(vec![1518]));
        // One byte more, not TCP: oversize (the kernel would refuse it with EMSGSIZE).
        assert_eq!(fitted(frame(0, 17, 1501), 1500), None);
        assert_eq!(fitted(frame(0, 1, 3028), 1500), None);
        // Two tags on a full-size packet: more than Linux takes over the MTU.
        assert_eq!(fitted(frame(2, 17, 1500), 1500), None);
        // A TCP super-frame is cut into segments that each fit, tagged or not.
        let pieces = fitted(frame(0, 6, 9000), 1500).unwrap();
        assert!(pieces.len() == 7 && pieces.iter().all(|&l| l <= 1514), "{pieces:?}");
        let pieces = fitted(frame(1, 6, 4000), 1500).unwrap();
        assert!(pieces.len() == 3 && pieces.iter().all(|&l| l <= 1518), "{pieces:?}");
        assert_eq!(fitted(frame(2, 6, 4000), 1500), None);
    }
}
