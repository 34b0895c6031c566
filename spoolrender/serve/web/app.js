// The spoolrender dashboard: one EventSource on /events, no framework, no build step.
//
// A `summary` event (the `status --json` document) redraws everything; `progress` events
// move a running job's bar between summaries; `state` events feed the activity list.
// Text from the spool only ever reaches the page through textContent, never as HTML.
"use strict";

const ACTIVITY_MAX = 30;
const RETRY_SHOWN = 20;

function fillTable(name, rows) {
  const table = $(`#${name}`);
  table.tBodies[0].replaceChildren(...rows);
  table.hidden = rows.length === 0;
  $(`#${name}-empty`).hidden = rows.length > 0;
}

// --- running jobs -------------------------------------------------------------------

function setProgress(row, job) {
  const pct = job.progress === null || job.progress === undefined ? null : Math.round(job.progress * 1000) / 10;
  const bar = row.querySelector(".bar");
  bar.setAttribute("aria-valuenow", pct === null ? "0" : String(pct));
  bar.dataset.progress = pct === null ? "" : String(pct);
  bar.classList.toggle("stale", Boolean(job.stale));
  bar.querySelector(".fill").style.width = `${pct || 0}%`;
  row.querySelector(".pct").textContent = pct === null ? "–" : `${Math.round(pct)}%`;
  row.querySelector(".stage").textContent = job.stage || "–";
  row.querySelector(".eta").textContent = duration(job.eta_seconds);
  const heartbeat = row.querySelector(".heartbeat");
  heartbeat.replaceChildren(`${duration(job.heartbeat_age_seconds)} ago`);
  if (job.stale) heartbeat.append(el("span", { className: "badge stale", text: "STALE" }));
}

function runningRow(job) {
  const bar = el(
    "div",
    { className: "bar", role: "progressbar", "aria-valuemin": "0", "aria-valuemax": "100", "aria-label": `progress of ${job.id}`, dataset: { job: job.id } },
    el("div", { className: "fill" }),
  );
  const row = el(
    "tr",
    { dataset: { entry: job.entry, job: job.id } },
    el("td", { className: "id" }, jobLink(job.id)),
    el("td", { text: job.host || "?" }),
    el("td", {}, el("div", { className: "progress" }, bar, el("span", { className: "pct" }))),
    el("td", { className: "stage" }),
    el("td", { className: "eta num" }),
    el("td", { className: "heartbeat num" }),
  );
  setProgress(row, job);
  return row;
}

function onProgress(job) {
  const row = document.querySelector(`#running tr[data-entry="${CSS.escape(job.entry)}"]`);
  if (row) setProgress(row, job);
}

// --- the summary ----------------------------------------------------------------------

function describeSpoolIO(c) {
  return `spool I/O: ${c.error} since ${when(c.since)} on host ${c.host} (claiming paused, retrying every ${c.retry_seconds} s)`;
}

