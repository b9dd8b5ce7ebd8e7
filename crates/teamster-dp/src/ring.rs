//! Reading one block of a TPACKET_V3 receive ring, as bytes.
//!
//! Model. The kernel hands a block to user space by setting `TP_STATUS_USER` in its header; the
//! block then holds `num_pkts` frames, the first at `offset_to_first_pkt`, each after its
//! `tpacket3_hdr` and `sockaddr_ll`, chained by `tp_next_offset` (see the kernel's
//! packet_mmap.rst). Every offset and length the kernel wrote is checked against the block
//! before it is used: a frame header, its `sockaddr_ll` and its data must lie inside the block,
//! a block claims no more frames than it can hold, and a chain link moves forward by at least a
//! header. At the first inconsistency the rest of the block is counted as `bad` and skipped;
//! nothing is ever read outside the block. A frame the kernel cut (`tp_len > tp_snaplen`) is
//! counted as `truncated` and not delivered: forwarding a cut frame would put a different frame
//! on the wire. Frames leaving the interface (`PACKET_OUTGOING`: ours, or the host's) are
//! skipped, for kernels without PACKET_IGNORE_OUTGOING.
//!
//! Fields are read from the bytes at their offsets in the kernel's UAPI layout (checked against
//! libc's structs in the tests), so no reference to a kernel-written struct is ever formed.

/// Size of `struct tpacket_block_desc` (version, offset_to_priv, and `tpacket_hdr_v1`).
pub const BLOCK_HDR_LEN: usize = 48;
/// Size of `struct tpacket3_hdr`, already a multiple of TPACKET_ALIGNMENT (16).
pub const FRAME_HDR_LEN: usize = 48;
/// Size of `struct sockaddr_ll`, which follows each frame header.
const SLL_LEN: usize = 20;
/// Offset of `block_status` in the block header.
pub const BLOCK_STATUS_OFFSET: usize = 8;
const NUM_PKTS: usize = 12;
const FIRST_PKT: usize = 16;
// In tpacket3_hdr:
const NEXT_OFFSET: usize = 0;
const SNAPLEN: usize = 12;
const LEN: usize = 16;
const STATUS: usize = 20;
const MAC: usize = 24;
const VLAN_TCI: usize = 32;
const VLAN_TPID: usize = 36;
/// `sll_pkttype` in the sockaddr_ll after the frame header.
const SLL_PKTTYPE: usize = FRAME_HDR_LEN + 10;
const PACKET_OUTGOING: u8 = 4;

const TP_STATUS_CSUMNOTREADY: u32 = 1 << 3;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;

/// What reading one block found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockRead {
    /// Frames handed to the sink.
    pub delivered: usize,
    /// Frames the kernel cut to the snap length: dropped.
    pub truncated: u64,
    /// Frames the block claims but whose header, address or data lay outside it: dropped.
    pub bad: u64,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

/// Reads every frame of `block` (one whole ring block, owned by user space) into `sink`,
/// restoring a VLAN tag the kernel took out and completing a checksum left to hardware (in
/// `scratch`, reused between calls).
pub fn read_block(block: &[u8], scratch: &mut Vec<u8>, sink: &mut dyn FnMut(&[u8])) -> BlockRead {
    let mut read = BlockRead::default();
    if block.len() < BLOCK_HDR_LEN {
        return read;
    }
    let num = u32_at(block, NUM_PKTS) as usize;
    let most = (block.len() - BLOCK_HDR_LEN) / FRAME_HDR_LEN;
    if num > most {
        read.bad = most as u64;
        return read;
    }
    let mut off = u32_at(block, FIRST_PKT) as usize;
    if off < BLOCK_HDR_LEN {
        read.bad = num as u64;
        return read;
    }
    for i in 0..num {
        let Some(frame) = frame_at(block, off) else {
            read.bad += (num - i) as u64;
            break;
        };
        if frame.len > frame.data.len() {
            read.truncated += 1;
        } else if !frame.outgoing {
            deliver(&frame, scratch, sink);
            read.delivered += 1;
        }
        if i + 1 < num {
            if frame.next < FRAME_HDR_LEN {
                read.bad += (num - i - 1) as u64;
                break;
            }
            off += frame.next;
        }
    }
    read
}

