//! The dashboard's memory: the last hour, one point a second, kept by the server, so a page
//! opened now shows what happened before it (`GET /api/v1/history`).
//!
//! A point is the time of day and, per uplink, its tx and rx utilisation, and per port its tx
//! and rx rates (the LBT window's means, as the snapshot has them). The ring holds at most
//! [`POINTS`] points and each at most [`PORTS_PER_POINT`] ports (the busiest at that second),
//! so its memory is bounded whatever the switch carries: about 3600 x (uplinks + 64) x 150 bytes
//! (a port's sample, its name's text included).
//! A port's sample also says what its NetIOC queues did with its frames since the point before
//! ([`Queue`]: turned away, marked, waited), from counts kept for the ports of the last snapshot.

use super::{ApiError, ApiState};
use crate::live::snapshot::Snapshot;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// Points kept: an hour at one a second.
pub const POINTS: usize = 3600;
/// Ports kept per point (the busiest).
pub const PORTS_PER_POINT: usize = 64;

/// One series' value at a point: utilisation 0-1 for an uplink, bits/s for a port.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Sample {
    pub name: String,
    pub tx: f64,
    pub rx: f64,
    /// A port's rates over the last second alone (the LBT window's last bucket), bits/s: what
    /// a what-if takes as its demand that second (`tx` and `rx` are the window's means).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<[f64; 2]>,
    /// What its NetIOC queues did with what it sent since the point before (see [`Queue`]);
    /// absent for an uplink, and for a port's first point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<Queue>,
}

/// What a port's NetIOC queues did with its frames between two points: what a what-if reads
/// to tell whether it wanted more than it got (`teamster_sim::whatif::demand`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Queue {
    /// Bits/s its queues turned away (`queue_full` drops, at its mean frame size then).
    pub turned_away: f64,
    /// Frames a second its queues marked Congestion Experienced.
    pub marked: f64,
    /// Share (0-1) of the time its queues held its frames (backlogged); absent where the data
    /// plane does not tell (the kernel path, whose HTB queues keep no such count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited: Option<f64>,
    /// Share (0-1) of the frames it offered its queues that carried TCP (a sender that backs
    /// off); absent where the data plane does not tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<f64>,
}

/// Frames a second a port must offer its queues for their counts to say anything of it: a few
/// frames held (a TCP control connection's, say, behind another port's burst) are not a port
/// held down. Below it, [`Queue`] says its queues turned nothing away and held nothing
/// (about 560 kbit/s in 1400-byte frames).
pub const QUEUE_FRAMES_TO_TELL: f64 = 50.0;

/// A port's counts at the last point, for the next point's [`Queue`].
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    unix_ms: u64,
    queue_full: u64,
    marked: u64,
    taken: u64,
    backlog_ns: u64,
    dropped_bytes: u64,
    tcp: u64,
    packets: u64,
    bytes: u64,
}

impl Tally {
    fn of(p: &crate::live::snapshot::PortView, unix_ms: u64) -> Tally {
        Tally {
            unix_ms,
            queue_full: p.counters.drops.get("queue_full").copied().unwrap_or(0),
            marked: p.queue_marked,
            taken: p.queue_taken,
            backlog_ns: p.queue_backlog_ns,
            dropped_bytes: p.queue_dropped_bytes,
            tcp: p.queue_tcp,
            packets: p.counters.rx_packets,
            bytes: p.counters.rx_bytes,
        }
    }

    /// What happened between `self` and the later `now`; None when the counts went back (the
    /// port was removed and added again) or no time passed.
    fn since(&self, now: &Tally) -> Option<Queue> {
        let secs = now.unix_ms.checked_sub(self.unix_ms)? as f64 / 1000.0;
        let d = |a: u64, b: u64| b.checked_sub(a);
        let dropped = d(self.queue_full, now.queue_full)?;
        let (packets, bytes) = (d(self.packets, now.packets)?, d(self.bytes, now.bytes)?);
        let (taken, backlog_ns) = (d(self.taken, now.taken)?, d(self.backlog_ns, now.backlog_ns)?);
        let dropped_bytes = d(self.dropped_bytes, now.dropped_bytes)?;
        let marked = d(self.marked, now.marked)?;
        let tcp = d(self.tcp, now.tcp)?;
        if secs <= 0.0 {
            return None;
        }
        if ((taken + dropped) as f64) < QUEUE_FRAMES_TO_TELL * secs {
            return Some(Queue {
                turned_away: 0.0,
                marked: 0.0,
                waited: None,
                tcp: None,
            });
        }
        // The user-space data plane counts its queues' frames and the bytes they turned away;
        // the kernel path's HTB counts the frames it dropped alone (so nothing taken, ever): at
        // the port's mean frame size over the interval (else since it started).
        let counted = now.taken > 0;
        let away = if counted {
            dropped_bytes as f64
        } else if packets > 0 {
            dropped as f64 * bytes as f64 / packets as f64
        } else if now.packets > 0 {
            dropped as f64 * now.bytes as f64 / now.packets as f64
        } else {
            0.0
        };
        Some(Queue {
            turned_away: away * 8.0 / secs,
            marked: marked as f64 / secs,
            waited: counted.then(|| (backlog_ns as f64 / (secs * 1e9)).min(1.0)),
            // Offered to its queues: what they took and what they turned away.
            tcp: counted.then(|| (tcp as f64 / (taken + dropped) as f64).min(1.0)),
        })
    }
}

