"""`ragloop golden ...`: the golden set in the database (the one source of truth; JSONL in and out),
its versions, and its review queue. The twins of `/v1/golden…`.

ragloop golden import FILE | export FILE [--version N] | list [--version N] | add Q --answer A
ragloop golden revise ID [--answer A] | deprecate ID | versions | diff A [B] | summary [--version N] [--target-mix M]
ragloop golden review list|approve ID [--answer A]|reject ID     ragloop golden nominate
ragloop golden coverage [-c NAME] [--days D] [--radius R] | generate [-c NAME] [--max N]
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ragloop.cli.common import CollectionOpt, JsonOpt, emit, fail, open_store, settings

if TYPE_CHECKING:
    from ragloop.store import Store

golden_app = typer.Typer(no_args_is_help=True, help="The golden set (in the database): entries, versions, review.")
review_app = typer.Typer(no_args_is_help=True, help="The review queue of machine-proposed golden questions.")
golden_app.add_typer(review_app, name="review")
ACTOR = "cli"
VersionOpt = Annotated[int | None, typer.Option("--version", min=0, help="A golden-set version (default: now).")]


def register(app: typer.Typer) -> None:
    app.add_typer(golden_app, name="golden")


def _guard(fn: Callable[[], Any]) -> Any:
    """Store and input errors as one clear line and exit code 2, never a traceback."""
    from ragloop.experiments.golden import GoldenImportError
    from ragloop.experiments.golden_review import ReviewError
    from ragloop.store import NotFoundError, StoreConflictError

    try:
        return fn()
    except (NotFoundError, StoreConflictError, ReviewError, GoldenImportError, LookupError, ValueError) as exc:
        fail(str(exc))


@golden_app.command("import")
def golden_import(file: Path, json_: JsonOpt = False) -> None:
    """Add the file's questions to the database set as one version (questions already live are skipped)."""
    from ragloop.experiments.golden import import_jsonl

    with open_store() as store:
        res = _guard(lambda: import_jsonl(store, file, created_by=ACTOR))
    emit(res.to_json(), json_, f"imported {res.added} ({res.held_out} held out), skipped {res.skipped}")


