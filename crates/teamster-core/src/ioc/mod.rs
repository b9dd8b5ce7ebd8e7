//! Network I/O Control: reservations, shares and limits on a tree of traffic.
//!
//! Model. Each uplink's bandwidth is shared by a [`Tree`]: the root is the uplink; under it sit
//! the system [`TrafficClass`]es (management, VM, NFS, ...); under the VM class sit network
//! resource pools; ports (vNICs) sit in pools. Every node has a *reservation* (a guaranteed
//! minimum), *shares* (1-100, its weight for the excess), and a *limit* (a cap, or unlimited).
//!
//! Allocation, per node, among its children, with the node's own allocation as the capacity
//! ([`allocate`]): a child's *top* is the least of its limit, its demand and the sum of its
//! children's tops. Reservations come first, each cut to the child's top (an unused reservation
//! is handed on, never banked). The excess is then split by shares, water-filled under each
//! child's top. If the capacity cannot cover the reservations, it is split in proportion to
//! them. This is "reservation first, then the excess by shares" (NetIOC v3's rule), not mClock's
//! max(reservation, share).
//!
//! Admission ([`admission`]): the reservations on one uplink total at most a fraction (default
//! 75%, at most 100%) of its capacity; the children's reservations of every node fit inside its
//! reservation (a pool inside its class, a port inside its pool's free quota). A change that does
//! not fit is refused with the node, the figure asked and what is free, and nothing changes.

pub mod admission;
mod allocate;
mod class;
pub mod htb;
mod per_uplink;
pub mod queue_limit;
pub mod queue_share;
pub mod sched;
mod shares;
pub mod spec;
mod tree;

#[cfg(test)]
mod sched_equiv_tests;
#[cfg(test)]
mod sched_reference;
#[cfg(test)]
mod sched_tests;
#[cfg(test)]
mod tests;

pub use admission::{AdmissionError, ReservationCap};
pub use allocate::{allocate, waterfill, Allocation};
pub use class::TrafficClass;
pub use per_uplink::{Enqueued, Ioc};
pub use queue_limit::QueueLimit;
pub use sched::{LimitId, Scheduler, SharedLimits};
pub use shares::{Shares, SharesError};
pub use tree::{Node, NodeId, NodeSpec, Tree, TreeError};
