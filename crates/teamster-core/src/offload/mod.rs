//! Software offloads: completing TCP/UDP checksums that a sender left to hardware, and TCP
//! segmentation ([`segment_tcp`]) of super-frames that do not fit the egress MTU.
//!
//! A frame handed over with its checksum "not ready" (Linux CHECKSUM_PARTIAL, seen through
//! AF_PACKET as TP_STATUS_CSUMNOTREADY) carries only the pseudo-header sum in its TCP or UDP
//! checksum field. A switch that forwards it to another interface must finish it, or the
//! receiver drops the segment: [`fill_l4_checksum`] recomputes the checksum over the IPv4 or
//! IPv6 pseudo-header and the whole segment (after up to two VLAN tags). Receive coalescing (GRO)
//! comes later.

mod checksum;
mod segment;

pub use checksum::{fill_l4_checksum, internet_checksum};
pub use segment::segment_tcp;
