// The trace panel of one answer: the graph's path as steps (with each step's latency drawn to
// scale and what it decided), then the tier-1 score and, when it arrives, the tier-2 evaluation.

import { clear, el, fmtMs, fmtScore } from "./dom.js";
import { reasonText } from "./answer.js";

const EVAL_POLL_MS = [1000, 2000, 3000, 5000, 8000, 13000];

export async function loadTrace(api, answerId, panel) {
  clear(panel).append(el("p", { class: "muted", text: "Loading the trace…" }));
  const ans = await api.get(`/v1/answers/${encodeURIComponent(answerId)}`);
  clear(panel);
  panel.append(traceSteps(ans));
  const evalBox = el("section", { class: "evaluation", "aria-label": "Evaluation" });
  panel.append(evalBox);
  await pollEvaluations(api, answerId, evalBox);
}

function labelFor(ans) {
  const names = new Map();
  for (const c of ans.citations || []) names.set(c.chunk_id, `[${c.n}] ${c.doc_id}`);
  return (id) => names.get(id) || `chunk ${String(id).slice(0, 8)}`;
}

export function traceSteps(ans) {
  const trace = ans.trace || {};
  const records = trace.records || [];
  const summary = trace.summary || {};
  const label = labelFor(ans);
  const slowest = Math.max(1, ...records.map((r) => Number(r.latency_ms) || 0));
  const wrap = el("section", { class: "trace-steps", "aria-label": "Trace" });
  wrap.append(
    el("p", {
      class: "trace-summary",
      text:
        `${summary.steps ?? records.length} steps · ${summary.rewrites ?? 0} rewrites · ` +
        `${summary.critique_cycles ?? 0} critique cycles · ${fmtMs(summary.latency_ms)} in the graph · ` +
        `${summary.tokens ?? 0} tokens · cost ${Number(summary.cost || 0).toFixed(4)}`,
    }),
  );
  const list = el("ol", { class: "steps" });
  for (const r of records) {
    const bar = el("span", { class: "lat-bar", "aria-hidden": "true" });
    bar.style.width = `${Math.max(2, (100 * (Number(r.latency_ms) || 0)) / slowest)}%`;
    const item = el(
      "li",
      { class: `step step-${r.node}`, dataset: { node: r.node } },
      el(
        "div",
        { class: "step-head" },
        el("span", { class: "node", text: r.node }),
        el("span", { class: "decision", text: r.decision }),
        el("span", { class: "lat", text: fmtMs(r.latency_ms) }),
        r.tokens ? el("span", { class: "tok", text: `${r.tokens} tok` }) : null,
        r.cached ? el("span", { class: "tok", text: "cached" }) : null,
      ),
      el("span", { class: "lat-track" }, bar),
    );
    const more = details(r, label);
    if (more) item.append(more);
    list.append(item);
  }
  wrap.append(list);
  const reason = ans.termination_reason || summary.termination_reason;
  wrap.append(
    el(
      "p",
      { class: ans.refused ? "termination refused-text" : "termination" },
      el("strong", { text: "Termination: " }),
      `${reason || "–"}${reasonText(reason) ? ` (${reasonText(reason)})` : ""}`,
    ),
  );
  return wrap;
}

function kv(name, value) {
  return el("div", { class: "kv" }, el("span", { class: "k", text: `${name}: ` }), el("span", { text: value }));
}

function bars(title, entries) {
  const list = el("ul", { class: "scores", "aria-label": title });
  for (const [name, score] of entries) {
    const fill = el("span", { class: "score-fill", "aria-hidden": "true" });
    fill.style.width = `${Math.round(100 * Math.min(1, Math.max(0, Number(score) || 0)))}%`;
    list.append(
      el(
        "li",
        {},
        el("span", { class: "score-name", text: name }),
        el("span", { class: "score-track" }, fill),
        el("span", { class: "score-value", text: fmtScore(score) }),
      ),
    );
  }
  return el("div", {}, el("span", { class: "k", text: title }), list);
}

