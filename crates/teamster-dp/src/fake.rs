//! An in-memory platform: interfaces, frames and time that a test controls, no root needed.
//!
//! Model. A [`FakePlatform`] is a small world of named interfaces, each with an index, an MTU,
//! a carrier, a MAC, a speed and whether it takes offloads. A test adds, takes down, brings up
//! and deletes interfaces (each change announced to every [`FakeLinks`], as rtnetlink would);
//! puts frames on an interface's wire for the data plane to receive ([`FakePlatform::inject`])
//! and takes what the data plane sent on it ([`FakePlatform::take_wire`]); and moves the clock
//! ([`FakePlatform::advance`]), which the data plane's pacers, schedulers and timers read.
//!
//! A [`FakeDevice`] is an interface opened by the data plane. It is bound to the index the
//! interface had when opened, so a device on an interface deleted and added again (a VM's tap
//! after a restart) neither receives nor sends; its sends are then refused (counted by
//! [`Device::flush`], as the kernel refuses them). A device takes at most
//! [`FakePlatform::set_tx_room`] frames per flush (unbounded by default), holding the rest as
//! a busy device does. Each interface has an eventfd that is readable while frames wait to be
//! received, so the data plane's poll loop runs unchanged on a fake.
//!
//! What it does not model: the kernel's receive buffer (nothing is dropped on receive), socket
//! errors (a deleted interface is announced by its link message only), receive queues and
//! steering (refused, as on AF_XDP), AF_XDP's modes.

use crate::backend::BackendChoice;
use crate::device::{Device, RxDrops, TxTotals, RX_TURN};
use crate::flag::Flag;
use crate::netlink::{Drained, LinkMsg};
use crate::platform::{LinkSource, Opened, Platform};
use crate::pool::FramePool;
use crate::Frame;
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use teamster_core::offload::Offload;
use teamster_core::wire::MacAddr;
use teamster_core::Instant;

/// A new interface's properties.
#[derive(Debug, Clone, Copy)]
pub struct FakeInterface {
    pub mtu: usize,
    pub mac: MacAddr,
    /// The speed it reports, in Mbit/s.
    pub speed_mbps: Option<u64>,
    /// Whether its device takes frames with offload requests (a tap with vnet headers does).
    pub takes_offloads: bool,
}

impl FakeInterface {
    /// A 1500-byte-MTU interface with MAC `mac`, no speed, taking offloads as an AF_PACKET
    /// socket does (the default backend's).
    pub fn with_mac(mac: MacAddr) -> FakeInterface {
        FakeInterface {
            mtu: 1500,
            mac,
            speed_mbps: None,
            takes_offloads: true,
        }
    }
}

struct Interface {
    index: i32,
    props: FakeInterface,
    up: bool,
    /// Frames waiting to be received by the data plane.
    rx: VecDeque<Frame>,
    /// Frames the data plane sent, oldest first.
    wire: Vec<Frame>,
    /// Readable while `rx` holds frames.
    readable: Arc<Flag>,
    /// Frames a device takes per flush (None: all).
    tx_room: Option<usize>,
}

struct Watcher {
    msgs: VecDeque<LinkMsg>,
    readable: Arc<Flag>,
}

#[derive(Default)]
struct World {
    interfaces: BTreeMap<String, Interface>,
    next_index: i32,
    watchers: Vec<Arc<Mutex<Watcher>>>,
}

impl World {
    fn announce(&self, msg: LinkMsg) {
        for w in &self.watchers {
            let mut w = w.lock().expect("watcher");
            w.msgs.push_back(msg.clone());
            w.readable.set();
        }
    }

    fn interface(&self, name: &str) -> io::Result<&Interface> {
        self.interfaces
            .get(name)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{name}: no such interface")))
    }
}

/// The fake platform (see the module documentation). Clones share one world.
#[derive(Clone, Default)]
pub struct FakePlatform {
    world: Arc<Mutex<World>>,
    clock: Arc<AtomicU64>,
}

impl FakePlatform {
    pub fn new() -> FakePlatform {
        FakePlatform::default()
    }

