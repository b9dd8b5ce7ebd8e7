//! AF_PACKET with batched receive and transmit: the first [`Device`].
//!
//! Receive: `recvmmsg` reads up to [`RX_BATCH`] frames per call into buffers kept between calls,
//! each big enough for a 64 KiB super-frame. A frame is readable the moment the kernel queues
//! it, so the poll loop wakes per frame when idle: no frame waits for a ring block to fill or
//! time out (a TPACKET_V3 ring, used before, hands a block over 1 ms after its first frame at
//! the earliest, which put a 1 ms floor under every hop; a TPACKET_V2 ring's fixed slots would
//! cut the super-frames a VM with TSO sends). The socket's receive buffer (2 MiB, forced where
//! allowed: about 900 full-size frames, 2 ms at 5 Gbit/s) absorbs bursts while the loop is
//! descheduled, and no more: a deeper buffer only holds frames longer when the loop falls
//! behind (16 MiB held 20-40 ms under a TCP load); what overflows it is counted by the kernel
//! and read as `ring_full`. The kernel's per-frame metadata comes with each frame: a VLAN
//! tag it moved out of the frame (VLAN offload, `PACKET_AUXDATA`) is put back, so the switch
//! sees what was on the wire, and what the sender left to the hardware comes in a virtio-net
//! header (`PACKET_VNET_HDR`, [`crate::vnet`]): a partial checksum, or a whole TSO/GSO
//! super-frame of up to 64 KiB, which the switch forwards as it is ([`crate::receive`] does
//! both). A frame longer than its buffer (`MSG_TRUNC`) is counted as `truncated` and not
//! forwarded; one whose header does not match it, as `bad_offload`. Frames leaving the interface (this socket's own, and any the host sends there)
//! are not received: PACKET_IGNORE_OUTGOING asks the kernel not to queue them (Linux 4.20+),
//! and frames marked PACKET_OUTGOING are skipped where the kernel lacks the option. The
//! interface is made promiscuous through a packet-socket membership, which the kernel drops
//! with the socket: closing restores the interface as it was. No memory is shared with the
//! kernel: every byte is copied into the socket's own buffers by the system call.
//!
//! The socket is bound to one interface index. If the interface goes down or is deleted, the
//! kernel sets a pending error on the socket (so it polls with POLLERR until
//! [`AfPacket::take_error`] reads it); a deleted interface's socket never receives again, and
//! the caller opens a new one when an interface of that name returns.
//!
//! Transmit: frames are queued and sent with sendmmsg, up to [`AfPacket::TX_BATCH`] per call,
//! each after its virtio-net header: the kernel finishes a partial checksum, and segments a
//! super-frame, where the device cannot (a veth passes both on to its peer, as the bridge does).
//! A super-frame is counted as the segments it becomes and their bytes.
//! When the device is busy (send buffer or device queue full) the frames stay queued for the
//! next flush, so the caller can hold back instead of losing them; only frames the kernel
//! refuses for good, or more than [`AfPacket::TX_PENDING_MAX`] waiting, are dropped and counted.
//!
//! No crate offers batched packet-socket I/O with its auxiliary data over safe types, so the
//! system calls are made by hand here; every `unsafe` block says why it is sound.

use crate::pool::FramePool;
use crate::receive::{deliver, AuxData};
use crate::sockopt::{check, set_opt, take_error};
use crate::{vnet, Device, Frame, RxDrops, TxTotals};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use teamster_core::offload::Offload;

