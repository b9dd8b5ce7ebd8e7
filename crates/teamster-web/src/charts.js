// Teamster's charts, shared by the live dashboard and the simulator's report.html: drawn on a
// canvas with no library. Data in, pixels out; nothing here fetches or keeps state.
"use strict";
const TeamsterCharts = (() => {
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
    "#bcbd22", "#393b79", "#7f7f7f", "#637939", "#ad494a", "#6baed6", "#e7969c", "#31a354"];
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
    const W = canvas.width, H = canvas.height, L = 80, B = 24, T = 8, R = 8;
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

  // Lines over time on one axis, in bits/s (unit "bps", the default) or as a share of a
  // capacity (unit "share"), with horizontal reference lines (a reservation, a threshold) and
  // vertical marks (port moves). A null value leaves a gap in its line.
  // d = {t: [s], lines: [{name, values: [number|null], color, dash: [on, off] or [], width}],
  //      refs: [{name, value, color, dash}], marks: [{t_s, name, color}], unit, t0, t1, label}
  // What was drawn is written to canvas.dataset.drawn (JSON: per line its name and the number
  // of points drawn; per reference its name and value), for tests and tools to read back.
  function lines(canvas, d) {
    const g = canvas.getContext("2d");
    const W = canvas.width, H = canvas.height, L = 80, B = 24, T = 8, R = 8;
    const share = d.unit === "share";
    const refs = d.refs || [], marks = d.marks || [];
    g.clearRect(0, 0, W, H);
    const t0 = d.t0 ?? d.t[0] ?? 0, t1 = Math.max(t0 + 1e-3, d.t1 ?? d.t[d.t.length - 1] ?? t0 + 1);
    const seen = d.lines.flatMap((l) => l.values.filter((v) => v != null && Number.isFinite(v)))
      .concat(refs.map((r) => r.value));
    const top = Math.max(share ? 1 : 1e6, ...seen) * 1.05;
    const x = (t) => L + ((W - L - R) * (t - t0)) / Math.max(1e-9, t1 - t0);
    const y = (v) => H - B - ((H - B - T) * Math.min(top, Math.max(0, v))) / top;
    g.strokeStyle = "#ccc"; g.fillStyle = "#666"; g.font = "11px sans-serif"; g.lineWidth = 1;
    const ticks = share ? Array.from({ length: Math.floor(top / 0.25) + 1 }, (_, k) => k * 0.25) : [0, 1, 2, 3, 4].map((k) => (top * k) / 4);
    for (const v of ticks) {
      g.beginPath(); g.moveTo(L, y(v)); g.lineTo(W - R, y(v)); g.stroke(); g.fillText(share ? pct(v) : rate(v), 4, y(v) + 4);
    }
    const label = d.label || ((t) => t.toFixed(0) + " s");
    g.fillText(label(t0), L, H - 6); g.fillText(label(t1), W - R - 60, H - 6);
    for (const m of marks.filter((m) => m.t_s >= t0 && m.t_s <= t1)) {
      g.strokeStyle = g.fillStyle = m.color || "#b00";
      g.beginPath(); g.moveTo(x(m.t_s), T); g.lineTo(x(m.t_s), H - B); g.stroke();
      if (m.name) g.fillText(m.name, x(m.t_s) + 3, T + 10);
    }
    for (const r of refs) {
      g.strokeStyle = r.color; g.setLineDash(r.dash || [6, 4]); g.lineWidth = 1.5;
      g.beginPath(); g.moveTo(L, y(r.value)); g.lineTo(W - R, y(r.value)); g.stroke();
    }
    const drawn = [];
    for (const l of d.lines) {
      g.strokeStyle = l.color; g.setLineDash(l.dash || []); g.lineWidth = l.width || 2; g.beginPath();
      let first = true, points = 0;
      l.values.forEach((v, i) => {
        const t = d.t[i];
        if (v == null || !Number.isFinite(v) || t < t0 || t > t1) { first = true; return; }
        if (first) { g.moveTo(x(t), y(v)); first = false; } else g.lineTo(x(t), y(v));
        points++;
      });
      g.stroke();
      drawn.push({ name: l.name, points });
    }
    g.setLineDash([]); g.lineWidth = 1;
    canvas.dataset.drawn = JSON.stringify({ lines: drawn, refs: refs.map((r) => ({ name: r.name, value: r.value })) });
  }

  // A legend built from DOM nodes (names as text, never markup): items = [{name, color, dash}],
  // a dashed swatch for a line drawn dashed.
  function key(el, items) {
    el.replaceChildren(...items.map((it) => {
      const span = document.createElement("span");
      const sw = document.createElement("i");
      sw.className = "line" + (it.dash && it.dash.length ? " dashed" : "");
      sw.style.borderColor = it.color;
      span.append(sw, document.createTextNode(it.name));
      return span;
    }));
  }

  // Fills `table` with a header row and body rows, each cell's content set as text (so names
  // from the API or a run are never read as markup); returns the body's <tr> elements.
  function table(el, header, body) {
    const row = (cells, tag) => {
      const tr = document.createElement("tr");
      for (const c of cells) {
        const cell = document.createElement(tag);
        cell.textContent = c == null ? "" : String(c);
        tr.append(cell);
      }
      return tr;
    };
    const trs = body.map((cells) => row(cells, "td"));
    el.replaceChildren(row(header, "th"), ...trs);
    return trs;
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

  return { utilisation, rates, lines, legend, key, allocations, rows, table, rate, pct, esc, color };
})();
