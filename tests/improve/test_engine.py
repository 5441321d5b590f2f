"""The diagnosis pass on a real (hashed) collection and a real store: selection, diagnosis, the
knowledge-gap log, proposed actions, and failures that are recorded and retried."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from ragloop.config import Settings
from ragloop.improve.engine import DIAGNOSIS_TIER, DiagnosisConfig, DiagnosisEngine, Outcome, request_diagnosis
from ragloop.improve.types import DiagnosisInput, FailureMode
from ragloop.models.chat.base import ChatRequest
from ragloop.models.chat.testing import FunctionModel
from ragloop.models.errors import ModelError
from ragloop.models.scoring import LexicalScorer
from ragloop.models.scoring.base import Judgement, Scorer
from ragloop.retrieval.collection import Collection
from ragloop.store import EvaluationQueue, Store
from ragloop.store.vocabulary import Tier
from tests.agent.conftest import DOCS, HASHED, make_collection

GAP_Q = "What is the boiling point of liquid nitrogen at sea level?"
GAP_FIX = "Liquid nitrogen boils at about minus 196 degrees Celsius (77 kelvin) at atmospheric pressure."
BRIDGE_Q = "When was the Zorblat Bridge completed?"


@pytest.fixture
def coll(tmp_path: Path) -> Iterator[Collection]:
    c = make_collection("default", DOCS, tmp_path / "docs")
    yield c
    c.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(f"sqlite:///{tmp_path / 'store' / 'ragloop.db'}")
    s.queue = EvaluationQueue(s.db, backoff_base_s=0.0, backoff_max_s=0.0, max_attempts=3)
    yield s
    s.close()


def serve(
    store: Store,
    coll: Collection,
    question: str,
    answer: str,
    docs: Sequence[str],
    *,
    k: int = 2,
    agent: dict[str, object] | None = None,
) -> str:
    """Record a served answer as the recorder does (answer + tier-1 job payload); `docs` in served order;
    `agent`: overrides of the serving pipeline's agent section."""
    config = HASHED.with_overrides(retrieval={"k": k}, **({"agent": agent} if agent else {}))
    version = store.pipelines.register_config(config).version_id
    by_doc = {c.doc_id: c for c in coll.load().chunks}
    retrieved = [
        {"chunk_id": by_doc[d].chunk_id, "doc_id": d, "score": 1.0 - i / 10, "text": by_doc[d].text}
        for i, d in enumerate(docs)
    ]
    row = store.queries.record_answer(
        session_id="s",
        question=question,
        answer_text=answer,
        pipeline_version=version,
        retrieved_chunk_ids=[str(r["chunk_id"]) for r in retrieved],
    )
    payload = {
        "question": question,
        "answer": answer,
        "refused": False,
        "sources": [{"chunk_id": r["chunk_id"], "text": r["text"]} for r in retrieved[:k]],
        "retrieved": retrieved,
        "pipeline_version": version,
    }
    store.queue.enqueue(row.answer_id, "heuristic", payload)
    return row.answer_id


def engine(store: Store, scorer: Scorer | None = None, *, timeout_s: float = 120.0) -> DiagnosisEngine:
    config = DiagnosisConfig(timeout_s=timeout_s)
    return DiagnosisEngine(store, Settings(), config, scorer=scorer or LexicalScorer(name="lexical"))


def run_pass(e: DiagnosisEngine) -> dict[str, object]:
    return asyncio.run(e.run_pass("test-worker")).to_json()


