// The overview's plots, drawn as SVG from GET /history (samples `serve` keeps in the spool):
// throughput today, jobs finished per interval, backlog, oldest waiting age, render
// durations, busy slots per runner. No chart library: a few rectangles, polylines and text
// labels (set as text).
//
// Axes: ticks at round values (whole counts, whole clock minutes...), so no two ticks of an
// axis share a label. Hover: every bar or sample has a transparent hit area with a <title>
// (the browser's tooltip) that the caption's read-out shows too. The default window
// ("recent") starts at the first sample of the last 6 hours, at least 15 minutes back: a
// fresh server's few samples fill the plot instead of a sliver at its right edge.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const W = 560;
const H = 170;
const PAD = { left: 48, right: 12, top: 10, bottom: 24 };
const RUNNER_COLORS = ["#2f6fdf", "#c98a12", "#8a4fd0", "#23925a", "#cf3b3b", "#5b6b8c"];
const PLOT_REFRESH_MS = 30000;
const RECENT_HOURS = 6; // what "recent" fetches
const RECENT_MIN_SECONDS = 15 * 60;
const RECENT_SPANS = [15, 30, 60, 120, 180, 360].map((m) => m * 60);
const TIME_STEPS = [10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
const SECOND_STEPS = [0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
const MAX_TICKS = 5;

let plotHours = null; // null: "recent"

function svgEl(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  for (const child of children) node.append(child);
  return node;
}

function svgText(x, y, text, attrs) {
  const node = svgEl("text", { x, y, ...(attrs || {}) });
  node.textContent = text;
  return node;
}

// Ticks 0, step, 2 step... up to a round top at or above `max`: whole numbers for counts
// (1, 2, 5, 10... apart), or one of `steps` (seconds) for durations.
function valueTicks(max, steps) {
  const top = max > 0 ? max : 1;
  let step;
  if (steps) {
    step = steps.find((s) => top / s <= MAX_TICKS - 1) || steps[steps.length - 1];
  } else {
    const raw = top / (MAX_TICKS - 1);
    const mag = 10 ** Math.max(0, Math.floor(Math.log10(raw)));
    step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw);
  }
  const ticks = [];
  for (let i = 0; i * step < top + step * 1e-9; i++) ticks.push(i * step);
  if (ticks[ticks.length - 1] < top) ticks.push(ticks.length * step);
  return { top: ticks[ticks.length - 1], ticks };
}

// Clock ticks between t0 and t1, on whole local minutes/hours, at most MAX_TICKS.
function timeTicks(t0, t1) {
  const span = t1 - t0;
  const step = TIME_STEPS.find((s) => span / s <= MAX_TICKS) || TIME_STEPS[TIME_STEPS.length - 1];
  const offset = new Date(t1 * 1000).getTimezoneOffset() * 60; // local = utc - offset
  const ticks = [];
  for (let t = Math.ceil((t0 - offset) / step) * step + offset; t <= t1; t += step) ticks.push(t);
  const withSeconds = step < 60;
  const format = (t, long) =>
    new Date(t * 1000).toLocaleString([], {
      ...(long ? { weekday: "short" } : {}),
      hour: "2-digit",
      minute: "2-digit",
      ...(withSeconds ? { second: "2-digit" } : {}),
      hour12: false,
    });
  let labels = ticks.map((t) => format(t, false));
  if (new Set(labels).size < labels.length) labels = ticks.map((t) => format(t, true)); // across days
  return ticks.map((t, i) => [t, labels[i]]);
}

function clock(epoch, seconds) {
  return new Date(epoch * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", ...(seconds ? { second: "2-digit" } : {}), hour12: false });
}

// A frame: axes with their ticks; returns the scales and the svg.
function frame(x0, x1, xTicks, y, yFormat) {
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  const sx = (x) => PAD.left + ((x - x0) / (x1 - x0 || 1)) * plotW;
  const sy = (v) => PAD.top + plotH - (v / y.top) * plotH;
  const root = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, class: "plot", role: "img" });
  for (const v of y.ticks) {
    root.append(svgEl("line", { x1: PAD.left, x2: W - PAD.right, y1: sy(v), y2: sy(v), class: "grid" }));
    root.append(svgText(PAD.left - 6, sy(v) + 4, yFormat(v), { "text-anchor": "end", class: "tick y-tick" }));
  }
  const xAxis = svgEl("g", { class: "x-axis" });
  xTicks.forEach(([x, label]) => {
    const px = sx(x);
    const anchor = px - PAD.left < 20 ? "start" : W - PAD.right - px < 20 ? "end" : "middle";
    xAxis.append(svgEl("line", { x1: px, x2: px, y1: H - PAD.bottom, y2: H - PAD.bottom + 4, class: "grid" }));
    xAxis.append(svgText(px, H - 6, label, { "text-anchor": anchor, class: "tick x-tick" }));
  });
  root.append(xAxis);
  return { root, sx, sy, plotH };
}

