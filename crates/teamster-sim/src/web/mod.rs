//! `report.html`, drawn with the charts the live dashboard also uses ([`teamster_web`]): one
//! self-contained HTML file (its data and chart code inline, no network) beside a run's CSV and
//! SVG output.

use crate::run::RunOutput;
use serde_json::json;
use std::path::Path;

use teamster_web::with_charts;

/// The most points the utilisation chart is given; longer runs are sampled evenly.
const MAX_POINTS: usize = 2000;

/// The report's data: utilisation history (sampled), moves, events, end-of-run port map and
/// each port's send throughput over the last tenth of the run.
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
    json!({
        "title": title,
        "duration_s": run.rows.last().map_or(0.0, |r| r.t_s),
        "uplinks": run.uplinks,
        "capacities": run.capacities,
        "threshold": run.lbt_threshold,
        "rows": run.rows.len(),
        "points": history.len(),
        "history": history,
        "ports": ports,
        "moves": moves,
        "events": events,
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
