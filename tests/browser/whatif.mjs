// Opens the dashboard of a running switch in headless Chromium, asks its what-if panel what a
// reservation and a limit on one port would do, and checks what the panel shows against the
// daemon's answer to that same request (the response the page got): the per-port table's
// measured and predicted rates, whether the reservation holds and the uplinks; per port a chart
// with the measured and predicted series drawn in full and the reservation marked; per uplink a
// chart of both runs. Then asks the same question itself and checks the daemon answers alike,
// and asks with a window longer than the switch has kept and one out of form (a 409 and a 422),
// checking the daemon's error message is shown. Saves a screenshot of the answer.
//
//   node whatif.mjs URL SCREENSHOT.png PORT RESERVATION LIMIT WINDOW_S
//
// Exit 0 if all held; 1 otherwise (what was seen is printed as JSON either way).
import { chromium } from "playwright-core";

const [url, shot, port, reservation, limit, windowS] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu"],
});
const result = { errors: [], problems: [] };
const expect = (ok, what) => { if (!ok) result.problems.push(what); };
const count = (xs) => xs.filter((x) => x != null).length;

// Fills the panel's window, clicks Ask, and returns the daemon's response to the page.
async function ask(page, window) {
  await page.fill("#wi-window", String(window));
  const [response] = await Promise.all([
    page.waitForResponse((r) => r.url().includes("/api/v1/whatif"), { timeout: 150000 }),
    page.click("#wi-ask"),
  ]);
  return response;
}

