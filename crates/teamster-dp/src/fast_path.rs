//! A forwarding plane in the kernel that executes the switch's decisions: the seam where the
//! kernel fast path (`teamster-kernel`'s tcx program) plugs into this data plane.
//!
//! Model. With a fast path, the [`crate::platform::Kernel`] platform opens each interface as a
//! [`Punted`] device: the fast path is attached to the interface and switches its frames in the
//! kernel; what it hands to user space (the frames whose decision changes the engine's state,
//! see `teamster-kernel`) arrives in the device's [`PuntQueue`] and goes through this data plane's
//! switch as any received frame does; what the switch sends (those frames' outputs, the team's
//! RARPs and LACPDUs) leaves through a packet socket that receives nothing. After every turn the
//! data plane calls [`FastPath::sync`]: the fast path brings its tables to the switch's state
//! (a failover or a Load-Based Teaming move is then in the kernel before the next turn) and
//! adds what the kernel forwarded to the switch's counters and the team's meters.

use crate::afpacket::AfPacket;
use crate::device::{Device, RxDrops, TxTotals};
use crate::extra_drops::ExtraDrops;
use crate::flag::Flag;
use crate::pool::FramePool;
use crate::Frame;
use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use teamster_core::ioc::{NodeId, Tree};
use teamster_core::offload::Offload;
use teamster_core::switch::{Ingress, Switch};
use teamster_core::teaming::{PortId, UplinkId};
use teamster_core::units::Bandwidth;
use teamster_core::Instant;

/// The attached interfaces of the switch's ports and uplinks, by name, and NetIOC as it stands.
#[derive(Debug, Default)]
pub struct Bound<'a> {
    pub ports: Vec<(PortId, &'a str)>,
    pub uplinks: Vec<(UplinkId, &'a str)>,
    pub ioc: Option<IocView<'a>>,
}

/// NetIOC as a fast path applies it: the tree, each port's leaf in it, each uplink's capacity.
#[derive(Debug)]
pub struct IocView<'a> {
    pub tree: &'a Tree,
    pub leaves: Vec<(PortId, NodeId)>,
    pub capacities: Vec<(UplinkId, Bandwidth)>,
}

/// What one [`FastPath::sync`] did: the drops the kernel counted that are the data plane's own
/// (oversize, tx_error, queue_full), by port or uplink, for the data plane to add to its
/// counts; and what failed, if anything (the rest was still done).
#[derive(Debug, Default)]
pub struct Synced {
    pub extra: Vec<(Ingress, ExtraDrops)>,
    pub error: Option<String>,
    /// What the fast path did that the event log should show.
    pub events: Vec<String>,
}

/// A fast path; see the module documentation.
pub trait FastPath: Send + Sync + 'static {
    /// Puts the fast path on `interface`; what it hands to user space from there arrives in
    /// the returned queue. An error names what the interface or the kernel lacks.
    fn attach(&self, interface: &str) -> io::Result<Arc<PuntQueue>>;
    /// Takes the fast path off `interface` if it is still the attachment that gave `queue`
    /// (closed by the switch, or gone; the interface may have been attached again since, and
    /// that attachment stays).
    fn detach(&self, interface: &str, queue: &Arc<PuntQueue>);
    /// Brings the kernel's tables and NetIOC's queues to `switch`'s state over `bound`, and adds
    /// what the kernel forwarded since the last call to the switch's counters and the team's
    /// meters.
    fn sync(&self, switch: &mut Switch, bound: &Bound<'_>, now: Instant) -> Synced;
    /// What it is, for the start-up log.
    fn describe(&self) -> String;
    /// The priority of the frames the switch sends itself through the fast path's interfaces
    /// (its RARPs and LACPDUs, and the frames it switched for the fast path), so that a qdisc
    /// the fast path put on an uplink can give them their own queue; 0 for none.
    fn send_priority(&self) -> u32 {
        0
    }
}

