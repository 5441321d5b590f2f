"""`ragloop improve optimum`: the AutoRAG-style offline optimum over the remediations' knobs
(`ragloop.improve.optimum`), searched on a data set's traffic part with its gold labels and scored
on its held-out part: the denominator of the loop's outcome 4.

    ragloop improve optimum --dataset mtrag [--start start.yaml] [--limit 120] [--json]
    ragloop improve optimum --dataset squad --traffic 150 --heldout 100 \
        --results benchmarks/results/self_improvement/self_improvement.json --arm squad-defaults
    ragloop improve optimum --dataset squad ... --answer-check llm:local:qwen2.5-coder-1.5b

`--heldout N` scores the simulation's own fixed held-out sample (`simulation.data.sample_heldout`,
same seed), so the optimum and the loop are measured on the same questions; `--traffic N` searches on
a fixed random sample of the traffic part (every traffic article, not the first ones). With
`--results` and `--arm`, the arm's final served version is scored on those held-out items too and
outcome 4 (loop / optimum, paired bootstrap CI) is written into that results JSON and its Markdown.
`--answer-check READER` (the simulation's) adds the answer check's threshold as the last stage.
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
    traffic_n: Annotated[
        int | None, typer.Option("--traffic", help="Search on a fixed random sample of N traffic items.")
    ] = None,
    heldout_n: Annotated[
        int | None, typer.Option("--heldout", help="Score the simulation's fixed sample of N held-out items.")
    ] = None,
    heldout_avoid: Annotated[
        str, typer.Option("--heldout-avoid", help="As the simulation's: sizes of earlier samples (100,300).")
    ] = "",
    seed: Annotated[int, typer.Option("--seed", help="The simulation's seed (its held-out sample).")] = 0,
    answer_check: Annotated[
        str | None,
        typer.Option("--answer-check", help="The reader the loop could turn on: its τ_answer is searched last."),
    ] = None,
    results: Annotated[
        Path | None, typer.Option("--results", help="A simulation results JSON: write outcome 4 into it.")
    ] = None,
    arm: Annotated[
        str | None, typer.Option("--arm", help="The arm of --results whose final version is compared.")
    ] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Run cache (default RAGLOOP_HOME/optimum).")] = None,
    workers: Annotated[int, typer.Option("--workers")] = 2,
    json_: JsonOpt = False,
) -> None:
    """Search the best config on the traffic part (node by node), then score start and best on the held-out part."""
    from ragloop.config import PipelineConfig
    from ragloop.evaluation.suites import mtrag_suite, squad_suite
    from ragloop.improve.optimum import (
        held_out_score,
        loop_config,
        runner_scorer,
        sample_items,
        search,
        sim_heldout,
        space,
        split_items,
    )
    from ragloop.improve.simulation.data import parse_sizes, sample_heldout
    from ragloop.improve.simulation.outcomes import outcome_4
    from ragloop.improve.simulation.report import write_outcome_4

    if dataset not in ("squad", "mtrag"):
        fail(f"--dataset must be squad or mtrag, got {dataset!r}")
    try:
        suite = mtrag_suite(datasets_dir) if dataset == "mtrag" else squad_suite(datasets_dir)
        raw = yaml.safe_load(start.read_text(encoding="utf-8")) if start else {}
        base = PipelineConfig().with_overrides(**(raw or {}))
    except Exception as exc:  # unreadable data set or start config: say which
        fail(f"{type(exc).__name__}: {exc}")
    if (results is None) != (arm is None):
        fail("--results and --arm go together")
    traffic, test = split_items(suite.items)
    if limit:
        traffic, test = traffic[:limit], test[:limit]
    traffic = sample_items(traffic, traffic_n, f"optimum-traffic:{seed}")
    if heldout_n is not None:  # the simulation's held-out list, in its order, so the sample is its sample
        try:
            avoid = parse_sizes(heldout_avoid)
        except ValueError as exc:
            fail(str(exc))
        test = sample_heldout(sim_heldout(dataset, datasets_dir), heldout_n, seed, avoid=avoid)
    s = settings()
    score = runner_scorer(suite, s, out_dir or (s.home / "optimum" / dataset), workers=workers)
    result = search(base, traffic, score, space(answer_check))
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
    if results is not None and arm is not None:
        try:
            loop_cfg = loop_config(results, arm, result, answer_check)
        except (OSError, ValueError, LookupError) as exc:
            fail(f"{type(exc).__name__}: {exc}")
        o4 = outcome_4(dataset, score(loop_cfg, test), score(result.best, test))
        o4 |= {
            "arm": arm,
            "loop_version": loop_cfg.version_id,
            "optimum_version": result.best.version_id,
            "optimum_changes": result.changes,
            "traffic_items": len(traffic),
            "configs_tried": len(result.trials),
        }
        write_outcome_4(results, o4)
        data["outcome_4"] = o4
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
        if "outcome_4" in data:
            out.print(f"outcome 4 ({arm}): {data['outcome_4']['summary']}", highlight=False)


def register(_root: typer.Typer) -> None:
    """Nothing to add at the root: the command hangs on `ragloop improve`, defined on import."""
