//! Receive coalescing (GRO; what LRO does in a NIC): a TCP flow's in-order segments merged into
//! one super-frame, for a port that accepts super-frames, so that it is switched and copied
//! once instead of once per segment.
//!
//! Model. A segment may join its flow's pending super-frame when all of these hold, else the
//! pending one is delivered first and the segment starts afresh (or passes alone):
//! - it is TCP over IPv4 (not a fragment) or IPv6 (no extension headers), with a payload and a
//!   valid TCP checksum (a damaged one passes alone, for the receiver to drop);
//! - every header byte equals the pending one's (Ethernet, VLAN tags, addresses, TTL, ports,
//!   acknowledgement, window, TCP options) except the IP length, IPv4 identification and
//!   header checksum, the sequence number, PSH and the TCP checksum;
//! - its sequence number is the next one expected (in order);
//! - its flags are ACK, or ACK and PSH (SYN, FIN, RST, URG, ECE and CWR are delivered as they
//!   come);
//! - its payload is at most the first segment's (the super-frame's segment size), and the
//!   super-frame stays within 64 KiB of IP packet.
//!
//! A segment shorter than the segment size, or with PSH, joins and closes the super-frame. The
//! merged frame keeps the first segment's headers, with the lengths, PSH, the IPv4 header
//! checksum and the TCP checksum rewritten (from the segments' payload sums, taken while
//! checking them), and says how many segments it holds and their
//! size, so that [`super::segment_tcp`] can cut it back into the same segments. At most
//! [`MAX_FLOWS`] flows are pending at once (the oldest goes out when a ninth arrives), and
//! [`Gro::flush`] delivers everything at the end of a receive batch, so nothing waits longer
//! than one batch.

use super::checksum::{add_sums, fill_tcp_checksum_with, internet_checksum, tcp_payload_sum};

/// Flows coalescing at once, as Linux keeps per receive queue.
pub const MAX_FLOWS: usize = 8;
/// The largest IP packet a super-frame may hold.
pub const MAX_IP_PACKET: usize = 65_535;

/// A frame ready to deliver: a super-frame of `segments` segments of `mss` payload bytes (the
/// last may be shorter), or a frame passed as it came (`segments` 1, `mss` 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub frame: Vec<u8>,
    pub segments: u16,
    pub mss: u16,
}

/// Where a TCP segment's headers are.
#[derive(Debug, Clone, Copy)]
struct Layout {
    v4: bool,
    ip: usize,
    tcp: usize,
    /// Offset of the payload (end of the TCP header).
    data: usize,
}

impl Layout {
    /// The layout of a coalescable TCP segment, if `frame` is one.
    fn of(frame: &[u8]) -> Option<Layout> {
        let (et, ip) = crate::wire::network_layer(frame)?;
        let (v4, tcp, ip_end) = match et {
            0x0800 => {
                let h = frame.get(ip..ip + 20)?;
                let ihl = usize::from(h[0] & 0x0f) * 4;
                let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
                let fragment = u16::from_be_bytes([h[6], h[7]]) & 0x3fff != 0;
                if h[0] >> 4 != 4 || ihl < 20 || h[9] != 6 || fragment || total < ihl {
                    return None;
                }
                (true, ip + ihl, ip + total)
            }
            0x86dd => {
                let h = frame.get(ip..ip + 40)?;
                if h[0] >> 4 != 6 || h[6] != 6 {
                    return None;
                }
                (false, ip + 40, ip + 40 + usize::from(u16::from_be_bytes([h[4], h[5]])))
            }
            _ => return None,
        };
        let doff = usize::from(frame.get(tcp + 12)? >> 4) * 4;
        // Trailing padding (a short frame padded to 60 bytes) is not payload: the IP length
        // must end the frame exactly.
        if doff < 20 || tcp + doff > ip_end || ip_end != frame.len() {
            return None;
        }
        Some(Layout {
            v4,
            ip,
            tcp,
            data: tcp + doff,
        })
    }

    fn seq(&self, f: &[u8]) -> u32 {
        u32::from_be_bytes([f[self.tcp + 4], f[self.tcp + 5], f[self.tcp + 6], f[self.tcp + 7]])
    }

    fn flags(&self, f: &[u8]) -> u8 {
        f[self.tcp + 13]
    }

