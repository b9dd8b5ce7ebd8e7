//! AF_XDP: a [`Device`] whose frames move through memory shared with the kernel.
//!
//! Model. One AF_XDP socket is bound to receive queue 0 of the interface, with a UMEM of
//! [`RX_FRAMES`] + [`TX_FRAMES`] frames of [`FRAME`] bytes: receive frames first, then transmit.
//! A receive frame is always in exactly one place: on the fill ring (offered to the kernel), in
//! the kernel, on the receive ring (filled, for us), or in our hands during `recv_batch`, which
//! hands it to the sink straight from the UMEM and puts it back on the fill ring. A transmit
//! frame is free (on our free list), or on the transmit ring, or in the kernel, or on the
//! completion ring; `send` copies a frame into a free one and queues its descriptor, and the
//! completion ring gives frames back and tells what went out (`take_sent`). No frame is
//! allocated per packet. An XDP program ([`prog`]) redirects every frame of queue 0 to the
//! socket; it is attached while the backend lives and detached when it is dropped (or the
//! process dies), and an interface that already has a program is refused.
//!
//! The kernel tries zero-copy first and falls back to copy mode where the driver cannot (veth
//! and any driver without AF_XDP support); [`AfXdp::mode`] says which, and in which XDP mode
//! (native or generic) the program runs. Transmit in copy mode happens in `sendto`, at most 32
//! frames per call, so [`Device::flush`] kicks until the kernel has taken every queued frame or
//! stops making progress (the device is busy: frames stay queued, [`Device::tx_pending`] says
//! so); with `XDP_USE_NEED_WAKEUP` the kernel says when a kick is needed at all, and a zero-copy
//! driver's fill ring is woken the same way.
//!
//! It takes no offload requests ([`Device::takes_offloads`] is false): the data plane finishes
//! checksums and cuts super-frames before handing frames over (a partial checksum that still
//! comes is finished in the UMEM, a super-frame refused and counted), and every frame it
//! receives is reported complete ([`Offload::NONE`]). Native XDP on veth turns GSO off on the
//! peer while the program is attached, so a VM's stack sends MTU-sized frames.
//!
//! Refused, with the interface named: an interface with more than one receive queue (frames on
//! the others would bypass the switch; set one queue with `ethtool -L`), and an MTU larger than
//! one frame holds (multi-buffer AF_XDP for jumbo frames is not used). Drops: frames the kernel
//! could not place (no fill frame, receive ring full) are `ring_drops`, read from
//! `XDP_STATISTICS`; a descriptor outside the receive half of the UMEM is counted as `bad` and
//! its frame not handed on.
//!
//! Frames arrive as XDP saw them, with nothing beside them (AF_PACKET's auxiliary data has no
//! counterpart). Two things follow. A TCP or UDP checksum that a local sender left to offload
//! (CHECKSUM_PARTIAL, as a VM's or a namespace's stack does on veth and tap) arrives holding
//! only the pseudo-header's sum and would leave the switch wrong; so with
//! [`Options::fill_checksums`] (the default) each received TCP/UDP frame whose checksum field
//! holds exactly that mark has its checksum completed in place, in the UMEM, before it is handed
//! on; other frames cost only the pseudo-header's sum, and a wrong checksum from a wire stays
//! wrong. And a VLAN tag that travels beside the frame rather than in it never reaches the
//! socket: the frame arrives untagged. That happens on a NIC with rx-vlan-offload on, and on a
//! veth whose peer has a VLAN device over it with tx-vlan-offload on (XDP on veth leaves the tag
//! in the skb, readable only through a metadata kfunc, which this program does not call; taps
//! carry tags in the frame). Where tagged frames are expected on such an interface, turn that
//! offload off or use AF_PACKET, which puts the tag back. This kernel has no VLAN devices, so it
//! is not tested here.

mod open;
mod prog;
mod rings;

pub use open::check_interface;
pub use prog::AttachMode;

use crate::pool::FramePool;
use crate::{Device, Frame, RxDrops, TxTotals};
use open::get_opt;
use prog::XdpAttach;
use rings::{Mmap, Ring};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use teamster_core::offload::Offload;

