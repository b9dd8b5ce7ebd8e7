//! Which backend an interface uses, and the one type the data plane holds for either.
//!
//! Model. Each port and uplink names a [`BackendChoice`]. `af_packet` (the default) works on any
//! interface. `af_xdp` opens an [`AfXdp`] or fails with an error naming the interface and what
//! is missing (kernel support, a capability, the driver, an MTU or queue count it cannot carry,
//! a program already attached). `auto` tries AF_XDP and falls back to AF_PACKET when AF_XDP
//! cannot work there, saying why in [`Opened::note`] for the caller to log; it does not fall
//! back when the interface is missing (the caller waits for it) or already has an XDP program
//! (someone else's program sees the frames first, and the operator must decide). AF_XDP is not
//! the default: it pins 16 MiB per interface, and VLAN tags that travel beside the frame (a
//! NIC's rx-vlan-offload) are lost to it (see [`crate::afxdp`]).
//!
//! [`Link`] holds whichever opened and forwards each [`Device`] call to it; the calls made per
//! frame or per batch go by a `match`, so the poll loop calls no function through a pointer per
//! frame.

use crate::afpacket::AfPacket;
use crate::afxdp::{self, AfXdp};
use crate::pool::FramePool;
use crate::{Device, Frame, RxDrops, TxTotals};
use std::io;
use std::os::fd::{OwnedFd, RawFd};
use teamster_core::offload::Offload;

/// The backend a port or uplink asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendChoice {
    #[default]
    AfPacket,
    AfXdp,
    Auto,
}

impl BackendChoice {
    /// Every choice, in the spelling of `switch.toml`.
    pub const ALL: [BackendChoice; 3] = [BackendChoice::AfPacket, BackendChoice::AfXdp, BackendChoice::Auto];

    /// The choice spelled `s` (`af_packet`, `af_xdp` or `auto`).
    pub fn parse(s: &str) -> Option<BackendChoice> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            BackendChoice::AfPacket => "af_packet",
            BackendChoice::AfXdp => "af_xdp",
            BackendChoice::Auto => "auto",
        }
    }
}

/// An open backend of either kind.
pub enum Link {
    Packet(AfPacket),
    Xdp(AfXdp),
    /// Switched by the kernel fast path; only what it hands to user space is received.
    Punted(crate::fast_path::Punted),
}

pub use crate::platform::Opened;

/// Opens `name` as `choice` asks (see the module documentation for `auto`'s fallback).
pub fn open(name: &str, choice: BackendChoice) -> io::Result<Opened> {
    let xdp = || -> io::Result<Link> {
        crate::iface::index(name)?;
        crate::caps::check_xdp()
            .map_err(|e| io::Error::new(io::ErrorKind::PermissionDenied, format!("{name}: {e}")))?;
        AfXdp::open_with(name, afxdp::Options::default()).map(Link::Xdp)
    };
    match choice {
        BackendChoice::AfPacket => Ok(Opened {
            link: Link::Packet(AfPacket::open(name)?),
            note: None,
        }),
        BackendChoice::AfXdp => Ok(Opened {
            link: xdp()?,
            note: None,
        }),
        BackendChoice::Auto => match xdp() {
            Ok(link) => Ok(Opened { link, note: None }),
            Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::AddrInUse) => Err(e),
            Err(e) => Ok(Opened {
                link: Link::Packet(AfPacket::open(name)?),
                note: Some(format!("af_xdp unavailable ({e}); using af_packet")),
            }),
        },
    }
}

impl Link {
    fn inner(&self) -> &dyn Device {
        match self {
            Link::Packet(b) => b,
            Link::Xdp(b) => b,
            Link::Punted(b) => b,
        }
    }

    fn inner_mut(&mut self) -> &mut dyn Device {
        match self {
            Link::Packet(b) => b,
            Link::Xdp(b) => b,
            Link::Punted(b) => b,
        }
    }
}

/// Each call goes to whichever backend is open. The calls made per frame or per batch
/// (`recv_batch`, `send_owned`, `flush`, `tx_pending`, `takes_offloads`) `match` rather than
/// call through a pointer.
impl Device for Link {
    fn name(&self) -> &str {
        self.inner().name()
    }

