// brk web page: pick an index and vec ids, fetch /api/vecs/query, draw the columns with uPlot.
"use strict";
const $ = (id) => document.getElementById(id);
const DATED = new Set(["dateindex", "weekindex", "monthindex", "quarterindex", "semesterindex", "yearindex", "decadeindex"]);
const COLORS = ["#f7931a", "#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
let plot = null;

function status(text, error) {
  const el = $("status");
  el.textContent = text;
  el.className = error ? "error" : "";
}

async function getJSON(url) {
  const res = await fetch(url);
  const body = await res.json();
  if (!res.ok) throw new Error(body.error ? body.error.message : res.statusText);
  return body;
}

async function loadIds(index) {
  const ids = await getJSON(`/api/vecs/index-to-ids?index=${encodeURIComponent(index)}`);
  $("idlist").innerHTML = ids.map((id) => `<option value="${id}">`).join("");
}

async function draw() {
  const index = $("index").value;
  const ids = $("ids").value.split(/[\s,]+/).filter(Boolean);
  const rows = Math.max(1, parseInt($("rows").value, 10) || 1000);
  const wanted = DATED.has(index) ? ["date", ...ids] : ids;
  const query = new URLSearchParams({ index, ids: wanted.join(","), from: String(-rows) });
  history.replaceState(null, "", `?index=${encodeURIComponent(index)}&ids=${encodeURIComponent(ids.join(","))}&rows=${rows}`);
  status("loading…");
  try {
    let cols = await getJSON(`/api/vecs/query?${query}`);
    if (wanted.length === 1) cols = [Array.isArray(cols) ? cols : [cols]];
    let x;
    const n = cols[0].length;
    if (DATED.has(index)) {
      x = cols.shift().map((d) => Date.parse(d + "T00:00:00Z") / 1000);
    } else if (index === "height") {
      const tip = (await getJSON("/health")).height;
      x = Array.from({ length: n }, (_, i) => tip - n + 1 + i);
    } else {
      x = Array.from({ length: n }, (_, i) => i - n);  // positions counted from the end
    }
    const series = [{ label: DATED.has(index) ? "date" : index }];
    ids.forEach((id, i) => series.push({ label: id, stroke: COLORS[i % COLORS.length], width: 1.5, scale: i === 0 ? "y" : "y2" }));
    const axes = [{}, { scale: "y" }];
    if (ids.length > 1) axes.push({ scale: "y2", side: 1, grid: { show: false } });
    const opts = { width: Math.min(window.innerWidth - 48, 1100), height: 420, series, axes,
                   scales: { x: { time: DATED.has(index) } } };
    if (plot) plot.destroy();
    plot = new uPlot(opts, [x, ...cols], $("chart"));
    status(`rendered ${n} rows of ${ids.join(", ")} on ${index}`);
    document.body.dataset.rendered = String(n);
  } catch (err) {
    status(String(err.message || err), true);
    document.body.dataset.rendered = "error";
  }
}

async function main() {
  const params = new URLSearchParams(location.search);
  const indexes = await getJSON("/api/vecs/indexes");
  $("index").innerHTML = indexes.map((i) => `<option>${i}</option>`).join("");
  $("index").value = params.get("index") || "dateindex";
  if (params.get("ids")) $("ids").value = params.get("ids");
  if (params.get("rows")) $("rows").value = params.get("rows");
  $("index").addEventListener("change", () => loadIds($("index").value));
  $("form").addEventListener("submit", (e) => { e.preventDefault(); draw(); });
  await loadIds($("index").value);
  await draw();
}

main().catch((err) => status(String(err.message || err), true));
