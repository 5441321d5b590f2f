// The tables that explain a loop decision on the timeline: what it tried, what each try measured with
// its interval, the rule it applied (read from the entry's own evidence, never restated here), and
// which try it picked. Evidence is data: every cell goes in as text.

import { fmt } from "./charts.js";
import { el } from "./dom.js";

export function num(v) {
  return typeof v === "number" && Number.isFinite(v) ? v : null;
}

function pctText(v) {
  return num(v) === null ? "–" : `${(100 * v).toFixed(1)}%`;
}

function ptText(v) {
  return num(v) === null ? "–" : `${v >= 0 ? "+" : "−"}${Math.abs(100 * v).toFixed(1)} pt`;
}

function pText(p) {
  if (num(p) === null) return "–";
  return p > 0 && p < 0.0001 ? "< 0.0001" : fmt(p, 4);
}

function gainText(diff, lo, hi) {
  return `${ptText(diff)} [${ptText(lo)}, ${ptText(hi)}]`;
}

function levelText(alpha) {
  return num(alpha) === null ? "" : `${(100 * (1 - alpha)).toFixed(1)}%`;
}

// {"agent": {"refine": false}} -> "agent.refine = false"
function changesText(overrides, prefix = "") {
  if (!overrides || typeof overrides !== "object") return "";
  return Object.entries(overrides)
    .map(([k, v]) => (v && typeof v === "object" ? changesText(v, `${prefix}${k}.`) : `${prefix}${k} = ${JSON.stringify(v)}`))
    .join(", ");
}

function table(cls, caption, head, rows) {
  return el("div", { class: "table-wrap" }, el("table", { class: `decision ${cls}` },
    el("caption", { class: "small", text: caption }),
    el("thead", {}, el("tr", {}, ...head.map((h) => el("th", { scope: "col", text: h })))),
    el("tbody", {}, ...rows),
  ));
}

// A chunking fit: every size it tried, its gain in target recall with the interval and both p values,
// and whether it qualified.
export function chunkingTable(ev) {
  const level = num(ev.p_family_level);
  const rule = `A size qualifies when its gain interval (${num(ev.alpha) !== null ? `${levelText(ev.alpha)}, ` : ""}` +
    `Bonferroni over the sizes) lies above 0 and its family-wise one-sided p${level !== null ? ` ≤ ${String(Number(level.toFixed(4)))}` : ""}` +
    (num(ev.budget) !== null
      ? `: this look's allowance of the pool's ${ev.budget} budget (${fmt(ev.allowance, 4)}, ${ev.differing ?? "?"} of ` +
        `${ev.full_information ?? "?"} items differing) less what earlier looks spent (${fmt(ev.spent_before, 4)}); ` +
        `it spent ${fmt(ev.spent, 4)}.`
      : ".");
  const serving = ev.serving && num(ev.serving.size) !== null ? `; serving chunk size ${ev.serving.size}` : "";
  const caption = `Chunk sizes tried on ${ev.items ?? "?"} pooled chunking failures` +
    `${num(ev.documents) !== null ? ` (${ev.documents} documents)` : ""}${serving}. ${rule}`;
  const head = ["size (overlap)", "target recall", "gain [interval]", "n", "p", "p family-wise", "qualifies"];
  const rows = ev.trials.map((t) => {
    const g = t.gain || {};
    const picked = num(ev.chosen_size) !== null && t.size === ev.chosen_size;
    return el("tr", { class: picked ? "chosen" : "", dataset: { size: String(t.size) } },
      el("td", { text: `${t.size} (${t.overlap})` }),
      el("td", { text: `${pctText(g.before)} → ${pctText(g.after)}` }),
      el("td", { text: gainText(g.diff, g.lo, g.hi) }),
      el("td", { text: String(g.n ?? "–") }),
      el("td", { text: pText(g.p) }),
      el("td", { text: pText(t.p_family) }),
      el("td", { text: t.qualifies ? (picked ? "yes: the candidate" : "yes") : "no" }),
    );
  });
  return table("trials", caption, head, rows);
}

