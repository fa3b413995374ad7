// brk web page: pick an index and vec ids, fetch /api/vecs/query, draw the columns with uPlot.
"use strict";
const $ = (id) => document.getElementById(id);
const DAY = 86400;
// Months from one period's start date to the next on the dated indexes (dateindex and weekindex go by days).
const MONTHS = { monthindex: 1, quarterindex: 3, semesterindex: 6, yearindex: 12, decadeindex: 120 };
const DATED = new Set(["dateindex", "weekindex", ...Object.keys(MONTHS)]);
const COLORS = ["#f7931a", "#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
const MAX_FILL = 200000;  // at most this many empty periods are added as gaps; past it, one per gap
const measure = document.createElement("canvas").getContext("2d");
let plot = null;

// The status line; `commands` in a message are shown as code.
function status(text, error) {
  const el = $("status");
  el.replaceChildren(...String(text).split("`").map((part, i) =>
    (i % 2 ? Object.assign(document.createElement("code"), { textContent: part }) : document.createTextNode(part))));
  el.className = error ? "error" : "";
}

// The server's messages are written for every client; on this page, sentences that point to MCP tools or
// API parameters are replaced by what to do here.
const NOT_HERE = /\bget_[a-z_]+\b|\/api\/|\bfrom\/to\/count\b|\bbrk ids\b/;
const HINTS = {
  not_found: "Type in the vec ids box to see the ids on this index, or pick an example below.",
  too_large: "Lower “last rows” or plot fewer ids.",
};

function inUserWords(message, code) {
  const kept = String(message).split(/(?<=[.?!])\s+/).filter((s) => s && !NOT_HERE.test(s));
  const hint = HINTS[code];
  if (hint && !kept.includes(hint)) kept.push(hint);
  return kept.join(" ");
}

class PageError extends Error {}

async function getJSON(url) {
  let res;
  try {
    res = await fetch(url);
  } catch (err) {
    throw new PageError("The brk server did not answer; is brk serve still running?");
  }
  let body = null;
  try { body = await res.json(); } catch (err) { /* not JSON: a proxy's page, a crash */ }
  if (!res.ok || body === null) {
    const e = body && body.error;
    throw new PageError(e ? inUserWords(e.message, e.code) : `The server answered ${res.status} ${res.statusText}.`);
  }
  return body;
}

async function loadIds(index) {
  const ids = await getJSON(`/api/vecs/index-to-ids?index=${encodeURIComponent(index)}`);
  const list = $("idlist");
  list.replaceChildren(...ids.map((id) => Object.assign(document.createElement("option"), { value: id })));
}

// The start of the period k periods after (k < 0: before) t, seconds at UTC midnight, on a dated index.
function shiftPeriod(index, t, k = 1) {
  if (index === "dateindex") return t + k * DAY;
  if (index === "weekindex") return t + k * 7 * DAY;
  const d = new Date(t * 1000);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + k * MONTHS[index], d.getUTCDate()) / 1000;
}

// Dated rows exist only for periods with blocks: put the missing periods back as null rows, so uPlot
// draws a gap there instead of a line across the days without blocks.
function fillPeriods(index, x, cols) {
  const outX = [];
  const outCols = cols.map(() => []);
  let added = 0;
  for (let i = 0; i < x.length; i++) {
    if (i > 0) {
      let t = shiftPeriod(index, x[i - 1]);
      while (t < x[i]) {
        outX.push(t);
        outCols.forEach((c) => c.push(null));
        added++;
        if (added >= MAX_FILL) break;  // a gap is still a gap with one null row in it
        t = shiftPeriod(index, t);
      }
    }
    outX.push(x[i]);
    outCols.forEach((c, j) => c.push(cols[j][i]));
  }
  return { x: outX, cols: outCols, added };
}

function isNum(v) { return typeof v === "number" && Number.isFinite(v); }

// Rows with a value but none on either side: no line reaches them, so they are drawn as points.
function loneRows(col) {
  const out = [];
  col.forEach((v, i) => { if (isNum(v) && !isNum(col[i - 1]) && !isNum(col[i + 1])) out.push(i); });
  return out;
}