    fn raw_fd(&self) -> RawFd {
        self.inner().raw_fd()
    }

    fn ifindex(&self) -> i32 {
        self.inner().ifindex()
    }

    fn take_error(&self) -> Option<io::Error> {
        self.inner().take_error()
    }

    fn pollout_means_room(&self) -> bool {
        self.inner().pollout_means_room()
    }

    fn describe(&self) -> String {
        self.inner().describe()
    }

    fn noteworthy(&self) -> bool {
        self.inner().noteworthy()
    }

    fn open_queues(&self, group: &mut Option<u32>, want: usize) -> Result<Vec<Link>, String> {
        match self {
            Link::Packet(b) => Ok(b.open_queues(group, want)?.into_iter().map(Link::Packet).collect()),
            Link::Xdp(_) => Err("af_xdp receives on one queue: set backend = \"af_packet\"".to_string()),
            Link::Punted(_) => {
                Err("the kernel fast path receives in the kernel: no receive queues to open".to_string())
            }
        }
    }

    fn steer(&self, program: &[libc::sock_filter]) -> Result<(), String> {
        self.inner().steer(program)
    }

    fn steering_handle(&self) -> io::Result<OwnedFd> {
        self.inner().steering_handle()
    }

    fn recv_batch(&mut self, pool: &mut FramePool, sink: &mut dyn FnMut(Frame)) -> usize {
        match self {
            Link::Packet(b) => b.recv_batch(pool, sink),
            Link::Xdp(b) => b.recv_batch(pool, sink),
            Link::Punted(b) => b.recv_batch(pool, sink),
        }
    }

    fn send(&mut self, frame: &[u8], offload: Offload) {
        match self {
            Link::Packet(b) => b.send(frame, offload),
            Link::Xdp(b) => b.send(frame, offload),
            Link::Punted(b) => b.send(frame, offload),
        }
    }

    fn send_owned(&mut self, frame: Frame) {
        match self {
            Link::Packet(b) => b.send_owned(frame),
            Link::Xdp(b) => b.send_owned(frame),
            Link::Punted(b) => b.send_owned(frame),
        }
    }

    fn recycle(&mut self, sink: &mut dyn FnMut(Vec<u8>)) {
        self.inner_mut().recycle(sink)
    }

    fn takes_offloads(&self) -> bool {
        match self {
            Link::Packet(b) => b.takes_offloads(),
            Link::Xdp(b) => b.takes_offloads(),
            Link::Punted(b) => b.takes_offloads(),
        }
    }

    fn flush(&mut self) -> usize {
        match self {
            Link::Packet(b) => b.flush(),
            Link::Xdp(b) => b.flush(),
            Link::Punted(b) => b.flush(),
        }
    }

    fn tx_pending(&self) -> usize {
        match self {
            Link::Packet(b) => b.tx_pending(),
            Link::Xdp(b) => b.tx_pending(),
            Link::Punted(b) => b.tx_pending(),
        }
    }

    fn ring_drops(&mut self) -> u64 {
        self.inner_mut().ring_drops()
    }

    fn take_sent(&mut self) -> TxTotals {
        self.inner_mut().take_sent()
    }

    fn take_rx_drops(&mut self) -> RxDrops {
        self.inner_mut().take_rx_drops()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_are_spelled_as_in_the_file() {
        for c in BackendChoice::ALL {
            assert_eq!(BackendChoice::parse(c.as_str()), Some(c));
        }
        assert_eq!(BackendChoice::parse("xdp"), None);
        assert_eq!(BackendChoice::parse("AF_XDP"), None);
        assert_eq!(BackendChoice::default(), BackendChoice::AfPacket);
    }

    /// A missing interface is NotFound for every choice (auto does not hide it behind a fallback).
    #[test]
    fn a_missing_interface_is_not_found_whatever_the_choice() {
        for c in BackendChoice::ALL {
            let e = open("tmt-nowhere", c).err().expect("no such interface");
            assert_eq!(e.kind(), io::ErrorKind::NotFound, "{c:?}: {e}");
            assert!(e.to_string().contains("tmt-nowhere"), "{e}");
        }
    }
}