def test_a_correction_the_corpus_lacks_is_a_logged_knowledge_gap(store: Store, coll: Collection) -> None:
    aid = serve(store, coll, GAP_Q, "The Zorblat Bridge spans the river Vell [1].", ["bridge.md", "ferry.md"])
    store.feedback.add(aid, "negative", issues=["wrong_answer"], corrected_answer=GAP_FIX)
    report = run_pass(engine(store))
    assert report["selected"] == 1 and report["diagnosed"] == 1 and report["failure_modes"] == {"knowledge_gap": 1}
    d = store.diagnoses.get(aid)
    assert d is not None and d.status == "completed" and d.failure_mode == "knowledge_gap"
    assert d.ideal_source == "correction" and d.collection == "default" and d.attempts == 1
    assert d.evidence is not None and d.evidence["kind"] == "knowledge_gap"
    assert d.evidence["best_score"] < d.evidence["threshold"] and d.evidence["best_chunk_id"]
    assert d.reasons == ["negative_feedback", "correction"]
    # the stored input replays to the same verdict
    from ragloop.improve.classifier import classify

    assert d.diagnosis_input is not None
    assert classify(DiagnosisInput.model_validate(d.diagnosis_input)).mode is FailureMode.KNOWLEDGE_GAP
    [gap] = store.knowledge_gaps.listed()
    assert gap.collection == "default" and gap.count == 1 and gap.answer_ids == [aid]
    assert gap.representative_question == GAP_Q and gap.ideal_answers == [GAP_FIX]
    assert gap.best_chunk_id == d.evidence["best_chunk_id"] and gap.generated_by == "template"
    assert any("liquid nitrogen boils" in q for q in gap.generated_questions)
    actions = {a.kind: a for a in store.improvement_actions.listed()}
    # answered although nothing supports it: the gate let it through, so the thresholds are a candidate too
    assert set(actions) == {"knowledge_gap_log", "threshold_recalibration"}
    action = actions["knowledge_gap_log"]
    assert (action.status, action.domain, action.answer_ids) == ("proposed", "default", [aid])
    assert action.component == "knowledge_gaps:default" and action.dedupe_key == gap.gap_id and action.priority > 0
    assert actions["threshold_recalibration"].component == "pipeline"
    assert {a["kind"]: a["action_id"] for a in d.actions} == {k: a.action_id for k, a in actions.items()}
    # nothing is diagnosed twice: a second pass selects nothing, a replayed job cannot count the gap again
    again = run_pass(engine(store))
    assert again["selected"] == 0 and again["diagnosed"] == 0
    assert store.knowledge_gaps.listed()[0].count == 1


def test_the_oracle_chunk_below_the_top_k_is_a_ranking_failure(store: Store, coll: Collection) -> None:
    aid = serve(store, coll, BRIDGE_Q, "A ferry crossed the Vell [1].", ["ferry.md", "tower.md", "bridge.md"], k=2)
    store.feedback.add(aid, "negative", corrected_answer="1887")
    run_pass(engine(store))
    d = store.diagnoses.get(aid)
    assert d is not None
    assert d.failure_mode == "ranking_failure", (d.failure_mode, d.rule, d.error)
    bridge = next(c.chunk_id for c in coll.load().chunks if c.doc_id == "bridge.md")
    assert d.evidence is not None and [(m["chunk_id"], m["rank"]) for m in d.evidence["missed"]] == [(bridge, 3)]
    [action] = store.improvement_actions.listed()
    assert action.kind == "ranking_buffer" and action.component == "ranking_buffer:default"
    assert store.knowledge_gaps.listed() == []


def test_answers_without_an_ideal_answer_are_skipped_until_corrected(store: Store, coll: Collection) -> None:
    aid = serve(store, coll, BRIDGE_Q, "A ferry crossed the Vell [1].", ["ferry.md", "tower.md"])
    store.feedback.add(aid, "negative")
    first = run_pass(engine(store))
    assert (first["selected"], first["skipped"]) == (0, 1)
    row = store.diagnoses.get(aid)
    assert row is not None and row.status == "skipped" and "no ideal answer" in (row.error or "")
    # a diagnosis requested directly (the feedback route) without an ideal answer is skipped too
    request_diagnosis(store, aid, ["negative_feedback"])
    skipped = run_pass(engine(store))
    assert skipped["outcomes"] == {"skipped": 1}
    store.feedback.add(aid, "negative", corrected_answer="It was completed in 1887.")
    later = run_pass(engine(store))
    assert later["selected"] == 1 and later["diagnosed"] == 1
    done = store.diagnoses.get(aid)
    assert done is not None and done.status == "completed" and done.ideal_answer == "It was completed in 1887."


FIXED = "It was completed in 1887."


def test_a_reviewer_s_correction_is_the_ideal_answer(store: Store, coll: Collection) -> None:
    aid = serve(store, coll, BRIDGE_Q, "A ferry crossed the Vell [1].", ["ferry.md", "tower.md"])
    store.feedback.add(aid, "negative", corrected_answer="Some year.")
    store.feedback.add(aid, "negative")
    request_diagnosis(store, aid, ["negative_feedback"])
    # stored as POST /v1/review/{id} stores it; the reviewer outranks the user's earlier correction
    store.evaluations.add(aid, Tier.HUMAN, scores={}, failure_evidence={"corrected_answer": FIXED})
    run_pass(engine(store))
    done = store.diagnoses.get(aid)
    assert done is not None and done.status == "completed" and done.ideal_answer == FIXED


def test_a_reviewer_s_correction_alone_reopens_a_skipped_diagnosis(store: Store, coll: Collection) -> None:
    aid = serve(store, coll, BRIDGE_Q, "A ferry crossed the Vell [1].", ["ferry.md", "tower.md"])
    store.feedback.add(aid, "negative")
    assert run_pass(engine(store))["skipped"] == 1
    store.evaluations.add(aid, Tier.HUMAN, scores={}, failure_evidence={"corrected_answer": FIXED})
    request_diagnosis(store, aid, ["review_correction"])  # what the review route does on a correction
    later = run_pass(engine(store))
    assert later["diagnosed"] == 1, later
    done = store.diagnoses.get(aid)
    assert done is not None and done.status == "completed" and done.ideal_answer == FIXED