    fn world(&self) -> MutexGuard<'_, World> {
        self.world.lock().expect("fake world")
    }

    /// Adds interface `name`, carrier up; returns its index. An interface of that name is
    /// replaced (deleted, then added with a new index).
    pub fn add(&self, name: &str, props: FakeInterface) -> i32 {
        if self.world().interfaces.contains_key(name) {
            self.remove(name);
        }
        let mut w = self.world();
        w.next_index += 1;
        let index = w.next_index;
        let interface = Interface {
            index,
            props,
            up: true,
            rx: VecDeque::new(),
            wire: Vec::new(),
            readable: Arc::new(Flag::new().expect("eventfd")),
            tx_room: None,
        };
        w.interfaces.insert(name.to_string(), interface);
        w.announce(LinkMsg {
            ifindex: index,
            name: Some(name.to_string()),
            mtu: Some(props.mtu as u32),
            up: true,
            deleted: false,
        });
        index
    }

    /// Deletes interface `name`; what waited to be received on it is lost.
    pub fn remove(&self, name: &str) {
        let mut w = self.world();
        if let Some(gone) = w.interfaces.remove(name) {
            gone.readable.clear();
            w.announce(LinkMsg {
                ifindex: gone.index,
                name: Some(name.to_string()),
                mtu: None,
                up: false,
                deleted: true,
            });
        }
    }

    /// Sets interface `name`'s carrier.
    pub fn set_carrier(&self, name: &str, up: bool) {
        let mut w = self.world();
        let Some(i) = w.interfaces.get_mut(name) else { return };
        i.up = up;
        let msg = LinkMsg {
            ifindex: i.index,
            name: Some(name.to_string()),
            mtu: Some(i.props.mtu as u32),
            up,
            deleted: false,
        };
        w.announce(msg);
    }

    /// Frames a device on `name` takes per flush from now on (None: every frame).
    pub fn set_tx_room(&self, name: &str, room: Option<usize>) {
        if let Some(i) = self.world().interfaces.get_mut(name) {
            i.tx_room = room;
        }
    }

    /// Puts `frame` on `name`'s wire, towards the data plane. A device that takes no offloads
    /// receives complete frames only: a request on such an interface is the test's mistake.
    pub fn inject(&self, name: &str, frame: Frame) {
        let mut w = self.world();
        let i = w.interfaces.get_mut(name).expect("inject on an interface that exists");
        assert!(
            i.props.takes_offloads || frame.offload.is_none(),
            "{name} takes no offloads: inject complete frames"
        );
        i.rx.push_back(frame);
        i.readable.set();
    }

    /// Every frame the data plane sent on `name` since the last call, oldest first.
    pub fn take_wire(&self, name: &str) -> Vec<Frame> {
        (self.world().interfaces.get_mut(name)).map_or_else(Vec::new, |i| std::mem::take(&mut i.wire))
    }

    /// Moves the clock on by `by`.
    pub fn advance(&self, by: core::time::Duration) {
        self.clock.fetch_add(by.as_nanos() as u64, Ordering::SeqCst);
    }
}

impl Platform for FakePlatform {
    type Device = FakeDevice;
    type Links = FakeLinks;

    fn open(&self, interface: &str, choice: BackendChoice) -> io::Result<Opened<FakeDevice>> {
        crate::iface::check_name(interface)?;
        let w = self.world();
        let i = w.interface(interface)?;
        if choice == BackendChoice::AfXdp {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("{interface}: a fake interface has no AF_XDP"),
            ));
        }
        let device = FakeDevice {
            bound: Bound {
                name: interface.to_string(),
                index: i.index,
                world: self.world.clone(),
            },
            takes_offloads: i.props.takes_offloads,
            readable: i.readable.clone(),
            queued: VecDeque::new(),
            sent: TxTotals::default(),
            spent: Vec::new(),
        };
        let note = (choice == BackendChoice::Auto).then(|| "af_xdp unavailable (fake); using the fake".to_string());
        Ok(Opened { link: device, note })
    }

    fn mtu(&self, interface: &str) -> io::Result<usize> {
        Ok(self.world().interface(interface)?.props.mtu)
    }

    fn link_up(&self, interface: &str) -> io::Result<bool> {
        Ok(self.world().interface(interface)?.up)
    }

    fn mac(&self, interface: &str) -> io::Result<MacAddr> {
        Ok(self.world().interface(interface)?.props.mac)
    }

    fn speed_mbps(&self, interface: &str) -> Option<u64> {
        self.world().interface(interface).ok()?.props.speed_mbps
    }

    fn is_index(&self, interface: &str, ifindex: i32) -> bool {
        self.world().interface(interface).is_ok_and(|i| i.index == ifindex)
    }

    fn watch(&self, _rcvbuf: Option<usize>) -> io::Result<FakeLinks> {
        let watcher = Arc::new(Mutex::new(Watcher {
            msgs: VecDeque::new(),
            readable: Arc::new(Flag::new()?),
        }));
        self.world().watchers.push(watcher.clone());
        Ok(FakeLinks { watcher })
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.clock.load(Ordering::SeqCst))
    }
}

