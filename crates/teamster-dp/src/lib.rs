//! Teamster's live Linux data plane.
//!
//! - [`Device`]: frame I/O on one interface; [`afpacket::AfPacket`] (recvmmsg receive with the
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
pub mod bpf_call;
pub mod caps;
pub mod datapath;
pub mod device;
mod extra_drops;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
pub mod fast_path;
mod flag;
pub mod frame;
pub mod iface;
pub mod ingress_queue;
pub mod netlink;
pub mod pacer;
pub mod platform;
pub mod pool;
pub mod receive;
pub mod sockopt;
pub mod steer;
pub mod vnet;

pub use device::{Device, RxDrops, TxTotals, RX_TURN};
pub use frame::Frame;
