//! Run output: the CSV time series, the moves, the SVG plot and the JSON summary.
//!
//! `series.csv` has one row per recorded interval: `t_s`, then per uplink `<uplink>_tx_bps` and
//! `<uplink>_rx_bps`, then per port `<port>_offered_tx_bps`, `<port>_delivered_tx_bps`,
//! `<port>_offered_rx_bps`, `<port>_delivered_rx_bps`. `moves.csv` lists every port move.
//! `throughput.svg` plots per-uplink send throughput over time with Load-Based Teaming moves
//! marked, timeline events as grey lines and, when a port group uses LBT, the threshold drawn, like the
//! LBT study's figure.

use crate::expect::Verdict;
use crate::run::RunOutput;
use plotters::prelude::*;
use serde::Serialize;
use std::io::Write;
use std::path::Path;

/// The `--json` summary of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub scenario: String,
    pub expectations: Vec<Verdict>,
    pub moves: Vec<MoveSummary>,
    pub series_csv: String,
    /// Each port group's teaming and VMQ count.
    pub teams: Vec<crate::run::TeamLine>,
    /// Cluster mode: the cluster's counts each time one changed (also `cluster.csv`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cluster: Vec<crate::run::ClusterRow>,
    /// Receive mode: each variant's figures.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<(String, crate::receive::Measured)>,
}

/// One move in the summary.
#[derive(Debug, Clone, Serialize)]
pub struct MoveSummary {
    pub t_s: f64,
    pub port: String,
    pub from: Option<String>,
    pub to: Option<String>,
    pub reason: String,
}

impl Summary {
    pub fn new(scenario: &str, run: &RunOutput, expectations: Vec<Verdict>, series_csv: &Path) -> Summary {
        Summary {
            scenario: scenario.to_string(),
            expectations,
            moves: run
                .moves
                .iter()
                .map(|m| MoveSummary {
                    t_s: m.t_s,
                    port: m.port.clone(),
                    from: m.from.clone(),
                    to: m.to.clone(),
                    reason: m.reason.clone(),
                })
                .collect(),
            series_csv: series_csv.display().to_string(),
            teams: run.teams.clone(),
            cluster: run.cluster.clone(),
            variants: Vec::new(),
        }
    }
}

/// Writes the time series as CSV.
pub fn write_series(run: &RunOutput, path: &Path) -> std::io::Result<()> {
    let mut w = csv::Writer::from_path(path)?;
    let mut header = vec!["t_s".to_string()];
    for u in &run.uplinks {
        header.push(format!("{u}_tx_bps"));
        header.push(format!("{u}_rx_bps"));
    }
    for p in &run.ports {
        for col in ["offered_tx", "delivered_tx", "offered_rx", "delivered_rx"] {
            header.push(format!("{p}_{col}_bps"));
        }
    }
    w.write_record(&header)?;
    for r in &run.rows {
        let mut rec = vec![format!("{}", r.t_s)];
        for u in 0..run.uplinks.len() {
            rec.push(format!("{:.0}", r.uplink_tx[u]));
            rec.push(format!("{:.0}", r.uplink_rx[u]));
        }
        for p in 0..run.ports.len() {
            for v in [r.offered_tx[p], r.delivered_tx[p], r.offered_rx[p], r.delivered_rx[p]] {
                rec.push(format!("{v:.0}"));
            }
        }
        w.write_record(&rec)?;
    }
    w.flush()
}

/// Writes the cluster's counts as CSV: `t_s,violated,migrations,faults,refusals`.
pub fn write_cluster(run: &RunOutput, path: &Path) -> std::io::Result<()> {
    let mut w = csv::Writer::from_path(path)?;
    for c in &run.cluster {
        w.serialize(c)?;
    }
    w.flush()
}

/// Writes every move as CSV: `t_s,port,from,to,reason`.
pub fn write_moves(run: &RunOutput, path: &Path) -> std::io::Result<()> {
    let mut w = csv::Writer::from_path(path)?;
    w.write_record(["t_s", "port", "from", "to", "reason"])?;
    for m in &run.moves {
        let t = format!("{}", m.t_s);
        w.write_record([
            t.as_str(),
            &m.port,
            m.from.as_deref().unwrap_or(""),
            m.to.as_deref().unwrap_or(""),
            &m.reason,
        ])?;
    }
    w.flush()
}

/// Reads one series' value (bits/s) from a row.
type RowValue = fn(&crate::run::Row, usize) -> f64;

/// Which lines a plot draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlotSeries {
    /// One line per uplink (send).
    Uplinks,
    /// One line per port (delivered send).
    Ports,
    /// One line per receive-mode variant (its delivered throughput, in the ports' places).
    Variants,
}

/// Writes per-second TCP_RR latency percentiles: `t_s,port,transactions,p50_us,p99_us`.
pub fn write_latency(run: &RunOutput, path: &Path) -> std::io::Result<()> {
    let mut w = csv::Writer::from_path(path)?;
    w.write_record(["t_s", "port", "transactions", "p50_us", "p99_us"])?;
    for (i, samples) in run.latencies.iter().enumerate().filter(|(_, l)| !l.is_empty()) {
        let last = samples.iter().map(|(t, _)| *t).fold(0.0, f64::max).floor() as u64;
        for s in 0..=last {
            let (p50, n) = crate::expect::latency(run, i, 50.0, s as f64, s as f64 + 1.0);
            let (p99, _) = crate::expect::latency(run, i, 99.0, s as f64, s as f64 + 1.0);
            if n > 0 {
                w.write_record([
                    s.to_string(),
                    run.ports[i].clone(),
                    n.to_string(),
                    format!("{p50:.2}"),
                    format!("{p99:.2}"),
                ])?;
            }
        }
    }
    w.flush()
}

