// Teamster's charts, shared by the live dashboard and the simulator's report.html: drawn on a
// canvas with no library. Data in, pixels out; nothing here fetches or keeps state.
"use strict";
const TeamsterCharts = (() => {
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"];
  const color = (i) => COLORS[i % COLORS.length];
  const pct = (x) => (100 * x).toFixed(1) + "%";
  const rate = (b) => (b >= 1e9 ? (b / 1e9).toFixed(2) + " Gbit/s" : (b / 1e6).toFixed(1) + " Mbit/s");
  const esc = (s) => String(s ?? "").replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);

  // Uplink utilisation over time: per uplink a solid tx line and a dotted rx line, the LBT
  // threshold dashed, and a vertical line per port move (orange: LBT, red: other reasons).
  // d = {uplinks: [names], history: [{t, util: {name: [tx, rx]}}], moves: [{t_s, port, reason}],
  //      threshold: 0-1 or null, t0, t1, label: optional t -> axis text (default "N s")}
  function utilisation(canvas, d) {
    const g = canvas.getContext("2d");
    const W = canvas.width, H = canvas.height, L = 50, B = 24, T = 8, R = 8;
    g.clearRect(0, 0, W, H);
    const top = Math.max(1.05, ...d.history.flatMap((h) => Object.values(h.util).flat()).map((v) => v * 1.05));
    const x = (t) => L + ((W - L - R) * (t - d.t0)) / Math.max(1e-9, d.t1 - d.t0);
    const y = (v) => H - B - ((H - B - T) * Math.min(top, v)) / top;
    g.strokeStyle = "#ccc"; g.fillStyle = "#666"; g.font = "11px sans-serif"; g.lineWidth = 1;
    for (let v = 0; v <= top; v += 0.25) {
      g.beginPath(); g.moveTo(L, y(v)); g.lineTo(W - R, y(v)); g.stroke(); g.fillText(pct(v), 4, y(v) + 4);
    }
    const label = d.label || ((t) => t.toFixed(0) + " s");
    g.fillText(label(d.t0), L, H - 6); g.fillText(label(d.t1), W - R - 60, H - 6);
    if (d.threshold != null) {
      g.setLineDash([6, 4]); g.strokeStyle = "#999";
      g.beginPath(); g.moveTo(L, y(d.threshold)); g.lineTo(W - R, y(d.threshold)); g.stroke(); g.setLineDash([]);
    }
    for (const m of d.moves.filter((m) => m.t_s >= d.t0 && m.t_s <= d.t1)) {
      g.strokeStyle = g.fillStyle = m.reason.startsWith("load-based") ? "#e69f00" : "#b00";
      g.beginPath(); g.moveTo(x(m.t_s), T); g.lineTo(x(m.t_s), H - B); g.stroke();
      g.fillText(m.port, x(m.t_s) + 3, T + 10);
    }
    d.uplinks.forEach((name, i) => {
      for (const [k, dash] of [[0, []], [1, [2, 3]]]) {
        g.strokeStyle = color(i); g.setLineDash(dash); g.lineWidth = 2; g.beginPath();
        let first = true;
        for (const h of d.history) {
          const v = h.util[name];
          if (!v || h.t < d.t0) continue;
          if (first) { g.moveTo(x(h.t), y(v[k])); first = false; } else g.lineTo(x(h.t), y(v[k]));
        }
        g.stroke(); g.setLineDash([]); g.lineWidth = 1;
      }
    });
  }

  // Rates over time: per series a solid tx line and a dotted rx line, in bits/s, the axis scaled
  // to the largest value shown. d = {names, history: [{t, vals: {name: [tx, rx]}}], t0, t1, label}
  function rates(canvas, d) {
    const g = canvas.getContext("2d");
    const W = canvas.width, H = canvas.height, L = 80, B = 24, T = 8, R = 8;
    g.clearRect(0, 0, W, H);
    const shown = d.history.filter((h) => h.t >= d.t0);
    const top = Math.max(1e6, ...shown.flatMap((h) => d.names.flatMap((n) => h.vals[n] || []))) * 1.05;
    const x = (t) => L + ((W - L - R) * (t - d.t0)) / Math.max(1e-9, d.t1 - d.t0);
    const y = (v) => H - B - ((H - B - T) * Math.min(top, v)) / top;
    g.strokeStyle = "#ccc"; g.fillStyle = "#666"; g.font = "11px sans-serif"; g.lineWidth = 1;
    for (let k = 0; k <= 4; k++) {
      const v = (top * k) / 4;
      g.beginPath(); g.moveTo(L, y(v)); g.lineTo(W - R, y(v)); g.stroke(); g.fillText(rate(v), 4, y(v) + 4);
    }
    const label = d.label || ((t) => t.toFixed(0) + " s");
    g.fillText(label(d.t0), L, H - 6); g.fillText(label(d.t1), W - R - 60, H - 6);
    d.names.forEach((name, i) => {
      for (const [k, dash] of [[0, []], [1, [2, 3]]]) {
        g.strokeStyle = color(i); g.setLineDash(dash); g.lineWidth = 2; g.beginPath();
        let first = true;
        for (const h of shown) {
          const v = h.vals[name];
          if (!v) { first = true; continue; }
          if (first) { g.moveTo(x(h.t), y(v[k])); first = false; } else g.lineTo(x(h.t), y(v[k]));
        }
        g.stroke(); g.setLineDash([]); g.lineWidth = 1;
      }
    });
  }

  // The legend of `utilisation`.
  function legend(el, uplinks) {
    el.innerHTML = uplinks.map((u, i) =>
      `<span class="uplink-legend" data-uplink="${esc(u)}"><i class="sw" style="background:${color(i)}"></i>${esc(u)} tx (solid) / rx (dotted)</span>`).join("");
  }

  // Horizontal bars: each node's allocation (or throughput), with its reservation (green |) and
  // limit (red ]) marked. nodes = [{name, kind, allocation_bps, reservation_bps, limit_bps}]
  function allocations(canvas, nodes, top) {
    canvas.height = Math.max(120, 22 * nodes.length + 30);
    if (canvas.clientWidth) canvas.style.height = (canvas.height * canvas.clientWidth) / canvas.width + "px";
    const g = canvas.getContext("2d");
    const W = canvas.width, L = 130, R = 100;
    g.clearRect(0, 0, W, canvas.height); g.font = "11px sans-serif";
    const x = (v) => L + ((W - L - R) * Math.min(v, top)) / Math.max(1, top);
    nodes.forEach((n, i) => {
      const yy = 10 + 22 * i;
      g.fillStyle = "#333"; g.fillText((n.kind === "port" ? "  " : "") + n.name, 4, yy + 12);
      g.fillStyle = n.kind === "port" ? "#1f77b4" : "#9ecae1"; g.fillRect(L, yy, x(n.allocation_bps) - L, 14);
      g.fillStyle = "#333"; g.fillText(rate(n.allocation_bps), W - R + 4, yy + 12);
      if (n.reservation_bps > 0) { g.fillStyle = "#2ca02c"; g.fillRect(x(n.reservation_bps) - 1, yy - 2, 3, 18); }
      if (n.limit_bps != null) {
        g.fillStyle = "#d62728"; g.fillRect(x(n.limit_bps) - 1, yy - 2, 3, 18);
        g.fillRect(x(n.limit_bps) - 6, yy - 2, 6, 2); g.fillRect(x(n.limit_bps) - 6, yy + 14, 6, 2);
      }
    });
  }

  // Rows of a table: `cells` are already-escaped HTML strings.
  function rows(header, body) {
    const tr = (cells, tag) => "<tr>" + cells.map((c) => `<${tag}>${c}</${tag}>`).join("") + "</tr>";
    return tr(header, "th") + body.map((cells) => tr(cells, "td")).join("");
  }

  return { utilisation, rates, legend, allocations, rows, rate, pct, esc, color };
})();