    /// The bytes that name the flow: the Ethernet header with its tags, the IP addresses, the
    /// ports.
    fn flow<'a>(&self, f: &'a [u8]) -> [&'a [u8]; 3] {
        let addrs = if self.v4 {
            self.ip + 12..self.ip + 20
        } else {
            self.ip + 8..self.ip + 40
        };
        [&f[..self.ip], &f[addrs], &f[self.tcp..self.tcp + 4]]
    }

    /// True if `a` and `b` (laid out alike) differ only where consecutive segments of one flow
    /// may.
    fn mergeable(&self, a: &[u8], b: &[u8]) -> bool {
        if a.len() < self.data || b.len() < self.data {
            return false;
        }
        let (ip, tcp) = (self.ip, self.tcp);
        // IPv4: total length, identification, header checksum; IPv6: payload length (and an
        // empty range). Then the sequence number, the flags, the TCP checksum.
        let [l1, l2] = if self.v4 {
            [ip + 2..ip + 6, ip + 10..ip + 12]
        } else {
            [ip + 4..ip + 6, 0..0]
        };
        let skip = [l1, l2, tcp + 4..tcp + 8, tcp + 13..tcp + 14, tcp + 16..tcp + 18];
        (0..self.data).all(|i| skip.iter().any(|r| r.contains(&i)) || a[i] == b[i])
    }
}

const ACK: u8 = 0x10;
const PSH: u8 = 0x08;

/// A super-frame being built.
#[derive(Debug, Clone)]
struct Pending {
    frame: Vec<u8>,
    layout: Layout,
    next_seq: u32,
    segments: u16,
    mss: usize,
    /// The one's-complement sum of its payload so far.
    payload_sum: u32,
    /// Arrival order, to deliver the oldest first when the table is full.
    born: u64,
}

/// One receive queue's coalescing state.
#[derive(Debug, Clone, Default)]
pub struct Gro {
    pending: Vec<Pending>,
    arrivals: u64,
}

impl Gro {
    pub fn new() -> Gro {
        Gro::default()
    }

    /// Takes in a received frame; what is ready to deliver goes to `out`, in the order it must
    /// arrive.
    pub fn receive(&mut self, frame: Vec<u8>, out: &mut Vec<Delivered>) {
        self.arrivals += 1;
        let alone = |frame| Delivered {
            frame,
            segments: 1,
            mss: 0,
        };
        let Some(layout) = Layout::of(&frame) else {
            return out.push(alone(frame));
        };
        let flags = layout.flags(&frame);
        let payload = frame.len() - layout.data;
        // One pass over the payload checks the checksum and sums it for the super-frame's.
        let (valid, payload_sum) = tcp_payload_sum(&frame, layout.data).unwrap_or((false, 0));
        let mergeable = (flags & !PSH) == ACK && payload > 0 && valid;
        // The flow's pending super-frame, if it has one: whatever this segment is, nothing of
        // the flow may overtake it.
        let mine = self.pending.iter().position(|p| {
            p.layout.ip == layout.ip && p.layout.v4 == layout.v4 && p.layout.flow(&p.frame) == layout.flow(&frame)
        });
        if let Some(i) = mine {
            let p = &self.pending[i];
            let fits = p.frame.len() - p.layout.ip + payload <= MAX_IP_PACKET;
            let alike = p.layout.data == layout.data && p.layout.mergeable(&p.frame, &frame);
            if mergeable && alike && layout.seq(&frame) == p.next_seq && payload <= p.mss && fits {
                let p = &mut self.pending[i];
                let odd = (p.frame.len() - p.layout.data) % 2 == 1;
                p.payload_sum = add_sums(p.payload_sum, payload_sum, odd);
                p.frame.extend_from_slice(&frame[layout.data..]);
                p.next_seq = p.next_seq.wrapping_add(payload as u32);
                p.segments += 1;
                if flags & PSH != 0 {
                    p.frame[p.layout.tcp + 13] |= PSH;
                }
                if payload < p.mss || flags & PSH != 0 {
                    let p = self.pending.remove(i);
                    out.push(finish(p));
                }
                return;
            }
            // Out of order, too big, other headers, or a control segment: what was pending goes
            // first.
            let p = self.pending.remove(i);
            out.push(finish(p));
        }
        if !mergeable || flags & PSH != 0 {
            return out.push(alone(frame));
        }
        if self.pending.len() >= MAX_FLOWS {
            let oldest = (0..self.pending.len())
                .min_by_key(|&i| self.pending[i].born)
                .expect("full");
            let p = self.pending.remove(oldest);
            out.push(finish(p));
        }
        // Room for a whole super-frame at once: growing it segment by segment would copy it
        // over and over.
        let mut frame = frame;
        frame.reserve((layout.ip + MAX_IP_PACKET).saturating_sub(frame.len()));
        self.pending.push(Pending {
            next_seq: layout.seq(&frame).wrapping_add(payload as u32),
            frame,
            layout,
            segments: 1,
            mss: payload,
            payload_sum,
            born: self.arrivals,
        });
    }