// An answer-graph trial: every variant answered the working golden set beside the serving prompt.
export function variantsTable(trial) {
  const level = levelText(trial.alpha);
  const min = num(trial.min_gain) === null ? "" : ` by more than ${ptText(trial.min_gain).replace("+", "")}`;
  const caption = `Answer-graph variants on ${trial.entries ?? "?"} golden entries, against the serving prompt ` +
    `${trial.serving ?? "?"}. A variant qualifies when its correctness gains${min} with its interval` +
    `${level ? ` (${level}, Bonferroni over two tests a variant)` : ""} above 0 and its faithfulness does not drop, ` +
    "or its faithfulness gains so and its correctness does not drop; the largest correctness gain is the candidate.";
  const head = ["variant", "changes", "correct", "correctness gain [interval]", "faithfulness gain [interval]", "paired", "refused", "qualifies"];
  const rows = trial.variants.map((v) => {
    const picked = trial.chosen !== null && trial.chosen !== undefined && v.version === trial.chosen;
    return el("tr", { class: picked ? "chosen" : "", dataset: { variant: String(v.version) } },
      el("td", { text: String(v.version) }),
      el("td", { class: "mono", text: changesText(v.overrides) }),
      el("td", { text: `${pctText(v.baseline_correct)} → ${pctText(v.correct)}` }),
      el("td", { text: gainText(v.correct_gain, v.correct_lo, v.correct_hi) }),
      el("td", { text: gainText(v.gain, v.lo, v.hi) }),
      el("td", { text: String(v.paired ?? "–") }),
      el("td", { text: String(v.refused ?? "–") }),
      el("td", { text: v.qualifies === undefined ? "–" : v.qualifies ? (picked ? "yes: the candidate" : "yes") : "no" }),
    );
  });
  return table("variants", caption, head, rows);
}

// The golden check: each gate on the working golden set, paired, current version against the candidate.
export function goldenTable(golden) {
  const rule = golden.rule || {};
  const regressed = new Set(golden.regressed || []);
  const worse = new Set(golden.likely_worse || []);
  const guarded = (rule.harm_guarded || []).join(", ");
  const caption = `Golden check on ${golden.entries ?? "?"} working golden entries, the candidate against the serving ` +
    "version on the same entries. It refuses a metric that regressed (its 95% interval below 0" +
    `${num(rule.threshold) !== null ? `, more than ${(100 * rule.threshold).toFixed(0)}% lower` : ""})` +
    `${guarded ? `, and ${guarded} when likely worse (its one-sided ${levelText(rule.harm_alpha)} upper bound below 0)` : ""}.`;
  const head = ["metric", "n", "serving → candidate", "difference [95% interval]", "better", "worse", "verdict"];
  const rows = golden.metrics.map((m) => {
    const ci = Array.isArray(m.ci95) ? m.ci95 : [null, null];
    const verdict = regressed.has(m.metric) ? "regressed" : worse.has(m.metric) ? "likely worse" : "passes";
    return el("tr", { class: verdict === "passes" ? "" : "refused", dataset: { metric: String(m.metric) } },
      el("td", { text: String(m.metric) }),
      el("td", { text: String(m.n ?? "–") }),
      el("td", { text: `${pctText(m.baseline_mean)} → ${pctText(m.current_mean)}` }),
      el("td", { text: gainText(m.difference, ci[0], ci[1]) }),
      el("td", { text: String(m.better ?? "–") }),
      el("td", { text: String(m.worse ?? "–") }),
      el("td", { text: verdict }),
    );
  });
  return table("golden", caption, head, rows);
}


function signed(v) {
  return num(v) === null ? "–" : `${v >= 0 ? "+" : "−"}${Math.abs(v).toFixed(3)}`;
}

