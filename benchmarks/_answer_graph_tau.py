"""answer_graph.py's `tau` part: the tau_U/tau_L refusal ablation on SQuAD 2.0 dev (the part's
rules are in answer_graph.py's docstring), and its chart."""

from __future__ import annotations

import argparse
import math
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _answer_graph_report import ci_text, num, pcts
from _common import (
    BENCH_HOME,
    REPO,
    RESULTS_DIR,
    print_table,
    timed,
)

from ragloop.config import PipelineConfig, Settings
from ragloop.evaluation.metrics.agent import ItemView
from ragloop.evaluation.metrics.answer import squad_scores
from ragloop.evaluation.report import refusal_curve
from ragloop.evaluation.runner import read_records, run_suite
from ragloop.evaluation.stats import bootstrap_ci, paired_test
from ragloop.evaluation.suites import EvalItem, Suite, squad_suite


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def tau_grid(lowers: Sequence[float], uppers: Sequence[float]) -> list[tuple[float, float]]:
    default = (PipelineConfig().agent.tau_lower, PipelineConfig().agent.tau_upper)
    pairs = {(lo, up) for lo in lowers for up in uppers if lo < up}
    pairs.add(default)
    return sorted(pairs)


def tau_name(lo: float, up: float) -> str:
    return f"tauL{lo:.2f}-tauU{up:.2f}"


