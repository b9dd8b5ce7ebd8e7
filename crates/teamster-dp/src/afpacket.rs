//! AF_PACKET with a TPACKET_V3 receive ring and batched transmit: the first [`Backend`].
//!
//! Receive: the kernel fills blocks of a ring shared through mmap; a block handed to user space
//! holds a batch of frames, read in place and handed back. A VLAN tag the kernel moved into the
//! frame's metadata (VLAN offload) is put back into the frame, so the switch sees what was on the
//! wire. Frames this socket itself sent are ignored (PACKET_IGNORE_OUTGOING). The interface is
//! made promiscuous through a packet-socket membership, which the kernel drops with the socket:
//! closing restores the interface as it was. A frame whose TCP/UDP checksum the sender left to
//! hardware (TP_STATUS_CSUMNOTREADY, as veth and virtio pass them) has it completed in software
//! before the switch sees it, since it will leave through another interface.
//!
//! Transmit: frames are queued and sent with sendmmsg, up to [`AfPacket::TX_BATCH`] per call.
//! When the device is busy (send buffer or device queue full) the frames stay queued for the
//! next flush, so the caller can hold back instead of losing them; only frames the kernel
//! refuses for good, or more than [`AfPacket::TX_PENDING_MAX`] waiting, are dropped and counted.
//!
//! No crate offers TPACKET_V3 rings over safe types, so the ring is read by hand here; every
//! `unsafe` block says why it is sound.

use crate::Backend;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Receive ring: 64 blocks of 256 KiB (16 MiB). The kernel hands a block over when it is full
/// or 1 ms after its first frame, so at low rates each block holds about a millisecond: many
/// blocks let the ring ride out the loop being descheduled for tens of milliseconds (16 blocks
/// of 1 MiB held only 16 ms, and lost frames at a failover on a busy 2-core machine).
const BLOCK_SIZE: u32 = 1 << 18;
const BLOCK_NR: u32 = 64;
const FRAME_SIZE: u32 = 2048;
/// Linux's PACKET_IGNORE_OUTGOING (since 4.20); not in every libc release.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// enum tpacket_versions: TPACKET_V1, V2, V3.
const TPACKET_V3: libc::c_int = 2;
const TP_STATUS_CSUMNOTREADY: u32 = 1 << 3;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;

/// An AF_PACKET socket on one interface, with its receive ring.
pub struct AfPacket {
    fd: OwnedFd,
    ring: *mut u8,
    ring_len: usize,
    next_block: u32,
    tx: Vec<Vec<u8>>,
    /// Frames dropped on transmit since the last [`Backend::flush`] reported them.
    tx_dropped: u64,
    name: String,
}

// SAFETY: the ring pointer is owned by this value alone (mapped in `open`, unmapped in `drop`)
// and only touched through `&mut self`, so moving it to another thread is sound.
unsafe impl Send for AfPacket {}

fn check(ret: libc::c_int, what: &str, name: &str) -> io::Result<libc::c_int> {
    if ret < 0 {
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("{name}: {what}: {e}")))
    } else {
        Ok(ret)
    }
}

/// setsockopt with a plain-old-data value.
fn set_opt<T>(fd: RawFd, level: libc::c_int, opt: libc::c_int, val: &T, what: &str, name: &str) -> io::Result<()> {
    // SAFETY: `val` points to a live `T` of exactly the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (val as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    check(r, what, name).map(|_| ())
}

impl AfPacket {
    /// Frames sent per sendmmsg call at most.
    pub const TX_BATCH: usize = 64;
    /// Frames held while the device is busy; beyond this the oldest are dropped (and counted).
    pub const TX_PENDING_MAX: usize = 4096;
    /// The send buffer asked for: room for the device queue (1000 frames on veth) to fill
    /// before the socket pushes back.
    const SNDBUF: libc::c_int = 4 << 20;