/// Frames the fast path handed to user space from one interface, waiting for the data plane:
/// bounded ([`PuntQueue::MAX`]; past it the newest are dropped and counted), with a flag the
/// poll loop waits on.
#[derive(Debug)]
pub struct PuntQueue {
    frames: Mutex<VecDeque<Vec<u8>>>,
    readable: Flag,
    dropped: AtomicU64,
}

impl PuntQueue {
    /// Frames held at most: a burst of LACPDUs, ARPs and MAC changes, never a flow's worth.
    pub const MAX: usize = 1024;

    pub fn new() -> io::Result<PuntQueue> {
        Ok(PuntQueue {
            frames: Mutex::new(VecDeque::new()),
            readable: Flag::new()?,
            dropped: AtomicU64::new(0),
        })
    }

    /// Queues `frame` (as it was on the wire), or counts it dropped if the queue is full.
    pub fn push(&self, frame: Vec<u8>) {
        let mut q = self.frames.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() >= Self::MAX {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        q.push_back(frame);
        self.readable.set();
    }

    fn pop(&self, at_most: usize, pool: &mut FramePool, sink: &mut dyn FnMut(Frame)) -> usize {
        let mut q = self.frames.lock().unwrap_or_else(|e| e.into_inner());
        let n = q.len().min(at_most);
        for f in q.drain(..n) {
            let mut buf = pool.take(f.len());
            buf.extend_from_slice(&f);
            sink(Frame::new(buf, Offload::NONE));
        }
        if q.is_empty() {
            self.readable.clear();
        }
        n
    }
}

/// An interface the fast path switches: frames in from its [`PuntQueue`], frames out through a
/// packet socket that receives nothing.
pub struct Punted {
    tx: AfPacket,
    punts: Arc<PuntQueue>,
    fast: Arc<dyn FastPath>,
}

impl Punted {
    /// Attaches `fast` to `interface` and opens its sending socket.
    pub fn open(interface: &str, fast: Arc<dyn FastPath>) -> io::Result<Punted> {
        let tx = AfPacket::open_send_only(interface)?;
        if fast.send_priority() != 0 {
            tx.set_priority(fast.send_priority())?;
        }
        let punts = fast.attach(interface)?;
        Ok(Punted { tx, punts, fast })
    }
}

impl Drop for Punted {
    fn drop(&mut self) {
        self.fast.detach(self.tx.name(), &self.punts);
    }
}

impl Device for Punted {
    fn name(&self) -> &str {
        self.tx.name()
    }

    fn raw_fd(&self) -> RawFd {
        self.punts.readable.raw_fd()
    }

    fn recv_batch(&mut self, pool: &mut FramePool, sink: &mut dyn FnMut(Frame)) -> usize {
        self.punts.pop(crate::RX_TURN, pool, sink)
    }

    fn send(&mut self, frame: &[u8], offload: Offload) {
        self.tx.send(frame, offload)
    }

    fn send_owned(&mut self, frame: Frame) {
        self.tx.send_owned(frame)
    }

    fn recycle(&mut self, sink: &mut dyn FnMut(Vec<u8>)) {
        self.tx.recycle(sink)
    }

    fn takes_offloads(&self) -> bool {
        self.tx.takes_offloads()
    }

    fn flush(&mut self) -> usize {
        self.tx.flush()
    }

    fn tx_pending(&self) -> usize {
        self.tx.tx_pending()
    }

    fn ring_drops(&mut self) -> u64 {
        self.punts.dropped.swap(0, Ordering::Relaxed)
    }

    fn take_sent(&mut self) -> TxTotals {
        self.tx.take_sent()
    }

    fn take_rx_drops(&mut self) -> RxDrops {
        RxDrops::default()
    }

    fn ifindex(&self) -> i32 {
        self.tx.ifindex()
    }

    fn take_error(&self) -> Option<io::Error> {
        self.tx.take_error()
    }

    fn describe(&self) -> String {
        format!("{} (kernel fast path: {})", self.tx.name(), self.fast.describe())
    }
}
