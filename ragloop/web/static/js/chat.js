// The chat page: sign in with a key, ask and follow up (answers stream in), past conversations,
// trace and feedback per answer, document upload.

import { Api } from "./api.js";
import { renderAnswer, turnView } from "./answer.js";
import { $, clear, el, fmtTime, randomId } from "./dom.js";
import { feedbackView } from "./feedback.js";
import { loadTrace } from "./trace.js";
import { setupUpload } from "./upload.js";

const api = new Api("ragloop.key");
const SESSION = "ragloop.session";
const TITLES = "ragloop.titles";
const COLLECTION = "ragloop.collection";

let busy = false;

function titles() {
  try {
    return JSON.parse(sessionStorage.getItem(TITLES) || "{}");
  } catch {
    return {};
  }
}

function rememberTitle(sessionId, question) {
  const t = titles();
  if (!t[sessionId]) {
    t[sessionId] = question.slice(0, 80);
    sessionStorage.setItem(TITLES, JSON.stringify(t));
  }
}

function session() {
  let id = sessionStorage.getItem(SESSION);
  if (!id) {
    id = randomId("web-");
    sessionStorage.setItem(SESSION, id);
  }
  return id;
}

function showConversationId() {
  $("conv-id").textContent = `conversation ${session()}`;
}

function collection() {
  return $("collection").value.trim();
}

// ------------------------------------------------------------------ sign in

async function signIn(key) {
  api.key = key;
  try {
    await api.get("/v1/conversations?limit=1");
  } catch (err) {
    api.key = null;
    throw err;
  }
  let role = "user";
  try {
    await api.get("/v1/pipeline/versions");
    role = "admin";
  } catch {
    role = "user";
  }
  const keyId = (/^rlk_([0-9a-f]+)_/.exec(key) || [])[1] || "";
  $("who-text").textContent = `${role} key ${keyId}`;
  $("who").hidden = false;
  $("signin").hidden = true;
  $("app").hidden = false;
  showConversationId();
  const rows = await refreshConversations();
  // a reload keeps the tab's conversation: show its turns again
  if (rows && rows.some((r) => r.session_id === session())) await openConversation(session());
  $("question").focus();
}

function signOut() {
  api.key = null;
  sessionStorage.removeItem(SESSION);
  $("who").hidden = true;
  $("app").hidden = true;
  $("signin").hidden = false;
  clear($("turns"));
  $("key").value = "";
  $("key").focus();
}

// ------------------------------------------------------------------ conversations

async function refreshConversations() {
  const list = $("conversations");
  const status = $("conv-status");
  let rows;
  try {
    rows = await api.get("/v1/conversations?limit=50");
  } catch (err) {
    status.textContent = `Conversations: ${err.message}`;
    return null;
  }
  const known = titles();
  clear(list);
  status.textContent = rows.length ? "" : "No conversations yet.";
  for (const row of rows) {
    const current = row.session_id === session();
    const label = known[row.session_id] || `Conversation of ${fmtTime(row.first_at)}`;
    list.append(
      el(
        "li",
        { class: current ? "current" : "" },
        el("button", {
          type: "button",
          class: "conv-open",
          "aria-current": current ? "true" : undefined,
          text: label,
          title: row.session_id,
          on: { click: () => openConversation(row.session_id) },
        }),
        el("span", { class: "muted small", text: `${row.turns} turn${row.turns === 1 ? "" : "s"} · ${fmtTime(row.last_at)}` }),
        el("button", {
          type: "button",
          class: "link danger",
          "aria-label": `Delete conversation: ${label}`,
          text: "Delete",
          on: { click: () => deleteConversation(row.session_id, label) },
        }),
      ),
    );
  }
  return rows;
}

async function openConversation(sessionId) {
  sessionStorage.setItem(SESSION, sessionId);
  showConversationId();
  const turns = $("turns");
  clear(turns);
  try {
    const conv = await api.get(`/v1/conversations/${encodeURIComponent(sessionId)}`);
    for (const t of conv.turns) {
      if (t.question) rememberTitle(sessionId, t.question);
      const view = turnView(t.question);
      turns.append(view.li);
      view.done();
      renderAnswer(view.article, t, extras(view.article, t.answer_id));
    }
  } catch (err) {
    $("ask-status").textContent = `Could not open the conversation: ${err.message}`;
  }
  await refreshConversations();
  $("question").focus();
}

