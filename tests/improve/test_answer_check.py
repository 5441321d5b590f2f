"""The answer-check fit: labelled traffic proposes it (only where a reader is configured), the reader
reads each answered labelled answer as serving would, and a threshold with a measured gain becomes a
candidate; a reader that cannot tell right from wrong answers registers nothing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ragloop.config import PipelineConfig
from ragloop.improve.clock import ManualClock
from ragloop.improve.remediate import run_pass
from ragloop.improve.remediation import RemediationContext, RemediationSettings
from ragloop.improve.remediation.answer_check import GoldenCheck
from ragloop.improve.remediation.thresholds import GateSample
from ragloop.models.scoring import FunctionScorer
from ragloop.retrieval.collection import Collection
from ragloop.store import ImprovementAuditLog, Store
from tests.agent.conftest import DOCS, HASHED, make_collection
from tests.improve.remediation_support import K1, context

READER = "test:reader"


def _serve(store: Store, n: int, *, trap: bool) -> None:
    """`n` answers: right ones rated up; wrong answers to unanswerable questions ("trap") rated down,
    every third labelled a knowledge gap by a reviewer (the rest leave refusing unknown: imputed)."""
    for i in range(n):
        text = f"The trap answer {i} [1]." if trap else f"The right answer {i} [1]."
        trace = {"records": [{"node": "grade", "detail": {"scores": {"c1": 0.8}}}]}
        aid = store.queries.record_answer(
            session_id=f"{trap}-{i}",
            question=f"question {trap} {i}?",
            answer_text=text,
            pipeline_version="pv-x",
            trace=trace,
        ).answer_id
        store.feedback.add(aid, "negative" if trap else "positive")
        if trap and i % 3 == 0:
            store.evaluations.add(aid, "human", failure_mode="knowledge_gap", failure_evidence={"labels": []})


def _context(store: Store, tmp_path: Path, reader: FunctionScorer, config: PipelineConfig = K1) -> RemediationContext:
    coll = make_collection("kb", DOCS, tmp_path / "docs")
    coll.close()
    ctx = context(store, coll, ManualClock(), config=config, answer_check=READER)
    return replace(ctx, scorers={READER: reader})


def test_labelled_traffic_fits_the_check_into_a_candidate(sqlite_store: Store, tmp_path: Path) -> None:
    store = sqlite_store
    _serve(store, 40, trap=False)
    _serve(store, 30, trap=True)
    reader = FunctionScorer(lambda q, text: 0.15 if "trap" in text else 0.85)
    ctx = _context(store, tmp_path, reader)
    report = run_pass(store, K1, context=ctx, label_collection="kb")
    kinds = {r.kind: r for r in report.scheduled}
    assert kinds["answer_check"].outcome.value == "applied", kinds
    [fit] = store.audit.timeline(action_type="answer_check_fit")
    f = fit.evidence["fit"]
    assert f["n"] == 70 and f["current"] == 0.0 and 0.15 < f["fitted"] <= 0.85 and f["off_policy"]
    assert f["lo"] > 0 and f["cv_lo"] > 0 and fit.evidence["scorer"] == READER
    cand = store.pipelines.get(fit.pipeline_version_after or "")
    assert cand is not None and cand.parent_version_id == K1.version_id
    agent = PipelineConfig.model_validate(cand.config).agent
    assert agent.scorers.answer_check == READER and agent.tau_answer == f["fitted"]
    # it read each answer as shown, without citation marks, against its own question
    assert len(reader.calls) == 70
    assert all("[" not in text and q.startswith("question") for _, q, text in reader.calls)


def test_a_reader_that_cannot_tell_registers_nothing(sqlite_store: Store, tmp_path: Path) -> None:
    store = sqlite_store
    _serve(store, 40, trap=False)
    _serve(store, 30, trap=True)
    ctx = _context(store, tmp_path, FunctionScorer(lambda q, text: 0.2 + int(q.split()[-1][:-1]) % 7 / 10))
    run_pass(store, K1, context=ctx, label_collection="kb")
    [fit] = store.audit.timeline(action_type="answer_check_fit")
    assert fit.pipeline_version_after is None and not fit.evidence["fit"]["off_policy"]
    assert [v.version_id for v in store.pipelines.list_versions(status="candidate")] == []


def test_without_a_configured_reader_nothing_is_proposed(sqlite_store: Store, tmp_path: Path) -> None:
    store = sqlite_store
    _serve(store, 40, trap=False)
    _serve(store, 30, trap=True)
    ctx = replace(_context(store, tmp_path, FunctionScorer(lambda q, t: 0.5)), settings=RemediationSettings())
    run_pass(store, K1, context=ctx, label_collection="kb")
    assert {a.kind for a in store.improvement_actions.listed()} == {"threshold_recalibration"}


def _fit_with_golden(store: Store, coll: Collection, reader: FunctionScorer) -> ImprovementAuditLog:
    """The traffic above plus a golden set of 2 answerable entries and 1 unanswerable; the fit's audit entry."""
    _serve(store, 40, trap=False)
    _serve(store, 30, trap=True)
    for q, ref in [("When was the Zorblat Bridge completed?", "1887"), ("How tall is the Quill Tower?", "96 metres")]:
        store.golden.add_golden_entry(q, ref, source="human", created_by="test")
    store.golden.add_golden_entry(
        "Which cable lands at Port Kessel?", "", source="human", created_by="test", domain_tags=["unanswerable"]
    )
    ctx = replace(context(store, coll, ManualClock(), config=HASHED, answer_check=READER), scorers={READER: reader})
    run_pass(store, HASHED, context=ctx, label_collection="kb")
    [fit] = store.audit.timeline(action_type="answer_check_fit")
    golden = fit.evidence["golden"]
    assert golden["answerable"] == 2 and golden["answered"] >= 1, golden
    assert any("Zorblat" in q for _, q, _ in reader.calls)  # the golden drafts were read
    return fit


