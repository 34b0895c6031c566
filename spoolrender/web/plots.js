// The overview's plots, drawn as SVG from GET /history (samples `serve` keeps in the spool):
// jobs finished per interval, backlog, oldest waiting age, render durations, busy slots per
// runner. No chart library: a few rectangles, polylines and text labels (set as text).
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const W = 560;
const H = 170;
const PAD = { left: 44, right: 10, top: 10, bottom: 24 };
const RUNNER_COLORS = ["#2f6fdf", "#c98a12", "#8a4fd0", "#23925a", "#cf3b3b", "#5b6b8c"];
const PLOT_REFRESH_MS = 30000;

let plotHours = 6;

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

function niceMax(value) {
  if (!(value > 0)) return 1;
  const step = 10 ** Math.floor(Math.log10(value));
  for (const m of [1, 2, 2.5, 5, 10]) if (value <= m * step) return m * step;
  return 10 * step;
}

function clock(epoch) {
  return new Date(epoch * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

// A frame: axes, 3 y ticks, 4 time (or value) ticks; returns the scales and the svg.
function frame(x0, x1, yMax, xLabel, yFormat) {
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  const sx = (x) => PAD.left + ((x - x0) / (x1 - x0 || 1)) * plotW;
  const sy = (y) => PAD.top + plotH - (y / yMax) * plotH;
  const root = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, class: "plot", role: "img" });
  for (const y of [0, yMax / 2, yMax]) {
    root.append(svgEl("line", { x1: PAD.left, x2: W - PAD.right, y1: sy(y), y2: sy(y), class: "grid" }));
    root.append(svgText(PAD.left - 6, sy(y) + 4, yFormat(y), { "text-anchor": "end", class: "tick" }));
  }
  for (let i = 0; i <= 3; i++) {
    const x = x0 + ((x1 - x0) * i) / 3;
    root.append(svgText(sx(x), H - 6, xLabel(x), { "text-anchor": i === 0 ? "start" : i === 3 ? "end" : "middle", class: "tick" }));
  }
  return { root, sx, sy, plotH };
}

function bucketSeconds(hours, interval) {
  const wanted = (hours * 3600) / 120; // about 120 bars across
  for (const b of [60, 300, 900, 1800, 3600]) if (b >= wanted && b >= interval) return b;
  return Math.max(interval, 3600);
}

function finishedChart(samples, t0, t1, bucket) {
  const bins = new Map();
  for (const s of samples) {
    const b = Math.floor(s.start / bucket) * bucket;
    const bin = bins.get(b) || { done: 0, failed: 0 };
    bin.done += s.done;
    bin.failed += s.failed;
    bins.set(b, bin);
  }
  const yMax = niceMax(Math.max(0, ...[...bins.values()].map((b) => b.done + b.failed)));
  const { root, sx, sy } = frame(t0, t1, yMax, clock, (y) => String(Math.round(y)));
  const barW = Math.max(1, sx(t0 + bucket) - sx(t0) - 1);
  for (const [start, bin] of bins) {
    if (bin.done) root.append(svgEl("rect", { x: sx(start), y: sy(bin.done), width: barW, height: sy(0) - sy(bin.done), class: "bar-done" }));
    if (bin.failed) {
      const top = bin.done + bin.failed;
      root.append(svgEl("rect", { x: sx(start), y: sy(top), width: barW, height: sy(bin.done) - sy(top), class: "bar-failed" }));
    }
  }
  return root;
}

function lineChart(points, t0, t1, yFormat, cls) {
  const yMax = niceMax(Math.max(0, ...points.map((p) => p[1])));
  const { root, sx, sy } = frame(t0, t1, yMax, clock, yFormat);
  if (points.length) root.append(svgEl("polyline", { points: points.map(([t, v]) => `${sx(t)},${sy(v)}`).join(" "), class: cls }));
  return root;
}

function durationChart(durations) {
  const max = niceMax(Math.max(1, ...durations));
  const bins = new Array(12).fill(0);
  for (const d of durations) bins[Math.min(11, Math.floor((d / max) * 12))] += 1;
  const yMax = niceMax(Math.max(0, ...bins));
  const { root, sx, sy } = frame(0, max, yMax, (x) => duration(x), (y) => String(Math.round(y)));
  bins.forEach((n, i) => {
    if (!n) return;
    const x = sx((i * max) / 12);
    root.append(svgEl("rect", { x: x + 1, y: sy(n), width: Math.max(1, sx(max / 12) - sx(0) - 2), height: sy(0) - sy(n), class: "bar-duration" }));
  });
  return root;
}

