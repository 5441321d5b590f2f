"""`ragloop eval run|report|gate|calibrate|golden ...`: the evaluation harness.

ragloop eval run --dataset squad --config full --limit 50
ragloop eval report --out benchmarks/results/eval
ragloop eval gate
ragloop eval calibrate labels.csv
ragloop eval golden draft|pool|review|validate ...
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from ragloop.cli.common import JsonOpt, console, fail, out, pipeline_config, print_json, settings

if TYPE_CHECKING:
    from ragloop.retrieval.collection import Collection

app = typer.Typer(no_args_is_help=True, help="Evaluation: run suites, reports, the CI gate, judge calibration.")
golden_app = typer.Typer(no_args_is_help=True, help="Golden sets: draft, pool candidates, review, validate.")
app.add_typer(golden_app, name="golden")

DatasetOpt = Annotated[str, typer.Option("--dataset", "-d", help="squad | mtrag | cacm | golden")]
ConfigArg = Annotated[
    str,
    typer.Option(
        "--config",
        help="An ablation name (baseline, hybrid, hybrid_rerank, full, no_refine, no_critique, "
        "no_citation_validation, no_rewrite) or a pipeline config YAML.",
    ),
]


def _database_golden(version: int | None) -> tuple[Path, int]:
    """The database golden set (the one source of truth) as it is now, or at golden-set `version`,
    exported for this run as harness JSONL; returns the file and the version it holds."""
    from ragloop.experiments.golden import export_jsonl
    from ragloop.store import NotFoundError, Store

    with Store.open() as store:
        v = store.golden.golden_set_version() if version is None else version
        path = settings().home / "eval" / f"golden-db-v{v}.jsonl"
        try:
            n = export_jsonl(store, path, version=v)
        except NotFoundError as exc:
            fail(str(exc))
    if n == 0:
        fail(f"the database golden set at version {v} is empty: `ragloop golden import FILE` first, or pass --golden")
    return path, v


def _runs_dir(out_dir: Path | None) -> Path:
    return out_dir or settings().home / "eval" / "runs"


@app.command("run")
def run_cmd(
    dataset: DatasetOpt = "squad",
    config: ConfigArg = "full",
    limit: Annotated[int | None, typer.Option("--limit", help="Only the first N items (after --sample).")] = None,
    sample: Annotated[int | None, typer.Option("--sample", help="A stratified random sample of N items.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Sampling and run seed.")] = 0,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Runs directory (default RAGLOOP_HOME/eval/runs).")
    ] = None,
    workers: Annotated[int, typer.Option("--workers", help="Worker processes.")] = 2,
    judge: Annotated[str, typer.Option("--judge", help="Judge scorer name; 'none' skips judged metrics.")] = (
        "lexical"
    ),
    judge_repeats: Annotated[int, typer.Option("--judge-repeats", help="Judge each item k times.")] = 1,
    golden: Annotated[
        Path | None,
        typer.Option("--golden", help="An exported golden JSONL (--dataset golden; default: the database set)."),
    ] = None,
    golden_version: Annotated[
        int | None,
        typer.Option("--golden-version", min=0, help="Evaluate the database set as it was at this version."),
    ] = None,
    collection: Annotated[str | None, typer.Option("--collection", "-c", help="Collection (--dataset golden).")] = None,
    verified_only: Annotated[bool, typer.Option("--verified-only", help="Golden: verified items only.")] = False,
    fresh: Annotated[bool, typer.Option("--fresh", help="Discard earlier results in the run directory.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Run one config on one dataset; resumes where an earlier run of the same config stopped."""
    from ragloop.evaluation.ablations import load_config
    from ragloop.evaluation.metrics.item import item_metrics
    from ragloop.evaluation.runner import RunError, read_records, run_suite
    from ragloop.evaluation.stats import ratio
    from ragloop.evaluation.suites import load_suite, sample_items
    from ragloop.models.errors import ModelError

    db_version: int | None = None
    if golden_version is not None and (dataset != "golden" or golden is not None):
        fail("--golden-version selects a version of the database set: use it with --dataset golden and no --golden")
    if dataset == "golden" and golden is None:
        golden, db_version = _database_golden(golden_version)
    try:
        suite = load_suite(dataset, golden=golden, collection=collection, verified_only=verified_only)
        name, cfg = load_config(config)
    except (ValueError, OSError) as exc:
        fail(str(exc))
    items = sample_items(suite.items, limit=limit, sample=sample, seed=seed)
    # a database set's runs are kept per golden-set version: a resumed run never mixes two versions
    run_dir = _runs_dir(out_dir) / suite.name / (name if db_version is None else f"v{db_version}-{name}")
    progress = None
    if not json_ and console.is_terminal:

        def progress(rec: dict[str, object], done: int, total: int) -> None:
            console.print(f"[{done}/{total}] {rec['id']}{' ERROR' if rec.get('error') else ''}", highlight=False)

    try:
        res = run_suite(
            suite,
            name,
            cfg,
            run_dir,
            settings=settings(),
            items=items,
            workers=workers,
            judge=None if judge.lower() == "none" else judge,
            judge_repeats=judge_repeats,
            seed=seed,
            fresh=fresh,
            on_item=progress,
            call_log=True,
        )
    except (RunError, ModelError, ValueError) as exc:
        fail(str(exc))
    records = [r for r in read_records(run_dir / "items.jsonl") if r["id"] in {i.id for i in items}]
    sums: dict[str, list[tuple[float, float]]] = {}
    for rec in records:
        for k, p in item_metrics(rec).items():
            if not k.startswith("termination:"):
                sums.setdefault(k, []).append(p)
    summary: dict[str, float | None] = {}
    for k, pairs in sorted(sums.items()):
        r = ratio([p[0] for p in pairs], [p[1] for p in pairs])
        summary[k] = None if r != r else round(r, 4)
    if json_:
        print_json(
            {**res.to_json(), "suite": suite.name, "config": name, "version_id": cfg.version_id, "metrics": summary}
        )
        return
    console.print(
        f"{suite.name} × {name}: {res.ran} run, {res.skipped} already done, {res.errors} errors, "
        f"{res.wall_s:.0f} s in all → {run_dir}"
        + (f"; model calls: ragloop models calls --run {res.call_run_id}" if res.call_run_id else ""),
        highlight=False,
    )
    table = Table("metric", "value", title_justify="left")
    for k, v in summary.items():
        table.add_row(k, "—" if v is None else f"{v:.4f}")
    out.print(table)


