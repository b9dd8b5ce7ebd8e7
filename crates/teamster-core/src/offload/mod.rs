//! Software offloads: completing TCP/UDP checksums that a sender left to hardware, and TCP
//! segmentation ([`segment_tcp`]) of super-frames that do not fit the egress MTU.
//!
//! A frame handed over with its checksum "not ready" (Linux CHECKSUM_PARTIAL, seen through
//! AF_PACKET as TP_STATUS_CSUMNOTREADY) carries only the pseudo-header sum in its TCP or UDP
//! checksum field. A switch that forwards it to another interface must finish it, or the
//! receiver drops the segment: [`fill_l4_checksum`] recomputes the checksum over the IPv4 or
//! IPv6 pseudo-header and the whole segment (after up to two VLAN tags). An [`Offload`] is that
//! request (partial checksum, segmentation) carried with a frame through the switch, so that the
//! work is done only where it must be. Where nothing says which frames were left so (AF_XDP
//! passes no metadata), [`complete_partial_l4_checksum`] recognises them by the mark itself, the
//! uncomplemented pseudo-header sum in the field, and completes only those. Receive coalescing
//! ([`Gro`]) merges a TCP flow's in-order segments into super-frames for ports that take them.

mod checksum;
mod gro;
mod request;
mod segment;
pub mod vxlan;

pub use checksum::{complete_partial_l4_checksum, fill_l4_checksum, internet_checksum, l4_checksum_valid};
pub use gro::{Delivered, Gro, MAX_FLOWS as GRO_MAX_FLOWS};
pub use request::{Gso, GsoKind, Offload, OffloadError, PartialChecksum, MIN_TCP_SEGMENT};
pub use segment::segment_tcp;
pub use vxlan::{
    decapsulate, encapsulate, encapsulate_frames, DecapError, Decapsulated, TunnelEnds, TunnelOffloads, Vni,
    MAX_INNER as VXLAN_MAX_INNER,
};
