"""The CLI's remaining model calls reach the one call log (issue 12): `ragloop eval run` (the
pipeline's calls, under the run id it prints), `ragloop models check` (through the production
wrappers, logged under its run id) and the judge re-scoring labelled answers in `ragloop drift
qualify` (against each answer, under the qualification's run id); all in the default store's
`model_calls`, the same table the service writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from ragloop.agent.graph import NODES
from ragloop.cli import app as cli_app
from ragloop.cli.drift import stored_rejudge
from ragloop.config import Settings
from ragloop.improve.judge import make_judge
from ragloop.improve.payload import EvaluationPayload, PayloadSource
from ragloop.models.chat import CallPurpose, run_sync
from ragloop.retrieval.collection import Collection
from ragloop.store import Store
from ragloop.store.vocabulary import Tier
from tests.service.conftest import CFG

CHAT = CFG.with_overrides(agent={"chat_model": "test:scripted"})
Q = "When was the Zorblat Bridge completed?"
runner = CliRunner()


def _default_store() -> Store:
    return Store.open(f"sqlite:///{Settings().home / 'ragloop.db'}")


def test_eval_run_logs_the_pipelines_calls_under_its_run_id(
    collection: Collection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAGLOOP_DATABASE_URL", raising=False)
    cfg = tmp_path / "chat.yaml"
    cfg.write_text(yaml.safe_dump(CHAT.model_dump(mode="json")))
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({"id": "g1", "question": Q, "reference_answer": "1887"}) + "\n")
    args = ["eval", "run", "--dataset", "golden", "--golden", str(gold), "--collection", "default"]
    args += ["--config", str(cfg), "--judge", "lexical", "--out", str(tmp_path / "runs"), "--workers", "1", "--json"]
    r = runner.invoke(cli_app, args)
    assert r.exit_code == 0, r.output
    run_id = json.loads(r.stdout)["call_run_id"]
    assert run_id and run_id.startswith("eval-")
    with _default_store() as store:
        rows = store.model_calls.for_run(run_id)
    assert rows and all(x.purpose == CallPurpose.EVAL_RUN and x.model == "test:scripted" for x in rows)
    assert {x.step for x in rows} <= set(NODES)
    meta = json.loads(next((tmp_path / "runs").rglob("run.json")).read_text())
    assert meta["call_run_ids"] == [run_id]


def test_models_check_goes_through_the_wrappers_and_is_logged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAGLOOP_DATABASE_URL", raising=False)
    r = runner.invoke(cli_app, ["models", "check", "test:scripted", "--json", "--prompt", "ping"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    with _default_store() as store:
        (row,) = store.model_calls.for_run(data["run_id"])
    assert (row.purpose, row.model, row.cached) == (CallPurpose.MODEL_CHECK, "test:scripted", False)
    assert row.prompt[-1]["content"] == "ping" and row.response == data["answer"]


def test_qualification_judge_calls_are_logged_against_each_answer(store: Store) -> None:
    aid = store.queries.record_answer(
        session_id="s", question=Q, answer_text="It was completed in 1887.", pipeline_version="pv"
    ).answer_id
    payload = EvaluationPayload(
        question=Q, answer="It was completed in 1887.", sources=[PayloadSource(chunk_id="c", text="Built in 1887.")]
    )
    store.queue.enqueue(aid, Tier.HEURISTIC, payload.stored())  # where the served answer's payload is kept
    judge = make_judge("chat:test:scripted", Settings(), calls=store.model_calls)
    try:
        score = stored_rejudge(store, judge, "qual-1")(aid)
    finally:
        run_sync(judge.aclose())
    assert score is not None
    (row,) = store.model_calls.for_answer(aid)
    assert (row.run_id, row.purpose) == ("qual-1", CallPurpose.JUDGE_QUALIFICATION)
