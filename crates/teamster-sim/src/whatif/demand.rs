//! A port's demand from what the switch measured of it: what it wanted, not what it got.
//!
//! Model. The switch counts a port's send rate where it takes its frames, before its NetIOC
//! queue: the *offered* rate. Beside it, per second, the switch keeps ([`Evidence`]) what its
//! queue turned away (bits/s dropped as `queue_full`), how many of its frames its queue marked
//! Congestion Experienced, for what share of the second its queue held its frames, and what
//! share of them carried TCP (the user-space data plane tells these two; the kernel path's HTB
//! does not, so they are absent there). A second is *held* when the port sent and its queue
//! turned away more than 1% of what it offered, marked a frame, or held its frames half the
//! second or more. A second that is not held wanted what it offered (`measured`). In a held
//! second:
//! - a sender that slows down for it (TCP: it backs off at a drop or a mark, so what it offers
//!   says little of what it wants) wanted more than it got, by an amount nothing measured says:
//!   it is modelled as *greedy*, wanting all its fastest uplink can carry (`greedy`), with what
//!   it got as the low end of the estimate;
//! - any other sender (UDP at its own rate) wanted what it offered (`offered`: delivered plus
//!   turned away), and would take no more.
//!
//! Which it is: the share of its frames that carried TCP (half or more: it backs off), where the
//! data plane counts it; else how much was turned away (10% or more of its offer: it kept
//! sending regardless, so not TCP).
//!
//! A port held in fewer than a tenth of the seconds it sent ([`HELD_SHARE`]) is taken as never
//! held. A second the evidence says nothing of (the port idle, or not among the busiest ports
//! the history kept then) is not held. A port's answer says which way most of its held seconds
//! went, its mean estimate, and the low and high ends (equal when the estimate is certain).

use serde::{Deserialize, Serialize};

/// What the switch measured of a port beside its offered rate, as `[t_s, value]` points.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    /// Bits/s its NetIOC queue turned away (dropped as `queue_full`).
    #[serde(default)]
    pub turned_away: Vec<[f64; 2]>,
    /// Frames a second its queue marked Congestion Experienced.
    #[serde(default)]
    pub marked: Vec<[f64; 2]>,
    /// Share (0-1) of the time its queue held its frames; absent where the data plane does not
    /// tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited: Option<Vec<[f64; 2]>>,
    /// Share (0-1) of the frames it offered that carried TCP; absent where the data plane does
    /// not tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<Vec<[f64; 2]>>,
}

/// How a port's demand was estimated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum How {
    /// Never held: it wanted what it offered.
    Measured,
    /// Held, and kept offering what was turned away: delivered plus turned away.
    Offered,
    /// Held, and slowed down for it: modelled as wanting all its fastest uplink carries.
    Greedy,
}

/// A port's demand estimate over the window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    pub how: How,
    /// Mean demand the prediction gives it, bits/s.
    pub estimate_bps: f64,
    /// Mean of the least and the most it may have wanted, bits/s.
    pub low_bps: f64,
    pub high_bps: f64,
    /// Seconds of the window it was held.
    pub held_s: u32,
    /// Mean bits/s its queue turned away.
    pub turned_away_bps: f64,
}

/// What `estimate` gives a port: its demand a second, its delivered rate a second, and the
/// summary.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimated {
    pub demand: Vec<[f64; 2]>,
    pub delivered: Vec<[f64; 2]>,
    pub summary: Estimate,
}

/// A series' value at the point at `t` (within a quarter of a second: the evidence and the
/// offered rates come from the same points), or None: a second the evidence has nothing of (a
/// port idle then, or not among the busiest the history kept) is not taken from its
/// neighbours.
fn at(points: &[[f64; 2]], t: f64) -> Option<f64> {
    let i = points.partition_point(|[pt, _]| *pt < t - 0.25);
    points.get(i).filter(|[pt, _]| (*pt - t).abs() <= 0.25).map(|[_, v]| *v)
}

/// A port held in fewer than this share of the seconds it sent is taken as never held: a
/// second or two is a burst or a stall, not a port that wants more.
pub const HELD_SHARE: f64 = 0.1;

