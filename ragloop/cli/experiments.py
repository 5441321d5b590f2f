"""`ragloop experiments|pipeline ...` and `ragloop regress`: candidates, A/B experiments and the
golden-set regression run (the golden set itself: `ragloop.cli.golden`).

ragloop pipeline register cand.yaml [--full] [--json]     ragloop pipeline versions|diff A B
ragloop pipeline switches [--measure] [--json]     each switch: expected vs actual delta
ragloop experiments create --name n --treatment '{"retrieval": {"mode": "bm25"}}' --metric tier1_score
ragloop experiments list|results ID|stop ID|promote ID|reject ID|auto [--json]   ragloop pipeline approve V
ragloop regress [--json]
ragloop regress report [--out DIR] [--limit N] [--json]
ragloop regress webhook show|set|clear|test      the alert webhook setting (`ragloop.cli.alerts`)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import yaml
from pydantic import ValidationError

from ragloop.cli.common import CollectionOpt, JsonOpt, console, emit, fail, open_store, out, print_json, settings

if TYPE_CHECKING:
    pass

experiments_app = typer.Typer(no_args_is_help=True, help="A/B experiments between pipeline versions.")
pipeline_app = typer.Typer(no_args_is_help=True, help="Pipeline versions: register candidates, list, diff.")
regress_app = typer.Typer(
    invoke_without_command=True,
    help="The golden-set regression run (no subcommand), and its report (`regress report`).",
)
ACTOR = "cli"


def register(app: typer.Typer) -> None:
    app.add_typer(experiments_app, name="experiments")
    app.add_typer(pipeline_app, name="pipeline")
    app.add_typer(regress_app, name="regress")
    from ragloop.cli.alerts import webhook_app

    regress_app.add_typer(webhook_app, name="webhook")


# --------------------------------------------------------------------------- pipeline


@pipeline_app.command("register")
def pipeline_register(
    file: Annotated[Path, typer.Argument(help="YAML: overrides of the parent (default) or a full config (--full).")],
    full: Annotated[bool, typer.Option("--full", help="The file is a whole config, not overrides.")] = False,
    parent: Annotated[str | None, typer.Option("--parent", help="Parent version (default: current).")] = None,
    description: Annotated[str | None, typer.Option("--description")] = None,
    json_: JsonOpt = False,
) -> None:
    """Register a candidate version (it serves nothing until promoted)."""
    from ragloop.experiments.versions import ConfigError, full_config, register_candidate

    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        fail(f"cannot read {file}: {exc}")
    if not isinstance(raw, dict):
        fail(f"{file} must hold a mapping")
    with open_store() as store:
        try:
            row = register_candidate(
                store,
                full_config(raw) if full else raw,
                created_by=ACTOR,
                parent=parent,
                description=description or f"registered from {file.name}",
            )
        except (ConfigError, LookupError) as exc:
            fail(str(exc))
        data = {"version": row.version_id, "status": row.status, "parent_version": row.parent_version_id}
    emit(data, json_, f"candidate {data['version']} ({data['status']}, parent {data['parent_version']})")


@pipeline_app.command("approve")
def pipeline_approve(version: str, note: Annotated[str, typer.Option("--note")] = "", json_: JsonOpt = False) -> None:
    """Record a human approval checkpoint on a version (what a candidate waits for when
    RAGLOOP_AUTO_EXPERIMENT_REQUIRES_APPROVAL is on)."""
    import getpass

    with open_store() as store:
        try:
            row = store.pipelines.approve(version, actor=f"{ACTOR}:{getpass.getuser()}", note=note)
        except LookupError as exc:
            fail(str(exc))
        data = {"version": row.version_id, "approvals": list(row.approvals)}
    emit(data, json_, f"approved {version} ({len(data['approvals'])} approval(s))")


@pipeline_app.command("versions")
def pipeline_versions(json_: JsonOpt = False) -> None:
    with open_store() as store:
        rows = [
            {
                "version": r.version_id,
                "status": r.status,
                "parent_version": r.parent_version_id,
                "created_by": r.created_by,
                "promoted_via": r.promoted_via,
            }
            for r in store.pipelines.list_versions()
        ]
    emit(rows, json_, "\n".join(f"{r['version']}  {r['status']:<9}  parent {r['parent_version']}" for r in rows))


@pipeline_app.command("switches")
def pipeline_switches(
    measure: Annotated[
        bool, typer.Option("--measure", help="First measure every switch whose window has passed (the periodic task).")
    ] = False,
    json_: JsonOpt = False,
) -> None:
    """Each switch of the current version with its expected delta and, once measured, its actual one
    (`ragloop.experiments.activation_audit`)."""
    from ragloop.experiments.activation_audit import audit_activations, delta_text, switches
    from ragloop.service.config import ServiceConfig

    with open_store() as store:
        if measure:
            audit_activations(store, settings().clock.now, window_s=ServiceConfig.from_env().activation_audit_window_s)
        rows = [sw.model_dump(mode="json") for sw in switches(store)]

    def block(r: dict[str, Any]) -> str:
        return (
            f"{r['at']}  {r['version_before']} -> {r['version_after']}\n"
            f"  expected {delta_text(r['expected_delta']) or '-'}\n  actual   {delta_text(r['actual_delta']) or '-'}"
        )

    emit(rows, json_, "\n".join(block(r) for r in rows) or "no switches yet")


@pipeline_app.command("diff")
def pipeline_diff(a: str, b: str, json_: JsonOpt = False) -> None:
    from ragloop.experiments.versions import diff_versions

    with open_store() as store:
        try:
            changes = [c.to_json() for c in diff_versions(store, a, b)]
        except LookupError as exc:
            fail(str(exc))
    emit(changes, json_, "\n".join(f"{c['path']}: {c['before']!r} -> {c['after']!r}" for c in changes) or "same")


# --------------------------------------------------------------------------- experiments


def _arm(text: str | None) -> Any:
    if text is None:
        return {}
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text  # a version id


@experiments_app.command("create")
def experiments_create(
    name: Annotated[str, typer.Option("--name")],
    treatment: Annotated[str, typer.Option("--treatment", help="Overrides as JSON, or a version id.")],
    control: Annotated[str | None, typer.Option("--control", help="Overrides as JSON, or a version id.")] = None,
    split: Annotated[float, typer.Option("--split", help="Treatment share in (0, 0.5].")] = 0.05,
    min_samples: Annotated[int, typer.Option("--min-samples")] = 500,
    min_duration: Annotated[float, typer.Option("--min-duration", help="Seconds.")] = 86400.0,
    metric: Annotated[str, typer.Option("--metric")] = "tier1_score",
    min_effect: Annotated[float, typer.Option("--min-effect")] = 0.02,
    guardrail: Annotated[list[str] | None, typer.Option("--guardrail")] = None,
    json_: JsonOpt = False,
) -> None:
    from ragloop.experiments.registry import ExperimentConflictError, ExperimentError, ExperimentSpec, create_experiment

    body: dict[str, Any] = {
        "name": name,
        "control": _arm(control),
        "treatment": _arm(treatment),
        "traffic_split": split,
        "min_sample_size": min_samples,
        "min_duration": min_duration,
        "primary_metric": metric,
        "min_effect": min_effect,
    }
    if guardrail:
        body["guardrail_metrics"] = guardrail
    try:
        spec = ExperimentSpec.model_validate(body)
    except ValidationError as exc:
        fail("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()))
    with open_store() as store:
        try:
            row = create_experiment(store, spec, actor=ACTOR)
        except (ExperimentError, ExperimentConflictError) as exc:
            fail(str(exc))
        data = {
            "experiment_id": row.experiment_id,
            "status": row.status,
            "control_version": row.control_version,
            "treatment_version": row.treatment_version,
        }
    emit(
        data,
        json_,
        f"experiment {data['experiment_id']} running: {data['control_version']} vs {data['treatment_version']}",
    )


@experiments_app.command("auto")
def experiments_auto(collection: CollectionOpt = "default", json_: JsonOpt = False) -> None:
    """One auto-experiment step (what `ragloop serve` runs periodically): the oldest untried machine-made
    candidate is rebased, golden-checked and given an experiment with the `RAGLOOP_EXPERIMENT_*` defaults."""
    from ragloop.experiments.auto import auto_experiment_step, golden_check
    from ragloop.experiments.runtime import build_answerer
    from ragloop.experiments.versions import version_config
    from ragloop.service.config import ServiceConfig

    auto = ServiceConfig.from_env().auto_experiments
    with open_store() as store:
        check = golden_check(
            store,
            lambda v: build_answerer(settings(), collection, version_config(store, v), calls=store.model_calls),
            threshold=auto.golden_threshold,
            limit=auto.golden_limit,
        )
        step = auto_experiment_step(store, check, settings=auto, actor="auto-experiment (cli)")
    emit(step.to_json(), json_, f"{step.outcome.value}: candidate {step.candidate}, experiment {step.experiment_id}")


@experiments_app.command("list")
def experiments_list(json_: JsonOpt = False) -> None:
    with open_store() as store:
        rows = [
            {"experiment_id": r.experiment_id, "name": r.name, "status": r.status, "recommendation": r.recommendation}
            for r in store.experiments.list_experiments()
        ]
    emit(rows, json_, "\n".join(f"{r['experiment_id']}  {r['status']:<9} {r['name']}" for r in rows) or "none")


@experiments_app.command("results")
def experiments_results(experiment_id: str, json_: JsonOpt = False) -> None:
    """Aggregate now (a running experiment) and print the results."""
    from ragloop.experiments.aggregation import aggregate, stored_results

    with open_store() as store:
        row = store.experiments.get(experiment_id)
        if row is None:
            fail(f"no experiment {experiment_id!r}")
        res = aggregate(store, experiment_id, actor=ACTOR) if row.status == "running" else stored_results(row)
    emit(res, json_, json.dumps(res, indent=2, default=str))


def _end(experiment_id: str, to: str, reason: str, json_: bool) -> None:
    from ragloop.experiments import ExperimentStatus
    from ragloop.experiments.registry import ExperimentConflictError, end_experiment

    with open_store() as store:
        try:
            row = end_experiment(store, experiment_id, ExperimentStatus(to), actor=ACTOR, reason=reason)
        except (LookupError, ExperimentConflictError) as exc:
            fail(str(exc))
        data = {"experiment_id": row.experiment_id, "status": row.status}
    emit(data, json_, f"experiment {experiment_id} {data['status']}")


@experiments_app.command("stop")
def experiments_stop(experiment_id: str, reason: str = "manual", json_: JsonOpt = False) -> None:
    _end(experiment_id, "stopped", reason, json_)


@experiments_app.command("reject")
def experiments_reject(experiment_id: str, reason: str = "manual", json_: JsonOpt = False) -> None:
    _end(experiment_id, "rejected", reason, json_)


@experiments_app.command("promote")
def experiments_promote(
    experiment_id: str, collection: CollectionOpt = "default", reason: str = "manual", json_: JsonOpt = False
) -> None:
    """Promote the treatment now (admin decision, audited); the golden-set smoke test runs first."""
    from ragloop.experiments import ExperimentStatus
    from ragloop.experiments.aggregation import stored_results
    from ragloop.experiments.promotion import promote_experiment
    from ragloop.experiments.registry import utc_now
    from ragloop.experiments.runtime import golden_smoke_test
    from ragloop.experiments.versions import PromotedVia

    with open_store() as store:
        row = store.experiments.get(experiment_id)
        if row is None:
            fail(f"no experiment {experiment_id!r}")
        outcome = promote_experiment(
            store,
            experiment_id,
            evidence=stored_results(row) | {"admin_reason": reason},
            clock=utc_now,
            smoke_test=golden_smoke_test(store, settings(), collection),
            actor=ACTOR,
            via=PromotedVia.ADMIN,
            from_statuses=(ExperimentStatus.RUNNING, ExperimentStatus.HALTED),
        )
    emit(outcome.to_json(), json_, f"{'promoted' if outcome.promoted else 'not promoted'}: {outcome.reason}")
    if not outcome.promoted:
        raise typer.Exit(1)


# --------------------------------------------------------------------------- regression


@regress_app.callback()
def regress(
    ctx: typer.Context,
    collection: CollectionOpt = "default",
    limit: Annotated[int | None, typer.Option("--limit", help="Only the first N working-set entries.")] = None,
    webhook: Annotated[
        str | None,
        typer.Option(
            "--webhook",
            help="Alert URL for this run (else the stored `regress webhook set`, else RAGLOOP_REGRESSION_WEBHOOK_URL).",
        ),
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """The golden-set regression: the working set (not the held-out 20%) through the current version,
    compared with the last approved run; a drop rolls back to that run's version."""
    import os

    if ctx.invoked_subcommand is not None:
        return

    from ragloop.experiments.alerts import ENV_VAR
    from ragloop.experiments.regression import run_regression
    from ragloop.experiments.runtime import build_answerer
    from ragloop.experiments.versions import current_config
    from ragloop.service.pipelines import ensure_active_version

    with open_store() as store:
        ensure_active_version(store, None, actor="ragloop regress")
        version, config = current_config(store)
        assert version is not None
        try:
            answer = build_answerer(settings(), collection, config, calls=store.model_calls)
        except (LookupError, ValueError) as exc:
            fail(str(exc))
        res = run_regression(
            store,
            answer,
            pipeline_version=version,
            limit=limit,
            webhook_url=webhook,
            default_webhook_url=os.environ.get(ENV_VAR) or None,
        )
    data = res.to_json()
    if json_:
        print_json(data)
    else:
        out.print(
            f"regression run {res.run_id}: {res.run_status}, {res.entries} entries, metrics {res.metrics}; "
            f"regression {'DETECTED' if res.regression_detected else 'not detected'}",
            highlight=False,
        )
        if res.alert:
            console.print(f"[red]{res.alert}[/]", highlight=False)


@regress_app.command("report")
def regress_report(
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Write regression.md, .json and .png (the chart) here.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="The latest N runs.")] = 50,
    json_: JsonOpt = False,
) -> None:
    """The regression runs: per metric mean, n and 95% CI, the baseline comparison; a trend chart."""
    from ragloop.experiments.regression_report import regression_history, render_markdown, write_report

    with open_store() as store:
        history = regression_history(store, limit=limit)
    files = write_report(history, out_dir) if out_dir is not None else {}
    if json_:
        print_json(history.to_json() | {"files": files})
        return
    out.print(render_markdown(history, None), highlight=False, markup=False)
    for kind, path in files.items():
        out.print(f"{kind}: {path}", highlight=False)
