// Knowledge gaps by frequency, and the golden set: its versions, difficulty mix, coverage of recent
// questions, and the review queue of nominated and adversarial candidates. The queue shows the
// question and the proposed answer only (the API gives no machine score to show), so a reviewer
// decides on the content. A golden route this server does not have yet is named, not hidden.

import { bars, fitWidth, fmt, forest } from "./charts.js";
import { $, clear, el, fmtTime } from "./dom.js";

let api;

export function init(client) {
  api = client;
  $("gaps-status").addEventListener("change", () => showGaps());
}

export async function show() {
  await Promise.all([showGaps(), showGolden()]);
}

async function optional(path) {
  try {
    return { data: await api.get(path) };
  } catch (err) {
    if (err.status === 404 && /not found/i.test(err.message)) return { missing: path.split("?")[0] };
    return { error: err.message };
  }
}

function unavailable(box, res, what) {
  if (res.missing) box.append(el("p", { class: "muted", text: `${what}: this server has no ${res.missing} route yet.` }));
  else box.append(el("p", { class: "error", text: `${what}: ${res.error}` }));
}

async function showGaps() {
  const chartBox = clear($("gaps-chart"));
  const list = clear($("gaps"));
  const status = $("gaps-status").value;
  const data = await api.get(`/v1/knowledge-gaps?status=${encodeURIComponent(status)}&limit=50`);
  if (!data.gaps.length) {
    chartBox.append(el("p", { class: "muted", text: "No knowledge gaps: every diagnosed failure had content to fix it." }));
    return;
  }
  chartBox.append(bars(
    data.gaps.slice(0, 15).map((g) => ({ label: g.representative_question, value: g.count })),
    { width: fitWidth(chartBox, 640), label: "Knowledge gaps by the number of questions that ran into them", format: (v) => `${v} question${v === 1 ? "" : "s"}` },
  ));
  chartBox.append(el("p", { class: "muted small", text: `${data.open} open gap${data.open === 1 ? "" : "s"} in all collections.` }));
  for (const g of data.gaps) {
    list.append(
      el("li", { class: "gap" },
        el("p", {}, el("strong", { text: g.representative_question }), el("span", { class: "muted small", text: ` · ${g.count} question${g.count === 1 ? "" : "s"} · ${g.collection} · ${g.status} · last ${fmtTime(g.last_seen_at)}` })),
        details("Questions", g.questions),
        details("What the missing content must say", g.ideal_answers),
        details("Questions a document filling it would answer", g.generated_questions),
        g.best_chunk_id ? el("p", { class: "muted small", text: `closest content: ${g.best_chunk_id} (score ${fmt(g.best_score)})` }) : null,
      ),
    );
  }
}

function details(title, items) {
  if (!items || !items.length) return null;
  return el("details", {}, el("summary", { text: `${title} (${items.length})` }), el("ul", {}, ...items.map((t) => el("li", { text: t }))));
}