/// Frames read per `recvmmsg` call.
pub const RX_BATCH: usize = 32;
/// One receive buffer: a 64 KiB super-frame with its Ethernet and VLAN headers.
const RX_BUF: usize = 65_536 + 64;
/// Room for the PACKET_AUXDATA control message (CMSG_SPACE of 20 bytes is 40).
const RX_CTRL: usize = 64;
/// The receive buffer asked for: room for bursts while the loop is descheduled, not for seconds.
const RCVBUF: libc::c_int = 2 << 20;
/// Linux's PACKET_AUXDATA socket option and control message type.
const PACKET_AUXDATA: libc::c_int = 8;
/// `sll_pkttype` of a frame leaving the interface.
const PACKET_OUTGOING: u8 = 4;
/// Linux's PACKET_IGNORE_OUTGOING (since 4.20); not in every libc release.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// Linux's PACKET_VNET_HDR: a virtio-net header before every frame, both ways.
const PACKET_VNET_HDR: libc::c_int = 15;
/// Linux's PACKET_FANOUT (join a group) and PACKET_FANOUT_DATA (its steering program).
const PACKET_FANOUT: libc::c_int = 18;
const PACKET_FANOUT_DATA: libc::c_int = 22;
/// The fanout type that steers by a classic BPF program, and the flag asking the kernel for a
/// group id of its own choosing (no other process can have joined it before).
const PACKET_FANOUT_CBPF: u32 = 6;
const PACKET_FANOUT_FLAG_UNIQUEID: u32 = 0x2000;
/// The group's counterpart of PACKET_IGNORE_OUTGOING (Linux 6.2+): a group's hook replaces its
/// members' own, so without it frames the host sends out of the interface reach the queues.
const PACKET_FANOUT_FLAG_IGNORE_OUTGOING: u32 = 0x4000;

/// A frame waiting to be sent: its bytes, its virtio-net header, and what it becomes on the wire.
struct TxFrame {
    bytes: Vec<u8>,
    vnet: [u8; vnet::LEN],
    segments: u32,
    wire_bytes: u32,
}

/// An AF_PACKET socket on one interface, with its receive and transmit batches.
pub struct AfPacket {
    fd: OwnedFd,
    /// Receive buffers (empty, with room for [`RX_BUF`] bytes, which the kernel fills), their
    /// virtio-net headers, addresses, control messages and message headers, reused by every
    /// call; a buffer holding a super-frame is handed on whole and replaced from the pool.
    rx_bufs: Vec<Vec<u8>>,
    rx_vnet: Vec<[u8; vnet::LEN]>,
    rx_names: Vec<libc::sockaddr_ll>,
    rx_ctrl: Vec<[u8; RX_CTRL]>,
    rx_iov: Vec<libc::iovec>,
    rx_msgs: Vec<libc::mmsghdr>,
    tx: Vec<TxFrame>,
    /// Buffers of frames sent or dropped, until [`Device::recycle`] hands them back.
    spent: Vec<Vec<u8>>,
    /// sendmmsg's headers and vectors, reused by every flush.
    iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    /// Frames dropped on transmit since the last [`Device::flush`] reported them.
    tx_dropped: u64,
    /// Frames and bytes the kernel accepted since [`Device::take_sent`] last reported them.
    sent: TxTotals,
    /// Receive-side drops since [`Device::take_rx_drops`] last reported them.
    rx_drops: RxDrops,
    name: String,
    ifindex: i32,
}

// SAFETY: the raw pointers inside (iovec and mmsghdr vectors) point into the heap storage of
// this value's own vectors, which moves with it and is used only through `&mut self`, so moving
// the value to another thread is sound.
unsafe impl Send for AfPacket {}

impl AfPacket {
    /// Frames sent per sendmmsg call at most.
    pub const TX_BATCH: usize = crate::device::TX_BATCH;
    /// Frames held while the device is busy; beyond this the oldest are dropped (and counted).
    pub const TX_PENDING_MAX: usize = 4096;
    /// The send buffer asked for: room for the device queue (1000 frames on veth) to fill
    /// before the socket pushes back.
    const SNDBUF: libc::c_int = 4 << 20;

    /// Opens interface `name`: socket, auxiliary data and buffer sizes, promiscuous membership,
    /// bind.
    pub fn open(name: &str) -> io::Result<AfPacket> {
        AfPacket::open_muted(name, false)
    }

    /// A socket on `name` that sends and never receives: bound with protocol 0, it is not on
    /// the kernel's receive path at all (the kernel fast path switches the interface's frames).
    pub fn open_send_only(name: &str) -> io::Result<AfPacket> {
        AfPacket::open_as(name, false, 0)
    }

    /// Sets the `skb->priority` of every frame this socket sends (`SO_PRIORITY`; past 6 it
    /// needs CAP_NET_ADMIN): a qdisc may read it as a class.
    pub fn set_priority(&self, priority: u32) -> io::Result<()> {
        let p = priority as libc::c_int;
        crate::sockopt::set_opt(
            self.fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PRIORITY,
            &p,
            "SO_PRIORITY",
            &self.name,
        )
    }

