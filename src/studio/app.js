// Studio: loopstack's page for runs. It lists runs, shows one run (its place in the
// state diagram, its conversation, usage, documents, checkpoints and signals),
// answers what a run waits for with forms made from the signals' JSON Schemas,
// resumes, retries and cancels runs, starts new ones, follows a run live
// through its event stream, and lists the schedules (next due time, last run)
// with pause, resume and delete. Everything comes from the JSON API under /api.
"use strict";

(function () {
  const { h } = window.LoopstackForms;
  const STATUSES = ["queued", "running", "waiting", "completed", "failed", "cancelled"];
  const FINISHED = new Set(["completed", "failed", "cancelled"]);
  const LIST_REFRESH_MS = 2000;
  const RUN_REFRESH_MS = 3000;

  const app = {
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

  const main = document.getElementById("main");
  const flash = document.getElementById("flash");

  class ApiError extends Error {
    constructor(message, status) {
      super(message);
      this.status = status;
    }
  }

  function headers(json) {
    const out = { Accept: "application/json" };
    if (json) out["Content-Type"] = "application/json";
    if (app.token) out.Authorization = "Bearer " + app.token;
    return out;
  }

  async function api(path, body, method) {
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

  function say(text, kind) {
    flash.textContent = text || "";
    flash.className = text ? "flash " + (kind || "info") : "flash";
  }

  function askToken() {
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

  async function workflows() {
    if (!app.workflows) {
      const data = await api("/workflows");
      app.workflows = new Map(data.workflows.map((w) => [w.name, w]));
    }
    return app.workflows;
  }

  function leave() {
    for (const stop of app.cleanups.splice(0)) stop();
  }

  // A run's workflow, with its version when it is not the first (`triage v2`).
  function workflowName(run) {
    return run.version && run.version !== 1 ? run.workflow + " v" + run.version : run.workflow;
  }

  function short(id) {
    return String(id).slice(0, 8) + "\u2026" + String(id).slice(-4);
  }

  function when(text) {
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

  function time(text) {
    return h("time", { datetime: text, title: text, text: when(text) });
  }

  function badge(status) {
    return h("span", { class: "badge " + status, "data-status": status, text: status });
  }

  function json(value) {
    return h("pre", { class: "json-view", text: JSON.stringify(value, null, 2) });
  }

  function section(title, ...children) {
    return h("section", { class: "panel" }, h("h2", { text: title }), ...children);
  }

  // ---- the runs list ------------------------------------------------------

  async function showRuns(params) {
    const gen = app.generation;
    const wfs = await workflows();
    if (gen !== app.generation) return;
    const filters = {
      workflow: params.get("workflow") || "",
      status: params.get("status") || "",
      place: params.get("place") || "",
    };
    const select = (name, values) => {
      const s = h("select", { name, "aria-label": name }, h("option", { value: "", text: "any " + name }));
      for (const v of values) s.appendChild(h("option", { value: v, text: v }));
      s.value = filters[name];
      return s;
    };
    const places = [...new Set([...wfs.values()].flatMap((w) => (filters.workflow && w.name !== filters.workflow ? [] : w.places)))];
    const wf = select("workflow", [...wfs.keys()]);
    const status = select("status", STATUSES);
    // A place no workflow has (an old link) is still shown as the filter it is.
    const place = select("place", filters.place && !places.includes(filters.place) ? [...places, filters.place] : places);
    const live = h("input", { type: "checkbox", id: "live", checked: true });
    const bar = h("form", { class: "filters" }, wf, status, place,
      h("label", { class: "live", for: "live" }, live, " live"),
      h("a", { class: "button primary", href: "#/start", text: "Start a run" }));
    const apply = () => {
      const q = new URLSearchParams();
      for (const [k, el] of [["workflow", wf], ["status", status], ["place", place]]) if (el.value) q.set(k, el.value);
      location.hash = "#/" + (q.toString() ? "?" + q : "");
    };
    for (const el of [wf, status, place]) el.addEventListener("change", apply);
    bar.addEventListener("submit", (e) => e.preventDefault());

    const body = h("tbody");
    const table = h("table", { class: "runs" },
      h("thead", {}, h("tr", {}, ...["run", "workflow", "status", "place", "step", "updated", "parent"].map((c) => h("th", { text: c })))),
      body);
    const newer = h("button", { type: "button", "data-page": "newer", text: "\u2190 newer" });
    const older = h("button", { type: "button", "data-page": "older", text: "older \u2192" });
    const count = h("span", { class: "muted page-count" });
    const pager = h("div", { class: "pager" }, newer, count, older);
    main.replaceChildren(h("h1", { text: "Runs" }), bar, table, pager);

    const cursors = [null];
    let next = null;
    // Only the latest read draws: a slow live refresh does not undo a page turn.
    let reads = 0;
    const load = async () => {
      const q = new URLSearchParams({ limit: "20" });
      for (const [k, v] of Object.entries(filters)) if (v) q.set(k, v);
      const before = cursors[cursors.length - 1];
      if (before) q.set("before", before);
      const read = ++reads;
      const page = await api("/runs?" + q);
      if (read !== reads || gen !== app.generation) return;
      next = page.next;
      body.replaceChildren(...page.runs.map(runRow));
      if (!page.runs.length) body.appendChild(h("tr", {}, h("td", { colspan: 7, class: "muted", text: "No runs match." })));
      newer.disabled = cursors.length === 1;
      older.disabled = !next;
      count.textContent = "page " + cursors.length;
    };
    newer.addEventListener("click", () => { cursors.pop(); load().catch(fail); });
    older.addEventListener("click", () => { if (next) { cursors.push(next); load().catch(fail); } });
    // Live: the first page is read again every few seconds.
    const timer = setInterval(() => {
      if (live.checked && cursors.length === 1 && !document.hidden) load().catch(() => {});
    }, LIST_REFRESH_MS);
    app.cleanups.push(() => clearInterval(timer));
    await load();
  }

  function runRow(run) {
    const link = h("a", { href: "#/run/" + encodeURIComponent(run.run_id), title: run.run_id, text: short(run.run_id) });
    const row = h("tr", { "data-run": run.run_id, "data-status": run.status },
      h("td", {}, link), h("td", { text: workflowName(run) }), h("td", {}, badge(run.status)), h("td", { text: run.place }),
      h("td", { text: String(run.step) }), h("td", {}, time(run.updated_at)),
      h("td", {}, run.parent ? h("a", { href: "#/run/" + run.parent, text: short(run.parent) }) : ""));
    row.addEventListener("click", (e) => {
      if (e.target.tagName !== "A") location.hash = "#/run/" + encodeURIComponent(run.run_id);
    });
    return row;
  }

  // ---- the schedules --------------------------------------------------------

  async function showSchedules() {
    const gen = app.generation;
    const body = h("tbody");
    const table = h("table", { class: "runs schedules" },
      h("thead", {}, h("tr", {}, ...["schedule", "workflow", "when", "missed", "next due", "last run", ""].map((c) => h("th", { text: c })))),
      body);
    main.replaceChildren(h("h1", { text: "Schedules" }),
      h("p", { class: "muted", text: "Recurring runs, started by the workers of their workflow at each due time. Add one with `schedule add` or POST /api/schedules." }),
      table);
    let reads = 0;
    const load = async () => {
      const read = ++reads;
      const data = await api("/schedules");
      if (read !== reads || gen !== app.generation) return;
      body.replaceChildren(...data.schedules.map((s) => scheduleRow(s, load)));
      if (!data.schedules.length) body.appendChild(h("tr", {}, h("td", { colspan: 7, class: "muted", text: "No schedules." })));
    };
    const timer = setInterval(() => { if (!document.hidden) load().catch(() => {}); }, LIST_REFRESH_MS);
    app.cleanups.push(() => clearInterval(timer));
    await load();
  }

  function scheduleRow(s, reload) {
    const path = "/schedules/" + encodeURIComponent(s.id);
    const act = (label, f) => {
      const b = h("button", { type: "button", "data-action": label, text: label });
      b.addEventListener("click", async () => {
        b.disabled = true;
        try {
          await f();
          await reload();
        } catch (e) {
          fail(e);
        } finally {
          b.disabled = false;
        }
      });
      return b;
    };
    const toggle = s.paused ? act("resume", () => api(path + "/resume", {})) : act("pause", () => api(path + "/pause", {}));
    const remove = act("delete", async () => {
      if (window.confirm("Delete schedule " + s.id + "? Its runs stay.")) await api(path, undefined, "DELETE");
    });
    const next = s.paused ? h("span", { class: "badge paused", text: "paused" }) : time(s.next_due);
    const last = s.last_run
      ? h("span", {}, h("a", { href: "#/run/" + encodeURIComponent(s.last_run), title: s.last_run, text: short(s.last_run) }), " ",
        s.last_run_status ? badge(s.last_run_status) : "", " ", h("span", { class: "muted" }, "due ", time(s.last_due)))
      : h("span", { class: "muted", text: "none yet" });
    const error = s.last_error ? h("div", { class: "error-box", text: s.last_error }) : "";
    return h("tr", { "data-schedule": s.id, "data-paused": String(s.paused) },
      h("td", { text: s.id }), h("td", { text: s.workflow }), h("td", { text: s.when }), h("td", { text: s.missed.replaceAll("_", " ") }),
      h("td", { class: "next-due" }, next), h("td", { class: "last-run" }, last, error), h("td", { class: "actions" }, toggle, " ", remove));
  }

  // ---- one run ------------------------------------------------------------

  async function showRun(id, drive) {
    const gen = app.generation;
    const alive = () => gen === app.generation;
    const abort = new AbortController();
    app.cleanups.push(() => abort.abort());
    const path = "/runs/" + encodeURIComponent(id);
    // A run this page started is driven once the stream is open, so nothing it
    // does is missed; should the stream not open, after 3 s, or when the user
    // leaves first (even during the reads below), it is driven all the same.
    let driven = !drive;
    const resume = () => api(path + "/resume", {}).catch((e) => { if (e.status !== 409) fail(e); });
    const driveIt = () => {
      if (driven) return;
      driven = true;
      if (alive()) window.history.replaceState(null, "", "#/run/" + encodeURIComponent(id));
      resume();
    };
    if (!driven) {
      const fallback = setTimeout(driveIt, 3000);
      // Leaving: the next page's address stays as it is.
      const onLeave = () => {
        if (driven) return;
        driven = true;
        fetch("/api" + path + "/resume", { method: "POST", headers: headers(true), body: "{}", keepalive: true }).catch(() => {});
      };
      window.addEventListener("pagehide", onLeave);
      app.cleanups.push(() => {
        clearTimeout(fallback);
        window.removeEventListener("pagehide", onLeave);
        onLeave();
      });
    }
    const wfs = await workflows();
    const run = await api(path);
    const kids = await api("/runs?parent=" + encodeURIComponent(id) + "&limit=50");
    if (!alive()) return;
    // An agent's run, of any name (its table takes the agent's decisions), opens
    // on its conversation even before its first message.
    const wf = wfs.get(run.workflow);
    const agent = run.workflow === "agent" || Boolean(wf && wf.signals.some((s) => s.name === "decide_tools"));
    const talks = agent || run.documents.some((d) => d.type === "llm_message");
    const view = {
      run, path, alive, wf, children: kids.runs, forms: new Map(), streaming: null,
      tab: talks ? "conversation" : "documents", openDocs: new Set(), versions: new Map(), picked: null,
      live: h("div", { class: "live-activity", "aria-live": "polite" }),
      // The step the next transition commits as (known for sure from its events).
      step: run.step + 1,
    };
    // Reads the run (and its children) again and draws it, if this view is still shown.
    view.refresh = async () => {
      const [now, children] = await Promise.all([api(path), api("/runs?parent=" + encodeURIComponent(id) + "&limit=50")]);
      if (!alive()) return;
      view.run = now;
      view.children = children.runs;
      renderRun(view);
    };
    view.reload = debounce(() => view.refresh().catch(fail), 120);
    renderRun(view);

    // Follow it live while this page is open, whatever its status (a retry moves
    // a finished run again): its events, whichever process drives it (over a
    // store with an event log; over the in-memory store only this server's
    // drives), and a slower read of the run besides. A reconnect resumes right
    // after the last event received (`Last-Event-ID`), so none is lost or shown twice.
    const onEvent = (event) => liveEvent(view, event);
    const onOpen = () => {
      view.live.dataset.following = "true";
      if (view.run.status === "queued") driveIt();
      else driven = true;
    };
    const cursor = { last: null };
    (async () => {
      let first = true;
      // Reconnects wait longer after each failure, up to 30 s; an open stream resets it.
      let delay = 1000;
      while (!abort.signal.aborted) {
        try {
          if (!first) await view.refresh();
          first = false;
          await follow(view.path, onEvent, abort.signal, cursor, () => {
            delay = 1000;
            onOpen();
          });
        } catch (e) {
          if (abort.signal.aborted) return;
          if (e && e.status === 401) return;
          if (e && e.status === 404) {
            say("This run no longer exists.", "bad");
            return;
          }
          delay = Math.min(delay * 2, 30000);
        }
        delete view.live.dataset.following;
        await sleep(delay, abort.signal);
      }
    })();
    const timer = setInterval(async () => {
      if (document.hidden || FINISHED.has(view.run.status)) return;
      try {
        const now = await api(path);
        if (!alive()) return;
        if (now.step !== view.run.step || now.status !== view.run.status || now.updated_at !== view.run.updated_at) {
          view.run = now;
          renderRun(view);
        }
      } catch (_) {
        // The next tick tries again.
      }
    }, RUN_REFRESH_MS);
    app.cleanups.push(() => clearInterval(timer));
  }

  function sleep(ms, signal) {
    return new Promise((resolve) => {
      const stop = () => { clearTimeout(t); resolve(); };
      const t = setTimeout(() => { signal.removeEventListener("abort", stop); resolve(); }, ms);
      signal.addEventListener("abort", stop, { once: true });
    });
  }

  function debounce(f, ms) {
    let t = null;
    return () => {
      clearTimeout(t);
      t = setTimeout(f, ms);
    };
  }

  // Reads the run's Server-Sent Events (with fetch, so the token can be sent),
  // from after `cursor.last`, the id of the last event read (as EventSource would
  // send it), which it keeps up to date.
  async function follow(path, onEvent, signal, cursor, onOpen) {
    const hs = headers(false);
    if (cursor.last !== null) hs["Last-Event-ID"] = cursor.last;
    const res = await fetch("/api" + path + "/events", { headers: hs, signal });
    if (res.status === 401) askToken();
    if (!res.ok || !res.body) throw new ApiError("no event stream (" + res.status + ")", res.status);
    // The server subscribed before it answered: from here on nothing is missed.
    onOpen();
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const chunk = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const lines = chunk.split("\n");
        const data = lines.filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, "")).join("\n");
        const id = lines.find((l) => l.startsWith("id:"));
        if (id !== undefined) cursor.last = id.slice(3).replace(/^ /, "");
        if (data) {
          try {
            onEvent(JSON.parse(data));
          } catch (_) {
            // Not an event; skipped.
          }
        }
      }
    }
  }

  function liveEvent(view, event) {
    const line = (text, cls) => {
      view.live.appendChild(h("div", { class: "event " + (cls || ""), text }));
      while (view.live.childNodes.length > 60) view.live.firstChild.remove();
      view.live.scrollTop = view.live.scrollHeight;
    };
    switch (event.type) {
      case "transition_started": {
        // A new step: what the model writes now belongs to it.
        view.step = event.step;
        if (view.streaming && view.streaming.step !== event.step) view.streaming = null;
        view.forming = null;
        line("\u25b6 " + event.transition + ": " + event.from + " \u2192 " + event.to);
        for (const g of document.querySelectorAll(".diagram .edge.running")) g.classList.remove("running");
        const edge = document.querySelector(`.diagram .edge[data-transition="${CSS.escape(event.transition)}"][data-from="${CSS.escape(event.from)}"]`);
        if (edge) edge.classList.add("running");
        break;
      }
      case "text_delta": {
        if (!view.streaming) {
          line("\u270e the model is writing (step " + view.step + ")");
          const text = h("div", { class: "text" });
          const bubble = h("div", { class: "bubble assistant streaming", "data-streaming": "" }, h("div", { class: "who", text: "assistant \u00b7 writing\u2026" }), text);
          view.streaming = { bubble, text, step: view.step };
          const chat = document.getElementById("conversation");
          if (chat) chat.appendChild(bubble);
        }
        view.streaming.text.textContent += event.text;
        break;
      }
      case "tool_call_delta": {
        // A call the model is writing: its arguments grow in a bubble of their own.
        view.forming = view.forming || new Map();
        let forming = view.forming.get(event.call_id);
        if (!forming) {
          line("\u270e the model is calling " + event.name + " (" + event.call_id + ")");
          const args = h("pre", { class: "args" });
          const bubble = h("div", { class: "bubble assistant streaming", "data-forming": event.call_id },
            h("div", { class: "who", text: "assistant \u00b7 calling " + event.name + "\u2026" }), args);
          forming = { bubble, args };
          view.forming.set(event.call_id, forming);
          const chat = document.getElementById("conversation");
          if (chat) chat.appendChild(bubble);
        }
        forming.args.textContent += event.partial_json;
        break;
      }
      case "tool_call_started":
        line("\u2699 " + event.name + " (" + event.call_id + ")");
        break;
      case "tool_call_finished":
        line((event.error ? "\u2717 " : "\u2713 ") + event.name + " in " + event.duration + " ms" + (event.error ? ": " + event.error : ""), event.error ? "bad" : "");
        break;
      case "usage":
        line("tokens: " + event.input_tokens + " in, " + event.output_tokens + " out (" + event.model + ")");
        break;
      case "custom":
        line(event.name + ": " + JSON.stringify(event.data));
        break;
      case "waiting":
        line("\u2016 waits at " + event.place + " for " + event.signals.join(", "));
        view.reload();
        break;
      case "transition_committed":
        view.reload();
        break;
      case "finished":
        line("\u25a0 " + event.status + (event.error ? ": " + event.error : ""), event.status === "completed" ? "good" : "bad");
        view.reload();
        break;
      case "lagged":
        view.reload();
        break;
      default:
        break;
    }
  }

  function renderRun(view) {
    const { run, wf } = view;
    const actions = h("div", { class: "actions" });
    const act = (label, path, confirmText) => {
      const b = h("button", { type: "button", "data-action": path, text: label });
      b.addEventListener("click", async () => {
        if (confirmText && !confirm(confirmText)) return;
        b.disabled = true;
        try {
          const after = await api(view.path + "/" + path, {});
          if (!view.alive()) return;
          say(label + ": the run is " + after.status + (after.error ? " (" + after.error + ")" : ""), after.status === "failed" ? "bad" : "info");
          await view.refresh();
        } catch (e) {
          fail(e);
          b.disabled = false;
        }
      });
      actions.appendChild(b);
    };
    if (!FINISHED.has(run.status)) act("Resume", "resume");
    if (run.status === "failed" || run.status === "cancelled") act("Retry", "retry");
    if (!FINISHED.has(run.status)) act("Cancel", "cancel", "Cancel this run and its child runs?");

    const facts = h("dl", { class: "facts" },
      h("dt", { text: "status" }), h("dd", {}, badge(run.status)),
      h("dt", { text: "place" }), h("dd", { class: "place", text: run.place }),
      h("dt", { text: "version" }), h("dd", { class: "version", text: String(run.version ?? 1) }),
      h("dt", { text: "step" }), h("dd", { text: String(run.step) }),
      h("dt", { text: "started" }), h("dd", {}, time(run.created_at)),
      h("dt", { text: "updated" }), h("dd", {}, time(run.updated_at)));
    if (run.parent) facts.append(h("dt", { text: "parent" }), h("dd", {}, h("a", { href: "#/run/" + run.parent, text: short(run.parent) })));
    // A fork: where it came from, what its edits changed, and the comparison.
    if (run.fork) {
      facts.append(h("dt", { text: "forked from" }), h("dd", { class: "fork" },
        h("a", { href: "#/run/" + encodeURIComponent(run.fork.run_id), title: run.fork.run_id, text: short(run.fork.run_id) }),
        h("span", { text: " at step " + run.fork.step + (run.fork.changes.length ? " with: " + run.fork.changes.join(", ") : "") + " " }),
        h("a", { class: "compare-link", href: "#/compare/" + encodeURIComponent(run.fork.run_id) + "/" + encodeURIComponent(run.run_id), text: "compare with the original" })));
    }
    if (run.wake_at) facts.append(h("dt", { text: "timer" }), h("dd", {}, time(run.wake_at)));
    // An agent run handed to another agent: the one that has the conversation.
    if (run.state && typeof run.state.agent === "string") facts.append(h("dt", { text: "agent" }), h("dd", { class: "agent", text: run.state.agent }));

    const header = h("div", { class: "run-header" },
      h("h1", {}, h("span", { text: run.workflow + " " }), h("code", { class: "run-id", title: run.run_id, text: run.run_id })),
      actions);
    const blocks = [header, facts];
    if (run.error) blocks.push(h("div", { class: "error-box", role: "alert" }, h("strong", { text: run.status === "failed" ? "Failed: " : "Ended: " }), h("span", { class: "error-text", text: run.error })));
    if (run.status === "waiting") blocks.push(waitingPanel(view));
    if (!FINISHED.has(run.status) || view.live.childNodes.length) blocks.push(section("Live", view.live));

    const diagram = section("State diagram");
    if (wf) {
      const places = new Set(["start"]);
      for (const s of run.history) { places.add(s.from); places.add(s.to); }
      const box = h("div", { class: "diagram-box", title: "click to see it at full size" }, window.LoopstackDiagram.render(wf, {
        current: run.place,
        visited: [...places],
        taken: run.history.map((s) => s.transition + "@" + s.from),
        waiting: run.status === "waiting",
      }));
      if (view.wideDiagram) box.classList.add("wide");
      box.tabIndex = 0;
      box.setAttribute("role", "button");
      box.setAttribute("aria-label", "state diagram; press to see it at full size");
      const toggle = () => { view.wideDiagram = box.classList.toggle("wide"); };
      box.addEventListener("click", toggle);
      box.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); toggle(); } });
      diagram.appendChild(box);
    } else {
      diagram.appendChild(h("p", { class: "muted", text: "This build does not register " + run.workflow + "." }));
    }

    const tabs = [
      ["conversation", "Conversation", () => conversation(view)],
      ["documents", "Documents (" + run.documents.length + ")", () => documents(view)],
      ["history", "Checkpoints (" + (run.history.length + 1) + ")", () => history(view)],
      ["signals", "Signals (" + run.signals.length + ")", () => signals(run)],
      ["state", "State", () => json(run.state)],
    ];
    const tabBar = h("div", { class: "tabs", role: "tablist" });
    const tabBody = h("div", { class: "tab-body" });
    const open = (key) => {
      view.tab = key;
      for (const b of tabBar.children) b.setAttribute("aria-selected", String(b.dataset.tab === key));
      const tab = tabs.find((t) => t[0] === key) || tabs[0];
      tabBody.replaceChildren(tab[2]());
    };
    for (const [key, label] of tabs) {
      const b = h("button", { type: "button", role: "tab", "data-tab": key, text: label });
      b.addEventListener("click", () => open(key));
      tabBar.appendChild(b);
    }
    open(view.tab);

    main.replaceChildren(h("div", { class: "run-grid" },
      h("div", { class: "run-side" }, ...blocks.slice(0, 2), diagram, ...blocks.slice(2), usage(run), childRuns(view)),
      h("div", { class: "run-main" }, tabBar, tabBody)));
  }

  function childRuns(view) {
    if (!view.children.length) return h("div", { hidden: true });
    const body = h("tbody", {}, ...view.children.map(runRow));
    return section("Child runs (" + view.children.length + ")", h("table", { class: "runs children" },
      h("thead", {}, h("tr", {}, ...["run", "workflow", "status", "place", "step", "updated", "parent"].map((c) => h("th", { text: c })))), body));
  }

  // An agent's calls waiting for a person: each with its tool and arguments, and
  // Approve and Deny (with a reason) buttons that send the agent's decide_tools
  // signal for that call; nobody types a call id. An at-most-once call whose
  // process died mid-call (the run waits at awaiting_outcome) is answered the same
  // way through resolve_tools: Run again (approve), the result it had (what the
  // model reads), or Deny.
  function approvalCard(view, call) {
    const key = view.run.step + "/call/" + call.call_id;
    let card = view.forms.get(key);
    if (card) return card;
    const outcome = Boolean(view.run.outcome_unknown);
    const signal = view.run.pending_signal || "decide_tools";
    const reason = h("input", { type: "text", "data-reason": "", placeholder: "why (the model reads it)", "aria-label": "reason for denying " + call.name });
    const approve = h("button", { type: "button", "data-decide": "approve", text: outcome ? "Run again" : "Approve" });
    const deny = h("button", { type: "button", "data-decide": "deny", class: "danger", text: "Deny" });
    const result = outcome ? h("input", { type: "text", "data-result": "", placeholder: "what it did (the model reads it)", "aria-label": "result of " + call.name }) : null;
    const give = outcome ? h("button", { type: "button", "data-decide": "result", text: "Give result" }) : null;
    const buttons = [approve, deny, give].filter(Boolean);
    const decide = async (approved, given) => {
      const why = reason.value.trim();
      if (given !== undefined && !given) {
        say("Say what the call did: the model reads it as the call's result.", "bad");
        result.focus();
        return;
      }
      if (given === undefined && !approved && !why) {
        say("Say why the call is denied: the model reads the reason.", "bad");
        reason.focus();
        return;
      }
      const decision = { call_id: call.call_id, approved };
      if (given !== undefined) decision.result = given;
      else if (!approved) decision.reason = why;
      buttons.forEach((b) => { b.disabled = true; });
      try {
        const after = await api(view.path + "/signals/" + signal, { decisions: [decision] });
        if (!view.alive()) return;
        const what = given !== undefined ? " answered" : approved ? (outcome ? " runs again" : " approved") : " denied";
        say(call.name + what + ": the run is " + after.status + (after.queued_signal ? " (queued for its driver)" : ""), "info");
        await view.refresh();
      } catch (e) {
        fail(e);
        buttons.forEach((b) => { b.disabled = false; });
      }
    };
    approve.addEventListener("click", () => decide(true));
    deny.addEventListener("click", () => decide(false));
    if (give) give.addEventListener("click", () => decide(true, result.value.trim()));
    const title = outcome ? "Outcome unknown: " : "Call ";
    card = h("div", { class: "signal-card approval", "data-call-id": call.call_id },
      h("h3", {}, h("span", { text: title }), h("code", { class: "tool-name", text: call.name })),
      h("pre", { class: "arguments", text: JSON.stringify(call.arguments, null, 2) }),
      outcome ? h("div", { class: "actions" }, result, give) : null,
      h("div", { class: "actions" }, approve, reason, deny));
    view.forms.set(key, card);
    return card;
  }

  function waitingPanel(view) {
    const { run, wf } = view;
    const panel = section("Waiting for");
    const pending = run.pending_calls || [];
    if (pending.length) {
      const said = run.outcome_unknown
        ? "The process died during " + (pending.length === 1 ? "an at-most-once tool call" : pending.length + " at-most-once tool calls") + ", which did not run again: say what happened."
        : pending.length === 1 ? "A tool call waits for your decision:" : pending.length + " tool calls wait for your decision:";
      panel.appendChild(h("p", { text: said }));
      for (const call of pending) panel.appendChild(approvalCard(view, call));
    }
    // The decisions' own signal is answered by the buttons above.
    const names = (run.waiting_for || []).filter((name) => !(pending.length && name === (run.pending_signal || "decide_tools")));
    if (!names.length && !pending.length) panel.appendChild(h("p", { class: "muted", text: "No signal of this build's table leaves " + run.place + "." }));
    for (const name of names) {
      const key = run.step + "/" + name;
      let card = view.forms.get(key);
      if (!card) {
        const signal = wf && wf.signals.find((s) => s.name === name);
        const form = window.LoopstackForms.build(signal ? signal.payload_schema : null, { name, submit: "Send " + name });
        form.onSubmit(async (payload) => {
          const after = await api(view.path + "/signals/" + encodeURIComponent(name), payload);
          if (!view.alive()) return;
          // Queued for another driver, the run still waits here: the form can be used again.
          say(name + " sent: the run is " + after.status + (after.queued_signal ? " (queued for its driver)" : ""), "info");
          await view.refresh();
        });
        card = h("div", { class: "signal-card", "data-signal": name }, h("h3", { text: name }), form.element);
        view.forms.set(key, card);
      }
      panel.appendChild(card);
    }
    return panel;
  }

  // Tokens and cost: per model from each message's metadata, cost from the state.
  function usage(run) {
    const per = new Map();
    for (const d of run.documents) {
      const u = d.metadata && d.metadata.usage;
      if (!u) continue;
      const model = d.metadata.model || "model";
      const row = per.get(model) || { turns: 0, input: 0, output: 0, cached: 0 };
      row.turns += 1;
      row.input += u.input_tokens || 0;
      row.output += u.output_tokens || 0;
      row.cached += (u.cache_read_input_tokens || 0) + (u.cache_creation_input_tokens || 0);
      per.set(model, row);
    }
    const cost = run.state && typeof run.state.cost === "number" ? run.state.cost : null;
    if (!per.size && cost === null) return h("div", { hidden: true });
    const body = h("tbody");
    for (const [model, r] of per) {
      body.appendChild(h("tr", {}, h("td", { text: model }), h("td", { text: String(r.turns) }), h("td", { text: String(r.input) }),
        h("td", { text: String(r.output) }), h("td", { text: String(r.cached) })));
    }
    const panel = section("Usage",
      h("table", { class: "usage" }, h("thead", {}, h("tr", {}, ...["model", "turns", "input", "output", "cached"].map((c) => h("th", { text: c })))), body));
    if (cost !== null) panel.appendChild(h("p", { class: "cost" }, "cost: ", h("strong", { text: "$" + cost.toFixed(cost < 0.01 ? 6 : 4) })));
    return panel;
  }

  function conversation(view) {
    const { run } = view;
    const box = h("div", { class: "conversation", id: "conversation" });
    const messages = run.documents.filter((d) => d.type === "llm_message");
    // The words of a turn not yet committed, as they stream.
    const streaming = view.streaming && view.streaming.step > run.step ? view.streaming : null;
    if (!messages.length && !streaming) box.appendChild(h("p", { class: "muted", text: "This run has no conversation." }));
    // Tool names by call id, to title the results.
    const tools = new Map();
    for (const m of messages) for (const b of (m.content && m.content.content) || []) if (b.type === "tool_use") tools.set(b.id, b.name);
    // The run's images by key: a message refers to each image it shows.
    const images = new Map(run.documents.filter((d) => d.type === "llm_image" && d.key).map((d) => [d.key, d.content]));
    const named = new Set(messages.flatMap((m) => (m.tags || []).filter((t) => t.startsWith("conversation:"))));
    let last = null;
    for (const m of messages) {
      const conv = (m.tags || []).find((t) => t.startsWith("conversation:"));
      if (named.size && conv !== last) {
        box.appendChild(h("div", { class: "conversation-name", text: conv ? conv.slice(13) : "default" }));
        last = conv;
      }
      box.appendChild(bubble(m, tools, images));
    }
    if (streaming) box.appendChild(streaming.bubble);
    return box;
  }

  function bubble(doc, tools, images) {
    const msg = doc.content || {};
    const role = msg.role || "user";
    const blocks = Array.isArray(msg.content) ? msg.content : [];
    const onlyResults = blocks.length && blocks.every((b) => b.type === "tool_result" || (b.type === "image" && b.tool_use_id));
    const meta = doc.metadata || {};
    // In a run handed between agents, each answer names the agent that wrote it.
    const who = onlyResults ? "tool results" : role === "assistant" && meta.agent ? meta.agent : role;
    const details = [];
    if (meta.model) details.push(meta.model);
    // A model of the fallback chain answered: the ones that failed before it.
    if (Array.isArray(meta.fallbacks) && meta.fallbacks.length) {
      details.push("after " + meta.fallbacks.map((f) => f.model + " failed").join(", "));
    }
    if (meta.stop_reason) details.push(meta.stop_reason);
    if (meta.usage) details.push(meta.usage.input_tokens + " in / " + meta.usage.output_tokens + " out");
    const b = h("div", { class: "bubble " + (onlyResults ? "tools" : role), "data-role": role, "data-agent": meta.agent || "" },
      h("div", { class: "who" }, h("span", { text: who }), h("span", { class: "muted", text: "step " + doc.step + (details.length ? " \u00b7 " + details.join(" \u00b7 ") : "") })));
    for (const block of blocks) {
      if (block.type === "text") b.appendChild(h("div", { class: "text", text: block.text }));
      else if (block.type === "tool_use" && block.name.startsWith("transfer_to_")) {
        b.appendChild(h("div", { class: "handoff", text: "\u21e2 hands the conversation to " + block.name.slice(12) }));
      } else if (block.type === "tool_use") {
        b.appendChild(h("div", { class: "tool-call" }, h("div", { class: "tool-title", text: "\u2192 " + block.name + " \u00b7 " + block.id }), json(block.input)));
      } else if (block.type === "tool_result") {
        const name = tools.get(block.tool_use_id) || "tool";
        const content = typeof block.content === "string" ? block.content : JSON.stringify(block.content, null, 2);
        b.appendChild(h("div", { class: "tool-result" + (block.is_error ? " error" : "") },
          h("div", { class: "tool-title", text: (block.is_error ? "\u2717 " : "\u2190 ") + name + " \u00b7 " + block.tool_use_id }),
          h("pre", { text: content })));
      } else if (block.type === "image") {
        b.appendChild(picture(block, tools, images || new Map()));
      } else {
        b.appendChild(json(block));
      }
    }
    return b;
  }

  const IMAGE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"];

  // An image block: its data (from the run's image document it refers to) as a data
  // URL; an image at a URL is a link, since the page fetches nothing from elsewhere.
  function picture(block, tools, images) {
    const source = block.source || {};
    const saved = source.type === "stored" ? images.get(source.key) : source.type === "base64" ? source : null;
    const title = block.tool_use_id ? "\u2190 " + (tools.get(block.tool_use_id) || "tool") + " \u00b7 " + block.tool_use_id + " \u00b7 image" : "image";
    const figure = h("figure", { class: "image" }, h("figcaption", { class: "muted", text: title }));
    if (saved && IMAGE_TYPES.includes(saved.media_type) && typeof saved.data === "string") {
      figure.appendChild(h("img", { src: "data:" + saved.media_type + ";base64," + saved.data, alt: title, "data-key": source.key || "" }));
    } else if (source.type === "url" && /^https?:\/\//i.test(source.url || "")) {
      figure.appendChild(h("a", { href: source.url, rel: "noreferrer noopener", target: "_blank", text: source.url }));
    } else {
      figure.appendChild(h("span", { class: "muted", text: "(the image is not in the run)" }));
    }
    return figure;
  }

  function documents(view) {
    const { run } = view;
    if (!run.documents.length) return h("p", { class: "muted", text: "This run saved no documents." });
    const list = h("div", { class: "documents" });
    for (const d of run.documents) {
      const id = d.type + (d.key ? ":" + d.key : "#" + d.seq);
      const title = d.type + (d.key ? " \u00b7 " + d.key : " #" + d.seq);
      const body = h("div", { class: "doc-body" }, json(d.content));
      if (Object.keys(d.metadata || {}).length) body.appendChild(h("details", {}, h("summary", { text: "metadata" }), json(d.metadata)));
      // A few documents are shown open, many closed; what the user opened stays
      // open when the run moves.
      const open = view.openDocs.has(id) || (run.documents.length <= 3 && !view.openDocs.has("!" + id));
      const item = h("details", { class: "document", open, "data-doc": d.type + (d.key ? ":" + d.key : "") },
        h("summary", {}, h("span", { text: title }), h("span", { class: "muted", text: " v" + d.version + " \u00b7 step " + d.step + ((d.tags || []).length ? " \u00b7 " + d.tags.join(", ") : "") })),
        body);
      item.addEventListener("toggle", () => {
        view.openDocs.delete(item.open ? "!" + id : id);
        view.openDocs.add(item.open ? id : "!" + id);
      });
      if (d.key && d.version > 1) {
        const versions = h("div", { class: "versions" });
        const show = (list) => versions.replaceChildren(...list.map((v) => h("div", { class: "version", "data-version": String(v.version) },
          h("div", { class: "muted", text: "version " + v.version + " \u00b7 step " + v.step }), json(v.content))));
        const known = view.versions.get(id);
        if (known && known.length === d.version) {
          show(known);
          body.append(versions);
        } else {
          const button = h("button", { type: "button", class: "small", text: "all " + d.version + " versions" });
          button.addEventListener("click", async () => {
            try {
              const data = await api(view.path + "/documents/" + encodeURIComponent(d.type) + "/" + encodeURIComponent(d.key));
              view.versions.set(id, data.versions);
              show(data.versions);
              button.remove();
            } catch (e) {
              fail(e);
            }
          });
          body.append(button, versions);
        }
      }
      list.appendChild(item);
    }
    return list;
  }

  function history(view) {
    const { run } = view;
    const out = h("div", { class: "history" });
    const shown = h("div", { class: "checkpoint" }, h("p", { class: "muted", text: "Pick a step to see the state its checkpoint holds." }));
    const body = h("tbody");
    const rows = [{ step: 0, transition: "(initial state)", from: "", to: "start", at: run.created_at }, ...run.history];
    let previous = null;
    // Only the latest pick draws, so a slow answer does not show under another row.
    let picks = 0;
    for (const s of rows) {
      const took = previous ? Math.max(0, new Date(s.at) - new Date(previous)) + " ms" : "";
      previous = s.at;
      const forkButton = h("button", { type: "button", class: "fork-button", "data-fork": String(s.step), text: "Fork from here" });
      forkButton.addEventListener("click", (e) => {
        e.stopPropagation();
        for (const r of body.children) r.classList.toggle("picked", r === row);
        shown.replaceChildren(forkForm(view, s.step));
      });
      const row = h("tr", { "data-step": String(s.step), tabindex: 0 },
        h("td", { text: String(s.step) }), h("td", { text: s.transition }), h("td", { text: s.from ? s.from + " \u2192 " + s.to : s.to }),
        h("td", {}, time(s.at)), h("td", { class: "muted", text: took }), h("td", {}, forkButton));
      const pick = async () => {
        const n = ++picks;
        view.picked = s.step;
        for (const r of body.children) r.classList.toggle("picked", r === row);
        try {
          const c = await api(view.path + "/checkpoints/" + s.step);
          if (n !== picks) return;
          shown.replaceChildren(h("h3", { "data-step": String(c.step), text: "State after step " + c.step + (c.transition ? " (" + c.transition + ")" : "") }), json(c.state));
        } catch (e) {
          if (n === picks) shown.replaceChildren(h("p", { class: "form-error", text: e.message }));
        }
      };
      row.addEventListener("click", pick);
      row.addEventListener("keydown", (e) => { if (e.key === "Enter") pick(); });
      body.appendChild(row);
      // The step picked before the run moved stays picked.
      if (view.picked === s.step) pick();
    }
    out.append(h("table", { class: "steps" }, h("thead", {}, h("tr", {}, ...["step", "transition", "places", "at", "took", ""].map((c) => h("th", { text: c })))), body), shown);
    return out;
  }

  // The form of "Fork from here": what the fork changes (each field left empty
  // keeps the run's), sent to POST /api/runs/{id}/fork; the fork opens when made.
  function forkForm(view, step) {
    const system = h("textarea", { name: "system", rows: 3, placeholder: "system prompt (the run's own when empty)", "aria-label": "system prompt" });
    const model = h("input", { type: "text", name: "model", placeholder: "PROVIDER:MODEL (the run's own when empty)", "aria-label": "model" });
    const keep = h("input", { type: "number", name: "keep_messages", min: 0, placeholder: "keep the first N messages", "aria-label": "messages to keep" });
    const reword = h("input", { type: "number", name: "message_index", min: 0, placeholder: "reword message N (from 0)", "aria-label": "message to reword" });
    const text = h("textarea", { name: "message_text", rows: 2, placeholder: "its new text", "aria-label": "the message's new text" });
    const state = h("textarea", { name: "state", rows: 4, placeholder: "the whole state as JSON (the checkpoint's when empty)", "aria-label": "state" });
    const error = h("p", { class: "form-error", role: "alert" });
    const submit = h("button", { class: "primary", type: "submit", text: "Fork" });
    const form = h("form", { class: "fork-form", "data-fork-step": String(step) },
      h("h3", { text: "Fork from step " + step }), system, model, keep, reword, text, state, error, h("div", { class: "actions" }, submit));
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      error.textContent = "";
      const edits = {};
      if (system.value.trim()) edits.system = system.value;
      if (model.value.trim()) edits.model = model.value.trim();
      if (keep.value !== "") edits.keep_messages = Number(keep.value);
      if ((reword.value !== "") !== Boolean(text.value.trim())) {
        error.textContent = "to reword a message, give its number (from 0) and its new text";
        return;
      }
      if (reword.value !== "") edits.messages = [{ index: Number(reword.value), text: text.value }];
      if (state.value.trim()) {
        try {
          edits.state = JSON.parse(state.value);
        } catch (err) {
          error.textContent = "the state is not JSON: " + err.message;
          return;
        }
      }
      submit.disabled = true;
      try {
        const fork = await api(view.path + "/fork", { step, edits });
        app.pending = ["Forked from step " + step + ": the fork is " + fork.status, "info"];
        location.hash = "#/run/" + encodeURIComponent(fork.run_id);
      } catch (err) {
        error.textContent = err.message;
        submit.disabled = false;
      }
    });
    return form;
  }

  // ---- two runs side by side ------------------------------------------------

  // What the comparison shows of a run: its outcome, tokens and cost, tool calls
  // and conversation, from GET /api/runs/{id}.
  function runFacts(run) {
    const messages = run.documents.filter((d) => d.type === "llm_message").map((d) => d.content || {});
    const blocks = (m) => (Array.isArray(m.content) ? m.content : []);
    const calls = messages.flatMap((m) => blocks(m).filter((b) => b.type === "tool_use"));
    const usage = (run.state && run.state.usage) || {};
    const tokens = (usage.input_tokens || 0) + (usage.output_tokens || 0);
    const cost = run.state && typeof run.state.cost === "number" ? run.state.cost : 0;
    const output = run.state && typeof run.state.output === "string" ? run.state.output : "";
    const text = (m) => blocks(m).map((b) => b.type === "text" ? b.text : b.type === "tool_use" ? "\u2192 " + b.name + " " + JSON.stringify(b.input)
      : b.type === "tool_result" ? "\u2190 " + (typeof b.content === "string" ? b.content : JSON.stringify(b.content)) : "[" + b.type + "]").join("\n");
    return { messages, calls, tokens, cost, output, text };
  }

  async function showCompare(a, b) {
    const gen = app.generation;
    const [left, right] = await Promise.all([api("/runs/" + encodeURIComponent(a)), api("/runs/" + encodeURIComponent(b))]);
    if (gen !== app.generation) return;
    const facts = [runFacts(left), runFacts(right)];
    const column = (run, f, side) => h("div", { class: "compare-side", "data-side": side, "data-run": run.run_id },
      h("h2", {}, h("a", { href: "#/run/" + encodeURIComponent(run.run_id), text: run.workflow + " " + short(run.run_id) })),
      run.fork ? h("p", { class: "muted fork", text: run.fork.text }) : h("p", { class: "muted", text: "an original run" }),
      h("dl", { class: "facts" },
        h("dt", { text: "outcome" }), h("dd", { class: "outcome" }, badge(run.status), h("span", { text: " at " + run.place + ", step " + run.step })),
        h("dt", { text: "answer" }), h("dd", { class: "answer", text: f.output }),
        h("dt", { text: "tokens" }), h("dd", { class: "tokens", text: String(f.tokens) }),
        h("dt", { text: "cost" }), h("dd", { class: "cost", text: "$" + f.cost.toFixed(f.cost < 0.01 ? 6 : 4) }),
        h("dt", { text: "tool calls" }), h("dd", { class: "tool-calls", text: f.calls.map((c) => c.name + " " + JSON.stringify(c.input)).join("; ") || "none" })),
      h("h3", { text: "Conversation (" + f.messages.length + ")" }),
      h("ol", { class: "compare-conversation" }, ...f.messages.map((m, i) => {
        const other = facts[side === "left" ? 1 : 0].messages[i];
        const same = other && f.text(other) === f.text(m);
        return h("li", { class: "message " + (m.role || "user") + (same ? " same" : " differs"), "data-index": String(i) },
          h("strong", { text: (m.role || "user") + ": " }), h("span", { class: "text", text: f.text(m) }));
      })));
    main.replaceChildren(h("h1", { text: "Two runs side by side" }),
      h("div", { class: "compare" }, column(left, facts[0], "left"), column(right, facts[1], "right")));
  }

  // ---- evals ------------------------------------------------------------------

  const EVAL_WORKFLOW = "loopstack_eval";

  // Evals are the runs of the one-step workflow loopstack_eval, each under its
  // eval's id with the report as its state; their cases are runs of their own.
  async function showEvals() {
    const gen = app.generation;
    const page = await api("/runs?workflow=" + EVAL_WORKFLOW + "&limit=100");
    const reports = await Promise.all(page.runs.map((r) => api("/runs/" + encodeURIComponent(r.run_id))));
    if (gen !== app.generation) return;
    const picked = new Set();
    const compare = h("button", { type: "button", class: "primary", "data-compare-evals": "", disabled: true, text: "Compare the two picked" });
    const body = h("tbody");
    for (const run of reports) {
      const r = run.state || {};
      const s = r.summary || {};
      const pick = h("input", { type: "checkbox", "aria-label": "pick " + r.eval, "data-pick": run.run_id });
      pick.addEventListener("change", () => {
        if (pick.checked) picked.add(run.run_id); else picked.delete(run.run_id);
        compare.disabled = picked.size !== 2;
      });
      body.appendChild(h("tr", { "data-eval": run.run_id },
        h("td", {}, pick), h("td", {}, h("a", { href: "#/eval/" + encodeURIComponent(run.run_id), text: r.eval || short(run.run_id) })),
        h("td", { text: r.agent || "" }), h("td", { class: "passed", text: (s.passed || 0) + " / " + (s.cases || 0) }),
        h("td", { text: "$" + (s.cost || 0).toFixed(4) }), h("td", { text: (s.mean_latency_ms || 0) + " ms" }), h("td", {}, time(run.created_at))));
    }
    if (!reports.length) body.appendChild(h("tr", {}, h("td", { colspan: 7, class: "muted", text: "No evals yet: run `eval DATASET.jsonl --agent NAME` (or loopstack::eval) over this store." })));
    compare.addEventListener("click", () => {
      const [x, y] = [...picked];
      location.hash = "#/evals/compare/" + encodeURIComponent(x) + "/" + encodeURIComponent(y);
    });
    main.replaceChildren(h("h1", { text: "Evals" }),
      h("table", { class: "runs evals" }, h("thead", {}, h("tr", {}, ...["", "eval", "agent", "passed", "cost", "latency", "run"].map((c) => h("th", { text: c })))), body),
      h("div", { class: "actions" }, compare));
  }

  async function showEval(id) {
    const gen = app.generation;
    const run = await api("/runs/" + encodeURIComponent(id));
    if (gen !== app.generation) return;
    const r = run.state || {};
    const s = r.summary || {};
    const body = h("tbody");
    for (const c of r.cases || []) {
      const scores = (c.scores || []).map(([name, score]) => name + " " + (score.passed ? "ok" : "x") + " " + Number(score.value).toFixed(2)).join(", ");
      body.appendChild(h("tr", { "data-case": c.case, "data-passed": String(c.passed) },
        h("td", {}, h("a", { href: "#/run/" + encodeURIComponent(c.run_id), text: c.case + (r.repeats > 1 ? " #" + c.repeat : "") })),
        h("td", {}, badge(c.passed ? "completed" : "failed"), h("span", { text: c.passed ? " pass" : " fail (" + c.status + ")" })),
        h("td", { class: "scores", text: scores }), h("td", { text: String(c.tokens) }), h("td", { text: "$" + Number(c.cost).toFixed(4) }),
        h("td", { text: c.latency_ms + " ms" })));
    }
    main.replaceChildren(h("h1", { text: "Eval " + (r.eval || "") }),
      h("p", { class: "muted", text: "agent " + r.agent + ", dataset " + r.dataset + ", " + (s.passed || 0) + " of " + (s.cases || 0) + " passed" }),
      h("table", { class: "runs eval-cases" }, h("thead", {}, h("tr", {}, ...["case", "outcome", "scores", "tokens", "cost", "latency"].map((c) => h("th", { text: c })))), body));
  }

  // The mean score of each case over its scorers and repeats, as the report's
  // comparison counts it (a case whose run did not complete scores 0).
  function caseMeans(report) {
    const out = new Map();
    for (const c of report.cases || []) {
      const scores = c.scores || [];
      const mean = !scores.length || c.status !== "completed" ? 0 : scores.reduce((t, [, s]) => t + Number(s.value), 0) / scores.length;
      const entry = out.get(c.case) || { sum: 0, n: 0 };
      entry.sum += mean;
      entry.n += 1;
      out.set(c.case, entry);
    }
    return new Map([...out].map(([k, e]) => [k, e.sum / e.n]));
  }

  async function showEvalCompare(a, b) {
    const gen = app.generation;
    const [before, after] = await Promise.all([api("/runs/" + encodeURIComponent(a)), api("/runs/" + encodeURIComponent(b))]);
    if (gen !== app.generation) return;
    const [old, now] = [caseMeans(before.state || {}), caseMeans(after.state || {})];
    const body = h("tbody");
    for (const id of new Set([...old.keys(), ...now.keys()])) {
      const [was, is] = [old.get(id), now.get(id)];
      const change = was === undefined ? "added" : is === undefined ? "removed" : Math.abs(is - was) < 1e-9 ? "same" : is > was ? "better" : "worse";
      const fmt = (v) => (v === undefined ? "" : v.toFixed(2));
      body.appendChild(h("tr", { "data-case": id, "data-change": change },
        h("td", { text: id }), h("td", { text: fmt(was) }), h("td", { text: fmt(is) }), h("td", { class: "change " + change, text: change })));
    }
    const name = (run) => h("a", { href: "#/eval/" + encodeURIComponent(run.run_id), text: (run.state && run.state.eval) + " " + short(run.run_id) });
    main.replaceChildren(h("h1", { text: "Two evals compared" }),
      h("p", {}, "from ", name(before), " to ", name(after)),
      h("table", { class: "runs eval-compare" }, h("thead", {}, h("tr", {}, ...["case", "before", "after", ""].map((c) => h("th", { text: c })))), body));
  }

  function signals(run) {
    if (!run.signals.length) return h("p", { class: "muted", text: "No signals were sent to this run." });
    const body = h("tbody");
    for (const s of run.signals) {
      const st = s.status || {};
      const detail = st.status === "delivered" ? "step " + st.step : st.status === "rejected" ? st.reason : "";
      body.appendChild(h("tr", { "data-signal-id": String(s.id) }, h("td", { text: String(s.id) }), h("td", { text: s.name }),
        h("td", {}, badge(st.status || "pending"), h("span", { class: "muted", text: detail ? " " + detail : "" })),
        h("td", {}, time(s.received_at)), h("td", {}, json(s.payload))));
    }
    return h("table", { class: "signals" }, h("thead", {}, h("tr", {}, ...["#", "signal", "status", "received", "payload"].map((c) => h("th", { text: c })))), body);
  }

  // ---- starting a run -----------------------------------------------------

  async function showStart(name) {
    const wfs = await workflows();
    const names = [...wfs.keys()];
    const chosen = wfs.has(name) ? name : names[0];
    const select = h("select", { name: "workflow", "aria-label": "workflow" }, ...names.map((n) => h("option", { value: n, text: n })));
    select.value = chosen || "";
    select.addEventListener("change", () => { location.hash = "#/start/" + encodeURIComponent(select.value); });
    const blocks = [h("h1", { text: "Start a run" }), h("div", { class: "filters" }, h("label", { text: "workflow " }), select)];
    const wf = wfs.get(chosen);
    if (!wf) {
      blocks.push(h("p", { class: "muted", text: "No workflow is registered." }));
    } else {
      const schema = wf.input_schema || { description: "The input, as JSON (its type has no JSON Schema)." };
      const form = window.LoopstackForms.build(schema, { name: "input", submit: "Start " + wf.name });
      form.onSubmit(async (input) => {
        // Queued first; the run's page drives it once it follows its events, so
        // nothing the run does is missed, the model's first words included.
        const started = await api("/runs", { workflow: wf.name, input });
        app.pending = ["started " + short(started.run_id), "info"];
        location.hash = "#/run/" + encodeURIComponent(started.run_id) + "?drive";
      });
      blocks.push(section("Input", form.element));
      const diagram = section("State diagram", h("div", { class: "diagram-box" }, window.LoopstackDiagram.render(wf, {})));
      blocks.push(diagram);
    }
    main.replaceChildren(...blocks);
  }

  // ---- routing --------------------------------------------------------------

  function fail(e) {
    // A 401 shows the token prompt instead (see `api`).
    if (e && e.status === 401) return;
    say(e.message || String(e), "bad");
  }

  async function route() {
    leave();
    app.generation += 1;
    const hash = location.hash.slice(1) || "/";
    const [path, query] = hash.split("?");
    const here = path.startsWith("/start") ? "/start" : path.startsWith("/schedules") ? "/schedules" : path.startsWith("/eval") ? "/evals" : "/";
    for (const a of document.querySelectorAll("nav a")) a.classList.toggle("here", a.getAttribute("href") === "#" + here);
    try {
      const parts = path.split("/").slice(1).map(decodeURIComponent);
      if (path.startsWith("/schedules")) await showSchedules();
      else if (path.startsWith("/run/")) await showRun(decodeURIComponent(path.slice(5)), query === "drive");
      else if (parts[0] === "compare" && parts.length === 3) await showCompare(parts[1], parts[2]);
      else if (parts[0] === "evals" && parts[1] === "compare" && parts.length === 4) await showEvalCompare(parts[2], parts[3]);
      else if (parts[0] === "evals") await showEvals();
      else if (parts[0] === "eval" && parts.length === 2) await showEval(parts[1]);
      else if (path.startsWith("/start")) await showStart(decodeURIComponent(path.slice(7)));
      else await showRuns(new URLSearchParams(query || ""));
    } catch (e) {
      if (e.status !== 401) main.replaceChildren(h("div", { class: "error-box", role: "alert", text: e.message || String(e) }));
    }
  }

  window.addEventListener("hashchange", () => {
    const pending = app.pending;
    app.pending = null;
    if (pending) say(pending[0], pending[1]);
    else if (!flash.querySelector("form.token")) say("");
    route();
  });
  route();
})();
