// The job page: /jobs/{id} (JSON) drawn once and again on every state change, the live
// progress from /events?job={id}, the job file, and the render log followed while it grows.
"use strict";

const JOB_ID = new URLSearchParams(location.search).get("id") || "";
const API = `/jobs/${encodeURIComponent(JOB_ID)}`;
const LOG_KEEP = 512 * 1024; // characters of log kept on the page
const LOG_POLL_MS = 1000;
const CHUNKS_RELOAD_MS = 2000; // a split job's chunk table is read again at most this often

let current = null; // the last /jobs/{id} document
let logRun = null; // the run whose log is shown
let logOffset = 0; // bytes of it already shown
let logTimer = null;
let reloading = null;

// A term and its value (text, or a node: a link, a size with its exact bytes on hover).
function fact(term, value) {
  if (value === null || value === undefined || value === "") return [];
  return [el("dt", { text: term }), el("dd", {}, value instanceof Node ? value : String(value))];
}

// The render cache's part in a done job (result.json's cache fields), or null; a hit links
// the job whose render it published.
// A run's error cut at a word (the whole text as the cell's title), then what the run went
// ahead despite (mixed Remotion versions): the record's warnings.
function reasonCell(error, run) {
  const cell = error.kind ? clipped("td", { className: "reason" }, `${error.kind}: ${error.message || "?"}`, 200) : el("td", { className: "reason" });
  cell.append(...((run.details || {}).warnings || []).map((w) => el("div", { className: "warning", text: `warning: ${w}` })));
  return cell;
}

function cacheText(result) {
  if (result.cache === "hit") {
    const source = result.cache_source || {};
    const from = source.id ? jobLink(source.id) : "?";
    return el("span", {}, "hit: published from the render of job ", from, ` (uid ${source.uid}), not rendered`);
  }
  if (result.cache === "stored") return "miss: rendered and stored";
  if (result.cache === "miss") return "miss: rendered, not stored";
  if (result.cache === "refused") return `not used: ${result.cache_refused}; rendered`;
  return null;
}

function setProgress(progress, stage, eta, stale) {
  const box = $("#progress");
  box.hidden = progress === null || progress === undefined;
  const pct = box.hidden ? 0 : Math.round(progress * 1000) / 10;
  const bar = box.querySelector(".bar");
  bar.setAttribute("aria-valuenow", String(pct));
  bar.classList.toggle("stale", Boolean(stale));
  bar.querySelector(".fill").style.width = `${pct}%`;
  box.querySelector(".pct").textContent = box.hidden ? "–" : `${Math.round(pct)}%`;
  $("#place").dataset.eta = eta === null || eta === undefined ? "" : String(eta);
  if (current && current.state === "running") {
    $("#place").textContent = `${stage || "rendering"}${eta ? `, about ${duration(eta)} left` : ""}${stale ? " — STALE heartbeat" : ""}`;
  }
}

// A waiting job whose not_before is still ahead is "scheduled": no runner takes it before then.
function shownState(info) {
  return info.scheduled_for ? "scheduled" : info.state;
}

function placeText(info) {
  const now = Date.now() / 1000 + skew;
  if (info.scheduled_for) {
    return `scheduled: due ${when(info.scheduled_for)} (in ${duration(info.scheduled_for - now)}); no runner takes it before then`;
  }
  // A split job woken into retry/ for its join waits for no retry: it is joined next.
  if (info.split && info.state === "retry") return `joining its ${info.split.chunks.count} chunks (every chunk is rendered)`;
  if (info.split) return `rendering in ${info.split.chunks.count} chunks: ${chunkText(info.split.chunks)}`;
  if (info.state === "retry" && info.due) {
    const due = info.due <= now ? "due now" : `due in ${duration(info.due - now)} (${when(info.due)})`;
    return `${due}; ${info.retry_position} of ${info.retry_total} in the retry queue`;
  }
  if (info.state === "incoming") {
    return `waiting since ${when(info.queued_at)}; ${info.arrived_before} waiting jobs arrived before it (runners take higher priorities first)`;
  }
  if (info.state === "done" && info.result) return `finished ${when(info.result.finished)}`;
  if (info.state === "failed" && info.failure) return `failed ${when(info.failure.failed_at || info.failure.finished)}`;
  return "";
}

// A split job's chunks (spoolrender.chunks), as `status` words them.
function chunkText(c) {
  return `${c.done}/${c.count} done, ${c.running} running, ${c.waiting} waiting` + (c.failed ? `, ${c.failed} failed` : "");
}

// A run record's outcome, in the words of the states it leads to.
const OUTCOME_WORDS = { publishing: "rendered", retry: "retry", failed: "failed", requeue: "requeued", reset: "reset by retry", split: "split into chunks" };

