//! `report.html`, drawn with the charts the live dashboard also uses ([`teamster_web`]): one
//! self-contained HTML file (its data and chart code inline, no network) beside a run's CSV and
//! SVG output.

use crate::run::RunOutput;
use serde_json::json;
use std::path::Path;

use teamster_web::with_charts;

/// The most points the utilisation and port throughput charts are given; longer runs are
/// sampled evenly (every n-th row).
const MAX_POINTS: usize = 2000;

/// The most ports the throughput-over-time chart draws: the busiest, by mean delivered send rate.
const PORTS_DRAWN: usize = 16;

/// The report's data: utilisation history and the busiest ports' delivered send rates (both
/// sampled), moves, events, end-of-run port map and each port's send throughput over the last
/// tenth of the run.
fn data(run: &RunOutput, title: &str) -> serde_json::Value {
    let every = run.rows.len().div_ceil(MAX_POINTS).max(1);
    let history: Vec<_> = run
        .rows
        .iter()
        .step_by(every)
        .map(|r| {
            let util: serde_json::Map<String, serde_json::Value> = run
                .uplinks
                .iter()
                .enumerate()
                .map(|(i, u)| {
                    let cap = run.capacities[i].max(1.0);
                    (u.clone(), json!([r.uplink_tx[i] / cap, r.uplink_rx[i] / cap]))
                })
                .collect();
            json!({"t": r.t_s, "util": util})
        })
        .collect();
    let tail = &run.rows[run.rows.len() - run.rows.len().div_ceil(10).min(run.rows.len())..];
    let ports: Vec<_> = run
        .ports
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let tx = tail.iter().map(|r| r.delivered_tx[i]).sum::<f64>() / tail.len().max(1) as f64;
            json!({"name": name, "uplink": run.port_uplinks.get(i).cloned().flatten(), "tx_bps": tx})
        })
        .collect();
    let moves: Vec<_> = run
        .moves
        .iter()
        .map(|m| json!({"t_s": m.t_s, "port": m.port, "from": m.from, "to": m.to, "reason": m.reason}))
        .collect();
    let mut events: Vec<(f64, &str, String)> = run.events.iter().map(|(t, e)| (*t, "timeline", e.clone())).collect();
    events.extend(run.moves.iter().map(|m| {
        let from = m.from.as_deref().unwrap_or("none");
        let to = m.to.as_deref().unwrap_or("none");
        (m.t_s, "move", format!("port {}: {from} -> {to} ({})", m.port, m.reason))
    }));
    events.extend(run.rejections.iter().map(|(t, e)| (*t, "rejected", e.clone())));
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    let events: Vec<_> = events
        .into_iter()
        .map(|(t, kind, message)| json!({"t_s": t, "kind": kind, "message": message}))
        .collect();
    let port_series = port_series(run, every);
    json!({
        "title": title,
        "duration_s": run.rows.last().map_or(0.0, |r| r.t_s),
        "uplinks": run.uplinks,
        "capacities": run.capacities,
        "threshold": run.lbt_threshold,
        "rows": run.rows.len(),
        "points": history.len(),
        "history": history,
        "port_series": port_series,
        "ports": ports,
        "moves": moves,
        "events": events,
    })
}

/// The busiest [`PORTS_DRAWN`] ports' delivered send rate over time, every `every`-th row as the
/// utilisation chart samples them: `{t_s, ports: [{name, reservation_bps, tx_bps}], shown,
/// total}`, busiest first; `reservation_bps` is the reservation at each sample (null where it
/// has none), or null for a port that never has one.
fn port_series(run: &RunOutput, every: usize) -> serde_json::Value {
    let mean = |i: usize| run.rows.iter().map(|r| r.delivered_tx[i]).sum::<f64>() / run.rows.len().max(1) as f64;
    let means: Vec<f64> = (0..run.ports.len()).map(mean).collect();
    let mut order: Vec<usize> = (0..run.ports.len()).collect();
    // Busiest first; equals keep the run's order.
    order.sort_by(|&a, &b| means[b].total_cmp(&means[a]));
    let sampled: Vec<_> = run.rows.iter().step_by(every).collect();
    let ports: Vec<_> = order
        .iter()
        .take(PORTS_DRAWN)
        .map(|&i| {
            let held: Vec<Option<f64>> = sampled
                .iter()
                .map(|r| Some(run.reservation_at(i, r.t_s)).filter(|b| *b > 0.0))
                .collect();
            let reservation = held.iter().any(Option::is_some).then_some(held);
            let tx: Vec<f64> = sampled.iter().map(|r| r.delivered_tx[i]).collect();
            json!({"name": run.ports[i], "reservation_bps": reservation, "tx_bps": tx})
        })
        .collect();
    json!({
        "t_s": sampled.iter().map(|r| r.t_s).collect::<Vec<_>>(),
        "ports": ports,
        "shown": ports.len(),
        "total": run.ports.len(),
    })
}

/// The report as one HTML page.
pub fn report_html(run: &RunOutput, title: &str) -> String {
    // Inside a <script> element, "</" could end it early: escape it (still the same JSON).
    let data = data(run, title).to_string().replace("</", "<\\/");
    with_charts(include_str!("report.html")).replace("/*DATA*/", &data)
}

/// Writes `report.html`.
pub fn write_report(run: &RunOutput, title: &str, path: &Path) -> std::io::Result<()> {
    std::fs::write(path, report_html(run, title))
}

#[cfg(test)]
mod tests;
