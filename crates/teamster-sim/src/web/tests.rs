//! The report's per-port throughput over time: in its data, sampled as the utilisation is, the
//! busiest ports only; and drawn by `charts.js` (run under node with a canvas that records
//! what is drawn on it).

use super::*;
use crate::run::Row;
use serde_json::Value;

/// A run of `rows` one-second rows over two 1 Gbit/s uplinks and `ports` ports, `vm1` the
/// least busy: port `i` delivers `(i + 1) Mbit/s` plus a ramp of `10 kbit/s` a second, from
/// zero at the first row.
fn run(ports: usize, rows: usize) -> RunOutput {
    let names = (1..=ports).map(|i| format!("vm{i}")).collect();
    let mut run = RunOutput::new(vec!["uplink1".into(), "uplink2".into()], vec![1e9, 1e9], names);
    run.rows = (0..rows)
        .map(|k| {
            let tx: Vec<f64> = (0..ports)
                .map(|i| {
                    if k == 0 {
                        0.0
                    } else {
                        (i + 1) as f64 * 1e6 + k as f64 * 1e4
                    }
                })
                .collect();
            Row {
                t_s: k as f64,
                uplink_tx: vec![tx.iter().sum(), 0.0],
                uplink_rx: vec![0.0, 0.0],
                offered_tx: tx.clone(),
                delivered_tx: tx,
                offered_rx: vec![0.0; ports],
                delivered_rx: vec![0.0; ports],
            }
        })
        .collect();
    run.port_uplinks = vec![Some("uplink1".into()); ports];
    run
}

/// The data a report page embeds, read back as JSON.
fn embedded(html: &str) -> Value {
    let text = html
        .split("const D = ")
        .nth(1)
        .and_then(|d| d.split(";\nconst C").next())
        .expect("the report embeds its data");
    serde_json::from_str(text).unwrap()
}

