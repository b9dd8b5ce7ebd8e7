//! What `teamster ctl rx` and `GET /api/v1/rx` show of the uplinks' receive queues: per
//! uplink, each queue with the thread reading it, its frames and rate; NetQueue's filters with
//! their queue and load; and the most recent moves of filters between queues (Dynamic
//! NetQueue's packing and spreading), each with its reason and the queues' loads.

use serde::{Deserialize, Serialize};
use teamster_dp::datapath::Published;
use utoipa::ToSchema;

/// One receive queue.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct RxQueueView {
    pub queue: usize,
    /// The data-plane thread reading it (0: the switching worker); null while not open.
    pub worker: Option<usize>,
    /// Frames it received since the uplink was attached.
    pub frames: u64,
    /// Frames per second over the last round (1 s, or the packing interval).
    pub pps: f64,
    /// NetQueue: the sum of its filters' loads, as a fraction of its capacity; null under RSS.
    pub load: Option<f64>,
    /// Dynamic NetQueue: frames per second the thread reading it takes at full load, measured
    /// (or `rx.queue_pps` where set); null otherwise.
    pub capacity: Option<f64>,
}

/// A NetQueue filter: a MAC behind a local port, steered to a queue.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct RxFilterView {
    pub mac: String,
    pub port: String,
    pub queue: u16,
    /// Smoothed load, as a fraction of one queue.
    pub load: f64,
}

/// One uplink's receive queues.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct RxUplinkView {
    pub uplink: String,
    pub queues: Vec<RxQueueView>,
    pub filters: Vec<RxFilterView>,
    /// Why it receives on fewer queues than configured, if it does.
    pub note: Option<String>,
}

/// A filter moved between queues.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct RxEventView {
    pub t_s: f64,
    pub uplink: String,
    pub mac: String,
    pub from: u16,
    pub to: u16,
    /// `pack` (its queue was light and everything on it fitted elsewhere) or `spread` (its
    /// queue was over `spread_above`).
    pub reason: String,
    /// Each queue's load before the move.
    pub loads: Vec<f64>,
}

/// The receive queues of every uplink.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct RxView {
    /// Receive queues per uplink (`rx.queues`).
    pub queues: usize,
    /// `rss`, `netqueue` or `dynamic-netqueue` (`rss` with one queue: nothing is steered).
    pub steering: String,
    pub uplinks: Vec<RxUplinkView>,
    /// The most recent moves, oldest first.
    pub events: Vec<RxEventView>,
    /// Moves since start, by reason.
    pub moves: std::collections::BTreeMap<String, u64>,
}

/// The receive queues as published by the data plane.
pub fn rx_view(dp: &Published, queues: usize) -> RxView {
    let port_name = |id| {
        dp.ports
            .iter()
            .find(|p| p.plan.id == id)
            .map_or_else(|| format!("{id:?}"), |p| p.plan.name.clone())
    };
    let uplinks: Vec<RxUplinkView> = (dp.uplinks.iter())
        .filter_map(|u| Some((u, u.rx.as_ref()?)))
        .map(|(u, rx)| {
            let netqueue = rx.steering != "rss";
            RxUplinkView {
                uplink: u.plan.name.clone(),
                queues: (rx.queues.iter())
                    .map(|q| RxQueueView {
                        queue: q.queue,
                        worker: q.worker,
                        frames: q.frames,
                        pps: q.pps,
                        load: netqueue.then(|| {
                            (rx.filters.iter())
                                .filter(|f| usize::from(f.queue) == q.queue)
                                .map(|f| f.load)
                                .sum()
                        }),
                        capacity: q.capacity,
                    })
                    .collect(),
                filters: (rx.filters.iter())
                    .map(|f| RxFilterView {
                        mac: f.mac.to_string(),
                        port: port_name(f.port),
                        queue: f.queue,
                        load: f.load,
                    })
                    .collect(),
                note: rx.note.clone(),
            }
        })
        .collect();
    let steering = (dp.uplinks.iter())
        .find_map(|u| u.rx.as_ref().map(|r| r.steering))
        .unwrap_or("rss");
    RxView {
        queues,
        steering: steering.to_string(),
        uplinks,
        moves: dp.rx_moves.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        events: (dp.rx_events.iter())
            .map(|e| RxEventView {
                t_s: e.at.as_secs_f64(),
                uplink: e.uplink.clone(),
                mac: e.mac.to_string(),
                from: e.from,
                to: e.to,
                reason: e.reason.to_string(),
                loads: e.loads.clone(),
            })
            .collect(),
    }
}