async function deleteConversation(sessionId, label) {
  if (!window.confirm(`Delete “${label}”? Its answers, memory and evaluations go too.`)) return;
  try {
    await api.del(`/v1/conversations/${encodeURIComponent(sessionId)}`);
    $("conv-status").textContent = "Conversation deleted.";
  } catch (err) {
    $("conv-status").textContent = `Not deleted: ${err.message}`;
  }
  if (sessionId === session()) newConversation();
  await refreshConversations();
}

function newConversation() {
  sessionStorage.setItem(SESSION, randomId("web-"));
  showConversationId();
  clear($("turns"));
  refreshConversations();
  $("question").focus();
}

// ------------------------------------------------------------------ asking

function extras(article, answerId) {
  const fb = feedbackView(api, article, answerId);
  const panel = el("div", { class: "trace", hidden: true, id: `trace-${answerId}` });
  let loaded = false;
  const toggle = el("button", {
    type: "button",
    class: "secondary trace-toggle",
    "aria-expanded": "false",
    "aria-controls": panel.id,
    text: "Show trace",
    on: {
      click: async () => {
        panel.hidden = !panel.hidden;
        toggle.setAttribute("aria-expanded", String(!panel.hidden));
        toggle.textContent = panel.hidden ? "Show trace" : "Hide trace";
        if (!panel.hidden && !loaded) {
          loaded = true;
          try {
            await loadTrace(api, answerId, panel);
          } catch (err) {
            loaded = false;
            clear(panel).append(el("p", { class: "error", text: `Trace: ${err.message}` }));
          }
        }
      },
    },
  });
  return el("div", { class: "answer-extras" }, el("div", { class: "actions" }, ...fb.buttons, toggle), fb.status, fb.form, panel);
}

async function ask(question) {
  if (busy) return;
  busy = true;
  $("ask-button").disabled = true;
  const sessionId = session();
  rememberTitle(sessionId, question);
  const view = turnView(question);
  $("turns").append(view.li);
  view.li.scrollIntoView({ block: "end" });
  $("ask-status").textContent = "Answering…";
  const body = { question, session_id: sessionId };
  if (collection()) body.collection = collection();
  let answered = false;
  try {
    await api.stream("/v1/query?stream=true", body, (name, data) => {
      if (name === "node") view.step(data);
      else if (name === "token") view.token(data.text || "");
      else if (name === "answer") {
        answered = true;
        view.done();
        renderAnswer(view.article, data, extras(view.article, data.answer_id));
        $("ask-status").textContent = data.refused ? "Refused: not found in the documents." : "Answered.";
      } else if (name === "error") view.fail(`${data.detail || "the answer failed"} (HTTP ${data.status})`);
    });
    if (!answered && view.article.classList.contains("pending")) view.fail("the stream ended without an answer");
    if (!answered) $("ask-status").textContent = "No answer.";
  } catch (err) {
    view.fail(err.message);
    $("ask-status").textContent = "";
  } finally {
    busy = false;
    $("ask-button").disabled = false;
  }
  await refreshConversations();
}

// ------------------------------------------------------------------ wiring

function main() {
  $("signin-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    $("signin-error").textContent = "";
    try {
      await signIn($("key").value.trim());
    } catch (err) {
      $("signin-error").textContent = `Sign-in failed: ${err.message}`;
    }
  });
  $("sign-out").addEventListener("click", signOut);
  $("new-conv").addEventListener("click", newConversation);
  $("collection").value = sessionStorage.getItem(COLLECTION) || "";
  $("collection").addEventListener("change", () => sessionStorage.setItem(COLLECTION, collection()));
  const q = $("question");
  $("ask-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = q.value.trim();
    if (!text || busy) return;
    q.value = "";
    ask(text);
  });
  q.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("ask-form").requestSubmit();
    }
  });
  setupUpload(api, collection);
  if (api.key) {
    signIn(api.key).catch(() => signOut());
  } else {
    $("signin").hidden = false;
  }
}

main();
