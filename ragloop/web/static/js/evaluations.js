// Evaluations: how far the three tiers agree (each statistic with n and its 95% interval), and every
// evaluation filtered by tier, failure mode, score and experiment, with the question and answer it
// judged (as text).

import { fitWidth, fmt, forest } from "./charts.js";
import { $, clear, el, fmtTime } from "./dom.js";

const PAGE = 25;
const MODES = ["retrieval_failure", "ranking_failure", "embedding_failure", "chunking_failure", "knowledge_gap", "generation_failure", "retrieval_success"];
const TIER_SHORT = { heuristic: "tier 1", llm_judge: "tier 2", human: "tier 3" };
const TIER_NAMES = { heuristic: "tier 1 (heuristics)", llm_judge: "tier 2 (judge)", human: "tier 3 (human)" };
let api;
let offset = 0;
let listSeq = 0;

export function init(client) {
  api = client;
  for (const m of MODES) $("f-mode").append(el("option", { value: m, text: m.replace(/_/g, " ") }));
  $("evals-filter").addEventListener("submit", (event) => {
    event.preventDefault();
    offset = 0;
    showList();
  });
  $("evals-prev").addEventListener("click", () => {
    offset = Math.max(0, offset - PAGE);
    showList();
  });
  $("evals-next").addEventListener("click", () => {
    offset += PAGE;
    showList();
  });
}

export async function show() {
  await Promise.all([fillExperiments(), showAgreement(), showList()]);
}

async function fillExperiments() {
  const select = $("f-exp");
  const chosen = select.value;
  const rows = await api.get("/v1/experiments");
  clear(select).append(el("option", { value: "", text: "any" }));
  for (const x of rows) select.append(el("option", { value: x.experiment_id, selected: x.experiment_id === chosen || undefined, text: `${x.name} (${x.status})` }));
}

async function showAgreement() {
  const box = clear($("agreement"));
  const data = await api.get("/v1/admin/evaluations/agreement");
  if (!data.pairs.some((p) => p.n)) {
    box.append(el("p", { class: "muted", text: "No answer has been scored by two tiers yet." }));
    return;
  }
  const label = (p) => `${TIER_NAMES[p.a]} vs ${TIER_NAMES[p.b]}`;
  const rows = (key) =>
    data.pairs.map((p) => ({ label: label(p), value: p[key].value, lo: p[key].lo, hi: p[key].hi, note: p.n ? `n=${p.n}` : "n=0, none yet" }));
  const width = fitWidth(box, 560);
  const grid = el("div", { class: "stack" });
  grid.append(
    el("figure", { class: "metric" }, el("figcaption", { text: "Same pass/fail verdict (Wilson 95%)" }),
      forest(rows("agreement"), { label: "Share of answers on which two tiers agree, with 95% intervals", domain: [0, 1], width })),
    el("figure", { class: "metric" }, el("figcaption", { text: "Cohen's kappa (bootstrap 95%)" }),
      forest(rows("kappa"), { label: "Agreement beyond chance, with 95% intervals", domain: [-1, 1], reference: 0, width })),
    el("figure", { class: "metric" }, el("figcaption", { text: "Mean |score difference| (bootstrap 95%)" }),
      forest(rows("mean_abs_difference"), { label: "Mean absolute score difference between two tiers, with 95% intervals", domain: [0, 1], width })),
  );
  box.append(grid, el("p", { class: "muted small", text: `${data.answers} answers with a second opinion; pass means score ≥ ${data.threshold}.` }));
}

function query() {
  const q = new URLSearchParams({ limit: String(PAGE), offset: String(offset) });
  for (const [id, name] of [["f-tier", "tier"], ["f-mode", "failure_mode"], ["f-exp", "experiment_id"], ["f-min", "min_score"], ["f-max", "max_score"]]) {
    const v = $(id).value.trim();
    if (v) q.set(name, v);
  }
  return q;
}

async function showList() {
  const mine = ++listSeq; // a slower, older request must not overwrite a newer filter's rows
  let page;
  try {
    page = await api.get(`/v1/admin/evaluations?${query()}`);
  } catch (err) {
    if (mine === listSeq) clear($("evals")).append(el("tr", {}, el("td", { colspan: 6, class: "error", text: err.message })));
    return;
  }
  if (mine !== listSeq) return;
  const body = clear($("evals"));
  if (!page.evaluations.length) body.append(el("tr", {}, el("td", { colspan: 6, class: "muted", text: "No evaluation matches." })));
  for (const e of page.evaluations) body.append(row(e));
  const first = page.evaluations.length ? offset + 1 : 0;
  $("evals-range").textContent = `${first}–${offset + page.evaluations.length} of ${page.total}`;
  $("evals-prev").disabled = offset === 0;
  $("evals-next").disabled = offset + page.evaluations.length >= page.total;
}

function scoreCell(e) {
  if (e.status === "failed") return el("td", {}, el("span", { class: "badge bad-badge", text: "failed" }), el("span", { class: "small", text: ` ${e.error || ""}` }));
  const v = e.overall;
  const fill = el("span", { class: `score-fill ${v !== null && v < 0.5 ? "low" : ""}` });
  fill.style.width = `${Math.round((v ?? 0) * 100)}%`;
  const named = Object.entries(e.scores || {}).filter(([, x]) => typeof x === "number").map(([k, x]) => `${k} ${fmt(x, 2)}`);
  // a score by a judge that has not qualified is kept for the record but counts for nothing
  const unqualified = e.status === "unqualified" ? el("span", { class: "badge bad-badge", text: "unqualified judge: not counted" }) : null;
  return el("td", {},
    unqualified,
    el("span", { class: "score-num", text: fmt(v, 2) }),
    el("span", { class: "score-track", "aria-hidden": "true" }, fill),
    named.length ? el("details", { class: "small" }, el("summary", { text: "scores" }), el("ul", { class: "plain" }, ...named.map((t) => el("li", { text: t })))) : null,
  );
}

function row(e) {
  const answer = e.answer.length > 280 ? `${e.answer.slice(0, 279)}…` : e.answer;
  return el(
    "tr",
    { dataset: { answerId: e.answer_id, tier: e.evaluation_tier } },
    el("td", { class: "small", text: fmtTime(e.evaluated_at) }),
    el("td", {}, el("span", { class: `badge tier-${e.evaluation_tier}`, title: TIER_NAMES[e.evaluation_tier], text: TIER_SHORT[e.evaluation_tier] || e.evaluation_tier })),
    scoreCell(e),
    el("td", { class: "qa" }, el("p", { class: "q" }, el("strong", { text: "Q: " }), e.question), el("p", { class: "a" }, el("strong", { text: "A: " }), answer)),
    el("td", { text: e.failure_mode ? e.failure_mode.replace(/_/g, " ") : "–" }),
    el("td", { class: "small" }, el("span", { class: "mono", title: e.pipeline_version, text: e.pipeline_version.slice(0, 11) }), e.experiment_id ? el("span", { text: ` · ${e.variant || ""} arm` }) : null),
  );
}