class FlakyScorer(Scorer):
    """Lexical scores, but the first `failures` calls raise like a judge backend that is down."""

    def __init__(self, failures: int, *, delay_s: float = 0.0) -> None:
        self.inner = LexicalScorer(name="lexical")
        self.name = "test:flaky"
        self.failures = failures
        self.delay_s = delay_s
        self.calls = 0

    async def _gate(self) -> None:
        self.calls += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.calls <= self.failures:
            raise ModelError("judge backend is down")

    async def relevance(self, query: str, passages: Sequence[str]) -> list[Judgement]:
        await self._gate()
        return await self.inner.relevance(query, passages)

    async def support(self, claims: Sequence[str], contexts: Sequence[str]) -> list[Judgement]:
        await self._gate()
        return await self.inner.support(claims, contexts)


def test_a_failing_judge_leaves_a_recorded_retried_diagnosis(store: Store, coll: Collection) -> None:
    aid = serve(store, coll, GAP_Q, "The bridge spans the Vell [1].", ["bridge.md", "ferry.md"])
    store.feedback.add(aid, "negative", corrected_answer=GAP_FIX)
    e = engine(store, FlakyScorer(failures=1))
    asyncio.run(e.run_pass("w", max_jobs=1))
    row = store.diagnoses.get(aid)
    assert row is not None and (row.status, row.attempts) == ("retrying", 1)
    assert "ModelError: judge backend is down" in (row.error or "") and "attempt 1/3" in (row.error or "")
    job = next(j for j in store.queue.for_answer(aid) if j.tier == DIAGNOSIS_TIER)
    assert job.status == "queued" and job.last_error and "judge backend is down" in job.last_error
    asyncio.run(e.run_pass("w"))  # the retry is due (no backoff in the test queue): it succeeds
    row = store.diagnoses.get(aid)
    assert row is not None and (row.status, row.attempts, row.error) == ("completed", 2, None)
    assert row.failure_mode == "knowledge_gap"


def test_a_judge_that_keeps_failing_or_timing_out_is_recorded_as_failed(store: Store, coll: Collection) -> None:
    down = serve(store, coll, GAP_Q, "The bridge spans the Vell [1].", ["bridge.md"])
    store.feedback.add(down, "negative", corrected_answer=GAP_FIX)
    report = run_pass(engine(store, FlakyScorer(failures=10**6)))
    assert report["outcomes"] == {"retry": 2, "failed": 1}
    row = store.diagnoses.get(down)
    assert row is not None and (row.status, row.attempts) == ("failed", 3) and "attempt 3/3" in (row.error or "")
    job = next(j for j in store.queue.for_answer(down) if j.tier == DIAGNOSIS_TIER)
    assert job.status == "dead"

    slow = serve(store, coll, BRIDGE_Q, "A ferry crossed the Vell [1].", ["ferry.md"])
    store.feedback.add(slow, "negative", corrected_answer="1887")
    e = engine(store, FlakyScorer(failures=0, delay_s=0.3), timeout_s=0.05)
    out = asyncio.run(e.run_pass("w", max_jobs=1))
    assert out.outcomes == {Outcome.RETRY: 1}
    row = store.diagnoses.get(slow)
    assert row is not None and row.status == "retrying" and "ran past 0.05 s" in (row.error or "")


def test_diagnosis_config_reads_the_environment() -> None:
    cfg = DiagnosisConfig.from_env({"RAGLOOP_DIAGNOSIS_SCORER": "embedding:minilm", "RAGLOOP_COLLECTION": "kb"})
    assert (cfg.scorer, cfg.default_collection, cfg.timeout_s) == ("embedding:minilm", "kb", 120.0)
    with pytest.raises(ValueError, match="RAGLOOP_DIAGNOSIS_TIMEOUT_S"):
        DiagnosisConfig.from_env({"RAGLOOP_DIAGNOSIS_TIMEOUT_S": "soon"})
    with pytest.raises(ValueError, match="shorter than its lease"):
        DiagnosisConfig(timeout_s=600.0, lease_seconds=300.0)


def _failing(req: ChatRequest) -> str:
    raise ModelError("chat backend is down")


def _answering(req: ChatRequest) -> str:
    if req.output_type is not None and "paraphrases" in req.output_type.model_fields:
        return json.dumps({"paraphrases": ["Boiling temperature of liquid nitrogen?", "N2 boiling point?", "x?"]})
    return json.dumps({"questions": ["At what temperature does liquid nitrogen boil?"]})