/// `teamster ctl rx` as text.
pub fn rx_text(v: &RxView) -> String {
    if v.queues <= 1 {
        return "one receive queue per uplink (rx.queues = 1): nothing is steered\n".into();
    }
    let mut out = format!("{} receive queues per uplink, steering: {}\n", v.queues, v.steering);
    for u in &v.uplinks {
        out += &format!("---- uplink {} ----\n", u.uplink);
        if let Some(note) = &u.note {
            out += &format!("  note: {note}\n");
        }
        out += "  queue  worker        frames         pps    load    capacity\n";
        for q in &u.queues {
            let worker = q.worker.map_or("-".to_string(), |w| w.to_string());
            // (+ 0.0: an empty sum is -0.0, shown as 0%, not -0%.)
            let load = q.load.map_or("-".to_string(), |l| format!("{:.0}%", l * 100.0 + 0.0));
            let capacity = q.capacity.map_or("-".to_string(), |c| format!("{c:.0}"));
            out += &format!(
                "  {:>5}  {:>6}  {:>12}  {:>10.0}  {:>6}  {:>10}\n",
                q.queue, worker, q.frames, q.pps, load, capacity
            );
        }
        if !u.filters.is_empty() {
            out += "  filter mac         port              queue    load\n";
            for f in &u.filters {
                out += &format!(
                    "  {:<18}  {:<16}  {:>5}  {:>5.0}%\n",
                    f.mac,
                    f.port,
                    f.queue,
                    f.load * 100.0
                );
            }
        }
    }
    if !v.events.is_empty() {
        out += "---- packing events (most recent last) ----\n";
        for e in &v.events {
            let loads: Vec<String> = e.loads.iter().map(|l| format!("{:.0}%", l * 100.0)).collect();
            out += &format!(
                "  {:>9.3}s  {}  {}  queue {} -> {}  {}  (loads {})\n",
                e.t_s,
                e.uplink,
                e.mac,
                e.from,
                e.to,
                e.reason,
                loads.join(" ")
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_shows_queues_filters_and_events() {
        let v = RxView {
            queues: 2,
            steering: "dynamic-netqueue".into(),
            uplinks: vec![RxUplinkView {
                uplink: "u1".into(),
                queues: vec![RxQueueView {
                    queue: 1,
                    worker: Some(1),
                    frames: 42,
                    pps: 10.0,
                    load: Some(0.25),
                    capacity: Some(61_234.0),
                }],
                filters: vec![RxFilterView {
                    mac: "02:00:00:00:00:01".into(),
                    port: "vm1".into(),
                    queue: 1,
                    load: 0.25,
                }],
                note: None,
            }],
            events: vec![RxEventView {
                t_s: 3.0,
                uplink: "u1".into(),
                mac: "02:00:00:00:00:01".into(),
                from: 2,
                to: 1,
                reason: "pack".into(),
                loads: vec![0.0, 0.2, 0.05],
            }],
            moves: [("pack".to_string(), 1)].into(),
        };
        let t = rx_text(&v);
        for want in [
            "dynamic-netqueue",
            "uplink u1",
            "25%",
            "61234",
            "vm1",
            "queue 2 -> 1",
            "pack",
            "loads 0% 20% 5%",
        ] {
            assert!(t.contains(want), "{want} in\n{t}");
        }
        assert!(rx_text(&RxView::default()).contains("nothing is steered"));
    }
}