    /// [`AfPacket::open`], with a filter that drops every frame until it is taken off when
    /// `muted` (a receive queue socket takes no frame before it has joined its group).
    fn open_muted(name: &str, muted: bool) -> io::Result<AfPacket> {
        AfPacket::open_as(name, muted, libc::ETH_P_ALL as u16)
    }

    /// [`AfPacket::open_muted`], bound to ether type `protocol` (0: receives nothing).
    fn open_as(name: &str, muted: bool, protocol: u16) -> io::Result<AfPacket> {
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
        let one: libc::c_int = 1;
        set_opt(raw, libc::SOL_PACKET, PACKET_AUXDATA, &one, "PACKET_AUXDATA", name)?;
        set_opt(raw, libc::SOL_PACKET, PACKET_VNET_HDR, &one, "PACKET_VNET_HDR", name)?;
        // Best effort, as for the send buffer below.
        if set_opt(
            raw,
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            &RCVBUF,
            "SO_RCVBUFFORCE",
            name,
        )
        .is_err()
        {
            let _ = set_opt(raw, libc::SOL_SOCKET, libc::SO_RCVBUF, &RCVBUF, "SO_RCVBUF", name);
        }
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
        // Best effort: older kernels lack it, and then outgoing frames are skipped on receipt.
        let _ = set_opt(
            raw,
            libc::SOL_PACKET,
            PACKET_IGNORE_OUTGOING,
            &one,
            "PACKET_IGNORE_OUTGOING",
            name,
        );
        // SAFETY: sockaddr_ll and mmsghdr are plain data; zeroed is valid, and every pointer
        // in a header is set before each call.
        let (rx_names, rx_msgs) = unsafe {
            (
                vec![std::mem::zeroed::<libc::sockaddr_ll>(); RX_BATCH],
                (0..RX_BATCH).map(|_| std::mem::zeroed::<libc::mmsghdr>()).collect(),
            )
        };
        let mut sock = AfPacket {
            fd,
            rx_bufs: (0..RX_BATCH).map(|_| Vec::with_capacity(RX_BUF)).collect(),
            rx_vnet: vec![[0u8; vnet::LEN]; RX_BATCH],
            rx_names,
            rx_ctrl: vec![[0u8; RX_CTRL]; RX_BATCH],
            rx_iov: Vec::new(),
            rx_msgs,
            tx: Vec::new(),
            spent: Vec::new(),
            iov: Vec::with_capacity(2 * Self::TX_BATCH),
            msgs: Vec::with_capacity(Self::TX_BATCH),
            tx_dropped: 0,
            sent: TxTotals::default(),
            rx_drops: RxDrops::default(),
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
        if muted {
            let drop_all = [libc::sock_filter {
                code: 0x06,
                jt: 0,
                jf: 0,
                k: 0,
            }];
            set_program(raw, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &drop_all, name)?;
        }
        // SAFETY: sockaddr_ll is plain data; zeroed is valid and the fields are set below.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = protocol.to_be();
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
        sock.point_rx_headers();
        Ok(sock)
    }

    /// Points each receive header at its buffer, address and control space, once: the vectors
    /// are never resized afterwards, so their heap storage, and these pointers, stay valid
    /// when the value moves (a buffer handed on is replaced, and its vector re-pointed, by
    /// `take_frame`).
    fn point_rx_headers(&mut self) {
        // Two vectors per message: the virtio-net header, then the frame.
        self.rx_iov = self
            .rx_vnet
            .iter_mut()
            .zip(self.rx_bufs.iter_mut())
            .flat_map(|(h, b)| {
                [
                    libc::iovec {
                        iov_base: h.as_mut_ptr().cast(),
                        iov_len: h.len(),
                    },
                    libc::iovec {
                        iov_base: b.as_mut_ptr().cast(),
                        iov_len: b.capacity(),
                    },
                ]
            })
            .collect();
        for (i, m) in self.rx_msgs.iter_mut().enumerate() {
            let h = &mut m.msg_hdr;
            h.msg_name = (&mut self.rx_names[i] as *mut libc::sockaddr_ll).cast();
            h.msg_iov = &mut self.rx_iov[2 * i];
            h.msg_iovlen = 2;
            h.msg_control = self.rx_ctrl[i].as_mut_ptr().cast();
        }
    }

    /// The `len` bytes the kernel put in receive buffer `i`, in a buffer of the caller's: a
    /// frame that fits a small buffer (with room for a VLAN tag) is copied into one; a larger
    /// one (a super-frame) keeps the buffer it was received in, and the slot gets a fresh one
    /// from `pool`: no copy of 64 KiB.
    fn take_frame(&mut self, i: usize, len: usize, pool: &mut FramePool) -> Vec<u8> {
        let slot = &mut self.rx_bufs[i];
        debug_assert!(len <= slot.capacity());
        if len + 4 <= crate::pool::SMALL {
            let mut small = pool.take(len + 4);
            // SAFETY: the kernel wrote the first `len` bytes of the slot's storage (recvmmsg's
            // length for this message, within the iovec's capacity), so they are initialised.
            small.extend_from_slice(unsafe { std::slice::from_raw_parts(slot.as_ptr(), len) });
            return small;
        }
        let mut frame = std::mem::replace(slot, pool.take(RX_BUF));
        // SAFETY: as above, the kernel initialised the first `len` bytes, within capacity.
        unsafe { frame.set_len(len) };
        let fresh = &mut self.rx_bufs[i];
        fresh.clear();
        self.rx_iov[2 * i + 1] = libc::iovec {
            iov_base: fresh.as_mut_ptr().cast(),
            iov_len: fresh.capacity(),
        };
        frame
    }

    /// The interface index the socket is bound to (resolved once, at open).
    pub fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// Makes this socket the first member (receive queue 0) of a new fanout group steered by
    /// a classic BPF program; returns the group (its id, which the kernel chose, with the
    /// type and flags every member joins with). Until a program is set, every frame goes to
    /// this socket, as before. Outgoing frames are left out where the kernel can (6.2+); an
    /// older kernel's queues skip them as the socket does.
    pub fn start_fanout(&self) -> io::Result<u32> {
        let fd = self.fd.as_raw_fd();
        let mut kind = PACKET_FANOUT_CBPF | PACKET_FANOUT_FLAG_IGNORE_OUTGOING;
        let join = |kind: u32| {
            let arg = (kind | PACKET_FANOUT_FLAG_UNIQUEID) << 16;
            set_opt(fd, libc::SOL_PACKET, PACKET_FANOUT, &arg, "PACKET_FANOUT", &self.name)
        };
        if join(kind).is_err() {
            kind = PACKET_FANOUT_CBPF;
            join(kind)?;
        }
        let mut got: u32 = 0;
        let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
        // SAFETY: `got` is a u32 of the length passed, filled by the kernel.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_PACKET,
                PACKET_FANOUT,
                (&mut got as *mut u32).cast(),
                &mut len,
            )
        };
        check(r, "PACKET_FANOUT (read)", &self.name)?;
        Ok((got & 0xffff) | (kind << 16))
    }

    /// Opens a receive queue of interface `name`: a socket joined to fanout group `group` (as
    /// [`AfPacket::start_fanout`] returned it) as its next member, which takes no frame before
    /// it has joined (it would take a copy of every frame the group takes).
    pub fn open_queue(name: &str, group: u32) -> io::Result<AfPacket> {
        let sock = AfPacket::open_muted(name, true)?;
        let fd = sock.fd.as_raw_fd();
        let arg = group;
        set_opt(fd, libc::SOL_PACKET, PACKET_FANOUT, &arg, "PACKET_FANOUT (join)", name)?;
        let none: libc::c_int = 0;
        set_opt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_DETACH_FILTER,
            &none,
            "SO_DETACH_FILTER",
            name,
        )?;
        Ok(sock)
    }

    /// Sets the steering program of this socket's fanout group (every member's): a frame
    /// goes to member `result mod members`, members numbered in the order they joined.
    /// Replacing a program waits for an RCU grace period in the kernel (milliseconds): a
    /// caller on the frames' path does that on another thread, through
    /// [`AfPacket::steering_handle`] and [`steer_fd`].
    pub fn steer(&self, program: &[libc::sock_filter]) -> io::Result<()> {
        steer_fd(self.fd.as_raw_fd(), program, &self.name)
    }

    /// A second descriptor of this socket, for [`steer_fd`] on another thread.
    pub fn steering_handle(&self) -> io::Result<OwnedFd> {
        self.fd.try_clone()
    }

    /// Reads and clears the socket's pending error (ENETDOWN after its interface went down or
    /// away), which otherwise keeps it polling with POLLERR.
    pub fn take_error(&self) -> Option<io::Error> {
        take_error(self.fd.as_raw_fd())
    }
}

