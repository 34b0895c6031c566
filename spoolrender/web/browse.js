// Every state of the spool, page by page, from GET /jobs (which pages from the directory
// listings): state tabs with counts, a filter (id, composition and props substrings, error
// kind, queue, time range), and paging. The page's URL holds the whole query, so a view can be linked and reloaded.
"use strict";

const PAGE = 50;
const FIELDS = ["state", "q", "composition", "props", "kind", "queue", "since", "until", "offset"];
const TEXT_FILTERS = ["q", "composition", "props", "kind", "queue"]; // typed as they are sent
const TIME_WORDS = { incoming: "queued", running: "started", retry: "due", done: "finished", failed: "failed", split: "split" };
const KNOWN_KINDS = new Set();
const KNOWN_QUEUES = new Set();

let query = {};
let lastTotal = 0;

function readQuery() {
  const params = new URLSearchParams(location.search);
  query = {};
  for (const field of FIELDS) if (params.get(field)) query[field] = params.get(field);
}

function toLocalInput(epoch) {
  if (!epoch) return "";
  const d = new Date(Number(epoch) * 1000);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

function fromLocalInput(text) {
  if (!text) return "";
  const t = new Date(text).getTime();
  return Number.isFinite(t) ? String(Math.floor(t / 1000)) : "";
}

function queryString(extra) {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries({ ...query, ...extra })) if (value) params.set(key, value);
  return params.toString();
}

function itemTime(job) {
  return job.finished_at ?? job.failed_at ?? job.due ?? job.queued_at ?? job.started_at ?? null;
}

function details(job) {
  const cell = el("td", { className: "details" });
  if (job.state === "failed" || (job.state === "retry" && job.kind)) {
    cell.className = "details reason";
    cell.append(job.state === "failed" ? clipped("span", {}, `${job.kind || "?"}: ${job.reason || "?"}`, 140) : `last error: ${job.kind}`);
  } else if (job.state === "running") {
    const pct = job.progress === null || job.progress === undefined ? "–" : `${Math.round(job.progress * 100)}%`;
    cell.append(`${pct} on ${job.host || "?"}${job.stage ? `, ${job.stage}` : ""}`);
  } else if (job.state === "done") {
    if (job.output_url) cell.append(el("a", { href: job.output_url, text: (job.output || "").split("/").pop() || "output" }));
    if (job.bytes !== null && job.bytes !== undefined) cell.append(" ", sizeNode(job.bytes));
  }
  return cell;
}

function posterCell(job) {
  const cell = el("td", { className: "thumb" });
  if (job.poster_url) {
    const img = el("img", { className: "poster", src: job.poster_url, alt: "", loading: "lazy" });
    img.addEventListener("error", () => (img.hidden = true));
    cell.append(el("a", { href: jobUrl(job.id) }, img));
  }
  return cell;
}

function queueCell(job) {
  const cell = el("td", { className: "queue" });
  if (job.queue) cell.append(job.queue);
  else cell.append(el("span", { className: "muted", text: "?" }));
  if (job.requires && job.requires.length) cell.append(el("span", { className: "muted", text: ` [${job.requires.join(", ")}]` }));
  return cell;
}

function row(job) {
  const t = itemTime(job);
  const now = Date.now() / 1000 + skew;
  const whenText = !t ? "–" : job.state === "retry" ? (t <= now ? "due now" : `in ${duration(t - now)}`) : ago(t);
  return el(
    "tr",
    { dataset: { job: job.id, state: job.state } },
    posterCell(job),
    el("td", { className: "id" }, jobLink(job.id)),
    queueCell(job),
    el("td", {}, stateTag(job.state)),
    el("td", { className: "num", title: whenFull(t), text: whenText }),
    details(job),
  );
}

