"""`ragloop improve run | status | gaps`: the improvement loop from the command line.

`run` is the manual twin of what the service's workers do continuously: one diagnosis pass (select
the answers due, diagnose each exactly once through the durable queue) and then the remediation
layer's audit + schedule pass (`ragloop.improve.remediate.run_pass`). It is safe next to a running
`ragloop serve` on the same database: the work is leased job by job (a job the server's worker holds
is skipped here), and SQLite writers wait on the store's busy timeout instead of failing.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ragloop.cli.common import JsonOpt, console, fail, open_store, out, print_json, settings

if TYPE_CHECKING:
    from ragloop.store import Store

app = typer.Typer(help="The improvement loop: diagnose failed answers, the knowledge-gap log.", no_args_is_help=True)
UrlOpt = Annotated[
    str | None, typer.Option("--database-url", help="Default: RAGLOOP_DATABASE_URL, else RAGLOOP_HOME/ragloop.db.")
]


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="improve")


def _remediation_pass(store: Store) -> dict[str, Any]:
    """One audit + schedule pass of the remediation layer over the active pipeline version."""
    from ragloop.config import PipelineConfig
    from ragloop.improve.remediate import run_pass

    current = store.pipelines.current()
    config = PipelineConfig.model_validate(current.config) if current is not None else PipelineConfig()
    data: dict[str, Any] = run_pass(store, config, settings=settings()).to_json()
    return data


@app.command("run")
def run(
    max_jobs: Annotated[int | None, typer.Option("--max-jobs", help="Diagnose at most this many answers.")] = None,
    no_remediation: Annotated[
        bool, typer.Option("--no-remediation", help="Diagnose only (no audit or schedule pass).")
    ] = False,
    json_: JsonOpt = False,
    database_url: UrlOpt = None,
) -> None:
    """One pass: diagnose what is due, then audit and apply remediations."""
    from ragloop.improve.engine import DiagnosisConfig, DiagnosisEngine

    try:
        config = DiagnosisConfig.from_env()
    except ValueError as exc:
        fail(str(exc))
    worker = f"improve-run:{socket.gethostname()}:{os.getpid()}"
    with open_store(database_url) as store:
        engine = DiagnosisEngine(store, settings(), config)
        try:
            report = asyncio.run(engine.run_pass(worker, max_jobs=max_jobs)).to_json()
        finally:
            engine.close()
        report["remediation"] = None if no_remediation else _remediation_pass(store)
    if json_:
        print_json(report)
        return
    modes = ", ".join(f"{m} {n}" for m, n in sorted(report["failure_modes"].items())) or "none"
    console.print(
        f"selected {report['selected']} (skipped {report['skipped']} without an ideal answer); "
        f"diagnosed {report['diagnosed']}: {modes}; outcomes {report['outcomes'] or {}}; "
        f"{report['knowledge_gaps_logged']} knowledge gaps logged, {report['actions_proposed']} actions proposed",
        highlight=False,
    )
    for err in report["errors"]:
        console.print(f"  [yellow]retry/failed[/] {err}", highlight=False)
    if report["remediation"] is not None:
        console.print(f"remediation: {report['remediation'].get('scheduled')}", highlight=False)


def status_data(store: Store) -> dict[str, Any]:
    from ragloop.improve import recalibration
    from ragloop.improve.engine import DIAGNOSIS_TIER
    from ragloop.store.vocabulary import JobStatus

    tier1 = recalibration.state(store)
    return {
        "diagnoses": store.diagnoses.counts(),
        "failure_modes": store.diagnoses.mode_counts(),
        "diagnosis_jobs": {str(s): store.queue.count(DIAGNOSIS_TIER, statuses=[s]) for s in JobStatus},
        "knowledge_gaps": {"open": store.knowledge_gaps.count()},
        "improvement_actions": store.improvement_actions.counts(),
        "tier1": {
            "model": recalibration.active_model(store).version,
            "monitor_mode": tier1.monitor,
            "state": tier1.reason,
        },
    }


@app.command("status")
def status(json_: JsonOpt = False, database_url: UrlOpt = None) -> None:
    """Diagnoses by status and failure mode, diagnosis jobs, open knowledge gaps, actions by status, and
    tier 1's serving model and whether it is in monitor mode."""
    with open_store(database_url) as store:
        data = status_data(store)
    if json_:
        print_json(data)
        return
    for section, counts in data.items():
        shown = ", ".join(f"{k} {v}" for k, v in counts.items() if v) or "none"
        out.print(f"{section.replace('_', ' ')}: {shown}", highlight=False)


@app.command("gaps")
def gaps(
    collection: Annotated[str | None, typer.Option("--collection", "-c", help="Only this collection.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Addressed and dismissed groups too.")] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 50,
    json_: JsonOpt = False,
    database_url: UrlOpt = None,
) -> None:
    """The knowledge-gap log, largest groups first: what the collection cannot answer, and what to write."""
    with open_store(database_url) as store:
        rows = store.knowledge_gaps.listed(collection=collection, status=None if all_ else "open", limit=limit)
    data: list[dict[str, Any]] = [
        {
            "gap_id": g.gap_id,
            "collection": g.collection,
            "representative_question": g.representative_question,
            "count": g.count,
            "questions": g.questions,
            "answer_ids": g.answer_ids,
            "ideal_answers": g.ideal_answers,
            "generated_questions": g.generated_questions,
            "generated_by": g.generated_by,
            "best_chunk_id": g.best_chunk_id,
            "best_score": g.best_score,
            "status": g.status,
            "first_seen_at": g.first_seen_at.isoformat(),
            "last_seen_at": g.last_seen_at.isoformat(),
        }
        for g in rows
    ]
    if json_:
        print_json(data)
        return
    if not data:
        console.print("no knowledge gaps logged", highlight=False)
    for d in data:
        out.print(f"[{d['count']}x] {d['collection']}: {d['representative_question']}", highlight=False)
        for q in d["generated_questions"]:
            out.print(f"    - {q}", highlight=False)
