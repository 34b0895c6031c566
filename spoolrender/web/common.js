// Shared by every page of the spoolrender dashboard (loaded first; plain script, no modules).
//
// Text from the spool only ever reaches a page through textContent (el's `text`, append of
// strings), never as HTML.
"use strict";

const STATES = ["incoming", "running", "retry", "done", "failed"];

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