/// One UMEM frame (aligned chunks; a page).
pub const FRAME: usize = 4096;
/// Receive frames in the UMEM (its first part), and entries on the fill and receive rings:
/// room for the loop to be descheduled about 5 ms at 400,000 frames/s (twice as many made no
/// difference measured at 1500 B: the drops come from a loop starved for longer).
pub const RX_FRAMES: u32 = 2048;
/// Transmit frames (the rest of the UMEM), and entries on the transmit and completion rings.
pub const TX_FRAMES: u32 = 2048;
/// Headroom the kernel leaves before a received frame in each chunk (XDP_PACKET_HEADROOM).
const XDP_HEADROOM: usize = 256;
/// The longest frame one receive chunk holds.
pub const MAX_FRAME: usize = FRAME - XDP_HEADROOM;
/// The largest MTU accepted: a VLAN-tagged frame of that MTU still fits one chunk.
pub const MAX_MTU: usize = MAX_FRAME - 18;
/// Frames taken from the receive ring per pass.
const RX_BATCH: u32 = 64;
/// Frames queued before the transmit ring is kicked without waiting for the flush.
pub const TX_BATCH: usize = 64;
/// How long a busy queue is retried at bind, for a socket on it that is still being released.
const BIND_RETRY: std::time::Duration = std::time::Duration::from_millis(100);
/// A transmit frame whose descriptor the kernel dropped (NET_XMIT_DROP): its completion is not
/// counted as sent.
const DROPPED: u32 = 1 << 31;

/// How to open an [`AfXdp`].
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Complete received TCP/UDP checksums left to offload (see the module documentation).
    pub fill_checksums: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { fill_checksums: true }
    }
}

/// An AF_XDP socket on queue 0 of one interface, with its program, UMEM and rings.
pub struct AfXdp {
    // Drop order is declaration order: the program is detached first, then the rings unmapped,
    // the socket closed and the UMEM unmapped.
    prog: XdpAttach,
    rx: Ring<libc::xdp_desc>,
    tx: Ring<libc::xdp_desc>,
    fill: Ring<u64>,
    comp: Ring<u64>,
    fd: OwnedFd,
    umem: Mmap,
    /// Transmit frames not in use (UMEM addresses), and each transmit frame's length in flight.
    tx_free: Vec<u64>,
    tx_len: Vec<u32>,
    /// Receive frames to give back to the fill ring (normally emptied at once).
    refill: Vec<u64>,
    /// Buffers of frames sent (copied into the UMEM), for the caller to reuse.
    spent: Vec<Vec<u8>>,
    /// Descriptors pushed since the transmit ring was last published and kicked.
    unkicked: usize,
    zero_copy: bool,
    options: Options,
    tx_dropped: u64,
    sent: TxTotals,
    rx_drops: RxDrops,
    /// `rx_dropped + rx_ring_full` from XDP_STATISTICS when last read.
    stats_seen: u64,
    name: String,
    ifindex: i32,
}

// SAFETY: the raw pointers inside point into this value's own mappings, which move with it and
// are used only through `&mut self` (or `&self` for reads the kernel orders), so moving the value
// to another thread is sound.
unsafe impl Send for AfXdp {}

impl AfXdp {
    /// The interface index the socket is bound to (resolved once, at open).
    pub fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// How frames move: the program's XDP mode and the socket's copy or zero-copy mode.
    pub fn mode(&self) -> String {
        let copy = if self.zero_copy { "zero-copy" } else { "copy" };
        format!("af_xdp, {} XDP, {copy} mode", self.prog.mode.as_str())
    }

    /// The XDP mode the program runs in.
    pub fn attach_mode(&self) -> AttachMode {
        self.prog.mode
    }

    /// Whether the socket is bound in zero-copy mode.
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// Reads and clears the socket's pending error (ENETDOWN once its interface went away).
    pub fn take_error(&self) -> Option<io::Error> {
        crate::sockopt::take_error(self.fd.as_raw_fd())
    }