impl Device for AfPacket {
    fn name(&self) -> &str {
        &self.name
    }

    fn ifindex(&self) -> i32 {
        AfPacket::ifindex(self)
    }

    fn take_error(&self) -> Option<io::Error> {
        AfPacket::take_error(self)
    }

    fn describe(&self) -> String {
        "af_packet".to_string()
    }

    fn open_queues(&self, group: &mut Option<u32>, want: usize) -> Result<Vec<AfPacket>, String> {
        let group = match *group {
            Some(g) => g,
            None => *group.insert(self.start_fanout().map_err(|e| e.to_string())?),
        };
        (1..want)
            .map(|_| AfPacket::open_queue(&self.name, group).map_err(|e| e.to_string()))
            .collect()
    }

    fn steer(&self, program: &[libc::sock_filter]) -> Result<(), String> {
        AfPacket::steer(self, program).map_err(|e| e.to_string())
    }

    fn steering_handle(&self) -> io::Result<OwnedFd> {
        AfPacket::steering_handle(self)
    }

    fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn recv_batch(&mut self, pool: &mut FramePool, sink: &mut dyn FnMut(Frame)) -> usize {
        let mut frames = 0;
        loop {
            // The kernel rewrites these three on return; the pointers set at open stand.
            for m in &mut self.rx_msgs {
                m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
                m.msg_hdr.msg_controllen = RX_CTRL as _;
                m.msg_hdr.msg_flags = 0;
            }
            // SAFETY: `rx_msgs` holds RX_BATCH headers whose name, iovec and control pointers
            // point into the heap storage of this value's own vectors (set in `open`; none of
            // them is ever resized, so the storage never moves), alive until the call returns.
            let n = unsafe {
                libc::recvmmsg(
                    self.fd.as_raw_fd(),
                    self.rx_msgs.as_mut_ptr(),
                    RX_BATCH as u32,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            // Nothing (EAGAIN), or an error the poll reports as POLLERR and the caller reads.
            if n <= 0 {
                return frames;
            }
            let n = n as usize;
            for i in 0..n {
                let h = &self.rx_msgs[i].msg_hdr;
                if h.msg_flags & libc::MSG_TRUNC != 0 {
                    self.rx_drops.truncated += 1;
                    continue;
                }
                if self.rx_names[i].sll_pkttype == PACKET_OUTGOING {
                    continue;
                }
                let aux = auxdata(h);
                // The length returned counts the virtio-net header too.
                let Some(len) = (self.rx_msgs[i].msg_len as usize).checked_sub(vnet::LEN) else {
                    self.rx_drops.truncated += 1;
                    continue;
                };
                let frame = self.take_frame(i, len.min(RX_BUF), pool);
                match deliver(frame, &self.rx_vnet[i], aux, sink) {
                    Ok(()) => frames += 1,
                    Err((_, frame)) => {
                        self.rx_drops.bad_offload += 1;
                        pool.give(frame);
                    }
                }
            }
            if n < RX_BATCH || frames >= crate::RX_TURN {
                return frames;
            }
        }
    }

    fn send(&mut self, frame: &[u8], offload: Offload) {
        self.send_owned(Frame::new(frame.to_vec(), offload));
    }

    fn send_owned(&mut self, Frame { bytes: frame, offload }: Frame) {
        self.tx.push(TxFrame {
            vnet: vnet::build(&offload, &frame),
            segments: offload.segments(&frame) as u32,
            wire_bytes: offload.wire_len(&frame) as u32,
            bytes: frame,
        });
        // A full batch goes at once (one attempt per batch while the device is busy); what
        // flush drops is kept in `tx_dropped` for the caller's next flush to report.
        if self.tx.len() % Self::TX_BATCH == 0 {
            let dropped = self.flush();
            self.tx_dropped += dropped as u64;
        }
    }

    fn ring_drops(&mut self) -> u64 {
        // tpacket_stats: packets, drops (u32 each), the second the frames the receive buffer
        // had no room for; reading resets them.
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
            self.iov.extend(self.tx[..n].iter().flat_map(|f| {
                [
                    libc::iovec {
                        iov_base: f.vnet.as_ptr() as *mut _,
                        iov_len: vnet::LEN,
                    },
                    libc::iovec {
                        iov_base: f.bytes.as_ptr() as *mut _,
                        iov_len: f.bytes.len(),
                    },
                ]
            }));
            // SAFETY: mmsghdr is plain data; zeroed is valid, and the iovec pointers set below
            // point into `self.iov`, which is not touched again until after the call.
            self.msgs.resize_with(n, || unsafe { std::mem::zeroed() });
            for (m, v) in self.msgs.iter_mut().zip(self.iov.chunks_exact_mut(2)) {
                m.msg_hdr.msg_iov = v.as_mut_ptr();
                m.msg_hdr.msg_iovlen = 2;
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
                    self.sent.packets += u64::from(f.segments);
                    self.sent.bytes += u64::from(f.wire_bytes);
                    self.spent.push(f.bytes);
                }
                continue;
            }
            match io::Error::last_os_error().raw_os_error() {
                // The socket's send buffer or the device queue is full: the frame was not sent
                // (or the qdisc dropped it), so keep it and the rest for the next flush.
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) => break,
                // Refused for good (link down, too big): drop that frame and go on.
                _ => {
                    let f = self.tx.remove(0);
                    self.spent.push(f.bytes);
                    self.tx_dropped += 1;
                }
            }
        }
        if self.tx.len() > Self::TX_PENDING_MAX {
            let excess = self.tx.len() - Self::TX_PENDING_MAX;
            self.spent.extend(self.tx.drain(..excess).map(|f| f.bytes));
            self.tx_dropped += excess as u64;
        }
        std::mem::take(&mut self.tx_dropped) as usize
    }

    fn tx_pending(&self) -> usize {
        self.tx.len()
    }

    fn takes_offloads(&self) -> bool {
        true
    }

    fn recycle(&mut self, sink: &mut dyn FnMut(Vec<u8>)) {
        self.spent.drain(..).for_each(sink);
    }

    fn take_sent(&mut self) -> TxTotals {
        std::mem::take(&mut self.sent)
    }

    fn take_rx_drops(&mut self) -> RxDrops {
        std::mem::take(&mut self.rx_drops)
    }
}