function outcomeTag(outcome, state) {
  const tag = stateTag(outcome === "publishing" ? "done" : outcome);
  tag.textContent = outcome === "publishing" && state === "done" ? "done" : OUTCOME_WORDS[outcome] || outcome;
  return tag;
}

function render(info) {
  current = info;
  document.title = `${info.id} · spoolrender`;
  $("#job-id").textContent = info.id;
  const state = $("#state");
  state.dataset.state = shownState(info);
  state.textContent = shownState(info);
  $("#place").textContent = placeText(info);
  if (info.split) setProgress(info.split.progress, "chunks", info.split.eta_seconds, false);
  else setProgress(info.progress, info.stage, info.eta_seconds, info.stale);
  $("#json-link").setAttribute("href", API);

  const result = info.result || {};
  const hb = info.heartbeat || {};
  $("#facts").replaceChildren(
    ...fact("entry", info.entry),
    ...fact("queue", info.queue ?? "? (the job file does not parse)"),
    ...fact("requires tags", info.requires && info.requires.length ? info.requires.join(", ") : null),
    ...fact("attempts used", info.attempts),
    ...fact("running on", hb.host ? `${hb.host} (pid ${hb.pid}, run ${hb.run})` : null),
    ...fact("cancel requested", info.cancel_requested ? "yes: its runner stops it at the next heartbeat" : null),
    ...fact("output", result.output),
    ...fact("size", sizeNode(result.bytes)),
    ...fact("render took", tookText(info, result)),
    ...fact("render cache", cacheText(result)),
  );
  const reason = $("#reason");
  const failure = info.state === "failed" ? info.failure || null : null; // a retried job keeps its old failure.json
  reason.hidden = !failure;
  reason.textContent = failure ? `${failure.kind || "failed"}: ${failure.reason || "?"}` : "";

  const runs = (info.runs || []).map((run) => {
    const error = run.error || {};
    return el(
      "tr",
      { dataset: { run: String(run.run) } },
      el("td", { className: "num", text: String(run.run) }),
      el("td", { text: run.host || "?" }),
      el("td", { className: "num" }, timeNode(run.started)),
      el("td", { className: "num" }, timeNode(run.ended)),
      el("td", { className: "num", text: run.started && run.ended ? duration(run.ended - run.started) : "–" }),
      el("td", {}, outcomeTag(run.outcome, info.state)),
      reasonCell(error, run),
    );
  });
  if (info.state === "running" && hb.run && !(info.runs || []).some((run) => run.run === hb.run)) {
    runs.push(
      el(
        "tr",
        { dataset: { run: String(hb.run) } },
        el("td", { className: "num", text: String(hb.run) }),
        el("td", { text: hb.host || "?" }),
        el("td", { className: "num", text: "–" }),
        el("td", { className: "num", text: "–" }),
        el("td", { className: "num", text: "–" }),
        el("td", {}, stateTag("running")),
        el("td", {}),
      ),
    );
  }
  $("#runs").tBodies[0].replaceChildren(...runs);
  $("#runs").hidden = runs.length === 0;
  $("#runs-empty").hidden = runs.length > 0;

  const settings = Object.entries(info.job || {})
    .filter(([, value]) => value !== null && value !== undefined) // unset: the defaults apply
    .map(([key, value]) => el("tr", { dataset: { key } }, el("th", { text: key }), el("td", { text: settingText(key, value) })));
  $("#settings").tBodies[0].replaceChildren(...settings);
  const problems = info.job_problems || [];
  $("#problems").hidden = problems.length === 0;
  $("#problems").replaceChildren(...problems.map((p) => el("li", { text: p })));

  $("#entries").tBodies[0].replaceChildren(
    ...(info.entries || []).map((e) => el("tr", {}, el("td", {}, stateTag(e.state)), el("td", { className: "id", text: e.entry }))),
  );
  renderChunks(info);
  renderOutput(info);
  renderActions();
  updateLogChoices(info);
  document.body.dataset.ready = "1";
}

const TIME_SETTINGS = new Set(["not_before"]); // epoch seconds in the validated job

function settingText(key, value) {
  if (TIME_SETTINGS.has(key) && typeof value === "number") return `${new Date(value * 1000).toISOString().replace(".000", "")} (${when(value)})`;
  return typeof value === "string" ? value : JSON.stringify(value);
}

// A split job's render time is the whole job's (result.json counts from the run that split
// it to the end of the join), and says so.
function tookText(info, result) {
  if (result.duration_seconds === undefined || result.duration_seconds === null) return null;
  const split = (info.runs || []).some((run) => run.outcome === "split");
  return `${duration(result.duration_seconds)}${split ? " (the whole split job: its chunks and the join)" : ""}`;
}