async function load() {
  const limit = PAGE;
  const qs = queryString({ limit: String(limit) });
  $("#json-link").setAttribute("href", `/jobs?${qs}`);
  const { ok, body } = await fetchJSON(`/jobs?${qs}`);
  const problem = $("#problem");
  problem.hidden = ok;
  if (!ok) {
    problem.textContent = `Cannot list jobs: ${body.error}`;
    document.body.dataset.ready = "1";
    return;
  }
  skew = body.generated_at - Date.now() / 1000;
  lastTotal = body.total;
  const offset = Number(query.offset || 0);
  const rows = body.jobs.map(row);
  $("#list").tBodies[0].replaceChildren(...rows);
  $("#list-empty").hidden = rows.length > 0;
  $("#range").textContent = rows.length ? `${offset + 1}–${offset + rows.length} of ${body.total}` : `0 of ${body.total}`;
  $("#prev").disabled = offset <= 0;
  $("#next").disabled = offset + rows.length >= body.total;
  updateCounts(body.counts);
  for (const job of body.jobs) if (job.kind) KNOWN_KINDS.add(job.kind);
  $("#kinds").replaceChildren(...[...KNOWN_KINDS].sort().map((k) => el("option", { value: k })));
  for (const job of body.jobs) if (job.queue) KNOWN_QUEUES.add(job.queue);
  $("#queues").replaceChildren(...[...KNOWN_QUEUES].sort().map((q) => el("option", { value: q })));
  const state = query.state || "";
  $("#time-note").textContent = state
    ? `“When” is when a job was ${TIME_WORDS[state]}; the time filter applies to it.`
    : "“When”: queued, started, due, finished or failed, by state; the time filter applies to it.";
  document.body.dataset.ready = "1";
  document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
}

function updateCounts(counts) {
  let all = 0;
  for (const tab of document.querySelectorAll("#tabs a")) {
    const state = tab.dataset.state;
    if (state) all += counts[state];
    tab.querySelector(".n").textContent = state ? String(counts[state]) : "";
    tab.classList.toggle("active", state === (query.state || ""));
  }
  document.querySelector('#tabs a[data-state=""] .n').textContent = String(all);
}

function go(changes) {
  query = { ...query, ...changes };
  for (const key of Object.keys(query)) if (!query[key]) delete query[key];
  history.pushState(null, "", `/browse${Object.keys(query).length ? `?${queryString({})}` : ""}`);
  load();
}

function fillForm() {
  for (const field of TEXT_FILTERS) $(`#f-${field}`).value = query[field] || "";
  $("#f-since").value = toLocalInput(query.since);
  $("#f-until").value = toLocalInput(query.until);
}

$("#filters").addEventListener("submit", (event) => {
  event.preventDefault();
  go({
    ...Object.fromEntries(TEXT_FILTERS.map((field) => [field, $(`#f-${field}`).value.trim()])),
    since: fromLocalInput($("#f-since").value),
    until: fromLocalInput($("#f-until").value),
    offset: "",
  });
});
$("#f-clear").addEventListener("click", () => {
  go({ ...Object.fromEntries(TEXT_FILTERS.map((field) => [field, ""])), since: "", until: "", offset: "" });
  fillForm();
});
$("#prev").addEventListener("click", () => go({ offset: String(Math.max(0, Number(query.offset || 0) - PAGE)) }));
$("#next").addEventListener("click", () => go({ offset: String(Number(query.offset || 0) + PAGE) }));
$("#refresh").addEventListener("click", () => load());
for (const tab of document.querySelectorAll("#tabs a")) {
  tab.addEventListener("click", (event) => {
    event.preventDefault();
    go({ state: tab.dataset.state, offset: "" });
  });
}
window.addEventListener("popstate", () => {
  readQuery();
  fillForm();
  load();
});

readQuery();
fillForm();
checkActions();
load();
// The tabs' counts stay live; the list itself changes only when asked (it would shift under the reader).
listen("/events", $("#connection"), { summary: (status) => updateCounts(status.counts) });