// "<what> +0.431 [+0.194, +0.680], one-sided p 0.0044; ...: shown."; `points`: the gain is a share
function goesText(fit, what, points) {
  const g = fit.held_out_gain || fit.gain || {};
  const level = num(fit.p_level);
  const gain = points ? gainText(g.value, g.lo, g.hi) : `${signed(g.value)} [${signed(g.lo)}, ${signed(g.hi)}]`;
  return `${what} ${gain}, one-sided p ${pText(g.p)}; a gain is shown when its 95% interval lies above 0` +
    `${level !== null ? ` and p ≤ ${level}` : ""}: ${fit.improves === undefined ? "–" : fit.improves ? "shown" : "not shown"}.`;
}

// A retrieval refit: every mode and fusion weight by the oracle chunks' mean reciprocal rank, the gain
// of the chosen one measured on the queries it was not chosen on, then the top k by hit rate.
export function retrievalTable(ev) {
  const fit = ev.fit;
  const rerank = fit.grid.some((g) => num(g.rerank_weight) !== null);
  const caption = `Retrieval modes and fusion weights on ${fit.queries ?? "?"} diagnosed queries` +
    `${num(ev.tuples) !== null ? ` (${ev.tuples} failures)` : ""}, by the mean reciprocal rank of the chunks the ` +
    "oracle needed (chosen on one half of the queries, its gain measured on the other, and the other way round). " +
    goesText(fit, "Held-out gain in reciprocal rank", false);
  const head = ["mode", "dense weight", ...(rerank ? ["rerank weight"] : []), "MRR", "fitted"];
  const rows = fit.grid.map((g) => {
    const picked = g.mode === fit.mode && g.dense_weight === fit.dense_weight && (g.rerank_weight ?? null) === (fit.rerank_weight ?? null);
    return el("tr", { class: picked ? "chosen" : "", dataset: { mode: String(g.mode), weight: String(g.dense_weight) } },
      el("td", { text: String(g.mode) }),
      el("td", { text: g.mode === "hybrid" ? fmt(g.dense_weight, 1) : "–" }),
      ...(rerank ? [el("td", { text: num(g.rerank_weight) === null ? "–" : fmt(g.rerank_weight, 1) })] : []),
      el("td", { text: fmt(g.mrr, 3) }),
      el("td", { text: picked ? "yes" : "" }),
    );
  });
  const parts = [table("retrieval", caption, head, rows)];
  const k = ev.top_k;
  if (k && k.curve && typeof k.curve === "object") {
    const kCaption = `Top k on the ${k.queries ?? "?"} queries: share whose needed chunk ranks within k, serving k ` +
      `${k.current}, fitted k ${k.fitted} (the knee of the curve). ${goesText(k, "Gain in hit rate", true)}`;
    const kRows = Object.entries(k.curve).map(([kk, hit]) => {
      const mark = Number(kk) === k.fitted ? "fitted" : Number(kk) === k.current ? "serving" : "";
      return el("tr", { class: Number(kk) === k.fitted ? "chosen" : "", dataset: { k: kk } },
        el("td", { text: kk }), el("td", { text: pctText(hit) }), el("td", { text: mark }));
    });
    parts.push(table("top-k", kCaption, ["k", "hit rate", ""], kRows));
  }
  return el("div", {}, ...parts);
}

function tauText(r) {
  return r.tau_from === r.tau_to ? fmt(r.tau_from, 2) : `${fmt(r.tau_from, 2)}–${fmt(r.tau_to, 2)}`;
}

const within = (r, tau) => num(tau) !== null && r.tau_from <= tau + 1e-9 && tau <= r.tau_to + 1e-9;
// does the range hold a multiple of 0.1 (the rows a reader scans; the rest stay in the evidence)
const onTenth = (r) => Math.floor(r.tau_to * 10 + 1e-9) >= Math.ceil(r.tau_from * 10 - 1e-9);

