// Draws a workflow's state diagram as SVG from its transition table: places in
// layers from `start` down to `end`, transitions as arrows between them. Part of
// loopstack's Studio; no other library is needed.
//
//   LoopstackDiagram.render(workflow, { current, visited, taken, waiting })
//
// `workflow` is an entry of GET /api/workflows (places, transitions); `current` the
// place the run is at; `visited` the places it passed; `taken` the transitions it
// took, as "name@from" strings; `waiting` whether it waits at `current`.
"use strict";

(function (global) {
  const SVG = "http://www.w3.org/2000/svg";
  const RANK_GAP = 92;
  const NODE_GAP = 44;
  const NODE_HEIGHT = 34;
  const CHAR_WIDTH = 7.4;
  const PAD = 28;
  const LABEL_CHAR_WIDTH = 6.4;

  function el(name, attrs, parent) {
    const node = document.createElementNS(SVG, name);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value !== undefined && value !== null) node.setAttribute(key, String(value));
    }
    if (parent) parent.appendChild(node);
    return node;
  }

  // One edge per (transition, from place).
  function edgesOf(workflow) {
    const edges = [];
    for (const t of workflow.transitions) {
      for (const from of t.from) edges.push({ t, from, to: t.to, key: t.name + "@" + from });
    }
    return edges;
  }

  // Ranks by longest path from `start` over the edges that are not back edges of
  // a depth-first walk; places the walk does not reach go below, `end` last.
  function rank(places, edges) {
    const out = new Map(places.map((p) => [p, []]));
    for (const e of edges) if (out.has(e.from) && out.has(e.to)) out.get(e.from).push(e);
    const state = new Map();
    const back = new Set();
    const order = [];
    const visit = (p) => {
      state.set(p, 1);
      order.push(p);
      for (const e of out.get(p)) {
        if (e.to === p) { back.add(e); continue; }
        const s = state.get(e.to);
        if (s === 1) back.add(e);
        else if (!s) visit(e.to);
      }
      state.set(p, 2);
    };
    visit(places[0]);
    const reached = new Set(state.keys());
    for (const p of places) if (!state.has(p)) visit(p);
    const ranks = new Map(places.map((p) => [p, 0]));
    // Longest path on the acyclic rest: relax in the walk's topological order.
    const forward = edges.filter((e) => !back.has(e) && out.has(e.to));
    for (let pass = 0; pass < places.length; pass++) {
      let changed = false;
      for (const e of forward) {
        const r = ranks.get(e.from) + 1;
        if (r > ranks.get(e.to)) { ranks.set(e.to, r); changed = true; }
      }
      if (!changed) break;
    }
    const end = places[places.length - 1];
    // Places `start` does not lead to go below the others, `end` below all.
    let deepest = 0;
    for (const p of reached) if (p !== end) deepest = Math.max(deepest, ranks.get(p));
    for (const p of places) if (!reached.has(p) && p !== end) ranks.set(p, ranks.get(p) + deepest + 1);
    let max = 0;
    for (const [p, r] of ranks) if (p !== end) max = Math.max(max, r);
    if (places.length > 1) ranks.set(end, Math.max(max + 1, ranks.get(end)));
    return { ranks, back, order };
  }

  // `labelled(edge)` says which arrows get a label, to leave room for those.
  function layout(workflow, labelled) {
    const shows = labelled || (() => true);
    const places = workflow.places;
    const edges = edgesOf(workflow);
    const { ranks, back, order } = rank(places, edges);
    const layers = [];
    for (const p of order) {
      const r = ranks.get(p);
      (layers[r] = layers[r] || []).push(p);
    }
    for (let i = 0; i < layers.length; i++) layers[i] = layers[i] || [];
    // A few sweeps of the barycenter heuristic to untangle the arrows.
    const pos = new Map();
    const index = () => layers.forEach((l) => l.forEach((p, i) => pos.set(p, i)));
    index();
    for (let sweep = 0; sweep < 4; sweep++) {
      const down = sweep % 2 === 0;
      for (let k = 1; k < layers.length; k++) {
        const i = down ? k : layers.length - 1 - k;
        const near = down ? i - 1 : i + 1;
        if (near < 0 || near >= layers.length) continue;
        const weight = new Map();
        for (const p of layers[i]) {
          const ns = edges
            .filter((e) => (e.to === p && ranks.get(e.from) === near) || (e.from === p && ranks.get(e.to) === near))
            .map((e) => pos.get(e.to === p ? e.from : e.to));
          weight.set(p, ns.length ? ns.reduce((a, b) => a + b, 0) / ns.length : pos.get(p));
        }
        layers[i].sort((a, b) => weight.get(a) - weight.get(b));
        index();
      }
    }
    const width = (p) => Math.max(64, p.length * CHAR_WIDTH + 28);
    // Room on the left for the arrows that skip layers, on the right for those
    // going up or back to their place, with their labels.
    // How far each arrow reaches beyond its places, as `render` draws it (parallel
    // arrows fan out further), with its label.
    let left = 0;
    let right = 0;
    const seen = new Map();
    for (const e of edges) {
      const a = ranks.get(e.from);
      const b = ranks.get(e.to);
      const pair = [e.from, e.to].sort().join("\u0000");
      const nth = seen.get(pair) || 0;
      seen.set(pair, nth + 1);
      const w = shows(e) ? label(e.t).length * LABEL_CHAR_WIDTH : 0;
      if (e.from === e.to) right = Math.max(right, (22 + nth * 12) * 1.3 + 8 + w);
      else if (back.has(e) || b <= a) right = Math.max(right, 50 + Math.abs(a - b) * 12 + nth * 22 + w);
      else if (b - a > 1) left = Math.max(left, 40 + nth * 16 + w);
    }
    const LEFT = left;
    const RIGHT = right + 12;
    const rows = layers.map((l) => l.reduce((w, p) => w + width(p), 0) + NODE_GAP * Math.max(0, l.length - 1));
    const widest = Math.max(...rows, 120);
    const nodes = new Map();
    layers.forEach((l, r) => {
      let x = PAD + LEFT + (widest - rows[r]) / 2;
      for (const p of l) {
        const w = width(p);
        nodes.set(p, { place: p, x, y: PAD + r * RANK_GAP, w, h: NODE_HEIGHT, rank: r });
        x += w + NODE_GAP;
      }
    });
    return { nodes, edges, back, width: widest + PAD * 2 + LEFT + RIGHT, height: PAD * 2 + (layers.length - 1) * RANK_GAP + NODE_HEIGHT };
  }

  function label(t) {
    let text = t.name;
    if (t.guard) text += " [" + t.guard + "]";
    if (t.after_ms != null) text += " (after " + duration(t.after_ms) + ")";
    if (t.after_fn) text += " (after " + t.after_fn + ")";
    return text;
  }

  function duration(ms) {
    if (ms % 3600000 === 0) return ms / 3600000 + "h";
    if (ms % 60000 === 0) return ms / 60000 + "m";
    if (ms % 1000 === 0) return ms / 1000 + "s";
    return ms + "ms";
  }

  function render(workflow, highlight) {
    const h = highlight || {};
    const visited = new Set(h.visited || []);
    const taken = new Set(h.taken || []);
    // Labels of a crowded diagram only on the arrows that matter to this run.
    const crowded = edgesOf(workflow).length > 12;
    const isTakenEdge = (e) => taken.has(e.key);
    const isOpenEdge = (e) => Boolean(h.waiting && e.from === h.current && e.t.wait);
    const labelled = (e) => !crowded || isTakenEdge(e) || isOpenEdge(e);
    const { nodes, edges, back, width, height } = layout(workflow, labelled);
    const svg = el("svg", {
      class: "diagram",
      viewBox: "0 0 " + width + " " + height,
      width,
      height,
      role: "img",
      "aria-label": "state diagram of " + workflow.name,
    });
    const defs = el("defs", {}, svg);
    for (const kind of ["plain", "taken", "open"]) {
      const marker = el("marker", {
        id: "arrow-" + kind, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse",
      }, defs);
      el("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrowhead " + kind }, marker);
    }
    const edgeLayer = el("g", { class: "edges" }, svg);
    const nodeLayer = el("g", { class: "nodes" }, svg);
    // Arrows between the same two places fan out.
    const seen = new Map();
    for (const e of edges) {
      const a = nodes.get(e.from);
      const b = nodes.get(e.to);
      if (!a || !b) continue;
      const pair = [e.from, e.to].sort().join("\u0000");
      const nth = seen.get(pair) || 0;
      seen.set(pair, nth + 1);
      const spread = (nth % 2 === 0 ? 1 : -1) * Math.ceil(nth / 2) * 26;
      let d;
      let lx;
      let ly;
      let anchor = "start";
      if (e.from === e.to) {
        const x = a.x + a.w;
        const y = a.y + a.h / 2;
        const r = 22 + nth * 12;
        d = `M ${x} ${y - 8} C ${x + r * 1.6} ${y - r}, ${x + r * 1.6} ${y + r}, ${x} ${y + 8}`;
        lx = x + r * 1.3 + 4;
        ly = y + 4;
      } else if (back.has(e) || b.rank <= a.rank) {
        // Upwards (or sideways): an arc out to the right of both places.
        const x1 = a.x + a.w;
        const y1 = a.y + a.h / 2;
        const x2 = b.x + b.w;
        const y2 = b.y + b.h / 2;
        const bulge = Math.max(x1, x2) + 50 + Math.abs(a.rank - b.rank) * 12 + nth * 22;
        d = `M ${x1} ${y1} C ${bulge} ${y1}, ${bulge} ${y2}, ${x2} ${y2}`;
        lx = bulge - 10;
        ly = (y1 + y2) / 2;
      } else if (b.rank - a.rank > 1) {
        // Across layers: around the places between, on the left.
        let left = Math.min(a.x, b.x);
        for (const n of nodes.values()) if (n.rank > a.rank && n.rank < b.rank) left = Math.min(left, n.x);
        const x1 = a.x + a.w / 2 - 10;
        const y1 = a.y + a.h;
        const x2 = b.x + b.w / 2 - 10;
        const y2 = b.y;
        const side = left - 36 - nth * 16;
        d = `M ${x1} ${y1} C ${side} ${y1 + 30}, ${side} ${y2 - 30}, ${x2} ${y2}`;
        lx = side - 4;
        ly = (y1 + y2) / 2;
        anchor = "end";
      } else {
        const x1 = a.x + a.w / 2 + spread / 2;
        const y1 = a.y + a.h;
        const x2 = b.x + b.w / 2 + spread / 2;
        const y2 = b.y;
        const my = (y1 + y2) / 2;
        d = `M ${x1} ${y1} C ${x1 + spread} ${my}, ${x2 + spread} ${my}, ${x2} ${y2}`;
        lx = (x1 + x2) / 2 + spread + 6;
        // Parallel arrows' labels one under the other.
        ly = my + 4 + (nth ? (nth % 2 ? 1 : -1) * Math.ceil(nth / 2) * 13 : 0);
      }
      const isTaken = isTakenEdge(e);
      const isOpen = isOpenEdge(e);
      const cls = ["edge", isTaken ? "taken" : "", isOpen ? "open" : "", e.t.wait ? "wait" : "", e.t.after_ms != null || e.t.after_fn ? "timer" : ""]
        .filter(Boolean).join(" ");
      const g = el("g", { class: cls, "data-transition": e.t.name, "data-from": e.from }, edgeLayer);
      el("path", { d, "marker-end": "url(#arrow-" + (isTaken ? "taken" : isOpen ? "open" : "plain") + ")" }, g);
      if (labelled(e)) {
        const text = el("text", { x: lx, y: ly, class: "edge-label", "text-anchor": anchor }, g);
        text.textContent = label(e.t);
      }
      el("title", {}, g).textContent = e.t.name + ": " + e.from + " \u2192 " + e.to;
    }
    for (const n of nodes.values()) {
      const terminal = n.place === workflow.places[0] || n.place === workflow.places[workflow.places.length - 1];
      const cls = ["node", terminal ? "terminal" : "", visited.has(n.place) ? "visited" : "", n.place === h.current ? "current" : ""]
        .filter(Boolean).join(" ");
      const g = el("g", { class: cls, "data-place": n.place }, nodeLayer);
      el("rect", { x: n.x, y: n.y, width: n.w, height: n.h, rx: terminal ? n.h / 2 : 8 }, g);
      const text = el("text", { x: n.x + n.w / 2, y: n.y + n.h / 2 + 4.5, "text-anchor": "middle" }, g);
      text.textContent = n.place;
    }
    return svg;
  }

  global.LoopstackDiagram = { render, layout };
})(window);