try {
  const page = await browser.newPage({ viewport: { width: 1300, height: 1100 } });
  page.on("pageerror", (e) => result.errors.push(String(e)));
  await page.goto(url, { timeout: 15000 });
  // The form's port list comes from the live snapshot.
  await page.waitForSelector(`#wi-port option[value="${port}"]`, { state: "attached", timeout: 15000 });
  await page.selectOption("#wi-kind", "port");
  await page.selectOption("#wi-port", port);
  await page.fill("#wi-reservation", reservation);
  await page.fill("#wi-limit", limit);
  const response = await ask(page, windowS);
  const sent = response.request().postDataJSON();
  result.sent = sent;
  expect(JSON.stringify(sent) === JSON.stringify({ window_s: Number(windowS), ports: [{ port, reservation, limit }] }),
    "the request the page sent: " + JSON.stringify(sent));
  result.status = response.status();
  const answer = await response.json();
  expect(response.status() === 200, "the what-if failed: " + JSON.stringify(answer));
  await page.waitForSelector("#wi-answer:not([hidden])", { timeout: 10000 });
  result.status_text = await page.textContent("#wi-status");

  // The table: one row per port of the answer, its cells as the daemon's figures say.
  const shown = await page.$$eval("#wi-ports tr.wi-port", (rows) =>
    rows.map((r) => ({ port: r.dataset.port, cells: [...r.children].map((c) => c.textContent) })));
  const expected = await page.evaluate((a) => {
    const f = (b) => (b == null ? "-" : TeamsterCharts.rate(b));
    return a.ports.map((p) => ({ port: p.name, cells: [p.name, f(p.measured_bps), f(p.baseline_bps), f(p.predicted_bps),
      p.reservation_bps > 0 ? TeamsterCharts.rate(p.reservation_bps) : "-",
      p.reservation_holds == null ? "-" : p.reservation_holds ? "yes" : "no", p.uplink_before ?? "none", p.uplink_after ?? "none"] }));
  }, answer);
  result.table = shown.map((r) => r.cells.slice(0, 8).join(" | "));
  expect(shown.length === expected.length && shown.length > 0, `table rows: ${shown.length}, answer's ports: ${expected.length}`);
  for (const e of expected) {
    const row = shown.find((r) => r.port === e.port);
    expect(row && JSON.stringify(row.cells.slice(0, 8)) === JSON.stringify(e.cells),
      `row of ${e.port}: shown ${JSON.stringify(row?.cells)}, answer ${JSON.stringify(e.cells)}`);
  }
  const asked = answer.ports.find((p) => p.name === port);
  result.asked = asked;

  // The charts: per port of the series, measured and predicted drawn in full with the
  // reservation; per uplink, both runs; and the canvas really painted in the series' colours.
  const S = answer.series;
  expect(S && S.t_s.length > 0, "no series in the answer");
  for (const p of S.ports) {
    const drawn = await page.$eval(`#wi-port-charts canvas[data-port="${p.name}"]`, (c) => JSON.parse(c.dataset.drawn));
    const points = Object.fromEntries(drawn.lines.map((l) => [l.name, l.points]));
    expect(points.measured === count(p.measured) && points.predicted === count(p.predicted) && points.predicted > 0,
      `${p.name}'s chart: drew ${JSON.stringify(points)}, series has ${count(p.measured)} measured, ${count(p.predicted)} predicted`);
    const refs = drawn.refs.map((r) => r.value);
    expect(p.reservation_bps > 0 ? refs.length === 1 && refs[0] === p.reservation_bps : refs.length === 0,
      `${p.name}'s reservation ${p.reservation_bps}: drew ${JSON.stringify(refs)}`);
  }
  for (const u of S.uplinks) {
    const drawn = await page.$eval(`#wi-uplink-charts canvas[data-uplink="${u.name}"]`, (c) => JSON.parse(c.dataset.drawn));
    expect(drawn.lines.length === 2 && drawn.lines.every((l) => l.points === S.t_s.length),
      `${u.name}'s chart: ${JSON.stringify(drawn)}, ${S.t_s.length} seconds`);
  }
  // The asked port's canvas has pixels of the measured (blue), predicted (red) and reservation
  // (green) colours.
  result.colours = await page.$eval(`#wi-port-charts canvas[data-port="${port}"]`, (c) => {
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    const want = { measured: [31, 119, 180], predicted: [214, 39, 40], reservation: [44, 160, 44] };
    const found = {};
    for (const [k, [r, g, b]] of Object.entries(want)) {
      found[k] = false;
      for (let i = 0; i < d.length && !found[k]; i += 4) {
        found[k] = Math.abs(d[i] - r) + Math.abs(d[i + 1] - g) + Math.abs(d[i + 2] - b) < 30;
      }
    }
    return found;
  });
  expect(Object.values(result.colours).every(Boolean), "colours on the chart: " + JSON.stringify(result.colours));
  await page.screenshot({ path: shot, fullPage: true });

  // The same question asked directly, a few seconds later (so over a window moved on by as
  // much, where other ports' modelled demands may differ): the same changes and ports, the
  // same reservations, and for the port asked about, held to its new limit, the same prediction.
  const direct = new URL("/api/v1/whatif", url);
  direct.search = new URL(url).search;
  const again = await fetch(direct, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(sent) });
  const second = await again.json();
  expect(again.status === 200, "asked directly: " + JSON.stringify(second));
  result.direct = second.ports?.map((p) => ({ name: p.name, predicted_bps: p.predicted_bps, reservation_bps: p.reservation_bps }));
  expect(JSON.stringify(second.changes) === JSON.stringify(answer.changes), "changes asked directly: " + JSON.stringify(second.changes));
  expect(JSON.stringify(second.ports?.map((p) => [p.name, p.reservation_bps])) === JSON.stringify(answer.ports.map((p) => [p.name, p.reservation_bps])),
    "ports asked directly: " + JSON.stringify(result.direct));
  const q = second.ports?.find((x) => x.name === port);
  expect(q && Math.abs(q.predicted_bps - asked.predicted_bps) < 1e6,
    `${port} asked directly: ${JSON.stringify(q)}; by the page: ${JSON.stringify(asked)}`);

  // Errors: the daemon's status and message shown in the panel, and no stale answer.
  for (const [window, status] of [[3600, 409], [2.5, 422]]) {
    const r = await ask(page, window);
    const body = await r.json();
    await page.waitForSelector("#wi-status.error", { timeout: 10000 });
    const text = await page.textContent("#wi-status");
    const hidden = await page.$eval("#wi-answer", (e) => e.hidden);
    result[`error_${status}`] = text;
    expect(r.status() === status && typeof body.error === "string" && text.startsWith(String(status)) &&
      text.includes(body.error) && hidden, `window ${window}: ${r.status()} ${JSON.stringify(body)}, shown "${text}", answer hidden: ${hidden}`);
  }
} catch (e) {
  result.errors.push(String(e));
}
await browser.close();
console.log(JSON.stringify(result));
process.exit(result.errors.length === 0 && result.problems.length === 0 ? 0 : 1);
