"""Evaluator drift: the judge pin (columns on both engines), qualification of a new judge against
human labels (accepted only on the interval, refused and audited otherwise), and the rubric check
(tier-2 scores vs implicit satisfaction: negative feedback, repeats, rephrases) on a manual clock."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ragloop.cli import app
from ragloop.experiments.drift import (
    ACCEPTED,
    FLAGGED,
    REFUSED,
    Pin,
    RubricStatus,
    accepted_pin,
    jaccard,
    pearson_ci,
    qualify,
    rubric_check,
    rubric_due,
)
from ragloop.experiments.judges import drift_status
from ragloop.improve.clock import ManualClock
from ragloop.improve.judge import ChatJudge, ScorerJudge
from ragloop.models.scoring import make_scorer
from ragloop.store import Store

OLD = Pin("scorer:lexical", "ScorerJudge/1", "a" * 64)
NEW = Pin("chat:big", "ChatJudge/2", "b" * 64)


def _answer(store: Store, session: str = "s", question: str = "q?") -> str:
    return store.queries.record_answer(
        session_id=session, question=question, answer_text="a", pipeline_version="pv-x"
    ).answer_id


def test_pin_columns_round_trip(store: Store) -> None:
    aid = _answer(store)
    ev = store.evaluations.add(
        aid,
        "llm_judge",
        scores={"faithfulness": 0.9},
        evaluator_model="m",
        evaluator_version="v",
        evaluator_prompt_sha="c" * 64,
    )
    got = store.evaluations.latest(aid, "llm_judge")
    assert got is not None and (got.evaluator_version, got.evaluator_prompt_sha) == ("v", "c" * 64)
    assert ev.eval_id == got.eval_id


def test_judge_pins_differ_by_prompt_and_kind() -> None:
    lexical = ScorerJudge(make_scorer("lexical")).pin
    assert lexical.model == "scorer:lexical" and lexical.version == "ScorerJudge/1" and len(lexical.prompt_sha) == 64
    from types import SimpleNamespace

    chat = ChatJudge(SimpleNamespace(name="dummy"))  # type: ignore[arg-type]  # only its name is read here
    assert chat.pin.prompt_sha != lexical.prompt_sha and chat.pin.model == "chat:dummy"


def _labels(store: Store, n: int) -> list[tuple[str, float]]:
    """n answers with a human review: alternately good (0.9) and bad (0.1)."""
    out = []
    for i in range(n):
        aid = _answer(store, f"h{i}", f"question {i}")
        score = 0.9 if i % 2 == 0 else 0.1
        store.evaluations.add(aid, "human", scores={"faithfulness": score, "answer_relevance": score})
        out.append((aid, score))
    return out


def test_a_judge_that_agrees_is_accepted_one_that_does_not_is_refused(store: Store) -> None:
    labels = _labels(store, 60)
    truth = dict(labels)
    accepted = qualify(store, OLD, lambda a: truth[a])  # agrees on all 60
    assert accepted.accepted and accepted.n == 60 and accepted.ci95 is not None and accepted.ci95[0] >= 0.85
    assert accepted_pin(store) == OLD
    # 52/60 = 86.7%: above 85% as a point, but its interval's lower bound is not
    flips = {a for a, _ in labels[:8]}
    refused = qualify(store, NEW, lambda a: (1 - truth[a]) if a in flips else truth[a])
    assert not refused.accepted and refused.agreement == pytest.approx(52 / 60)
    assert refused.ci95 is not None and refused.ci95[0] < 0.85 < refused.agreement
    assert accepted_pin(store) == OLD  # the old judge stays
    [audit] = store.audit.timeline(action_type=REFUSED)
    assert audit.evidence["pin"]["model"] == "chat:big" and "lower bound is below" in audit.evidence["result"]["reason"]
    assert store.audit.timeline(action_type=ACCEPTED)[0].evidence["pin"]["model"] == "scorer:lexical"
    assert drift_status(store)["refused_judges"][0]["pin"]["version"] == "ChatJudge/2"
    # a worker still configured with the refused judge shows up as unqualified (its score not counted)
    store.evaluations.add(
        labels[0][0], "llm_judge", scores={"faithfulness": 0.5}, evaluator_model=NEW.model,
        evaluator_version=NEW.version, evaluator_prompt_sha=NEW.prompt_sha, status="unqualified",
    )  # fmt: skip
    status = drift_status(store)
    assert status["unqualified_in_use"] == [
        {
            "model": "chat:big", "version": "ChatJudge/2", "prompt_sha": "b" * 64, "scores": 1, "not_counted": 1,
            "reason": "refused by qualification against the human labels",
        }
    ]  # fmt: skip


def test_too_few_labels_or_an_unscorable_answer_refuse(store: Store) -> None:
    labels = _labels(store, 12)
    res = qualify(store, NEW, lambda a: None if a == labels[0][0] else dict(labels)[a])
    assert not res.accepted and res.n == 11 and res.skipped == 1 and "at least 30" in res.reason


def test_pearson_ci() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=400)
    y = x + rng.normal(size=400)
    got = pearson_ci(list(x), list(y))
    assert got is not None
    r, (lo, hi) = got
    assert lo < r < hi and abs(r - np.corrcoef(x, y)[0, 1]) < 1e-9 and 0.6 < r < 0.8
    assert pearson_ci([1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 1.0]) is None
    assert jaccard("how do I reset my password", "how can I reset the password") >= 0.5


def _traffic(store: Store, clock: ManualClock, monkeypatch: pytest.MonkeyPatch, *, coupled: bool, n: int = 120) -> None:
    """n sessions; a session's first answer gets a tier-2 score; unhappy sessions repeat, rephrase or
    give negative feedback. `coupled`: unhappy iff the judge scored low; else independent of it."""
    import ragloop.store.repositories.queries as qr

    monkeypatch.setattr(qr, "utcnow", clock.now)  # queries stamped on the loop's clock
    rng = np.random.default_rng(7)
    for i in range(n):
        q = f"how do I configure the widget number {i} for production"
        score = float(rng.uniform(0.0, 1.0))
        unhappy = score < 0.5 if coupled else bool(rng.uniform() < 0.5)
        aid = _answer(store, f"sess{i}", q)
        store.evaluations.add(aid, "llm_judge", scores={"faithfulness": score, "answer_relevance": score})
        clock.advance(60)
        if unhappy:
            kind = i % 3
            if kind == 0:
                _answer(store, f"sess{i}", q)  # the same question again
            elif kind == 1:
                _answer(store, f"sess{i}", f"how can I configure widget number {i} in production")
            else:
                store.feedback.add(aid, "negative")
        clock.advance(3600)


def test_rubric_check_ok_when_scores_track_satisfaction(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = ManualClock(datetime(2026, 3, 1, tzinfo=UTC))
    assert rubric_due(store, clock.now())
    _traffic(store, clock, monkeypatch, coupled=True)
    res = rubric_check(store, clock.now())
    assert res.status is RubricStatus.OK and res.n == 120 and res.correlation is not None and res.correlation > 0.6
    assert res.signals["repeated"] > 0 and res.signals["rephrased"] > 0
    assert not rubric_due(store, clock.now() + timedelta(days=29))
    assert rubric_due(store, clock.now() + timedelta(days=30))


def test_rubric_flagged_when_scores_do_not_track_satisfaction(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = ManualClock(datetime(2026, 3, 1, tzinfo=UTC))
    _traffic(store, clock, monkeypatch, coupled=False)
    res = rubric_check(store, clock.now())
    assert res.status is RubricStatus.FLAGGED and res.ci95 is not None and res.ci95[1] < 0.6
    assert store.audit.timeline(action_type=FLAGGED)
    status = drift_status(store)
    assert status["rubric_flagged"] and status["rubric"]["n"] == 120


def test_rubric_insufficient_without_traffic(store: Store) -> None:
    res = rubric_check(store, datetime(2026, 3, 1, tzinfo=UTC))
    assert res.status is RubricStatus.INSUFFICIENT and res.n == 0 and res.correlation is None


def test_cli_drift_status_and_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'd.db'}"
    monkeypatch.setenv("RAGLOOP_DATABASE_URL", url)
    monkeypatch.setenv("RAGLOOP_HOME", str(tmp_path / "home"))
    runner = CliRunner()
    res = runner.invoke(app, ["drift", "check", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["status"] == "insufficient"
    res = runner.invoke(app, ["drift", "status", "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["rubric"]["status"] == "insufficient"
    with Store.open(url) as store:
        _labels(store, 4)
    res = runner.invoke(app, ["drift", "qualify", "--judge", "lexical", "--json"])
    assert res.exit_code == 1 and json.loads(res.output)["accepted"] is False  # no stored payloads: 0 judged
