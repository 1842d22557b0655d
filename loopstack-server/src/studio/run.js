// Studio's page of one run: loading and following it live, its header and
// actions, and the calls and signals it waits for.

import { api, ApiError, app, askToken, badge, debounce, fail, FINISHED, h, headers, json, keepFocus, main, RUN_REFRESH_MS, say, section, short, sleep, time, workflows } from "./common.js";
import { runRow } from "./runs.js";
import { conversation, documents, history, signals, usage } from "./details.js";

// ---- one run ------------------------------------------------------------

export async function showRun(id, drive) {
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

// Reads the run's Server-Sent Events (with fetch, so the token can be sent),
// from after `cursor.last`, the id of the last event read (as EventSource would
// send it), which it keeps up to date.
export async function follow(path, onEvent, signal, cursor, onOpen) {
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

export function liveEvent(view, event) {
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
      if (view.thinking && view.thinking.step !== event.step) view.thinking = null;
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
    case "reasoning_delta": {
      // What the model thinks before it answers: folded, under the turn being written.
      if (!view.thinking || view.thinking.step !== view.step) {
        line("\u2026 the model is reasoning (step " + view.step + ")");
        const text = h("div", { class: "text" });
        const fold = h("details", { class: "reasoning" }, h("summary", { text: "reasoning\u2026" }), text);
        const bubble = h("div", { class: "bubble assistant streaming", "data-streaming": "" }, h("div", { class: "who", text: "assistant \u00b7 reasoning\u2026" }), fold);
        view.thinking = { bubble, text, step: view.step };
        const chat = document.getElementById("conversation");
        if (chat) chat.appendChild(bubble);
      }
      view.thinking.text.textContent += event.text;
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
      line("tokens: " + event.input_tokens + " in, " + event.output_tokens + " out" + (event.reasoning_output_tokens ? " (" + event.reasoning_output_tokens + " reasoning)" : "") + " (" + event.model + ")");
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

export function renderRun(view) {
  const { run, wf } = view;
  const refocus = keepFocus();
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
  // A stopped run (a limit, a safety stop) is retried like a failed one, once the limit is raised.
  if (run.status === "failed" || run.status === "cancelled" || run.status === "stopped") act("Retry", "retry");
  if (!FINISHED.has(run.status)) act("Cancel", "cancel", "Cancel this run and its child runs?");

  const facts = h("dl", { class: "facts" },
    h("dt", { text: "status" }), h("dd", {}, badge(run.stalled ? "stalled" : run.status)),
    h("dt", { text: "place" }), h("dd", { class: "place", text: run.place }),
    h("dt", { text: "version" }), h("dd", { class: "version", text: String(run.version ?? 1) }),
    h("dt", { text: "step" }), h("dd", { text: String(run.step) }),
    h("dt", { text: "started" }), h("dd", {}, time(run.created_at)),
    h("dt", { text: "updated" }), h("dd", {}, time(run.updated_at)));
  if (run.holder) {
    const lease = run.holder.lease_until ? time(run.holder.lease_until) : "";
    facts.append(h("dt", { text: run.stalled ? "stalled" : "held by" }), h("dd", { class: "holder" },
      h("span", { text: run.holder.owner + " since " }), time(run.holder.since),
      h("span", { text: run.stalled ? ", whose lease ran out " : ", lease until " }), lease));
  }
  for (const t of run.takeovers || []) {
    facts.append(h("dt", { text: "taken over" }), h("dd", { class: "takeover" },
      h("span", { text: (t.by ? "by " + t.by + " " : "") + "from " + t.from + ", whose lease ran out, " }), time(t.at)));
  }
  if (run.parent) facts.append(h("dt", { text: "parent" }), h("dd", {}, h("a", { href: "#/run/" + run.parent, text: short(run.parent) })));
  // A fork: where it came from, what its edits changed, and the comparison.
  if (run.fork) {
    facts.append(h("dt", { text: "forked from" }), h("dd", { class: "fork" },
      h("a", { href: "#/run/" + encodeURIComponent(run.fork.run_id), title: run.fork.run_id, text: short(run.fork.run_id) }),
      h("span", { text: " at step " + run.fork.step + (run.fork.changes.length ? " with: " + run.fork.changes.join(", ") : "") + " " }),
      h("a", { class: "compare-link", href: "#/compare/" + encodeURIComponent(run.fork.run_id) + "/" + encodeURIComponent(run.run_id), text: "compare with the original" })));
  }
  if (run.wake_at) facts.append(h("dt", { text: "timer" }), h("dd", {}, time(run.wake_at)));
  // What its starter labelled it with: a tenant, a protocol's conversation (an A2A context).
  const labels = Object.entries(run.labels || {});
  if (labels.length) {
    facts.append(h("dt", { text: "labels" }), h("dd", { class: "labels" },
      ...labels.map(([name, value]) => h("code", { class: "label", text: name + "=" + value }))));
  }
  // An agent run handed to another agent: the one that has the conversation.
  if (run.state && typeof run.state.agent === "string") facts.append(h("dt", { text: "agent" }), h("dd", { class: "agent", text: run.state.agent }));

  const header = h("div", { class: "run-header" },
    h("h1", {}, h("span", { text: run.workflow + " " }), h("code", { class: "run-id", title: run.run_id, text: run.run_id })),
    actions);
  const blocks = [header, facts];
  if (run.error) blocks.push(h("div", { class: "error-box", role: "alert" }, h("strong", { text: run.status === "failed" ? "Failed: " : run.status === "stopped" ? "Stopped: " : "Ended: " }), h("span", { class: "error-text", text: run.error })));
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
  refocus();
}

export function childRuns(view) {
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
export function approvalCard(view, call) {
  const key = view.run.step + "/call/" + call.call_id;
  let card = view.forms.get(key);
  if (card) return card;
  if (call.input) return questionCard(view, call, key);
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

// A call that ran and asks a person for input (an MCP server's question): the
// question, a form made from the answer's schema, and Decline. The call runs
// again with the answer.
function questionCard(view, call, key) {
  const signal = view.run.pending_signal || "decide_tools";
  const send = async (decision, what) => {
    const after = await api(view.path + "/signals/" + signal, { decisions: [decision] });
    if (!view.alive()) return;
    say(call.name + what + ": the run is " + after.status + (after.queued_signal ? " (queued for its driver)" : ""), "info");
    await view.refresh();
  };
  const form = window.LoopstackForms.build(call.input.schema, { name: call.name, submit: "Answer" });
  form.onSubmit((input) => send({ call_id: call.call_id, approved: true, input }, " answered"));
  const decline = h("button", { type: "button", "data-decide": "decline", class: "danger", text: "Decline" });
  decline.addEventListener("click", async () => {
    decline.disabled = true;
    try {
      await send({ call_id: call.call_id, approved: false }, " declined");
    } catch (e) {
      fail(e);
      decline.disabled = false;
    }
  });
  const card = h("div", { class: "signal-card approval question", "data-call-id": call.call_id },
    h("h3", {}, h("span", { text: "Question from " }), h("code", { class: "tool-name", text: call.name })),
    h("p", { class: "question-text", text: call.input.message }),
    form.element,
    h("div", { class: "actions" }, decline));
  view.forms.set(key, card);
  return card;
}

export function waitingPanel(view) {
  const { run, wf } = view;
  const panel = section("Waiting for");
  const pending = run.pending_calls || [];
  if (pending.length) {
    const said = run.outcome_unknown
      ? "The process died during " + (pending.length === 1 ? "an at-most-once tool call" : pending.length + " at-most-once tool calls") + ", which did not run again: say what happened."
      : pending.some((c) => c.input) ? "A tool call asks you:"
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