// A split job's chunks, one row each: frames, host, state, progress and time.
function renderChunks(info) {
  const rows = info.chunk_table || [];
  $("#chunks-panel").hidden = rows.length === 0;
  $("#chunks").tBodies[0].replaceChildren(
    ...rows.map((c) =>
      el(
        "tr",
        { dataset: { chunk: String(c.chunk), state: c.state } },
        el("td", { className: "num", text: String(c.chunk + 1) }),
        el("td", { className: "num", text: `${c.first}–${c.last} (${c.frames})` }),
        el("td", { text: c.host || "–" }),
        el("td", {}, stateTag(c.state)),
        el("td", { className: "num", text: c.progress === null ? "–" : `${Math.round(c.progress * 100)}%` }),
        el("td", { className: "num", text: duration(c.seconds) }),
        c.error ? clipped("td", { className: "reason" }, `${c.error.kind}: ${c.error.message}`, 200) : el("td", { className: "reason" }),
      ),
    ),
  );
}

// The published output: a video element (seekable: the server answers byte ranges), an
// image, or a link. Drawn once per output URL, so a reload does not restart playback.
function renderOutput(info) {
  const panel = $("#output-panel");
  panel.hidden = !info.output_url;
  if (!info.output_url || panel.dataset.src === info.output_url) return;
  panel.dataset.src = info.output_url;
  const output = (info.result || {}).output || "";
  const suffix = (/\.([A-Za-z0-9]+)$/.exec(output) || ["", ""])[1].toLowerCase();
  let view = null;
  if (info.poster_url) {
    view = el("video", { id: "output-video", controls: "", preload: "metadata", src: info.output_url, poster: info.poster_url });
  } else if (["png", "jpg", "jpeg", "gif", "webp"].includes(suffix)) {
    view = el("img", { id: "output-image", src: info.output_url, alt: `output of ${info.id}` });
  } else if (["mp3", "m4a", "aac", "wav", "ogg"].includes(suffix)) {
    view = el("audio", { id: "output-audio", controls: "", preload: "metadata", src: info.output_url });
  }
  $("#output-view").replaceChildren(...(view ? [view] : []));
  $("#output-link").setAttribute("href", info.output_url);
  $("#output-type").textContent = suffix ? `.${suffix}, ${bytesText((info.result || {}).bytes)}` : "";
}

// Whether the job was found (a 404 says so, with close ids, and the page stops there).
async function load() {
  const { ok, status, body } = await fetchJSON(API, { headers: tokenHeaders() });
  const problem = $("#problem");
  if (!ok) {
    problem.hidden = false;
    if (status === 404) {
      const close = body.suggestions || [];
      problem.replaceChildren(`No job with id ${JOB_ID} in this spool.`);
      if (close.length) problem.append(" Did you mean ", ...close.flatMap((id, i) => [i ? ", " : "", jobLink(id)]), "?");
      const connection = $("#connection");
      connection.dataset.state = "gone";
      connection.textContent = "no such job";
    } else {
      problem.textContent = `Cannot load the job: ${body.error}`;
    }
    document.body.dataset.ready = "1";
    return status !== 404;
  }
  problem.hidden = true;
  render(body);
  return true;
}

function reload() {
  // State events can come in bursts: one reload at a time, and one more after it.
  if (reloading) return reloading.then(() => load());
  reloading = load().finally(() => (reloading = null));
  return reloading;
}

let reloadTimer = null;

function reloadSoon() {
  if (!reloadTimer) reloadTimer = setTimeout(() => ((reloadTimer = null), reload()), CHUNKS_RELOAD_MS);
}

async function loadJobFile() {
  const response = await fetch(`${API}/file`, { headers: tokenHeaders() });
  const refused = response.status === 403 ? "(a private job: its job file is shown with the serve token, top right)" : "(the job file cannot be read)";
  $("#jobfile").textContent = response.ok ? await response.text() : refused;
}

// --- actions ------------------------------------------------------------------------------

const CANCELLABLE = ["incoming", "retry", "running", "split"];
let cancelArmed = null; // cancelling takes a second click within a few seconds

function renderActions() {
  if (!current) return;
  const blocker = actionBlocker();
  const retry = $("#retry-btn");
  const cancel = $("#cancel-btn");
  // Failed (cancelled ones too: a retry withdraws the cancel, as `spoolrender retry`), or
  // waiting for its next attempt: "retry now". Never for a scheduled job: retry does not
  // move a schedule forward.
  retry.hidden = !["failed", "retry"].includes(current.state) || Boolean(current.scheduled_for || current.split);
  retry.textContent = current.state === "retry" ? "retry now" : "retry";
  cancel.hidden = !CANCELLABLE.includes(current.state) || Boolean(current.cancel_requested);
  for (const button of [retry, cancel]) {
    button.disabled = Boolean(blocker);
    button.title = blocker;
  }
  $("#action-note").textContent = (retry.hidden && cancel.hidden) || !blocker ? "" : blocker;
}

