//! A byte pacer: lets an uplink send at its configured capacity.
//!
//! Tokens (bytes) accrue at the rate, up to a burst. A packet may go while the balance is
//! positive, and is charged in full, so the balance can dip below zero by less than one packet:
//! the long-run rate is exact and no packet waits for a whole packet's worth of tokens. The burst
//! is the larger of two full-size frames and 2 ms at the rate: it must hold what accrues between
//! two polls of the loop, or a coarse poll would lose rate (3000 bytes at 100 Mbit/s polled every
//! millisecond delivers only 24 Mbit/s).

use teamster_core::Instant;

/// A token bucket in bytes.
#[derive(Debug, Clone)]
pub struct Pacer {
    bytes_per_ns: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Pacer {
    /// The burst at `bps`: two 1518-byte frames or 2 ms of sending, whichever is more.
    pub fn burst_for(bps: f64) -> f64 {
        (2.0 * 1518.0f64).max(bps / 8.0 * 0.002)
    }

    /// A pacer at `bps` bits per second.
    pub fn new(bps: f64, now: Instant) -> Pacer {
        let burst = Pacer::burst_for(bps);
        Pacer {
            bytes_per_ns: bps / 8e9,
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// Accrues tokens up to `now`.
    pub fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_nanos() as f64;
        self.tokens = (self.tokens + dt * self.bytes_per_ns).min(self.burst);
        self.last = now;
    }

    /// Sends at `bps` from `now` on (the link's speed changed): what accrued so far at the old
    /// rate is kept, up to the new burst.
    pub fn set_rate(&mut self, bps: f64, now: Instant) {
        self.refill(now);
        self.bytes_per_ns = bps / 8e9;
        self.burst = Pacer::burst_for(bps);
        self.tokens = self.tokens.min(self.burst);
    }

    /// The most bytes the pacer lets go at once.
    pub fn burst(&self) -> f64 {
        self.burst
    }

    /// Whether a packet may go now.
    pub fn may_send(&self) -> bool {
        self.tokens > 0.0
    }

    /// Charges a sent packet.
    pub fn charge(&mut self, bytes: usize) {
        self.tokens -= bytes as f64;
    }

    /// When half the burst (1 ms of sending, or one frame at low rates) will have accrued, if
    /// less has now: when a loop that ran out of balance should wake. It then sends a batch, not
    /// one frame per wake, and the other half of the burst is slack for a late wake-up before
    /// any of the link's time is lost.
    pub fn batch_ready_at(&self) -> Option<Instant> {
        let want = self.burst / 2.0;
        (self.tokens < want).then(|| {
            self.last + core::time::Duration::from_nanos(((want - self.tokens) / self.bytes_per_ns).ceil() as u64)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_rate_applies_from_the_change_on() {
        // 100 Mbit/s for 10 ms, then 10 Mbit/s for 10 ms, polled every 100 µs with 1500 B frames.
        let mut p = Pacer::new(100e6, Instant::ZERO);
        let mut sent = [0usize; 2];
        for step in 0..200u64 {
            let now = Instant::from_nanos(step * 100_000);
            if step == 100 {
                p.set_rate(10e6, now);
            }
            p.refill(now);
            while p.may_send() {
                p.charge(1500);
                sent[(step / 100) as usize] += 1500;
            }
        }
        // 125,000 B at 100 Mbit/s over 10 ms (plus the first burst); 12,500 B at 10 Mbit/s.
        assert!(
            (sent[0] as f64 - 125_000.0).abs() <= 2.0 * Pacer::burst_for(100e6),
            "{sent:?}"
        );
        assert!((sent[1] as f64 - 12_500.0).abs() <= 3.0 * 1500.0, "{sent:?}");
    }

    #[test]
    fn long_run_rate_is_exact() {
        // 100 Mbit/s, 1500-byte packets, for 1 simulated second in 1 ms polls.
        let mut p = Pacer::new(100e6, Instant::ZERO);
        let mut sent = 0usize;
        for ms in 1..=1000u64 {
            p.refill(Instant::from_millis(ms));
            while p.may_send() {
                p.charge(1500);
                sent += 1500;
            }
        }
        let rate = sent as f64 * 8.0;
        // The initial burst (25 kB = 0.2 Mbit) is on top of the second's 100 Mbit.
        assert!((rate - 100e6).abs() < 0.01 * 100e6, "{rate}");
        assert!(!p.may_send(), "a backlogged second ends out of balance");
    }

    #[test]
    fn waking_at_each_batch_keeps_the_rate_with_a_late_loop() {
        // 20 Mbit/s, 1442-byte frames, always backlogged, for 1 simulated second. The loop wakes
        // at `batch_ready_at` plus a lateness of 0.9 ms (under the half burst of slack): the
        // link loses none of its time, and it wakes once per batch of about a millisecond of
        // sending, not once per frame.
        let mut p = Pacer::new(20e6, Instant::ZERO);
        let (mut now, mut sent, mut wakes) = (Instant::ZERO, 0usize, 0u32);
        let end = Instant::from_millis(1000);
        while now < end {
            p.refill(now);
            while p.may_send() {
                p.charge(1442);
                sent += 1442;
            }
            now = p.batch_ready_at().unwrap() + core::time::Duration::from_micros(900);
            wakes += 1;
        }
        let rate = sent as f64 * 8.0;
        assert!((rate - 20e6).abs() < 0.01 * 20e6, "{rate}");
        // A wake every ~1 ms of accrual plus the lateness: ~2 ms, some 430 wakes.
        assert!((300..1000).contains(&wakes), "{wakes} wakes for 1,734 frames");
    }
}
