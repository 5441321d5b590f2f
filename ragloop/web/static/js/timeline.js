// The improvement timeline: every audit-log entry (remediations, their measurements and reverts,
// promotions, rollbacks, recalibrations, regressions, experiments) newest first, drawn on a time strip
// by kind, each with its evidence and the expected against the measured effect; a revert button
// where the entry's improvement action can still be undone.

import { chart, extent, fitWidth, fmt, s, scale } from "./charts.js";
import { confirmAction } from "./confirm.js";
import { $, clear, el, fmtTime } from "./dom.js";
import { chunkingTable, goldenTable, num, retrievalTable, tauTable, tier1Table, variantsTable } from "./evidence.js";

const PAGE = 25;
const KINDS = [
  ["remediation", "remediation applied"],
  ["kept", "measured and kept"],
  ["reverted", "reverted"],
  ["promotion", "promotion"],
  ["rollback", "rollback"],
  ["recalibration", "recalibration"],
  ["regression", "regression"],
  ["experiment", "experiment"],
  ["other", "other"],
];
let api;
let offset = 0;
let total = 0;
let seq = 0;

export function kindOf(type) {
  if (type.startsWith("remediation:")) return "remediation";
  if (type === "remediation_keep" || type === "pipeline_activate_audit") return "kept";
  if (type === "remediation_revert") return "reverted";
  if (type === "pipeline_activate" || type.includes("promot")) return type.includes("abort") ? "experiment" : "promotion";
  if (type.includes("rollback")) return "rollback";
  if (type.includes("threshold") || type.includes("calibrat")) return "recalibration";
  if (type.startsWith("regression")) return "regression";
  if (type.startsWith("experiment")) return "experiment";
  return "other";
}

export function init(client) {
  api = client;
  $("tl-type").addEventListener("change", () => {
    offset = 0;
    show();
  });
  $("tl-refresh").addEventListener("click", () => show());
  $("tl-newer").addEventListener("click", () => {
    offset = Math.max(0, offset - PAGE);
    show();
  });
  $("tl-older").addEventListener("click", () => {
    offset += PAGE;
    show();
  });
}

export async function show() {
  const type = $("tl-type").value;
  const q = new URLSearchParams({ limit: String(PAGE), offset: String(offset) });
  if (type) q.append("action_type", type);
  const mine = ++seq; // only the newest request draws (filter and paging clicks can overlap)
  const page = await api.get(`/v1/admin/audit?${q}`);
  if (mine !== seq) return;
  total = page.total;
  renderFilter(page.action_types, type);
  renderStrip(page.entries);
  renderList(page.entries);
  const first = page.entries.length ? offset + 1 : 0;
  $("tl-range").textContent = `${first}–${offset + page.entries.length} of ${total}`;
  $("tl-newer").disabled = offset === 0;
  $("tl-older").disabled = offset + page.entries.length >= total;
}

function renderFilter(counts, selected) {
  const select = clear($("tl-type"));
  const all = Object.values(counts).reduce((a, b) => a + b, 0);
  select.append(el("option", { value: "", text: `every entry (${all})` }));
  for (const [t, n] of Object.entries(counts).sort((a, b) => b[1] - a[1])) {
    select.append(el("option", { value: t, selected: t === selected || undefined, text: `${t} (${n})` }));
  }
}