@golden_app.command("export")
def golden_export(
    file: Path,
    without_held_out: Annotated[bool, typer.Option("--without-held-out")] = False,
    version: VersionOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Write the live set (or the set at --version) as harness JSONL (`ragloop eval run --golden FILE`)."""
    from ragloop.experiments.golden import export_jsonl

    with open_store() as store:
        n = _guard(lambda: export_jsonl(store, file, include_held_out=not without_held_out, version=version))
    emit({"exported": n, "path": str(file), "version": version}, json_, f"exported {n} entries to {file}")


@golden_app.command("list")
def golden_list(version: VersionOpt = None, json_: JsonOpt = False) -> None:
    """The live entries (or those of --version); H marks the held-out share."""
    from ragloop.experiments.golden import entry_json

    with open_store() as store:
        rows = _guard(
            lambda: (
                store.golden.current_golden_set() if version is None else store.golden.golden_set_at_version(version)
            )
        )
        data = [entry_json(e) for e in rows]
    emit(
        data,
        json_,
        "\n".join(f"{r['entry_id']}  {'H' if r['held_out'] else ' '}  {r['question'][:90]}" for r in data),
    )


@golden_app.command("add")
def golden_add(
    question: str,
    answer: Annotated[str, typer.Option("--answer", help="The expected answer.")] = "",
    doc: Annotated[list[str] | None, typer.Option("--doc", help="A required document id (repeatable).")] = None,
    chunk: Annotated[list[str] | None, typer.Option("--chunk", help="A required chunk id (repeatable).")] = None,
    difficulty: Annotated[str, typer.Option("--difficulty", help="easy | standard | hard")] = "standard",
    tag: Annotated[list[str] | None, typer.Option("--tag", help="A domain tag (repeatable).")] = None,
    unanswerable: Annotated[bool, typer.Option("--unanswerable", help="The right answer is a refusal.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Add a person's question (source human) as one new version."""
    from ragloop.experiments.golden import GoldenLine, add_entry, entry_json
    from ragloop.store.vocabulary import GoldenDifficulty, GoldenSource

    if difficulty not in set(GoldenDifficulty):
        fail(f"--difficulty must be one of {', '.join(GoldenDifficulty)}")
    if not question.strip() or (not answer.strip() and not unanswerable):
        fail("give a question and its --answer (or --unanswerable)")
    line = GoldenLine(
        question=question,
        expected_answer=answer,
        required_doc_ids=doc or [],
        required_chunk_ids=chunk or [],
        difficulty=difficulty,
        domain_tags=tag or [],
        should_refuse=unanswerable,
    )
    with open_store() as store:
        row = add_entry(store, line, created_by=ACTOR, source=GoldenSource.HUMAN)
        store.audit.record(
            "golden_add", triggered_by="ragloop golden add", actor=ACTOR, evidence={"entry_id": row.entry_id}
        )
    emit(entry_json(row), json_, f"added {row.entry_id} (version {row.added_in}){' held out' if row.held_out else ''}")


@golden_app.command("revise")
def golden_revise(
    entry_id: str,
    question: Annotated[str | None, typer.Option("--question")] = None,
    answer: Annotated[str | None, typer.Option("--answer", help="The new expected answer.")] = None,
    difficulty: Annotated[str | None, typer.Option("--difficulty", help="easy | standard | hard")] = None,
    doc: Annotated[list[str] | None, typer.Option("--doc", help="Required document ids (replace all).")] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="Domain tags (replace all).")] = None,
    note: Annotated[str | None, typer.Option("--note")] = None,
    json_: JsonOpt = False,
) -> None:
    """The entry's next version (the live one only); what is not given is copied."""
    from ragloop.experiments.golden import entry_json, revise

    changes: dict[str, Any] = {"question": question, "expected_answer": answer, "difficulty": difficulty}
    changes |= {"required_doc_ids": doc, "domain_tags": tag}
    if all(v is None for v in changes.values()):
        fail("give at least one of --question, --answer, --difficulty, --doc, --tag")
    with open_store() as store:
        row = _guard(lambda: revise(store, entry_id, actor=ACTOR, note=note, **changes))
        evidence = {"entry_id": entry_id, "new_entry_id": row.entry_id}
        store.audit.record("golden_revise", triggered_by="ragloop golden revise", actor=ACTOR, evidence=evidence)
    emit(entry_json(row), json_, f"revised {entry_id} → {row.entry_id} (version {row.added_in})")


@golden_app.command("deprecate")
def golden_deprecate(
    entry_id: str, note: Annotated[str | None, typer.Option("--note")] = None, json_: JsonOpt = False
) -> None:
    """Retire an entry (a new version without it)."""
    from ragloop.experiments.golden import entry_json

    with open_store() as store:
        row = _guard(lambda: store.golden.deprecate_golden_entry(entry_id, actor=ACTOR, note=note))
        store.audit.record(
            "golden_deprecate", triggered_by="ragloop golden deprecate", actor=ACTOR, evidence={"entry_id": entry_id}
        )
    emit(entry_json(row), json_, f"deprecated {entry_id} (version {row.deprecated_in})")


@golden_app.command("versions")
def golden_versions(limit: Annotated[int, typer.Option("--limit", min=1)] = 50, json_: JsonOpt = False) -> None:
    """The change log, newest first: each version, what made it, who, and how many entries it touched."""
    with open_store() as store:
        rows = store.golden.versions(limit=limit)
        head = store.golden.golden_set_version()
    versions: list[dict[str, Any]] = [
        {
            "version": r.version,
            "kind": r.kind,
            "actor": r.actor,
            "note": r.note,
            "added": list(r.added or []),
            "deprecated": list(r.deprecated or []),
            "created_at": r.created_at.isoformat(),
        }
        for r in rows
    ]
    data = {"golden_set_version": head, "versions": versions}
    lines = [
        f"{v['version']:>5}  {v['kind']:<9} +{len(v['added'])} -{len(v['deprecated'])}  {v['actor']}  {v['created_at']}"
        for v in versions
    ]
    emit(data, json_, "\n".join(lines) or "no versions yet")


