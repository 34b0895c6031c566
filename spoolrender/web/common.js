// Shared by every page of the spoolrender dashboard (loaded first; plain script, no modules).
//
// Text from the spool only ever reaches a page through textContent (el's `text`, append of
// strings), never as HTML.
"use strict";

const STATES = ["incoming", "running", "retry", "done", "failed", "split"];

let skew = 0; // server clock minus ours (for "ago" texts), set from the server's documents

function $(selector) {
  return document.querySelector(selector);
}

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "className") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.abs(seconds);
  if (s < 120) return `${Math.round(s)}s`;
  if (s < 7200) return `${Math.round(s / 60)}m`;
  if (s < 172800) return `${(s / 3600).toFixed(1)}h`;
  return `${(s / 86400).toFixed(1)}d`;
}

function ago(epochSeconds) {
  if (!epochSeconds) return "–";
  return `${duration(Date.now() / 1000 + skew - epochSeconds)} ago`;
}

function when(epochSeconds) {
  if (!epochSeconds) return "–";
  return new Date(epochSeconds * 1000).toLocaleString();
}

function jobUrl(id) {
  return `/job?id=${encodeURIComponent(id)}`;
}

function jobLink(id) {
  return el("a", { href: jobUrl(id), text: id, className: "job-link" });
}

function stateTag(state) {
  return el("span", { className: "state-tag", dataset: { state: state || "" }, text: state || "new" });
}

function firstLine(text, max) {
  return ((text || "?").split("\n")[0] || "?").slice(0, max);
}

async function fetchJSON(url, options) {
  const response = await fetch(url, options);
  let body = null;
  try {
    body = await response.json();
  } catch (error) {
    body = { error: `${response.status} ${response.statusText}` };
  }
  return { ok: response.ok, status: response.status, body };
}

// One EventSource with JSON events; `connection` (an element) shows live/reconnecting.
function listen(url, connection, handlers) {
  const source = new EventSource(url);
  for (const [kind, handler] of Object.entries(handlers)) {
    source.addEventListener(kind, (event) => {
      try {
        handler(JSON.parse(event.data));
      } catch (error) {
        console.error(`bad ${kind} event`, error);
      }
    });
  }
  source.onopen = () => {
    connection.dataset.state = "live";
    connection.textContent = "live";
  };
  source.onerror = () => {
    // EventSource reconnects by itself (after the server's retry delay).
    connection.dataset.state = "reconnecting";
    connection.textContent = "reconnecting…";
  };
  return source;
}

// --- write actions ----------------------------------------------------------------------
//
// The token is typed once and kept in this tab's sessionStorage (gone when the tab closes);
// it is only ever sent as an Authorization header: never in a URL, never in a cookie (so no
// other site can make the browser send it).

const TOKEN_KEY = "spoolrender-token";
const actions = { writes: false, reason: "", unlocked: false };

function storedToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

async function checkActions() {
  const token = storedToken();
  const { ok, body } = await fetchJSON("/actions", token ? { headers: { Authorization: `Bearer ${token}` } } : {});
  actions.writes = Boolean(ok && body.writes);
  actions.reason = (body && body.reason) || "";
  actions.unlocked = actions.writes && body.token_ok === true;
  if (token && body.token_ok === false) sessionStorage.removeItem(TOKEN_KEY);
  renderAuth(token && body.token_ok === false ? "that token is not right" : "");
  document.dispatchEvent(new Event("actions"));
}

function renderAuth(message) {
  const box = $("#auth");
  if (!box) return;
  box.dataset.state = actions.unlocked ? "unlocked" : actions.writes ? "locked" : "read-only";
  if (!actions.writes) {
    box.replaceChildren(el("span", { className: "auth-note", title: actions.reason, text: "read-only" }));
    return;
  }
  if (actions.unlocked) {
    const lock = el("button", { type: "button", id: "auth-lock", text: "lock" });
    lock.addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      checkActions();
    });
    box.replaceChildren(el("span", { className: "auth-note", text: "actions on" }), lock);
    return;
  }
  const input = el("input", { type: "password", id: "auth-token", placeholder: "serve token", autocomplete: "off", "aria-label": "serve token" });
  const form = el("form", { id: "auth-form" }, input, el("button", { type: "submit", text: "unlock actions" }));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (!input.value.trim()) return;
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    checkActions();
  });
  box.replaceChildren(form, ...(message ? [el("span", { className: "auth-error", text: message })] : []));
}

// Why an action button cannot be used now (or "" if it can).
function actionBlocker() {
  if (!actions.writes) return actions.reason || "write actions are disabled on this server";
  if (!actions.unlocked) return "enter the serve token (top right) to use actions";
  return "";
}

// A write request with the token; the answer's JSON ({error, problems} on failure).
async function act(method, url, body, contentType) {
  const headers = { Authorization: `Bearer ${storedToken() || ""}` };
  if (contentType) headers["Content-Type"] = contentType;
  const result = await fetchJSON(url, { method, headers, body });
  if (result.status === 401 || result.status === 403) checkActions();
  return result;
}
