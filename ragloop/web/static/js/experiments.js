// The experiments page: every experiment, one's results per variant with 95% intervals, its
// always-valid confidence sequence drawn over time, guardrails, promote / stop / reject, and a form
// that starts a new one.

import { chart, extent, fitWidth, fmt, forest, legend, s, scale, ticks, yAxis } from "./charts.js";
import { confirmAction } from "./confirm.js";
import { $, clear, el, fmtTime } from "./dom.js";

const METRICS = ["tier1_score", "faithfulness", "answer_relevancy", "context_precision", "context_recall", "latency_p99", "refusal_rate", "user_rating"];
const DEFAULT_GUARDS = ["faithfulness", "latency_p99"];
let api;
let openId = null;
let openRunning = false;
const LIVE_MS = 30_000;

export function init(client) {
  api = client;
  const primary = $("exp-primary");
  for (const m of METRICS) primary.append(el("option", { value: m, text: m, selected: m === "tier1_score" || undefined }));
  const guards = $("exp-guards");
  for (const m of METRICS) {
    const id = `exp-guard-${m}`;
    guards.append(
      el("input", { type: "checkbox", id, value: m, checked: DEFAULT_GUARDS.includes(m) || undefined }),
      el("label", { for: id, class: "check", text: m }),
    );
  }
  $("exp-create").addEventListener("submit", create);
  $("exp-refresh").addEventListener("click", () => show());
  $("exp-seq-metric").addEventListener("change", () => openId && drawSequence(openId, $("exp-seq-metric").value));
  // live results: a running experiment open on a visible page is looked at again every 30 s
  setInterval(() => {
    if (openRunning && openId && !$("page-experiments").hidden && document.visibilityState === "visible" && $("exp-live").checked) {
      openExperiment(openId).catch(() => {});
    }
  }, LIVE_MS);
}

export async function show() {
  const rows = await api.get("/v1/experiments");
  const body = clear($("exp-list"));
  if (!rows.length) {
    body.append(el("tr", {}, el("td", { colspan: 8, class: "muted", text: "No experiments yet: start one below." })));
  }
  for (const x of rows) {
    body.append(
      el(
        "tr",
        { class: x.experiment_id === openId ? "current" : "" },
        el("td", { text: x.name }),
        el("td", {}, statusBadge(x.status)),
        el("td", { class: "mono small", text: `${x.control_version || "–"} → ${x.treatment_version || "–"}` }),
        el("td", { text: `${(x.traffic_split * 100).toFixed(1)}%` }),
        el("td", { text: x.primary_metric }),
        el("td", { text: x.recommendation || "–" }),
        el("td", { text: x.started_at ? fmtTime(x.started_at) : "–" }),
        el("td", {}, el("button", {
          type: "button",
          class: "link",
          text: "results",
          "aria-label": `Results of ${x.name}`,
          on: { click: () => openExperiment(x.experiment_id) },
        })),
      ),
    );
  }
  if (!openId && rows.length) openId = rows[0].experiment_id;
  if (openId) await openExperiment(openId);
}

function statusBadge(status) {
  const cls = { running: "ok-badge", promoted: "ok-badge", halted: "bad-badge", rejected: "warn-badge", stopped: "warn-badge" }[status] || "muted-badge";
  return el("span", { class: `badge ${cls}`, text: status });
}

async function openExperiment(id) {
  if (id !== openId) $("exp-status").textContent = "";
  openId = id;
  const [x, res] = await Promise.all([api.get(`/v1/experiments/${id}`), api.get(`/v1/experiments/${id}/results`)]);
  openRunning = x.status === "running";
  $("exp-detail").hidden = false;
  $("exp-detail-title").textContent = `Results: ${x.name}`;
  renderSummary(x, res);
  renderMetrics(res);
  renderGuardrails(x, res);
  renderActions(x);
  const shown = $("exp-seq-metric").value;
  const select = clear($("exp-seq-metric"));
  const names = [...new Set([x.primary_metric, ...x.guardrail_metrics])];
  for (const m of names) select.append(el("option", { value: m, text: m === x.primary_metric ? `${m} (primary)` : m }));
  const metric = names.includes(shown) ? shown : x.primary_metric;
  select.value = metric;
  await drawSequence(id, metric);
}

function renderSummary(x, res) {
  const box = clear($("exp-summary"));
  const p = res.p_value || {};
  box.append(
    el("p", {}, statusBadge(res.status || x.status), " ", el("strong", { text: `recommendation: ${res.recommendation || "–"}` })),
    el("dl", { class: "meta" },
      el("dt", { text: "control → treatment" }), el("dd", { class: "mono", text: `${x.control_version} → ${x.treatment_version}` }),
      el("dt", { text: "answers" }), el("dd", { text: `control ${res.samples?.control ?? 0}, treatment ${res.samples?.treatment ?? 0} (decision needs ${x.min_sample_size} per arm)` }),
      el("dt", { text: "always-valid p" }), el("dd", { text: `${fmt(p.always_valid)} (Welch's ${fmt(p.welch)}, for reference only: it is not valid under repeated looks)` }),
      el("dt", { text: "duration" }), el("dd", { text: `${hours(res.duration_s)} of at least ${hours(x.min_duration_s)}` }),
      el("dt", { text: "last look" }), el("dd", { text: res.aggregated_at ? fmtTime(res.aggregated_at) : "never aggregated" }),
    ),
  );
  if (res.reasons?.length) box.append(el("ul", { class: "small" }, ...res.reasons.map((r) => el("li", { text: r }))));
  if (x.status_reason) box.append(el("p", { class: "muted", text: `status reason: ${x.status_reason}` }));
}

