// The trace explorer: swim lanes (one per request), steps across; a click shows a step.
// Everything it shows is in the page's #trace-data; nothing is loaded from the network.
(function () {
  "use strict";
  const view = JSON.parse(document.getElementById("trace-data").textContent);
  const $ = (tag, attrs, ...kids) => {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") el.className = v;
      else if (k.startsWith("data-")) el.setAttribute(k, v);
      else if (k === "onclick") el.addEventListener("click", v);
      else el.setAttribute(k, v);
    }
    for (const kid of kids.flat()) el.append(kid instanceof Node ? kid : String(kid));
    return el;
  };
  const steps = view.steps;
  const violated = view.violated;
  const badStep = violated ? violated.step : -1;
  const loop = view.loop_start;
  let current = -1;
  const legend = {};  // short name -> vLLM's name, from the page's #legend table
  document.querySelectorAll("#legend tr[data-short]").forEach(r => { legend[r.dataset.short] = r.dataset.vllm; });
  const legendHead = (name) => $("th", legend[name] ? {title: legend[name]} : {}, name);

  function header() {
    const h = document.getElementById("header");
    h.append($("h1", {}, view.title));
    h.append($("p", {class: "config"}, $("span", {class: "kind kind-" + view.kind}, view.kind),
      " ", view.config.name, " — ", view.config.description || ""));
    if (violated) {
      const cites = (violated.cites || []).map(c => $("li", {}, $("code", {}, c.target),
        c.prs.length ? " (PR " + c.prs.map(p => "#" + p).join(", ") + ")" : ""));
      const witness = violated.kind === "witness";
      h.append($("div", {id: "violation", class: witness ? "violation witness" : "violation", "data-property": violated.name},
        $("strong", {}, (witness ? "reached: " : "violated: ") + violated.name), " (" + violated.kind + ") at ",
        $("a", {href: "#", onclick: (e) => { e.preventDefault(); select(badStep); }},
          "step #" + (steps[badStep] ? steps[badStep].index : badStep)),
        $("p", {}, violated.message || ""), $("p", {class: "why"}, violated.why || ""),
        violated.source ? $("p", {class: "src"}, "spec: ", $("code", {}, violated.source)) : "",
        cites.length ? $("ul", {class: "cites"}, cites) : ""));
    }
    if (loop !== null && loop !== undefined)
      h.append($("p", {id: "lasso", class: "lasso"}, "lasso: steps " + loop + "–" + (steps.length - 1) +
        " form a cycle; the last step returns to the state of step " + loop));
  }

  function cellText(cell) {
    if (!cell || cell.status === undefined || cell.status === "-") return ["·"];
    const extra = ["H", "F", "X"].filter(c => cell[c]).map(c => " " + c + cell[c]).join("");
    return [$("strong", {}, cell.status), $("br"), $("span", {class: "counters"}, "N" + cell.N + " C" + cell.C + extra)];
  }

  function lanes() {
    const grid = document.getElementById("lanes");
    const stepClass = (k) => "step-" + k + (k === badStep ? " violated" : "") +
      (loop !== null && loop !== undefined && k >= loop ? " loop" : "");
    const head = $("div", {class: "lane head"}, $("div", {class: "label"}, "step"));
    steps.forEach((s, k) => head.append($("button", {class: "cell step-head " + stepClass(k), "data-step": k,
      title: s.action, onclick: () => select(k)}, $("span", {class: "idx"}, "#" + s.index),
      (loop !== null && loop !== undefined && k === steps.length - 1) ? " ↺ back to #" + steps[loop].index : "",
      $("br"), s.action)));
    grid.append(head);
    for (const r of view.requests) {
      const lane = $("div", {class: "lane request", "data-request": r.name},
        $("div", {class: "label"}, $("strong", {}, r.name), $("br"), $("small", {}, r.params)));
      steps.forEach((s, k) => {
        const cell = (s.lanes || {})[r.name];
        const status = cell && cell.status ? cell.status : "-";
        const differs = cell && cell.differs ? " differs" : "";
        lane.append($("div", {class: "cell " + stepClass(k) + differs + " st-" + status.replace(/\W/g, ""), "data-step": k,
          title: r.name + " after #" + s.index + ": " + JSON.stringify(cell || {}), onclick: () => select(k)},
          cellText(cell)));
      });
      grid.append(lane);
    }
    for (const name of ["batch queue", "free blocks"]) {
      const lane = $("div", {class: "lane engine", "data-engine": name}, $("div", {class: "label"}, name));
      steps.forEach((s, k) => lane.append($("div", {class: "cell " + stepClass(k), "data-step": k,
        onclick: () => select(k)}, (s.engine || {})[name] || "")));
      grid.append(lane);
    }
  }

  function table(rows, cols, id, mark) {
    const t = $("table", id ? {id: id} : {});
    t.append($("tr", {}, cols.map(c => $("th", {}, c))));
    rows.forEach(row => t.append($("tr", mark ? mark(row) : {}, cols.map(c => {
      const v = row[c] === undefined ? "" : row[c];
      return $("td", {}, typeof v === "object" ? JSON.stringify(v) : String(v));
    }))));
    return t;
  }

  function counterTable(k) {
    const cols = ["status"].concat(view.counters, ["blocks"]);
    const t = $("table", {id: "counters"});
    t.append($("tr", {}, $("th", {}, "request"), cols.map(legendHead)));
    const prev = k > 0 ? steps[k - 1].lanes || {} : null;
    for (const r of view.requests) {
      const cell = (steps[k].lanes || {})[r.name] || {};
      const old = prev ? prev[r.name] || {} : null;
      t.append($("tr", {"data-row": r.name}, $("th", {}, r.name), cols.map(c => {
        const v = cell[c] === undefined ? "" : String(cell[c]);
        const changed = old !== null && String(old[c] === undefined ? "" : old[c]) !== v;
        return $("td", changed ? {class: "changed"} : {}, v);
      })));
    }
    return t;
  }

  function specPanel(spec) {
    if (!spec || !spec.function) return $("p", {}, "initial state");
    return $("div", {id: "spec-action"}, $("p", {}, "spec action ", $("code", {}, spec.function),
      spec.source ? [" at ", $("code", {class: "src"}, spec.source)] : ""), $("p", {class: "doc"}, spec.doc || ""),
      $("ul", {class: "cites"}, (spec.cites || []).map(c => $("li", {}, "models vLLM ", $("code", {}, c.target),
        c.prs.length ? " (PR " + c.prs.map(p => "#" + p).join(", ") + ")" : ""))));
  }

  function select(k) {
    if (k < 0 || k >= steps.length) return;
    current = k;
    document.querySelectorAll(".selected").forEach(e => e.classList.remove("selected"));
    document.querySelectorAll('[data-step="' + k + '"]').forEach(e => e.classList.add("selected"));
    const s = steps[k];
    const d = document.getElementById("detail");
    d.replaceChildren();
    d.setAttribute("data-step", k);
    d.append($("h2", {}, "step #" + s.index + ": " + s.action + (k === badStep ? "  ← violation" : "")));
    if (s.events && s.events.length) d.append($("p", {class: "events"}, "spec events: " + s.events.join(", ")));
    d.append(specPanel(s.spec));
    d.append($("h3", {}, "counters after this step"), counterTable(k));
    const eng = Object.entries(s.engine || {}).map(([key, v]) => ({"": key, value: v}));
    if (eng.length) d.append($("h3", {}, "engine"), table(eng, ["", "value"], "engine"));
    for (const [name, rows] of Object.entries(s.detail || {})) {
      if (!Array.isArray(rows) || !rows.length) continue;
      const objs = rows.map(r => (r !== null && typeof r === "object") ? r : {value: r});
      const cols = [...new Set(objs.flatMap(Object.keys))];
      d.append($("h3", {}, name), table(objs, cols, "detail-" + name.replace(/\W/g, "-")));
    }
    if (view.side && s.side) {
      const target = view.side.target;
      const rows = s.side.map(r => ({field: r.field, spec: r.spec, [target]: r.target, differs: r.differs}));
      d.append($("h3", {}, "spec | " + target + (s.side.some(r => r.differs) ? " — they differ" : " — equal")));
      d.append(table(rows, ["field", "spec", target], "side", r => r.differs ? {class: "differs"} : {}));
    }
  }

  function extras() {
    const e = document.getElementById("extra");
    const items = Object.entries(view.extra || {});
    if (!items.length) return;
    e.append($("h3", {}, "more in the file"), table(items.map(([k, v]) => ({key: k, value: v})), ["key", "value"]));
  }

  header();
  lanes();
  extras();
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "ArrowRight") select(current + 1);
    if (ev.key === "ArrowLeft") select(current - 1);
  });
  select(badStep >= 0 && badStep < steps.length ? badStep : 0);
  document.body.setAttribute("data-ready", "1");
})();