// A refusal-threshold refit (τL, or an answer check's τ): the grid as ranges of τ that refuse the same
// labelled answers, each with its expected accuracy, gain and false-refusal increase, the serving and
// the fitted τ marked; every 0.1 is shown, the full grid stays in the evidence.
export function tauTable(fit) {
  const rows = fit.taus.filter((r) => onTenth(r) || within(r, fit.current) || within(r, fit.fitted));
  const qualified = fit.taus.filter((r) => r.qualifies).length;
  const fr = num(fit.max_false_refusal) !== null && fit.max_false_refusal < 1
    ? ` and it refuses at most ${(100 * fit.max_false_refusal).toFixed(0)} pt more of the answerable ones`
    : "";
  const cv = `cross-fitted gain ${gainText(fit.cv_gain, fit.cv_lo, fit.cv_hi)}`;
  const verdict = fit.improves === undefined ? "" : fit.improves ? ": a candidate" : ": no candidate";
  const caption = `Refusal threshold refit on ${fit.n ?? "?"} labelled answers, serving τ ${fmt(fit.current, 2)}. ` +
    `A τ qualifies when its accuracy gain's 95% interval lies above 0${fr}; raises are tried before lowerings, ` +
    `the most accurate qualifying τ is fitted (${fmt(fit.fitted, 2)}), and a candidate needs its ${cv} above 0 too` +
    `${verdict}. ${qualified} of ${fit.taus.length} ranges qualify; shown: every 0.1, the serving and the fitted τ.`;
  const head = ["τ", "expected accuracy", "gain [95% interval]", "more answerable refused [95% interval]", "qualifies", ""];
  const body = rows.map((r) => {
    const fitted = within(r, fit.fitted) && fit.fitted !== fit.current;
    const mark = [within(r, fit.current) ? "serving" : "", fitted ? "fitted" : ""].filter(Boolean).join(", ");
    const ci = r.false_refusal_increase_ci || [null, null];
    return el("tr", { class: fitted ? "chosen" : "", dataset: { tau: String(r.tau_from) } },
      el("td", { text: tauText(r) }),
      el("td", { text: pctText(r.accuracy) }),
      el("td", { text: gainText(r.gain, r.lo, r.hi) }),
      el("td", { text: gainText(r.false_refusal_increase, ci[0], ci[1]) }),
      el("td", { text: r.qualifies ? "yes" : "no" }),
      el("td", { text: mark }),
    );
  });
  return table("taus", caption, head, body);
}

function sourcesText(part) {
  const sources = Object.entries((part && part.sources) || {}).map(([k, v]) => `${v.labels} ${k}`);
  return `${part?.labels ?? "?"} labels${sources.length ? ` (${sources.join(", ")})` : ""}`;
}

// A tier-1 refit: the serving and the fitted model's agreement with held-out labels, and the share of
// answers each would route to tier 2 as low-scoring.
export function tier1Table(ev) {
  const g = ev.agreement_gain || {};
  const bar = num(ev.replace_at) !== null ? ` is at least ${fmt(ev.replace_at, 2)} and` : "";
  const caption = `Tier-1 refit on ${sourcesText(ev.train)}, judged on ${sourcesText(ev.held_out)} held out. ` +
    `The fitted model replaces the serving one when its three-way agreement with the held-out labels${bar} its ` +
    `gain's 95% interval lies above 0. Gain ${gainText(g.value, g.lo, g.hi)}: ${ev.decision ?? "–"}.`;
  const share = ev.routing_share_held_out || {};
  const head = ["model", "agreement [95% interval]", "answers", `routed to tier 2 as low (score < ${share.threshold ?? "?"})`];
  const row = (who, version, a, routed) => el("tr", { class: who === "fitted" && ev.decision === "replaced" ? "chosen" : "", dataset: { model: who } },
    el("td", { class: "mono", text: `${who} ${version ?? ""}` }),
    el("td", { text: `${pctText(a?.value)} [${pctText(a?.lo)}, ${pctText(a?.hi)}]` }),
    el("td", { text: String(a?.answers ?? "–") }),
    el("td", { text: pctText(routed) }),
  );
  return table("tier1", caption, head, [
    row("serving", ev.serving, ev.agreement_serving, share.serving),
    row("fitted", ev.fitted?.version, ev.agreement_fitted, share.fitted),
  ]);
}
