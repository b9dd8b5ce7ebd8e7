//! Fitting a frame to the interface it leaves by.
//!
//! Model. An interface takes frames up to its MTU as Linux applies it to a packet socket (the
//! Ethernet header on top, and 4 bytes more for a frame carrying a VLAN tag; one tag, not two),
//! and either takes frames with an offload request ([`Offload`]: partial checksum, super-frame;
//! the kernel finishes them for a device that cannot) or complete frames only. A frame leaves:
//! - as it is, request and all, where the interface takes offloads, its segments fit the MTU,
//!   and its wire length is within `max_wire` (the uplink pacer's burst: a super-frame longer
//!   than that would leave in one burst and hide its segments from the pacing);
//! - as a super-frame of smaller segments, where only the segment size is too large for the
//!   MTU (the kernel cuts it);
//! - cut into complete segments in software ([`segment_tcp`]), at the sender's segment size or
//!   less, where the interface takes complete frames only, or the pacer must see each segment;
//! - complete, its checksum finished in software, where the interface takes complete frames;
//! - not at all: too large and not TCP ([`Refused::TooBig`], counted as `oversize` rather than
//!   handed to the kernel to be refused later as a `tx_error`), or with a request that cannot
//!   be completed in software ([`Refused::Offload`], counted as `bad_offload`).

use crate::Frame;
use teamster_core::offload::{segment_tcp, Gso, GsoKind, Offload};
use teamster_core::wire::network_layer;

/// What the egress interface takes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Egress {
    pub mtu: usize,
    pub takes_offloads: bool,
    /// The most wire bytes one frame may stand for (None: no bound).
    pub max_wire: Option<usize>,
}

/// Why a frame could not be fitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    TooBig,
    Offload,
}

/// The largest frame an interface with `mtu` takes from a packet socket: the MTU and the
/// Ethernet header, and 4 bytes more if the frame carries a VLAN tag (Linux allows one tag over
/// the MTU, not two).
fn frame_limit(frame: &[u8], mtu: usize) -> usize {
    let tagged = network_layer(frame).is_some_and(|(_, l3)| l3 > 14);
    mtu + 14 + if tagged { 4 } else { 0 }
}