function hours(sec) {
  if (sec === null || sec === undefined) return "–";
  return sec >= 3600 ? `${(sec / 3600).toFixed(1)} h` : `${Math.round(sec / 60)} min`;
}

function armRow(name, arm, cls) {
  const ci = arm.ci95 || {};
  return { label: name, value: arm.mean, lo: ci.lo ?? null, hi: ci.hi ?? null, note: `n=${arm.n}`, cls };
}

function renderMetrics(res) {
  const box = clear($("exp-metrics"));
  const entries = Object.entries(res.metrics || {});
  if (!entries.length) {
    box.append(el("p", { class: "muted", text: "No scores yet: each arm needs answers (and their evaluations)." }));
    return;
  }
  for (const [name, m] of entries) {
    const fig = el("figure", { class: "metric" });
    const better = m.direction === "lower_is_better" ? "lower is better" : "higher is better";
    fig.append(el("figcaption", {}, el("strong", { text: name }), ` (${better})`));
    fig.append(forest([armRow("control", m.control, "control"), armRow("treatment", m.treatment, "treatment")], {
      width: fitWidth(box, 640),
      label: `${name}: mean per variant with 95% intervals`,
    }));
    const c = m.comparison;
    if (c) {
      const av = c.always_valid_ci || {};
      const w = (c.welch || {}).ci || {};
      fig.append(el("p", { class: "small", text: `treatment − control ${fmt(c.difference)}; always-valid 95% [${fmt(av.lo)}, ${fmt(av.hi)}]${c.burned_in ? "" : " (before burn-in: no statement yet)"}; Welch 95% [${fmt(w.lo)}, ${fmt(w.hi)}]` }));
    } else {
      fig.append(el("p", { class: "small muted", text: "fewer than 2 scores in an arm: nothing to compare yet" }));
    }
    box.append(fig);
  }
}

function renderGuardrails(x, res) {
  const box = clear($("exp-guardrails"));
  const list = el("ul", { class: "guards" });
  for (const name of x.guardrail_metrics) {
    const g = (res.metrics?.[name] || {}).guardrail;
    const state = !g ? ["muted-badge", "not checked yet"] : g.breached ? ["bad-badge", "breached"] : ["ok-badge", "holding"];
    list.append(el("li", {}, el("span", { class: `badge ${state[0]}`, text: state[1] }), ` ${name}`, g?.reason ? el("span", { class: "muted small", text: ` · ${g.reason}` }) : null));
  }
  if (!x.guardrail_metrics.length) list.append(el("li", { class: "muted", text: "no guardrails" }));
  box.append(list);
}

function renderActions(x) {
  const box = clear($("exp-actions"));
  if (!["running", "halted"].includes(x.status)) return;
  const act = (verb, label, text, cls) =>
    el("button", { type: "button", class: cls, text: label, on: { click: () => act2(x, verb, label, text) } });
  box.append(
    act("promote", "Promote treatment…", "The treatment becomes the active pipeline for everyone (the golden-set smoke test runs first).", ""),
    act("stop", "Stop…", "End without a verdict: everyone gets the active version again.", "secondary"),
    act("reject", "Reject…", "Keep control: the treatment is rejected.", "secondary danger"),
  );
}

async function act2(x, verb, label, text) {
  const reason = await confirmAction({ title: `${label.replace("…", "")} “${x.name}”?`, text, yes: label.replace("…", ""), reason: `manual ${verb}` });
  if (reason === null) {
    $("exp-status").textContent = "Cancelled.";
    return;
  }
  try {
    await api.post(`/v1/experiments/${x.experiment_id}/${verb}`, { reason });
    $("exp-status").textContent = `Done: ${verb} ${x.name}.`;
  } catch (err) {
    $("exp-status").textContent = `Refused: ${err.message}`;
  }
  await show();
}

async function drawSequence(id, metric) {
  const box = clear($("exp-sequence"));
  let seq;
  try {
    seq = await api.get(`/v1/admin/experiments/${id}/sequence?metric=${encodeURIComponent(metric)}&points=80`);
  } catch (err) {
    box.append(el("p", { class: "error", text: err.message }));
    return;
  }
  const pts = seq.points;
  if (!pts.length) {
    box.append(el("p", { class: "muted", text: "No comparison yet: each arm needs at least two scores." }));
    return;
  }
  box.append(sequenceChart(seq, fitWidth(box, 720)));
  box.append(legend([
    { cls: "band-av", text: "always-valid 95% confidence sequence (may be read at every look)" },
    { cls: "welch", text: "Welch 95% interval (fixed-sample; not valid under peeking)" },
    { cls: "diff-line", text: "treatment − control" },
    { cls: "effect", text: `minimum effect (${seq.min_effect})` },
  ]));
  const last = pts[pts.length - 1];
  box.append(el("p", { class: "small", text: `${pts.length} points; last at ${fmtTime(last.at)}: n = ${last.n_control} control, ${last.n_treatment} treatment; burn-in ${seq.burn_in} per arm.` }));
}

