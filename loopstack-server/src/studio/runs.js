// Studio's lists and forms outside one run: the runs list, the schedules, and
// starting a run.

import { api, app, badge, fail, h, LIST_REFRESH_MS, main, section, short, STATUSES, time, workflowName, workflows } from "./common.js";

// ---- the runs list ------------------------------------------------------

export async function showRuns(params) {
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

/** A run's status; a running run's says who holds it, and shows as stalled when that lease ran out. */
function holderBadge(run) {
  const b = badge(run.stalled ? "stalled" : run.status);
  if (run.holder) b.title = (run.stalled ? "the lease of " + run.holder.owner + " ran out" : "held by " + run.holder.owner);
  return b;
}

export function runRow(run) {
  const link = h("a", { href: "#/run/" + encodeURIComponent(run.run_id), title: run.run_id, text: short(run.run_id) });
  const row = h("tr", { "data-run": run.run_id, "data-status": run.status },
    h("td", {}, link), h("td", { text: workflowName(run) }), h("td", {}, holderBadge(run)), h("td", { text: run.place }),
    h("td", { text: String(run.step) }), h("td", {}, time(run.updated_at)),
    h("td", {}, run.parent ? h("a", { href: "#/run/" + run.parent, text: short(run.parent) }) : ""));
  row.addEventListener("click", (e) => {
    if (e.target.tagName !== "A") location.hash = "#/run/" + encodeURIComponent(run.run_id);
  });
  return row;
}

// ---- the schedules --------------------------------------------------------

export async function showSchedules() {
  const gen = app.generation;
  const body = h("tbody");
  const table = h("table", { class: "runs schedules" },
    h("thead", {}, h("tr", {}, ...["schedule", "workflow", "when", "missed", "overlap", "next due", "last run", ""].map((c) => h("th", { text: c })))),
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

export function scheduleRow(s, reload) {
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
  // A due time `queue one` keeps until the last run ends.
  const pending = s.pending_due ? h("div", { class: "muted" }, "pending ", time(s.pending_due)) : "";
  return h("tr", { "data-schedule": s.id, "data-paused": String(s.paused) },
    h("td", { text: s.id }), h("td", { text: s.workflow }), h("td", { text: s.when }), h("td", { text: s.missed.replaceAll("_", " ") }),
    h("td", { class: "overlap", text: s.overlap.replaceAll("_", " ") }),
    h("td", { class: "next-due" }, next, pending), h("td", { class: "last-run" }, last, error), h("td", { class: "actions" }, toggle, " ", remove));
}

// ---- starting a run -----------------------------------------------------

export async function showStart(name) {
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
