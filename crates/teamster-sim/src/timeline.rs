//! Checks shared by both fidelities' timelines, and the seeded choices scenarios leave out.
//!
//! A timeline event must fall inside the run (`0 <= at_s < duration_s`): one at or after the end
//! would never apply, so it is an error rather than silently dropped. Two events on the same
//! object (uplink, port group, NetIOC node, queueing) at the same instant contradict or repeat
//! each other, whichever file order they have, so that is an error naming both keys.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use teamster_core::wire::MacAddr;

/// The checks of one scenario's timeline, as its events are read.
pub struct Timeline {
    duration_s: f64,
    /// (instant, object, key) of every event read so far.
    claimed: Vec<(f64, String, String)>,
}

impl Timeline {
    pub fn new(duration_s: f64) -> Timeline {
        Timeline {
            duration_s,
            claimed: Vec::new(),
        }
    }

    /// Checks event `key`'s time: a finite number of seconds inside the run.
    pub fn time(&self, key: &str, at_s: f64) -> Result<f64, String> {
        if !(at_s.is_finite() && at_s >= 0.0) {
            return Err(format!(
                "{key}.at_s = {at_s}: expected a non-negative number of seconds"
            ));
        }
        if at_s >= self.duration_s {
            return Err(format!(
                "{key}.at_s = {at_s}: at or after the end of the run (duration_s = {}), so it would never apply",
                self.duration_s
            ));
        }
        Ok(at_s)
    }

    /// Records that event `key` acts on `object` at `at_s`; a second event on the same object at
    /// the same instant is refused.
    pub fn claim(&mut self, key: &str, at_s: f64, object: String) -> Result<(), String> {
        if let Some((_, _, other)) = self.claimed.iter().find(|(t, o, _)| *t == at_s && *o == object) {
            return Err(format!(
                "{key}: {other} already acts on {object} at {at_s} s; two events on one object at one instant contradict or repeat each other"
            ));
        }
        self.claimed.push((at_s, object, key.to_string()));
        Ok(())
    }
}

/// MACs for ports a scenario gives none: drawn from the scenario's seed, locally administered
/// and unicast, never one already taken, so a run is reproducible.
pub struct SeededMacs(ChaCha8Rng);

impl SeededMacs {
    pub fn new(seed: u64) -> SeededMacs {
        SeededMacs(ChaCha8Rng::seed_from_u64(seed ^ 0x6d61_6373))
    }

    /// The next MAC not in `taken`.
    pub fn next(&mut self, taken: &[MacAddr]) -> MacAddr {
        loop {
            let mut b = [0u8; 6];
            self.0.fill(&mut b);
            b[0] = 0x02; // locally administered, unicast
            if !taken.contains(&MacAddr(b)) {
                return MacAddr(b);
            }
        }
    }
}
