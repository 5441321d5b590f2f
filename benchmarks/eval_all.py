"""The evaluation harness's results tables, in one command:

    nohup .venv/bin/python benchmarks/eval_all.py > benchmarks/results/eval/run.log 2>&1 &

Runs `baseline`, `hybrid`, `hybrid_rerank` and `full` (the offline default pipeline: no chat
model, offline scorers; judge `lexical`) on

- CACM (retrieval only: the 52 judged topics, ranking depth 1000),
- SQuAD 2.0 dev: a fixed stratified sample (default 1,000 of the 4,313 questions, seed 0,
  answerable/unanswerable in the set's proportions; `--squad-sample 0` runs all of them). A
  full run of the four configs over all questions takes several hours on 2 shared cores,
- MTRAG-UN dev: all 397 tasks, every earlier user turn fed through the conversation path,

then (with `--toggles`) the single-node ablations on the SQuAD sample. With `--llm MODEL` it
runs instead `full` with that chat model and `full` offline on the SAME fixed samples
(`--llm-squad`, default 100, and `--llm-mtrag`, default 60, seed 0), so the two are compared
paired, item by item; that report goes to `benchmarks/results/eval/llm/`:

    nohup .venv/bin/python benchmarks/eval_all.py --llm local:qwen2.5-coder-1.5b \
        > benchmarks/results/eval/llm/run.log 2>&1 &

Runs are resumable
(`benchmarks/.home/eval/runs/<suite>/<config>/items.jsonl`): rerunning the command continues
where it stopped. The report is rewritten after every finished run:
`benchmarks/results/eval/report.md` + `report.json` + PNG charts.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from _common import BENCH_HOME, REPO, RESULTS_DIR, machine

os.environ.setdefault("RAGLOOP_HOME", str(BENCH_HOME))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from ragloop.config import PipelineConfig, Settings
from ragloop.evaluation.ablations import MAIN, TOGGLES, load_config
from ragloop.evaluation.judge import calibrations_path, load_calibrations
from ragloop.evaluation.report import Report, build_report, write_report
from ragloop.evaluation.runner import run_suite
from ragloop.evaluation.suites import EvalItem, Suite, load_suite, sample_items

OUT = RESULTS_DIR / "eval"
RUNS = BENCH_HOME / "eval" / "runs"
LLM_OUT = OUT / "llm"
LLM_RUNS = BENCH_HOME / "eval" / "runs-llm"


def reference_section(rep: Report, squad_noans_share: float | None) -> str:
    """The README's published numbers next to ours (point estimates from the report)."""

    def get(suite: str, config: str, metric: str, pct: bool = True) -> str:
        run = rep.suites.get(suite, {}).get(config)
        e = run.metrics.get(metric) if run else None
        if e is None or e.n == 0 or e.value != e.value:
            return "—"
        return f"{100 * e.value:.1f}%" if pct else f"{e.value:.3f}"

    def row(
        label: str, published: str, suite: str, metric: str, pct: bool = True, configs: tuple[str, ...] = MAIN
    ) -> str:
        ours = " / ".join(f"{c} {get(suite, c, metric, pct)}" for c in configs)
        return f"| {label} | {published} | {ours} |"

    noans = f"{100 * squad_noans_share:.1f}% on our sample" if squad_noans_share is not None else "—"
    lines = [
        "## Reference numbers (datasets README) next to ours",
        "",
        "| Reference | Published | Ours |",
        "|---|---|---|",
        row("CACM MAP (BM25 0.3123, QL 0.3265, BM25+RM3 0.3643; Anserini)", "0.3123 / 0.3643", "cacm", "map", False),
        row("CACM P@30 (BM25, Anserini)", "0.1942", "cacm", "p@30", False),
        row(f"SQuAD 2.0 EM, 'always no answer' = 52.1% on this split ({noans})", "52.1%", "squad", "squad_em"),
        row("SQuAD 2.0 F1", "52.1% (always no answer)", "squad", "squad_f1"),
        row(
            "First-retrieval Recall@4 (Polygraph, hybrid+rerank; ours Recall@5)",
            "0.867",
            "squad",
            "first_recall@k",
            False,
        ),
        row("First-retrieval MRR@4 (Polygraph; ours MRR@5)", "0.870", "squad", "first_mrr@k", False),
        row("MTRAG first-retrieval Recall@5", "—", "mtrag", "first_recall@k", False),
        row("Correct-refusal rate, SQuAD (Polygraph 95%)", "95%", "squad", "correct_refusal"),
        row("False-refusal rate, SQuAD (Polygraph 2%)", "2%", "squad", "false_refusal"),
        row("Correct-refusal rate, MTRAG", "95% (Polygraph)", "mtrag", "correct_refusal"),
        row("False-refusal rate, MTRAG", "2% (Polygraph)", "mtrag", "false_refusal"),
        row("Grader precision (set), SQuAD", "96% (Polygraph)", "squad", "grader_set_precision", True, ("full",)),
        row("Grader recall (set), SQuAD", "98% (Polygraph)", "squad", "grader_set_recall", True, ("full",)),
        row("Steps / query (mean), SQuAD", "4.84 (Polygraph)", "squad", "steps", False),
        "",
        "Read with care: Polygraph is measured on a 70-item golden set of Docker docs questions with an LLM grader "
        "(gpt-oss-20b) and deliberately out-of-domain unanswerable questions; ours are the offline scorers on SQuAD "
        "2.0, whose unanswerable questions are on-topic and written to look answerable, and on MTRAG-UN.",
    ]
    return "\n".join(lines) + "\n"


