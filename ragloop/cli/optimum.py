"""`ragloop improve optimum`: the AutoRAG-style offline optimum over the remediations' knobs
(`ragloop.improve.optimum`), searched on a data set's traffic part with its gold labels and scored
on its held-out part: the denominator of the loop's outcome 4.

    ragloop improve optimum --dataset mtrag [--start start.yaml] [--limit 120] [--json]
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import yaml

from ragloop.cli.common import JsonOpt, fail, out, print_json, settings
from ragloop.cli.improve import app


@app.command("optimum")
def optimum(
    dataset: Annotated[str, typer.Option("--dataset", help="squad | mtrag")] = "mtrag",
    datasets_dir: Annotated[Path | None, typer.Option("--datasets-dir", help="Default: ../shared/datasets.")] = None,
    start: Annotated[
        Path | None, typer.Option("--start", help="YAML overrides of the defaults to start from (a degraded start).")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="Only the first N traffic and N test items.")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Run cache (default RAGLOOP_HOME/optimum).")] = None,
    workers: Annotated[int, typer.Option("--workers")] = 2,
    json_: JsonOpt = False,
) -> None:
    """Search the best config on the traffic part (node by node), then score start and best on the held-out part."""
    from ragloop.config import PipelineConfig
    from ragloop.evaluation.suites import mtrag_suite, squad_suite
    from ragloop.improve.optimum import held_out_score, runner_scorer, search, split_items

    if dataset not in ("squad", "mtrag"):
        fail(f"--dataset must be squad or mtrag, got {dataset!r}")
    try:
        suite = mtrag_suite(datasets_dir) if dataset == "mtrag" else squad_suite(datasets_dir)
        raw = yaml.safe_load(start.read_text(encoding="utf-8")) if start else {}
        base = PipelineConfig().with_overrides(**(raw or {}))
    except Exception as exc:  # unreadable data set or start config: say which
        fail(f"{type(exc).__name__}: {exc}")
    traffic, test = split_items(suite.items)
    if limit:
        traffic, test = traffic[:limit], test[:limit]
    s = settings()
    score = runner_scorer(suite, s, out_dir or (s.home / "optimum" / dataset), workers=workers)
    result = search(base, traffic, score)
    data = {
        "dataset": dataset,
        "traffic_items": len(traffic),
        "test_items": len(test),
        **result.to_json(),
        "held_out": {
            "start": held_out_score(result.start, test, score).to_json(),
            "best": held_out_score(result.best, test, score).to_json(),
        },
    }
    if json_:
        print_json(data)
    else:
        h = data["held_out"]
        out.print(
            f"{dataset}: best {result.best.version_id} changes {result.changes}; held-out accuracy "
            f"start {h['start']['accuracy']:.3f} {h['start']['ci95']} -> best {h['best']['accuracy']:.3f} "
            f"{h['best']['ci95']} (n={h['best']['n']})",
            highlight=False,
        )


def register(_root: typer.Typer) -> None:
    """Nothing to add at the root: the command hangs on `ragloop improve`, defined on import."""
