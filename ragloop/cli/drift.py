"""`ragloop drift ...`: the evaluator-drift checks (`ragloop.experiments.drift`).

ragloop drift status [--json]                     the accepted judge, refused ones, the latest rubric check
ragloop drift qualify --judge NAME [--json]       a new judge against the stored human labels (>= 85%)
ragloop drift check [--window-days 30] [--json]   tier-2 scores vs implicit satisfaction (flag < 0.6)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from ragloop.cli.common import JsonOpt, console, fail, open_store, out, print_json, settings

if TYPE_CHECKING:
    from ragloop.improve.judge import Judge
    from ragloop.store import Store

drift_app = typer.Typer(no_args_is_help=True, help="Evaluator drift: judge qualification and the rubric check.")


def register(app: typer.Typer) -> None:
    app.add_typer(drift_app, name="drift")


def stored_rejudge(store: Store, judge: Judge, run_id: str) -> Any:
    """answer id -> the judge's overall score on the answer as it was served (the tier-1 job's payload);
    its model calls are logged against the answer, under the qualification's `run_id`."""
    from ragloop.improve.payload import answer_payload
    from ragloop.models.chat import CallPurpose, call_scope, run_sync

    def rejudge(answer_id: str) -> float | None:
        payload = answer_payload(store, answer_id)
        if payload is None:
            return None
        with call_scope(answer_id=answer_id, run_id=run_id, purpose=CallPurpose.JUDGE_QUALIFICATION):
            return run_sync(judge.evaluate(payload.judge_input())).overall

    return rejudge


@drift_app.command("status")
def drift_status_cmd(json_: JsonOpt = False) -> None:
    from ragloop.experiments.judges import drift_status

    with open_store() as store:
        data = drift_status(store)
    if json_:
        print_json(data)
        return
    pin = data["accepted_judge"]
    out.print(
        f"accepted judge: {pin['model']} {pin['version']} prompt {pin['prompt_sha'][:12]}"
        if pin
        else "accepted judge: none qualified yet",
        highlight=False,
    )
    for j in data["unqualified_in_use"]:
        console.print(
            f"[red]unqualified judge in use: {j['model']} {j['version']} ({j['scores']} recent tier-2 scores, "
            f"{j['not_counted']} not counted): {j['reason']}[/]",
            highlight=False,
        )
    rubric = data["rubric"]
    if rubric is None:
        out.print("rubric check: never run", highlight=False)
    else:
        ci = rubric["ci95"]
        corr = "—" if rubric["correlation"] is None else f"{rubric['correlation']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"
        line = f"rubric check ({rubric['window_end'][:10]}): {rubric['status']}, r = {corr}, n = {rubric['n']}"
        (console if data["rubric_flagged"] else out).print(
            f"[red]{line}[/]" if data["rubric_flagged"] else line, highlight=False
        )


@drift_app.command("qualify")
def drift_qualify(
    judge: Annotated[
        str, typer.Option("--judge", help="Judge name (`chat:<model>`, `llm:<model>`, `embedding:minilm`...).")
    ],
    min_agreement: Annotated[float, typer.Option("--min-agreement", min=0.0, max=1.0)] = 0.85,
    min_labels: Annotated[int, typer.Option("--min-labels", min=1)] = 30,
    json_: JsonOpt = False,
) -> None:
    """Score the human-labelled answers with JUDGE; it replaces the accepted judge only if the 95%
    interval of its agreement reaches --min-agreement (audited either way)."""
    from ragloop.experiments.drift import Pin, qualify
    from ragloop.improve.judge import make_judge
    from ragloop.models.chat import run_sync
    from ragloop.store import new_id

    run_id = new_id()
    with open_store() as store:
        try:  # the judge's calls go to this store's call log, like the worker's
            j = make_judge(judge, settings(), calls=store.model_calls)
        except (ValueError, LookupError) as exc:
            fail(str(exc))
        p = j.pin
        try:
            res = qualify(
                store,
                Pin(p.model, p.version, p.prompt_sha),
                stored_rejudge(store, j, run_id),
                min_agreement=min_agreement,
                min_labels=min_labels,
                actor="cli",
            )
        finally:
            run_sync(j.aclose())
    if json_:
        print_json(res.to_json() | {"call_run_id": run_id})
    else:
        out.print(f"{'ACCEPTED' if res.accepted else 'REFUSED'}: {res.reason}", highlight=False)
        out.print(f"model calls: ragloop models calls --run {run_id}", highlight=False)
    if not res.accepted:
        raise typer.Exit(1)


@drift_app.command("check")
def drift_check(
    window_days: Annotated[float, typer.Option("--window-days", min=0.01)] = 30.0,
    min_correlation: Annotated[float, typer.Option("--min-correlation", min=-1.0, max=1.0)] = 0.6,
    json_: JsonOpt = False,
) -> None:
    """Correlate the window's tier-2 scores with implicit satisfaction; below the bar the rubric is flagged."""
    from ragloop.experiments.drift import rubric_check
    from ragloop.improve.clock import SYSTEM_CLOCK

    with open_store() as store:
        res = rubric_check(
            store, SYSTEM_CLOCK.now(), window_s=window_days * 86400, min_correlation=min_correlation, actor="cli"
        )
    if json_:
        print_json(res.to_json())
        return
    corr = (
        "—"
        if res.correlation is None or res.ci95 is None
        else f"{res.correlation:.3f} [{res.ci95[0]:.3f}, {res.ci95[1]:.3f}]"
    )
    out.print(
        f"rubric {res.status.value}: r = {corr}, n = {res.n}, dissatisfied {res.dissatisfied} ({res.signals})",
        highlight=False,
    )