def run_one(
    suite: Suite,
    items: list[EvalItem],
    name: str,
    cfg: PipelineConfig,
    runs: Path,
    args: argparse.Namespace,
    settings: Settings,
    every: int,
) -> str:
    """One resumable run of `cfg` on `items` under `runs/<suite>/<name>`, with progress every
    `every` items; returns the timing line for the report."""
    t0 = time.perf_counter()
    print(f"== {suite.name} × {name}: {len(items)} items", flush=True)

    def progress(rec: dict[str, object], done: int, total: int) -> None:
        if done % every == 0 or done == total:
            el = time.perf_counter() - t0
            print(f"   {done}/{total} ({el:.0f} s, {el / done:.2f} s/item)", flush=True)

    res = run_suite(
        suite,
        name,
        cfg,
        runs / suite.name / name,
        settings=settings,
        items=items,
        workers=args.workers,
        seed=args.seed,
        on_item=progress,
    )
    print(f"   done: {res.to_json()}", flush=True)
    return f"{suite.name}/{name} {res.ran} items in {(time.perf_counter() - t0) / 60:.1f} min"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squad-sample", type=int, default=1000, help="0 = all 4,313 questions")
    ap.add_argument("--mtrag-sample", type=int, default=0, help="0 = all 397 tasks")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--configs", default=",".join(MAIN))
    ap.add_argument("--suites", default="cacm,squad,mtrag")
    ap.add_argument("--toggles", action="store_true", help="also the single-node ablations on the SQuAD sample")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--name", default="", help="a partial rerun kept apart: results/eval/NAME, .home/eval/runs-NAME")
    ap.add_argument("--llm", default="", help="run `full` with this chat model (and offline) on fixed samples")
    ap.add_argument("--llm-squad", type=int, default=100)
    ap.add_argument("--llm-mtrag", type=int, default=60)
    ap.add_argument(
        "--llm-seconds", type=float, default=0.0, help="the chat-model config's turn time budget (0 = the default)"
    )
    args = ap.parse_args()
    if args.llm:
        llm_main(args)
        return

    settings = Settings.from_env()
    out, runs = (OUT / args.name, BENCH_HOME / "eval" / f"runs-{args.name}") if args.name else (OUT, RUNS)
    configs = [c for c in args.configs.split(",") if c]
    plan: list[tuple[str, str]] = [(s, c) for s in args.suites.split(",") if s for c in configs]
    if args.toggles:
        plan += [("squad", c) for c in TOGGLES]
    started = time.perf_counter()
    timings: list[str] = []
    squad_items = sample_items(load_suite("squad").items, sample=args.squad_sample or None, seed=args.seed)
    noans_share = sum(i.should_refuse for i in squad_items) / len(squad_items) if squad_items else None

    squad_desc = (
        f"a fixed stratified sample of {args.squad_sample} questions (seed {args.seed})"
        if args.squad_sample
        else "all questions"
    )

    def report() -> None:
        rep = build_report(runs, calibrations=load_calibrations(calibrations_path(settings)))
        total = time.perf_counter() - started
        extra = (
            "## How these numbers were produced\n\n"
            "Command: `.venv/bin/python benchmarks/eval_all.py"
            + (f" --name {args.name} --suites {args.suites}" if args.name else "")
            + "` (RAGLOOP_HOME=benchmarks/.home), "
            f"{machine()['cpus']} CPUs shared with other jobs, offline default pipeline (no chat model). "
            f"SQuAD: {squad_desc}; "
            f"MTRAG-UN: {'all tasks' if not args.mtrag_sample else f'{args.mtrag_sample} tasks (seed {args.seed})'}; "
            "CACM: all 52 judged topics, retrieval only. "
            "Latency is in-process with 2 worker processes on a machine shared with other jobs, and the "
            "persistent embedding cache is warm for every sentence an earlier run embedded (configs run in the "
            "order baseline, hybrid, hybrid_rerank, full): compare latencies across configs with care.\n\n"
            + (
                "Runs this session: " + "; ".join(timings) + f". Session wall time {total / 60:.1f} min.\n\n"
                if timings
                else ""
            )
            + reference_section(rep, noans_share)
        )
        written = write_report(rep, out, "Evaluation results: ablations with the offline default pipeline", extra)
        print(f"report: {written['report']} ({len(written['charts'])} charts)", flush=True)

    if not args.report_only:
        for suite_name, cfg_name in plan:
            suite = load_suite(suite_name)
            n = args.squad_sample if suite_name == "squad" else args.mtrag_sample if suite_name == "mtrag" else 0
            items = sample_items(suite.items, sample=n or None, seed=args.seed)
            name, cfg = load_config(cfg_name)
            timings.append(run_one(suite, items, name, cfg, runs, args, settings, every=50))
            report()
    report()
    print(f"total {(time.perf_counter() - started) / 60:.1f} min; repo {REPO}", flush=True)