@app.command("report")
def report_cmd(
    runs: Annotated[
        Path | None, typer.Option("--runs", help="Runs directory (default RAGLOOP_HOME/eval/runs).")
    ] = None,
    out_dir: Annotated[Path, typer.Option("--out", help="Where report.md and the charts go.")] = Path(
        "benchmarks/results/eval"
    ),
    title: Annotated[str, typer.Option("--title")] = "Evaluation report",
    resamples: Annotated[int, typer.Option("--resamples", help="Bootstrap resamples.")] = 1000,
    json_: JsonOpt = False,
) -> None:
    """Markdown report (configs × metrics with 95% CIs, paired tests, failure cases) and PNG charts."""
    from ragloop.evaluation.judge import calibrations_path, load_calibrations
    from ragloop.evaluation.report import build_report, write_report

    runs_dir = _runs_dir(runs)
    if not any(runs_dir.glob("*/*/run.json")):
        fail(f"no runs under {runs_dir}: run `ragloop eval run` first")
    rep = build_report(runs_dir, calibrations=load_calibrations(calibrations_path(settings())), resamples=resamples)
    written = write_report(rep, out_dir, title)
    if json_:
        print_json(written)
        return
    for w in rep.warnings:
        console.print(f"[yellow]{w}[/]", highlight=False)
    console.print(f"wrote {written['report']} and {len(written['charts'])} charts", highlight=False)