/// One frame's header fields and data, all checked to lie inside the block.
struct Frame<'a> {
    next: usize,
    /// The frame's length on the wire.
    len: usize,
    status: u32,
    vlan_tci: u16,
    vlan_tpid: u16,
    outgoing: bool,
    data: &'a [u8],
}

/// The frame whose header is at `off`, if its header, address and data are inside `block`.
fn frame_at(block: &[u8], off: usize) -> Option<Frame<'_>> {
    if off.checked_add(FRAME_HDR_LEN + SLL_LEN)? > block.len() {
        return None;
    }
    let mac = u16_at(block, off + MAC) as usize;
    let snaplen = u32_at(block, off + SNAPLEN) as usize;
    // The data starts after the header and the address, and ends inside the block.
    if mac < FRAME_HDR_LEN + SLL_LEN {
        return None;
    }
    let start = off + mac;
    let end = start.checked_add(snaplen)?;
    if end > block.len() {
        return None;
    }
    Some(Frame {
        next: u32_at(block, off + NEXT_OFFSET) as usize,
        len: u32_at(block, off + LEN) as usize,
        status: u32_at(block, off + STATUS),
        vlan_tci: u32_at(block, off + VLAN_TCI) as u16,
        vlan_tpid: u16_at(block, off + VLAN_TPID),
        outgoing: block[off + SLL_PKTTYPE] == PACKET_OUTGOING,
        data: &block[start..end],
    })
}

/// Hands one received frame to `sink` given its metadata as the kernel reports it (the
/// `tp_status`, VLAN TCI and TPID of `tpacket_auxdata` or a ring's frame header), restoring the
/// VLAN tag and completing a checksum as [`read_block`] does.
pub fn deliver_frame(
    data: &[u8],
    status: u32,
    vlan_tci: u16,
    vlan_tpid: u16,
    scratch: &mut Vec<u8>,
    sink: &mut dyn FnMut(&[u8]),
) {
    let f = Frame {
        next: 0,
        len: data.len(),
        status,
        vlan_tci,
        vlan_tpid,
        outgoing: false,
        data,
    };
    deliver(&f, scratch, sink);
}

