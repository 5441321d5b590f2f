"""The machines that propose golden questions, and what keeps them honest: the nomination rule and
its nightly clock, the review that hides the scores, coverage with its interval, the adversarial
generator (templates and a chat model), the difficulty mix, and the held-out share that regression
and remediation never read."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from ragloop.config import PipelineConfig
from ragloop.experiments.golden import is_held_out, working_set
from ragloop.experiments.golden_adversarial import KINDS, Seed, from_chat, from_templates, generate, near_miss
from ragloop.experiments.golden_coverage import AskedQuestion, coverage, measure
from ragloop.experiments.golden_review import (
    REVIEW_FIELDS,
    NightlyNomination,
    NominationRule,
    ReviewError,
    approve,
    nominate,
    review_json,
)
from ragloop.experiments.golden_versions import TargetMix, mix_report, summary
from ragloop.experiments.regression import Answered, run_regression
from ragloop.improve.clock import ManualClock
from ragloop.models import HashedEmbedder
from ragloop.models.chat.base import ChatRequest, run_sync
from ragloop.models.chat.testing import FunctionModel
from ragloop.store import Answer, Store, utcnow
from ragloop.store.vocabulary import GoldenDifficulty

SCORE_WORDS = ("score", "heuristic", "judge", "rating", "evidence", "answer_id", "generator")


def _served(
    store: Store, q: str, *, h: float = 0.95, j: float = 0.95, pos: int = 3, neg: int = 0, refused: bool = False
) -> Answer:
    a = store.queries.record_answer(
        session_id="s",
        question=q,
        answer_text=f"The answer to {q} [1]",
        pipeline_version="pv-x",
        refused=refused,
        citations=[{"n": 1, "chunk_id": "c1", "doc_id": "bridge.md"}],
    )
    store.evaluations.add(a.answer_id, "heuristic", heuristic_score=h)
    store.evaluations.add(a.answer_id, "llm_judge", scores={"faithfulness": j}, failure_evidence={"overall": j})
    for _ in range(pos):
        store.feedback.add(a.answer_id, "positive")
    for _ in range(neg):
        store.feedback.add(a.answer_id, "negative")
    return a


def test_the_nomination_rule_and_a_review_that_never_shows_scores(store: Store) -> None:
    _served(store, "Who built the bridge?")
    _served(store, "Too few ratings?", pos=2)
    _served(store, "Disliked once?", pos=5, neg=1)
    _served(store, "Heuristic at the line?", h=0.92)
    _served(store, "Judge too low?", j=0.90)
    _served(store, "A refusal?", refused=True)
    clock = ManualClock(utcnow())
    rep = nominate(store, clock=clock)
    assert rep.considered == 6 and len(rep.nominated) == 1
    assert rep.not_nominated == {
        "too_few_positive": 1,
        "negative_feedback": 1,
        "heuristic_too_low": 1,
        "judge_too_low": 1,
        "refused": 1,
    }
    assert nominate(store, clock=clock).nominated == []  # proposed once, never again
    (cand,) = store.golden_candidates.by_status()
    assert cand.proposed_answer == "The answer to Who built the bridge?"  # the served "[1]" is gone
    assert cand.evidence["judge_score"] == 0.95 and cand.evidence["positive_ratings"] == 3  # kept for the audit
    shown = review_json(cand)
    assert set(shown) == set(REVIEW_FIELDS)
    assert not [k for k in shown if any(w in k for w in SCORE_WORDS)]
    assert "0.95" not in json.dumps(shown)
    assert store.golden.current_golden_set() == []  # nothing entered unapproved

    done = approve(store, cand.candidate_id, reviewer="alice")  # confirms the proposed answer
    assert done["entry"]["expected_answer"] == cand.proposed_answer and done["entry"]["source"] == "auto_nominated"
    assert done["entry"]["held_out"] == is_held_out(cand.question) and done["candidate"]["answer_edited"] is False
    audit = store.audit.timeline(action_type="golden_review")
    assert audit[0].actor == "alice" and audit[0].evidence["decision"] == "approve"


def test_a_follow_up_is_nominated_as_its_standalone_question(store: Store) -> None:
    a = _served(store, "What if it takes too long?")
    store.queue.enqueue(a.answer_id, "heuristic", {"standalone_question": "What if subprocess.run takes too long?"})
    rep = nominate(store, clock=ManualClock(utcnow()))
    (cand,) = store.golden_candidates.by_status()
    assert rep.nominated == [cand.candidate_id] and cand.question == "What if subprocess.run takes too long?"
    assert cand.evidence["asked_as"] == "What if it takes too long?"


def test_an_empty_proposal_needs_the_reviewers_answer(store: Store) -> None:
    from ragloop.store.repositories import GoldenProposal

    (c,) = store.golden_candidates.propose([GoldenProposal("Q?", "", source="adversarial")])
    with pytest.raises(ReviewError, match="expected answer"):
        approve(store, c.candidate_id, reviewer="r")
    assert approve(store, c.candidate_id, reviewer="r", expected_answer="written by r")["entry"]["expected_answer"]


def test_nightly_nomination_runs_once_per_day_on_the_injected_clock(store: Store) -> None:
    _served(store, "Who built the bridge?")
    clock = ManualClock(datetime(2026, 3, 1, 1, 0, tzinfo=UTC))
    # answers are stamped by the database's wall clock: look back far enough to see them
    nightly = NightlyNomination(store, clock=clock, rule=NominationRule(lookback_days=36500), hour_utc=2)
    assert nightly.tick() is None  # before 02:00
    clock.advance(3600)
    first = nightly.tick()
    assert first is not None and len(first.nominated) == 1
    clock.advance(3 * 3600)
    assert nightly.tick() is None  # once a day
    _served(store, "When did the ferry start?")
    clock.advance(days=1)
    second = nightly.tick()
    assert second is not None and len(second.nominated) == 1
    assert len(store.audit.timeline(action_type="golden_nomination")) == 2


def test_coverage_counts_repeats_and_clusters_the_gaps() -> None:
    emb = HashedEmbedder(256)
    asked = [
        AskedQuestion("how long is the zorblat bridge", 5, "k1"),
        AskedQuestion("when did the harbour ferry start running", 3, "k2"),
        AskedQuestion("when did the harbour ferry start its service", 2, "k3"),
        AskedQuestion("what colour are the city trams", 1, "k4"),
    ]
    rep = measure(asked, ["how long is the zorblat bridge"], emb, radius=0.6)
    assert (rep.n, rep.covered) == (11, 5)
    lo, hi = rep.ci95 or (0, 0)
    assert lo < 5 / 11 < hi
    assert [c.size for c in rep.uncovered_clusters] == [5, 1]  # the two ferry wordings are one gap
    assert rep.uncovered_clusters[0].representative == "when did the harbour ferry start running"
    assert measure([], ["q"], emb).to_json()["coverage"] is None
    with pytest.raises(ValueError):
        measure(asked, [], emb, radius=0.0)


def test_coverage_reads_production_queries(store: Store) -> None:
    for q in ("how long is the bridge", "how long is the bridge", "who runs the ferry"):
        store.queries.record_answer(session_id="s", question=q, answer_text="x", pipeline_version="pv")
    store.golden.add_golden_entry("how long is the bridge", "300 m", source="human", created_by="t")
    rep = coverage(store, HashedEmbedder(256), radius=0.9)
    assert (rep.n, rep.covered) == (3, 2) and rep.uncovered_clusters[0].representative == "who runs the ferry"
    assert coverage(store, HashedEmbedder(256), now=utcnow() + timedelta(days=30)).n == 0  # outside the window


SEEDS = [
    Seed("When was the Zorblat Bridge completed?", "It was completed in 1887. It is long.", ("bridge.md",), ("c1",), 4),
    Seed("Who operates the Harbour Ferry?", "The Harbour Ferry is run by the Tide Company.", ("ferry.md",), ("c2",), 2),
    Seed("What colour are the trams?", None, (), (), 1),
]


def test_template_generator_writes_each_kind_deterministically() -> None:
    out = from_templates(SEEDS, limit=50)
    assert out == from_templates(SEEDS, limit=50)
    assert {p.generator for p in out} == set(KINDS)
    multi = next(p for p in out if p.generator == "multi_document")
    assert set(multi.required_doc_ids) == {"bridge.md", "ferry.md"}
    assert "1887" in multi.proposed_answer and "Tide Company" in multi.proposed_answer
    mis = next(p for p in out if p.generator == "misleading" and p.evidence and "Zorblat" in p.question)
    assert "Tide Company" in mis.question and mis.proposed_answer.startswith("It was completed in 1887")
    neg = next(p for p in out if p.generator == "negation" and "Zorblat" in p.question)
    assert "NOT" in neg.question and "Tide Company" in neg.proposed_answer
    near = next(p for p in out if p.generator == "near_miss_entity" and "Bridge" in p.question)
    assert "1887" not in near.question and near.proposed_answer == "" and "unanswerable" in near.domain_tags
    assert all(p.difficulty == GoldenDifficulty.HARD and p.source == "adversarial" for p in out)
    assert len(from_templates(SEEDS, limit=2)) == 2
    assert near_miss("When did it open in 1901?", []) == "When did it open in 1902?"
    assert near_miss("What is it?", []) is None


NOT_Q = "Which year was the bridge NOT completed in?"
NEAR_Q = "When was the Zorblot Bridge completed?"


def test_chat_generator_and_its_fallback() -> None:
    calls: list[ChatRequest] = []

    def reply(req: ChatRequest) -> str:
        calls.append(req)
        if "Seed question users ask: Who operates the Harbour Ferry" in req.prompt_text():
            return "not json at all"
        return json.dumps(
            {
                "items": [
                    {
                        "kind": "negation",
                        "question": "Which year was the bridge NOT completed in?",
                        "expected_answer": "Any but 1887",
                    },
                    {
                        "kind": "near_miss_entity",
                        "question": "When was the Zorblot Bridge completed?",
                        "expected_answer": "",
                    },
                ]
            }
        )

    res = run_sync(from_chat(FunctionModel(reply, name="test:fn"), SEEDS[:2], limit=50))
    assert res.generator == "chat:test:fn" and res.fallbacks == 1
    by_q = {p.question: p for p in res.proposals}
    assert by_q[NOT_Q].proposed_answer == "Any but 1887"
    near = by_q[NEAR_Q]
    assert near.proposed_answer == "" and "unanswerable" in near.domain_tags and near.required_doc_ids == ()
    assert any("Harbour Ferry" in p.question for p in res.proposals)  # the templates wrote the failed seed


def test_generate_queues_candidates_at_the_gaps(store: Store) -> None:
    for q, a in (
        ("When was the Zorblat Bridge completed?", "In 1887."),
        ("Who operates the Harbour Ferry?", "Tide Co."),
    ):
        ans = store.queries.record_answer(
            session_id="s",
            question=q,
            answer_text=a,
            pipeline_version="pv",
            citations=[{"doc_id": q[:8], "chunk_id": "c"}],
        )
        assert ans.answer_id
    rep = coverage(store, HashedEmbedder(256), radius=0.9)
    assert rep.covered == 0 and len(rep.uncovered_clusters) == 2
    result, rows = run_sync(generate(store, rep, limit=10))
    assert result.generator == "templates" and rows and len(rows) == len(result.proposals)
    assert all(r.status == "pending" and r.source == "adversarial" for r in rows)
    again, rows2 = run_sync(generate(store, rep, limit=10))
    assert rows2 == [] and len(again.proposals) == len(rows)  # the same gaps propose nothing new
    assert store.golden.current_golden_set() == []


def test_difficulty_mix_against_its_target(store: Store) -> None:
    for i in range(30):
        d = "easy" if i < 3 else "hard" if i < 9 else "standard"
        store.golden.add_golden_entry(f"q{i}", "a", source="human", created_by="t", difficulty=d)
    rows = {r.difficulty: r for r in mix_report(store.golden.current_golden_set(), TargetMix.default())}
    assert (rows[GoldenDifficulty.EASY].count, rows[GoldenDifficulty.EASY].n) == (3, 30)
    assert rows[GoldenDifficulty.EASY].verdict == "below"  # 0.10, CI [0.03, 0.26] excludes 0.30
    assert rows[GoldenDifficulty.HARD].verdict == "on_target"  # 0.20 exactly
    assert rows[GoldenDifficulty.STANDARD].verdict == "above"  # 0.70, CI [0.52, 0.83] excludes 0.50
    s = summary(store, TargetMix.parse("easy=0.1,standard=0.7,hard=0.2"), version=10)
    assert s["count"] == 10 and s["golden_set_version"] == 10
    for bad in ("easy=0.5,standard=0.5", "easy=0.5,standard=0.5,hard=0.5", "easy=x,standard=1,hard=0", "medium=1"):
        with pytest.raises(ValueError):
            TargetMix.parse(bad)


def test_held_out_entries_never_reach_regression_or_remediation(store: Store) -> None:
    from ragloop.improve.payload import EvaluationPayload
    from ragloop.improve.served import _reference
    from ragloop.store.repositories import GoldenProposal

    questions = [f"What is golden item {i}?" for i in range(40)]
    held = {q for q in questions if is_held_out(q)}
    assert 0 < len(held) < 20
    rows = store.golden_candidates.propose(
        [GoldenProposal(q, f"golden answer {i}", source="auto_nominated") for i, q in enumerate(questions)]
    )
    for r in rows:
        approve(store, r.candidate_id, reviewer="r")
    assert {e.question for e in store.golden.current_golden_set() if e.held_out} == held
    assert not {e.question for e in working_set(store)} & held

    asked: list[str] = []

    def answer(q: str) -> Answered:
        asked.append(q)
        return Answered("x", [], False)

    row = store.pipelines.register_config(PipelineConfig())
    store.pipelines.activate(row.version_id, reason="test")
    run_regression(store, answer, pipeline_version=row.version_id)
    assert asked and not set(asked) & held and len(asked) == 40 - len(held)
    # remediation's ideal answer (diagnosis) never comes from a held-out entry
    for q in questions:
        got = _reference(store, q, EvaluationPayload())
        assert (got is None) == (q in held)


def test_review_fields_exclude_every_machine_signal() -> None:
    hidden: Callable[[str], bool] = lambda f: any(w in f for w in SCORE_WORDS)  # noqa: E731
    assert not [f for f in REVIEW_FIELDS if hidden(f)]