// One row per kind, each entry of this page a dot at its time: what the loop did, and when, at a glance.
function renderStrip(entries) {
  const box = clear($("tl-chart"));
  if (!entries.length) return;
  const kinds = KINDS.filter(([k]) => entries.some((e) => kindOf(e.action_type) === k));
  const W = fitWidth(box, 720);
  const rowH = 22;
  const L = Math.min(150, W * 0.36);
  const R = W - 16;
  const H = kinds.length * rowH + 30;
  const times = entries.map((e) => new Date(e.created_at).getTime());
  let [t0, t1] = [Math.min(...times), Math.max(...times)];
  if (t0 === t1) [t0, t1] = [t0 - 60_000, t1 + 60_000];
  const x = scale(t0, t1, L + 8, R - 8);
  const root = chart(W, H, "Audit-log entries of this page over time, one row per kind of change");
  kinds.forEach(([k, label], i) => {
    const y = 8 + i * rowH + rowH / 2;
    root.append(
      s("text", { x: L - 8, y: y + 4, "text-anchor": "end", class: "row-label", text: label }),
      s("line", { x1: L, x2: R, y1: y, y2: y, class: "grid" }),
    );
    entries.forEach((e, j) => {
      if (kindOf(e.action_type) !== k) return;
      const dot = s("circle", { cx: x(times[j]), cy: y, r: 6, class: `kind-${k}` });
      dot.append(s("title", { text: `${e.action_type} · ${fmtTime(e.created_at)}` }));
      root.append(dot);
    });
  });
  // within a day the times alone; a narrow strip has room for nothing longer
  const short = (t) => (t1 - t0 < 86_400_000 ? new Date(t).toLocaleTimeString() : new Date(t).toLocaleDateString());
  root.append(
    s("text", { x: L, y: H - 6, class: "axis-label", text: short(t0) }),
    s("text", { x: R, y: H - 6, "text-anchor": "end", class: "axis-label", text: short(t1) }),
  );
  box.append(root);
}

// {value | diff | difference, lo, hi, n} in either delta; null when neither carries a number.
function deltas(entry) {
  const exp = entry.expected_delta || {};
  const act = entry.actual_delta || {};
  const expected = num(exp.value) ?? num(exp.diff) ?? num(exp.difference) ?? num(act.expected);
  const actual = num(act.diff) ?? num(act.difference) ?? num(act.value);
  if (expected === null && actual === null) return null;
  return {
    metric: exp.metric || act.metric || "effect",
    expected,
    actual,
    lo: num(act.lo),
    hi: num(act.hi),
    n: act.n ?? null,
    sessions: act.sessions ?? null,
    verdict: act.verdict || null,
  };
}

function deltaChart(d, W) {
  const H = 64;
  const L = 90;
  const R = W - 16;
  const [v0, v1] = extent([d.expected, d.actual, d.lo, d.hi, 0], 0.15);
  const x = scale(v0, v1, L, R);
  const root = chart(W, H, `${d.metric}: expected ${fmt(d.expected)}, measured ${fmt(d.actual)} [${fmt(d.lo)}, ${fmt(d.hi)}]`);
  root.append(s("line", { x1: x(0), x2: x(0), y1: 4, y2: H - 16, class: "reference" }));
  if (d.expected !== null) {
    const y = 16;
    const xe = x(d.expected);
    root.append(
      s("text", { x: L - 8, y: y + 4, "text-anchor": "end", class: "row-label", text: "expected" }),
      s("polygon", { points: `${xe},${y - 6} ${xe + 6},${y} ${xe},${y + 6} ${xe - 6},${y}`, class: "expected" }),
    );
  }
  const y2 = 38;
  root.append(s("text", { x: L - 8, y: y2 + 4, "text-anchor": "end", class: "row-label", text: "measured" }));
  if (d.actual !== null) {
    if (d.lo !== null && d.hi !== null) {
      root.append(s("line", { x1: x(d.lo), x2: x(d.hi), y1: y2, y2, class: "whisker actual" }));
    }
    root.append(s("circle", { cx: x(d.actual), cy: y2, r: 5, class: "dot actual" }));
  } else {
    root.append(s("text", { x: L + 4, y: y2 + 4, class: "row-note", text: "not measured yet" }));
  }
  root.append(
    s("text", { x: L, y: H - 2, class: "axis-label", text: fmt(v0, 2) }),
    s("text", { x: R, y: H - 2, "text-anchor": "end", class: "axis-label", text: fmt(v1, 2) }),
  );
  return root;
}