/// Hands a frame to `sink`: as it is, or rebuilt in `scratch` with its VLAN tag put back (VLAN
/// offload) and its TCP/UDP checksum completed (left to hardware by the sender: it will leave
/// through another interface).
fn deliver(f: &Frame<'_>, scratch: &mut Vec<u8>, sink: &mut dyn FnMut(&[u8])) {
    let vlan = f.status & TP_STATUS_VLAN_VALID != 0 && f.data.len() >= 12;
    let csum = f.status & TP_STATUS_CSUMNOTREADY != 0;
    if !(vlan || csum) {
        sink(f.data);
        return;
    }
    scratch.clear();
    if vlan {
        let tpid = if f.status & TP_STATUS_VLAN_TPID_VALID != 0 {
            f.vlan_tpid
        } else {
            0x8100
        };
        scratch.extend_from_slice(&f.data[..12]);
        scratch.extend_from_slice(&tpid.to_be_bytes());
        scratch.extend_from_slice(&f.vlan_tci.to_be_bytes());
        scratch.extend_from_slice(&f.data[12..]);
    } else {
        scratch.extend_from_slice(f.data);
    }
    if csum {
        teamster_core::offload::fill_l4_checksum(scratch);
    }
    sink(scratch);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn offsets_match_the_kernel_structs() {
        assert_eq!(size_of::<libc::tpacket_block_desc>(), BLOCK_HDR_LEN);
        assert_eq!(size_of::<libc::tpacket3_hdr>(), FRAME_HDR_LEN);
        assert_eq!(size_of::<libc::sockaddr_ll>(), SLL_LEN);
        let bh1 = offset_of!(libc::tpacket_block_desc, hdr);
        assert_eq!(
            bh1 + offset_of!(libc::tpacket_hdr_v1, block_status),
            BLOCK_STATUS_OFFSET
        );
        assert_eq!(bh1 + offset_of!(libc::tpacket_hdr_v1, num_pkts), NUM_PKTS);
        assert_eq!(bh1 + offset_of!(libc::tpacket_hdr_v1, offset_to_first_pkt), FIRST_PKT);
        assert_eq!(offset_of!(libc::tpacket3_hdr, tp_next_offset), NEXT_OFFSET);
        assert_eq!(offset_of!(libc::tpacket3_hdr, tp_snaplen), SNAPLEN);
        assert_eq!(offset_of!(libc::tpacket3_hdr, tp_len), LEN);
        assert_eq!(offset_of!(libc::tpacket3_hdr, tp_status), STATUS);
        assert_eq!(offset_of!(libc::tpacket3_hdr, tp_mac), MAC);
        let hv1 = offset_of!(libc::tpacket3_hdr, hv1);
        assert_eq!(hv1 + offset_of!(libc::tpacket_hdr_variant1, tp_vlan_tci), VLAN_TCI);
        assert_eq!(hv1 + offset_of!(libc::tpacket_hdr_variant1, tp_vlan_tpid), VLAN_TPID);
        assert_eq!(FRAME_HDR_LEN + offset_of!(libc::sockaddr_ll, sll_pkttype), SLL_PKTTYPE);
    }

    /// A frame to lay into a test block.
    struct Spec {
        data: Vec<u8>,
        wire_len: usize,
        status: u32,
        pkttype: u8,
    }

    fn spec(n: u8) -> Spec {
        Spec {
            data: vec![n; 60],
            wire_len: 60,
            status: 0,
            pkttype: 0,
        }
    }

    /// A block laid out as the kernel lays it: frames from offset 48, each 16-byte aligned.
    fn block(frames: &[Spec], size: usize) -> Vec<u8> {
        let mut b = vec![0u8; size];
        let put = |b: &mut Vec<u8>, at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        put(&mut b, NUM_PKTS, frames.len() as u32);
        put(&mut b, FIRST_PKT, BLOCK_HDR_LEN as u32);
        let mut off = BLOCK_HDR_LEN;
        for (i, f) in frames.iter().enumerate() {
            let mac = FRAME_HDR_LEN + SLL_LEN + 2; // the kernel aligns the network header
            let step = (mac + f.data.len()).div_ceil(16) * 16;
            let next = if i + 1 < frames.len() { step as u32 } else { 0 };
            put(&mut b, off + NEXT_OFFSET, next);
            put(&mut b, off + SNAPLEN, f.data.len() as u32);
            put(&mut b, off + LEN, f.wire_len as u32);
            put(&mut b, off + STATUS, f.status);
            b[off + MAC..off + MAC + 2].copy_from_slice(&(mac as u16).to_ne_bytes());
            b[off + SLL_PKTTYPE] = f.pkttype;
            b[off + mac..off + mac + f.data.len()].copy_from_slice(&f.data);
            off += step;
        }
        b
    }

    fn read(b: &[u8]) -> (Vec<Vec<u8>>, BlockRead) {
        let mut got = Vec::new();
        let r = read_block(b, &mut Vec::new(), &mut |f| got.push(f.to_vec()));
        (got, r)
    }

    #[test]
    fn reads_a_well_formed_block() {
        let b = block(&[spec(1), spec(2), spec(3)], 4096);
        let (got, r) = read(&b);
        assert_eq!(got, [vec![1; 60], vec![2; 60], vec![3; 60]]);
        assert_eq!(
            r,
            BlockRead {
                delivered: 3,
                truncated: 0,
                bad: 0
            }
        );
    }

    #[test]
    fn a_cut_frame_is_counted_not_forwarded() {
        let mut cut = spec(2);
        cut.wire_len = 1500;
        let (got, r) = read(&block(&[spec(1), cut, spec(3)], 4096));
        assert_eq!(got, [vec![1; 60], vec![3; 60]]);
        assert_eq!(
            r,
            BlockRead {
                delivered: 2,
                truncated: 1,
                bad: 0
            }
        );
    }

    #[test]
    fn outgoing_frames_are_skipped() {
        let mut ours = spec(2);
        ours.pkttype = PACKET_OUTGOING;
        let (got, r) = read(&block(&[spec(1), ours], 4096));
        assert_eq!(got, [vec![1; 60]]);
        assert_eq!(r.delivered, 1);
    }

    #[test]
    fn vlan_tag_is_put_back() {
        let mut tagged = spec(9);
        tagged.status = TP_STATUS_VLAN_VALID;
        let mut b = block(&[tagged], 4096);
        b[BLOCK_HDR_LEN + VLAN_TCI..BLOCK_HDR_LEN + VLAN_TCI + 4].copy_from_slice(&42u32.to_ne_bytes());
        let (got, _) = read(&b);
        assert_eq!(&got[0][12..16], &[0x81, 0x00, 0, 42]);
        assert_eq!(got[0].len(), 64);
    }

    #[test]
    fn bad_offsets_are_counted_and_never_read_out_of_bounds() {
        let good = block(&[spec(1), spec(2), spec(3)], 1024);
        let second = BLOCK_HDR_LEN + u32_at(&good, BLOCK_HDR_LEN + NEXT_OFFSET) as usize;
        let patch = |at: usize, bytes: &[u8]| {
            let mut b = good.clone();
            b[at..at + bytes.len()].copy_from_slice(bytes);
            b
        };
        let cases: Vec<(&str, Vec<u8>, BlockRead)> = vec![
            (
                "first frame past the end",
                patch(FIRST_PKT, &2000u32.to_ne_bytes()),
                BlockRead {
                    delivered: 0,
                    truncated: 0,
                    bad: 3,
                },
            ),
            (
                "first frame inside the block header",
                patch(FIRST_PKT, &8u32.to_ne_bytes()),
                BlockRead {
                    delivered: 0,
                    truncated: 0,
                    bad: 3,
                },
            ),
            (
                "data runs past the end",
                patch(second + SNAPLEN, &u32::MAX.to_ne_bytes()),
                BlockRead {
                    delivered: 1,
                    truncated: 0,
                    bad: 2,
                },
            ),
            (
                "data starts inside the header",
                patch(second + MAC, &4u16.to_ne_bytes()),
                BlockRead {
                    delivered: 1,
                    truncated: 0,
                    bad: 2,
                },
            ),
            (
                "data starts past the end",
                patch(second + MAC, &u16::MAX.to_ne_bytes()),
                BlockRead {
                    delivered: 1,
                    truncated: 0,
                    bad: 2,
                },
            ),
            (
                "chain jumps past the end",
                patch(BLOCK_HDR_LEN + NEXT_OFFSET, &u32::MAX.to_ne_bytes()),
                BlockRead {
                    delivered: 1,
                    truncated: 0,
                    bad: 2,
                },
            ),
            (
                "chain does not move",
                patch(BLOCK_HDR_LEN + NEXT_OFFSET, &0u32.to_ne_bytes()),
                BlockRead {
                    delivered: 1,
                    truncated: 0,
                    bad: 2,
                },
            ),
            (
                "more frames than the block can hold",
                patch(NUM_PKTS, &u32::MAX.to_ne_bytes()),
                BlockRead {
                    delivered: 0,
                    truncated: 0,
                    bad: ((1024 - 48) / 48) as u64,
                },
            ),
        ];
        for (what, b, want) in cases {
            let (_, r) = read(&b);
            assert_eq!(r, want, "{what}");
        }
        // A block shorter than its own header yields nothing.
        assert_eq!(read(&good[..20]).1, BlockRead::default());
    }

    proptest::proptest! {
        /// Whatever the kernel wrote, reading stays inside the block (slicing would panic) and
        /// accounts for no more frames than the block claims.
        #[test]
        fn any_bytes_are_read_safely(mut bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2048), n in 0u32..8, first in 0u32..2100) {
            if bytes.len() >= BLOCK_HDR_LEN {
                bytes[NUM_PKTS..NUM_PKTS + 4].copy_from_slice(&n.to_ne_bytes());
                bytes[FIRST_PKT..FIRST_PKT + 4].copy_from_slice(&first.to_ne_bytes());
            }
            let (_, r) = read(&bytes);
            proptest::prop_assert!(r.delivered as u64 + r.truncated + r.bad <= u64::from(n));
        }
    }
}
