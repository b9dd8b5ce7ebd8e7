//! Software TCP segmentation (TSO/GSO in software) to fit an egress MTU.
//!
//! A TCP segment larger than the link can carry (a TSO super-frame handed over by a VM's or a
//! host's stack) is split into frames whose IP packets fit `mtu`: the Ethernet header (with up
//! to two VLAN tags), IP header and TCP header are copied into each; the payload is cut into
//! pieces of `mtu - IP header - TCP header` bytes; each piece's sequence number is advanced by
//! its offset; FIN and PSH stay only on the last piece and CWR only on the first; IPv4 total
//! length, identification (+1 per piece) and header checksum, or the IPv6 payload length, are
//! rewritten; and each piece's TCP checksum is computed in full.

use super::checksum::{fill_l4_checksum, internet_checksum};

/// Splits `frame` into frames whose IP packets are at most `mtu` bytes. Returns None if the
/// frame already fits, or is not a TCP segment over IPv4/IPv6 (without IPv6 extension headers)
/// that can be split; the caller then sends it as is or drops it.
pub fn segment_tcp(frame: &[u8], mtu: usize) -> Option<Vec<Vec<u8>>> {
    let (et, ip) = crate::wire::network_layer(frame)?;
    let (v4, ip_len, proto) = match et {
        0x0800 => {
            let ihl = usize::from(frame.get(ip)? & 0x0f) * 4;
            let frag = u16::from_be_bytes([*frame.get(ip + 6)?, *frame.get(ip + 7)?]) & 0x3fff != 0;
            if ihl < 20 || frag {
                return None;
            }
            (true, ihl, *frame.get(ip + 9)?)
        }
        0x86dd => (false, 40, *frame.get(ip + 6)?),
        _ => return None,
    };
    let tcp = ip + ip_len;
    let tcp_len = usize::from(frame.get(tcp + 12)? >> 4) * 4;
    if proto != 6 || tcp_len < 20 || frame.len() < tcp + tcp_len {
        return None;
    }
    let payload = &frame[tcp + tcp_len..];
    let mss = mtu.checked_sub(ip_len + tcp_len).filter(|m| *m >= 8)?;
    if ip_len + tcp_len + payload.len() <= mtu {
        return None;
    }
    let seq = u32::from_be_bytes([frame[tcp + 4], frame[tcp + 5], frame[tcp + 6], frame[tcp + 7]]);
    let flags = frame[tcp + 13];
    let id = if v4 {
        u16::from_be_bytes([frame[ip + 4], frame[ip + 5]])
    } else {
        0
    };
    let pieces = payload.len().div_ceil(mss);
    let mut out = Vec::with_capacity(pieces);
    for (k, chunk) in payload.chunks(mss).enumerate() {
        let mut f = Vec::with_capacity(tcp + tcp_len + chunk.len());
        f.extend_from_slice(&frame[..tcp + tcp_len]);
        f.extend_from_slice(chunk);
        let s = seq.wrapping_add((k * mss) as u32);
        f[tcp + 4..tcp + 8].copy_from_slice(&s.to_be_bytes());
        let mut fl = flags;
        if k + 1 < pieces {
            fl &= !0x09; // FIN, PSH only on the last
        }
        if k > 0 {
            fl &= !0x80; // CWR only on the first
        }
        f[tcp + 13] = fl;
        if v4 {
            let total = (ip_len + tcp_len + chunk.len()) as u16;
            f[ip + 2..ip + 4].copy_from_slice(&total.to_be_bytes());
            f[ip + 4..ip + 6].copy_from_slice(&id.wrapping_add(k as u16).to_be_bytes());
            f[ip + 10] = 0;
            f[ip + 11] = 0;
            let c = internet_checksum(&f[ip..ip + ip_len]);
            f[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
        } else {
            let plen = (tcp_len + chunk.len()) as u16;
            f[ip + 4..ip + 6].copy_from_slice(&plen.to_be_bytes());
        }
        fill_l4_checksum(&mut f);
        out.push(f);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{PacketBuilder, SlicedPacket, TransportSlice, VlanId};
    use proptest::prelude::*;

    fn tcp_frame(v6: bool, vlan: bool, payload: &[u8], fin: bool) -> Vec<u8> {
        let (a, b) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let mut f = Vec::new();
        let eth = PacketBuilder::ethernet2(a, b);
        let mut w = |builder: etherparse::PacketBuilderStep<etherparse::TcpHeader>| {
            let builder = if fin { builder.fin().psh() } else { builder.psh() };
            builder.write(&mut f, payload).unwrap();
        };
        match (v6, vlan) {
            (false, false) => w(eth
                .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
                .tcp(1000, 80, 0xffff_fff0, 4000)),
            (false, true) => w(eth
                .single_vlan(VlanId::try_new(5).unwrap())
                .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
                .tcp(1000, 80, 7, 4000)),
            (true, false) => w(eth.ipv6([1; 16], [2; 16], 64).tcp(1000, 80, 7, 4000)),
            (true, true) => w(eth
                .single_vlan(VlanId::try_new(5).unwrap())
                .ipv6([1; 16], [2; 16], 64)
                .tcp(1000, 80, 7, 4000)),
        }
        f
    }

    proptest! {
        /// The pieces fit the MTU, carry the payload in order with contiguous sequence numbers,
        /// have valid checksums, and keep FIN/PSH on the last piece only.
        #[test]
        fn pieces_fit_and_reassemble(len in 1usize..9000, mtu in 576usize..1600, v6 in any::<bool>(), vlan in any::<bool>(), fin in any::<bool>()) {
            let payload: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            let frame = tcp_frame(v6, vlan, &payload, fin);
            let Some(pieces) = segment_tcp(&frame, mtu) else {
                prop_assert!(frame.len() - 14 - usize::from(vlan) * 4 <= mtu);
                return Ok(());
            };
            let mut joined = Vec::new();
            let mut next_seq = None;
            for (k, p) in pieces.iter().enumerate() {
                let s = SlicedPacket::from_ethernet(p).unwrap();
                let ip_payload_len = match &s.net {
                    Some(etherparse::NetSlice::Ipv4(ip)) => {
                        let h = ip.header().to_header();
                        prop_assert_eq!(h.header_checksum, h.calc_header_checksum());
                        usize::from(h.total_len)
                    }
                    Some(etherparse::NetSlice::Ipv6(ip)) => 40 + usize::from(ip.header().payload_length()),
                    _ => unreachable!(),
                };
                prop_assert!(ip_payload_len <= mtu);
                let Some(TransportSlice::Tcp(t)) = &s.transport else { unreachable!() };
                if let Some(n) = next_seq { prop_assert_eq!(t.sequence_number(), n); }
                next_seq = Some(t.sequence_number().wrapping_add(t.payload().len() as u32));
                let last = k + 1 == pieces.len();
                prop_assert_eq!(t.fin(), fin && last);
                prop_assert_eq!(t.psh(), last);
                joined.extend_from_slice(t.payload());
                let mut copy = p.clone();
                fill_l4_checksum(&mut copy);
                prop_assert_eq!(&copy, p, "checksum already complete");
            }
            prop_assert_eq!(joined, payload);
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200), mtu in 0usize..2000) {
            let _ = segment_tcp(&bytes, mtu);
        }
    }

    #[test]
    fn leaves_what_fits_or_is_not_tcp() {
        assert!(segment_tcp(&tcp_frame(false, false, &[0; 100], false), 1500).is_none());
        let mut udp = Vec::new();
        PacketBuilder::ethernet2([2; 6], [4; 6])
            .ipv4([1; 4], [2; 4], 9)
            .udp(1, 2)
            .write(&mut udp, &[0; 3000])
            .unwrap();
        assert!(segment_tcp(&udp, 1500).is_none());
    }
}