/// The switch at one second.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Point {
    /// Milliseconds since the Unix epoch.
    pub unix_ms: u64,
    /// Per uplink, its tx and rx utilisation (0-1).
    pub uplinks: Vec<Sample>,
    /// Per port (the busiest [`PORTS_PER_POINT`]), its tx and rx rates in bits/s.
    pub ports: Vec<Sample>,
}

/// The ring of points.
#[derive(Debug, Default)]
pub struct History {
    points: VecDeque<Point>,
    /// Each port's counts at the last point (the ports of the last snapshot only).
    tallies: std::collections::HashMap<String, Tally>,
}

impl History {
    /// Adds the point `s` shows, unless the last one is less than a second older.
    pub fn record(&mut self, s: &Snapshot) {
        if s.unix_ms == 0 {
            return;
        }
        // The wall clock stepped back (NTP correcting an RTC kept in local time, say): the
        // points kept are from a future that will not come, and waiting for the clock to pass
        // them again would record nothing for as long as the step. They go.
        if self.points.back().is_some_and(|p| s.unix_ms < p.unix_ms) {
            self.points.clear();
            self.tallies.clear();
        }
        if self.points.back().is_some_and(|p| s.unix_ms < p.unix_ms + 1000) {
            return;
        }
        let tallies: std::collections::HashMap<String, Tally> = s
            .ports
            .iter()
            .map(|p| (p.name.clone(), Tally::of(p, s.unix_ms)))
            .collect();
        let mut ports: Vec<Sample> = s
            .ports
            .iter()
            .map(|p| Sample {
                name: p.name.clone(),
                tx: p.tx_bps,
                rx: p.rx_bps,
                last: Some([p.tx_last_bps, p.rx_last_bps]),
                queue: self
                    .tallies
                    .get(&p.name)
                    .and_then(|before| before.since(&tallies[&p.name])),
            })
            .collect();
        self.tallies = tallies;
        ports.sort_by(|a, b| (b.tx + b.rx).total_cmp(&(a.tx + a.rx)));
        ports.truncate(PORTS_PER_POINT);
        let uplinks = s
            .uplinks
            .iter()
            .map(|u| Sample {
                name: u.name.clone(),
                tx: u.tx_utilisation,
                rx: u.rx_utilisation,
                last: None,
                queue: None,
            })
            .collect();
        if self.points.len() == POINTS {
            self.points.pop_front();
        }
        self.points.push_back(Point {
            unix_ms: s.unix_ms,
            uplinks,
            ports,
        });
    }

    /// The points at or after `since` (ms since the epoch), oldest first.
    pub fn since(&self, since: u64) -> Vec<Point> {
        self.points.iter().filter(|p| p.unix_ms >= since).cloned().collect()
    }
}

/// Records a point from every snapshot the loop publishes, until it stops.
pub async fn keep(state: ApiState) {
    let mut snapshots = state.snapshots.clone();
    while snapshots.changed().await.is_ok() {
        let s = snapshots.borrow_and_update().clone();
        if let Ok(mut h) = state.history.lock() {
            h.record(&s);
        }
    }
}

/// A shared, empty history.
pub fn shared() -> Arc<Mutex<History>> {
    Arc::new(Mutex::new(History::default()))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// Only points at or after this time, in milliseconds since the Unix epoch.
    #[param(maximum = 9_223_372_036_854_775_807_i64, nullable = false)]
    pub since: Option<u64>,
}

#[utoipa::path(get, path = "/api/v1/history", params(HistoryQuery),
    responses((status = 200, body = Vec<Point>), (status = 400, body = super::ErrorBody)))]