async function runAction(button, path, verb) {
  button.disabled = true;
  const { ok, body } = await act("POST", `${API}/${path}`);
  const msg = $("#action-msg");
  msg.dataset.ok = ok ? "1" : "0";
  msg.textContent = ok ? `${verb}: done` : `${verb} refused: ${body.error}`;
  await reload();
}

$("#retry-btn").addEventListener("click", (event) => runAction(event.target, "retry", "retry"));
$("#cancel-btn").addEventListener("click", (event) => {
  const button = event.target;
  if (!cancelArmed) {
    button.textContent = "click again to cancel the job";
    cancelArmed = setTimeout(() => {
      cancelArmed = null;
      button.textContent = "cancel";
    }, 5000);
    return;
  }
  clearTimeout(cancelArmed);
  cancelArmed = null;
  button.textContent = "cancel";
  runAction(button, "cancel", "cancel");
});
document.addEventListener("actions", renderActions);

// --- the log ----------------------------------------------------------------------------

function logNumbers(info) {
  return (info.logs || [])
    .map((path) => /run-(\d+)\.log$/.exec(path))
    .filter(Boolean)
    .map((m) => Number(m[1]))
    .sort((a, b) => a - b);
}

function updateLogChoices(info) {
  const runs = logNumbers(info);
  const select = $("#log-run");
  const latest = runs.length ? runs[runs.length - 1] : null;
  const following = logRun === null || logRun === Number(select.dataset.latest);
  select.replaceChildren(...runs.map((n) => el("option", { value: String(n), text: String(n) })));
  select.dataset.latest = latest === null ? "" : String(latest);
  $("#log-empty").hidden = runs.length > 0;
  if (latest === null) return;
  const wanted = following ? latest : logRun;
  select.value = String(wanted);
  if (wanted !== logRun) {
    startLog(wanted);
  } else {
    clearTimeout(logTimer); // the state changed: read what the log got since (its end, after a render)
    fetchLog(false);
  }
}

function startLog(run) {
  logRun = run;
  logOffset = 0;
  $("#log-text").textContent = "";
  clearTimeout(logTimer);
  fetchLog(true);
}

function isLive() {
  return current && current.state === "running" && logRun === Number($("#log-run").dataset.latest);
}

function scheduleLog() {
  clearTimeout(logTimer);
  if (isLive()) logTimer = setTimeout(() => fetchLog(false), LOG_POLL_MS);
  $("#log-state").textContent = isLive() ? "following (live)" : "";
}

async function fetchLog(first) {
  const run = logRun;
  const query = first ? `run=${run}&bytes=65536` : `run=${run}&offset=${logOffset}`;
  try {
    const response = await fetch(`${API}/log?${query}`, { headers: tokenHeaders() });
    if (run !== logRun) return; // another run was chosen meanwhile
    if (response.ok) {
      const size = Number(response.headers.get("X-Spoolrender-Log-Size"));
      const text = await response.text();
      const pre = $("#log-text");
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      if (size < logOffset) pre.textContent = ""; // a new file under the same name
      pre.textContent = (pre.textContent + text).slice(-LOG_KEEP);
      logOffset = size;
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    }
  } finally {
    if (run === logRun) scheduleLog();
  }
}

$("#log-run").addEventListener("change", (event) => startLog(Number(event.target.value)));

// --- live -------------------------------------------------------------------------------

if (!JOB_ID) {
  $("#problem").hidden = false;
  $("#problem").textContent = "No job id given: open a job from the overview.";
  document.body.dataset.ready = "1";
} else {
  $("#job-id").textContent = JOB_ID;
  checkActions();
  load().then((found) => {
    if (!found) return; // no such job: nothing to follow (no endless "reconnecting")
    loadJobFile();
    listen(`/events?job=${encodeURIComponent(JOB_ID)}`, $("#connection"), {
      state: (change) => {
        if (!change.initial || !current || change.state !== current.state) reload();
      },
      progress: (job) => {
        if (job.state !== "split") return setProgress(job.progress, job.stage, job.eta_seconds, job.stale);
        setProgress(job.progress, job.chunks ? chunkText(job.chunks) : "chunks", job.eta_seconds, false);
        reloadSoon(); // the chunk table: hosts, states and times move with the chunks
      },
    });
  });
}
