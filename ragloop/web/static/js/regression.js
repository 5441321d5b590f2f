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
  const data = await api.get("/v1/regression/runs?limit=60");
  const runs = data.runs; // oldest first
  const charts = clear($("reg-charts"));
  const body = clear($("reg-runs"));
  if (!runs.length) {
    charts.append(el("p", { class: "muted", text: "No regression run yet (ragloop regress run, or the scheduled task)." }));
    clear($("reg-legend"));
    return;
  }
  const metrics = data.metrics.filter((m) => runs.some((r) => r.metrics?.[m]?.n));
  for (const m of metrics) charts.append(trend(runs, m, data.threshold));
  clear($("reg-legend")).append(legend([
    { cls: "diff-line", text: "this run's mean with its 95% interval" },
    { cls: "baseline", text: "baseline (the last run without a regression)" },
    { cls: "band-reg", text: `${(data.threshold * 100).toFixed(0)}% band below the baseline` },
    { cls: "regressed", text: "regressed" },
  ]));
  for (const run of runs.slice().reverse()) body.append(row(run, metrics));
}

function trend(runs, metric, threshold) {
  const fig = el("figure", { class: "metric" });
  const failing = runs.some((r) => comparison(r, metric)?.regressed);
  fig.append(el("figcaption", { class: failing ? "failing" : "" }, el("strong", { text: metric }), failing ? " · regressed" : ""));
  const W = 360;
  const H = 200;
  const L = 44;
  const R = W - 10;
  const T = 10;
  const B = H - 24;
  const stat = runs.map((r) => r.metrics?.[metric] || { n: 0, mean: null, ci95: null });
  const base = runs.map((r) => comparison(r, metric)?.baseline_mean ?? null);
  const values = stat.flatMap((m) => [m.mean, ...(m.ci95 || [])]);
  let [y0, y1] = extent([...values, ...base, ...base.map((b) => (b === null ? null : b * (1 - threshold)))], 0.1);
  if (y1 - y0 < 0.2) [y0, y1] = [Math.max(0, y1 - 0.2), Math.max(y1, 0.2)]; // the band is a 2% sliver, not the whole chart
  const y = scale(y0, y1, B, T);
  const x = runs.length > 1 ? scale(0, runs.length - 1, L + 12, R - 12) : () => (L + R) / 2;
  const half = runs.length > 1 ? (x(1) - x(0)) / 2 : 40;
  const root = chart(W, H, `${metric} per regression run against the baseline and its ${(threshold * 100).toFixed(0)}% band`);
  root.append(yAxis(y, ticks(y0, y1, 4), L, R));
  base.forEach((b, i) => {
    if (b === null) return;
    const xa = Math.max(L, x(i) - half);
    const xb = Math.min(R, x(i) + half);
    root.append(
      s("rect", { x: xa, width: xb - xa, y: y(b), height: Math.max(0, y(b * (1 - threshold)) - y(b)), class: "band-reg" }),
      s("line", { x1: xa, x2: xb, y1: y(b), y2: y(b), class: "baseline" }),
    );
  });
  const pts = stat.map((m, i) => (m.mean === null ? null : `${x(i)},${y(m.mean)}`)).filter(Boolean);
  if (pts.length > 1) root.append(s("polyline", { points: pts.join(" "), class: "diff-line" }));
  stat.forEach((m, i) => {
    if (m.mean === null) return;
    const c = comparison(runs[i], metric);
    const bad = Boolean(c?.regressed);
    if (m.ci95) root.append(s("line", { x1: x(i), x2: x(i), y1: y(m.ci95[0]), y2: y(m.ci95[1]), class: bad ? "whisker regressed-line" : "whisker" }));
    const dot = s("circle", { cx: x(i), cy: y(m.mean), r: bad ? 6 : 4, class: bad ? "regressed" : "diff-dot" });
    const rel = c ? `, ${(c.relative_change * 100).toFixed(1)}% vs baseline ${fmt(c.baseline_mean)}` : "";
    dot.append(s("title", { text: `${fmtTime(runs[i].started_at)} · ${runs[i].pipeline_version}: ${fmt(m.mean)} (n=${m.n}${rel})${bad ? " · REGRESSED" : ""}` }));
    root.append(dot);
  });
  root.append(
    s("text", { x: L, y: H - 6, class: "axis-label", text: "oldest run" }),
    s("text", { x: R, y: H - 6, "text-anchor": "end", class: "axis-label", text: "newest" }),
  );
  fig.append(root);
  return fig;
}

function row(run, metrics) {
  const cells = el("ul", { class: "plain small" });
  for (const m of metrics) {
    const st = run.metrics?.[m];
    if (!st || !st.n) continue;
    const c = comparison(run, m);
    const ci = st.ci95 ? ` [${fmt(st.ci95[0])}, ${fmt(st.ci95[1])}]` : "";
    let text = `${m} ${fmt(st.mean)}${ci} n=${st.n}`;
    if (c) {
      const d = Array.isArray(c.ci95) ? c.ci95 : [null, null];
      text += ` · baseline ${fmt(c.baseline_mean)}, ${(c.relative_change * 100).toFixed(1)}%, paired difference ${fmt(c.difference)} 95% [${fmt(d[0])}, ${fmt(d[1])}] over ${c.n}`;
      if (Number.isInteger(c.worse)) text += ` (${c.worse} worse, ${c.better} better)`;
    }
    cells.append(el("li", { class: c?.regressed ? "failing" : "", text: c?.regressed ? `${text} · REGRESSED` : text }));
  }
  const status = run.regression_detected
    ? el("span", { class: "badge bad-badge", text: "regression" })
    : el("span", { class: `badge ${run.run_status === "completed" ? "ok-badge" : "warn-badge"}`, text: run.run_status });
  return el(
    "tr",
    { class: run.regression_detected ? "failing-row" : "" },
    el("td", { text: run.started_at ? fmtTime(run.started_at) : "–" }),
    el("td", { class: "mono small", text: run.pipeline_version }),
    el("td", {}, status, run.errors ? el("span", { class: "muted small", text: ` ${run.errors} of ${run.entries} failed` }) : null),
    el("td", {}, cells),
    el("td", { text: run.rollback_triggered ? "rolled back" : "–" }),
  );
}
