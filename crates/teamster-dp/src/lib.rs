//! Teamster's live Linux data plane.
//!
//! This crate is a skeleton until the data-plane issue lands; it holds no I/O code yet and
//! nothing depends on it but the workspace. Its model, from the design:
//!
//! - A backend trait for frame I/O on an interface, with AF_PACKET (TPACKET_V3 receive rings,
//!   batched transmit) first and AF_XDP later.
//! - A poll loop that feeds every received frame to the `teamster-core` engine with the monotonic
//!   time as `now`, carries out the effects it returns (transmit on an uplink, a port moved), and
//!   sleeps until the engine's `poll_at()` deadline or the next frame.
//! - A pacer per uplink that grants bytes at the uplink's configured capacity, while the engine's
//!   scheduler decides the order.
//! - Link state from netlink, turned into `Team::set_link` calls.
#![forbid(unsafe_code)]
