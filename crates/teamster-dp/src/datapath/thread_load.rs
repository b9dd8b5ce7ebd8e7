//! How much a data-plane thread can receive: its time at work and the frames it received,
//! counted by the thread, read by the switching worker's receive-queue rounds.
//!
//! Model. A thread's loop alternates a turn of work with waiting (`ppoll`; busy polling counts
//! as waiting, since a thread spinning for the next frame would take one instead). Each turn
//! adds its duration and the frames it received to the thread's [`ThreadLoad`]. Over a round, a
//! [`Meter`] takes the differences: the thread's time per frame received, everything it did
//! for those frames included (the switching worker switches every frame of every thread; a
//! port worker also sends to the ports it serves), smoothed by half each round. One over it is
//! the frames per second the thread receives when it does nothing but work: the *capacity*
//! Dynamic NetQueue counts a queue's load against (see `rx_queues`), measured on this host,
//! this build and this load, rather than a figure from elsewhere. A queue's load so comes out as
//! the share of its thread's time its frames take, and a queue whose thread is saturated reads
//! near 100%, whatever the machine.
//!
//! A thread whose uplink receive queues the kernel dropped frames on in the round (its socket's
//! buffer full), at least [`BEHIND_SHARE`] of the frames it received, received no more than it
//! did, however idle its clock says it was: on a host short of CPU a thread waiting for a core
//! is busy in all but name. For such a round its time per frame is at least the round's length
//! over its frames, so the queue reads at least full. A few drops (a burst the buffer could not
//! hold, a moment the thread was descheduled) are not a thread at its limit, and count nothing.
//!
//! A round with fewer than [`MIN_FRAMES`] frames leaves the figure as it was: the time per
//! frame of a nearly idle thread is mostly its timers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The fewest frames in a round for its time per frame to count.
pub const MIN_FRAMES: u64 = 1000;

/// The share of a round's frames the kernel must have dropped on a thread's queues for the
/// thread to count as behind in it: 1%.
pub const BEHIND_SHARE: f64 = 0.01;

/// One thread's counts since it started, shared without a lock.
#[derive(Debug, Default)]
pub struct ThreadLoad {
    busy_ns: AtomicU64,
    frames: AtomicU64,
}

impl ThreadLoad {
    /// Counts a turn of `busy` that received `frames` (by the thread itself).
    pub fn add(&self, busy: Duration, frames: u64) {
        self.busy_ns.fetch_add(busy.as_nanos() as u64, Ordering::Relaxed);
        self.frames.fetch_add(frames, Ordering::Relaxed);
    }

    /// The time at work, in nanoseconds, and the frames received, since the thread started.
    pub fn read(&self) -> (u64, u64) {
        (
            self.busy_ns.load(Ordering::Relaxed),
            self.frames.load(Ordering::Relaxed),
        )
    }
}

/// A reader's view of one thread: its counts at the last round and its smoothed time per frame.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Meter {
    last: (u64, u64),
    ns_per_frame: Option<f64>,
}

impl Meter {
    /// Takes the thread's counts now, `(busy_ns, frames)`, at the end of a round of length
    /// `round` in which the kernel dropped `drops` frames on its queues (the thread fell behind
    /// if they are [`BEHIND_SHARE`] of what it received, see the module documentation);
    /// returns its capacity, frames per second at full load, once a round has had
    /// [`MIN_FRAMES`] frames.
    pub fn round(&mut self, now: (u64, u64), round: Duration, drops: u64) -> Option<f64> {
        let busy = now.0.saturating_sub(self.last.0);
        let frames = now.1.saturating_sub(self.last.1);
        self.last = now;
        if frames >= MIN_FRAMES {
            let behind = drops as f64 >= BEHIND_SHARE * frames as f64;
            let busy = if behind {
                busy.max(round.as_nanos() as u64)
            } else {
                busy
            };
            let per = busy as f64 / frames as f64;
            self.ns_per_frame = Some(self.ns_per_frame.map_or(per, |old| (old + per) / 2.0));
        }
        self.capacity()
    }

    /// The capacity as last measured, frames per second at full load.
    pub fn capacity(&self) -> Option<f64> {
        self.ns_per_frame.filter(|n| *n > 0.0).map(|n| 1e9 / n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUND: Duration = Duration::from_secs(1);

    #[test]
    fn capacity_is_frames_per_busy_second_smoothed_and_kept_through_quiet_rounds() {
        let load = ThreadLoad::default();
        let mut m = Meter::default();
        assert_eq!(m.round(load.read(), ROUND, 0), None, "nothing yet");
        // 50,000 frames in 0.5 s of work: 100,000 frames/s at full load.
        load.add(Duration::from_millis(500), 50_000);
        assert_eq!(m.round(load.read(), ROUND, 0), Some(100_000.0));
        // A quiet round (timers only) changes nothing.
        load.add(Duration::from_millis(5), 10);
        assert_eq!(m.round(load.read(), ROUND, 0), Some(100_000.0));
        // 20 µs a frame next: the time per frame is smoothed by half (15 µs).
        load.add(Duration::from_millis(40), 2_000);
        let c = m.round(load.read(), ROUND, 0).unwrap();
        assert!((c - 1e9 / 15_000.0).abs() < 1e-6, "{c}");
    }

    #[test]
    fn a_thread_that_fell_behind_counts_the_whole_round() {
        let load = ThreadLoad::default();
        let mut m = Meter::default();
        // 30,000 frames in 0.1 s of its own work, but its queue overflowed in the 1 s round:
        // it received 30,000 frames a second, and that is what it can.
        load.add(Duration::from_millis(100), 30_000);
        let c = m.round(load.read(), ROUND, 300).unwrap();
        assert!((c - 30_000.0).abs() < 1e-6, "{c}");
        // A round that kept up, at 5 µs a frame: smoothed with the last (about 18 µs).
        load.add(Duration::from_millis(50), 10_000);
        let c = m.round(load.read(), ROUND, 0).unwrap();
        assert!((c - 1e9 / ((1e9 / 30_000.0 + 5_000.0) / 2.0)).abs() < 1e-6, "{c}");
    }

    /// A few drops (under 1% of the round's frames: a burst, a moment descheduled) do not make
    /// a thread that kept up look saturated.
    #[test]
    fn a_few_drops_are_not_a_thread_behind() {
        let load = ThreadLoad::default();
        let mut m = Meter::default();
        load.add(Duration::from_millis(100), 30_000);
        let c = m.round(load.read(), ROUND, 299).unwrap();
        assert!((c - 300_000.0).abs() < 1e-6, "{c}");
    }
}
