//! Teamster's simulator: the core engine driven by a virtual clock.
//!
//! A [`Scenario`] (a TOML file in `scenarios/`) describes a host: uplinks, port groups, ports with
//! demand curves, a timeline of events, and the expectations the run must meet. [`fluid::run`]
//! steps the clock (1 s by default, down to 1 ms): each step the real `teamster-core` team maps
//! ports to uplinks, each uplink is shared max-min fairly among the traffic mapped to it, and the
//! delivered bytes are fed back to the team's meters so that Load-Based Teaming sees them.
//! [`expect::evaluate`] checks the expectations against the recorded series, and [`report`]
//! writes the CSV series and the SVG plot.
//!
//! Runs are seeded (MAC addresses, IP-hash flows and demand jitter come from a ChaCha8 generator
//! seeded by the scenario) and bit-for-bit reproducible.

pub mod cluster;
pub mod demand;
pub mod expect;
pub mod fluid;
pub mod maxmin;
pub mod migration;
pub mod packet;
pub mod receive;
pub mod report;
pub mod run;
pub mod scenario;
pub mod simulate;
pub mod timeline;
pub mod web;
pub mod whatif;

pub use scenario::{Scenario, ScenarioError};
pub use simulate::{simulate, Outcome, RunInfo, SimulateError};
