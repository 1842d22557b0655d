// Studio's shared parts: the API client and its token prompt, the page's state,
// the flash line, and the small helpers every view draws with.

import { route } from "./app.js";

export const { h } = window.LoopstackForms;
export const STATUSES = ["queued", "running", "waiting", "completed", "failed", "cancelled", "stopped"];
export const FINISHED = new Set(["completed", "failed", "cancelled", "stopped"]);
export const LIST_REFRESH_MS = 2000;
export const RUN_REFRESH_MS = 3000;

export const app = {
  token: sessionStorage.getItem("loopstack-token"),
  workflows: null,
  // What the current view started: timers and streams to stop on leaving it.
  cleanups: [],
  // Counts the views shown: work a view started checks it before drawing, so a
  // view the user left never draws over the next one.
  generation: 0,
  // A message for the next view, shown after its hash change.
  pending: null,
};

export const main = document.getElementById("main");
export const flash = document.getElementById("flash");

export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

export function headers(json) {
  const out = { Accept: "application/json" };
  if (json) out["Content-Type"] = "application/json";
  if (app.token) out.Authorization = "Bearer " + app.token;
  return out;
}

export async function api(path, body, method) {
  const post = body !== undefined;
  const res = await fetch("/api" + path, {
    method: method || (post ? "POST" : "GET"),
    headers: headers(post),
    body: post ? JSON.stringify(body) : undefined,
  });
  let data = null;
  try {
    data = await res.json();
  } catch (_) {
    data = null;
  }
  if (res.status === 401) {
    askToken();
    throw new ApiError("this server needs a token", 401);
  }
  if (!res.ok) throw new ApiError((data && data.error) || res.status + " " + res.statusText, res.status);
  return data;
}

export function say(text, kind) {
  flash.textContent = text || "";
  flash.className = text ? "flash " + (kind || "info") : "flash";
}

export function askToken() {
  if (flash.querySelector("form.token")) return;
  const input = h("input", { type: "password", placeholder: "token", "aria-label": "token", autocomplete: "off" });
  const form = h("form", { class: "token" }, h("span", { text: "This server needs its token: " }), input, h("button", { class: "primary", text: "Use it" }));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    app.token = input.value.trim();
    sessionStorage.setItem("loopstack-token", app.token);
    app.workflows = null;
    say("");
    route();
  });
  flash.replaceChildren(form);
  flash.className = "flash warn";
}

export async function workflows() {
  if (!app.workflows) {
    const data = await api("/workflows");
    app.workflows = new Map(data.workflows.map((w) => [w.name, w]));
  }
  return app.workflows;
}

export function leave() {
  for (const stop of app.cleanups.splice(0)) stop();
}

// A run's workflow, with its version when it is not the first (`triage v2`).
export function workflowName(run) {
  return run.version && run.version !== 1 ? run.workflow + " v" + run.version : run.workflow;
}

export function short(id) {
  return String(id).slice(0, 8) + "\u2026" + String(id).slice(-4);
}

export function when(text) {
  if (!text) return "";
  const t = new Date(text);
  if (Number.isNaN(t.getTime())) return text;
  const diff = Math.round((Date.now() - t.getTime()) / 1000);
  const s = Math.abs(diff);
  const span = s < 60 ? s + " s" : s < 3600 ? Math.round(s / 60) + " min" : s < 86400 ? Math.round(s / 3600) + " h"
    : s < 86400 * 30 ? Math.round(s / 86400) + " d" : null;
  if (s < 5) return "just now";
  if (span === null) return t.toLocaleString();
  return diff > 0 ? span + " ago" : "in " + span;
}

export function time(text) {
  return h("time", { datetime: text, title: text, text: when(text) });
}

export function badge(status) {
  return h("span", { class: "badge " + status, "data-status": status, text: status });
}

export function json(value) {
  return h("pre", { class: "json-view", text: JSON.stringify(value, null, 2) });
}

export function section(title, ...children) {
  return h("section", { class: "panel" }, h("h2", { text: title }), ...children);
}

export function sleep(ms, signal) {
  return new Promise((resolve) => {
    const stop = () => { clearTimeout(t); resolve(); };
    const t = setTimeout(() => { signal.removeEventListener("abort", stop); resolve(); }, ms);
    signal.addEventListener("abort", stop, { once: true });
  });
}

export function debounce(f, ms) {
  let t = null;
  return () => {
    clearTimeout(t);
    t = setTimeout(f, ms);
  };
}

export function fail(e) {
  // A 401 shows the token prompt instead (see `api`).
  if (e && e.status === 401) return;
  say(e.message || String(e), "bad");
}

// A view drawn again moves the elements it keeps (a signal's form, say) into its
// new tree, and an element the page moves loses the focus: what a person then
// types goes nowhere. Call before drawing; what it returns, after, gives the focus
// (and the caret) back to the field that had it, if the new tree still holds it.
export function keepFocus() {
  const el = document.activeElement;
  if (!el || el === document.body || !main.contains(el)) return () => {};
  let start = null;
  let end = null;
  try {
    start = el.selectionStart;
    end = el.selectionEnd;
  } catch (_) {
    // Not a text field: it has no caret.
  }
  return () => {
    if (!el.isConnected || document.activeElement === el) return;
    el.focus({ preventScroll: true });
    if (start === null || start === undefined) return;
    try {
      el.setSelectionRange(start, end);
    } catch (_) {
      // A field whose kind has no selection.
    }
  };
}