// Tick labels: thousands separators below a million, then k/M/G/... units; as many decimals as the
// tick step needs, so neighbouring labels never read the same.
const UNITS = ["", "k", "M", "G", "T", "P", "E", "Z", "Y"];
function tickLabels(u, splits, axisIdx, space, incr) {
  const top = Math.max(...splits.map((v) => Math.abs(v)));
  const tier = top >= 1e6 ? Math.min(UNITS.length - 1, Math.floor(Math.log10(top) / 3)) : 0;
  const scale = 10 ** (3 * tier);
  // The fewest decimals that write the step exactly (0.25 → 2), so 6.25M is not shown as 6.3M.
  const step = incr / scale;
  let decimals = 0;
  while (decimals < 12 && Math.abs(Math.round(step * 10 ** decimals) - step * 10 ** decimals) > 1e-6) decimals++;
  const fmt = new Intl.NumberFormat(undefined, { minimumFractionDigits: decimals, maximumFractionDigits: decimals });
  return splits.map((v) => (v == null ? "" : v === 0 ? "0" : fmt.format(v / scale) + UNITS[tier]));
}

// The width of a y axis: its ticks, the gap and its widest label, measured in the axis font. uPlot's fixed
// default (50 px) cut "10,000" to "0,000".
function axisSize(u, values, axisIdx, cycleNum) {
  const axis = u.axes[axisIdx];
  if (cycleNum > 1) return axis._size;  // uPlot asks again while the layout settles; keep the first answer
  let widest = 0;
  if (values) {
    measure.font = axis.font[0];
    for (const v of values) widest = Math.max(widest, measure.measureText(String(v)).width);
  }
  return Math.ceil(axis.ticks.size + axis.gap + widest / uPlot.pxRatio + 4);
}

// A flat series (one row, or one value repeated) gets a range around its value instead of a zero-height one.
function yRange(u, min, max) {
  if (!isNum(min) || !isNum(max)) return [0, 1];
  if (min === max) {
    const pad = min === 0 ? 1 : Math.abs(min) * 0.1;
    return uPlot.rangeNum(min - pad, max + pad, 0, true);
  }
  return uPlot.rangeNum(min, max, 0.1, true);
}

function chartSize() {
  const width = Math.max(200, Math.floor($("chart").clientWidth));
  return { width, height: Math.round(Math.min(420, Math.max(240, width * 0.6))) };
}

// Tick steps for a dated x axis, in seconds: none shorter than the index's period, so a short range is
// labelled by day (or month, ...) rather than by hour. Months and years as uPlot counts them (30 and 365 days).
const MO = 30 * DAY;
const YR = 365 * DAY;
const TIME_INCRS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15].map((d) => d * DAY)
  .concat([1, 2, 3, 4, 6].map((m) => m * MO), [1, 2, 5, 10, 25, 50, 100].map((y) => y * YR));

const WHOLE_INCRS = [];
for (let e = 0; e < 16; e++) for (const m of [1, 2, 5]) WHOLE_INCRS.push(m * 10 ** e);

function period(index) {
  if (index === "dateindex") return DAY;
  if (index === "weekindex") return 7 * DAY;
  return MONTHS[index] * MO;
}

function build(index, ids, x, cols) {
  const dated = DATED.has(index);
  // The legend's x: the period's start date (UTC) on dated indexes, not a time of day.
  const day = (u, t) => (t == null ? "--" : new Date(t * 1000).toISOString().slice(0, 10));
  const series = [dated ? { label: "date", value: day } : { label: index }];
  ids.forEach((id, i) => {
    const color = COLORS[i % COLORS.length];
    const lone = loneRows(cols[i]);
    series.push({
      label: id, stroke: color, width: 1.5, scale: i === 0 ? "y" : "y2", spanGaps: false,
      points: { size: 7, fill: color, filter: (u, si, show) => (show ? null : lone) },
    });
  });
  const yAxis = (scale) => ({ scale, size: axisSize, values: tickLabels });
  const xAxis = dated ? { incrs: TIME_INCRS.filter((incr) => incr >= period(index) * 0.95) }
    : { incrs: WHOLE_INCRS, space: 60 };  // heights and positions are whole numbers
  const axes = [xAxis, yAxis("y")];
  if (ids.length > 1) axes.push({ ...yAxis("y2"), side: 1, grid: { show: false } });
  const scales = {
    // One row: one period on either side, so the point sits in the middle between readable ticks.
    x: {
      time: dated,
      range: (u, min, max) => (x.length > 1 ? [min, max]
        : dated ? [shiftPeriod(index, x[0], -1), shiftPeriod(index, x[0], 1)] : [x[0] - 1, x[0] + 1]),
    },
    y: { range: yRange },
    y2: { range: yRange },
  };
  // The dates are UTC days: label them so in every time zone.
  const tzDate = (ts) => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC");
  // The legend shows the latest values until the pointer picks another row.
  const hooks = { ready: [(u) => u.setLegend({ idx: x.length - 1 })] };
  return new uPlot({ ...chartSize(), series, axes, scales, tzDate, hooks }, [x, ...cols], $("chart"));
}

