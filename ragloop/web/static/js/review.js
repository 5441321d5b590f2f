// Tier 3 as a page: a reviewer scores each queued answer (four metrics, 0 to 1), labels its failure
// mode and issues, may write the correct answer. The machine's scores stay hidden until the reviewer
// has scored (so they cannot anchor the human score the tiers are compared with), then are shown.

import { fmt } from "./charts.js";
import { $, clear, el, fmtTime } from "./dom.js";

const METRICS = [
  ["faithfulness", "Faithfulness: every claim supported by the sources"],
  ["answer_relevance", "Relevance: it answers the question asked"],
  ["context_precision", "Context precision: the sources used are the right ones"],
  ["context_recall", "Context recall: nothing needed is missing"],
];
const LEVELS = ["", "0", "0.25", "0.5", "0.75", "1"];
const MODES = ["retrieval_failure", "chunking_failure", "embedding_failure", "ranking_failure", "generation_failure", "knowledge_gap"];
const LABELS = ["hallucination", "wrong citation", "incomplete", "outdated", "should have refused", "should not have refused"];
let api;

export function init(client) {
  api = client;
  $("review-refresh").addEventListener("click", () => show());
}

export async function show() {
  const box = clear($("review"));
  let items;
  try {
    items = await api.get("/v1/review?limit=50");
  } catch (err) {
    box.append(el("p", { class: "error", text: `Review queue: ${err.message}` }));
    return;
  }
  if (!items.length) {
    box.append(el("p", { class: "muted", text: "Nothing waits for review." }));
    return;
  }
  const list = el("ol", { class: "review" });
  for (const it of items) list.append(item(it));
  box.append(list);
}

function item(it) {
  const id = it.answer_id;
  const li = el("li", { class: "review-item", dataset: { answerId: id } });
  li.append(
    el("p", {}, el("strong", { text: "Q: " }), it.question),
    el("p", { class: "answer-text" }, el("strong", { text: "A: " }), it.answer),
    el("p", { class: "muted small", text: `${it.reasons.join(", ") || "sampled"} · queued ${fmtTime(it.queued_at)} · answer ${id}` }),
  );
  if (it.citations.length) {
    li.append(el("details", {}, el("summary", { text: `Sources (${it.citations.length})` }),
      el("ol", { class: "small" }, ...it.citations.map((c) => el("li", {}, el("strong", { text: `[${c.n}] ${c.doc_id}` }), c.title ? ` · ${c.title}` : "", el("p", { class: "excerpt", text: c.excerpt })))),
    ));
  }
  const form = el("form", { class: "review-form" });
  const scores = el("fieldset", {}, el("legend", { text: "Scores (0 = not at all, 1 = fully)" }));
  for (const [name, label] of METRICS) {
    const sid = `rv-${name}-${id}`;
    const select = el("select", { id: sid, name });
    for (const v of LEVELS) select.append(el("option", { value: v, text: v === "" ? "not scored" : v }));
    scores.append(el("div", { class: "field-row" }, el("label", { for: sid, class: "check", text: label }), select));
  }
  const modeId = `rv-mode-${id}`;
  const mode = el("select", { id: modeId, name: "failure_mode" }, el("option", { value: "", text: "none (a good answer)" }), ...MODES.map((m) => el("option", { value: m, text: m.replace(/_/g, " ") })));
  const labels = el("fieldset", {}, el("legend", { text: "Issues" }));
  for (const l of LABELS) {
    const cid = `rv-label-${l.replace(/\W+/g, "-")}-${id}`;
    labels.append(el("input", { type: "checkbox", id: cid, value: l }), el("label", { for: cid, class: "check", text: l }));
  }
  const corrId = `rv-correct-${id}`;
  const notesId = `rv-notes-${id}`;
  const status = el("p", { class: "small", role: "status" });
  form.append(
    scores,
    el("label", { for: modeId, text: "Failure mode" }), mode,
    labels,
    el("label", { for: corrId, text: "Correct answer (optional)" }), el("textarea", { id: corrId, rows: 2, maxlength: 10000 }),
    el("label", { for: notesId, text: "Notes (optional)" }), el("input", { id: notesId, maxlength: 5000 }),
    el("p", {}, el("button", { type: "submit", text: "Submit review", "aria-label": `Submit review of: ${it.question}` })),
    status,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = { scores: {}, labels: [] };
    for (const [name] of METRICS) {
      const v = form.elements[name].value;
      if (v !== "") body.scores[name] = Number(v);
    }
    if (mode.value) body.failure_mode = mode.value;
    body.labels = [...labels.querySelectorAll("input:checked")].map((i) => i.value);
    const corr = $(corrId).value.trim();
    const notes = $(notesId).value.trim();
    if (corr) body.corrected_answer = corr;
    if (notes) body.notes = notes;
    if (!Object.keys(body.scores).length && !body.failure_mode && !body.labels.length) {
      status.textContent = "Score at least one metric, or name a failure mode or an issue.";
      return;
    }
    form.querySelector("button").disabled = true;
    try {
      await api.post(`/v1/review/${id}`, body);
    } catch (err) {
      status.textContent = `Not saved: ${err.message}`;
      form.querySelector("button").disabled = false;
      return;
    }
    form.replaceWith(revealed(it, body));
    $("review-status").textContent = `Review saved for: ${it.question}`;
  });
  li.append(form);
  return li;
}

// After the reviewer has scored: their scores beside the machine's, for the reviewer's own calibration.
function revealed(it, body) {
  const mine = Object.entries(body.scores).map(([k, v]) => `${k} ${fmt(v, 2)}`).join(", ") || "no scores";
  const machine = it.evaluations
    .filter((e) => e.evaluation_tier !== "human" && e.status === "completed")
    .map((e) => {
      const named = Object.entries(e.scores || {}).filter(([, v]) => typeof v === "number").slice(0, 4).map(([k, v]) => `${k} ${fmt(v, 2)}`);
      return `${e.evaluation_tier === "heuristic" ? "tier 1" : "tier 2"}: ${e.heuristic_score !== null ? fmt(e.heuristic_score, 2) : named.join(", ") || "–"}`;
    });
  return el("div", { class: "reviewed" },
    el("p", {}, el("span", { class: "badge ok-badge", text: "Reviewed" }), ` yours: ${mine}${body.failure_mode ? ` · ${body.failure_mode}` : ""}`),
    el("p", { class: "muted small", text: `machine: ${machine.join(" · ") || "no machine score yet"}` }),
  );
}
