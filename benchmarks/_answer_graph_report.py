"""answer_graph.py's tables for the `latency` and `qwen` parts: percentiles, rates with
intervals, per-node and second-pass tables."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
from _common import (
    percentiles_ms,
    print_table,
)

from ragloop.agent.graph import NODES
from ragloop.agent.types import REFUSAL_REASONS
from ragloop.evaluation.stats import Estimate, bootstrap_ci


def pcts(ms: Sequence[float], ps: Sequence[float] = (50, 95, 99)) -> dict[str, float]:
    return percentiles_ms([x / 1000 for x in ms], ps) if ms else {f"p{int(p)}": math.nan for p in ps}


def rate(k: int, n: int) -> str:
    return f"{k}/{n} ({100 * k / n:.1f}%)" if n else "0/0"


def ci_text(e: Estimate) -> str:
    if e.n == 0 or math.isnan(e.value):
        return "—"
    return f"{100 * e.value:.1f}% [{100 * e.lo:.1f}, {100 * e.hi:.1f}]"


def num(x: float) -> float | None:
    """A JSON-safe number (NaN as null)."""
    return None if isinstance(x, float) and math.isnan(x) else round(x, 4)


SCOPES = (("all", None), ("in-corpus", "in_corpus"), ("out-of-corpus", "out_of_corpus"))


def summarise_questions(rows: list[dict[str, Any]], title: str, llm: bool) -> tuple[dict[str, Any], list[str]]:
    """Tables and payload for one set of answered questions (latency or qwen part)."""
    md: list[str] = []
    out: dict[str, Any] = {}
    n = len(rows)
    by_node: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        for node, ms in r["nodes"]:
            by_node[node].append(float(ms))
    node_total = sum(sum(v) for v in by_node.values()) or 1.0
    order = [k for k in NODES if k in by_node] + sorted(set(by_node) - set(NODES))
    node_rows = []
    out["per_node"] = {}
    for node in order:
        v = by_node[node]
        p = pcts(v, (50, 95))
        out["per_node"][node] = {"calls": len(v), "calls_per_question": round(len(v) / n, 3), **p}
        node_rows.append([node, len(v), round(len(v) / n, 2), p["p50"], p["p95"], round(100 * sum(v) / node_total, 1)])
    md.append(
        print_table(
            f"{title}: per-node latency over {n} questions (ms)",
            ["node", "calls", "calls/question", "p50", "p95", "share of node time %"],
            node_rows,
            1,
        )
    )

    e2e_rows = []
    out["end_to_end_ms"] = {}
    for label, kind in SCOPES:
        sel = [r for r in rows if kind is None or r["kind"] == kind]
        for measure, key in (("wall clock", "wall_ms"), ("sum of node latencies", "node_sum_ms"), ("CPU", "cpu_ms")):
            if measure != "wall clock" and kind is not None:
                continue
            vals = [r[key] for r in sel]
            p = pcts(vals)
            out["end_to_end_ms"][f"{measure}, {label}"] = {**p, "n": len(vals), "max": max(vals, default=math.nan)}
            e2e_rows.append(
                [f"{measure}, {label}", len(vals), p["p50"], p["p95"], p["p99"], max(vals, default=math.nan)]
            )
    md.append(
        print_table(
            f"{title}: end-to-end latency (ms)",
            ["measure", "questions", "p50", "p95", "p99", "max"],
            e2e_rows,
            1,
        )
    )
    md.append(
        "Wall clock: around `Agent.answer` with a fresh thread (graph compile, checkpointer and "
        "conversation log included). Sum of node latencies: the trace's per-node times only. "
        "CPU: this process's CPU time over the call, all threads (on a shared machine wall time "
        "includes waiting for a core, CPU time does not).\n"
    )

    step_rows = []
    out["steps"] = {}
    for label, kind in SCOPES:
        sel = [r for r in rows if kind is None or r["kind"] == kind]
        if not sel:
            continue
        steps = np.asarray([r["steps"] for r in sel], dtype=float)
        s = {
            "mean": round(float(steps.mean()), 2),
            "p50": float(np.percentile(steps, 50)),
            "p95": float(np.percentile(steps, 95)),
            "max": int(steps.max()),
        }
        for k in ("rewrites", "retrievals", "generations", "critique_cycles"):
            s[f"{k}_mean"] = round(float(np.mean([r["summary"][k] for r in sel])), 2)
        if llm:
            tok = np.asarray([r["tokens"] for r in sel], dtype=float)
            s |= {
                "tokens_mean": round(float(tok.mean()), 1),
                "tokens_p50": float(np.percentile(tok, 50)),
                "tokens_p95": float(np.percentile(tok, 95)),
                "model_calls_mean": round(float(np.mean([r["model_calls"] for r in sel])), 2),
            }
        out["steps"][label] = s
        row: list[object] = [label, len(sel), s["mean"], s["p50"], s["p95"], s["max"]]
        row += [s["rewrites_mean"], s["retrievals_mean"], s["generations_mean"], s["critique_cycles_mean"]]
        if llm:
            row += [s["model_calls_mean"], s["tokens_mean"], s["tokens_p50"], s["tokens_p95"]]
        step_rows.append(row)
    headers = [
        "questions",
        "n",
        "steps mean",
        "p50",
        "p95",
        "max",
        "rewrites",
        "retrievals",
        "generations",
        "critiques",
    ]
    if llm:
        headers += ["model calls", "tokens mean", "tokens p50", "tokens p95"]
    md.append(print_table(f"{title}: steps per question (node runs; node counts are means)", headers, step_rows, 2))

    reasons = Counter((r["termination_reason"], r["kind"]) for r in rows)
    n_kind = Counter(r["kind"] for r in rows)
    term_rows = []
    for reason in sorted({k for k, _ in reasons}, key=lambda x: (x in REFUSAL_REASONS, x)):
        term_rows.append(
            [
                reason,
                "refusal" if reason in REFUSAL_REASONS else "answer",
                rate(reasons[(reason, "in_corpus")], n_kind["in_corpus"]),
                rate(reasons[(reason, "out_of_corpus")], n_kind["out_of_corpus"]),
            ]
        )
    out["termination_reasons"] = {f"{k}|{kind}": v for (k, kind), v in sorted(reasons.items())}
    md.append(
        print_table(f"{title}: termination reasons", ["reason", "ends in", "in-corpus", "out-of-corpus"], term_rows)
    )

    verdicts = Counter((r["first_verdict"], r["kind"]) for r in rows)
    v_rows = []
    for label, kind in SCOPES[1:]:
        sel = [r for r in rows if r["kind"] == kind]
        grades = [r["max_grade"] for r in sel if r["max_grade"] is not None]
        v_rows.append(
            [label]
            + [rate(verdicts[(v, kind)], len(sel)) for v in ("CORRECT", "AMBIGUOUS", "INCORRECT")]
            + [round(float(np.median(grades)), 3) if grades else None]
        )
    md.append(
        print_table(
            f"{title}: first grading verdict, and the median of each question's max chunk grade",
            ["questions", "CORRECT", "AMBIGUOUS", "INCORRECT", "median max grade"],
            v_rows,
        )
    )

    ref_rows = []
    out["refusal"] = {}
    groups: list[tuple[str, list[dict[str, Any]], str]] = [
        (
            "out-of-corpus",
            [r for r in rows if r["kind"] == "out_of_corpus"],
            "refused = correct refusal",
        ),
        (
            "  of which phrased with programming words",
            [r for r in rows if r["kind"] == "out_of_corpus" and r["source"].endswith("near")],
            "the hard kind",
        ),
        (
            "  of which general topics",
            [r for r in rows if r["kind"] == "out_of_corpus" and not r["source"].endswith("near")],
            "the easy kind",
        ),
        (
            "in-corpus",
            [r for r in rows if r["kind"] == "in_corpus"],
            "no gold answers: a refusal here is likely a false refusal",
        ),
    ]
    for label, sel, reading in groups:
        if not sel:
            continue
        flags = [float(r["refused"]) for r in sel]
        est = bootstrap_ci(flags)
        out["refusal"][label.strip()] = {"n": len(sel), "refused": int(sum(flags)), **est.to_json()}
        ref_rows.append([label, len(sel), int(sum(flags)), ci_text(est), reading])
    md.append(
        print_table(
            f"{title}: refusals (rate with bootstrap 95% interval)",
            ["questions", "n", "refused", "refusal rate", "reading"],
            ref_rows,
        )
    )

    def examples(sel: list[dict[str, Any]], k: int) -> list[str]:
        lines = []
        for r in sel[:k]:
            g = "—" if r["max_grade"] is None else f"{r['max_grade']:.2f}"
            text = " ".join(r["answer"].split())[:160]
            lines.append(f"- {r['question']} — {r['termination_reason']}, max grade {g}: {text}")
        return lines

    refused_in = [r for r in rows if r["kind"] == "in_corpus" and r["refused"]]
    answered_out = [r for r in rows if r["kind"] == "out_of_corpus" and not r["refused"]]
    if refused_in:
        md.append(f"In-corpus questions refused (first {min(10, len(refused_in))} of {len(refused_in)}):\n")
        md += [*examples(refused_in, 10), ""]
    if answered_out:
        md.append(f"Out-of-corpus questions answered (first {min(10, len(answered_out))} of {len(answered_out)}):\n")
        md += [*examples(answered_out, 10), ""]
    return out, md


def second_pass_table(title: str, runs: list[list[dict[str, Any]]], cache: list[dict[str, Any]]) -> list[str]:
    rows = []
    first = runs[0]
    for k, run in enumerate(runs):
        wall = pcts([r["wall_ms"] for r in run])
        nodes = pcts([r["node_sum_ms"] for r in run])
        grade = pcts([ms for r in run for node, ms in r["nodes"] if node == "grade"], (50, 95))
        same = sum(a["refused"] == b["refused"] and a["answer"] == b["answer"] for a, b in zip(first, run, strict=True))
        hit = cache[k]["hit_rate"]
        rows.append(
            [
                k + 1,
                "—" if hit is None else f"{100 * hit:.0f}%",
                wall["p50"],
                wall["p95"],
                wall["p99"],
                nodes["p99"],
                grade["p50"],
                grade["p95"],
                f"{same}/{len(run)}",
            ]
        )
    return [
        print_table(
            f"{title}: the same questions again (pass 2+: every sentence vector cached), ms",
            [
                "pass",
                "embedding cache hits",
                "wall p50",
                "wall p95",
                "wall p99",
                "node-sum p99",
                "grade p50",
                "grade p95",
                "same answer as pass 1",
            ],
            rows,
            1,
        )
    ]