function sequenceChart(seq, W) {
  const H = 260;
  const L = 58;
  const R = W - 12;
  const T = 12;
  const B = H - 34;
  const pts = seq.points;
  const times = pts.map((p) => new Date(p.at).getTime());
  const byTime = times[times.length - 1] > times[0];
  const xs = byTime ? times : pts.map((p) => p.n_control + p.n_treatment);
  const x = scale(xs[0], xs[xs.length - 1] === xs[0] ? xs[0] + 1 : xs[xs.length - 1], L, R);
  const effect = seq.direction === "lower_is_better" ? -seq.min_effect : seq.min_effect;
  const vals = pts.flatMap((p) => [p.difference, p.welch_lo, p.welch_hi, p.always_valid_lo, p.always_valid_hi]);
  const [y0, y1] = extent([...vals, 0, effect], 0.08);
  const y = scale(y0, y1, B, T);
  const root = chart(W, H, `${seq.metric}: treatment minus control over time with its always-valid 95% confidence sequence`);
  root.append(yAxis(y, ticks(y0, y1, 5), L, R));
  const band = pts.map((p, i) => [xs[i], p]).filter(([, p]) => p.always_valid_lo !== null && p.always_valid_hi !== null);
  if (band.length) {
    const upper = band.map(([xv, p]) => `${x(xv)},${y(Math.min(p.always_valid_hi, y1))}`);
    const lower = band.slice().reverse().map(([xv, p]) => `${x(xv)},${y(Math.max(p.always_valid_lo, y0))}`);
    root.append(s("polygon", { points: [...upper, ...lower].join(" "), class: "band-av" }));
  }
  const line = (key, cls) => {
    const d = pts.map((p, i) => (p[key] === null ? null : `${x(xs[i])},${y(p[key])}`)).filter(Boolean);
    if (d.length > 1) root.append(s("polyline", { points: d.join(" "), class: cls }));
  };
  line("welch_lo", "welch");
  line("welch_hi", "welch");
  root.append(s("line", { x1: L, x2: R, y1: y(0), y2: y(0), class: "reference" }));
  root.append(s("line", { x1: L, x2: R, y1: y(effect), y2: y(effect), class: "effect" }));
  line("difference", "diff-line");
  pts.forEach((p, i) => {
    const dot = s("circle", { cx: x(xs[i]), cy: y(p.difference), r: 2.5, class: "diff-dot" });
    dot.append(s("title", { text: `${fmtTime(p.at)}: ${fmt(p.difference)} [${fmt(p.always_valid_lo)}, ${fmt(p.always_valid_hi)}], n ${p.n_control}+${p.n_treatment}` }));
    root.append(dot);
  });
  const first = byTime ? fmtTime(pts[0].at) : `${xs[0]} answers`;
  const lastLabel = byTime ? fmtTime(pts[pts.length - 1].at) : `${xs[xs.length - 1]} answers`;
  root.append(
    s("text", { x: L, y: H - 8, class: "axis-label", text: first }),
    s("text", { x: R, y: H - 8, "text-anchor": "end", class: "axis-label", text: lastLabel }),
  );
  return root;
}

async function create(event) {
  event.preventDefault();
  const status = $("exp-create-status");
  let control;
  let treatment;
  try {
    control = arm($("exp-control").value);
    treatment = arm($("exp-treatment").value);
  } catch (err) {
    status.textContent = `Not started: ${err.message}`;
    return;
  }
  const body = {
    name: $("exp-name").value.trim(),
    control,
    treatment,
    traffic_split: Number($("exp-split").value),
    min_sample_size: Math.round(Number($("exp-min-n").value)),
    min_duration: Number($("exp-min-hours").value) * 3600,
    primary_metric: $("exp-primary").value,
    min_effect: Number($("exp-min-effect").value),
    guardrail_metrics: [...document.querySelectorAll("#exp-guards input:checked")].map((i) => i.value),
  };
  try {
    const x = await api.post("/v1/experiments", body);
    status.textContent = `Started ${x.name}: ${x.control_version} → ${x.treatment_version}.`;
    openId = x.experiment_id;
    await show();
  } catch (err) {
    status.textContent = `Not started: ${err.message}`;
  }
}

function arm(text) {
  const t = text.trim();
  if (!t) return {};
  if (t.startsWith("{")) {
    try {
      return JSON.parse(t);
    } catch (err) {
      throw new Error(`the config overrides are not JSON (${err.message})`);
    }
  }
  return t;
}

