// Studio's comparison of two runs side by side, and the evals: their list, one
// eval's report, and two evals compared.

import { api, app, badge, h, main, short, time } from "./common.js";

// ---- two runs side by side ------------------------------------------------

// What the comparison shows of a run: its outcome, tokens and cost, tool calls
// and conversation, from GET /api/runs/{id}.
export function runFacts(run) {
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

export async function showCompare(a, b) {
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

export const EVAL_WORKFLOW = "loopstack_eval";

// Evals are the runs of the one-step workflow loopstack_eval, each under its
// eval's id with the report as its state; their cases are runs of their own.
export async function showEvals() {
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

export async function showEval(id) {
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
export function caseMeans(report) {
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

export async function showEvalCompare(a, b) {
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
