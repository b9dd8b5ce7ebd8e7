//! A sliding-window rate meter: bytes counted into fixed time buckets, mean over the window, and
//! a recent rate over its last few buckets.
//!
//! The window is divided into [`RateMeter::BUCKETS`] buckets. The mean at `now` covers the
//! `BUCKETS` complete buckets before the one `now` falls in; the recent rate covers the last
//! [`RateMeter::RECENT`] of them (3 s of a 30 s window). Both readings change only at bucket
//! boundaries and do not depend on how bytes were batched within a bucket. Time before the first
//! byte counts as idle.

use crate::Instant;
use core::time::Duration;

/// Mean rate over a sliding window.
#[derive(Debug, Clone)]
pub struct RateMeter {
    bucket_ns: u64,
    /// Ring of `BUCKETS + 1` byte counts; slot `i % len` holds absolute bucket `i`.
    ring: Vec<u64>,
    /// The newest absolute bucket index written or cleared.
    head: u64,
}

impl RateMeter {
    /// Buckets per window.
    pub const BUCKETS: u64 = 30;
    /// Buckets the recent rate covers: a tenth of the window, enough to smooth one bucket's
    /// jitter and short enough to show a step or a silence within seconds.
    pub const RECENT: u64 = 3;

    /// A meter averaging over `window` (at least 30 ns).
    pub fn new(window: Duration) -> Self {
        RateMeter {
            bucket_ns: Self::bucket_ns(window),
            ring: vec![0; Self::BUCKETS as usize + 1],
            head: 0,
        }
    }

    fn bucket_ns(window: Duration) -> u64 {
        (u64::try_from(window.as_nanos()).unwrap_or(u64::MAX) / Self::BUCKETS).max(1)
    }

    /// The start of the bucket after the one `now` falls in, for meters over `window`.
    pub fn boundary_after(window: Duration, now: Instant) -> Instant {
        let b = Self::bucket_ns(window);
        Instant::from_nanos((now.as_nanos() / b + 1).saturating_mul(b))
    }

    /// The width of one bucket.
    pub fn bucket(&self) -> Duration {
        Duration::from_nanos(self.bucket_ns)
    }

    /// Counts `bytes` at `now`. Bytes reported for an instant older than the window are dropped.
    pub fn record(&mut self, bytes: u64, now: Instant) {
        let idx = now.as_nanos() / self.bucket_ns;
        let len = self.ring.len() as u64;
        if idx > self.head {
            if idx - self.head >= len {
                self.ring.iter_mut().for_each(|b| *b = 0);
            } else {
                for i in self.head + 1..=idx {
                    self.ring[(i % len) as usize] = 0;
                }
            }
            self.head = idx;
        } else if self.head - idx >= len {
            return;
        }
        let slot = &mut self.ring[(idx % len) as usize];
        *slot = slot.saturating_add(bytes);
    }

    /// Mean bits per second over the window of complete buckets before `now`'s bucket.
    pub fn mean_bps(&self, now: Instant) -> f64 {
        self.mean_over(now, Self::BUCKETS)
    }

    /// Mean bits per second over the last [`RateMeter::RECENT`] complete buckets before `now`'s.
    pub fn recent_bps(&self, now: Instant) -> f64 {
        self.mean_over(now, Self::RECENT)
    }

    /// Bits per second over the last complete bucket before `now`'s (a second, at the default
    /// 30 s window): the finest reading the meter gives.
    pub fn last_bps(&self, now: Instant) -> f64 {
        self.mean_over(now, 1)
    }

