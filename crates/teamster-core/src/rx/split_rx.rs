//! SplitRx: a receive queue's per-destination work moved off the queue's core to the
//! destination ports' workers when that core saturates.
//!
//! Model. For each packet a queue takes, its core spends `queue_ns` on the work done once
//! (receive, switching, VXLAN decapsulation) and `deliver_ns` per destination port (the copy
//! into the port, and its checksum where needed): `fanout` destinations for a multicast frame,
//! or one for each of the many VMs whose unicast traffic shares one queue (VXLAN behind one outer
//! MAC). Unsplit, the queue's core is loaded `pps x (queue_ns + fanout x deliver_ns)`. Split, it
//! keeps `queue_ns` and hands each destination's copy to that port's worker for `handoff_ns`;
//! the worker spends `handoff_ns + deliver_ns` taking it. The cost, stated: `2 x handoff_ns` more
//! CPU per delivery in all, and a frame waits for its worker (latency). The gain: the queue's
//! core, the bound, sheds the deliveries, so the queue carries more.
//!
//! Decision, with hysteresis: a queue splits once its unsplit load has been at or over
//! `split_above` (default 0.9 of its core) for `hold` consecutive observations, and joins again
//! once the unsplit load has been at or under `join_below` (0.6) as long; in between nothing
//! changes. Each change is a [`SplitEvent`] with the loads that decided it.

use crate::Instant;

/// What a packet costs, in nanoseconds of a core.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SplitCosts {
    pub queue_ns: f64,
    pub deliver_ns: f64,
    pub handoff_ns: f64,
}

/// The loads of one queue's traffic, as fractions of a core.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SplitLoads {
    /// The queue's core, unsplit.
    pub unsplit: f64,
    /// The queue's core, split.
    pub queue: f64,
    /// Each destination's worker, split (all destinations equally busy).
    pub per_worker: f64,
    /// CPU in all, split, over CPU in all, unsplit (1.0 = no extra cost).
    pub cpu_ratio: f64,
}

impl SplitCosts {
    /// The loads of `pps` packets per second of `fanout` destinations each, spread evenly over
    /// `ports` destination ports.
    pub fn loads(&self, pps: f64, fanout: f64, ports: f64) -> SplitLoads {
        let unsplit = pps * (self.queue_ns + fanout * self.deliver_ns) / 1e9;
        let queue = pps * (self.queue_ns + fanout * self.handoff_ns) / 1e9;
        let deliveries = pps * fanout;
        let per_worker = deliveries / ports.max(1.0) * (self.handoff_ns + self.deliver_ns) / 1e9;
        let split_total = queue + deliveries * (self.handoff_ns + self.deliver_ns) / 1e9;
        SplitLoads {
            unsplit,
            queue,
            per_worker,
            cpu_ratio: if unsplit > 0.0 { split_total / unsplit } else { 1.0 },
        }
    }
}

/// A queue split or joined.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SplitEvent {
    pub at: Instant,
    pub split: bool,
    /// The loads of the observation that decided it.
    pub loads: SplitLoads,
}

/// One receive queue's SplitRx state.
#[derive(Debug, Clone)]
pub struct SplitRx {
    pub costs: SplitCosts,
    pub split_above: f64,
    pub join_below: f64,
    /// Consecutive observations a change needs.
    pub hold: u32,
    split: bool,
    streak: u32,
}

impl SplitRx {
    /// Unsplit, with the default thresholds (0.9, 0.6) and a hold of three observations; the
    /// error names a knob out of order or range.
    pub fn new(costs: SplitCosts) -> Result<SplitRx, String> {
        let s = SplitRx {
            costs,
            split_above: 0.9,
            join_below: 0.6,
            hold: 3,
            split: false,
            streak: 0,
        };
        s.validate()?;
        Ok(s)
    }