    /// Opens interface `name`: socket, TPACKET_V3 ring, promiscuous membership, bind.
    pub fn open(name: &str) -> io::Result<AfPacket> {
        let cname =
            CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name has a NUL"))?;
        // SAFETY: `cname` is a valid NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) } as i32;
        if ifindex == 0 {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{name}: no such interface"),
            ));
        }
        // Protocol 0: the socket receives nothing until it is bound to the interface below. A
        // socket opened with ETH_P_ALL would queue frames from every interface in the meantime,
        // and one of those (a remote host's broadcast seen on an uplink, read as if it came
        // from a port) would teach the MAC table that the remote host is local.
        // SAFETY: plain socket creation; the result is checked before use.
        let raw = check(
            unsafe {
                libc::socket(
                    libc::AF_PACKET,
                    libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                    0,
                )
            },
            "socket",
            name,
        )?;
        // SAFETY: `raw` is a fresh descriptor owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let version: libc::c_int = TPACKET_V3;
        set_opt(
            raw,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &version,
            "PACKET_VERSION",
            name,
        )?;
        let req = libc::tpacket_req3 {
            tp_block_size: BLOCK_SIZE,
            tp_block_nr: BLOCK_NR,
            tp_frame_size: FRAME_SIZE,
            tp_frame_nr: BLOCK_SIZE / FRAME_SIZE * BLOCK_NR,
            tp_retire_blk_tov: 1, // ms: hand partly filled blocks over quickly
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        set_opt(
            raw,
            libc::SOL_PACKET,
            libc::PACKET_RX_RING,
            &req,
            "PACKET_RX_RING",
            name,
        )?;
        // Best effort: SO_SNDBUFFORCE needs CAP_NET_ADMIN, SO_SNDBUF is capped by wmem_max.
        if set_opt(
            raw,
            libc::SOL_SOCKET,
            libc::SO_SNDBUFFORCE,
            &Self::SNDBUF,
            "SO_SNDBUFFORCE",
            name,
        )
        .is_err()
        {
            let _ = set_opt(raw, libc::SOL_SOCKET, libc::SO_SNDBUF, &Self::SNDBUF, "SO_SNDBUF", name);
        }
        let one: libc::c_int = 1;
        // Best effort: older kernels lack it, and then our own frames are filtered by type below.
        let _ = set_opt(
            raw,
            libc::SOL_PACKET,
            PACKET_IGNORE_OUTGOING,
            &one,
            "PACKET_IGNORE_OUTGOING",
            name,
        );
        let ring_len = (BLOCK_SIZE * BLOCK_NR) as usize;
        // SAFETY: mapping the ring the kernel just allocated for this socket, with its exact size.
        let ring = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                raw,
                0,
            )
        };
        if ring == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("{name}: mmap of the receive ring: {e}"),
            ));
        }
        let mut sock = AfPacket {
            fd,
            ring: ring.cast(),
            ring_len,
            next_block: 0,
            tx: Vec::new(),
            tx_dropped: 0,
            name: name.to_string(),
        };
        // SAFETY: packet_mreq is plain data; zeroed is a valid value.
        let mut mreq: libc::packet_mreq = unsafe { std::mem::zeroed() };
        mreq.mr_ifindex = ifindex;
        mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
        set_opt(
            raw,
            libc::SOL_PACKET,
            libc::PACKET_ADD_MEMBERSHIP,
            &mreq,
            "promiscuous membership",
            name,
        )?;
        // SAFETY: sockaddr_ll is plain data; zeroed is valid and the fields are set below.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        addr.sll_ifindex = ifindex;
        // SAFETY: `addr` is a valid sockaddr_ll of the size passed.
        let r = unsafe {
            libc::bind(
                raw,
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        check(r, "bind", name)?;
        sock.next_block = 0;
        Ok(sock)
    }

    /// The block header at index `i`.
    fn block(&self, i: u32) -> *mut libc::tpacket_block_desc {
        // SAFETY: i < BLOCK_NR, so the offset stays inside the mapping.
        unsafe { self.ring.add((i * BLOCK_SIZE) as usize).cast() }
    }
}

impl Backend for AfPacket {
    fn name(&self) -> &str {
        &self.name
    }

    fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn recv_batch(&mut self, sink: &mut dyn FnMut(&[u8])) -> usize {
        let mut frames = 0;
        let mut scratch = Vec::new();
        loop {
            let bd = self.block(self.next_block);
            // SAFETY: `bd` points at a block header inside the mapping; the kernel hands the
            // block to us by setting TP_STATUS_USER, read with a volatile load.
            let status = unsafe { std::ptr::read_volatile(&(*bd).hdr.bh1.block_status) };
            if status & libc::TP_STATUS_USER == 0 {
                return frames;
            }
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            // SAFETY: the block is ours until we write TP_STATUS_KERNEL back.
            let (num, first) = unsafe { ((*bd).hdr.bh1.num_pkts, (*bd).hdr.bh1.offset_to_first_pkt) };
            let mut off = first as usize;
            for _ in 0..num {
                // SAFETY: the kernel lays frames out inside the block at these offsets.
                let hdr = unsafe { &*(bd.cast::<u8>().add(off) as *const libc::tpacket3_hdr) };
                // SAFETY: tp_mac and tp_snaplen delimit the frame inside the same block.
                let data = unsafe {
                    std::slice::from_raw_parts(bd.cast::<u8>().add(off + hdr.tp_mac as usize), hdr.tp_snaplen as usize)
                };
                let vlan = hdr.tp_status & TP_STATUS_VLAN_VALID != 0 && data.len() >= 12;
                let csum = hdr.tp_status & TP_STATUS_CSUMNOTREADY != 0;
                if vlan || csum {
                    scratch.clear();
                    if vlan {
                        // Put the tag the kernel took out (VLAN offload) back in.
                        let tpid = if hdr.tp_status & TP_STATUS_VLAN_TPID_VALID != 0 {
                            hdr.hv1.tp_vlan_tpid
                        } else {
                            0x8100
                        };
                        let tci = hdr.hv1.tp_vlan_tci as u16;
                        scratch.extend_from_slice(&data[..12]);
                        scratch.extend_from_slice(&tpid.to_be_bytes());
                        scratch.extend_from_slice(&tci.to_be_bytes());
                        scratch.extend_from_slice(&data[12..]);
                    } else {
                        scratch.extend_from_slice(data);
                    }
                    if csum {
                        teamster_core::offload::fill_l4_checksum(&mut scratch);
                    }
                    sink(&scratch);
                } else {
                    sink(data);
                }
                frames += 1;
                off += hdr.tp_next_offset as usize;
            }
            std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
            // SAFETY: handing the block back to the kernel, as TPACKET_V3 requires.
            unsafe { std::ptr::write_volatile(&mut (*bd).hdr.bh1.block_status, libc::TP_STATUS_KERNEL) };
            self.next_block = (self.next_block + 1) % BLOCK_NR;
        }
    }

    fn send(&mut self, frame: &[u8]) {
        self.send_owned(frame.to_vec());
    }

    fn send_owned(&mut self, frame: Vec<u8>) {
        self.tx.push(frame);
        // A full batch goes at once (one attempt per batch while the device is busy); what
        // flush drops is kept in `tx_dropped` for the caller's next flush to report.
        if self.tx.len() % Self::TX_BATCH == 0 {
            let dropped = self.flush();
            self.tx_dropped += dropped as u64;
        }
    }

    fn ring_drops(&mut self) -> u64 {
        // tpacket_stats_v3: packets, drops, freeze_q_cnt (u32 each); reading resets them.
        let mut stats = [0u32; 3];
        let mut len = std::mem::size_of_val(&stats) as libc::socklen_t;
        // SAFETY: `stats` is a buffer of `len` bytes that the kernel fills.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                stats.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if r < 0 {
            0
        } else {
            u64::from(stats[1])
        }
    }

    fn flush(&mut self) -> usize {
        while !self.tx.is_empty() {
            let n = self.tx.len().min(Self::TX_BATCH);
            let mut iov: Vec<libc::iovec> = self.tx[..n]
                .iter()
                .map(|f| libc::iovec {
                    iov_base: f.as_ptr() as *mut _,
                    iov_len: f.len(),
                })
                .collect();
            // SAFETY: mmsghdr is plain data; zeroed is valid, and the iovec pointers set below
            // point into `self.tx`, alive until after the call.
            let mut msgs: Vec<libc::mmsghdr> = (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
            for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
                m.msg_hdr.msg_iov = v;
                m.msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: `msgs` holds `n` initialised headers for this bound socket.
            let sent = unsafe { libc::sendmmsg(self.fd.as_raw_fd(), msgs.as_mut_ptr(), n as u32, libc::MSG_DONTWAIT) };
            if sent > 0 {
                self.tx.drain(..sent as usize);
                continue;
            }
            match io::Error::last_os_error().raw_os_error() {
                // The socket's send buffer or the device queue is full: the frame was not sent
                // (or the qdisc dropped it), so keep it and the rest for the next flush.
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) => break,
                // Refused for good (link down, too big): drop that frame and go on.
                _ => {
                    self.tx.drain(..1);
                    self.tx_dropped += 1;
                }
            }
        }
        if self.tx.len() > Self::TX_PENDING_MAX {
            let excess = self.tx.len() - Self::TX_PENDING_MAX;
            self.tx.drain(..excess);
            self.tx_dropped += excess as u64;
        }
        std::mem::take(&mut self.tx_dropped) as usize
    }

    fn tx_pending(&self) -> usize {
        self.tx.len()
    }
}

impl Drop for AfPacket {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `open` mapped; the socket closes with `fd`.
        unsafe { libc::munmap(self.ring.cast(), self.ring_len) };
    }
}
