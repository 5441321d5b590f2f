// One turn of a conversation: the question, the answer with its [n] citations, refusals and
// residual deficiencies shown as what they are, the sources, and the buttons for trace and feedback.

import { $, append, clear, el, fmtMs, fmtScore } from "./dom.js";

const CITE = /\[(\d+)\]/g;
const NOTE = "\n\nNote: ";

export const REASONS = {
  converged: "checked: no open problem left",
  plateau: "checked: quality stopped improving",
  max_cycles: "checked: critique cycles used up",
  validated: "citations validated",
  budget_steps: "stopped: step budget reached",
  budget_model_calls: "stopped: model-call budget reached",
  budget_time: "stopped: time budget reached",
  recursion_limit: "stopped: step limit reached",
  no_grounded_context: "nothing relevant enough was found",
  no_valid_citations: "no draft could cite its sources",
  insufficient_evidence: "the evidence did not hold up",
  not_answered: "the draft did not answer the question",
};

export function reasonText(reason) {
  return REASONS[reason] || reason || "";
}

// A new turn in the list: returns handles the caller fills as the stream arrives.
export function turnView(question) {
  const progress = el("ol", { class: "live-steps", "aria-label": "Steps so far" });
  const status = el("p", { class: "answer-status", text: "Working…" });
  const body = el("div", { class: "answer-body" });
  const article = el("article", { class: "answer pending", "aria-busy": "true" }, status, progress, body);
  const li = el(
    "li",
    { class: "turn" },
    el("div", { class: "question" }, el("span", { class: "speaker", text: "You" }), el("p", { text: question })),
    article,
  );
  return {
    li,
    article,
    step(node) {
      progress.append(
        el(
          "li",
          {},
          el("span", { class: "node", text: node.node }),
          " ",
          el("span", { class: "decision", text: node.decision }),
          " ",
          el("span", { class: "lat", text: fmtMs(node.latency_ms) }),
        ),
      );
    },
    token(text) {
      status.textContent = "Answer (checked; arriving)…";
      body.classList.add("answer-text");
      body.append(document.createTextNode(text));
    },
    fail(message) {
      article.classList.remove("pending");
      article.classList.add("failed");
      article.removeAttribute("aria-busy");
      status.textContent = "No answer";
      clear(body).append(el("p", { class: "error", role: "alert", text: message }));
    },
    done() {
      article.classList.remove("pending");
      article.removeAttribute("aria-busy");
      progress.remove();
    },
  };
}

// Fill `article` with a complete answer (a QueryPublic, AnswerPublic or conversation Turn).
export function renderAnswer(article, ans, extras) {
  clear(article);
  article.classList.remove("pending", "failed");
  article.classList.toggle("refused", Boolean(ans.refused));
  article.dataset.answerId = ans.answer_id;
  const cites = new Map((ans.citations || []).map((c) => [Number(c.n), c]));
  const [main, ...notes] = String(ans.answer || "").split(NOTE);
  const residuals = ans.residual_deficiencies || [];

  const head = el("header", { class: "answer-head" });
  if (ans.refused) {
    head.append(el("span", { class: "badge refused-badge", text: "Refused" }));
    head.append(el("span", { class: "muted", text: ` ${reasonText(ans.termination_reason) || "not answered"}` }));
  } else {
    head.append(el("span", { class: "badge ok-badge", text: "Answer" }));
    if (ans.termination_reason) head.append(el("span", { class: "muted", text: ` ${reasonText(ans.termination_reason)}` }));
    if (ans.confidence !== undefined) {
      head.append(el("span", { class: "muted", text: ` · quality ${fmtScore(ans.confidence)}` }));
    }
  }
  if (ans.degraded) head.append(el("span", { class: "badge warn-badge", text: "answered by the last good pipeline" }));
  if (ans.latency_ms) head.append(el("span", { class: "muted", text: ` · ${fmtMs(ans.latency_ms)}` }));
  article.append(head);

  const text = el("p", { class: "answer-text" });
  if (ans.refused) text.prepend(el("span", { class: "sr-only", text: "Refusal: " }));
  appendCited(text, main, cites);
  article.append(text);

  if (residuals.length || notes.length) {
    const box = el(
      "div",
      { class: "residuals", role: "note" },
      el("strong", { text: residuals.length ? "Not resolved in this answer:" : "Note:" }),
    );
    const list = el("ul");
    for (const r of residuals.length ? residuals : notes) list.append(el("li", { text: r }));
    box.append(list);
    article.append(box);
  }

  if (cites.size) {
    const sources = el("ol", { class: "sources", "aria-label": "Sources" });
    for (const c of cites.values()) {
      sources.append(
        el(
          "li",
          {},
          el("button", {
            type: "button",
            class: "cite-source",
            text: `[${c.n}] ${c.doc_id}${c.title ? ` · ${c.title}` : ""}`,
            on: { click: () => openCitation(c) },
          }),
        ),
      );
    }
    article.append(el("h3", { class: "sources-title", text: "Sources" }), sources);
  }
  if (extras) append(article, [extras]);
}

function appendCited(node, text, cites) {
  let last = 0;
  for (const m of text.matchAll(CITE)) {
    node.append(document.createTextNode(text.slice(last, m.index)));
    const c = cites.get(Number(m[1]));
    if (c) {
      node.append(
        el("button", {
          type: "button",
          class: "cite",
          text: m[0],
          "aria-label": `Source ${c.n}: ${c.doc_id}`,
          on: { click: () => openCitation(c) },
        }),
      );
    } else {
      node.append(document.createTextNode(m[0]));
    }
    last = m.index + m[0].length;
  }
  node.append(document.createTextNode(text.slice(last)));
}

export function openCitation(c) {
  $("citation-title").textContent = `Source [${c.n}]`;
  $("citation-doc").textContent = c.doc_id || "–";
  $("citation-heading").textContent = c.title || "–";
  $("citation-section").textContent = (c.heading_path || []).join(" › ") || "–";
  $("citation-score").textContent = fmtScore(c.score);
  $("citation-excerpt").textContent = c.excerpt || "(no excerpt)";
  const dialog = $("citation-dialog");
  if (!dialog.open) dialog.showModal();
}
