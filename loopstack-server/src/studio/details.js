// The panels of a run's page: usage, the conversation (with images), documents,
// the checkpoints with Fork from here, and signals.

import { api, app, badge, fail, h, json, section, time } from "./common.js";

// Tokens and cost: per model from each message's metadata, cost from the state.
export function usage(run) {
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

export function conversation(view) {
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

export function bubble(doc, tools, images) {
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
  if (meta.usage) {
    const thought = meta.usage.reasoning_output_tokens ? " (" + meta.usage.reasoning_output_tokens + " reasoning)" : "";
    details.push(meta.usage.input_tokens + " in / " + meta.usage.output_tokens + " out" + thought);
  }
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
    } else if (block.type === "reasoning") {
      // Folded: what the model thought before it answered (kept for its provider).
      b.appendChild(h("details", { class: "reasoning", "data-provider": block.provider },
        h("summary", { text: "reasoning" + (block.text ? "" : " (not shown by " + block.provider + ")") }),
        h("div", { class: "text", text: block.text || "" })));
    } else {
      b.appendChild(json(block));
    }
  }
  return b;
}

export const IMAGE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"];

// An image block: its data (from the run's image document it refers to) as a data
// URL; an image at a URL is a link, since the page fetches nothing from elsewhere.
export function picture(block, tools, images) {
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

export function documents(view) {
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

export function history(view) {
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
export function forkForm(view, step) {
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

export function signals(run) {
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
