// Studio: loopstack's page for runs. It lists runs, shows one run (its place in the
// state diagram, its conversation, usage, documents, checkpoints and signals),
// answers what a run waits for with forms made from the signals' JSON Schemas,
// resumes, retries and cancels runs, starts new ones, follows a run live
// through its event stream, and lists the schedules (next due time, last run)
// with pause, resume and delete. Everything comes from the JSON API under /api.

import { app, flash, h, leave, main, say } from "./common.js";
import { showRuns, showSchedules, showStart } from "./runs.js";
import { showRun } from "./run.js";
import { showCompare, showEval, showEvalCompare, showEvals } from "./compare.js";

export async function route() {
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