@app.command("gate")
def gate_cmd(
    thresholds: Annotated[
        Path | None, typer.Option("--thresholds", help="Gate spec (default: the committed thresholds.yaml).")
    ] = None,
    workers: Annotated[int, typer.Option("--workers")] = 2,
    json_: JsonOpt = False,
) -> None:
    """Run the fixed CI subset offline and check it against the committed thresholds (exit 1 on a drop)."""
    from ragloop.evaluation.gate import GateError, run_gate
    from ragloop.models.errors import ModelError

    try:
        res = run_gate(thresholds, settings=settings(), workers=workers)
    except (GateError, ModelError, ValueError, OSError) as exc:
        fail(str(exc))
    if json_:
        print_json(res.to_json())
    else:
        table = Table(
            "metric", "measured", "threshold", "n", "ok", title=f"eval gate: {res.items} items, {res.seconds:.0f} s"
        )
        for r in res.rows:
            sign = "≥" if r.bound == "min" else "≤"
            table.add_row(
                r.metric, f"{r.measured:.4f}", f"{sign} {r.threshold}", str(r.n), "ok" if r.ok else "[red]DROP[/]"
            )
        out.print(table)
        if res.errors:
            console.print(f"[red]{res.errors} items failed with an error (see {res.out_dir}/items.jsonl)[/]")
        console.print("gate passed" if res.ok else "[red]gate FAILED[/]")
    if not res.ok:
        raise typer.Exit(1)


@app.command("calibrate")
def calibrate_cmd(
    labels: Annotated[Path, typer.Argument(help="Human labels: CSV or JSONL with question, answer, reference, label.")],
    judge: Annotated[str, typer.Option("--judge", help="The judge scorer to calibrate.")] = "lexical",
    json_: JsonOpt = False,
) -> None:
    """Judge accuracy and Cohen's kappa (95% CI) against human correct/incorrect labels; stored per judge."""
    from ragloop.evaluation.judge import (
        MIN_LABELS,
        LabelError,
        calibrate,
        calibrations_path,
        load_labels,
        save_calibration,
    )
    from ragloop.models.chat import run_sync
    from ragloop.models.errors import ModelError
    from ragloop.models.scoring import make_scorer

    try:
        rows = load_labels(labels)
        from ragloop.store.call_log import StoreCallLog

        scorer = make_scorer(judge, settings(), calls=StoreCallLog())
        cal = run_sync(calibrate(rows, scorer, source=str(labels)))
    except (LabelError, ModelError, OSError) as exc:
        fail(str(exc))
    path = save_calibration(cal, calibrations_path(settings()))
    if json_:
        print_json({**cal.to_json(), "saved": str(path)})
        return
    a, k = cal.accuracy, cal.kappa
    console.print(
        f"judge {cal.judge} on {cal.n} labels: accuracy {a[0]:.3f} [{a[1]:.3f}, {a[2]:.3f}], "
        f"Cohen's kappa {k[0]:.3f} [{k[1]:.3f}, {k[2]:.3f}] → {path}",
        highlight=False,
    )
    if cal.n < MIN_LABELS:
        console.print(f"[yellow]fewer than {MIN_LABELS} labels: reports keep warning about this judge[/]")


# -- golden sets --------------------------------------------------------------------------------------


def _collection(name: str) -> Collection:
    from ragloop.retrieval.collection import Collection, list_collections

    s = settings()
    coll = Collection(name, s)
    if not coll.exists():
        fail(f"no collection named {name!r}; known: {', '.join(list_collections(s)) or 'none'}")
    return coll


@golden_app.command("draft")
def golden_draft(
    collection: Annotated[str, typer.Option("--collection", "-c")] = "default",
    n: Annotated[int, typer.Option("--n", help="How many drafts.")] = 20,
    out_file: Annotated[Path, typer.Option("--out", help="Golden JSONL to write.")] = Path("golden.jsonl"),
    chat_model: Annotated[str | None, typer.Option("--chat-model", help="Draft with this chat model.")] = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    json_: JsonOpt = False,
) -> None:
    """Draft unverified questions from a collection (LLM, or offline templates from headings and definitions)."""
    from ragloop.evaluation.golden import draft_llm, draft_offline, save_golden

    coll = _collection(collection)
    if chat_model:
        from ragloop.models.chat import CallPurpose, make_wrapped, run_sync
        from ragloop.store.call_log import StoreCallLog

        model = make_wrapped(chat_model, settings(), sink=StoreCallLog(), purpose=CallPurpose.GOLDEN_DRAFT)
        items = run_sync(draft_llm(coll, model, n, seed))
    else:
        items = draft_offline(coll, n, seed)
    save_golden(items, out_file)
    if json_:
        print_json({"written": str(out_file), "items": len(items)})
    else:
        console.print(f"wrote {len(items)} unverified drafts to {out_file}", highlight=False)


