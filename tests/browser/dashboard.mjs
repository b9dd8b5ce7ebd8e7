// Opens the dashboard of a running switch in headless Chromium and checks that it renders every
// uplink, that it shows the history the server kept from before it was opened, with times of
// day, that its figures change while traffic flows and both charts are drawn, and that the port
// group's flows or flowlets per member are shown; saves a screenshot.
//
//   node dashboard.mjs URL SCREENSHOT.png uplink1,uplink2
//
// Exit 0 if all held; 1 otherwise (what was seen is printed as JSON either way).
import { chromium } from "playwright-core";

const [url, shot, names] = process.argv.slice(2);
const expected = (names || "").split(",").filter(Boolean);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu"],
});
const result = { rendered: [], first: null, last: null, changed: false, errors: [] };
try {
  const page = await browser.newPage({ viewport: { width: 1300, height: 1100 } });
  page.on("pageerror", (e) => result.errors.push(String(e)));
  const opened = Date.now() / 1000;
  await page.goto(url, { timeout: 15000 });
  for (const u of expected) {
    await page.waitForSelector(`tr.uplink[data-uplink="${u}"]`, { timeout: 15000 });
    result.rendered.push(u);
  }
  // The server's memory: points from before the page was opened are on it.
  result.history_before = await page.evaluate((t) => history.filter((h) => h.t < t).length, opened - 0.5);
  // Times are the wall clock's.
  result.clock_shown = /\d\d:\d\d:\d\d/.test(await page.textContent("#state"));
  // The uplinks' utilisation figures, which move while traffic starts flowing.
  const read = () =>
    page.$$eval("tr.uplink", (rows) => rows.map((r) => r.querySelector(".tx").textContent + " " + r.querySelector(".rx").textContent).join(" | "));
  result.first = await read();
  for (let i = 0; i < 80 && !result.changed; i++) {
    await page.waitForTimeout(250);
    result.last = await read();
    result.changed = result.last !== result.first;
  }
  // The port group's flows or flowlets per member, once traffic flows.
  for (let i = 0; i < 40 && !result.flowlets; i++) {
    result.flowlets = await page.$$eval("tr.group span.member", (s) => s.map((m) => m.dataset.uplink + ":" + m.dataset.buckets).join(" "));
    if (!result.flowlets) await page.waitForTimeout(250);
  }
  // Let the chart fill in before the screenshot.
  if (result.changed) await page.waitForTimeout(6000);
  result.last = await read();
  // The chart has been drawn on: some pixel of the utilisation canvas is not white.
  result.chart_drawn = await page.$eval("#util", (c) => {
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    for (let i = 0; i < d.length; i += 4) if (d[i] < 250 || d[i + 1] < 250 || d[i + 2] < 250) return true;
    return false;
  });
  // The ports' chart too, once traffic has flowed.
  result.port_chart_drawn = await page.$eval("#portrates", (c) => {
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    for (let i = 0; i < d.length; i += 4) if (d[i] < 250 && d[i + 2] > 100 && d[i] !== d[i + 2]) return true;
    return false;
  });
  await page.screenshot({ path: shot, fullPage: true });
} catch (e) {
  result.errors.push(String(e));
}
await browser.close();
console.log(JSON.stringify(result));
const ok = result.rendered.length === expected.length && result.changed && result.chart_drawn && !!result.flowlets &&
  result.history_before >= 2 && result.clock_shown && result.port_chart_drawn && result.errors.length === 0;
process.exit(ok ? 0 : 1);