def squad_parts(suite: Suite, n: int, seed: int) -> dict[str, list[EvalItem]]:
    """dev = even-indexed articles, test = odd; per part n//2 answerable + n - n//2 unanswerable."""
    articles = list(dict.fromkeys(str(i.meta["title"]) for i in suite.items))
    rank = {a: i for i, a in enumerate(articles)}
    order = {i.id: k for k, i in enumerate(suite.items)}
    out: dict[str, list[EvalItem]] = {}
    for part, parity in (("dev", 0), ("test", 1)):
        pool = [i for i in suite.items if rank[str(i.meta["title"])] % 2 == parity]
        rng = random.Random(f"{seed}:{part}")
        chosen: list[EvalItem] = []
        for kind, k in (("answerable", n // 2), ("unanswerable", n - n // 2)):
            items = [i for i in pool if i.kind == kind]
            chosen += rng.sample(items, min(k, len(items)))
        out[part] = sorted(chosen, key=lambda i: order[i.id])
    return out


def item_correct(rec: dict[str, Any]) -> bool:
    """End-to-end: unanswerable -> refused; answerable -> answered and the answer contains a gold
    span or has token F1 >= 0.5 against one."""
    refused = bool(rec.get("refused"))
    if rec.get("should_refuse"):
        return refused
    if refused:
        return False
    s = squad_scores(str(rec.get("answer") or ""), False, rec.get("answers") or [], False)
    return s.contains >= 1.0 or s.f1 >= 0.5


def tau_metrics(recs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    unans = [bool(r["should_refuse"]) for r in recs]
    refused = [bool(r["refused"]) for r in recs]
    n_un = sum(unans)
    n_ans = len(recs) - n_un
    tp = sum(u and f for u, f in zip(unans, refused, strict=True))
    n_ref = sum(refused)
    fr = n_ref - tp
    correct = [item_correct(r) for r in recs]
    ans_correct = sum(c for c, u in zip(correct, unans, strict=True) if not u)
    prec = tp / n_ref if n_ref else math.nan
    rec = tp / n_un if n_un else math.nan
    f1 = 2 * prec * rec / (prec + rec) if n_ref and tp else 0.0
    steps = [len(r.get("trace") or []) for r in recs]
    lat = [float(r.get("latency_ms") or 0.0) for r in recs]
    return {
        "n": len(recs),
        "answerable": n_ans,
        "unanswerable": n_un,
        "refused": n_ref,
        "refusal_precision": prec,
        "refusal_recall": rec,
        "refusal_f1": f1,
        "false_refusal_rate": fr / n_ans if n_ans else math.nan,
        "answer_accuracy_answerable": ans_correct / n_ans if n_ans else math.nan,
        "e2e_accuracy": sum(correct) / len(recs) if recs else math.nan,
        "steps_mean": float(np.mean(steps)) if steps else math.nan,
        "latency_ms": pcts(lat, (50, 95)),
    }


def indicator_arrays(recs: Sequence[dict[str, Any]]) -> dict[str, tuple[list[float], list[float] | None]]:
    """Per-item (numerator, denominator) for the bootstrap and paired tests."""
    un = [float(bool(r["should_refuse"])) for r in recs]
    ref = [float(bool(r["refused"])) for r in recs]
    return {
        "e2e_accuracy": ([float(item_correct(r)) for r in recs], None),
        "refusal_precision": ([u * f for u, f in zip(un, ref, strict=True)], ref),
        "refusal_recall": (ref, un),
        "false_refusal_rate": (ref, [1.0 - u for u in un]),
    }


def cheap_curve(recs: Sequence[dict[str, Any]], taus: Sequence[float]) -> dict[str, list[float]]:
    """The cheap rule "refuse iff the max grade < tau": precision/recall from `refusal_curve`, plus the
    false-refusal rate on answerable items and refusal F1."""
    prec, rec = refusal_curve(recs, taus)
    grades = [(bool(r["should_refuse"]), ItemView(r).max_grade()) for r in recs]
    n_ans = sum(not u for u, _ in grades)
    frr = [sum((not u) and (g is None or g < t) for u, g in grades) / n_ans if n_ans else math.nan for t in taus]
    f1 = [2 * p * r / (p + r) if p == p and r == r and p + r > 0 else 0.0 for p, r in zip(prec, rec, strict=True)]
    return {"tau": list(taus), "precision": prec, "recall": rec, "false_refusal_rate": frr, "f1": f1}


def pct(x: float) -> str:
    return "—" if math.isnan(x) else f"{100 * x:.1f}"


def part_tau(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    home = Path(args.tau_home).expanduser() if args.tau_home else BENCH_HOME
    settings = Settings(home=home)
    runs_dir = home / "answer_graph" / "tau"
    suite = squad_suite()
    parts = squad_parts(suite, args.tau_n, args.seed)
    items = parts["dev"] + parts["test"]
    part_of = {i.id: p for p, its in parts.items() for i in its}
    base = PipelineConfig()
    default = (base.agent.tau_lower, base.agent.tau_upper)
    grid = tau_grid(floats(args.tau_lower), floats(args.tau_upper))
    print(
        f"tau: {len(grid)} configs x {len(items)} SQuAD items (dev {len(parts['dev'])}, test {len(parts['test'])}), "
        f"{args.workers} workers, runs under {runs_dir}",
        flush=True,
    )
    t_start = time.perf_counter()
    with timed() as t_prep:  # run_suite prepares it again per config: a no-change re-ingest
        suite.prepare(settings, base).close()
    print(f"  SQuAD collection {suite.collection_name} ready in {t_prep.seconds:.0f} s", flush=True)
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    errors: dict[str, int] = {}
    run_seconds: dict[str, float] = {}
    ran_now = reused = 0
    for k, (lo, up) in enumerate(grid, 1):
        name = tau_name(lo, up)
        cfg = base.with_overrides(agent={"tau_lower": lo, "tau_upper": up})
        out_dir = runs_dir / f"{name}_{cfg.version_id}"
        last = {"t": time.perf_counter()}

        def on_item(
            rec: dict[str, Any], done: int, total: int, name: str = name, last: dict[str, float] = last
        ) -> None:
            now = time.perf_counter()
            if now - last["t"] > 60 or done == total:
                last["t"] = now
                print(f"    {name}: {done}/{total} items", flush=True)

        with timed() as t:
            res = run_suite(
                suite,
                name,
                cfg,
                out_dir,
                settings=settings,
                items=items,
                workers=args.workers,
                judge=None,
                seed=args.seed,
                on_item=on_item,
            )
        wanted = {i.id for i in items}
        recs = [r for r in read_records(out_dir / "items.jsonl") if str(r["id"]) in wanted]
        bad = [r for r in recs if r.get("error")]
        errors[name] = len(bad)
        run_seconds[name] = round(t.seconds, 1)
        ran_now += res.ran
        reused += res.skipped
        if bad:
            print(f"    {name}: {len(bad)} items FAILED, e.g. {bad[0]['error'][:200]}", flush=True)
        results[name] = {p: [r for r in recs if not r.get("error") and part_of[str(r["id"])] == p] for p in parts}
        print(
            f"  [{k}/{len(grid)}] {name}: ran {res.ran} (skipped {res.skipped} already done) in {t.seconds:.0f} s, "
            f"{t.seconds / max(res.ran, 1):.2f} s/item",
            flush=True,
        )
    wall = time.perf_counter() - t_start

    metrics = {name: {p: tau_metrics(results[name][p]) for p in parts} for name in results}
    names = [tau_name(lo, up) for lo, up in grid]
    dname = tau_name(*default)

    def key(name: str) -> tuple[bool, float, float, float]:
        m = metrics[name]["dev"]
        within = m["false_refusal_rate"] <= args.max_false_refusal
        return (within, round(m["refusal_recall"], 4), round(m["e2e_accuracy"], 4), -m["steps_mean"])

    def key_e2e(name: str) -> tuple[float, float, float]:
        m = metrics[name]["dev"]
        return (round(m["e2e_accuracy"], 4), round(m["refusal_f1"], 4), -m["steps_mean"])

    chosen = max(names, key=key)
    by_e2e = max(names, key=key_e2e)
    md: list[str] = [
        "## tau_U / tau_L ablation on SQuAD 2.0 dev (offline default graph)",
        "",
        f"{suite.description}. Split by article: dev part = even-indexed articles, test part = odd. "
        f"Sample (seed {args.seed}): per part {args.tau_n // 2} answerable + {args.tau_n - args.tau_n // 2} "
        f"unanswerable questions (dev {len(parts['dev'])}, test {len(parts['test'])} items). Each config is "
        f"`PipelineConfig()` with agent.tau_lower / agent.tau_upper set, run through `ragloop.evaluation.runner` "
        "(no judge). Unanswerable SQuAD questions are on-topic: their own paragraph is in the collection and "
        "usually retrieved, so refusing them needs reading, not retrieval.",
        "",
        "Refusal precision = refused items that are unanswerable / refused items; recall = unanswerable items "
        "refused / unanswerable items; false refusal = answerable items refused / answerable items; answer acc. = "
        "answerable items answered with a gold span in the answer or token F1 >= 0.5; e2e accuracy = that, or a "
        "refusal on an unanswerable item, over all items (balanced sample: 'always refuse' scores 50%). The answer "
        "criterion is lenient: the offline answer is up to three extracted sentences, so it contains a short gold "
        "span more easily than it would match it. Steps = mean node runs per item (the cost).",
        "",
        "tau_L is the gate (chunks below it are dropped; all below it: INCORRECT, rewrite, then refuse). tau_U "
        "only separates CORRECT from AMBIGUOUS, and with no external search configured (the offline default) both "
        "go on to refinement, so tau_U should change nothing here; the grid keeps more than one tau_U value to "
        "check that.",
        "",
    ]
    headers = ["tau_L", "tau_U", "refused", "precision %", "recall %", "F1 %", "false refusal %"]
    headers += ["answer acc. %", "e2e acc. %", "steps"]
    for p in ("dev", "test"):
        rows = []
        for (lo, up), name in zip(grid, names, strict=True):
            m = metrics[name][p]
            mark = " (default)" if name == dname else ""
            mark += " (chosen)" if name == chosen and p == "dev" else ""
            rows.append(
                [
                    f"{lo:.2f}{mark}",
                    f"{up:.2f}",
                    f"{m['refused']}/{m['n']}",
                    pct(m["refusal_precision"]),
                    pct(m["refusal_recall"]),
                    pct(m["refusal_f1"]),
                    pct(m["false_refusal_rate"]),
                    pct(m["answer_accuracy_answerable"]),
                    pct(m["e2e_accuracy"]),
                    round(m["steps_mean"], 2),
                ]
            )
        label = "selection (dev part)" if p == "dev" else "held out (test part; shown for every config, chosen on dev)"
        md.append(print_table(f"tau grid, {label}", headers, rows, 1))

    # does tau_U change anything? compare per-item outcomes across tau_U at each tau_L
    differing = texts_differ = compared = 0
    for lo in sorted({lo for lo, _ in grid}):
        same_l = [n for (l2, _), n in zip(grid, names, strict=True) if l2 == lo]
        for other in same_l[1:]:
            a_by = {str(r["id"]): r for p in parts for r in results[same_l[0]][p]}
            for p in parts:
                for r in results[other][p]:
                    ref = a_by.get(str(r["id"]))
                    if ref is not None:
                        compared += 1
                        differing += ref["refused"] != r["refused"]
                        texts_differ += ref["answer"] != r["answer"]
    if compared:
        tau_u_line = (
            f"tau_U check: over {compared} item pairs that differ only in tau_U, the refusal decision differs on "
            f"{differing} and the answer text on {texts_differ} (two runs of one config can differ too where the "
            "pipeline is not deterministic across processes)."
        )
        print(tau_u_line, flush=True)
        md += [tau_u_line, ""]

    cl, cu = grid[names.index(chosen)]
    el, eu = grid[names.index(by_e2e)]
    rule = (
        f"Rule: highest refusal recall on the dev part with a dev false-refusal rate <= "
        f"{100 * args.max_false_refusal:.0f}% (a wrongly refused answerable question costs a user more than a "
        "wrongly answered unanswerable one, which still carries citations to check); ties: higher end-to-end "
        f"accuracy, then fewer steps. Chosen: tau_L {cl:.2f}, tau_U {cu:.2f}; default: tau_L {default[0]:.2f}, "
        f"tau_U {default[1]:.2f}. Maximising dev end-to-end accuracy on this balanced sample instead would pick "
        f"tau_L {el:.2f}, tau_U {eu:.2f} (see its false-refusal rate above)."
    )
    print(rule, flush=True)
    md += [rule, ""]
    test_rows = []
    comparison: dict[str, Any] = {}
    d_recs = results[dname]["test"]
    c_recs = results[chosen]["test"]
    d_arr, c_arr = indicator_arrays(d_recs), indicator_arrays(c_recs)
    paired = sorted(str(r["id"]) for r in d_recs) == sorted(str(r["id"]) for r in c_recs)
    if paired:  # same items in the same order for the paired test
        c_by_id = {str(r["id"]): r for r in c_recs}
        c_arr = indicator_arrays([c_by_id[str(r["id"])] for r in d_recs])
    for metric in ("e2e_accuracy", "refusal_precision", "refusal_recall", "false_refusal_rate"):
        d_est = bootstrap_ci(*d_arr[metric])
        c_est = bootstrap_ci(*c_arr[metric])
        diff = "—"
        entry: dict[str, Any] = {"default": d_est.to_json(), "chosen": c_est.to_json()}
        if paired and chosen != dname:
            pt = paired_test(d_arr[metric][0], c_arr[metric][0], d_arr[metric][1], c_arr[metric][1])
            if not math.isnan(pt.diff):
                diff = f"{100 * pt.diff:+.1f} [{100 * pt.lo:+.1f}, {100 * pt.hi:+.1f}], p={pt.p_value:.3f}"
            entry["chosen_minus_default"] = pt.to_json()
        comparison[metric] = entry
        test_rows.append([metric.replace("_", " "), ci_text(d_est), ci_text(c_est), diff])
    md.append(
        print_table(
            f"Test part: chosen (tau_L {cl:.2f}, tau_U {cu:.2f}) vs default (tau_L {default[0]:.2f}, "
            f"tau_U {default[1]:.2f}), bootstrap 95% intervals; difference paired over the same items",
            ["metric", "default", "chosen", "chosen - default"],
            test_rows,
        )
    )
    if chosen == dname:
        md.append("The dev part chooses the default pair itself.\n")

    taus = [i / 100 for i in range(101)]
    curves = {p: cheap_curve(results[dname][p], taus) for p in parts}
    best_i = max(range(len(taus)), key=lambda i: (curves["dev"]["f1"][i], -taus[i]))
    cheap_rows = []
    for i in range(0, 101, 5):
        row: list[object] = [f"{taus[i]:.2f}"]
        for p in ("dev", "test"):
            c = curves[p]
            row += [pct(c["precision"][i]), pct(c["recall"][i]), pct(c["false_refusal_rate"][i])]
        cheap_rows.append(row)
    md.append(
        print_table(
            "Cheap rule 'refuse iff max grade < tau' on the default config's runs (max over every chunk the "
            "default graph graded in the turn, rewrites included)",
            [
                "tau",
                "dev precision %",
                "dev recall %",
                "dev false refusal %",
                "test precision %",
                "test recall %",
                "test false refusal %",
            ],
            cheap_rows,
        )
    )
    ct = curves["test"]
    cheap_line = (
        f"Cheap rule, tau chosen on dev by refusal F1: tau {taus[best_i]:.2f} (dev F1 "
        f"{pct(curves['dev']['f1'][best_i])}%); on test: precision {pct(ct['precision'][best_i])}%, recall "
        f"{pct(ct['recall'][best_i])}%, false refusal {pct(ct['false_refusal_rate'][best_i])}%, F1 "
        f"{pct(ct['f1'][best_i])}% (the graph's own refusals with the chosen pair on test: F1 "
        f"{pct(metrics[chosen]['test']['refusal_f1'])}%)."
    )
    print(cheap_line, flush=True)
    md += [cheap_line, ""]
    png = plot_tau(args.name, grid, names, metrics, curves, dname, chosen)
    md += [f"![refusal precision/recall]({png.name})", ""]
    failed = sum(errors.values())
    if failed:
        md += [f"**{failed} item runs failed** and are left out: {errors}", ""]
    md.append(
        f"Wall time of this part: {wall:.0f} s ({args.workers} workers); item runs done now: {ran_now}, reused from "
        f"earlier sessions of the same configs (resumed runs): {reused}. Runs: `{runs_dir}`."
    )
    payload = {
        "suite": suite.description,
        "sample_per_part": args.tau_n,
        "items": {p: [i.id for i in its] for p, its in parts.items()},
        "grid": [{"tau_lower": lo, "tau_upper": up, "name": n} for (lo, up), n in zip(grid, names, strict=True)],
        "default": {"tau_lower": default[0], "tau_upper": default[1]},
        "rule": f"max dev refusal recall with dev false refusal <= {args.max_false_refusal}; ties: e2e accuracy, steps",
        "chosen_by_max_e2e_accuracy": by_e2e,
        "chosen": {"tau_lower": cl, "tau_upper": cu},
        "metrics": {
            n: {p: {k: (num(v) if isinstance(v, float) else v) for k, v in m.items()} for p, m in pm.items()}
            for n, pm in metrics.items()
        },
        "test_comparison": comparison,
        "cheap_curve": {p: {k: [num(x) for x in v] for k, v in c.items()} for p, c in curves.items()},
        "cheap_tau_chosen_on_dev": taus[best_i],
        "tau_upper_check": {"item_pairs": compared, "refusal_differs": differing, "answer_text_differs": texts_differ},
        "item_errors": errors,
        "collection_prepare_seconds": round(t_prep.seconds, 1),
        "config_run_seconds": run_seconds,
        "item_runs_now": ran_now,
        "item_runs_reused": reused,
        "runs_dir": str(runs_dir),
        "workers": args.workers,
        "wall_seconds": round(wall, 1),
        "chart": str(png.relative_to(REPO)),
    }
    return payload, "\n".join(md)


def plot_tau(
    name: str,
    grid: Sequence[tuple[float, float]],
    names: Sequence[str],
    metrics: dict[str, dict[str, dict[str, Any]]],
    curves: dict[str, dict[str, list[float]]],
    default: str,
    chosen: str,
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(18, 5.4))
    top_u: dict[float, str] = {}  # per tau_L the config with the largest tau_U
    for (lo, _up), n in sorted(zip(grid, names, strict=True)):
        top_u[lo] = n
    lows = sorted(top_u)
    colors = {"dev": "tab:blue", "test": "tab:orange"}
    for p in ("dev", "test"):
        c = curves[p]
        ax1.plot(
            c["recall"],
            c["precision"],
            color=colors[p],
            alpha=0.5,
            linestyle="-" if p == "dev" else "--",
            label=f"{p}: refuse iff max grade < tau (default config's runs)",
        )
        xs = [metrics[n][p]["refusal_recall"] for n in names]
        ys = [metrics[n][p]["refusal_precision"] for n in names]
        ax1.scatter(
            xs,
            ys,
            color=colors[p],
            marker="o" if p == "dev" else "x",
            zorder=3,
            label=f"{p}: the graph with (tau_L, tau_U)",
        )
        if p == "dev":
            for (lo, up), x, y in zip(grid, xs, ys, strict=True):
                ax1.annotate(f"{lo:g}/{up:g}", (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
        for n, marker, size in ((default, "*", 220), (chosen, "s", 120)):
            m = metrics[n][p]
            ax1.scatter(
                [m["refusal_recall"]],
                [m["refusal_precision"]],
                facecolors="none",
                edgecolors=colors[p],
                marker=marker,
                s=size,
                zorder=4,
            )
        ax2.plot(c["tau"], c["precision"], color=colors[p], linestyle="-", label=f"{p} precision")
        ax2.plot(c["tau"], c["recall"], color=colors[p], linestyle="--", label=f"{p} recall")
        ax2.plot(c["tau"], c["false_refusal_rate"], color=colors[p], linestyle=":", label=f"{p} false refusal")
        for key, style, label in (
            ("e2e_accuracy", "-", "e2e accuracy"),
            ("refusal_recall", "--", "refusal recall"),
            ("false_refusal_rate", ":", "false refusal"),
        ):
            ys = [metrics[top_u[lo]][p][key] for lo in lows]
            ax3.plot(lows, ys, color=colors[p], linestyle=style, marker=".", label=f"{p} {label}")
    ax1.set_xlabel("refusal recall (unanswerable refused)")
    ax1.set_ylabel("refusal precision (refusals that were unanswerable)")
    ax1.set_xlim(0, 1.02)
    ax1.set_ylim(0, 1.02)
    ax1.set_title(
        "SQuAD 2.0 refusals (star: default, square: chosen on dev; configs that refuse nothing have no precision)",
        fontsize=8,
    )
    ax1.legend(fontsize=7, loc="lower left")
    ax2.set_xlabel("tau (refuse iff max grade < tau)")
    ax2.set_ylabel("rate")
    ax2.set_ylim(0, 1.02)
    ax2.set_title("cheap rule over tau", fontsize=9)
    ax2.legend(fontsize=7)
    ax3.set_xlabel("tau_L (the graph; per tau_L the run with the largest tau_U)")
    ax3.set_ylabel("rate")
    ax3.set_ylim(0, 1.02)
    ax3.set_title("the graph over tau_L", fontsize=9)
    ax3.legend(fontsize=7)
    fig.tight_layout()
    path = RESULTS_DIR / f"{name}-tau.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path.relative_to(REPO)}", flush=True)
    return path
