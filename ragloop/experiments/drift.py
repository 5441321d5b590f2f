"""Evaluator drift: a judge is pinned (model, version, prompt hash, stored with every tier-2 score),
a new judge replaces the old one only after it agrees with the stored human labels, and once a
month the tier-2 scores are checked against what users did.

**Qualification** (`qualify`). The human labels are the tier-3 reviews (`evaluations` with tier
`human`). For each reviewed answer the candidate judge scores the answer afresh (`Rejudge`, the
caller's: the CLI wires `ragloop.improve.judge`); judge and human agree when both put the answer on
the same side of `pass_mark` (0.5), the human's side being the mean of the scores the reviewer gave
(faithfulness, answer relevance, context precision/recall). Agreement is a proportion with a Wilson
95% interval; the judge is accepted when the interval's **lower bound** reaches `min_agreement`
(0.85) over at least `min_labels` labels — a decision on the interval, never on the point, so 9
agreements of 10 (90%, interval [0.60, 0.98]) are not enough. Accepted or refused, the result is
written to the improvement audit log (`judge_version_accepted` / `judge_version_refused`, with the
pin and the evidence); the accepted pin is the latest `judge_version_accepted` entry (`accepted_pin`).

**Rubric check** (`rubric_check`). Per answer judged at tier 2 in the window (default the last 30
days on the loop's clock) an implicit satisfaction signal: 0 when the user gave negative feedback,
repeated the same question in the same session within `follow_up_s` (30 min), or followed up with
a rephrase of it (token Jaccard ≥ `rephrase_jaccard`, 0.5); 1 otherwise. The Pearson (point-
biserial) correlation of the judge's overall score with that signal comes with n and a Fisher-z
95% interval. Below `min_correlation` (0.6) the rubric is `flagged` when the interval's upper
bound is below it too, `watch` when the interval still reaches it; with fewer than `min_n` pairs,
or a signal without variance, the check is `insufficient` (nothing is claimed). Every check is
audited (`rubric_check`, or `rubric_flagged` when flagged); `rubric_due` reads the latest one.

**Enforcement** (`ragloop.experiments.judges`): the worker asks `judge_standing` before it lets a
tier-2 score count; a judge other than the accepted one writes `unqualified` rows that no decision
reads. `drift_status` there is what the admin route and `ragloop drift status` show.

Sits in `ragloop.experiments` (no import of improve, service or cli): the judge is a callable.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from ragloop.experiments.simulation import wilson
from ragloop.store.vocabulary import EvaluationStatus, Tier

if TYPE_CHECKING:
    from ragloop.store import Store

HUMAN_METRICS = ("faithfulness", "answer_relevance", "context_precision", "context_recall")
JUDGE_METRICS = ("faithfulness", "answer_relevance", "context_precision")
ACCEPTED = "judge_version_accepted"
REFUSED = "judge_version_refused"
CHECKED = "rubric_check"
FLAGGED = "rubric_flagged"
MONTH_S = 30 * 86400.0

Rejudge = Callable[[str], "float | None"]
"""answer id -> the candidate judge's overall score for that stored answer (None: it could not judge)."""


@dataclass(frozen=True)
class Pin:
    model: str
    version: str
    prompt_sha: str

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Pin:
        return cls(str(data["model"]), str(data["version"]), str(data["prompt_sha"]))


@dataclass
class Qualification:
    pin: Pin
    accepted: bool
    n: int
    agreements: int
    agreement: float | None
    ci95: tuple[float, float] | None
    min_agreement: float
    reason: str
    skipped: int = 0
    previous: Pin | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ci95"] = list(self.ci95) if self.ci95 else None
        return out


def human_overall(scores: Mapping[str, Any]) -> float | None:
    vals = [float(scores[m]) for m in HUMAN_METRICS if isinstance(scores.get(m), int | float)]
    return sum(vals) / len(vals) if vals else None


def judge_overall(scores: Mapping[str, Any], evidence: Mapping[str, Any] | None = None) -> float | None:
    """The judge's one number as `JudgeResult.overall` defines it (stored as `evidence.overall`)."""
    if evidence and isinstance(evidence.get("overall"), int | float):
        return float(evidence["overall"])
    if isinstance(scores.get("refusal_appropriate"), int | float):
        return float(scores["refusal_appropriate"])
    vals = [float(scores[m]) for m in JUDGE_METRICS if isinstance(scores.get(m), int | float)]
    return sum(vals) / len(vals) if vals else None