@golden_app.command("pool")
def golden_pool(
    file: Annotated[Path, typer.Argument(help="Golden JSONL (updated in place).")],
    collection: Annotated[str, typer.Option("--collection", "-c")] = "default",
    k: Annotated[int, typer.Option("--k", help="Top-k of BM25 and of dense each.")] = 5,
    config: Annotated[Path | None, typer.Option("--config")] = None,
    json_: JsonOpt = False,
) -> None:
    """Pool labelling candidates for every item: the union of the top-k BM25 and top-k dense chunks."""
    from ragloop.evaluation.golden import GoldenError, load_golden, pool, save_golden

    try:
        items = load_golden(file, check=False)
    except GoldenError as exc:
        fail(str(exc))
    pooled = pool(items, _collection(collection), pipeline_config(config), k)
    save_golden(pooled, file)
    sizes = [len(i.candidates) for i in pooled]
    if json_:
        print_json({"items": len(pooled), "candidates": sum(sizes)})
    else:
        console.print(f"pooled {sum(sizes)} candidates for {len(pooled)} items into {file}", highlight=False)


@golden_app.command("review")
def golden_review(
    file: Annotated[Path, typer.Argument(help="Golden JSONL (updated in place after each decision).")],
    reviewer: Annotated[str, typer.Option("--reviewer", help="Your name: recorded on every decision.")],
    collection: Annotated[str | None, typer.Option("--collection", "-c", help="Show candidate excerpts.")] = None,
    all_items: Annotated[bool, typer.Option("--all", help="Also revisit verified items.")] = False,
) -> None:
    """Interactive review: accept / edit / reject each item; only this makes an item `verified`."""
    from ragloop.evaluation.golden import GoldenError, load_golden, review, save_golden

    try:
        items = load_golden(file, check=False)
    except GoldenError as exc:
        fail(str(exc))
    excerpts = None
    if collection:
        texts = {c.chunk_id: c.text for c in _collection(collection).load().chunks}

        def excerpts(cid: str) -> str:
            return " ".join(texts.get(cid, "?").split())[:200]

    def ask(prompt: str, default: str) -> str:
        return str(typer.prompt(prompt, default=default, show_default=bool(default)))

    new, counts = review(
        items,
        reviewer,
        ask,
        show=lambda s: out.print(s, highlight=False, markup=False),
        excerpts=excerpts,
        include_verified=all_items,
    )
    save_golden(new, file)
    console.print(", ".join(f"{k} {v}" for k, v in counts.items()), highlight=False)


@golden_app.command("validate")
def golden_validate(
    file: Annotated[Path, typer.Argument(help="Golden JSONL.")],
    json_: JsonOpt = False,
) -> None:
    """Check the schema and the rules; exit 1 on a problem."""
    from ragloop.evaluation.golden import GoldenError, load_golden, validate

    try:
        items = load_golden(file, check=False)
    except GoldenError as exc:
        fail(str(exc), code=1)
    problems = validate(items)
    kinds: dict[str, int] = {}
    for it in items:
        kinds[it.type] = kinds.get(it.type, 0) + 1
    if json_:
        print_json(
            {"items": len(items), "verified": sum(i.verified for i in items), "types": kinds, "problems": problems}
        )
    else:
        console.print(f"{len(items)} items ({kinds}), {sum(i.verified for i in items)} verified", highlight=False)
        for p in problems:
            console.print(f"[red]{p}[/]", highlight=False)
    if problems:
        raise typer.Exit(1)