function renderSummary(status) {
  skew = status.generated_at - Date.now() / 1000;
  $("#spool").textContent = status.spool;
  for (const state of STATES) $(`#count-${state}`).textContent = String(status.counts[state]);
  const backlog = status.oldest_incoming_age_seconds;
  $("#backlog").textContent = backlog === null ? "" : `oldest waiting job: ${duration(backlog)}`;
  lastPaused = status.paused;
  renderToolbar();
  const paused = $("#paused");
  paused.hidden = !status.paused;
  paused.textContent = status.paused ? `PAUSED: ${status.paused} — no runner claims new jobs until \`spoolrender resume\`` : "";
  // Runners whose writes to the spool fail (full disk, read-only...): they claim nothing
  // until a write works again, and say so here as `spoolrender status` does.
  const spoolIO = $("#spool-io");
  const troubles = status.spool_io || [];
  spoolIO.hidden = troubles.length === 0;
  spoolIO.textContent = troubles.map(describeSpoolIO).join("\n");

  fillTable("running", status.running.map(runningRow));

  const now = Date.now() / 1000 + skew;
  fillTable(
    "retry",
    status.retry.slice(0, RETRY_SHOWN).map((job) =>
      el(
        "tr",
        { dataset: { job: job.id } },
        el("td", { className: "id" }, jobLink(job.id)),
        el("td", { className: "num", text: job.due <= now ? "now" : `in ${duration(job.due - now)}` }),
        el("td", { className: "num", text: String(job.priority) }),
      ),
    ),
  );
  const hidden = status.counts.retry - Math.min(status.retry.length, RETRY_SHOWN);
  $("#retry-more").textContent = hidden > 0 ? `… and ${hidden} more` : "";

  fillTable(
    "failures",
    status.recent_failures.map((job) =>
      el(
        "tr",
        { dataset: { job: job.id } },
        el("td", { className: "id" }, jobLink(job.id)),
        el("td", { text: job.kind || "?" }),
        clipped("td", { className: "reason" }, job.reason, 160),
        el("td", { className: "num", text: ago(job.failed_at) }),
        el("td", {}, el("a", { href: `${jobUrl(job.id)}#log`, text: "log" })),
      ),
    ),
  );

  // Per queue, as `status` shows it (from the runners' beacons); "*" is "every other queue".
  fillTable(
    "queues",
    Object.entries(status.queues || {}).map(([name, q]) =>
      el(
        "tr",
        { dataset: { queue: name } },
        el("td", {}, name === "*" ? "* (any)" : el("a", { href: `/browse?queue=${encodeURIComponent(name)}`, text: name })),
        el("td", { className: "num", text: String(q.waiting) }),
        el("td", { className: "num", text: q.oldest_age_seconds === null ? "" : duration(q.oldest_age_seconds) }),
        el("td", { className: "num", text: String(q.runners) }),
        el("td", { className: `num${q.unserved ? " bad" : ""}`, text: q.unserved ? String(q.unserved) : "" }),
      ),
    ),
  );
  const unserved = status.unserved || [];
  $("#unserved").hidden = unserved.length === 0;
  $("#unserved").replaceChildren(
    ...unserved.map((u) =>
      el(
        "p",
        { className: "unserved-group" },
        `UNSERVED: ${u.count} job(s) in queue `,
        el("a", { href: `/browse?queue=${encodeURIComponent(u.queue)}`, text: u.queue }),
        u.requires.length ? ` requiring ${u.requires.join(", ")}` : "",
        `: ${u.reason}`,
      ),
    ),
  );

  // A runner's jobs: the running ones whose heartbeat it writes (its host and pid).
  const jobsOf = (runner) => status.running.filter((job) => job.host === runner.host && job.pid === runner.pid);
  fillTable(
    "runners",
    status.runners.map((runner) =>
      el(
        "tr",
        { dataset: { runner: runner.runner || "" } },
        el("td", { text: runner.runner || "?" }),
        el("td", { text: runner.host || "?" }),
        el("td", { className: "num", text: String(runner.pid ?? "?") }),
        el("td", { className: "num slots", text: `${runner.busy ?? "?"}/${runner.slots ?? "?"}` }),
        el("td", { className: "jobs" }, ...jobsOf(runner).flatMap((job, i) => [i ? ", " : "", jobLink(job.id)])),
        el("td", { className: "queues", text: (runner.queues || ["*"]).map((q) => (q === "*" ? "* (any)" : q)).join(", ") }),
        el("td", { className: "tags", text: (runner.tags || []).join(", ") || "–" }),
        el(
          "td",
          { className: "num" },
          `${duration(runner.seen_seconds_ago)} ago`,
          el("span", { className: `badge ${runner.online ? "online" : "offline"}`, text: runner.online ? "online" : "OFFLINE" }),
        ),
      ),
    ),
  );

  const online = status.runners.filter((runner) => runner.online).length;
  const noRunner = $("#no-runner");
  noRunner.hidden = online > 0;
  noRunner.textContent = online ? "" : "NO RUNNER ONLINE: nothing is claimed until one starts (`spoolrender run` on a render host)";
  scheduledCount(status.counts.incoming);

  $("#updated").replaceChildren("updated ", timeNode(status.generated_at));
  document.body.dataset.ready = "1";
}