def human_labels(store: Store, limit: int = 5000) -> dict[str, float]:
    """answer id -> the latest human review's overall score."""
    from ragloop.store.models import Evaluation

    with store.db.transaction(write=False) as s:
        rows = s.scalars(
            select(Evaluation)
            .where(Evaluation.evaluation_tier == Tier.HUMAN, Evaluation.status == EvaluationStatus.COMPLETED)
            .order_by(Evaluation.evaluated_at.desc())
            .limit(limit)
        ).all()
    out: dict[str, float] = {}
    for r in rows:
        h = human_overall(r.scores or {})
        if h is not None and r.answer_id not in out:
            out[r.answer_id] = h
    return out


def accepted_pin(store: Store) -> Pin | None:
    rows = store.audit.timeline(action_type=ACCEPTED, limit=1)
    return Pin.of(rows[0].evidence["pin"]) if rows else None


def qualify(
    store: Store,
    pin: Pin,
    rejudge: Rejudge,
    *,
    min_agreement: float = 0.85,
    min_labels: int = 30,
    pass_mark: float = 0.5,
    actor: str = "drift",
) -> Qualification:
    """Score every human-labelled answer with the candidate; accept only on the interval (audited)."""
    previous = accepted_pin(store)
    labels = human_labels(store)
    agree = n = skipped = 0
    per_item: list[dict[str, Any]] = []
    for answer_id, human in labels.items():
        try:
            got = rejudge(answer_id)
        except Exception as exc:  # one answer the judge cannot score is counted, not fatal
            got = None
            per_item.append({"answer_id": answer_id, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
        if got is None:
            skipped += 1
            continue
        same = (got >= pass_mark) == (human >= pass_mark)
        agree += same
        n += 1
        per_item.append({"answer_id": answer_id, "human": round(human, 4), "judge": round(got, 4), "agree": same})
    if n == 0:
        ci, rate = None, None
    else:
        ci, rate = wilson(agree, n), agree / n
    if previous == pin:
        accepted, reason = True, "this judge is already the accepted one"
    elif n < min_labels:
        accepted, reason = False, f"{n} human labels could be judged; at least {min_labels} are needed"
    else:
        assert ci is not None and rate is not None
        accepted = ci[0] >= min_agreement
        reason = (
            f"agreement {rate:.1%} on {n} human labels, 95% CI [{ci[0]:.1%}, {ci[1]:.1%}]: lower bound "
            + ("reaches" if accepted else "is below")
            + f" {min_agreement:.0%}"
        )
    result = Qualification(pin, accepted, n, agree, rate, ci, min_agreement, reason, skipped, previous)
    if previous != pin:
        store.audit.record(
            ACCEPTED if accepted else REFUSED,
            triggered_by=f"judge qualification: {pin.model} {pin.version}",
            actor=actor,
            evidence={"pin": asdict(pin), "result": result.to_json(), "items": per_item[:500]},
        )
    return result


# --------------------------------------------------------------------------- rubric check


class RubricStatus(StrEnum):
    OK = "ok"
    WATCH = "watch"
    FLAGGED = "flagged"
    INSUFFICIENT = "insufficient"


@dataclass
class RubricCheck:
    status: RubricStatus
    n: int
    correlation: float | None
    ci95: tuple[float, float] | None
    min_correlation: float
    window_start: str
    window_end: str
    dissatisfied: int
    signals: dict[str, int] = field(default_factory=dict)
    judges: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["status"] = self.status.value
        out["ci95"] = list(self.ci95) if self.ci95 else None
        return out


_WORD = re.compile(r"\w+")


def _tokens(text: str) -> set[str]:
    return {t for t in _WORD.findall(text.lower()) if len(t) > 2}


def jaccard(a: str, b: str) -> float:
    x, y = _tokens(a), _tokens(b)
    return len(x & y) / len(x | y) if x and y else 0.0


def pearson_ci(xs: list[float], ys: list[float]) -> tuple[float, tuple[float, float]] | None:
    """r and its Fisher-z 95% interval; None without variance or with fewer than 4 pairs."""
    n = len(xs)
    if n < 4:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx <= 0 or syy <= 0:
        return None
    r = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / math.sqrt(sxx * syy)
    r = max(-0.999999, min(0.999999, r))
    z, half = math.atanh(r), 1.959963984540054 / math.sqrt(n - 3)
    return r, (math.tanh(z - half), math.tanh(z + half))


def satisfaction_signals(
    store: Store, start: datetime, end: datetime, *, follow_up_s: float = 1800.0, rephrase_jaccard: float = 0.5
) -> tuple[dict[str, int], dict[str, int]]:
    """answer id -> 1 (no sign of dissatisfaction) or 0, for each answer served in [start, end);
    and how often each signal fired."""
    from ragloop.store.models import Query, UserFeedback

    with store.db.transaction(write=False) as s:
        queries = s.execute(
            select(Query.answer_id, Query.session_id, Query.question_text, Query.created_at)
            .where(Query.created_at >= start, Query.created_at < end + timedelta(seconds=follow_up_s))
            .order_by(Query.session_id, Query.created_at)
        ).all()
        negative = set(
            s.scalars(
                select(UserFeedback.answer_id).where(
                    UserFeedback.rating == "negative", UserFeedback.created_at >= start
                )
            ).all()
        )
    out: dict[str, int] = {}
    counts = {"negative_feedback": 0, "repeated": 0, "rephrased": 0}
    for i, (answer_id, session, question, at) in enumerate(queries):
        if answer_id is None or not (start <= at < end):
            continue
        reasons = set()
        if answer_id in negative:
            reasons.add("negative_feedback")
        for later in queries[i + 1 :]:
            if later[1] != session or (later[3] - at).total_seconds() > follow_up_s:
                break
            if _tokens(later[2]) == _tokens(question):
                reasons.add("repeated")
            elif jaccard(later[2], question) >= rephrase_jaccard:
                reasons.add("rephrased")
        for r in reasons:
            counts[r] += 1
        out[answer_id] = 0 if reasons else 1
    return out, counts


def rubric_check(
    store: Store,
    now: datetime,
    *,
    window_s: float = MONTH_S,
    min_correlation: float = 0.6,
    min_n: int = 30,
    actor: str = "drift",
    follow_up_s: float = 1800.0,
    rephrase_jaccard: float = 0.5,
) -> RubricCheck:
    """Correlate the window's tier-2 scores with the implicit satisfaction signal; audit the result."""
    from ragloop.store.models import Answer, Evaluation, Query

    start = now - timedelta(seconds=window_s)
    signal, counts = satisfaction_signals(store, start, now, follow_up_s=follow_up_s, rephrase_jaccard=rephrase_jaccard)
    with store.db.transaction(write=False) as s:
        evals = s.scalars(
            select(Evaluation)
            .join(Answer, Answer.answer_id == Evaluation.answer_id)
            .join(Query, Query.query_id == Answer.query_id)
            .where(
                Evaluation.evaluation_tier == Tier.LLM_JUDGE,
                Evaluation.status == EvaluationStatus.COMPLETED,
                Query.created_at >= start,
                Query.created_at < now,
            )
            .order_by(Evaluation.evaluated_at)
        ).all()
    latest = {e.answer_id: e for e in evals}
    xs: list[float] = []
    ys: list[float] = []
    judges: set[str] = set()
    for answer_id, ev in latest.items():
        if answer_id not in signal:
            continue
        score = judge_overall(ev.scores or {}, ev.failure_evidence)
        if score is None:
            continue
        xs.append(score)
        ys.append(float(signal[answer_id]))
        judges.add(f"{ev.evaluator_model}|{ev.evaluator_version}|{(ev.evaluator_prompt_sha or '')[:12]}")
    res = pearson_ci(xs, ys) if len(xs) >= min_n else None
    if res is None:
        status, r, ci = RubricStatus.INSUFFICIENT, None, None
    else:
        r, ci = res
        status = (
            RubricStatus.OK
            if r >= min_correlation
            else (RubricStatus.FLAGGED if ci[1] < min_correlation else RubricStatus.WATCH)
        )
    check = RubricCheck(
        status, len(xs), r, ci, min_correlation, start.isoformat(), now.isoformat(),
        sum(1 for y in ys if y == 0), counts, sorted(judges),
    )  # fmt: skip
    store.audit.record(
        FLAGGED if status is RubricStatus.FLAGGED else CHECKED,
        triggered_by="monthly rubric check: tier-2 scores vs implicit satisfaction",
        actor=actor,
        evidence=check.to_json(),
    )
    return check


def latest_check(store: Store) -> RubricCheck | None:
    rows = [*store.audit.timeline(action_type=CHECKED, limit=1), *store.audit.timeline(action_type=FLAGGED, limit=1)]
    if not rows:
        return None
    e = dict(max(rows, key=lambda r: r.created_at).evidence)
    return RubricCheck(
        RubricStatus(e["status"]), int(e["n"]), e["correlation"], tuple(e["ci95"]) if e["ci95"] else None,
        float(e["min_correlation"]), e["window_start"], e["window_end"], int(e["dissatisfied"]),
        dict(e.get("signals") or {}), list(e.get("judges") or []),
    )  # fmt: skip


def rubric_due(store: Store, now: datetime, interval_s: float = MONTH_S) -> bool:
    """No check yet, or the latest ended `interval_s` or more ago on `now`'s clock (the loop's)."""
    last = latest_check(store)
    if last is None:
        return True
    return now - datetime.fromisoformat(last.window_end) >= timedelta(seconds=interval_s)
