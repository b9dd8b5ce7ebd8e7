//! Teamster's live Linux data plane.
//!
//! - [`Backend`]: frame I/O on one interface; [`afpacket::AfPacket`] (recvmmsg receive with the
//!   kernel's per-frame metadata, batched transmit) and [`afxdp::AfXdp`] (an XDP program
//!   redirecting to an AF_XDP socket, frames in a UMEM shared with the kernel) implement it;
//!   [`backend`] picks one per interface (`af_packet`, `af_xdp` or `auto`).
//! - [`sockopt`]: socket options and pending errors, with errors naming the interface.
//! - [`caps`]: the capabilities the data plane needs, checked up front.
//! - [`netlink`]: link state changes from the kernel, for failover and interfaces that come and
//!   go; [`iface`]: an interface's index, MTU and carrier, read by name.
//! - [`receive`]: restoring a received frame from the kernel's metadata (VLAN tag) with its
//!   offload request; [`vnet`]: the virtio-net header that carries that request.
//! - [`ingress_queue`]: the switch's own receive queue per interface (flow queues, new flows
//!   first, CoDel), where frames wait when the switch is short of CPU.
//! - [`pacer`]: a byte pacer per uplink; the NetIOC scheduler decides the order, the pacer the
//!   rate.
//!
//! - [`datapath`]: the poll loop that ties these to the `teamster-core` switch; the `teamster`
//!   binary adds configuration, signals and the control plane through [`datapath::Control`].

pub mod afpacket;
pub mod afxdp;
pub mod backend;
pub mod caps;
pub mod datapath;
pub mod iface;
pub mod ingress_queue;
pub mod netlink;
pub mod pacer;
pub mod pool;
pub mod receive;
pub mod sockopt;
pub mod steer;
pub mod vnet;

use pool::FramePool;
use std::os::fd::RawFd;
use teamster_core::offload::Offload;

/// Frame I/O on one interface.
///
/// A frame travels with its [`Offload`] request (a partial checksum, segmentation left to the
/// device). A backend that [takes offloads](Backend::takes_offloads) receives and sends such
/// frames as they are; one that does not is handed complete frames only (the data plane
/// finishes them first) and reports [`Offload::NONE`] with every frame it receives.
pub trait Backend: Send {
    /// The interface name.
    fn name(&self) -> &str;
    /// A descriptor that becomes readable when frames arrive.
    fn raw_fd(&self) -> RawFd;
    /// Hands the frames received so far to `sink`, each in a buffer from `pool` that the
    /// caller keeps, with their offload requests, about [`RX_TURN`] at most (a whole batch of
    /// the kernel's past it); returns how many.
    fn recv_batch(&mut self, pool: &mut FramePool, sink: &mut dyn FnMut(Vec<u8>, Offload)) -> usize;
    /// Queues a frame for transmission.
    fn send(&mut self, frame: &[u8], offload: Offload);
    /// Queues a frame the caller no longer needs, without copying it where the backend can.
    fn send_owned(&mut self, frame: Vec<u8>, offload: Offload) {
        self.send(&frame, offload);
    }
    /// Hands back the buffers of frames given to [`Backend::send_owned`] that the kernel has
    /// taken (or that were dropped), for the caller to reuse.
    fn recycle(&mut self, _sink: &mut dyn FnMut(Vec<u8>)) {}
    /// Whether frames may be sent with an offload request (partial checksum, super-frame); if
    /// not, the caller completes and segments them first.
    fn takes_offloads(&self) -> bool {
        false
    }
    /// Sends what is queued. Frames the device cannot take yet stay queued for the next flush;
    /// returns the frames dropped since the last flush (refused for good, or too many waiting).
    fn flush(&mut self) -> usize;
    /// Frames queued and not yet sent: more than zero after a flush means the device is busy,
    /// and a caller with its own queue (an uplink's scheduler) should hold back.
    fn tx_pending(&self) -> usize {
        0
    }
    /// Frames the kernel dropped before this backend could read them (receive buffer full),
    /// since the last call.
    fn ring_drops(&mut self) -> u64 {
        0
    }
    /// Frames (and their bytes) the device took since the last call: what went on the wire, a
    /// super-frame counted as its segments and their bytes.
    fn take_sent(&mut self) -> TxTotals;
    /// Frames received but not handed on (cut by the kernel, or with an offload request that
    /// does not match the frame), since the last call.
    fn take_rx_drops(&mut self) -> RxDrops;
}

/// Frames a backend hands over per [`Backend::recv_batch`], about: the poll loop takes this
/// many from one interface, then from the next, and sends what it took before it comes back.
/// Draining each socket instead made a turn as long as everything every socket held, so under
/// a load the switch could not keep up with, every frame waited for all the others: a ping
/// beside four TCP streams (offloads off, the switch short of CPU) waited p50 6.4-8.2 ms
/// draining, 4.5-5.9 ms with turns of 64 and 7.7-9.4 ms with 256 (`bench/live/RESULTS.md`).
pub const RX_TURN: usize = 64;

/// Frames and bytes sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxTotals {
    pub packets: u64,
    pub bytes: u64,
}

/// Frames a backend received and dropped itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RxDrops {
    /// Longer on the wire than what the kernel captured: forwarding it would send another frame.
    pub truncated: u64,
    /// With an offload request (virtio-net header) whose offsets or kind do not match the frame.
    pub bad_offload: u64,
}
