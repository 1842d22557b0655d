// Builds an HTML form from a JSON Schema (the subset schemars writes for Rust
// types: objects, strings, numbers, integers, booleans, enums, optional values,
// arrays), and reads a JSON value back from it. A schema it does not know gets a
// JSON text field, so every payload can still be sent. Part of loopstack's Studio.
//
//   const form = LoopstackForms.build(schema, { name: "decide" });
//   container.appendChild(form.element);
//   form.read()  // -> { value } or { error }
//   form.onSubmit(async (value) => { ... })  // errors it throws are shown
"use strict";

(function (global) {
  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children) if (child) node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    return node;
  }

  // The schema without its `null` alternative, and whether null is allowed.
  function unwrapNullable(schema) {
    if (!schema || typeof schema !== "object") return { schema: {}, nullable: false };
    if (Array.isArray(schema.type) && schema.type.includes("null")) {
      const rest = schema.type.filter((t) => t !== "null");
      return { schema: { ...schema, type: rest.length === 1 ? rest[0] : rest }, nullable: true };
    }
    for (const key of ["anyOf", "oneOf"]) {
      const alts = schema[key];
      if (Array.isArray(alts) && alts.length === 2 && alts.some((a) => a && a.type === "null")) {
        const other = alts.find((a) => !(a && a.type === "null"));
        return { schema: { ...schema, [key]: undefined, ...other }, nullable: true };
      }
    }
    return { schema, nullable: false };
  }

  // The values of an enum: `enum`, or a oneOf of `const`s.
  function choices(schema) {
    // `null` among the values is the "no value" choice, offered apart.
    if (Array.isArray(schema.enum)) return schema.enum.filter((v) => v !== null).map((v) => ({ value: v, title: String(v) }));
    const alts = schema.oneOf || schema.anyOf;
    if (Array.isArray(alts) && alts.length && alts.every((a) => a && "const" in a)) {
      return alts.map((a) => ({ value: a.const, title: a.description ? a.const + " \u2014 " + a.description : String(a.const) }));
    }
    return null;
  }

  let ids = 0;

  // A field for `schema`: { element, read() -> {value} | {error} | {omit: true} }.
  function field(schema, path, required) {
    const { schema: s, nullable } = unwrapNullable(schema);
    const optional = nullable || !required;
    const id = "f" + ++ids;
    const options = choices(s);
    if (options) {
      const select = h("select", { id, name: path, "data-path": path });
      if (optional) select.appendChild(h("option", { value: "", text: "\u2014" }));
      options.forEach((o, i) => select.appendChild(h("option", { value: String(i), text: o.title })));
      if (s.default !== undefined) {
        const i = options.findIndex((o) => JSON.stringify(o.value) === JSON.stringify(s.default));
        if (i >= 0) select.value = String(i);
      }
      return {
        id, element: select,
        read: () => (select.value === "" ? (optional ? { omit: true, nullable } : { error: path + " is required" }) : { value: options[Number(select.value)].value }),
      };
    }
    const type = Array.isArray(s.type) ? null : s.type;
    if (type === "boolean" && optional) {
      // Three answers: yes, no, or none.
      const select = h("select", { id, name: path, "data-path": path },
        h("option", { value: "", text: "\u2014" }), h("option", { value: "true", text: "true" }), h("option", { value: "false", text: "false" }));
      if (typeof s.default === "boolean") select.value = String(s.default);
      return { id, element: select, read: () => (select.value === "" ? { omit: true, nullable } : { value: select.value === "true" }) };
    }
    if (type === "boolean") {
      const box = h("input", { id, type: "checkbox", name: path, "data-path": path, checked: s.default === true });
      return { id, element: box, inline: true, read: () => ({ value: box.checked }) };
    }
    if (type === "string" || type === "number" || type === "integer") {
      const numeric = type !== "string";
      // A value of its own (an agent's question, say) gets room; a field, one line.
      const long = !numeric && path === "";
      const input = long
        ? h("textarea", { id, name: path, "data-path": path, rows: 2 })
        : h("input", {
            id, name: path, "data-path": path,
            type: numeric ? "number" : "text",
            // RFC 3339 (what Rust's date-time types read) has an offset, which the
            // browser's date-time picker cannot give: typed as text.
            placeholder: s.format === "date-time" ? "2026-12-01T12:00:00Z" : s.format === "date" ? "2026-12-01" : null,
            step: type === "integer" ? "1" : numeric ? "any" : null,
            min: s.minimum, max: s.maximum,
          });
      if (s.default !== undefined && s.default !== null) input.value = String(s.default);
      // An empty string is a value: only numbers must be filled in.
      input.required = numeric && !optional;
      return {
        id, element: input,
        read: () => {
          const raw = input.value;
          if (raw === "") return optional ? { omit: true, nullable } : type === "string" ? { value: "" } : { error: path + " is required" };
          if (!numeric) return { value: raw };
          const n = Number(raw);
          if (!Number.isFinite(n)) return { error: path + " must be a number" };
          if (type === "integer" && !Number.isInteger(n)) return { error: path + " must be a whole number" };
          return { value: n };
        },
      };
    }
    // A struct: its fields. A map (no fields, any keys) is written as JSON.
    if (type === "object" && s.properties && Object.keys(s.properties).length) {
      const inner = objectField(s, path);
      return optional ? optionalField(inner, path, nullable) : inner;
    }
    if (type === "array" && s.items && !Array.isArray(s.items)) return arrayField(s, path, optional);
    if (type === "null") return { id, element: null, read: () => ({ value: null }) };
    return jsonField(s, path, optional, id);
  }

  function jsonField(s, path, optional, id) {
    const area = h("textarea", { id, class: "json", name: path, "data-path": path, rows: 3, placeholder: "JSON" });
    if (s.default !== undefined) area.value = JSON.stringify(s.default, null, 2);
    return {
      id, element: area,
      read: () => {
        if (area.value.trim() === "") return optional ? { omit: true } : { error: path + " is required (JSON)" };
        try {
          return { value: JSON.parse(area.value) };
        } catch (e) {
          return { error: path + ": " + e.message };
        }
      },
    };
  }

  // An optional struct: included with a checkbox, left out (or null) otherwise.
  function optionalField(inner, path, nullable) {
    const id = "f" + ++ids;
    const box = h("input", { id, type: "checkbox", "data-include": path });
    const wrap = h("div", { class: "optional" }, h("label", { class: "include", for: id }, box, " include"), inner.element);
    inner.element.hidden = true;
    inner.element.disabled = true;
    box.addEventListener("change", () => {
      inner.element.hidden = !box.checked;
      inner.element.disabled = !box.checked;
    });
    return { id, element: wrap, read: () => (box.checked ? inner.read() : { omit: true, nullable }) };
  }

  function objectField(s, path) {
    const required = new Set(s.required || []);
    const box = h("fieldset", { class: "object", "data-path": path || "." });
    const fields = [];
    // Required fields first, each group in the schema's order.
    const names = Object.keys(s.properties);
    const ordered = [...names.filter((n) => required.has(n)), ...names.filter((n) => !required.has(n))];
    for (const name of ordered) {
      const sub = s.properties[name];
      const sub_path = path ? path + "." + name : name;
      const f = field(sub, sub_path, required.has(name));
      fields.push([name, f]);
      const row = h("div", { class: "field" + (f.inline ? " inline" : "") });
      const title = h("label", { for: f.id, text: name + (required.has(name) && !unwrapNullable(sub).nullable ? " *" : "") });
      const help = sub && (sub.description || unwrapNullable(sub).schema.description);
      if (f.inline) {
        if (f.element) row.appendChild(f.element);
        row.appendChild(title);
      } else {
        row.appendChild(title);
        if (f.element) row.appendChild(f.element);
      }
      if (help) row.appendChild(h("div", { class: "help", text: help }));
      box.appendChild(row);
    }
    return {
      element: box,
      read: () => {
        const out = {};
        for (const [name, f] of fields) {
          const r = f.read();
          if (r.error) return r;
          if (r.omit) {
            if (r.nullable) out[name] = null;
            continue;
          }
          out[name] = r.value;
        }
        return { value: out };
      },
    };
  }

  function arrayField(s, path, optional) {
    const box = h("div", { class: "array", "data-path": path });
    const list = h("div", { class: "items" });
    const items = [];
    const add = h("button", { type: "button", class: "small", text: "+ add" });
    const addItem = () => {
      const f = field(s.items, path + "[" + items.length + "]", true);
      const row = h("div", { class: "item" });
      if (f.element) row.appendChild(f.element);
      const remove = h("button", { type: "button", class: "small", text: "\u2212", "aria-label": "remove this item" });
      const entry = { f, row };
      remove.addEventListener("click", () => {
        items.splice(items.indexOf(entry), 1);
        row.remove();
      });
      row.appendChild(remove);
      items.push(entry);
      list.appendChild(row);
    };
    add.addEventListener("click", addItem);
    box.append(list, add);
    return {
      element: box,
      read: () => {
        const out = [];
        for (const { f } of items) {
          const r = f.read();
          if (r.error) return r;
          if (!r.omit) out.push(r.value);
        }
        if (!out.length && optional) return { omit: true };
        return { value: out };
      },
    };
  }

  // The whole form: the schema's fields, with a switch to edit the value as JSON.
  function build(schema, opts) {
    const o = opts || {};
    const form = h("form", { class: "schema-form", "data-form": o.name || "" });
    const root = field(schema || {}, "", true);
    const fields = h("div", { class: "fields" });
    if (root.element) fields.appendChild(root.element);
    else fields.appendChild(h("p", { class: "muted", text: "This signal carries no payload." }));
    const raw = h("textarea", { class: "json raw", rows: 6, hidden: true, "aria-label": "the value as JSON" });
    const toggle = h("button", { type: "button", class: "link", text: "edit as JSON" });
    let asJson = false;
    toggle.addEventListener("click", () => {
      asJson = !asJson;
      if (asJson) {
        // What the fields hold; a form that does not read yet keeps the text there was.
        const r = root.read();
        if (!r.error) raw.value = JSON.stringify(r.value === undefined ? null : r.value, null, 2);
      }
      // The hidden fields' own checks (a required number) must not block the JSON.
      form.noValidate = asJson;
      fields.hidden = asJson;
      raw.hidden = !asJson;
      toggle.textContent = asJson ? "edit as a form" : "edit as JSON";
    });
    const error = h("div", { class: "form-error", role: "alert" });
    const submit = h("button", { type: "submit", class: "primary", text: o.submit || "Send" });
    form.append(fields, raw, h("div", { class: "form-actions" }, submit, root.element ? toggle : null), error);
    const read = () => {
      if (asJson) {
        try {
          return { value: JSON.parse(raw.value) };
        } catch (e) {
          return { error: "not JSON: " + e.message };
        }
      }
      const r = root.read();
      return r.omit ? { value: null } : r;
    };
    const showError = (text) => { error.textContent = text || ""; };
    // Sends what the form holds with `send`: a value that does not read, or an
    // error `send` throws, is shown under the form; the button waits meanwhile.
    const onSubmit = (send) => form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const r = read();
      if (r.error) {
        showError(r.error);
        return;
      }
      showError("");
      submit.disabled = true;
      try {
        await send(r.value);
      } catch (err) {
        showError(err.message || String(err));
      } finally {
        submit.disabled = false;
      }
    });
    return { element: form, read, showError, onSubmit };
  }

  global.LoopstackForms = { build, h };
})(window);
