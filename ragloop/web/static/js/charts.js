// Charts as inline SVG built node by node (no library, no markup strings): labels go in as text nodes,
// so a question or a document title used as a label shows as those characters. Every chart has a
// <title> and an aria-label naming what it shows; the numbers are also in the tables beside it.

const NS = "http://www.w3.org/2000/svg";

export function s(tag, attrs = {}, ...children) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") node.textContent = String(v);
    else node.setAttribute(k, String(v));
  }
  for (const c of children.flat()) if (c) node.append(c);
  return node;
}

export function chart(width, height, label) {
  const root = s("svg", {
    viewBox: `0 0 ${width} ${height}`,
    width, // its natural size (12px text) on a wide screen; CSS shrinks it to fit a narrow one
    role: "img",
    "aria-label": label,
    class: "chart",
    preserveAspectRatio: "xMinYMin meet",
  });
  root.append(s("title", { text: label }));
  return root;
}

export function scale(d0, d1, r0, r1) {
  const span = d1 - d0 || 1;
  return (v) => r0 + ((v - d0) / span) * (r1 - r0);
}

export function extent(values, pad = 0.05) {
  const finite = values.filter((v) => v !== null && v !== undefined && Number.isFinite(v));
  if (!finite.length) return [0, 1];
  let lo = Math.min(...finite);
  let hi = Math.max(...finite);
  if (lo === hi) {
    lo -= 0.5 * (Math.abs(lo) || 1);
    hi += 0.5 * (Math.abs(hi) || 1);
  }
  const p = (hi - lo) * pad;
  return [lo - p, hi + p];
}

export function ticks(lo, hi, count = 4) {
  const step = niceStep((hi - lo) / count);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toFixed(10)));
  return out;
}

function niceStep(raw) {
  const p = 10 ** Math.floor(Math.log10(raw || 1));
  const m = raw / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

export function fmt(v, digits = 3) {
  if (v === null || v === undefined || !Number.isFinite(Number(v))) return "–";
  const x = Number(v);
  return Math.abs(x) >= 100 ? x.toFixed(0) : x.toFixed(digits);
}

// A y axis with grid lines at `ticks` (x0..x1 wide) and their labels on the left.
export function yAxis(y, values, x0, x1, format = (v) => fmt(v, 2)) {
  const g = s("g", { class: "axis" });
  for (const v of values) {
    g.append(
      s("line", { x1: x0, x2: x1, y1: y(v), y2: y(v), class: "grid" }),
      s("text", { x: x0 - 6, y: y(v) + 4, "text-anchor": "end", text: format(v) }),
    );
  }
  return g;
}

// A horizontal "forest" row: a point with its interval whiskers on a shared x scale.
export function interval(x, yMid, est, cls) {
  const g = s("g", { class: cls });
  if (est.lo !== null && est.lo !== undefined && est.hi !== null && est.hi !== undefined) {
    g.append(
      s("line", { x1: x(est.lo), x2: x(est.hi), y1: yMid, y2: yMid, class: "whisker" }),
      s("line", { x1: x(est.lo), x2: x(est.lo), y1: yMid - 5, y2: yMid + 5, class: "whisker" }),
      s("line", { x1: x(est.hi), x2: x(est.hi), y1: yMid - 5, y2: yMid + 5, class: "whisker" }),
    );
  }
  if (est.value !== null && est.value !== undefined && Number.isFinite(est.value)) {
    g.append(s("circle", { cx: x(est.value), cy: yMid, r: 5, class: "dot" }));
  }
  return g;
}

// Rows of {label, value, lo, hi, note, cls}: each a labelled point with its 95% interval on one x axis.
export function forest(rows, { label, domain, reference = null, width = 640 }) {
  const rowH = 30;
  const left = Math.min(280, Math.max(120, width * 0.45));
  const right = width - 70;
  const height = rows.length * rowH + 34;
  const root = chart(width, height, label);
  const all = rows.flatMap((r) => [r.value, r.lo, r.hi]);
  if (reference !== null) all.push(reference);
  const [d0, d1] = domain || extent(all, 0.08);
  const x = scale(d0, d1, left, right);
  const axis = s("g", { class: "axis" });
  for (const t of ticks(d0, d1, 4)) {
    axis.append(
      s("line", { x1: x(t), x2: x(t), y1: 6, y2: height - 22, class: "grid" }),
      s("text", { x: x(t), y: height - 6, "text-anchor": "middle", text: fmt(t, 2) }),
    );
  }
  root.append(axis);
  if (reference !== null && reference >= d0 && reference <= d1) {
    root.append(s("line", { x1: x(reference), x2: x(reference), y1: 4, y2: height - 22, class: "reference" }));
  }
  rows.forEach((r, i) => {
    const y = 8 + i * rowH + rowH / 2;
    root.append(
      s("text", { x: left - 8, y: y + 4, "text-anchor": "end", class: "row-label", text: clip(r.label, Math.floor(left / 6.5)) }),
      interval(x, y, r, `est ${r.cls || ""}`),
      s("text", { x: right + 6, y: y + 4, class: "row-note", text: r.note || "" }),
    );
  });
  return root;
}

export function clip(text, n) {
  const t = String(text ?? "");
  return t.length > n ? `${t.slice(0, n - 1)}…` : t;
}

// Horizontal bars: rows of {label, value, cls}; the value printed at the bar's end.
export function bars(rows, { label, width = 640, max = null, format = (v) => String(v) }) {
  const rowH = 24;
  const left = Math.min(300, Math.max(120, width * 0.45));
  const right = width - 50;
  const height = rows.length * rowH + 8;
  const root = chart(width, height, label);
  const top = max ?? Math.max(1, ...rows.map((r) => r.value));
  const x = scale(0, top, left, right);
  rows.forEach((r, i) => {
    const y = 4 + i * rowH;
    root.append(
      s("text", { x: left - 8, y: y + rowH / 2 + 4, "text-anchor": "end", class: "row-label", text: clip(r.label, Math.floor(left / 6.5)) }),
      s("rect", { x: left, y: y + 4, width: Math.max(1, x(r.value) - left), height: rowH - 8, rx: 3, class: `bar ${r.cls || ""}` }),
      s("text", { x: x(r.value) + 5, y: y + rowH / 2 + 4, class: "row-note", text: format(r.value) }),
    );
  });
  return root;
}

// A legend line under a chart: [{cls, text}]
export function legend(items) {
  const ul = document.createElement("ul");
  ul.className = "legend";
  for (const it of items) {
    const li = document.createElement("li");
    const sw = document.createElement("span");
    sw.className = `swatch ${it.cls}`;
    sw.setAttribute("aria-hidden", "true");
    li.append(sw, document.createTextNode(it.text));
    ul.append(li);
  }
  return ul;
}

// The width to draw at: `preferred`, or the box's own width on a narrower screen (so the labels
// keep their 12px instead of being scaled down with the whole picture). Never under 300.
export function fitWidth(box, preferred) {
  const w = box && box.clientWidth ? Math.floor(box.clientWidth) : preferred;
  return Math.max(300, Math.min(preferred, w));
}