/// Sets the steering program of the fanout group socket `fd` (interface `name`) is in.
pub fn steer_fd(fd: RawFd, program: &[libc::sock_filter], name: &str) -> io::Result<()> {
    set_program(fd, libc::SOL_PACKET, PACKET_FANOUT_DATA, program, name)
}

/// Attaches a classic BPF `program` with option `opt` (a socket filter, or a fanout group's
/// steering program).
fn set_program(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    program: &[libc::sock_filter],
    name: &str,
) -> io::Result<()> {
    let len = u16::try_from(program.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("{name}: BPF program too long")))?;
    let prog = libc::sock_fprog {
        len,
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    // The kernel copies the instructions during the call; `program` outlives it.
    set_opt(fd, level, opt, &prog, "BPF program", name)
}

/// The frame's `tp_status`, VLAN TCI and TPID from its PACKET_AUXDATA control message, or zeros
/// (nothing to restore) if it carries none.
fn auxdata(h: &libc::msghdr) -> AuxData {
    // SAFETY: `h` was filled by recvmmsg with `msg_controllen` valid bytes of control messages
    // in a buffer of RX_CTRL bytes; the CMSG macros stay within that length, and the auxdata is
    // read unaligned from inside the message it belongs to.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            let m = &*c;
            if m.cmsg_level == libc::SOL_PACKET
                && m.cmsg_type == PACKET_AUXDATA
                && m.cmsg_len as usize >= libc::CMSG_LEN(std::mem::size_of::<libc::tpacket_auxdata>() as u32) as usize
            {
                let a: libc::tpacket_auxdata = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                return AuxData {
                    status: a.tp_status,
                    vlan_tci: a.tp_vlan_tci,
                    vlan_tpid: a.tp_vlan_tpid,
                };
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    AuxData::default()
}