#[test]
fn the_busiest_ports_rates_over_time_are_embedded_sampled_as_the_utilisation_is() {
    // 4100 rows: every third is drawn (1367 points), as for the utilisation chart.
    let mut r = run(20, 4100);
    let plain = embedded(&report_html(&r, "twenty ports"));
    // vm20 reserves 15M from the start, 25M from 3000 s on.
    r.reservations[19] = vec![(0.0, 15e6), (3000.0, 25e6)];
    let d = embedded(&report_html(&r, "twenty ports"));
    let ps = &d["port_series"];
    let t: Vec<f64> = ps["t_s"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let history_t: Vec<f64> = d["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["t"].as_f64().unwrap())
        .collect();
    assert_eq!(t.len(), 1367);
    assert_eq!(t, history_t);
    assert_eq!((t[1], t[1366]), (3.0, 4098.0));
    assert_eq!((ps["shown"].as_u64(), ps["total"].as_u64()), (Some(16), Some(20)));
    let ports = ps["ports"].as_array().unwrap();
    // Busiest first: vm20 down to vm5; vm1 to vm4 are left out.
    let names: Vec<&str> = ports.iter().map(|p| p["name"].as_str().unwrap()).collect();
    let want: Vec<String> = (5..=20).rev().map(|i| format!("vm{i}")).collect();
    assert_eq!(names, want);
    for p in ports {
        let i: usize = p["name"].as_str().unwrap()[2..].parse::<usize>().unwrap() - 1;
        let tx: Vec<f64> = p["tx_bps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        let expected: Vec<f64> = r.rows.iter().step_by(3).map(|row| row.delivered_tx[i]).collect();
        assert_eq!(tx, expected, "{}", p["name"]);
        assert_eq!(tx[2], (i + 1) as f64 * 1e6 + 6e4);
    }
    // The reservation at each sample: 15M until 3000 s, 25M from then on.
    let held: Vec<f64> = ports[0]["reservation_bps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(held.len(), t.len());
    for (k, ts) in t.iter().enumerate() {
        assert_eq!(held[k], if *ts < 3000.0 { 15e6 } else { 25e6 }, "at {ts} s");
    }
    assert!(ports[1..].iter().all(|p| p["reservation_bps"].is_null()));
    // Without reservations: none drawn, every port's rates all the same.
    assert!(plain["port_series"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["reservation_bps"].is_null()));
    assert_eq!(plain["port_series"]["ports"][3]["tx_bps"], ports[3]["tx_bps"]);
}

#[test]
fn a_short_run_embeds_every_row_of_every_port() {
    let r = run(3, 5);
    let d = data(&r, "three");
    assert_eq!(d["port_series"]["t_s"], serde_json::json!([0.0, 1.0, 2.0, 3.0, 4.0]));
    assert_eq!(
        d["port_series"]["ports"][2]["tx_bps"],
        serde_json::json!([0.0, 1.01e6, 1.02e6, 1.03e6, 1.04e6])
    );
    assert_eq!(d["port_series"]["ports"][0]["name"], "vm3");
    assert_eq!(d["port_series"]["shown"], 3);
}

/// Runs the report's scripts under node with a stand-in document whose canvases record each
/// stroke (colour, dash, points); prints per canvas its strokes and `dataset.drawn`, and the
/// text set on elements.
const HARNESS: &str = r#"
const fs = require("fs"), vm = require("vm");
const html = fs.readFileSync(process.argv[2], "utf8");
const scripts = [...html.matchAll(/<script>([\s\S]*?)<\/script>/g)].map((m) => m[1]);
const sizes = {};
for (const m of html.matchAll(/<canvas id="(\w+)" width="(\d+)" height="(\d+)"/g)) sizes[m[1]] = [+m[2], +m[3]];
const strokes = {};
function context(id) {
  strokes[id] = [];
  let path = [], dash = [];
  return {
    set strokeStyle(c) { this._s = c; }, get strokeStyle() { return this._s; },
    fillStyle: "", font: "", lineWidth: 1,
    clearRect() {}, fillRect() {}, fillText() {},
    setLineDash(d) { dash = d; },
    beginPath() { path = []; },
    moveTo(x, y) { path.push([[x, y]]); },
    lineTo(x, y) { path[path.length - 1].push([x, y]); },
    stroke() { strokes[id].push({ color: this._s, dash, width: this.lineWidth, paths: path }); },
  };
}
const elements = {};
function element(id) {
  const [width, height] = sizes[id] || [0, 0];
  let ctx = null;
  return {
    id, width, height, clientWidth: 0, textContent: "", innerHTML: "", dataset: {}, style: {}, children: [],
    getContext() { return ctx || (ctx = context(id)); },
    replaceChildren(...c) { this.children = c; }, append(...c) { this.children.push(...c); },
  };
}
const document = {
  getElementById: (id) => elements[id] || (elements[id] = element(id)),
  createElement: () => element(""),
  createTextNode: (text) => ({ textContent: text }),
};
vm.runInNewContext(scripts.join("\n;\n"), { document });
const out = {};
for (const [id, e] of Object.entries(elements)) {
  out[id] = { text: e.textContent, drawn: e.dataset.drawn ? JSON.parse(e.dataset.drawn) : null, strokes: strokes[id] || [] };
}
console.log(JSON.stringify(out));
"#;

#[test]
fn charts_js_draws_each_port_and_its_reservation() {
    let mut r = run(20, 300);
    r.reservations[19] = vec![(0.0, 15e6)];
    r.reservations[17] = vec![(0.0, 40e6)];
    let html = report_html(&r, "twenty ports");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("report.html"), &html).unwrap();
    std::fs::write(dir.path().join("harness.js"), HARNESS).unwrap();
    let out = match std::process::Command::new("node")
        .arg(dir.path().join("harness.js"))
        .arg(dir.path().join("report.html"))
        .output()
    {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let required = std::env::var("TEAMSTER_REQUIRE_BROWSER").is_ok_and(|v| v == "1");
            assert!(!required, "TEAMSTER_REQUIRE_BROWSER=1 but node is missing");
            eprintln!("skipped: needs node");
            return;
        }
        Err(e) => panic!("node: {e}"),
    };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    let chart = &seen["portrates"];
    // The title says only some ports are drawn.
    assert!(
        seen["portrates-title"]["text"]
            .as_str()
            .unwrap()
            .ends_with("the busiest 16 of 20 ports"),
        "{}",
        seen["portrates-title"]
    );
    // Sixteen lines of 300 points each, and the two reservations, dashed, as long.
    let drawn = &chart["drawn"];
    let lines = drawn["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 18);
    assert!(lines.iter().all(|l| l["points"] == 300), "{drawn}");
    let names: Vec<&str> = lines.iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names[..4], ["vm20", "vm20 reservation", "vm19", "vm18"]);
    assert!(names.contains(&"vm18 reservation"), "{names:?}");
    // The strokes themselves: vm20's line (solid, in the first colour) and its reservation
    // (dashed, same colour). With y0 the line's first point (0 bit/s) and yr the reservation's,
    // each point's height says its rate: rate = 15M * (y0 - y) / (y0 - yr).
    let strokes = chart["strokes"].as_array().unwrap();
    let of = |dashed: bool| {
        strokes
            .iter()
            .find(|s| s["color"] == "#1f77b4" && s["dash"].as_array().unwrap().is_empty() != dashed)
            .unwrap_or_else(|| panic!("no stroke in vm20's colour (dashed: {dashed})"))
    };
    let line = of(false)["paths"][0].as_array().unwrap();
    let yr = of(true)["paths"][0][0][1].as_f64().unwrap();
    assert_eq!(line.len(), 300);
    let y0 = line[0][1].as_f64().unwrap();
    for (k, p) in line.iter().enumerate() {
        let rate = 15e6 * (y0 - p[1].as_f64().unwrap()) / (y0 - yr);
        let want = r.rows[k].delivered_tx[19];
        assert!(
            (rate - want).abs() < 1.0,
            "point {k}: drawn at {rate} bit/s, delivered {want}"
        );
    }
    // Time runs left to right.
    assert!(line.windows(2).all(|w| w[1][0].as_f64() > w[0][0].as_f64()));
}