def test_a_failing_paraphrase_model_is_retried_then_its_offline_stand_ins_are_kept(
    store: Store, coll: Collection
) -> None:
    aid = serve(store, coll, GAP_Q, "The bridge spans the Vell [1].", ["bridge.md"])
    store.feedback.add(aid, "negative", corrected_answer=GAP_FIX)
    e = DiagnosisEngine(
        store, Settings(), DiagnosisConfig(), scorer=LexicalScorer(name="lexical"), chat_model=FunctionModel(_failing)
    )
    report = asyncio.run(e.run_pass("w")).to_json()
    assert report["outcomes"] == {"retry": 2, "completed": 1}  # the last attempt keeps the offline variants
    row = store.diagnoses.get(aid)
    assert row is not None and (row.status, row.attempts, row.failure_mode) == ("completed", 3, "knowledge_gap")
    assert row.diagnosis_input is not None
    sources = [v["source"] for v in row.diagnosis_input["oracle"]["variants"] if v["kind"] == "paraphrase"]
    assert sources and all("chat model failed: ModelError" in s for s in sources)
    [gap] = store.knowledge_gaps.listed()
    assert gap.generated_by == "template (chat model failed: ModelError)"


def test_a_chat_model_writes_the_paraphrases_and_the_gap_questions(store: Store, coll: Collection) -> None:
    aid = serve(store, coll, GAP_Q, "The bridge spans the Vell [1].", ["bridge.md"])
    store.feedback.add(aid, "negative", corrected_answer=GAP_FIX)
    model = FunctionModel(_answering, name="test:writer")
    e = DiagnosisEngine(store, Settings(), DiagnosisConfig(), scorer=LexicalScorer(name="lexical"), chat_model=model)
    assert asyncio.run(e.run_pass("w")).to_json()["outcomes"] == {"completed": 1}
    row = store.diagnoses.get(aid)
    assert row is not None and row.diagnosis_input is not None
    texts = [v["text"] for v in row.diagnosis_input["oracle"]["variants"] if v["kind"] == "paraphrase"]
    assert texts[0] == "Boiling temperature of liquid nitrogen?"
    [gap] = store.knowledge_gaps.listed()
    assert (gap.generated_by, gap.generated_questions) == (
        "chat:test:writer",
        ["At what temperature does liquid nitrogen boil?"],
    )


def test_the_diagnosis_chat_calls_are_logged_against_the_answer(store: Store, coll: Collection) -> None:
    """Without an override the engine builds the serving pipeline's chat model, wrapped and logged to the store."""
    aid = serve(
        store, coll, GAP_Q, "The bridge spans the Vell [1].", ["bridge.md"], agent={"chat_model": "test:scripted"}
    )
    store.feedback.add(aid, "negative", corrected_answer=GAP_FIX)
    assert asyncio.run(engine(store).run_pass("w")).to_json()["outcomes"] == {"completed": 1}
    (job,) = [j for j in store.queue.for_answer(aid) if j.tier == DIAGNOSIS_TIER]
    calls = store.model_calls.for_answer(aid)
    assert [(c.purpose, c.step, c.model, c.run_id) for c in calls] == [
        ("diagnosis", "paraphrase", "test:scripted", job.job_id),
        ("diagnosis", "gap_questions", "test:scripted", job.job_id),
    ]
    assert all(c.prompt_tokens > 0 and c.latency_ms is not None and c.error is None for c in calls)


def test_two_racing_passes_diagnose_each_answer_once(store_url: str, coll: Collection) -> None:
    """Two engines on separate connections (as two processes would be) share the work, on SQLite and PostgreSQL."""
    setup = Store.open(store_url)
    ids = []
    for i in range(6):
        aid = serve(setup, coll, f"{GAP_Q} ({i})", "The bridge spans the Vell [1].", ["bridge.md"])
        setup.feedback.add(aid, "negative", corrected_answer=GAP_FIX)
        ids.append(aid)
    setup.close()
    stores = [Store.open(store_url) for _ in range(2)]
    engines = [engine(s) for s in stores]

    async def race() -> list[dict[str, object]]:
        reports = await asyncio.gather(*(e.run_pass(f"w{i}") for i, e in enumerate(engines)))
        return [r.to_json() for r in reports]

    reports = asyncio.run(race())
    assert sum(int(str(r["diagnosed"])) for r in reports) == len(ids), reports
    check = stores[0]
    for aid in ids:
        row = check.diagnoses.get(aid)
        assert row is not None and (row.status, row.attempts) == ("completed", 1)
    [gap] = check.knowledge_gaps.listed()  # six paraphrases of one question: one group, each answer once
    assert gap.count == len(ids) and sorted(gap.answer_ids) == sorted(ids)
    for s in stores:
        s.close()
