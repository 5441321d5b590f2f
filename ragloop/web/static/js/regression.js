// Regression runs: per metric, the trend over runs against each run's baseline and the band below it
// (the relative drop that, with a paired interval below 0, counts as a regression); a regressed run
// is drawn in red and its row highlighted.

import { chart, extent, fmt, legend, s, scale, ticks, yAxis } from "./charts.js";
import { $, clear, el, fmtTime } from "./dom.js";

let api;

export function init(client) {
  api = client;
  $("reg-refresh").addEventListener("click", () => show());
}

function comparison(run, metric) {
  return (run.comparisons || []).find((c) => c.metric === metric) || null;
}

export async function show() {
  const data = await api.get("/v1/admin/regression-runs?limit=60");
  const runs = data.runs.slice().reverse(); // oldest first, for the trend
  const charts = clear($("reg-charts"));
  const body = clear($("reg-runs"));
  if (!runs.length) {
    charts.append(el("p", { class: "muted", text: "No regression run yet (`ragloop regression run`, or the nightly task)." }));
    return;
  }
  const metrics = [...new Set(runs.flatMap((r) => [...Object.keys(r.metrics || {}), ...Object.keys(r.baseline || {})]))].sort();
  for (const m of metrics) charts.append(trend(runs, m, data.threshold));
  charts.append(legend([
    { cls: "diff-line", text: "this run" },
    { cls: "baseline", text: "baseline (last run without a regression)" },
    { cls: "band-reg", text: `${(data.threshold * 100).toFixed(0)}% band below the baseline` },
    { cls: "regressed", text: "regressed" },
  ]));
  for (const run of data.runs) body.append(row(run));
}

function trend(runs, metric, threshold) {
  const fig = el("figure", { class: "metric" });
  const failing = runs.some((r) => comparison(r, metric)?.regressed);
  fig.append(el("figcaption", { class: failing ? "failing" : "" }, el("strong", { text: metric }), failing ? " · regressed in at least one run" : ""));
  const W = 360;
  const H = 200;
  const L = 44;
  const R = W - 10;
  const T = 10;
  const B = H - 24;
  const cur = runs.map((r) => (typeof r.metrics?.[metric] === "number" ? r.metrics[metric] : null));
  const base = runs.map((r) => (typeof r.baseline?.[metric] === "number" ? r.baseline[metric] : null));
  const [y0, y1] = extent([...cur, ...base, ...base.map((b) => (b === null ? null : b * (1 - threshold)))], 0.1);
  const y = scale(y0, y1, B, T);
  const x = runs.length > 1 ? scale(0, runs.length - 1, L + 10, R - 10) : () => (L + R) / 2;
  const root = chart(W, H, `${metric} per regression run against the baseline and its ${(threshold * 100).toFixed(0)}% band`);
  root.append(yAxis(y, ticks(y0, y1, 4), L, R));
  // the band and the baseline: a step per run (each run has its own baseline)
  base.forEach((b, i) => {
    if (b === null) return;
    const half = runs.length > 1 ? (x(1) - x(0)) / 2 : 30;
    const xa = x(i) - half;
    const xb = x(i) + half;
    root.append(
      s("rect", { x: xa, width: xb - xa, y: y(b), height: Math.max(0, y(b * (1 - threshold)) - y(b)), class: "band-reg" }),
      s("line", { x1: xa, x2: xb, y1: y(b), y2: y(b), class: "baseline" }),
    );
  });
  const pts = cur.map((v, i) => (v === null ? null : `${x(i)},${y(v)}`)).filter(Boolean);
  if (pts.length > 1) root.append(s("polyline", { points: pts.join(" "), class: "diff-line" }));
  cur.forEach((v, i) => {
    if (v === null) return;
    const c = comparison(runs[i], metric);
    const bad = Boolean(c?.regressed);
    const dot = s("circle", { cx: x(i), cy: y(v), r: bad ? 6 : 3.5, class: bad ? "regressed" : "diff-dot" });
    const rel = c ? ` (${(c.relative_change * 100).toFixed(1)}% vs baseline)` : "";
    dot.append(s("title", { text: `${fmtTime(runs[i].started_at)} · ${runs[i].pipeline_version}: ${fmt(v)}${rel}${bad ? " · REGRESSED" : ""}` }));
    root.append(dot);
  });
  root.append(
    s("text", { x: L, y: H - 6, class: "axis-label", text: `run 1` }),
    s("text", { x: R, y: H - 6, "text-anchor": "end", class: "axis-label", text: `run ${runs.length}` }),
  );
  fig.append(root);
  return fig;
}

function row(run) {
  const cells = el("ul", { class: "plain small" });
  const names = [...new Set([...Object.keys(run.metrics || {}), ...Object.keys(run.baseline || {})])].sort();
  for (const m of names) {
    const c = comparison(run, m);
    const v = run.metrics?.[m];
    const b = run.baseline?.[m];
    let text = `${m} ${fmt(v)} (baseline ${fmt(b)})`;
    if (c) {
      const ci = Array.isArray(c.ci95) ? c.ci95 : [null, null];
      text += `: ${(c.relative_change * 100).toFixed(1)}%, paired difference ${fmt(c.difference)} 95% [${fmt(ci[0])}, ${fmt(ci[1])}], n=${c.n}`;
    }
    cells.append(el("li", { class: c?.regressed ? "failing" : "", text: c?.regressed ? `${text} · REGRESSED` : text }));
  }
  const status = run.regression_detected
    ? el("span", { class: "badge bad-badge", text: "regression" })
    : el("span", { class: `badge ${run.run_status === "completed" ? "ok-badge" : "warn-badge"}`, text: run.run_status });
  return el(
    "tr",
    { class: run.regression_detected ? "failing-row" : "" },
    el("td", { text: fmtTime(run.started_at) }),
    el("td", { class: "mono small", text: run.pipeline_version }),
    el("td", {}, status, run.errors ? el("span", { class: "muted small", text: ` ${run.errors} failed` }) : null),
    el("td", {}, cells),
    el("td", { text: run.rollback_triggered ? "rolled back" : "–" }),
  );
}
