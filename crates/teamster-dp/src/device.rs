//! Frame I/O on one interface: the data plane's device seam.
//!
//! Model. A [`Device`] is one interface as the data plane sees it: frames arrive on it (read in
//! batches, each into a buffer of the caller's pool, with its offload request), frames are
//! queued on it and flushed in batches, and it reports what it took, what it dropped on
//! receive, and the kernel's receive-ring drops. It never decides anything: where a frame goes
//! is the switch's, when it goes the scheduler's and the pacer's. A readable descriptor
//! ([`Device::raw_fd`]) tells the poll loop when to read it.
//!
//! Implementations: [`crate::afpacket::AfPacket`] and [`crate::afxdp::AfXdp`] (behind
//! [`crate::backend::Link`], which the kernel [`crate::platform::Kernel`] opens), and
//! `teamster_dp::fake::FakeDevice`, in memory, for tests without root. The optional methods
//! (receive queues, steering) have defaults that refuse, so a device that has no such thing
//! needs no code for it.

use crate::frame::Frame;
use crate::pool::FramePool;
use std::io;
use std::os::fd::{OwnedFd, RawFd};
use teamster_core::offload::Offload;

/// Frame I/O on one interface.
///
/// A frame travels with its [`Offload`] request (a partial checksum, segmentation left to the
/// device). A backend that [takes offloads](Device::takes_offloads) receives and sends such
/// frames as they are; one that does not is handed complete frames only (the data plane
/// finishes them first) and reports [`Offload::NONE`] with every frame it receives.
pub trait Device: Send + 'static {
    /// The interface name.
    fn name(&self) -> &str;
    /// A descriptor that becomes readable when frames arrive.
    fn raw_fd(&self) -> RawFd;
    /// Hands the frames received so far to `sink`, each in a buffer from `pool` that the
    /// caller keeps, with their offload requests, about [`RX_TURN`] at most (a whole batch of
    /// the kernel's past it); returns how many.
    fn recv_batch(&mut self, pool: &mut FramePool, sink: &mut dyn FnMut(Frame)) -> usize;
    /// Queues a frame for transmission.
    fn send(&mut self, frame: &[u8], offload: Offload);
    /// Queues a frame the caller no longer needs, without copying it where the backend can.
    fn send_owned(&mut self, frame: Frame) {
        self.send(&frame.bytes, frame.offload);
    }
    /// Hands back the buffers of frames given to [`Device::send_owned`] that the kernel has
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
    /// The interface index the device is bound to (resolved once, at open).
    fn ifindex(&self) -> i32;
    /// Reads and clears the device's pending error (its interface went down or away).
    fn take_error(&self) -> Option<io::Error> {
        None
    }
    /// Whether POLLOUT on [`Device::raw_fd`] means the device can take frames again (else the
    /// caller retries on its own timer).
    fn pollout_means_room(&self) -> bool {
        true
    }
    /// What kind of device this is, for logs and status (`af_packet`, AF_XDP with its modes).
    fn describe(&self) -> String;
    /// Whether opening it is worth an `attach` event of its own (AF_XDP says which modes).
    fn noteworthy(&self) -> bool {
        false
    }
    /// Opens `want - 1` receive queues beside this device (queue 0), steered among by a
    /// program (see [`Device::steer`]), in the group `group` names (made here if None).
    fn open_queues(&self, _group: &mut Option<u32>, _want: usize) -> Result<Vec<Self>, String>
    where
        Self: Sized,
    {
        Err(format!(
            "{} receives on one queue: set backend = \"af_packet\"",
            self.describe()
        ))
    }
    /// Sets the program that steers this device's frames among its receive queues.
    fn steer(&self, _program: &[libc::sock_filter]) -> Result<(), String> {
        Ok(())
    }
    /// A second handle for [`Device::steer`]ing from another thread.
    fn steering_handle(&self) -> io::Result<OwnedFd> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "no steering on this device"))
    }
}

/// Frames per transmit batch: a caller with its own queue hands over at most this many before
/// the device is flushed.
pub const TX_BATCH: usize = 64;

/// Frames a backend hands over per [`Device::recv_batch`], about: the poll loop takes this
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
