"""τL from labelled traffic (SQLite and PostgreSQL): ratings, corrections, reviewer labels and
diagnoses become gate samples, unknowns are imputed from neighbours in score, and a gate that
refuses too many answerable questions is refitted into a candidate."""

from __future__ import annotations

from pathlib import Path

from ragloop.improve.remediation.gate_labels import (
    Label,
    Labelled,
    combine,
    impute,
    labelled_answers,
    rating_labels,
    review_labels,
)
from ragloop.improve.remediation.thresholds import first_gate_score, fit_tau_lower, gate_samples
from ragloop.store import Store


def _rights(label: Label) -> tuple[bool | None, bool | None]:
    return label.answer_right, label.refusal_right


def test_what_each_label_says() -> None:
    assert rating_labels("positive", False, corrected=False, documents=False, weight=2) == [
        Label(True, False, "rating", 2)
    ]
    assert rating_labels("positive", True, corrected=False, documents=False, weight=2) == [
        Label(False, True, "rating", 2)
    ]
    assert rating_labels("negative", True, corrected=False, documents=False, weight=2) == [
        Label(None, False, "rating", 2)
    ]
    neg = rating_labels("negative", False, corrected=True, documents=False, weight=3)
    assert neg == [Label(False, None, "rating", 3), Label(None, False, "correction", 3)]
    assert combine(neg) == (0.0, 0.0)  # a wrong answer to an answerable question
    assert _rights(review_labels("knowledge_gap", [], refused=False)[0]) == (False, True)
    assert _rights(review_labels(None, ["correct"], refused=False)[0]) == (True, False)
    assert _rights(review_labels("ranking_failure", [], refused=True)[0]) == (None, False)
    assert combine([Label(True, None, "a", 1.0), Label(False, None, "b", 3.0)]) == (0.25, None)
    # the simulated reviewer: labels correct / incorrect, a corrected answer when wrong and answerable
    assert combine(review_labels(None, ["correct"], refused=True)) == (0.0, 1.0)
    assert combine(review_labels(None, ["incorrect"], refused=False, corrected=True)) == (0.0, 0.0)
    assert combine(review_labels(None, ["incorrect"], refused=False)) == (0.0, None)


def _item(score: float, a: float | None, r: float | None) -> Labelled:
    return Labelled("x", score, False, a, r, ())


def test_unknowns_are_imputed_from_known_neighbours() -> None:
    # answerable questions answered near 0.3 are right 1 time in 3; wrong answers near 0.3 whose
    # answerability is known (corrections) were answerable; an unknown refusal at 0.28 borrows that
    items = [_item(0.30 + 0.001 * i, 1.0 if i % 3 == 0 else 0.0, 0.0) for i in range(30)]
    items += [_item(0.28, None, 0.0), _item(0.31, 0.0, None)]
    filled = impute(items, k=30)
    a, r = filled[30]
    assert abs(a - 10 / 30) < 0.02 and r == 0.0
    assert filled[31] == (0.0, 0.0)
    # wrong answers to unanswerable questions do not make answerable refusals look hopeless
    items2 = [_item(0.3, 1.0, 0.0) for _ in range(10)] + [_item(0.3, 0.0, 1.0) for _ in range(10)]
    assert impute([*items2, _item(0.25, None, 0.0)], k=20)[-1][0] == 1.0
    assert impute([_item(0.2, None, None)]) == [(0.5, 0.5)]


def _served(store: Store, i: int, score: float, refused: bool) -> str:
    trace = {"records": [{"node": "grade", "detail": {"scores": {"c1": score, "c2": score / 2}}}]}
    ans = store.queries.record_answer(
        session_id=f"s{i}",
        question=f"q{i}?",
        answer_text="no" if refused else "a",
        pipeline_version="pv-x",
        refused=refused,
        trace=trace,
    )
    return ans.answer_id