/// The fake's link announcements.
pub struct FakeLinks {
    watcher: Arc<Mutex<Watcher>>,
}

impl LinkSource for FakeLinks {
    fn raw_fd(&self) -> RawFd {
        self.watcher.lock().expect("watcher").readable.raw_fd()
    }

    fn drain(&mut self) -> Drained {
        let mut w = self.watcher.lock().expect("watcher");
        w.readable.clear();
        Drained {
            msgs: w.msgs.drain(..).collect(),
            overrun: false,
        }
    }
}

/// A fake interface opened by the data plane (see the module documentation).
pub struct FakeDevice {
    bound: Bound,
    takes_offloads: bool,
    readable: Arc<Flag>,
    queued: VecDeque<Frame>,
    sent: TxTotals,
    /// Buffers of frames sent (their bytes copied onto the wire), for the caller's pool.
    spent: Vec<Vec<u8>>,
}

/// The interface a device was opened on: its name, and the index it had then.
struct Bound {
    name: String,
    index: i32,
    world: Arc<Mutex<World>>,
}

impl Bound {
    /// Runs `f` on the interface, if the name still has the index the device was opened on.
    fn with<T>(&self, f: impl FnOnce(&mut Interface) -> T) -> Option<T> {
        let mut w = self.world.lock().expect("fake world");
        w.interfaces
            .get_mut(&self.name)
            .filter(|i| i.index == self.index)
            .map(f)
    }
}

impl Device for FakeDevice {
    fn name(&self) -> &str {
        &self.bound.name
    }

    fn raw_fd(&self) -> RawFd {
        self.readable.raw_fd()
    }

    fn ifindex(&self) -> i32 {
        self.bound.index
    }

    fn describe(&self) -> String {
        "fake".to_string()
    }

    /// Its eventfd polls writable always: that says nothing of room (as AF_XDP's socket).
    fn pollout_means_room(&self) -> bool {
        false
    }

    fn recycle(&mut self, sink: &mut dyn FnMut(Vec<u8>)) {
        self.spent.drain(..).for_each(sink);
    }

    fn recv_batch(&mut self, pool: &mut FramePool, sink: &mut dyn FnMut(Frame)) -> usize {
        let got: Vec<Frame> = (self.bound)
            .with(|i| {
                let n = i.rx.len().min(RX_TURN);
                let got = i.rx.drain(..n).collect();
                if i.rx.is_empty() {
                    i.readable.clear();
                }
                got
            })
            .unwrap_or_default();
        let n = got.len();
        for f in got {
            // Into a pooled buffer, as a real device receives.
            let mut buf = pool.take(f.bytes.len());
            buf.extend_from_slice(&f.bytes);
            sink(Frame::new(buf, f.offload));
        }
        n
    }

    fn send(&mut self, frame: &[u8], offload: Offload) {
        self.queued.push_back(Frame::new(frame.to_vec(), offload));
    }

    fn send_owned(&mut self, frame: Frame) {
        self.queued.push_back(frame);
    }

    fn takes_offloads(&self) -> bool {
        self.takes_offloads
    }

    fn flush(&mut self) -> usize {
        let (queued, spent, sent) = (&mut self.queued, &mut self.spent, &mut self.sent);
        let taken = self.bound.with(|i| {
            let n = i.tx_room.map_or(queued.len(), |room| room.min(queued.len()));
            for f in queued.drain(..n) {
                sent.packets += f.offload.segments(&f.bytes) as u64;
                sent.bytes += f.wire_len() as u64;
                // The wire gets a copy; the buffer goes back to the caller, as a kernel's does.
                i.wire.push(Frame::new(f.bytes.clone(), f.offload));
                spent.push(f.bytes);
            }
        });
        match taken {
            Some(()) => 0,
            // Gone: the kernel refuses every send.
            None => std::mem::take(queued).len(),
        }
    }

    fn tx_pending(&self) -> usize {
        self.queued.len()
    }

    fn take_sent(&mut self) -> TxTotals {
        std::mem::take(&mut self.sent)
    }

    fn take_rx_drops(&mut self) -> RxDrops {
        RxDrops::default()
    }
}