@golden_app.command("diff")
def golden_diff(
    from_version: int, to_version: Annotated[int | None, typer.Argument()] = None, json_: JsonOpt = False
) -> None:
    """Entries added, deprecated and changed between two versions (TO defaults to the current one)."""
    from ragloop.experiments.golden_versions import diff_versions

    with open_store() as store:
        b = store.golden.golden_set_version() if to_version is None else to_version
        d = _guard(lambda: diff_versions(store, from_version, b))
    human = [f"{from_version} → {b}: +{len(d.added)} added, -{len(d.deprecated)} deprecated, ~{len(d.changed)} changed"]
    human += [f"  + {e.question[:100]}" for e in d.added]
    human += [f"  - {e.question[:100]}" for e in d.deprecated]
    human += [f"  ~ {c.after.question[:80]}  ({', '.join(c.fields)})" for c in d.changed]
    emit(d.to_json(), json_, "\n".join(human))


@golden_app.command("summary")
def golden_summary(
    version: VersionOpt = None,
    target_mix: Annotated[
        str | None,
        typer.Option("--target-mix", help="e.g. easy=0.3,standard=0.5,hard=0.2 (default: RAGLOOP_GOLDEN_TARGET_MIX)"),
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Counts by source, the held-out share, and the difficulty mix against its target (n, 95% CI)."""
    import os

    from ragloop.experiments.golden_versions import TARGET_MIX_ENV, summary
    from ragloop.experiments.golden_versions import target_mix as parse_mix

    mix = _guard(lambda: parse_mix(target_mix if target_mix is not None else os.environ.get(TARGET_MIX_ENV)))
    with open_store() as store:
        data = _guard(lambda: summary(store, mix, version=version))
    head = f"version {data['golden_set_version']}: {data['count']} entries, {data['held_out']} held out"
    lines = [f"{head}; by source {data['by_source']}"]
    for r in data["mix"]:
        ci = f"[{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}]" if r["ci95"] else "-"
        share = f"{r['share']:.2f}" if r["share"] is not None else "-"
        lines.append(
            f"  {r['difficulty']:<9} {r['count']:>4}/{r['n']:<4} {share} {ci}  target {r['target']:.2f}  {r['verdict']}"
        )
    emit(data, json_, "\n".join(lines))


# --------------------------------------------------------------------------- review queue


@review_app.command("list")
def review_list(
    status: Annotated[str, typer.Option("--status", help="pending | approved | rejected")] = "pending",
    limit: Annotated[int, typer.Option("--limit", min=1)] = 100,
    json_: JsonOpt = False,
) -> None:
    """Candidates as a reviewer sees them: question and proposed answer, never the machine's scores."""
    from ragloop.experiments.golden_review import review_json
    from ragloop.store.vocabulary import CandidateStatus

    if status not in set(CandidateStatus):
        fail(f"--status must be one of {', '.join(CandidateStatus)}")
    with open_store() as store:
        rows = [review_json(c) for c in store.golden_candidates.by_status(status=status, limit=limit)]
    human = "\n\n".join(
        f"{r['candidate_id']}  [{r['source']}]\n  Q: {r['question']}\n  A: {r['proposed_answer'][:400]}" for r in rows
    )
    emit(rows, json_, human or f"no {status} candidates")


@review_app.command("approve")
def review_approve(
    candidate_id: str,
    answer: Annotated[
        str | None, typer.Option("--answer", help="Your expected answer (default: confirm the proposed one).")
    ] = None,
    question: Annotated[str | None, typer.Option("--question", help="A corrected wording of the question.")] = None,
    note: Annotated[str | None, typer.Option("--note")] = None,
    json_: JsonOpt = False,
) -> None:
    """Approve a candidate: it enters the golden set (a new version) with you as its approver."""
    from ragloop.experiments.golden_review import approve

    with open_store() as store:
        res = _guard(
            lambda: approve(store, candidate_id, reviewer=ACTOR, expected_answer=answer, question=question, note=note)
        )
    emit(res, json_, f"approved {candidate_id}: entry {res['entry']['entry_id']} (version {res['entry']['added_in']})")


@review_app.command("reject")
def review_reject(
    candidate_id: str, note: Annotated[str | None, typer.Option("--note")] = None, json_: JsonOpt = False
) -> None:
    from ragloop.experiments.golden_review import reject

    with open_store() as store:
        res = _guard(lambda: reject(store, candidate_id, reviewer=ACTOR, note=note))
    emit(res, json_, f"rejected {candidate_id}")


# --------------------------------------------------------------------------- machines that propose


@golden_app.command("nominate")
def golden_nominate(json_: JsonOpt = False) -> None:
    """One nomination pass now (the nightly rule: heuristic > 0.92, judge > 0.90, >= 3 positive
    ratings, no negative feedback); what it finds waits for review."""
    from ragloop.experiments.golden_review import nominate

    with open_store() as store:
        rep = nominate(store, actor=ACTOR)
    emit(rep.to_json(), json_, f"nominated {len(rep.nominated)} of {rep.considered} rated answers; {rep.not_nominated}")


def _coverage(store: Store, collection: str, radius: float, days: float) -> Any:
    from ragloop.experiments.golden_coverage import collection_embedder, coverage

    embedder = _guard(lambda: collection_embedder(settings(), collection))
    return _guard(lambda: coverage(store, embedder, collection=collection, radius=radius, days=days))


def _coverage_lines(rep: Any) -> list[str]:
    if not rep.n:
        return [f"no production queries in the last {rep.days:g} days"]
    lo, hi = rep.ci95
    lines = [f"coverage {rep.coverage:.1%} (95% CI {lo:.1%}–{hi:.1%}, n={rep.n}) at radius {rep.radius}"]
    lines += [f"  gap x{c.size}: {c.representative[:100]}" for c in rep.uncovered_clusters]
    return lines


RadiusOpt = Annotated[
    float, typer.Option("--radius", min=0.01, max=1.0, help="Cosine similarity that counts as covered.")
]
DaysOpt = Annotated[float, typer.Option("--days", min=0.001, help="How far back production queries are read.")]


@golden_app.command("coverage")
def golden_coverage(
    collection: CollectionOpt = "default", radius: RadiusOpt = 0.5, days: DaysOpt = 7.0, json_: JsonOpt = False
) -> None:
    """The share of recent production queries the golden set covers (n, 95% CI), and the uncovered clusters."""
    with open_store() as store:
        rep = _coverage(store, collection, radius, days)
    emit(rep.to_json(), json_, "\n".join(_coverage_lines(rep)))


@golden_app.command("generate")
def golden_generate(
    collection: CollectionOpt = "default",
    radius: RadiusOpt = 0.5,
    days: DaysOpt = 7.0,
    max_candidates: Annotated[int, typer.Option("--max", min=1, max=200)] = 20,
    chat_model: Annotated[
        str | None, typer.Option("--chat-model", help="e.g. openai:gpt-4o-mini (default: offline templates).")
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Adversarial candidates (multi-document, misleading, negation, near-miss entity) at the coverage gaps."""
    from ragloop.experiments.golden_adversarial import generate, make_generator_chat
    from ragloop.experiments.golden_review import review_json
    from ragloop.models.chat.base import run_sync

    with open_store() as store:
        rep = _coverage(store, collection, radius, days)
        chat = _guard(lambda: make_generator_chat(settings(), chat_model, "auto", calls=store.model_calls))
        try:
            result, rows = run_sync(generate(store, rep, chat=chat, limit=max_candidates))
        finally:
            if chat is not None:
                run_sync(chat.aclose())
        data = {
            "generator": result.generator,
            "proposed": len(result.proposals),
            "already_proposed": len(result.proposals) - len(rows),
            "candidates": [review_json(r) for r in rows],
            "coverage": rep.to_json(),
        }
    tail = f"{len(rows)} new candidates ({result.generator}) await review: ragloop golden review list"
    human = [*_coverage_lines(rep), tail]
    emit(data, json_, "\n".join(human))