async function draw() {
  const index = $("index").value;
  const ids = $("ids").value.split(/[\s,]+/).filter(Boolean);
  const rows = Math.max(1, parseInt($("rows").value, 10) || 1000);
  const here = new URLSearchParams({ index, ids: ids.join(","), rows: String(rows) });
  history.replaceState(null, "", `?${here}`);
  if (!ids.length) {
    status("Type at least one vec id, or pick an example below.", true);
    document.body.dataset.rendered = "error";
    return;
  }
  const dated = DATED.has(index);
  const wanted = dated ? ["date", ...ids] : ids;
  const query = new URLSearchParams({ index, ids: wanted.join(","), from: String(-rows) });
  status("loading…");
  try {
    let cols = await getJSON(`/api/vecs/query?${query}`);
    if (wanted.length === 1) cols = [Array.isArray(cols) ? cols : [cols]];
    const n = cols[0].length;
    if (!n) throw new PageError(`No rows of ${ids.join(", ")} on ${index} yet.`);
    let x;
    let gaps = 0;
    if (dated) {
      const filled = fillPeriods(index, cols.shift().map((d) => Date.parse(d + "T00:00:00Z") / 1000), cols);
      ({ x, cols } = filled);
      gaps = filled.added;
    } else if (index === "height") {
      const tip = (await getJSON("/health")).height;
      x = Array.from({ length: n }, (_, i) => tip - n + 1 + i);
    } else {
      x = Array.from({ length: n }, (_, i) => i - n);  // positions counted from the end
    }
    if (plot) plot.destroy();
    plot = build(index, ids, x, cols);
    const without = gaps ? ` (${gaps} ${gaps === 1 ? "period" : "periods"} without blocks left as gaps)` : "";
    status(`rendered ${n} ${n === 1 ? "row" : "rows"} of ${ids.join(", ")} on ${index}${without}`);
    document.body.dataset.rendered = String(n);
  } catch (err) {
    if (plot) { plot.destroy(); plot = null; }
    status(err instanceof PageError ? err.message : `The chart could not be drawn: ${err.message || err}`, true);
    document.body.dataset.rendered = "error";
  }
}

// The chart follows its container's width (window resizes, phone rotation).
let pending = 0;
new ResizeObserver(() => {
  cancelAnimationFrame(pending);
  pending = requestAnimationFrame(() => {
    if (!plot) return;
    const size = chartSize();
    if (size.width !== plot.width || size.height !== plot.height) plot.setSize(size);
  });
}).observe($("chart"));

async function main() {
  const params = new URLSearchParams(location.search);
  const indexes = await getJSON("/api/vecs/indexes");
  const select = $("index");
  select.replaceChildren(...indexes.map((i) => Object.assign(document.createElement("option"), { textContent: i })));
  const asked = params.get("index") || "dateindex";
  select.value = indexes.includes(asked) ? asked : "dateindex";
  if (params.get("ids")) $("ids").value = params.get("ids");
  if (params.get("rows")) $("rows").value = params.get("rows");
  select.addEventListener("change", () => loadIds(select.value).catch((err) => status(err.message, true)));
  $("form").addEventListener("submit", (e) => { e.preventDefault(); draw(); });
  await loadIds(select.value);
  await draw();
  if (select.value !== asked) {
    status(`There is no index “${asked}”; showing ${select.value}. Pick one from the index menu.`, true);
  }
}

main().catch((err) => {
  status(err instanceof PageError ? err.message : `The page could not start: ${err.message || err}`, true);
  document.body.dataset.rendered = "error";
});