    /// Takes transmit frames back from the completion ring, counting what went out.
    fn reclaim(&mut self) {
        let n = self.comp.available();
        for i in 0..n {
            let addr = self.comp.peek(i);
            let Some(slot) = self.tx_slot(addr) else {
                continue;
            };
            let len = std::mem::take(&mut self.tx_len[slot]);
            if len & DROPPED == 0 {
                self.sent.packets += 1;
                self.sent.bytes += u64::from(len);
            }
            self.tx_free.push(addr);
        }
        self.comp.release(n);
    }

    /// The transmit frame an address names, if it is one (the kernel gives back what it was
    /// given, but an address is checked before it indexes anything).
    fn tx_slot(&self, addr: u64) -> Option<usize> {
        let base = u64::from(RX_FRAMES) * FRAME as u64;
        let end = base + u64::from(TX_FRAMES) * FRAME as u64;
        (addr >= base && addr < end && addr % FRAME as u64 == 0).then(|| ((addr - base) / FRAME as u64) as usize)
    }

    /// Gives received frames back to the fill ring, and wakes the driver if it asks.
    fn refill_ring(&mut self) {
        let n = (self.fill.free() as usize).min(self.refill.len());
        for addr in self.refill.drain(..n) {
            self.fill.push(addr);
        }
        self.fill.publish();
        if n > 0 && self.fill.needs_wakeup() {
            // SAFETY: a zero-length receive on our socket only wakes the driver's receive path.
            unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    std::ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
        }
    }

    /// Publishes queued descriptors and kicks the kernel until it has taken all of them or stops
    /// taking any; a descriptor it dropped (EBUSY) is marked so its completion is not counted.
    fn kick(&mut self) {
        self.tx.publish();
        self.unkicked = 0;
        loop {
            let before = self.tx.unconsumed();
            if before == 0 {
                break;
            }
            if self.tx.needs_wakeup() || !self.zero_copy {
                // SAFETY: a zero-length send on our socket only asks the kernel to transmit
                // what the transmit ring holds.
                let r = unsafe {
                    libc::sendto(
                        self.fd.as_raw_fd(),
                        std::ptr::null(),
                        0,
                        libc::MSG_DONTWAIT,
                        std::ptr::null(),
                        0,
                    )
                };
                if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EBUSY) {
                    // The device dropped the last frame the kernel took (NET_XMIT_DROP).
                    if let Some(slot) = self.tx_slot(self.tx.last_taken().addr) {
                        self.tx_len[slot] |= DROPPED;
                        self.tx_dropped += 1;
                    }
                }
            }
            self.reclaim();
            if self.tx.unconsumed() >= before {
                break;
            }
        }
    }

    /// Copies `frame` into a free transmit frame, finishes a partial checksum there, and queues
    /// it; drops it (counted) if it does not fit or every transmit frame is in flight.
    fn queue(&mut self, frame: &[u8], mut offload: Offload) {
        if frame.len() > FRAME {
            self.tx_dropped += 1;
            return;
        }
        if self.tx_free.is_empty() {
            self.reclaim();
        }
        // The ring holds as many entries as there are transmit frames, so a free frame means a
        // free entry (`free` refreshes our view of the kernel's progress when it looks full).
        if self.tx_free.is_empty() || self.tx.free() == 0 {
            // Every transmit frame is in flight: the device is that far behind.
            self.tx_dropped += 1;
            return;
        }
        let Some(addr) = self.tx_free.pop() else {
            return;
        };
        // SAFETY: `addr` is a free transmit chunk (FRAME bytes inside the UMEM) that the kernel
        // does not use until its descriptor is published below, and `frame` fits in it; the
        // slice made of it is the only reference to that chunk and ends before the push.
        let copy = unsafe {
            std::ptr::copy_nonoverlapping(frame.as_ptr(), self.umem.as_ptr().add(addr as usize), frame.len());
            std::slice::from_raw_parts_mut(self.umem.as_ptr().add(addr as usize), frame.len())
        };
        offload.finish_checksum(copy);
        if let Some(slot) = self.tx_slot(addr) {
            self.tx_len[slot] = frame.len() as u32;
        }
        self.tx.push(libc::xdp_desc {
            addr,
            len: frame.len() as u32,
            options: 0,
        });
        self.unkicked += 1;
        if self.unkicked >= TX_BATCH {
            self.kick();
        }
    }
}

