//! Receive scaling: how received frames are spread over queues (and so over cores).
//!
//! - [`toeplitz`]: the Toeplitz hash of Microsoft's RSS specification and its keys.
//! - [`rss`]: which bytes of a frame are hashed (hash types, fragments, VXLAN inner headers) and
//!   the indirection table from hash to queue.
//! - [`netqueue`]: receive queues with destination-MAC filters (VXLAN: the inner MAC), placed
//!   evenly or packed by load (Dynamic NetQueue), each move an event.
//! - [`split_rx`]: SplitRx, a saturated queue's per-destination work moved to the ports'
//!   workers, with its cost stated and a hysteresis.

pub mod netqueue;
pub mod rss;
pub mod split_rx;
pub mod toeplitz;
#[cfg(test)]
mod vectors;

pub use rss::{hash_input, HashInput, HashTypes, Indirection, RssConfig};
pub use toeplitz::{toeplitz, RssKey, MICROSOFT_KEY, SYMMETRIC_KEY};