    /// Mean bits per second over the `n` (at most `BUCKETS`) complete buckets before `now`'s.
    fn mean_over(&self, now: Instant, n: u64) -> f64 {
        let cur = now.as_nanos() / self.bucket_ns;
        let len = self.ring.len() as u64;
        let oldest_held = (self.head + 1).saturating_sub(len);
        let (first, end) = (cur.saturating_sub(n).max(oldest_held), cur.min(self.head + 1));
        let bytes = if first >= end {
            0
        } else {
            // Absolute buckets [first, end) are at most `len` consecutive slots: one or two slices.
            let (a, b) = ((first % len) as usize, (end % len) as usize);
            let sum = |s: &[u64]| s.iter().fold(0u64, |acc, &x| acc.saturating_add(x));
            if a < b {
                sum(&self.ring[a..b])
            } else {
                sum(&self.ring[a..]).saturating_add(sum(&self.ring[..b]))
            }
        };
        bytes as f64 * 8.0 / (n as f64 * self.bucket_ns as f64 / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_over_complete_buckets() {
        let mut m = RateMeter::new(Duration::from_secs(30));
        assert_eq!(m.bucket(), Duration::from_secs(1));
        // 1 Gbit/s for 10 s, reported in 1 ms batches.
        for ms in 0..10_000u64 {
            m.record(125_000, Instant::from_millis(ms));
        }
        // At t = 10 s, ten full buckets of 1 Gbit over a 30 s window: 333 Mbit/s.
        assert!((m.mean_bps(Instant::from_secs(10)) - 1e9 / 3.0).abs() < 1.0);
        // The partial current bucket is not counted.
        m.record(1_000_000_000, Instant::from_millis(10_500));
        assert!((m.mean_bps(Instant::from_millis(10_900)) - 1e9 / 3.0).abs() < 1.0);
        // Everything ages out after the window.
        assert_eq!(m.mean_bps(Instant::from_secs(41)), 0.0);
        // Late bytes older than the window are ignored, not misfiled.
        m.record(5, Instant::from_secs(100));
        m.record(999, Instant::from_secs(1));
        assert_eq!(m.mean_bps(Instant::from_secs(101)), 5.0 * 8.0 / 30.0);
    }

    proptest::proptest! {
        /// The ring agrees with a naive model that keeps every sample.
        #[test]
        fn agrees_with_a_naive_model(samples in proptest::collection::vec((0u64..200, 0u64..1_000_000), 0..200), probe in 0u64..260) {
            let mut m = RateMeter::new(Duration::from_secs(30));
            let mut sorted = samples.clone();
            sorted.sort_by_key(|s| s.0);
            let mut kept: Vec<(u64, u64)> = Vec::new();
            let mut newest = 0;
            for (t, b) in sorted {
                m.record(b, Instant::from_secs(t));
                newest = newest.max(t);
                kept.push((t, b));
            }
            // The model: buckets [probe - 30, probe) that the ring still holds (newest - 30 ..= newest).
            let lo = probe.saturating_sub(30).max((newest + 1).saturating_sub(31));
            let want: u64 = kept.iter().filter(|(t, _)| *t >= lo && *t < probe && *t <= newest).map(|(_, b)| b).sum();
            let got = m.mean_bps(Instant::from_secs(probe));
            proptest::prop_assert!((got - want as f64 * 8.0 / 30.0).abs() < 1e-6);
            // The recent rate: the same model over the last 3 buckets.
            let lo = probe.saturating_sub(3).max((newest + 1).saturating_sub(31));
            let want: u64 = kept.iter().filter(|(t, _)| *t >= lo && *t < probe && *t <= newest).map(|(_, b)| b).sum();
            let got = m.recent_bps(Instant::from_secs(probe));
            proptest::prop_assert!((got - want as f64 * 8.0 / 3.0).abs() < 1e-6);
        }
    }

    #[test]
    fn recent_rate_follows_a_step_and_a_silence() {
        let mut m = RateMeter::new(Duration::from_secs(30));
        // 1 Gbit/s for 60 s, then 4 Gbit/s from 60 s, silent from 70 s.
        let record = |m: &mut RateMeter, secs: core::ops::Range<u64>| {
            for s in secs {
                m.record(if s < 60 { 125_000_000 } else { 500_000_000 }, Instant::from_secs(s));
            }
        };
        record(&mut m, 0..63);
        // Three seconds after the step the recent rate is the new one; the mean has barely moved.
        assert!((m.recent_bps(Instant::from_secs(63)) - 4e9).abs() < 1.0);
        assert!((m.mean_bps(Instant::from_secs(63)) - 1.3e9).abs() < 1.0);
        record(&mut m, 63..70);
        // Three seconds into the silence the recent rate is zero, the mean still high.
        assert_eq!(m.recent_bps(Instant::from_secs(73)), 0.0);
        assert!(m.mean_bps(Instant::from_secs(73)) > 1e9);
    }

    #[test]
    fn sustained_rate_reads_exactly() {
        let mut m = RateMeter::new(Duration::from_secs(30));
        for s in 0..100u64 {
            m.record(1_250_000_000, Instant::from_secs(s)); // 10 Gbit/s
        }
        assert!((m.mean_bps(Instant::from_secs(100)) - 1e10).abs() < 1.0);
    }

    #[test]
    fn the_last_bucket_reads_its_second_alone() {
        // 30 s window: 1 s buckets. 1 Gbit/s for ten seconds, then 3 Gbit/s for one.
        let mut m = RateMeter::new(Duration::from_secs(30));
        for s in 0..10u64 {
            m.record(125_000_000, Instant::from_secs(s));
        }
        m.record(375_000_000, Instant::from_secs(10));
        // During second 11, the last complete bucket is second 10's; the mean lags far behind.
        assert!((m.last_bps(Instant::from_millis(11_500)) - 3e9).abs() < 1.0);
        assert!((m.last_bps(Instant::from_millis(10_500)) - 1e9).abs() < 1.0);
        assert!(m.mean_bps(Instant::from_millis(11_500)) < 1.2e9);
        // A second with nothing reads zero.
        assert_eq!(m.last_bps(Instant::from_millis(12_500)), 0.0);
    }
}
