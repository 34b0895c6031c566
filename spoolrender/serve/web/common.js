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

// --- formatting (every page: sizes, times and reasons in human words) -------------------

// "42s", "0.4s", "12m", "3.5h", "2.1d": a glance, not exact (exactDuration is exact).
function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.abs(seconds);
  if (s < 10 && s % 1) return `${s.toFixed(1)}s`;
  if (s < 120) return `${Math.round(s)}s`;
  if (s < 7200) return `${Math.round(s / 60)}m`;
  if (s < 172800) return `${(s / 3600).toFixed(1)}h`;
  return `${(s / 86400).toFixed(1)}d`;
}

// Every unit that is not zero: "1m 30s", "2h", "0.5s" (axis ticks: two values, two labels).
function exactDuration(seconds) {
  let s = Math.abs(seconds);
  if (s < 60) return `${Number(s.toFixed(1))}s`;
  const parts = [];
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60]]) {
    if (s >= size) {
      parts.push(`${Math.floor(s / size)}${unit}`);
      s %= size;
    }
  }
  if (s >= 0.5) parts.push(`${Math.round(s)}s`);
  return parts.join(" ");
}

function ago(epochSeconds) {
  if (!epochSeconds) return "–";
  return `${duration(Date.now() / 1000 + skew - epochSeconds)} ago`;
}

// A local time as short as is unambiguous: "15:42:07" today, "Mon 30 Nov 15:42" this year,
// else with the year; whenFull (for a title) is the whole local date and time.
function when(epochSeconds) {
  if (!epochSeconds) return "–";
  const date = new Date(epochSeconds * 1000);
  const now = new Date();
  const time = { hour: "2-digit", minute: "2-digit", hour12: false };
  if (date.toDateString() === now.toDateString()) return date.toLocaleTimeString([], { ...time, second: "2-digit" });
  const day = { weekday: "short", day: "numeric", month: "short", ...time };
  if (date.getFullYear() !== now.getFullYear()) day.year = "numeric";
  return date.toLocaleString([], day);
}

function whenFull(epochSeconds) {
  if (!epochSeconds) return "";
  return new Date(epochSeconds * 1000).toLocaleString([], { dateStyle: "full", timeStyle: "long" });
}

// A <time> element: the short local time, the full one on hover.
function timeNode(epochSeconds) {
  if (!epochSeconds) return "–";
  const iso = new Date(epochSeconds * 1000).toISOString();
  return el("time", { datetime: iso, title: whenFull(epochSeconds), text: when(epochSeconds) });
}

const BYTE_UNITS = ["KiB", "MiB", "GiB", "TiB", "PiB"];

// 573755 -> "560 KiB", 1536 -> "1.5 KiB", 12 -> "12 bytes" (binary units, as ls -lh and du -h).
function bytesText(bytes) {
  if (bytes === null || bytes === undefined || !Number.isFinite(Number(bytes))) return "–";
  let value = Number(bytes);
  if (Math.abs(value) < 1024) return `${value} ${value === 1 ? "byte" : "bytes"}`;
  let unit = -1;
  while (Math.abs(value) >= 1023.95 && unit < BYTE_UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value < 9.995 ? value.toFixed(1) : Math.round(value)} ${BYTE_UNITS[unit]}`;
}

// A size as bytesText says it, the exact bytes on hover; null for no size.
function sizeNode(bytes) {
  if (bytes === null || bytes === undefined) return null;
  return el("span", { className: "size", title: `${Number(bytes).toLocaleString()} bytes`, text: bytesText(bytes) });
}

// The first line of a text, cut at a word boundary before `max` characters; an ellipsis
// says that something was left out (the rest of the line, or further lines).
function clipText(text, max) {
  const whole = (text || "?").trim();
  let line = whole.split("\n")[0].trim() || "?";
  let more = line.length < whole.length;
  if (line.length > max) {
    line = line.slice(0, max);
    const space = line.search(/\s\S*$/);
    if (space > max / 2) line = line.slice(0, space);
    line = line.replace(/[\s,;:.-]+$/, "");
    more = true;
  }
  return more ? `${line}…` : line;
}

// An element whose text is `text` clipped to `max` characters; the whole text is its title.
function clipped(tag, props, text, max) {
  const shown = clipText(text, max);
  return el(tag, { ...props, text: shown, ...(shown === (text || "?").trim() ? {} : { title: text }) });
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

// Reads carry the token too, once one was typed: a private job's file, logs and props
// (its job file readable by its owner only) are served only with it.
function tokenHeaders() {
  const token = storedToken();
  return token ? { Authorization: `Bearer ${token}` } : {};
}

async function checkActions() {
  const token = storedToken();
  const { ok, body } = await fetchJSON("/actions", { headers: tokenHeaders() });
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

// --- colour theme -------------------------------------------------------------------------
//
// "auto" follows the system (prefers-color-scheme); "light" or "dark" is the reader's own
// choice, remembered in localStorage (for every tab and visit) and set as data-theme on
// <html> (style.css). The toggle goes through auto -> dark -> light -> auto.

const THEME_KEY = "spoolrender-theme";
const THEMES = ["auto", "dark", "light"];
const THEME_LABELS = { auto: "◐ auto", dark: "☾ dark", light: "☀ light" };
let theme = storedTheme();

function storedTheme() {
  try {
    const theme = localStorage.getItem(THEME_KEY);
    return THEMES.includes(theme) ? theme : "auto";
  } catch (error) {
    return "auto"; // storage refused (a private window's policy): the system decides
  }
}

function applyTheme() {
  if (theme === "auto") delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = theme;
  const button = $("#theme-toggle");
  if (!button) return;
  const next = THEMES[(THEMES.indexOf(theme) + 1) % THEMES.length];
  button.textContent = THEME_LABELS[theme];
  button.dataset.theme = theme;
  button.title = `colours: ${theme === "auto" ? "as the system is set" : theme}; click for ${next}`;
}

function addThemeToggle() {
  const header = $("header");
  if (!header) return;
  const button = el("button", { type: "button", id: "theme-toggle", className: "theme-toggle", "aria-label": "colour theme" });
  button.addEventListener("click", () => {
    theme = THEMES[(THEMES.indexOf(theme) + 1) % THEMES.length];
    try {
      if (theme === "auto") localStorage.removeItem(THEME_KEY);
      else localStorage.setItem(THEME_KEY, theme);
    } catch (error) {
      console.warn("the colour theme cannot be remembered", error);
    }
    applyTheme();
  });
  header.append(button);
  applyTheme();
}

applyTheme(); // before the page's own scripts draw anything
addThemeToggle();