function details(r, label) {
  const d = r.detail || {};
  const out = [];
  switch (r.node) {
    case "condense":
      if (d.standalone) out.push(kv("standalone question", d.standalone));
      break;
    case "retrieve":
      if (d.queries) out.push(kv("queries", d.queries.join(" · ")));
      break;
    case "grade":
      if (d.reason) out.push(kv("why", d.reason));
      if (d.scores && Object.keys(d.scores).length) {
        const sorted = Object.entries(d.scores).sort((a, b) => b[1] - a[1]);
        out.push(bars("relevance per chunk", sorted.map(([id, s]) => [label(id), s])));
      }
      if (d.ungrounded_entities?.length) out.push(kv("not found in any passage", d.ungrounded_entities.join(", ")));
      break;
    case "refine":
      if (d.kept) out.push(kv("kept strips", `${d.kept.length} (threshold ${d.threshold})`));
      break;
    case "rewrite":
      if (d.query) out.push(kv("new query", d.query));
      if (d.purpose) out.push(kv("purpose", d.purpose));
      break;
    case "external_search":
      if (d.query) out.push(kv("query", d.query));
      if (d.urls?.length) out.push(kv("results", d.urls.join(" · ")));
      break;
    case "validate":
      if (d.support && Object.keys(d.support).length) out.push(bars("support per sentence", Object.entries(d.support)));
      if (d.uncited) out.push(kv("uncited sentences", String(d.uncited)));
      if (d.invalid_ids?.length) out.push(kv("invalid citations", d.invalid_ids.join(", ")));
      break;
    case "critique":
      if (d.score !== undefined) out.push(kv("quality", fmtScore(d.score)));
      if (d.found?.length) {
        const list = el("ul", { class: "deficiencies", "aria-label": "Deficiencies found" });
        for (const [type, section, severity] of d.found) {
          list.append(el("li", { text: `${type} (severity ${fmtScore(severity)}): ${section}` }));
        }
        out.push(el("div", {}, el("span", { class: "k", text: "deficiencies found" }), list));
      }
      if (d.resolved?.length) out.push(kv("resolved", d.resolved.join(", ")));
      break;
    case "finalize":
      if (d.quality !== undefined) out.push(kv("quality", fmtScore(d.quality)));
      if (d.residuals?.length) out.push(kv("residual deficiencies", d.residuals.join(" · ")));
      break;
    case "refuse":
      if (d.searched?.length) out.push(kv("searched for", d.searched.join(" · ")));
      if (d.reason) out.push(kv("why", d.reason));
      break;
    default:
      break;
  }
  return out.length ? el("div", { class: "step-detail" }, ...out) : null;
}

async function pollEvaluations(api, answerId, box) {
  for (let i = 0; ; i++) {
    let ev;
    try {
      ev = await api.get(`/v1/evaluations/${encodeURIComponent(answerId)}`);
    } catch (err) {
      clear(box).append(el("p", { class: "error", text: `Evaluation: ${err.message}` }));
      return;
    }
    const pending = renderEvaluations(box, ev);
    if (!pending || i >= EVAL_POLL_MS.length || !box.isConnected) return;
    await new Promise((resolve) => setTimeout(resolve, EVAL_POLL_MS[i]));
  }
}

// Returns true while a queued evaluation has not finished yet.
export function renderEvaluations(box, ev) {
  clear(box).append(el("h4", { text: "Evaluation" }));
  const evals = ev.evaluations || [];
  const jobs = ev.jobs || [];
  const tier1 = evals.filter((e) => e.evaluation_tier === "heuristic" && e.status === "completed").pop();
  const tier2 = evals.filter((e) => e.evaluation_tier === "llm_judge" && e.status === "completed").pop();
  const job = (tier) => jobs.find((j) => j.tier === tier);
  const open = (tier) => {
    const j = job(tier);
    return j && !["completed", "succeeded", "done", "dead"].includes(j.status);
  };
  box.append(
    kv(
      "tier 1 (heuristics)",
      tier1 ? fmtScore(tier1.heuristic_score) : open("heuristic") ? "queued…" : "not evaluated yet",
    ),
  );
  if (tier2) {
    box.append(bars("tier 2 (judge)", Object.entries(tier2.scores || {}).filter(([, v]) => typeof v === "number")));
    if (tier2.evaluator_model) box.append(kv("judge", tier2.evaluator_model));
  } else {
    const j = job("llm_judge");
    box.append(kv("tier 2 (judge)", j ? `${j.status}${j.last_error ? ` (${j.last_error})` : ""}` : "not routed to the judge"));
  }
  if (ev.failure_mode) box.append(kv("failure diagnosis", ev.failure_mode));
  const human = job("human");
  if (human) box.append(kv("tier 3 (human review)", human.status));
  return open("heuristic") || open("llm_judge");
}