def llm_main(args: argparse.Namespace) -> None:
    """`full` offline and `full` with the chat model on the same fixed samples (paired)."""
    settings = Settings.from_env()
    _, full = load_config("full")
    tag = args.llm.split(":", 1)[-1]
    agent: dict[str, object] = {"chat_model": args.llm}
    if args.llm_seconds:
        agent["budgets"] = {"max_seconds": args.llm_seconds}
    configs = [("full", full), (f"full+{tag}", full.with_overrides(agent=agent))]
    started = time.perf_counter()
    timings: list[str] = []
    samples = {"squad": args.llm_squad, "mtrag": args.llm_mtrag}

    def report() -> None:
        rep = build_report(LLM_RUNS, calibrations=load_calibrations(calibrations_path(settings)))
        extra = (
            "## How these numbers were produced\n\n"
            f"Command: `.venv/bin/python benchmarks/eval_all.py --llm {args.llm}"
            + (f" --llm-seconds {args.llm_seconds:g}" if args.llm_seconds else "")
            + "` "
            f"(RAGLOOP_HOME=benchmarks/.home), {machine()['cpus']} CPUs, {args.workers} worker processes "
            f"(each loads its own copy of the model; llama.cpp threads per process: "
            f"{settings.llm_threads}). Fixed samples (seed {args.seed}): SQuAD 2.0 dev {args.llm_squad} "
            f"questions (stratified answerable/unanswerable), MTRAG-UN dev {args.llm_mtrag} tasks. Both "
            "configs run on the same items, so their differences are tested paired. Judge: the offline "
            "`lexical` judge for both (an LLM judge would be the same model grading itself). MTRAG tasks: "
            "the thread is seeded with the reference conversation and only the last turn is answered.\n\n"
            + ("Runs: " + "; ".join(timings) + ".\n" if timings else "")
        )
        written = write_report(rep, LLM_OUT, f"Evaluation results: `full` offline vs `full` with {args.llm}", extra)
        print(f"report: {written['report']}", flush=True)

    if not args.report_only:
        for suite_name, n in samples.items():
            suite = load_suite(suite_name)
            items = sample_items(suite.items, sample=n or None, seed=args.seed)
            for name, cfg in configs:
                timings.append(run_one(suite, items, name, cfg, LLM_RUNS, args, settings, every=1))
                report()
    report()
    print(f"total {(time.perf_counter() - started) / 60:.1f} min", flush=True)


if __name__ == "__main__":
    main()