function runnersChart(samples, t0, t1) {
  const series = new Map();
  let slots = 0;
  for (const s of samples) {
    for (const r of s.runners) {
      const key = `${r.runner}`;
      if (!series.has(key)) series.set(key, { host: r.host, points: [] });
      series.get(key).points.push([s.start + s.interval, r.busy || 0]);
      slots = Math.max(slots, r.slots || 0);
    }
  }
  const yMax = niceMax(Math.max(1, slots));
  const { root, sx, sy } = frame(t0, t1, yMax, clock, (y) => String(Math.round(y)));
  const legend = [];
  [...series.entries()].forEach(([runner, s], i) => {
    const color = RUNNER_COLORS[i % RUNNER_COLORS.length];
    root.append(svgEl("polyline", { points: s.points.map(([t, v]) => `${sx(t)},${sy(v)}`).join(" "), class: "line-runner", stroke: color }));
    const item = el("span", { className: "legend-item", text: `${s.host || "?"} (${runner.slice(0, 8)})` });
    item.style.setProperty("--c", color); // CSSOM, not a style attribute: the CSP allows no inline styles
    legend.push(item);
  });
  return { svg: root, legend };
}

function plotBox(id, title, caption, svg, legend) {
  const box = el("figure", { className: "plot-box", id }, el("figcaption", {}, el("b", { text: title }), " ", el("span", { className: "muted caption", text: caption })));
  box.append(svg);
  if (legend && legend.length) box.append(el("div", { className: "legend" }, ...legend));
  return box;
}

async function loadPlots() {
  const { ok, body } = await fetchJSON(`/history?hours=${plotHours}`);
  const area = $("#plots");
  if (!ok) {
    area.replaceChildren(el("p", { className: "empty", text: `No history: ${body.error}` }));
    return;
  }
  const samples = body.samples;
  const t1 = body.now;
  const t0 = t1 - plotHours * 3600;
  if (!samples.length) {
    area.replaceChildren(el("p", { className: "empty", text: "No history yet: `spoolrender serve` keeps a sample per interval while it runs." }));
    area.dataset.samples = "0";
    return;
  }
  const bucket = bucketSeconds(plotHours, body.interval);
  const done = samples.reduce((n, s) => n + s.done, 0);
  const failed = samples.reduce((n, s) => n + s.failed, 0);
  const durations = samples.flatMap((s) => s.durations);
  const ends = (key, scale) => samples.map((s) => [s.start + s.interval, (s[key] || 0) / scale]);
  const last = samples[samples.length - 1];
  const runners = runnersChart(samples, t0, t1);
  const per = bucket >= 3600 ? "hour" : bucket === 60 ? "minute" : `${bucket / 60} minutes`;
  const median = durations.length ? [...durations].sort((a, b) => a - b)[Math.floor(durations.length / 2)] : null;
  area.replaceChildren(
    plotBox("plot-finished", `Finished per ${per}`, `${done} done, ${failed} failed`, finishedChart(samples, t0, t1, bucket)),
    plotBox("plot-backlog", "Backlog", `incoming + retry; now ${last.backlog}`, lineChart(ends("backlog", 1), t0, t1, (y) => String(Math.round(y)), "line-backlog")),
    plotBox("plot-oldest", "Oldest waiting job", `age in minutes; now ${duration(last.oldest_waiting_seconds)}`, lineChart(ends("oldest_waiting_seconds", 60), t0, t1, (y) => `${Math.round(y)}m`, "line-oldest")),
    plotBox("plot-durations", "Render durations", `${durations.length} renders${median === null ? "" : `, median ${duration(median)}`}`, durationChart(durations)),
    plotBox("plot-runners", "Busy slots per runner", `${runners.legend.length} runner(s)`, runners.svg, runners.legend),
  );
  area.dataset.samples = String(samples.length);
  area.dataset.done = String(done);
  area.dataset.failed = String(failed);
}

for (const button of document.querySelectorAll("#plot-range button")) {
  button.addEventListener("click", () => {
    plotHours = Number(button.dataset.hours);
    for (const b of document.querySelectorAll("#plot-range button")) b.classList.toggle("active", b === button);
    loadPlots();
  });
}
loadPlots();
setInterval(loadPlots, PLOT_REFRESH_MS);