def test_a_gate_refusing_answerable_questions_is_refitted_from_ratings(store: Store) -> None:
    """MTRAG-like traffic at τL 0.3: answerable questions spread over 0.05-0.95, answered right 3
    times in 5, refused (and rated down) below 0.3; unanswerable ones score below 0.12. Users rate;
    a few add corrections; a reviewer labels two gaps."""
    for i in range(200):
        score = 0.05 + 0.9 * i / 199
        refused = score < 0.3
        aid = _served(store, i, score, refused)
        if refused:
            store.feedback.add(aid, "negative")
        elif i % 5 < 3:
            store.feedback.add(aid, "positive")
        else:
            store.feedback.add(aid, "negative", corrected_answer="the answer" if i % 2 else None)
    for i in range(40):
        aid = _served(store, 1000 + i, 0.12 * i / 39, refused=True)
        store.feedback.add(aid, "positive")
    for i in range(2):
        aid = _served(store, 2000 + i, 0.35, refused=False)
        store.evaluations.add(aid, "human", failure_mode="knowledge_gap", failure_evidence={"labels": []})

    labelled = labelled_answers(store, "kb", first_gate_score)
    assert len(labelled) == 242
    samples = gate_samples(store, "kb")
    refused_answerable = [s for s in samples if 0.125 < s.score < 0.3]
    assert refused_answerable and all(0.4 < (s.answer_right or 0) < 0.8 for s in refused_answerable), [
        (s.score, s.answer_right) for s in refused_answerable if not 0.4 < (s.answer_right or 0) < 0.8
    ]
    fit = fit_tau_lower(samples, current=0.3, max_false_refusal=0.5)
    assert fit.improves and 0.1 <= fit.fitted < 0.2 and fit.lo > 0
    assert {"rating", "reviewer", "correction"} <= {p for s in samples for p in s.label_source.split("+")}


def test_labelled_traffic_alone_proposes_and_applies_the_refit(store: Store, tmp_path: Path) -> None:
    """No diagnosis at all (no ideal answers): once 50 explicit labels exist, the remediation pass
    proposes the collection's τL refit itself, once per serving version, and the scheduler applies it."""
    from ragloop.improve.clock import ManualClock
    from ragloop.improve.label_proposals import propose_from_labels
    from ragloop.improve.remediate import run_pass
    from tests.agent.conftest import DOCS, make_collection
    from tests.improve.remediation_support import K1, context

    coll = make_collection("kb", DOCS, tmp_path / "docs")
    try:
        for i in range(49):
            store.feedback.add(_served(store, i, 0.1 + 0.01 * i, refused=i < 20), "negative" if i < 20 else "positive")
        assert not propose_from_labels(store, K1, "kb")
        store.feedback.add(_served(store, 99, 0.9, refused=False), "positive")
        ctx = context(store, coll, ManualClock())
        report = run_pass(store, K1, context=ctx, label_collection="kb")
        [result] = report.scheduled
        assert result.kind == "threshold_recalibration" and result.outcome.value == "applied"
        [refit] = store.audit.timeline(action_type="threshold_refit")
        assert refit.evidence["fit"]["n"] == 50 and refit.evidence["domain"] == "kb"
        run_pass(store, K1, context=ctx, label_collection="kb")  # once per version and doubling: nothing new
        assert len(store.improvement_actions.listed()) == 1
        for i in range(50):
            store.feedback.add(_served(store, 200 + i, 0.5, refused=False), "positive")
        assert propose_from_labels(store, K1, "kb") and len(store.improvement_actions.listed()) == 2
        # doubled again while that epoch's proposal is still open: it will read these labels too
        for i in range(100):
            store.feedback.add(_served(store, 300 + i, 0.5, refused=False), "positive")
        assert propose_from_labels(store, K1, "kb") and len(store.improvement_actions.listed()) == 2
        run_pass(store, K1, context=ctx, label_collection="kb")  # runs it; the next epoch's proposal waited
        assert len(store.improvement_actions.listed()) == 2
        assert propose_from_labels(store, K1, "kb") and len(store.improvement_actions.listed()) == 3
    finally:
        coll.close()
