//! How much an uplink's scheduler holds, and whose frame is refused when it is full.
//!
//! Model. The frames waiting for an uplink are bounded in bytes, as BQL bounds a NIC's queue: a
//! *budget* of what the uplink sends in [`QueueLimit::time`] at its capacity, and never less
//! than [`MIN_BUDGET`] bytes (so a slow link still holds a few full-size frames). A frame joins
//! while the queue stays within the budget. Past the budget:
//! - a frame whose port holds less than its *fair part* joins, marked ECN Congestion Experienced
//!   where the frame carries ECN: a port that keeps the queue full cannot shut out one that sends
//!   little. A port's fair part is its NetIOC allocation's share of the budget, so that every
//!   port may hold the same time of waiting at the rate it is served
//!   ([`queue_share`](super::queue_share));
//! - a frame of a port over its fair part joins, up to twice the budget, only if it can be
//!   marked (the sender slows down as for a loss, and nothing is lost); otherwise it is refused.
//!
//! The queue is bounded: frames over the fair parts joined within the budget or, marked, within
//! twice it, and the fair parts add up to less than twice the budget (see
//! [`queue_share`](super::queue_share)); so at most four budgets wait, and three without ECN.
//! Whatever their size, at most [`QueueLimit::frames_per_port`] frames of one port wait on one
//! uplink.
//!
//! The scheduler decides the order frames leave in; this decides which frames wait at all. With
//! the budget at a few milliseconds, a frame waits that long at most for its uplink, however
//! many ports send.

use core::time::Duration;

/// The least budget an uplink gets: sixteen full-size frames.
pub const MIN_BUDGET: u64 = 16 * 1518;

/// Bounds on each uplink's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimit {
    /// Frames of one port waiting on one uplink, at most.
    pub frames_per_port: usize,
    /// The byte budget, as sending time at the uplink's capacity (None: frames only).
    pub time: Option<Duration>,
}

impl QueueLimit {
    /// The data plane's default: 5 ms of sending per uplink, 1024 frames per port.
    pub const DEFAULT: QueueLimit = QueueLimit {
        frames_per_port: 1024,
        time: Some(Duration::from_millis(5)),
    };

    /// Only a frame count per port, no byte budget.
    pub fn frames(frames_per_port: usize) -> QueueLimit {
        QueueLimit {
            frames_per_port,
            time: None,
        }
    }

    /// The byte budget of an uplink of `bps` bits per second.
    pub fn budget(&self, bps: f64) -> u64 {
        match self.time {
            None => u64::MAX / 4,
            Some(t) => ((bps / 8.0 * t.as_secs_f64()) as u64).max(MIN_BUDGET),
        }
    }
}

/// Whether a frame may join an uplink's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Within the budget.
    Join,
    /// Over the budget, but its port holds less than its fair part: joins, marked if it can be.
    JoinMarked,
    /// Over the budget and over its port's fair part: joins only if it can be marked.
    JoinIfMarked,
    /// Over its port's fair part, beyond twice the budget.
    Refuse,
}

/// The rule of the module documentation, for a frame of `len` bytes from a port holding
/// `port_bytes` of the uplink's `total` bytes queued, whose fair part is `fair` bytes.
pub fn admit(total: u64, port_bytes: u64, fair: u64, len: u64, budget: u64) -> Admit {
    if total + len <= budget {
        Admit::Join
    } else if port_bytes + len <= fair {
        Admit::JoinMarked
    } else if total + len <= 2 * budget {
        Admit::JoinIfMarked
    } else {
        Admit::Refuse
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_time_at_capacity_with_a_floor() {
        let l = QueueLimit::DEFAULT;
        assert_eq!(l.budget(10e9), 6_250_000, "5 ms at 10 Gbit/s");
        assert_eq!(l.budget(1e9), 625_000);
        assert_eq!(l.budget(20e6), MIN_BUDGET, "16 frames at 20 Mbit/s, not 12.5 kB");
        assert!(QueueLimit::frames(10).budget(1e9) > 1 << 60);
    }

    #[test]
    fn a_light_port_gets_in_where_a_heavy_one_does_not() {
        let b = 100_000;
        assert_eq!(admit(0, 0, b, 1500, b), Admit::Join);
        assert_eq!(admit(b - 1500, b - 1500, b, 1500, b), Admit::Join);
        // Full: the port holding it all is over its fair part (all of it, alone).
        assert_eq!(admit(b, b, b, 1500, b), Admit::JoinIfMarked);
        // A port with nothing queued and a fair part of half the budget.
        assert_eq!(admit(b, 0, b / 2, 1500, b), Admit::JoinMarked);
        assert_eq!(admit(b, 49_000, b / 2, 1500, b), Admit::JoinIfMarked);
        // A port served at 75% of the uplink may hold 75% of the budget past it.
        assert_eq!(admit(b, 49_000, 3 * b / 4, 1500, b), Admit::JoinMarked);
        // Beyond twice the budget, a port within its fair part still joins; others do not.
        assert_eq!(admit(2 * b, 0, b / 2, 1500, b), Admit::JoinMarked);
        assert_eq!(admit(2 * b, 49_000, b / 2, 1500, b), Admit::Refuse);
    }
}
