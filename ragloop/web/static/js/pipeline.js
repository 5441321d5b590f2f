// The pipeline page: the active version, every version, the difference of two configs, rollback with
// confirmation.

import { confirmAction } from "./confirm.js";
import { $, clear, el, fmtTime } from "./dom.js";

let api;
let versions = [];

export function init(client) {
  api = client;
  $("diff-form").addEventListener("submit", (event) => {
    event.preventDefault();
    showDiff($("diff-a").value, $("diff-b").value);
  });
  $("rollback-form").addEventListener("submit", rollback);
}

export async function show() {
  versions = await api.get("/v1/pipeline/versions");
  let current = null;
  try {
    current = await api.get("/v1/pipeline/current");
  } catch {
    current = null;
  }
  renderCurrent(current);
  renderVersions(current);
}

function renderCurrent(current) {
  const box = clear($("current"));
  if (!current) {
    box.append(el("p", { text: "No pipeline version is active." }));
    return;
  }
  box.append(
    el("p", {}, el("strong", { class: "mono", text: current.version }), ` · ${current.status}`),
    el("p", { class: "muted", text: `promoted ${current.promoted_at ? fmtTime(current.promoted_at) : "–"} by ${current.promoted_by || "–"}; previous ${current.previous_version || "none"}` }),
  );
  if (current.description) box.append(el("p", { text: current.description }));
}

function option(v, selected) {
  return el("option", { value: v.version, selected: selected || undefined, text: `${v.version} (${v.status})` });
}

function renderVersions(current) {
  const body = clear($("versions"));
  for (const v of versions) {
    body.append(
      el(
        "tr",
        { class: current && v.version === current.version ? "current" : "" },
        el("td", { class: "mono", text: v.version }),
        el("td", { text: v.status }),
        el("td", { text: v.promoted_at ? fmtTime(v.promoted_at) : "–" }),
        el("td", { text: v.promoted_by || "–" }),
        el("td", { text: v.description || "" }),
        el("td", {}, el("button", {
          type: "button",
          class: "link",
          text: "diff with active",
          "aria-label": `Compare ${v.version} with the active version`,
          on: { click: () => showDiff(v.version, current ? current.version : v.version) },
        })),
      ),
    );
  }
  for (const [id, pick] of [["diff-a", 1], ["diff-b", 0], ["rollback-target", -1]]) {
    const select = clear($(id));
    if (id === "rollback-target") select.append(el("option", { value: "", text: "the previous version" }));
    versions.forEach((v, i) => select.append(option(v, i === pick)));
  }
}

function flatten(obj, prefix = "", out = {}) {
  if (obj && typeof obj === "object" && !Array.isArray(obj)) {
    for (const [k, v] of Object.entries(obj)) flatten(v, prefix ? `${prefix}.${k}` : k, out);
  } else {
    out[prefix] = JSON.stringify(obj);
  }
  return out;
}

function showDiff(a, b) {
  const box = clear($("diff"));
  const va = versions.find((v) => v.version === a);
  const vb = versions.find((v) => v.version === b);
  if (!va || !vb) return;
  const fa = flatten(va.config);
  const fb = flatten(vb.config);
  const keys = [...new Set([...Object.keys(fa), ...Object.keys(fb)])].filter((k) => fa[k] !== fb[k]).sort();
  box.append(el("p", { class: "muted", text: `${a} → ${b}: ${keys.length} setting${keys.length === 1 ? "" : "s"} differ` }));
  if (!keys.length) return;
  const rows = keys.map((k) =>
    el("tr", {}, el("td", { class: "mono", text: k }), el("td", { class: "old mono", text: fa[k] ?? "–" }), el("td", { class: "new mono", text: fb[k] ?? "–" })),
  );
  box.append(
    el(
      "table",
      {},
      el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "setting" }), el("th", { scope: "col", text: a }), el("th", { scope: "col", text: b }))),
      el("tbody", {}, ...rows),
    ),
  );
}

async function rollback(event) {
  event.preventDefault();
  const target = $("rollback-target").value;
  const reason = $("rollback-reason").value.trim() || "manual rollback";
  const ok = await confirmAction({
    title: "Roll back the pipeline?",
    text: `The next question will be answered by ${target || "the previous version"}. Reason: “${reason}”.`,
    yes: "Roll back",
  });
  if (ok === null) {
    $("rollback-status").textContent = "Rollback cancelled.";
    return;
  }
  try {
    const row = await api.post("/v1/pipeline/rollback", target ? { target_version: target, reason } : { reason });
    $("rollback-status").textContent = `Rolled back: ${row.version} is active.`;
  } catch (err) {
    $("rollback-status").textContent = `Rollback refused: ${err.message}`;
  }
  await show();
}