async function showGolden() {
  const summaryBox = clear($("golden-summary"));
  const mixBox = clear($("golden-difficulty"));
  const covBox = clear($("golden-coverage"));
  const versionsBox = clear($("golden-versions"));
  const queueBox = clear($("golden-queue"));
  const [set, summary, versions, coverage, queue] = await Promise.all([
    optional("/v1/golden?include_held_out=true"),
    optional("/v1/golden/summary"),
    optional("/v1/golden/versions?limit=20"),
    optional("/v1/golden/coverage"),
    optional("/v1/golden/review?status=pending&limit=50"),
  ]);
  if (set.data) {
    const g = set.data;
    summaryBox.append(el("p", {}, el("strong", { text: `version ${g.golden_set_version}` }), ` · ${g.count} live entries, ${g.held_out} held out (never used to tune)`));
  } else unavailable(summaryBox, set, "Golden set");

  if (summary.data) {
    const m = summary.data;
    mixBox.append(el("h3", { text: "Difficulty mix against the target" }));
    mixBox.append(forest(
      m.mix.map((r) => ({
        label: `${r.difficulty} (target ${(r.target * 100).toFixed(0)}%)`,
        value: r.share,
        lo: r.ci95 ? r.ci95[0] : null,
        hi: r.ci95 ? r.ci95[1] : null,
        note: `${r.count}/${r.n}`,
        cls: r.verdict === "on_target" || r.verdict === "no_data" ? "" : "off-target",
      })),
      { label: "Share of each difficulty with its Wilson 95% interval", domain: [0, 1], width: fitWidth($("golden-summary"), 480) },
    ));
    mixBox.append(el("ul", { class: "plain small" }, ...m.mix.map((r) => el("li", { text: `${r.difficulty}: ${r.verdict.replace("_", " ")}` }))));
    summaryBox.append(el("p", { class: "muted small", text: `by source: ${Object.entries(m.by_source).map(([k, v]) => `${k} ${v}`).join(", ") || "–"}` }));
  } else if (set.data) {
    // the summary route is not there: count the mix from the entries (no interval claimed)
    const counts = {};
    for (const e of set.data.entries) counts[e.difficulty] = (counts[e.difficulty] || 0) + 1;
    mixBox.append(el("h3", { text: "Difficulty mix" }));
    mixBox.append(bars(Object.entries(counts).map(([k, v]) => ({ label: k, value: v })), { label: "Golden entries per difficulty", width: fitWidth($("golden-summary"), 480) }));
    unavailable(mixBox, summary, "Difficulty mix against the target");
  }

  covBox.append(el("h3", { text: "Coverage of recent questions" }));
  if (coverage.data) {
    const c = coverage.data;
    covBox.append(forest(
      [{ label: `within ${c.radius} of a golden question`, value: c.coverage, lo: c.ci95 ? c.ci95[0] : null, hi: c.ci95 ? c.ci95[1] : null, note: `${c.covered}/${c.n}` }],
      { label: "Share of recent production questions near a golden question, with its 95% interval", domain: [0, 1], width: fitWidth($("golden-summary"), 480) },
    ));
    covBox.append(el("p", { class: "muted small", text: `${c.n} distinct questions over ${c.days} days in ${c.collection}; ${c.uncovered_clusters.length} uncovered clusters` }));
    if (c.uncovered_clusters.length) {
      covBox.append(el("ul", { class: "small" }, ...c.uncovered_clusters.slice(0, 8).map((k) => el("li", { text: `${k.representative} (${k.size})` }))));
    }
  } else unavailable(covBox, coverage, "Coverage");

  if (versions.data) {
    const rows = versions.data.versions.map((v) =>
      el("tr", {}, el("td", { text: String(v.version) }), el("td", { text: v.kind }), el("td", { text: `+${v.added.length} / −${v.deprecated.length}` }),
        el("td", { text: v.actor }), el("td", { text: v.note || "" }), el("td", { text: fmtTime(v.created_at) })));
    versionsBox.append(el("div", { class: "table-wrap" }, el("table", {},
      el("thead", {}, el("tr", {}, ...["Version", "Change", "Entries", "By", "Note", "When"].map((h) => el("th", { scope: "col", text: h })))),
      el("tbody", {}, ...rows))));
  } else unavailable(versionsBox, versions, "Versions");

  if (queue.data) renderQueue(queueBox, queue.data);
  else unavailable(queueBox, queue, "Review queue");
}

function renderQueue(box, data) {
  if (!data.candidates.length) {
    box.append(el("p", { class: "muted", text: "No candidate waits for approval." }));
    return;
  }
  const list = el("ol", { class: "review" });
  for (const c of data.candidates) {
    const answerId = `gc-answer-${c.candidate_id}`;
    const noteId = `gc-note-${c.candidate_id}`;
    const item = el("li", { class: "candidate", dataset: { candidateId: c.candidate_id } },
      el("p", {}, el("strong", { text: "Q: " }), c.question),
      el("p", { class: "muted small", text: `${c.source} · ${c.difficulty}${c.domain_tags.length ? ` · ${c.domain_tags.join(", ")}` : ""}${c.required_doc_ids.length ? ` · needs ${c.required_doc_ids.join(", ")}` : ""}` }),
      el("label", { for: answerId, text: "Expected answer (edit before approving if it is wrong)" }),
      el("textarea", { id: answerId, rows: 3 }),
      el("label", { for: noteId, text: "Note (optional)" }),
      el("input", { id: noteId, maxlength: 2000 }),
    );
    item.querySelector("textarea").value = c.proposed_answer;
    const status = el("p", { class: "small", role: "status" });
    const decide = async (verb) => {
      const note = item.querySelector("input").value.trim() || null;
      const edited = item.querySelector("textarea").value.trim();
      const body = verb === "approve" ? { note, ...(edited !== c.proposed_answer ? { expected_answer: edited } : {}) } : { note };
      try {
        await api.post(`/v1/golden/review/${c.candidate_id}/${verb}`, body);
        $("golden-status").textContent = `${verb === "approve" ? "Approved" : "Rejected"}: ${c.question}`;
        await showGolden();
      } catch (err) {
        status.textContent = `Refused: ${err.message}`;
      }
    };
    item.append(
      el("p", { class: "actions" },
        el("button", { type: "button", text: "Approve", "aria-label": `Approve: ${c.question}`, on: { click: () => decide("approve") } }),
        el("button", { type: "button", class: "secondary danger", text: "Reject", "aria-label": `Reject: ${c.question}`, on: { click: () => decide("reject") } }),
      ),
      status,
    );
    list.append(item);
  }
  box.append(el("p", { class: "muted small", text: `${data.pending} pending` }), list);
}