// A transparent column from x to x + width that says `text` on hover (tooltip and read-out).
function hitArea(x, width, text) {
  return svgEl("rect", { x, y: PAD.top, width: Math.max(1, width), height: H - PAD.top - PAD.bottom, class: "hit", "data-value": text }, svgEl("title", {}, text));
}

// Hit areas for points [t, ...]: each one reaches halfway to its neighbours.
function pointHits(points, sx, describe) {
  return points.map((p, i) => {
    const left = i ? (sx(points[i - 1][0]) + sx(p[0])) / 2 : sx(p[0]) - 4;
    const right = i < points.length - 1 ? (sx(p[0]) + sx(points[i + 1][0])) / 2 : sx(p[0]) + 4;
    return hitArea(left, right - left, describe(p));
  });
}

function bucketSeconds(span, interval) {
  const wanted = span / 60; // about 60 bars across
  for (const b of [10, 30, 60, 300, 900, 1800, 3600]) if (b >= wanted && b >= interval) return b;
  return Math.max(interval, 3600);
}

const count = (y) => String(Math.round(y));

function finishedChart(samples, t0, t1, bucket) {
  const bins = new Map();
  for (const s of samples) {
    const b = Math.floor(s.start / bucket) * bucket;
    const bin = bins.get(b) || { done: 0, failed: 0 };
    bin.done += s.done;
    bin.failed += s.failed;
    bins.set(b, bin);
  }
  const y = valueTicks(Math.max(0, ...[...bins.values()].map((b) => b.done + b.failed)));
  const { root, sx, sy } = frame(t0, t1, timeTicks(t0, t1), y, count);
  const barW = Math.max(1, sx(t0 + bucket) - sx(t0) - 1);
  const hits = [];
  for (const [start, bin] of bins) {
    if (start + bucket <= t0) continue;
    if (bin.done) root.append(svgEl("rect", { x: sx(start), y: sy(bin.done), width: barW, height: sy(0) - sy(bin.done), class: "bar-done" }));
    if (bin.failed) {
      const top = bin.done + bin.failed;
      root.append(svgEl("rect", { x: sx(start), y: sy(top), width: barW, height: sy(bin.done) - sy(top), class: "bar-failed" }));
    }
    const seconds = bucket < 60;
    hits.push(hitArea(sx(start), barW, `${clock(start, seconds)}–${clock(start + bucket, seconds)}: ${bin.done} done, ${bin.failed} failed`));
  }
  root.append(...hits);
  return root;
}

function lineChart(points, t0, t1, yTicks, yFormat, cls, describe) {
  const { root, sx, sy } = frame(t0, t1, timeTicks(t0, t1), yTicks, yFormat);
  const shown = points.filter(([t]) => t >= t0);
  if (shown.length) root.append(svgEl("polyline", { points: shown.map(([t, v]) => `${sx(t)},${sy(v)}`).join(" "), class: cls }));
  root.append(...pointHits(shown, sx, describe));
  return root;
}