def test_the_golden_sets_clean_labels_bound_false_refusals(sqlite_store: Store, coll: Collection) -> None:
    """The serving config's answers to the answerable golden entries score lowest of all: every
    threshold that would refuse the traps would refuse them too, so nothing is registered."""
    reader = FunctionScorer(lambda q, text: 0.15 if "trap" in text else 0.85 if "right answer" in text else 0.1)
    fit = _fit_with_golden(sqlite_store, coll, reader)
    assert fit.pipeline_version_after is None and fit.evidence["fit"]["fitted"] <= 0.1


def test_two_answerable_golden_entries_cannot_certify_the_bound(sqlite_store: Store, coll: Collection) -> None:
    """The golden answers score high, so no threshold that refuses the traps refuses them (raw rate 0),
    but 2 entries cannot show a rate ≤ 2 points (Laplace: 1/4): the check stays off."""
    fit = _fit_with_golden(sqlite_store, coll, FunctionScorer(lambda q, text: 0.15 if "trap" in text else 0.85))
    assert fit.evidence["golden"]["false_refusal_increase"] == 0.0
    assert fit.evidence["golden"]["false_refusal_estimate"] == 0.25
    assert fit.pipeline_version_after is None and fit.evidence["fit"]["fitted"] == 0.0


def test_the_golden_bound_is_checked_against_laplaces_estimate_not_the_raw_rate() -> None:
    """The fit takes the most accurate threshold the bound admits, so the raw rate of the one it takes
    is biased low: with 87 answerable entries (the simulation's), one newly refused is 1.1% raw but
    2.2% estimated, over a 2-point bound; none is 1.1%, under it; 20 entries cannot show ≤ 2% at all."""
    answerable = [
        GateSample(score=0.05 * (i + 1), answer_right=1.0, refusal_right=0.0, refused=False) for i in range(3)
    ]
    check = GoldenCheck(answerable, n_answerable=87)
    assert check.newly_refused(0.06, 0.0) == 1 and check.false_refusal_increase(0.06, 0.0) == pytest.approx(1 / 87)
    assert check.false_refusal_estimate(0.06, 0.0) == pytest.approx(2 / 89) and 2 / 89 > 0.02
    assert check.false_refusal_estimate(0.05, 0.0) == pytest.approx(1 / 89) and 1 / 89 < 0.02
    assert check.newly_refused(0.12, 0.06) == 1  # counted from the current threshold up
    assert GoldenCheck(answerable, n_answerable=20).false_refusal_estimate(0.01, 0.0) > 0.02