function renderList(entries) {
  const list = clear($("timeline"));
  if (!entries.length) {
    list.append(el("li", { class: "muted", text: "The audit log is empty: nothing has been changed yet." }));
    return;
  }
  for (const e of entries) {
    const kind = kindOf(e.action_type);
    const item = el("li", { class: `tl-entry kind-${kind}`, dataset: { logId: e.log_id, actionType: e.action_type } });
    item.append(
      el("div", { class: "tl-head" },
        el("span", { class: `kind-dot kind-${kind}`, "aria-hidden": "true" }),
        el("strong", { text: e.action_type }),
        el("span", { class: "muted small", text: ` · ${fmtTime(e.created_at)} · by ${e.actor}` }),
      ),
      el("p", { class: "small", text: `triggered by ${e.triggered_by}` }),
    );
    if (e.pipeline_version_before || e.pipeline_version_after) {
      const versions = e.pipeline_version_after && e.pipeline_version_after !== e.pipeline_version_before
        ? `${e.pipeline_version_before || "–"} → ${e.pipeline_version_after}`
        : `on ${e.pipeline_version_before || e.pipeline_version_after}`;
      item.append(el("p", { class: "small mono", text: versions }));
    }
    const d = deltas(e);
    if (d) {
      item.append(
        el("p", { class: "small", text: `${d.metric}: expected ${fmt(d.expected)}, measured ${fmt(d.actual)}${d.lo !== null ? ` (95% [${fmt(d.lo)}, ${fmt(d.hi)}]${d.n !== null ? `, n=${d.n}${d.sessions !== null ? ` in ${d.sessions} sessions` : ""}` : ""})` : ""}${d.verdict ? ` · ${d.verdict}` : ""}` }),
        deltaChart(d, fitWidth(list, 420)),
      );
    }
    if (Array.isArray(e.evidence?.trials)) item.append(chunkingTable(e.evidence));
    if (Array.isArray(e.evidence?.trial?.variants)) item.append(variantsTable(e.evidence.trial));
    if (Array.isArray(e.evidence?.golden?.metrics)) item.append(goldenTable(e.evidence.golden));
    if (Array.isArray(e.evidence?.fit?.grid)) item.append(retrievalTable(e.evidence));
    if (Array.isArray(e.evidence?.fit?.taus)) item.append(tauTable(e.evidence.fit));
    if (e.evidence?.agreement_fitted && e.evidence?.agreement_serving) item.append(tier1Table(e.evidence));
    if (e.refers_to) item.append(el("p", { class: "muted small", text: `follows up entry ${e.refers_to}` }));
    const evidence = el("details", {}, el("summary", { text: "Evidence" }), el("pre", { class: "evidence", text: JSON.stringify(e.evidence, null, 2) }));
    item.append(evidence);
    if (e.action_id) {
      const row = el("p", { class: "actions small" }, el("span", { text: `improvement ${e.action_id} is ${e.action_status || "gone"}` }));
      if (e.revertible) {
        row.append(el("button", {
          type: "button",
          class: "secondary danger",
          text: "Revert…",
          "aria-label": `Revert improvement ${e.action_id}`,
          on: { click: () => revert(e) },
        }));
      }
      item.append(row);
    }
    list.append(item);
  }
}

async function revert(e) {
  const ok = await confirmAction({
    title: "Revert this improvement?",
    text: `Undo ${e.action_type} (action ${e.action_id}): the previous state serves again, and the revert is audited under your key.`,
    yes: "Revert",
  });
  if (ok === null) {
    $("tl-status").textContent = "Revert cancelled.";
    return;
  }
  try {
    const row = await api.post(`/v1/improvements/${e.action_id}/revert`);
    $("tl-status").textContent = `Reverted: improvement ${row.action_id} is ${row.status}.`;
  } catch (err) {
    $("tl-status").textContent = `Revert refused: ${err.message}`;
  }
  offset = 0;
  await show();
}