pub async fn history(
    State(s): State<ApiState>,
    q: Result<Query<HistoryQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<Point>>, ApiError> {
    let Query(q) = q.map_err(|e| ApiError(StatusCode::BAD_REQUEST, e.body_text()))?;
    let since = super::routes::since_param(q.since)?;
    let h = s
        .history
        .lock()
        .map_err(|_| ApiError(StatusCode::INTERNAL_SERVER_ERROR, "history".into()))?;
    Ok(Json(h.since(since)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::snapshot::{PortView, UplinkView};

    fn snap(unix_ms: u64, ports: usize) -> Snapshot {
        Snapshot {
            unix_ms,
            uplinks: vec![UplinkView {
                name: "uplink1".into(),
                tx_utilisation: 0.5,
                ..Default::default()
            }],
            ports: (0..ports)
                .map(|i| PortView {
                    name: format!("vm{i}"),
                    tx_bps: i as f64,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_ring_keeps_an_hour_a_point_a_second_and_the_busiest_ports() {
        let mut h = History::default();
        h.record(&snap(0, 1));
        assert!(
            h.since(0).is_empty(),
            "a snapshot from before the switch ran is not a point"
        );
        for k in 0..(POINTS as u64 + 100) {
            h.record(&snap(1_000_000 + k * 1000, 100));
            h.record(&snap(1_000_000 + k * 1000 + 500, 100));
        }
        let all = h.since(0);
        assert_eq!(all.len(), POINTS, "bounded, one a second");
        assert_eq!(all[0].unix_ms, 1_000_000 + 100 * 1000, "the oldest went first");
        assert_eq!(all[0].ports.len(), PORTS_PER_POINT);
        assert_eq!(all[0].ports[0].name, "vm99", "the busiest first");
        assert_eq!(all[0].uplinks[0].tx, 0.5);
        assert_eq!(h.since(all[POINTS - 10].unix_ms).len(), 10);
    }

    /// A snapshot at `ms` of port vm1 with its queues' counts: frames dropped (`full`), taken,
    /// held (`backlog_ns`) and TCP, and `packets` of 1500 bytes received from it.
    fn queued(ms: u64, full: u64, taken: u64, backlog_ns: u64, tcp: u64, packets: u64) -> Snapshot {
        let mut s = snap(ms, 0);
        let mut p = PortView {
            name: "vm1".into(),
            queue_taken: taken,
            queue_backlog_ns: backlog_ns,
            // The user-space data plane counts the bytes it turns away: 1400 a frame here.
            queue_dropped_bytes: if taken > 0 { full * 1400 } else { 0 },
            queue_marked: full / 10,
            queue_tcp: tcp,
            ..Default::default()
        };
        p.counters.drops.insert("queue_full".into(), full);
        p.counters.rx_packets = packets;
        p.counters.rx_bytes = packets * 1500;
        s.ports.push(p);
        s
    }

    #[test]
    fn a_ports_queue_counts_become_rates_between_points() {
        let mut h = History::default();
        h.record(&queued(1_000_000, 0, 0, 0, 0, 0));
        // 2 s later: 1000 frames dropped (1400 bytes each), 9000 taken, the queue held 1.8 s,
        // 5000 frames of TCP.
        h.record(&queued(1_002_000, 1000, 9000, 1_800_000_000, 5000, 10_000));
        // A quiet second: 40 frames taken, 2 dropped: too few to tell.
        h.record(&queued(1_003_000, 1002, 9040, 2_700_000_000, 5000, 10_040));
        // Then the port is removed and added again: its counts start over.
        h.record(&queued(1_004_000, 5, 10, 0, 0, 20));
        let all = h.since(0);
        assert_eq!(
            all[0].ports[0].queue, None,
            "a port's first point has nothing to compare"
        );
        let q = all[1].ports[0].queue.unwrap();
        assert_eq!(q.turned_away, 1000.0 * 1400.0 * 8.0 / 2.0, "the bytes turned away");
        assert_eq!(q.marked, 50.0);
        assert_eq!(q.waited, Some(0.9));
        assert_eq!(q.tcp, Some(0.5));
        let quiet = all[2].ports[0].queue.unwrap();
        assert_eq!((quiet.turned_away, quiet.waited, quiet.tcp), (0.0, None, None));
        assert_eq!(all[3].ports[0].queue, None, "counts that went back say nothing");
    }

    #[test]
    fn on_the_kernel_path_drops_are_at_the_mean_frame_size_and_waits_unknown() {
        let mut h = History::default();
        h.record(&queued(1_000_000, 0, 0, 0, 0, 0));
        // HTB dropped 100 frames; the port sent 10,000 of 1500 bytes; nothing else is counted.
        h.record(&queued(1_001_000, 100, 0, 0, 0, 10_000));
        let q = h.since(0)[1].ports[0].queue.unwrap();
        assert_eq!(q.turned_away, 100.0 * 1500.0 * 8.0);
        assert_eq!((q.waited, q.tcp), (None, None), "not a TCP share of 0");
    }

    #[test]
    fn a_wall_clock_stepped_back_does_not_stop_the_recording() {
        let mut h = History::default();
        h.record(&snap(10_000_000, 1));
        // An hour back: recorded at once (not an hour later), and the future points are gone.
        h.record(&snap(10_000_000 - 3_600_000, 1));
        h.record(&snap(10_000_000 - 3_599_000, 1));
        let all = h.since(0);
        assert_eq!(all.len(), 2, "{:?}", all.iter().map(|p| p.unix_ms).collect::<Vec<_>>());
        assert_eq!(all[0].unix_ms, 10_000_000 - 3_600_000);
    }
}
