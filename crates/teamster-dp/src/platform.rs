//! What the data plane needs of the system beneath it: the platform seam.
//!
//! Model. The data plane's turn (receive, the switch's receive queue, switching, fitting,
//! NetIOC and pacing, egress batching, handoff between workers) is the same whatever carries
//! the frames. What differs is below it, and a [`Platform`] gathers exactly that:
//! - opening an interface by name as a [`Device`] (the backend the configuration chose);
//! - reading an interface's MTU, carrier, MAC, speed, and whether a name still has the index a
//!   device was bound to (a tap that went and came back has a new one);
//! - a [`LinkSource`]: the link changes the kernel announces, with a descriptor to poll;
//! - the engine's clock ([`Platform::now`]), so a test can move time itself.
//!
//! [`Kernel`] is Linux: AF_PACKET or AF_XDP sockets, sysfs, rtnetlink, the monotonic clock.
//! `teamster_dp::fake::FakePlatform` (the `fake` feature, and this crate's tests) is memory: interfaces a test creates, takes down and deletes,
//! frames it injects and collects, a clock it advances. A data plane that executes somewhere
//! else entirely (a kernel fast path programmed through maps) is not a platform: it replaces
//! the turn, not what is under it; see `ARCHITECTURE.md`.

use crate::backend::{self, BackendChoice, Link};
use crate::device::Device;
use crate::iface;
use crate::netlink::{Drained, LinkWatch};
use std::io;
use std::os::fd::RawFd;
use teamster_core::wire::MacAddr;
use teamster_core::Instant;

/// An opened device, and, where the backend chosen was `auto`, why it is not AF_XDP.
pub struct Opened<D = Link> {
    pub link: D,
    pub note: Option<String>,
}

/// Link changes as the kernel announces them.
pub trait LinkSource: Send + 'static {
    /// A descriptor that becomes readable when changes arrive.
    fn raw_fd(&self) -> RawFd;
    /// Every change announced since the last call, and whether some were lost (then every
    /// interface must be read again).
    fn drain(&mut self) -> Drained;
}

impl LinkSource for LinkWatch {
    fn raw_fd(&self) -> RawFd {
        LinkWatch::raw_fd(self)
    }

    fn drain(&mut self) -> Drained {
        LinkWatch::drain(self)
    }
}

/// The system the data plane runs on (see the module documentation).
pub trait Platform: Clone + Send + Sync + 'static {
    type Device: Device;
    type Links: LinkSource;
    /// Opens `interface` as `choice` asks; NotFound when there is no such interface.
    fn open(&self, interface: &str, choice: BackendChoice) -> io::Result<Opened<Self::Device>>;
    /// The interface's MTU.
    fn mtu(&self, interface: &str) -> io::Result<usize>;
    /// Whether it can carry traffic now: carrier, and operationally up.
    fn link_up(&self, interface: &str) -> io::Result<bool>;
    /// Its MAC address.
    fn mac(&self, interface: &str) -> io::Result<MacAddr>;
    /// The link speed it reports, in Mbit/s (None: none reported).
    fn speed_mbps(&self, interface: &str) -> Option<u64>;
    /// Whether `interface` now names the interface with index `ifindex`.
    fn is_index(&self, interface: &str, ifindex: i32) -> bool;
    /// Starts watching link changes (`rcvbuf`: the socket's receive buffer, where it has one).
    fn watch(&self, rcvbuf: Option<usize>) -> io::Result<Self::Links>;
    /// The engine's clock: time since the platform was made.
    fn now(&self) -> Instant;

    /// The kernel fast path that switches the interfaces this platform opens, if any (see
    /// [`crate::fast_path`]).
    fn fast_path(&self) -> Option<&dyn crate::fast_path::FastPath> {
        None
    }
}

/// Linux (see the module documentation).
#[derive(Clone)]
pub struct Kernel {
    started: std::time::Instant,
    /// The kernel fast path, where the switch runs on it.
    fast: Option<std::sync::Arc<dyn crate::fast_path::FastPath>>,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fast = self.fast.as_ref().map(|p| p.describe());
        f.debug_struct("Kernel").field("fast_path", &fast).finish()
    }
}

impl Kernel {
    /// The kernel, its clock starting now.
    pub fn new() -> Kernel {
        Kernel {
            started: std::time::Instant::now(),
            fast: None,
        }
    }

    /// Linux, with `fast` switching every interface opened (see [`crate::fast_path`]).
    pub fn with_fast_path(fast: std::sync::Arc<dyn crate::fast_path::FastPath>) -> Kernel {
        Kernel {
            fast: Some(fast),
            ..Kernel::new()
        }
    }
}

impl Default for Kernel {
    fn default() -> Kernel {
        Kernel::new()
    }
}

impl Platform for Kernel {
    type Device = Link;
    type Links = LinkWatch;

    fn open(&self, interface: &str, choice: BackendChoice) -> io::Result<Opened> {
        match &self.fast {
            Some(fast) => Ok(Opened {
                link: Link::Punted(crate::fast_path::Punted::open(interface, fast.clone())?),
                note: None,
            }),
            None => backend::open(interface, choice),
        }
    }

    fn mtu(&self, interface: &str) -> io::Result<usize> {
        iface::mtu(interface)
    }

    fn link_up(&self, interface: &str) -> io::Result<bool> {
        iface::link_up(interface)
    }

    fn mac(&self, interface: &str) -> io::Result<MacAddr> {
        iface::mac(interface)
    }

    fn speed_mbps(&self, interface: &str) -> Option<u64> {
        iface::speed_mbps(interface)
    }

    fn is_index(&self, interface: &str, ifindex: i32) -> bool {
        iface::is_index(interface, ifindex)
    }

    fn watch(&self, rcvbuf: Option<usize>) -> io::Result<LinkWatch> {
        LinkWatch::open_with_rcvbuf(rcvbuf)
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.started.elapsed().as_nanos() as u64)
    }

    fn fast_path(&self) -> Option<&dyn crate::fast_path::FastPath> {
        self.fast.as_deref()
    }
}
