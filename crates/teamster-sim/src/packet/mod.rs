//! Packet mode: the simulator at packet granularity, for fairness, latency and scheduler checks.
//! [`engine`] runs a host; [`source`] holds the traffic sources.

pub mod engine;
pub mod frames;
pub mod scenario;
pub mod source;

#[cfg(test)]
mod flowlet_tests;
#[cfg(test)]
mod tests;
