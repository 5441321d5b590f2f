"""One call log, really written: a served answer's model calls, its tier-2 judge's calls and a CLI
question's calls all land in the database's `model_calls`, attributed to the answer (or run) they
were for, on SQLite and PostgreSQL; the model layer's own file holds only the response cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from ragloop.agent.graph import NODES
from ragloop.cli import app as cli_app
from ragloop.config import Settings
from ragloop.improve.judge import ChatJudge, make_judge
from ragloop.models.chat import Cached, CallPurpose, CallSink, Logged
from ragloop.retrieval.collection import Collection
from ragloop.store import ModelCall, Store
from ragloop.store.vocabulary import Tier
from tests.service.conftest import CFG, build_app, make_keys, running, worker_for
from tests.service.test_api import sse_events

pytestmark = pytest.mark.anyio

CHAT = CFG.with_overrides(agent={"chat_model": "test:scripted"})
Q = "When was the Zorblat Bridge completed?"


def _check_answer_calls(rows: list[ModelCall], answer_id: str) -> None:
    assert rows, "the answer graph's chat-model calls were not logged"
    for r in rows:
        assert (r.answer_id, r.run_id, r.purpose) == (answer_id, answer_id, CallPurpose.ANSWER)
        assert r.model == "test:scripted"
        assert r.step in NODES
        assert r.prompt and r.prompt[-1]["role"] == "user"
        assert r.prompt_tokens > 0 and r.completion_tokens > 0 and r.response
        assert r.latency_ms is not None and r.latency_ms >= 0
        assert r.cost_usd == 0.0 and r.error is None  # test:* is priced at zero


async def test_an_answers_model_calls_are_logged_with_its_id(collection: Collection, any_store: Store) -> None:
    store = any_store
    sink: CallSink = store.model_calls  # the repository is the model layer's sink (checked by mypy)
    assert sink is not None
    keys = make_keys(store)
    async with running(build_app(store, config=CHAT)) as c:
        r = await c.post("/v1/query", json={"question": Q, "session_id": "s1"}, headers=keys.u)
        assert r.status_code == 200, r.text
        first = r.json()["answer_id"]
        r = await c.post("/v1/query?stream=true", json={"question": Q, "session_id": "s2"}, headers=keys.u)
        second = sse_events(r.text)[-1][1]["answer_id"]

        rows1, rows2 = store.model_calls.for_answer(first), store.model_calls.for_answer(second)
        _check_answer_calls(rows1, first)
        _check_answer_calls(rows2, second)
        # every call made for the answer is linked; none of one answer's calls went to the other
        assert [r.call_id for r in store.model_calls.for_run(first)] == [r.call_id for r in rows1]
        assert not {r.call_id for r in rows1} & {r.call_id for r in rows2}
        # the same question again takes the same path through the cache: logged, no tokens spent
        assert [r.step for r in rows2] == [r.step for r in rows1]
        assert all(r.cached for r in rows2) and not rows1[0].cached
        usage = {u.model: u for u in store.model_calls.usage()}["test:scripted"]
        assert usage.calls == len(rows1) + len(rows2) and usage.cached == sum(r.cached for r in rows1 + rows2)
        assert usage.prompt_tokens == sum(r.prompt_tokens for r in rows1 + rows2 if not r.cached)

        listed = await c.get(f"/v1/answers/{first}/model-calls", headers=keys.a)
        assert listed.status_code == 200, listed.text
        body = listed.json()
        assert [x["call_id"] for x in body["calls"]] == [r.call_id for r in rows1]
        assert body["prompt_tokens"] == sum(r.prompt_tokens for r in rows1 if not r.cached) > 0
        assert {x["step"] for x in body["calls"]} <= set(NODES)
        assert (await c.get(f"/v1/answers/{first}/model-calls", headers=keys.u)).status_code == 403
        assert (await c.get(f"/v1/answers/{'0' * 32}/model-calls", headers=keys.a)).status_code == 404


async def test_a_judge_run_logs_its_calls_with_the_jobs_answer_id(collection: Collection, any_store: Store) -> None:
    store = any_store
    keys = make_keys(store)
    async with running(build_app(store)) as c:  # the offline graph: no chat model on the answer path
        r = await c.post("/v1/query", json={"question": Q, "session_id": "j"}, headers=keys.u)
        answer_id = r.json()["answer_id"]
    assert store.model_calls.for_answer(answer_id) == []
    judge = make_judge("chat:test:scripted", Settings(), calls=store.model_calls)
    assert isinstance(judge, ChatJudge) and isinstance(judge.model, Logged)
    assert not isinstance(judge.model.inner, Cached)  # a judge asked again judges again
    worker = worker_for(store, judge=judge, tier2_sample_rate=1.0)
    await worker.run(drain=True)
    (job,) = [j for j in store.queue.for_answer(answer_id) if j.tier == Tier.LLM_JUDGE]
    (call,) = store.model_calls.for_answer(answer_id)
    assert (call.purpose, call.run_id, call.model, call.step) == ("llm_judge", job.job_id, "test:scripted", None)
    assert call.prompt_tokens > 0 and call.latency_ms is not None and "faithfulness" in (call.response or "")
    (tier2,) = [e for e in store.evaluations.for_answer(answer_id) if e.evaluation_tier == Tier.LLM_JUDGE]
    assert tier2.status == "completed" and tier2.evaluator_model == "chat:test:scripted"
    await judge.aclose()


def test_the_cli_logs_to_the_default_store_without_a_service_database(
    collection: Collection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAGLOOP_DATABASE_URL", raising=False)
    cfg = tmp_path / "chat.yaml"
    cfg.write_text(yaml.safe_dump(CHAT.model_dump(mode="json")))
    runner = CliRunner()
    r = runner.invoke(cli_app, ["ask", Q, "--collection", "default", "--config", str(cfg), "--json"])
    assert r.exit_code == 0, r.output
    run_id = json.loads(r.stdout)["run_id"]
    home = Settings().home
    with Store.open(f"sqlite:///{home / 'ragloop.db'}") as store:
        rows = store.model_calls.for_run(run_id)
    assert rows and all(x.purpose == "answer" and x.answer_id is None and x.step in NODES for x in rows)
    assert not (home / "models.sqlite").exists() and (home / "cache" / "chat.sqlite").exists()
    r = runner.invoke(cli_app, ["models", "calls", "--run", run_id, "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert [c["call_id"] for c in out["calls"]] == [x.call_id for x in rows]
    assert out["totals"]["test:scripted"]["calls"] == len(rows)


def test_golden_runs_are_logged_apart_from_served_answers(collection: Collection, store: Store) -> None:
    """The scheduled regression and the candidates' golden checks answer through `build_answerer`."""
    from ragloop.experiments.runtime import build_answerer

    answer = build_answerer(Settings(), "default", CHAT, calls=store.model_calls)
    assert answer(Q).answer
    rows = store.model_calls.recent()
    assert rows and all((r.purpose, r.answer_id) == (CallPurpose.GOLDEN_RUN, None) and r.step in NODES for r in rows)