    /// Refuses costs that are negative or not finite, and thresholds that would flap.
    pub fn validate(&self) -> Result<(), String> {
        let c = self.costs;
        for (name, v) in [
            ("queue_ns", c.queue_ns),
            ("deliver_ns", c.deliver_ns),
            ("handoff_ns", c.handoff_ns),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{name} = {v}: expected nanoseconds, 0 or more"));
            }
        }
        if !(0.0 < self.join_below && self.join_below < self.split_above && self.split_above <= 1.0) {
            return Err(format!(
                "join_below = {}, split_above = {}: expected 0 < join_below < split_above <= 1",
                self.join_below, self.split_above
            ));
        }
        if self.hold == 0 {
            return Err("hold = 0: expected at least one observation".into());
        }
        Ok(())
    }

    pub fn is_split(&self) -> bool {
        self.split
    }

    /// Observes the queue's traffic at `now`; the change it decides, if any.
    pub fn observe(&mut self, now: Instant, pps: f64, fanout: f64, ports: f64) -> Option<SplitEvent> {
        let loads = self.costs.loads(pps, fanout, ports);
        let pushing = if self.split {
            loads.unsplit <= self.join_below
        } else {
            loads.unsplit >= self.split_above
        };
        self.streak = if pushing { self.streak + 1 } else { 0 };
        if self.streak < self.hold {
            return None;
        }
        self.streak = 0;
        self.split = !self.split;
        Some(SplitEvent {
            at: now,
            split: self.split,
            loads,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    /// Illustrative costs (not calibrated): 300 ns once per packet, 200 ns per delivery, 40 ns
    /// per handoff.
    fn costs() -> SplitCosts {
        SplitCosts {
            queue_ns: 300.0,
            deliver_ns: 200.0,
            handoff_ns: 40.0,
        }
    }

    #[test]
    fn splitting_sheds_the_deliveries_from_the_queue_core_at_a_stated_cost() {
        // 8-way multicast at 500 kpps: the queue's core would need 0.95 of itself.
        let l = costs().loads(500_000.0, 8.0, 8.0);
        assert!((l.unsplit - 0.95).abs() < 1e-9, "{l:?}");
        assert!((l.queue - 0.31).abs() < 1e-9, "{l:?}");
        assert!((l.per_worker - 0.12).abs() < 1e-9, "{l:?}");
        // 2 x 40 ns more per delivery: (0.31 + 0.96) / 0.95.
        assert!((l.cpu_ratio - 1.27 / 0.95).abs() < 1e-9, "{l:?}");
    }

    #[test]
    fn a_queue_splits_when_held_saturated_joins_when_held_light_and_never_flaps_between() {
        let mut s = SplitRx::new(costs()).unwrap();
        let mut t = Instant::ZERO;
        let mut step = |s: &mut SplitRx, pps: f64| {
            t = t + Duration::from_secs(1);
            s.observe(t, pps, 8.0, 8.0)
        };
        // Saturated (0.95) for two observations, then a dip: no split yet.
        assert_eq!(
            (
                step(&mut s, 500_000.0),
                step(&mut s, 500_000.0),
                step(&mut s, 300_000.0)
            ),
            (None, None, None)
        );
        let e = (0..3).filter_map(|_| step(&mut s, 500_000.0)).collect::<Vec<_>>();
        assert_eq!(e.len(), 1);
        assert!(e[0].split && s.is_split());
        // Between the thresholds (0.76): it stays split.
        assert!((0..20).all(|_| step(&mut s, 400_000.0).is_none()));
        // Light (0.38) three times: joins.
        let e = (0..3).filter_map(|_| step(&mut s, 200_000.0)).collect::<Vec<_>>();
        assert_eq!(e.len(), 1);
        assert!(!e[0].split && !s.is_split());
    }

    #[test]
    fn bad_knobs_name_themselves() {
        let mut s = SplitRx::new(costs()).unwrap();
        s.join_below = 0.95;
        assert!(s.validate().unwrap_err().contains("join_below = 0.95"));
        let bad = SplitCosts {
            deliver_ns: f64::NAN,
            ..costs()
        };
        assert!(SplitRx::new(bad).unwrap_err().contains("deliver_ns"));
    }
}