/// Plots throughput (Gbps) over time: per uplink or per port, total offered dashed, LBT moves as
/// red lines, timeline events as grey ones.
pub fn write_plot(run: &RunOutput, title: &str, series: PlotSeries, path: &Path) -> Result<(), String> {
    let end = run.rows.last().map_or(1.0, |r| r.t_s + 1.0);
    let top = run
        .rows
        .iter()
        .map(|r| {
            r.total_offered_tx()
                .max(r.uplink_tx.iter().cloned().fold(0.0, f64::max))
        })
        .fold(0.0, f64::max)
        .max(1.0)
        / 1e9
        * 1.3;
    let root = SVGBackend::new(path, (960, 540)).into_drawing_area();
    let e = |x: DrawingAreaErrorKind<_>| x.to_string();
    root.fill(&WHITE).map_err(e)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..end, 0.0..top)
        .map_err(|x| x.to_string())?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("throughput (Gbps)")
        .draw()
        .map_err(|x| x.to_string())?;
    let palette = [
        BLUE,
        GREEN,
        MAGENTA,
        CYAN,
        BLACK,
        RGBColor(230, 120, 0),
        RGBColor(120, 60, 160),
        RGBColor(0, 128, 128),
    ];
    let (names, pick): (&[String], RowValue) = match series {
        PlotSeries::Uplinks => (&run.uplinks, |r, i| r.uplink_tx[i]),
        PlotSeries::Ports | PlotSeries::Variants => (&run.ports, |r, i| r.delivered_tx[i]),
    };
    for (u, name) in names.iter().enumerate() {
        let color = palette[u % palette.len()];
        chart
            .draw_series(LineSeries::new(
                run.rows.iter().map(|r| (r.t_s, pick(r, u) / 1e9)),
                color.stroke_width(2),
            ))
            .map_err(|x| x.to_string())?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart
        .draw_series(DashedLineSeries::new(
            run.rows.iter().map(|r| (r.t_s, r.total_offered_tx() / 1e9)),
            6,
            4,
            BLACK.mix(0.5).stroke_width(1),
        ))
        .map_err(|x| x.to_string())?
        .label("total offered")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.5)));
    if let Some(threshold) = run.lbt_threshold {
        let mut caps = run.capacities.clone();
        caps.dedup();
        for cap in caps {
            let y = threshold * cap / 1e9;
            chart
                .draw_series(DashedLineSeries::new(
                    [(0.0, y), (end, y)],
                    3,
                    5,
                    RED.mix(0.6).stroke_width(1),
                ))
                .map_err(|x| x.to_string())?;
            let label = format!("LBT threshold {:.0}% of {}", threshold * 100.0, crate::run::gbps(cap));
            chart
                .draw_series(std::iter::once(Text::new(
                    label,
                    (end * 0.01, y + top * 0.01),
                    ("sans-serif", 12).into_font().color(&RED),
                )))
                .map_err(|x| x.to_string())?;
        }
    }
    for (n, (t, what)) in run.events.iter().enumerate() {
        chart
            .draw_series(DashedLineSeries::new(
                [(*t, 0.0), (*t, top)],
                4,
                4,
                BLACK.mix(0.4).stroke_width(1),
            ))
            .map_err(|x| x.to_string())?;
        // Past a dozen, labels would cover the plot: the lines say when, the summary what.
        if n >= 12 {
            continue;
        }
        let pos = (*t + end * 0.005, top * (0.03 + 0.04 * (n % 3) as f64));
        chart
            .draw_series(std::iter::once(Text::new(
                what.clone(),
                pos,
                ("sans-serif", 12).into_font().color(&BLACK),
            )))
            .map_err(|x| x.to_string())?;
    }
    // LBT moves and a cluster's migrations, the first dozen labelled.
    let marked = (run.moves.iter()).filter(|m| m.lbt.is_some() || m.reason == "migration" || m.reason == "restart");
    for (n, m) in marked.enumerate() {
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(m.t_s, 0.0), (m.t_s, top)],
                RED.stroke_width(1),
            )))
            .map_err(|x| x.to_string())?;
        if n >= 12 {
            continue;
        }
        let verb = if m.lbt.is_some() { "move" } else { m.reason.as_str() };
        let label = format!("{verb} {}: {} → {}", n + 1, m.port, m.to.as_deref().unwrap_or("-"));
        // Past the middle, the label runs left of its line, clear of the legend's corner.
        let style = ("sans-serif", 13).into_font().color(&RED);
        let style = if m.t_s > end / 2.0 {
            style.pos(plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Right,
                plotters::style::text_anchor::VPos::Top,
            ))
        } else {
            style
        };
        chart
            .draw_series(std::iter::once(Text::new(
                label,
                (m.t_s, top * (0.97 - 0.05 * n as f64)),
                style,
            )))
            .map_err(|x| x.to_string())?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|x| x.to_string())?;
    root.present().map_err(|x| x.to_string())
}

/// Writes `summary.json`.
pub fn write_summary(summary: &Summary, path: &Path) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    serde_json::to_writer_pretty(&mut f, summary)?;
    f.write_all(b"\n")
}