// Scheduled jobs (not_before still ahead) wait in incoming/; the summary does not read job
// files, GET /jobs does (once per file): asked again when the incoming count moves, and
// once a minute (a schedule comes due by itself).
let scheduledAsked = { incoming: null, at: 0 };

async function scheduledCount(incoming) {
  if (incoming === scheduledAsked.incoming && Date.now() - scheduledAsked.at < 60000) return;
  scheduledAsked = { incoming, at: Date.now() };
  const { ok, body } = await fetchJSON("/jobs?state=incoming&limit=1");
  if (!ok) return;
  const { count, complete } = body.scheduled;
  $("#count-scheduled").textContent = `${count}${complete ? "" : "+"}`;
}

// --- activity -------------------------------------------------------------------------

function onState(change) {
  const list = $("#activity");
  const item = el(
    "li",
    {},
    timeNode(Date.now() / 1000 + skew),
    jobLink(change.id),
    ": ",
    stateTag(change.previous),
    " → ",
    stateTag(change.state),
  );
  if (change.state === "failed" && change.reason) item.append(" (", clipped("span", {}, `${change.kind}: ${change.reason}`, 160), ")");
  list.prepend(item);
  while (list.children.length > ACTIVITY_MAX) list.lastElementChild.remove();
  $("#activity-empty").hidden = true;
}

// --- actions ------------------------------------------------------------------------------

let lastPaused = null;

function renderToolbar() {
  const blocker = actionBlocker();
  const pause = $("#pause-btn");
  const resume = $("#resume-btn");
  pause.hidden = Boolean(lastPaused);
  resume.hidden = !lastPaused;
  for (const button of [pause, resume, $("#submit-btn")]) {
    button.disabled = Boolean(blocker);
    button.title = blocker;
  }
  $("#toolbar-note").textContent = blocker;
}

async function pauseOrResume(path) {
  const { ok, body } = await act("POST", path);
  const msg = $("#pause-msg");
  msg.dataset.ok = ok ? "1" : "0";
  msg.textContent = ok ? (body.paused ? "paused: runners claim no new jobs" : "resumed") : `refused: ${body.error}`;
}

$("#pause-btn").addEventListener("click", () => pauseOrResume("/pause"));
$("#resume-btn").addEventListener("click", () => pauseOrResume("/resume"));

$("#submit-file").addEventListener("change", async (event) => {
  const file = event.target.files[0];
  if (!file) return;
  $("#submit-text").value = await file.text();
  if (!$("#submit-name").value) $("#submit-name").value = file.name;
});

$("#submit-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const name = $("#submit-name").value.trim();
  const url = name ? `/jobs?name=${encodeURIComponent(name)}` : "/jobs";
  const { ok, body } = await act("POST", url, $("#submit-text").value, "application/yaml");
  const result = $("#submit-result");
  result.dataset.ok = ok ? "1" : "0";
  $("#submit-problems").replaceChildren(...(body.problems || []).map((p) => el("li", { text: p })));
  if (ok) {
    result.replaceChildren("submitted: ", jobLink(body.id), ` (${body.entry})`);
    $("#submit-text").value = "";
    $("#submit-name").value = "";
  } else {
    result.textContent = `not submitted: ${body.error}`;
  }
});

document.addEventListener("actions", renderToolbar);
checkActions();

// --- the stream -----------------------------------------------------------------------

listen("/events", $("#connection"), { summary: renderSummary, progress: onProgress, state: onState });
