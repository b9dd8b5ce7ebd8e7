//! AF_PACKET with a TPACKET_V3 receive ring and batched transmit: the first [`Backend`].
//!
//! Receive: the kernel fills blocks of a ring shared through mmap; a block handed to user space
//! holds a batch of frames, read in place and handed back. The handshake is the block's status
//! word, read with an acquire load and written back with a release store (packet_mmap.rst: the
//! kernel's data must be visible before user space sees `TP_STATUS_USER`, and user space must be
//! done with the block before the kernel sees `TP_STATUS_KERNEL`). Everything inside a block is
//! read by [`crate::ring`], which checks every kernel-written offset against the block, drops
//! frames the kernel cut (`truncated`) and skips a block it cannot make sense of (`bad`). A VLAN
//! tag the kernel moved into the frame's metadata (VLAN offload) is put back into the frame, so
//! the switch sees what was on the wire. Frames leaving the interface (this socket's own, and
//! any the host sends there) are not received: PACKET_IGNORE_OUTGOING asks the kernel not to
//! queue them (Linux 4.20+), and the ring reader skips frames marked PACKET_OUTGOING where the
//! kernel lacks the option. The interface is made promiscuous through a packet-socket
//! membership, which the kernel drops with the socket: closing restores the interface as it
//! was. A frame whose TCP/UDP checksum the sender left to hardware (TP_STATUS_CSUMNOTREADY, as
//! veth and virtio pass them) has it completed in software before the switch sees it, since it
//! will leave through another interface.
//!
//! The socket is bound to one interface index. If the interface goes down or is deleted, the
//! kernel sets a pending error on the socket (so it polls with POLLERR until
//! [`AfPacket::take_error`] reads it); a deleted interface's socket never receives again, and
//! the caller opens a new one when an interface of that name returns.
//!
//! Transmit: frames are queued and sent with sendmmsg, up to [`AfPacket::TX_BATCH`] per call.
//! When the device is busy (send buffer or device queue full) the frames stay queued for the
//! next flush, so the caller can hold back instead of losing them; only frames the kernel
//! refuses for good, or more than [`AfPacket::TX_PENDING_MAX`] waiting, are dropped and counted.
//!
//! No crate offers TPACKET_V3 rings over safe types, so the ring is read by hand here; every
//! `unsafe` block says why it is sound.

use crate::ring::{read_block, BLOCK_STATUS_OFFSET};
use crate::{Backend, RxDrops, TxTotals};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

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

/// An AF_PACKET socket on one interface, with its receive ring.
pub struct AfPacket {
    fd: OwnedFd,
    ring: *mut u8,
    ring_len: usize,
    next_block: u32,
    tx: Vec<Vec<u8>>,
    /// sendmmsg's headers and vectors, reused by every flush.
    iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    /// Frames dropped on transmit since the last [`Backend::flush`] reported them.
    tx_dropped: u64,
    /// Frames and bytes the kernel accepted since [`Backend::take_sent`] last reported them.
    sent: TxTotals,
    /// Receive-side drops since [`Backend::take_rx_drops`] last reported them.
    rx_drops: RxDrops,
    /// Reused to rebuild frames (VLAN tag, checksum).
    scratch: Vec<u8>,
    name: String,
    ifindex: i32,
}

// SAFETY: the ring pointer is owned by this value alone (mapped in `open`, unmapped in `drop`)
// and only touched through `&mut self`, so moving it to another thread is sound. The pointers
// in `iov` and `msgs` are rebuilt before each use and only used during one call.
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
        let ifindex = crate::iface::index(name)?;
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
        // Best effort: older kernels lack it, and then the ring reader skips outgoing frames.
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
            iov: Vec::with_capacity(Self::TX_BATCH),
            msgs: Vec::with_capacity(Self::TX_BATCH),
            tx_dropped: 0,
            sent: TxTotals::default(),
            rx_drops: RxDrops::default(),
            scratch: Vec::new(),
            name: name.to_string(),
            ifindex,
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

    /// The interface index the socket is bound to (resolved once, at open).
    pub fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// Reads and clears the socket's pending error (ENETDOWN after its interface went down or
    /// away), which otherwise keeps it polling with POLLERR.
    pub fn take_error(&self) -> Option<io::Error> {
        let mut err: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `err` is a c_int of the length passed, filled by the kernel.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                (&mut err as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        if r < 0 {
            Some(io::Error::last_os_error())
        } else {
            (err != 0).then(|| io::Error::from_raw_os_error(err))
        }
    }

    /// The status word of block `i`, shared with the kernel.
    fn block_status(&self, i: u32) -> &AtomicU32 {
        // SAFETY: i < BLOCK_NR, so the word lies inside the mapping, which lives as long as
        // `self`; blocks start at multiples of BLOCK_SIZE in a page-aligned mapping, so it is
        // 4-byte aligned. The kernel and this socket access it only as the TPACKET_V3 handshake
        // does (the kernel with its own barriers, we with atomics), never otherwise.
        unsafe { AtomicU32::from_ptr(self.ring.add((i * BLOCK_SIZE) as usize + BLOCK_STATUS_OFFSET).cast()) }
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
        loop {
            let i = self.next_block;
            // Acquire: the frames the kernel wrote are visible once we see TP_STATUS_USER.
            if self.block_status(i).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                return frames;
            }
            // SAFETY: the block lies inside the mapping (i < BLOCK_NR), and it is ours until we
            // store TP_STATUS_KERNEL below: the kernel does not write it meanwhile. The slice is
            // gone before that store.
            let block = unsafe {
                std::slice::from_raw_parts(
                    self.ring.add((i * BLOCK_SIZE) as usize).cast_const(),
                    BLOCK_SIZE as usize,
                )
            };
            let read = read_block(block, &mut self.scratch, sink);
            frames += read.delivered;
            self.rx_drops.truncated += read.truncated;
            self.rx_drops.bad += read.bad;
            // Release: we are done with the block before the kernel sees it handed back.
            self.block_status(i).store(libc::TP_STATUS_KERNEL, Ordering::Release);
            self.next_block = (i + 1) % BLOCK_NR;
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
            // The headers are rebuilt for each call in vectors kept between calls (no
            // allocation per batch); their pointers are used only during the call.
            self.iov.clear();
            self.iov.extend(self.tx[..n].iter().map(|f| libc::iovec {
                iov_base: f.as_ptr() as *mut _,
                iov_len: f.len(),
            }));
            // SAFETY: mmsghdr is plain data; zeroed is valid, and the iovec pointers set below
            // point into `self.iov`, which is not touched again until after the call.
            self.msgs.resize_with(n, || unsafe { std::mem::zeroed() });
            for (m, v) in self.msgs.iter_mut().zip(self.iov.iter_mut()) {
                m.msg_hdr.msg_iov = v;
                m.msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: `msgs` holds `n` initialised headers for this bound socket, pointing into
            // `self.iov` and `self.tx`, both alive and unchanged until the call returns.
            let sent = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    self.msgs.as_mut_ptr(),
                    n as u32,
                    libc::MSG_DONTWAIT,
                )
            };
            if sent > 0 {
                for f in self.tx.drain(..sent as usize) {
                    self.sent.packets += 1;
                    self.sent.bytes += f.len() as u64;
                }
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

    fn take_sent(&mut self) -> TxTotals {
        std::mem::take(&mut self.sent)
    }

    fn take_rx_drops(&mut self) -> RxDrops {
        std::mem::take(&mut self.rx_drops)
    }
}

impl Drop for AfPacket {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `open` mapped; the socket closes with `fd`.
        unsafe { libc::munmap(self.ring.cast(), self.ring_len) };
    }
}