function durationChart(durations) {
  const x = valueTicks(Math.max(0.1, ...durations), SECOND_STEPS);
  const max = x.top;
  const bins = new Array(12).fill(0);
  for (const d of durations) bins[Math.min(11, Math.floor((d / max) * 12))] += 1;
  const y = valueTicks(Math.max(0, ...bins));
  const { root, sx, sy } = frame(0, max, x.ticks.map((v) => [v, exactDuration(v)]), y, count);
  const binW = sx(max / 12) - sx(0);
  const hits = [];
  bins.forEach((n, i) => {
    if (!n) return;
    const left = sx((i * max) / 12);
    root.append(svgEl("rect", { x: left + 1, y: sy(n), width: Math.max(1, binW - 2), height: sy(0) - sy(n), class: "bar-duration" }));
    hits.push(hitArea(left, binW, `${exactDuration((i * max) / 12)}–${exactDuration(((i + 1) * max) / 12)}: ${n} render${n === 1 ? "" : "s"}`));
  });
  root.append(...hits);
  return root;
}

function runnersChart(samples, t0, t1) {
  const series = new Map();
  let slots = 0;
  const moments = [];
  for (const s of samples) {
    const t = s.start + s.interval;
    if (t < t0) continue;
    const busy = [];
    for (const r of s.runners) {
      const key = `${r.runner}`;
      if (!series.has(key)) series.set(key, { host: r.host, points: [] });
      series.get(key).points.push([t, r.busy || 0]);
      slots = Math.max(slots, r.slots || 0);
      busy.push(`${r.host || "?"} ${r.busy || 0}/${r.slots ?? "?"}`);
    }
    moments.push([t, busy.join(", ") || "no runner"]);
  }
  const { root, sx, sy } = frame(t0, t1, timeTicks(t0, t1), valueTicks(Math.max(1, slots)), count);
  const legend = [];
  [...series.entries()].forEach(([runner, s], i) => {
    const color = RUNNER_COLORS[i % RUNNER_COLORS.length];
    root.append(svgEl("polyline", { points: s.points.map(([t, v]) => `${sx(t)},${sy(v)}`).join(" "), class: "line-runner", stroke: color }));
    const item = el("span", { className: "legend-item", text: `${s.host || "?"} (${runner.slice(0, 8)})` });
    item.style.setProperty("--c", color); // CSSOM, not a style attribute: the CSP allows no inline styles
    legend.push(item);
  });
  root.append(...pointHits(moments, sx, ([t, text]) => `${clock(t, true)}: ${text} busy`));
  return { svg: root, legend };
}

function plotBox(id, title, caption, svg, legend) {
  const readout = el("span", { className: "readout", "aria-live": "polite" });
  const box = el(
    "figure",
    { className: "plot-box", id },
    el("figcaption", {}, el("b", { text: title }), " ", el("span", { className: "muted caption", text: caption }), readout),
  );
  box.append(svg);
  // The hovered bar's or sample's values, also in the caption (a tooltip takes a moment, and
  // a touch screen shows none).
  svg.addEventListener("pointerover", (event) => {
    const hit = event.target.closest(".hit");
    if (!hit) return;
    for (const other of svg.querySelectorAll(".hit.on")) other.classList.remove("on");
    hit.classList.add("on");
    readout.textContent = hit.dataset.value;
  });
  svg.addEventListener("pointerleave", () => {
    for (const other of svg.querySelectorAll(".hit.on")) other.classList.remove("on");
    readout.textContent = "";
  });
  if (legend && legend.length) box.append(el("div", { className: "legend" }, ...legend));
  return box;
}

// Done and failed since local midnight, as Sidekiq's Processed and Failed.
function throughput(totals) {
  const stat = (kind, n, label) => el("div", { className: "stat", dataset: { kind }, id: `today-${kind}` }, el("span", { className: "n", text: n.toLocaleString() }), el("span", { className: "label", text: label }));
  const all = totals.done + totals.failed;
  return el(
    "div",
    { className: "throughput", title: `since ${whenFull(totals.since)}, as far as the history goes back (48 h)` },
    stat("done", totals.done, "done today"),
    stat("failed", totals.failed, "failed today"),
    stat("rate", `${all ? Math.round((100 * totals.failed) / all) : 0}%`, "failure rate today"),
  );
}

function startOfToday() {
  const d = new Date();
  d.setHours(0, 0, 0, 0);
  return Math.floor(d.getTime() / 1000);
}