impl Device for AfXdp {
    fn ifindex(&self) -> i32 {
        AfXdp::ifindex(self)
    }

    fn take_error(&self) -> Option<io::Error> {
        AfXdp::take_error(self)
    }

    /// AF_XDP's socket polls writable whenever its transmit ring is under half full, which
    /// says nothing of a device that is down: a caller waiting on it would spin.
    fn pollout_means_room(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        self.mode()
    }

    fn noteworthy(&self) -> bool {
        true
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn recv_batch(&mut self, pool: &mut FramePool, sink: &mut dyn FnMut(Frame)) -> usize {
        let mut frames = 0;
        let rx_end = u64::from(RX_FRAMES) * FRAME as u64;
        loop {
            let n = self.rx.available().min(RX_BATCH);
            for i in 0..n {
                let d = self.rx.peek(i);
                let (addr, len) = (d.addr, d.len as usize);
                let start = addr % FRAME as u64;
                let fits = addr < rx_end && start as usize + len <= FRAME && len >= 14;
                if fits && d.options & libc::XDP_PKT_CONTD == 0 {
                    // SAFETY: [addr, addr + len) lies inside one receive chunk of the UMEM
                    // (checked above), which the kernel filled and will not touch again until
                    // the chunk is back on the fill ring, after the sink has returned; no other
                    // reference to that chunk exists meanwhile.
                    let frame = unsafe { std::slice::from_raw_parts_mut(self.umem.as_ptr().add(addr as usize), len) };
                    if self.options.fill_checksums {
                        teamster_core::offload::complete_partial_l4_checksum(frame);
                    }
                    // Copied out: the chunk goes back to the kernel now, while the frame may
                    // wait in a queue.
                    let mut buf = pool.take(len);
                    buf.extend_from_slice(frame);
                    sink(Frame::complete(buf));
                    frames += 1;
                } else {
                    // Not readable as one frame: counted as cut, and not handed on.
                    self.rx_drops.truncated += 1;
                }
                if addr < rx_end {
                    self.refill.push(addr - start);
                }
            }
            self.rx.release(n);
            if n > 0 {
                self.refill_ring();
            }
            if n < RX_BATCH || frames >= crate::RX_TURN {
                return frames;
            }
        }
    }

    fn send(&mut self, frame: &[u8], offload: Offload) {
        // The data plane completes and segments frames for a backend that takes no offloads; a
        // partial checksum that still comes is finished in the UMEM, a super-frame refused.
        if offload.gso.is_some() {
            self.tx_dropped += 1;
            return;
        }
        self.queue(frame, offload);
    }

    fn send_owned(&mut self, frame: Frame) {
        self.send(&frame.bytes, frame.offload);
        // Copied into the UMEM: the buffer goes back to the caller's pool at once.
        self.spent.push(frame.bytes);
    }

    fn recycle(&mut self, sink: &mut dyn FnMut(Vec<u8>)) {
        self.spent.drain(..).for_each(sink);
    }

    fn flush(&mut self) -> usize {
        self.reclaim();
        self.kick();
        std::mem::take(&mut self.tx_dropped) as usize
    }

    fn tx_pending(&self) -> usize {
        // Queued and not yet published, and published but not yet taken by the kernel.
        self.unkicked + self.tx.unconsumed() as usize
    }

    fn ring_drops(&mut self) -> u64 {
        // SAFETY: xdp_statistics is plain data; zeroed is valid.
        let Ok((s, _)) = get_opt(self.fd.as_raw_fd(), libc::XDP_STATISTICS, unsafe {
            std::mem::zeroed::<libc::xdp_statistics>()
        }) else {
            return 0;
        };
        // The kernel's counts only grow (they are not reset by reading).
        let total = s.rx_dropped + s.rx_ring_full;
        let new = total.saturating_sub(self.stats_seen);
        self.stats_seen = total;
        new
    }

    fn take_sent(&mut self) -> TxTotals {
        self.reclaim();
        std::mem::take(&mut self.sent)
    }

    fn take_rx_drops(&mut self) -> RxDrops {
        std::mem::take(&mut self.rx_drops)
    }
}