    /// Delivers everything pending (at the end of a receive batch).
    pub fn flush(&mut self, out: &mut Vec<Delivered>) {
        self.pending.sort_by_key(|p| p.born);
        out.extend(self.pending.drain(..).map(finish));
    }

    /// Flows with a super-frame pending.
    pub fn pending_flows(&self) -> usize {
        self.pending.len()
    }
}

/// The super-frame of `p` with its lengths and checksums rewritten (a single segment is
/// delivered as it came).
fn finish(p: Pending) -> Delivered {
    let Pending {
        mut frame,
        layout: l,
        segments,
        mss,
        payload_sum,
        ..
    } = p;
    if segments == 1 {
        return Delivered {
            frame,
            segments: 1,
            mss: 0,
        };
    }
    if l.v4 {
        let total = (frame.len() - l.ip) as u16;
        frame[l.ip + 2..l.ip + 4].copy_from_slice(&total.to_be_bytes());
        frame[l.ip + 10..l.ip + 12].copy_from_slice(&[0, 0]);
        let c = internet_checksum(&frame[l.ip..l.tcp]);
        frame[l.ip + 10..l.ip + 12].copy_from_slice(&c.to_be_bytes());
    } else {
        let plen = (frame.len() - l.ip - 40) as u16;
        frame[l.ip + 4..l.ip + 6].copy_from_slice(&plen.to_be_bytes());
    }
    // From the segments' payload sums: no second pass over 64 KiB.
    fill_tcp_checksum_with(&mut frame, l.data, payload_sum);
    Delivered {
        frame,
        segments,
        mss: mss as u16,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offload::{fill_l4_checksum, l4_checksum_valid, segment_tcp};
    use etherparse::{PacketBuilder, VlanId};
    use proptest::prelude::*;

    /// A TCP segment (ACK, PSH if `psh`) of `payload` from port `sport`, sequence `seq`.
    fn segment(v6: bool, vlan: bool, sport: u16, seq: u32, payload: &[u8], psh: bool) -> Vec<u8> {
        let mut f = Vec::new();
        let eth = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let mut w = |b: etherparse::PacketBuilderStep<etherparse::TcpHeader>| {
            let b = b.ack(77);
            let b = if psh { b.psh() } else { b };
            b.write(&mut f, payload).unwrap();
        };
        match (v6, vlan) {
            (false, false) => w(eth.ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64).tcp(sport, 80, seq, 4000)),
            (false, true) => w(eth
                .single_vlan(VlanId::try_new(5).unwrap())
                .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
                .tcp(sport, 80, seq, 4000)),
            (true, false) => w(eth.ipv6([1; 16], [2; 16], 64).tcp(sport, 80, seq, 4000)),
            (true, true) => w(eth
                .single_vlan(VlanId::try_new(5).unwrap())
                .ipv6([1; 16], [2; 16], 64)
                .tcp(sport, 80, seq, 4000)),
        }
        f
    }

    fn payload(len: usize, salt: usize) -> Vec<u8> {
        (0..len).map(|i| ((i * 7 + salt) % 251) as u8).collect()
    }

    fn coalesce(frames: Vec<Vec<u8>>) -> Vec<Delivered> {
        let mut g = Gro::new();
        let mut out = Vec::new();
        for f in frames {
            g.receive(f, &mut out);
        }
        g.flush(&mut out);
        out
    }

    /// The TCP payload of a frame.
    fn data(frame: &[u8]) -> &[u8] {
        &frame[Layout::of(frame).unwrap().data..]
    }

    proptest! {
        /// Cutting a super-frame into segments and coalescing them gives back the same frame,
        /// byte for byte (checksums included), and cutting that again the same segments.
        #[test]
        fn coalescing_undoes_segmentation(len in 1usize..60_000, mss in 536usize..9000, v6 in any::<bool>(), vlan in any::<bool>(), seq in any::<u32>()) {
            let frame = segment(v6, vlan, 1000, seq, &payload(len, 0), true);
            let ip_tcp = if v6 { 60 } else { 40 };
            let Some(pieces) = segment_tcp(&frame, mss + ip_tcp) else {
                return Ok(());
            };
            prop_assert!(pieces.iter().all(|p| l4_checksum_valid(p)));
            let out = coalesce(pieces.clone());
            prop_assert_eq!(out.len(), 1);
            prop_assert_eq!(usize::from(out[0].segments), pieces.len());
            prop_assert_eq!(usize::from(out[0].mss), mss);
            prop_assert!(out[0].frame == frame, "not the same frame");
            prop_assert!(l4_checksum_valid(&out[0].frame));
            prop_assert_eq!(segment_tcp(&out[0].frame, mss + ip_tcp).unwrap(), pieces);
        }

        /// Whatever the order segments of two flows arrive in, each flow's delivered payload is
        /// its byte stream in arrival order, no byte lost or duplicated, no super-frame holding
        /// a gap.
        #[test]
        fn nothing_is_lost_reordered_within_or_merged_across_a_gap(order in proptest::collection::vec(0usize..20, 1..40)) {
            let mss = 100;
            let frames: Vec<(u16, u32, Vec<u8>)> = order
                .iter()
                .map(|&k| {
                    let (flow, n) = (k % 2, k / 2);
                    (1000 + flow as u16, 5000 + (n * mss) as u32, payload(mss, k))
                })
                .collect();
            let out = coalesce(frames.iter().map(|(p, s, d)| segment(false, false, *p, *s, d, false)).collect());
            let sent: usize = frames.iter().map(|f| f.2.len()).sum();
            let got: usize = out.iter().map(|d| data(&d.frame).len()).sum();
            prop_assert_eq!(sent, got);
            for d in &out {
                let l = Layout::of(&d.frame).unwrap();
                let (port, seq) = (u16::from_be_bytes([d.frame[l.tcp], d.frame[l.tcp + 1]]), l.seq(&d.frame));
                // A super-frame's payload is the segments from its first sequence number on.
                for (i, chunk) in data(&d.frame).chunks(mss).enumerate() {
                    let s = seq + (i * mss) as u32;
                    let (_, _, want) = frames.iter().find(|f| f.0 == port && f.1 == s).unwrap();
                    prop_assert_eq!(chunk, &want[..]);
                }
                prop_assert!(l4_checksum_valid(&d.frame));
            }
        }
    }

    #[test]
    fn a_damaged_segment_or_a_control_flag_passes_alone_after_what_was_pending() {
        let a = segment(false, false, 1000, 0, &payload(100, 0), false);
        let b = segment(false, false, 1000, 100, &payload(100, 1), false);
        let mut bad = segment(false, false, 1000, 200, &payload(100, 2), false);
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        let out = coalesce(vec![a.clone(), b, bad.clone()]);
        assert_eq!(out.iter().map(|d| d.segments).collect::<Vec<_>>(), [2, 1]);
        assert_eq!(out[1].frame, bad, "the damaged one untouched, for the receiver to drop");
        let mut fin = segment(false, false, 1000, 100, &payload(100, 1), false);
        let l = Layout::of(&fin).unwrap();
        fin[l.tcp + 13] |= 0x01;
        fill_l4_checksum(&mut fin);
        let out = coalesce(vec![a.clone(), fin.clone()]);
        assert_eq!(out.iter().map(|d| d.frame.clone()).collect::<Vec<_>>(), [a, fin]);
    }

    #[test]
    fn a_segment_of_the_flow_with_other_headers_never_overtakes_the_pending_one() {
        let a = segment(false, false, 1000, 0, &payload(100, 0), false);
        let mut b = segment(false, false, 1000, 100, &payload(100, 1), true);
        let l = Layout::of(&b).unwrap();
        b[l.tcp + 11] = 78; // a newer acknowledgement
        fill_l4_checksum(&mut b);
        let out = coalesce(vec![a.clone(), b.clone()]);
        assert_eq!(out.into_iter().map(|d| d.frame).collect::<Vec<_>>(), [a, b]);
    }

    #[test]
    fn a_ninth_flow_sends_the_oldest_on_and_non_tcp_passes_through() {
        let mut g = Gro::new();
        let mut out = Vec::new();
        for port in 0..MAX_FLOWS as u16 + 1 {
            g.receive(segment(true, false, 2000 + port, 1, &payload(64, 0), false), &mut out);
        }
        assert_eq!(g.pending_flows(), MAX_FLOWS);
        assert_eq!(out.len(), 1);
        let l = Layout::of(&out[0].frame).unwrap();
        assert_eq!(&out[0].frame[l.tcp..l.tcp + 2], &2000u16.to_be_bytes(), "the oldest");
        let mut udp = Vec::new();
        PacketBuilder::ethernet2([2; 6], [4; 6])
            .ipv4([1, 1, 1, 1], [2, 2, 2, 2], 9)
            .udp(1, 2)
            .write(&mut udp, b"x")
            .unwrap();
        g.receive(udp.clone(), &mut out);
        assert_eq!(out.last().unwrap().frame, udp);
        g.flush(&mut out);
        assert_eq!((g.pending_flows(), out.len()), (0, 2 + MAX_FLOWS));
    }
}