/// Estimates a port's demand at each of `offered`'s points (`[t_s, bits/s]`) from `evidence`
/// (see the module documentation); `greedy_bps` is what a greedy sender is taken to want.
pub fn estimate(offered: &[[f64; 2]], evidence: &Evidence, greedy_bps: f64) -> Estimated {
    let value = |s: &[[f64; 2]], t: f64| at(s, t).filter(|v| v.is_finite()).unwrap_or(0.0);
    let dropped_at = |t: f64, o: f64| value(&evidence.turned_away, t).clamp(0.0, o);
    // A second is held: it sent, and its queue turned some away, marked, or held its frames.
    let held_at = |t: f64, o: f64| {
        o > 0.0
            && (dropped_at(t, o) > 0.01 * o
                || value(&evidence.marked, t) > 0.0
                || evidence.waited.as_deref().is_some_and(|w| value(w, t) >= 0.5))
    };
    let sent = offered.iter().filter(|[_, o]| *o > 0.0).count();
    let held_n = offered.iter().filter(|[t, o]| held_at(*t, *o)).count();
    let noise = (held_n as f64) < HELD_SHARE * sent as f64;
    let mut demand = Vec::with_capacity(offered.len());
    let mut delivered = Vec::with_capacity(offered.len());
    let (mut low, mut high, mut away) = (0.0, 0.0, 0.0);
    let (mut offered_s, mut greedy_s) = (0u32, 0u32);
    for &[t, o] in offered {
        let dropped = dropped_at(t, o);
        let got = o - dropped;
        let held = !noise && held_at(t, o);
        let tcp = evidence.tcp.as_deref().and_then(|c| at(c, t));
        let (d, lo, hi) = if !held {
            (o, o, o)
        } else if tcp.map_or(dropped >= 0.1 * o, |share| share < 0.5) {
            offered_s += 1;
            (o, o, o)
        } else {
            greedy_s += 1;
            let g = greedy_bps.max(o);
            (g, got, g)
        };
        demand.push([t, d]);
        delivered.push([t, got]);
        low += lo;
        high += hi;
        away += dropped;
    }
    let n = offered.len().max(1) as f64;
    let how = if greedy_s == 0 && offered_s == 0 {
        How::Measured
    } else if greedy_s >= offered_s {
        How::Greedy
    } else {
        How::Offered
    };
    let summary = Estimate {
        how,
        estimate_bps: demand.iter().map(|[_, d]| d).sum::<f64>() / n,
        low_bps: low / n,
        high_bps: high / n,
        held_s: offered_s + greedy_s,
        turned_away_bps: away / n,
    };
    Estimated {
        demand,
        delivered,
        summary,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// `secs` points of `v`, a second apart (the what-if's tests use it too).
    pub(in crate::whatif) fn flat(v: f64, secs: u32) -> Vec<[f64; 2]> {
        (0..secs).map(|t| [f64::from(t), v]).collect()
    }

    #[test]
    fn a_port_never_held_wanted_what_it_offered() {
        let e = estimate(&flat(300e6, 10), &Evidence::default(), 1e9);
        assert_eq!(e.summary.how, How::Measured);
        assert_eq!(e.summary.estimate_bps, 300e6);
        assert_eq!((e.summary.low_bps, e.summary.high_bps), (300e6, 300e6));
        assert_eq!(e.delivered, flat(300e6, 10));
    }

    #[test]
    fn a_sender_that_keeps_offering_what_is_dropped_wanted_its_offer() {
        // Offers 800M, 300M of it turned away each second: it got 500M and wanted 800M.
        let ev = Evidence {
            turned_away: flat(300e6, 10),
            ..Evidence::default()
        };
        let e = estimate(&flat(800e6, 10), &ev, 1e9);
        assert_eq!(e.summary.how, How::Offered);
        assert_eq!(e.summary.estimate_bps, 800e6);
        assert_eq!(e.summary.held_s, 10);
        assert!((e.summary.turned_away_bps - 300e6).abs() < 1.0);
        assert_eq!(e.delivered, flat(500e6, 10));
    }

    #[test]
    fn a_sender_that_backs_off_is_greedy_with_what_it_got_as_the_low_end() {
        // TCP at 480M with a few drops (0.5%) and most frames waiting: it wants more.
        let ev = Evidence {
            turned_away: flat(2.4e6, 10),
            waited: Some(flat(0.9, 10)),
            ..Evidence::default()
        };
        let e = estimate(&flat(480e6, 10), &ev, 1e9);
        assert_eq!(e.summary.how, How::Greedy);
        assert_eq!(e.summary.estimate_bps, 1e9);
        assert!((e.summary.low_bps - 477.6e6).abs() < 1.0, "{:?}", e.summary);
        assert_eq!(e.summary.high_bps, 1e9);
        // Marks alone hold it too (an ECN sender loses nothing).
        let marked = Evidence {
            marked: flat(50.0, 10),
            ..Evidence::default()
        };
        assert_eq!(estimate(&flat(480e6, 10), &marked, 1e9).summary.how, How::Greedy);
    }

    #[test]
    fn tcp_backs_off_however_much_is_turned_away_and_udp_does_not() {
        // TCP whose queue turned away 40% (bursts of segments into a full queue): greedy still.
        let tcp = Evidence {
            turned_away: flat(200e6, 10),
            tcp: Some(flat(0.98, 10)),
            ..Evidence::default()
        };
        assert_eq!(estimate(&flat(500e6, 10), &tcp, 1e9).summary.how, How::Greedy);
        // UDP with few drops but most frames waiting: it got about what it offered.
        let udp = Evidence {
            turned_away: flat(2e6, 10),
            waited: Some(flat(0.9, 10)),
            tcp: Some(flat(0.0, 10)),
            ..Evidence::default()
        };
        let e = estimate(&flat(500e6, 10), &udp, 1e9);
        assert_eq!((e.summary.how, e.summary.estimate_bps), (How::Offered, 500e6));
    }

    #[test]
    fn idle_seconds_and_seconds_without_evidence_and_rare_holds_are_not_held() {
        // Held (TCP, backlogged) at 0-4 s and 6-9 s; idle at 5 s; no evidence at all at 7 s.
        let mut offered = flat(400e6, 10);
        offered[5][1] = 0.0;
        let mut backlogged = flat(0.9, 10);
        backlogged.remove(7);
        let ev = Evidence {
            waited: Some(backlogged.clone()),
            tcp: Some(flat(1.0, 10)),
            ..Evidence::default()
        };
        let e = estimate(&offered, &ev, 1e9);
        assert_eq!(e.demand[5], [5.0, 0.0], "idle: wants nothing, whatever its neighbours");
        assert_eq!(e.demand[7], [7.0, 400e6], "no evidence: wants what it offered");
        assert_eq!(e.demand[6], [6.0, 1e9]);
        assert_eq!(e.summary.held_s, 8);
        // Held one second of twenty: noise, never held.
        let mut once = flat(0.0, 20);
        once[3][1] = 1.0;
        let ev = Evidence {
            waited: Some(once),
            tcp: Some(flat(1.0, 20)),
            ..Evidence::default()
        };
        let e = estimate(&flat(400e6, 20), &ev, 1e9);
        assert_eq!((e.summary.how, e.summary.held_s), (How::Measured, 0));
    }

    #[test]
    fn a_queue_that_waits_less_than_half_the_time_does_not_hold_a_port() {
        let ev = Evidence {
            waited: Some(flat(0.3, 10)),
            ..Evidence::default()
        };
        assert_eq!(estimate(&flat(480e6, 10), &ev, 1e9).summary.how, How::Measured);
        // Held for 4 s of 10: the mean says so, the how follows the held seconds.
        let mut w = flat(0.0, 10);
        for p in w.iter_mut().take(4) {
            p[1] = 0.9;
        }
        let e = estimate(
            &flat(480e6, 10),
            &Evidence {
                waited: Some(w),
                ..Evidence::default()
            },
            1e9,
        );
        assert_eq!((e.summary.how, e.summary.held_s), (How::Greedy, 4));
        assert!((e.summary.estimate_bps - (4.0 * 1e9 + 6.0 * 480e6) / 10.0).abs() < 1.0);
    }
}