/// Fits a frame with its offload request to the egress interface and hands each resulting
/// frame to `out` (see the module documentation for the rules).
pub(super) fn fit(frame: Frame, to: Egress, out: &mut dyn FnMut(Frame)) -> Result<(), Refused> {
    let Frame {
        bytes: mut frame,
        mut offload,
    } = frame;
    let limit = frame_limit(&frame, to.mtu);
    if let (Some(g), Some(hdr)) = (offload.gso, offload.header_len(&frame)) {
        if frame.len() <= hdr + usize::from(g.size) {
            // One segment's worth: not a super-frame after all.
            offload.gso = None;
        } else {
            let wire_ok = to.max_wire.is_none_or(|m| offload.wire_len(&frame) <= m);
            if to.takes_offloads && wire_ok && limit > hdr + 8 {
                let size = g.size.min((limit - hdr).min(usize::from(u16::MAX)) as u16);
                out(Frame::new(
                    frame,
                    Offload {
                        gso: Some(Gso { size, ..g }),
                        ..offload
                    },
                ));
                return Ok(());
            }
            if !matches!(g.kind, GsoKind::TcpV4 | GsoKind::TcpV6) {
                return Err(Refused::TooBig);
            }
            // Cut at the sender's segment size or the MTU, whichever is smaller: never larger
            // segments than the receiver asked for.
            let l3 = network_layer(&frame).map_or(14, |(_, l3)| l3);
            let ip_mtu = to.mtu.min(hdr - l3 + usize::from(g.size));
            return match segment_tcp(&frame, ip_mtu) {
                Some(pieces) if pieces.iter().all(|p| p.len() <= limit) => {
                    pieces.into_iter().for_each(|p| out(Frame::complete(p)));
                    Ok(())
                }
                _ => Err(Refused::TooBig),
            };
        }
    }
    if frame.len() > limit {
        // A frame too large without a request (from an interface with a larger MTU): cut it
        // if it is TCP (each piece's checksum computed in full).
        return match segment_tcp(&frame, to.mtu) {
            Some(pieces) if pieces.iter().all(|p| p.len() <= limit) => {
                pieces.into_iter().for_each(|p| out(Frame::complete(p)));
                Ok(())
            }
            _ => Err(Refused::TooBig),
        };
    }
    if !to.takes_offloads && !offload.finish_checksum(&mut frame) {
        return Err(Refused::Offload);
    }
    out(Frame::new(frame, offload));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use teamster_core::offload::PartialChecksum;

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
        let to = Egress {
            mtu,
            takes_offloads: true,
            max_wire: None,
        };
        fit_with(f, Offload::NONE, to)
            .ok()
            .map(|v| v.iter().map(|(p, _)| p.len()).collect())
    }

    fn fit_with(f: Vec<u8>, o: Offload, to: Egress) -> Result<Vec<(Vec<u8>, Offload)>, Refused> {
        let mut out = Vec::new();
        fit(Frame::new(f, o), to, &mut |p| out.push((p.bytes, p.offload)))?;
        Ok(out)
    }

    /// A TCP super-frame (IPv4, `tags` tags, `ip_len` bytes of IP packet) with its request to
    /// segment at `mss`.
    fn tso(tags: usize, ip_len: usize, mss: u16) -> (Vec<u8>, Offload) {
        let f = frame(tags, 6, ip_len);
        let o = Offload {
            csum: Some(PartialChecksum {
                start: (14 + 4 * tags + 20) as u16,
                offset: 16,
            }),
            gso: Some(Gso {
                kind: GsoKind::TcpV4,
                size: mss,
                ecn: false,
            }),
        };
        assert_eq!(o.check(&f), Ok(()));
        (f, o)
    }

    const OFFLOADS: Egress = Egress {
        mtu: 1500,
        takes_offloads: true,
        max_wire: None,
    };
    const COMPLETE_ONLY: Egress = Egress {
        mtu: 1500,
        takes_offloads: false,
        max_wire: None,
    };

    /// Whether a frame's TCP/UDP checksum is complete (recomputing it changes nothing).
    fn checksum_complete(f: &[u8]) -> bool {
        let mut g = f.to_vec();
        teamster_core::offload::fill_l4_checksum(&mut g) && g == f
    }

    #[test]
    fn a_super_frame_leaves_whole_where_the_interface_takes_offloads() {
        let (f, o) = tso(0, 60_000, 1448);
        let out = fit_with(f.clone(), o, OFFLOADS).unwrap();
        assert_eq!(out, vec![(f.clone(), o)], "no copy, no cut, request unchanged");
        // Segments too large for this MTU: the kernel is asked for smaller ones.
        let (f9, o9) = tso(0, 60_000, 8948);
        let out = fit_with(f9, o9, OFFLOADS).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].1.gso.unwrap().size, 1514 - 54);
        // One segment's worth is no super-frame: sent with its partial checksum only.
        let (small, so) = tso(0, 1000, 1448);
        let out = fit_with(small.clone(), so, OFFLOADS).unwrap();
        assert_eq!(out, vec![(small, Offload { gso: None, ..so })]);
    }

    #[test]
    fn a_super_frame_is_cut_in_software_only_where_it_must_be() {
        let (f, o) = tso(1, 20_000, 1000);
        // An interface that takes complete frames only: cut at the sender's MSS (1000), not
        // at the MTU, each piece complete.
        let out = fit_with(f.clone(), o, COMPLETE_ONLY).unwrap();
        assert_eq!(out.len(), (20_000 - 40usize).div_ceil(1000));
        for (p, po) in &out {
            assert!(po.is_none() && p.len() <= 18 + 40 + 1000 && checksum_complete(p));
        }
        // A paced uplink whose burst is smaller than the super-frame: cut too.
        let paced = Egress {
            max_wire: Some(10_000),
            ..OFFLOADS
        };
        assert_eq!(fit_with(f.clone(), o, paced).unwrap().len(), 20);
        // With a burst that holds it: whole.
        let roomy = Egress {
            max_wire: Some(100_000),
            ..OFFLOADS
        };
        assert_eq!(fit_with(f, o, roomy).unwrap().len(), 1);
    }

    #[test]
    fn partial_checksums_are_finished_only_for_interfaces_that_need_it() {
        let (f, mut o) = tso(0, 1000, 1448);
        o.gso = None;
        assert!(!checksum_complete(&f));
        assert_eq!(fit_with(f.clone(), o, OFFLOADS).unwrap(), vec![(f.clone(), o)]);
        let out = fit_with(f, o, COMPLETE_ONLY).unwrap();
        assert!(out[0].1.is_none() && checksum_complete(&out[0].0));
        // UDP segmentation cannot be done here: refused where the kernel cannot do it.
        let mut udp = frame(0, 17, 9000);
        udp[14 + 20 + 4..14 + 20 + 6].copy_from_slice(&8980u16.to_be_bytes());
        let uo = Offload {
            csum: Some(PartialChecksum { start: 34, offset: 6 }),
            gso: Some(Gso {
                kind: GsoKind::UdpL4,
                size: 1400,
                ecn: false,
            }),
        };
        assert_eq!(uo.check(&udp), Ok(()));
        assert_eq!(fit_with(udp.clone(), uo, OFFLOADS).unwrap().len(), 1);
        assert_eq!(fit_with(udp, uo, COMPLETE_ONLY), Err(Refused::TooBig));
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
