//! Teamster's engine: pure, deterministic, sans-IO.
//!
//! Nothing in this crate touches a socket, a file, the system clock or a thread. Time is a
//! parameter ([`Instant`]), effects are returned as data, and timers are reported through
//! `poll_at()` so that the same code runs in the live data plane and in the simulator.
//!
//! - [`wire`]: parse frames into a [`wire::FlowKey`] and build the frames the engine sends.
//! - [`units`]: [`units::Bandwidth`], bits per second, parsed from and printed as "10G".
//! - [`ioc`]: Network I/O Control: the reservation/shares/limit tree, admission control and the
//!   exact fluid allocator.
//! - [`host`]: the host model files share (uplinks, port groups, classes, pools, ports),
//!   checked and built into a team and a NetIOC tree.
//! - [`rx`]: receive scaling: the RSS Toeplitz hash, hash types and indirection tables;
//!   NetQueue and Dynamic NetQueue; SplitRx.
//! - [`offload`]: checksums, segmentation, GRO and VXLAN encapsulation.
//! - [`overlay`]: overlay port groups (VXLAN segments) and their VTEP's ARP.
//! - [`teaming`]: a team of uplinks, failover order, failback, notify-switch frames and the
//!   load-balancing policies, Load-Based Teaming among them.
#![forbid(unsafe_code)]

pub mod host;
pub mod ioc;
pub mod offload;
pub mod overlay;
pub mod placement;
pub mod rx;
pub mod switch;
pub mod teaming;
pub mod time;
pub mod units;
pub mod wire;

pub use time::Instant;