// The window shown: the chosen hours, or "recent" (see the top of this file).
function plotWindow(samples, now) {
  if (plotHours !== null) return plotHours * 3600;
  const first = samples.length ? samples[0].start : now;
  const wanted = Math.max(RECENT_MIN_SECONDS, now - first);
  return RECENT_SPANS.find((s) => s >= wanted) || RECENT_HOURS * 3600;
}

function spanText(seconds) {
  return seconds < 3600 ? `${seconds / 60} min` : `${seconds / 3600} h`;
}

async function loadPlots() {
  const hours = plotHours === null ? RECENT_HOURS : plotHours;
  const { ok, body } = await fetchJSON(`/history?hours=${hours}&totals_since=${startOfToday()}`);
  const area = $("#plots");
  if (!ok) {
    area.replaceChildren(el("p", { className: "empty", text: `No history: ${body.error}` }));
    return;
  }
  const samples = body.samples;
  const t1 = body.now;
  if (!samples.length) {
    area.replaceChildren(el("p", { className: "empty", text: "No history yet: `spoolrender serve` keeps a sample per interval while it runs." }));
    area.dataset.samples = "0";
    return;
  }
  const span = plotWindow(samples, t1);
  const t0 = t1 - span;
  const shown = samples.filter((s) => s.start + s.interval > t0);
  const bucket = bucketSeconds(span, body.interval);
  const done = shown.reduce((n, s) => n + s.done, 0);
  const failed = shown.reduce((n, s) => n + s.failed, 0);
  const durations = shown.flatMap((s) => s.durations);
  const ends = (key) => shown.map((s) => [s.start + s.interval, s[key] || 0]);
  const last = samples[samples.length - 1];
  const runners = runnersChart(shown, t0, t1);
  const per = bucket >= 3600 ? "hour" : bucket === 60 ? "minute" : bucket < 60 ? `${bucket} s` : `${bucket / 60} minutes`;
  const median = durations.length ? [...durations].sort((a, b) => a - b)[Math.floor(durations.length / 2)] : null;
  const backlog = ends("backlog");
  const oldest = ends("oldest_waiting_seconds");
  const windowText = plotHours === null ? `last ${spanText(span)}` : `last ${plotHours} h`;
  area.replaceChildren(
    throughput(body.totals),
    plotBox("plot-finished", `Finished per ${per}`, `${done} done, ${failed} failed, ${windowText}`, finishedChart(shown, t0, t1, bucket)),
    plotBox(
      "plot-backlog",
      "Backlog",
      `incoming + retry; now ${last.backlog}`,
      lineChart(backlog, t0, t1, valueTicks(Math.max(0, ...backlog.map((p) => p[1]))), count, "line-backlog", ([t, v]) => `${clock(t, true)}: ${v} waiting`),
    ),
    plotBox(
      "plot-oldest",
      "Oldest waiting job",
      `its age; now ${duration(last.oldest_waiting_seconds)}`,
      lineChart(oldest, t0, t1, valueTicks(Math.max(0, ...oldest.map((p) => p[1])), SECOND_STEPS.filter((s) => s >= 1)), exactDuration, "line-oldest", ([t, v]) => `${clock(t, true)}: ${exactDuration(v)}`),
    ),
    plotBox("plot-durations", "Render durations", `${durations.length} renders${median === null ? "" : `, median ${duration(median)}`}`, durationChart(durations)),
    plotBox("plot-runners", "Busy slots per runner", `${runners.legend.length} runner(s)`, runners.svg, runners.legend),
  );
  area.dataset.samples = String(shown.length);
  area.dataset.done = String(done);
  area.dataset.failed = String(failed);
  area.dataset.window = String(span);
}

for (const button of document.querySelectorAll("#plot-range button")) {
  button.addEventListener("click", () => {
    plotHours = button.dataset.hours ? Number(button.dataset.hours) : null;
    for (const b of document.querySelectorAll("#plot-range button")) b.classList.toggle("active", b === button);
    loadPlots();
  });
}
loadPlots();
setInterval(loadPlots, PLOT_REFRESH_MS);
