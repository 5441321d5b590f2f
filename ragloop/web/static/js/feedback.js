// Feedback on one answer: thumbs up/down, the issue boxes, passages of the answer marked as wrong
// (select them in the answer), a suggested correction and a document that should have been used.

import { clear, el } from "./dom.js";

const ISSUES = [
  ["wrong_answer", "Wrong answer"],
  ["missing_context", "Missing context"],
  ["wrong_source", "Wrong source"],
  ["incomplete", "Incomplete"],
];

let formCount = 0;

export function feedbackView(api, article, answerId) {
  const id = `fb${++formCount}`;
  const status = el("p", { class: "feedback-status", role: "status" });
  const passages = [];
  const passageList = el("ul", { class: "passages", "aria-label": "Passages marked as wrong" });

  const send = async (body) => {
    status.textContent = "Sending…";
    try {
      const res = await api.post(`/v1/answers/${encodeURIComponent(answerId)}/feedback`, body);
      status.textContent = res.improvement_queued
        ? "Thanks: feedback saved, and the answer was sent for a closer evaluation."
        : "Thanks: feedback saved.";
      return true;
    } catch (err) {
      status.textContent = `Feedback not saved: ${err.message}`;
      return false;
    }
  };

  const up = el("button", {
    type: "button",
    class: "thumb",
    text: "Good answer",
    on: { click: () => send({ rating: "positive" }).then((ok) => ok && up.setAttribute("aria-pressed", "true")) },
  });
  const down = el("button", {
    type: "button",
    class: "thumb",
    "aria-expanded": "false",
    "aria-controls": `${id}-form`,
    text: "Bad answer…",
    on: {
      click: () => {
        form.hidden = !form.hidden;
        down.setAttribute("aria-expanded", String(!form.hidden));
        if (!form.hidden) form.querySelector("input").focus();
      },
    },
  });

  const boxes = ISSUES.map(([value, label]) =>
    el(
      "label",
      { class: "check" },
      el("input", { type: "checkbox", name: "issues", value }),
      ` ${label}`,
    ),
  );
  const correction = el("textarea", { id: `${id}-correction`, rows: "3", maxlength: "10000" });
  const doc = el("input", { id: `${id}-doc`, maxlength: "500", placeholder: "e.g. guide/install.md" });
  const note = el("input", { id: `${id}-note`, maxlength: "2000", placeholder: "what is wrong in it (optional)" });

  // the last selection inside this answer's text: typing a note afterwards moves the focus away
  let selected = "";
  document.addEventListener("selectionchange", () => {
    const text = selectedTextIn(article);
    if (text) selected = text;
  });
  const markSelection = () => {
    const text = selectedTextIn(article) || selected;
    selected = "";
    if (!text) {
      status.textContent = "Select a passage of the answer first, then press the button.";
      return;
    }
    const entry = { text: text.slice(0, 2000) };
    if (note.value.trim()) entry.note = note.value.trim();
    passages.push(entry);
    note.value = "";
    passageList.append(el("li", { text: `“${entry.text}”${entry.note ? ` — ${entry.note}` : ""}` }));
    status.textContent = `${passages.length} passage${passages.length > 1 ? "s" : ""} marked as wrong.`;
  };

  const form = el(
    "form",
    { id: `${id}-form`, class: "feedback-form", hidden: true, "aria-label": "What is wrong with this answer" },
    el("fieldset", {}, el("legend", { text: "What is wrong?" }), ...boxes),
    el(
      "div",
      { class: "field" },
      el("label", { for: `${id}-note`, text: "Mark a wrong passage: select it in the answer above, then" }),
      note,
      el("button", { type: "button", class: "secondary", text: "Mark selection as wrong", on: { click: markSelection } }),
      passageList,
    ),
    el("div", { class: "field" }, el("label", { for: `${id}-correction`, text: "Suggest a correction" }), correction),
    el("div", { class: "field" }, el("label", { for: `${id}-doc`, text: "A document that should have been used" }), doc),
    el("button", { type: "submit", text: "Send feedback" }),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = {
      rating: "negative",
      issues: boxes.map((b) => b.querySelector("input")).filter((i) => i.checked).map((i) => i.value),
      highlighted_passages: passages.slice(),
    };
    if (correction.value.trim()) body.corrected_answer = correction.value.trim();
    if (doc.value.trim()) body.relevant_doc_ids = [doc.value.trim()];
    if (await send(body)) {
      form.hidden = true;
      down.setAttribute("aria-expanded", "false");
      down.setAttribute("aria-pressed", "true");
      passages.length = 0;
      clear(passageList);
    }
  });

  return { buttons: [up, down], form, status };
}

function selectedTextIn(article) {
  const sel = window.getSelection();
  if (!sel || sel.isCollapsed || !sel.rangeCount) return "";
  const text = article.querySelector(".answer-text");
  const range = sel.getRangeAt(0);
  if (!text || !text.contains(range.commonAncestorContainer)) return "";
  return sel.toString().trim();
}
