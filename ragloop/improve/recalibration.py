"""Tier-1 recalibration: labels for the tier-1 model, its 3-way agreement, the served model's
versions, the weekly check and monitor mode. The refit itself is a remediation
(`ragloop.improve.remediation.tier1`), so it is scheduled, exactly-once and audited like the others.

**Labels** (`collect_labels`): every tier-2 judgement (target: the judge's overall score, weight 1),
tier-3 review (target: the mean of the reviewer's scores, 0 for a failure mode with no scores,
weight `REVIEWER_WEIGHT`) and explicit user feedback (target 1 for a positive rating, 0 for a
negative one, weight: the feedback's stored weight, 2 + 1 per kind of detail) of an answer that
has a completed tier-1 evaluation; the features are the ones that evaluation stored. Each label
says its source and weight, and every fit records which it used (LOOP.md: labels carry their
weight and source).

**Agreement**: tier 1's score and the label, each put in one of three bands (high >= 0.80, medium
0.60-0.79, low < 0.60), agree when the bands match; the agreement is the label-weighted share of
matches, with a 95% percentile-bootstrap interval that resamples answers (the labels of one answer
stay together). Stored features are re-scored with the model being measured, so the number is the
model's, not a mix of whichever model served each answer.

**Versions** live in the insert-only audit log: a `tier1_model` entry carries a whole model, the
newest one serves (`active_model`), the older ones stay. Activating is that one insert, written in
the same transaction as the remediation's own entry; workers re-read it every `MODEL_TTL_S`.

**Weekly check** (`watch`, each remediation pass): once per 7 days of the loop's clock, the labels
that arrived since the last check give the served model's agreement (a `tier1_agreement` entry);
below 0.80 it proposes a recalibration, below 0.75 it also puts tier 1 in **monitor mode**: scores
are still computed and stored, but the scheduler applies no automated remediation (tier 1 chooses
what is diagnosed) until a recalibrated model replaces it. Independently, once `BUFFER_SIZE` (200)
labels have arrived since the last refit, a recalibration is proposed. Fewer than
`MIN_CHECK_LABELS` new labels decide nothing (the check is recorded as `insufficient`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Literal

import numpy as np

from ragloop.evaluation.stats import bootstrap_ci, paired_bootstrap
from ragloop.improve.clock import Clock
from ragloop.improve.tier1 import FEATURES, PRIOR, HeuristicModel
from ragloop.improve.types import ActionKind
from ragloop.store import Store
from ragloop.store.vocabulary import EvaluationStatus, Tier

MODEL_ENTRY = "tier1_model"
CHECK_ENTRY = "tier1_agreement"
REFIT_ENTRY = "tier1_refit"
COMPONENT = "tier1"
HIGH, MEDIUM = 0.80, 0.60
REPLACE_AT = 0.87
RECALIBRATE_BELOW = 0.80
MONITOR_BELOW = 0.75
BUFFER_SIZE = 200
MIN_CHECK_LABELS = 30
WEEK = timedelta(days=7)
HELD_OUT_SHARE = 0.2
REVIEWER_WEIGHT = 3.0
JUDGE_WEIGHT = 1.0
MODEL_TTL_S = 60.0
Band = Literal["high", "medium", "low"]


class LabelSource(StrEnum):
    JUDGE = "llm_judge"
    REVIEWER = "human_review"
    FEEDBACK = "user_feedback"


@dataclass(frozen=True)
class Label:
    answer_id: str
    features: dict[str, float | None]
    target: float
    weight: float
    source: LabelSource
    at: datetime


def band(score: float) -> Band:
    return "high" if score >= HIGH else "medium" if score >= MEDIUM else "low"


def held_out(answer_id: str, share: float = HELD_OUT_SHARE) -> bool:
    """Stable per answer: all labels of one answer fall on the same side of the split."""
    h = int.from_bytes(hashlib.sha256(f"tier1:{answer_id}".encode()).digest()[:8], "big")
    return h / 2**64 < share


# --------------------------------------------------------------------------- labels


def _features(store: Store, answer_ids: Iterable[str]) -> dict[str, dict[str, float | None]]:
    """Each answer's latest completed tier-1 evaluation's stored features (answers without one are absent)."""
    rows = store.evaluations.latest_for(list(answer_ids), Tier.HEURISTIC, status=EvaluationStatus.COMPLETED)
    return {
        a: {
            f: (float(v) if isinstance(v, int | float) else None)
            for f, v in (row.scores or {}).items()
            if f in FEATURES
        }
        for a, row in rows.items()
        if row.scores
    }


def _review_target(scores: dict[str, Any], failure_mode: str | None) -> float | None:
    vals = [float(v) for v in scores.values() if isinstance(v, int | float)]
    if vals:
        return min(1.0, max(0.0, sum(vals) / len(vals)))
    return 0.0 if failure_mode else None


def collect_labels(store: Store, *, since: datetime | None = None, limit: int = 5000) -> list[Label]:
    """The labels of answers with tier-1 features, newest first (at most `limit` of each source)."""
    raw: list[tuple[str, float | None, float, LabelSource, datetime]] = []
    for e in store.evaluations.recent(tier=Tier.LLM_JUDGE, since=since, limit=limit):
        overall = (e.failure_evidence or {}).get("overall")
        if e.status == EvaluationStatus.COMPLETED and isinstance(overall, int | float):
            raw.append((e.answer_id, float(overall), JUDGE_WEIGHT, LabelSource.JUDGE, e.evaluated_at))
    for e in store.evaluations.recent(tier=Tier.HUMAN, since=since, limit=limit):
        target = _review_target(e.scores or {}, e.failure_mode)
        raw.append((e.answer_id, target, REVIEWER_WEIGHT, LabelSource.REVIEWER, e.evaluated_at))
    for f in store.feedback.recent(since=since, limit=limit):
        raw.append((f.answer_id, 1.0 if f.rating == "positive" else 0.0, f.weight, LabelSource.FEEDBACK, f.created_at))
    feats = _features(store, (r[0] for r in raw if r[1] is not None and r[2] > 0))
    out = [
        Label(a, feats[a], min(1.0, max(0.0, float(t))), float(w), src, at)
        for a, t, w, src, at in raw
        if t is not None and w > 0 and a in feats
    ]
    return sorted(out, key=lambda x: x.at, reverse=True)


def sources_of(labels: Iterable[Label]) -> dict[str, dict[str, float]]:
    """Per source: how many labels and their total weight (what a fit says it used)."""
    out: dict[str, dict[str, float]] = {}
    for lb in labels:
        s = out.setdefault(lb.source.value, {"labels": 0, "weight": 0.0})
        s["labels"] += 1
        s["weight"] = round(s["weight"] + lb.weight, 6)
    return out


# --------------------------------------------------------------------------- agreement


@dataclass(frozen=True)
class Agreement:
    value: float
    lo: float
    hi: float
    labels: int
    answers: int

    def to_json(self) -> dict[str, Any]:
        return {
            "value": round(self.value, 6),
            "lo": round(self.lo, 6),
            "hi": round(self.hi, 6),
            "labels": self.labels,
            "answers": self.answers,
        }


def _per_answer(model: HeuristicModel, labels: Sequence[Label]) -> dict[str, tuple[float, float]]:
    acc: dict[str, tuple[float, float]] = {}
    for lb in labels:
        hit = band(model.score(lb.features)) == band(lb.target)
        num, den = acc.get(lb.answer_id, (0.0, 0.0))
        acc[lb.answer_id] = (num + lb.weight * hit, den + lb.weight)
    return acc


def agreement(
    model: HeuristicModel, labels: Sequence[Label], *, resamples: int = 1000, seed: int = 20240601
) -> Agreement:
    acc = _per_answer(model, labels)
    if not acc:
        return Agreement(float("nan"), float("nan"), float("nan"), 0, 0)
    nums, dens = zip(*acc.values(), strict=True)
    est = bootstrap_ci(list(nums), list(dens), resamples=resamples, seed=seed)
    return Agreement(est.value, est.lo, est.hi, len(labels), len(acc))


def agreement_gain(
    old: HeuristicModel, new: HeuristicModel, labels: Sequence[Label], *, resamples: int = 1000, seed: int = 20240601
) -> tuple[float, float, float]:
    """(new - old) agreement on the same labels, with its paired bootstrap interval over answers."""
    a, b = _per_answer(old, labels), _per_answer(new, labels)
    keys = sorted(a)
    if not keys:
        return 0.0, 0.0, 0.0
    return paired_bootstrap(
        [a[k][0] for k in keys],
        [b[k][0] for k in keys],
        [a[k][1] for k in keys],
        [b[k][1] for k in keys],
        resamples=resamples,
        seed=seed,
    )


def routing_share(model: HeuristicModel, rows: Sequence[dict[str, float | None]], threshold: float) -> float:
    """Share of answers tier 1 scores below the tier-2 routing threshold (the low-score route)."""
    return float(np.mean([model.score(r) < threshold for r in rows])) if rows else 0.0


# --------------------------------------------------------------------------- versions


def active_model(store: Store) -> HeuristicModel:
    """The newest `tier1_model` entry's model; the shipped prior when none was ever activated."""
    for entry in store.audit.timeline(action_type=MODEL_ENTRY, limit=5):
        try:
            return HeuristicModel.from_json(entry.evidence["model"])
        except (KeyError, TypeError, ValueError):
            continue
    return PRIOR


def model_entry(model: HeuristicModel, *, previous: HeuristicModel, why: dict[str, Any]) -> dict[str, Any]:
    """The evidence of a `tier1_model` audit entry: the whole model, the one it replaces, and why."""
    return {"model": model.to_json(), "version": model.version, "previous": previous.to_json(), **why}


# --------------------------------------------------------------------------- the weekly check


@dataclass(frozen=True)
class Tier1State:
    monitor: bool
    reason: str
    last_check: dict[str, Any] | None


def state(store: Store) -> Tier1State:
    """Monitor mode: the latest decided weekly check was below `MONITOR_BELOW` and no model was
    activated after it."""
    checks = [
        e
        for e in store.audit.timeline(action_type=CHECK_ENTRY, limit=20)
        if e.evidence.get("decision") != "insufficient"
    ]
    if not checks:
        return Tier1State(False, "no weekly check yet", None)
    last = checks[0]
    models = store.audit.timeline(action_type=MODEL_ENTRY, limit=1)
    if last.evidence.get("decision") != "monitor":
        return Tier1State(False, f"weekly agreement {last.evidence.get('agreement', {}).get('value')}", last.evidence)
    if models and (models[0].created_at, models[0].log_id) > (last.created_at, last.log_id):
        return Tier1State(False, f"model {models[0].evidence.get('version')} activated after the check", last.evidence)
    value = last.evidence.get("agreement", {}).get("value")
    return Tier1State(True, f"weekly agreement {value} < {MONITOR_BELOW}: monitor mode", last.evidence)


def _decision(value: float) -> str:
    return "monitor" if value < MONITOR_BELOW else "recalibrate" if value < RECALIBRATE_BELOW else "ok"


def _pending(store: Store) -> bool:
    return bool(
        store.improvement_actions.listed(
            kind=ActionKind.TIER1_RECALIBRATION.value, status=("proposed", "scheduled"), limit=1
        )
    )


def propose(store: Store, key: str, evidence: dict[str, Any]) -> None:
    if not _pending(store):
        store.improvement_actions.propose(
            ActionKind.TIER1_RECALIBRATION.value,
            COMPONENT,
            key,
            evidence={"confidence": 1.0, **evidence},
            payload={},
            priority=1.0,
        )


def _iso(when: Any) -> datetime | None:
    return datetime.fromisoformat(when) if isinstance(when, str) else None


def watch(store: Store, clock: Clock, *, resamples: int = 1000, seed: int = 20240601) -> dict[str, Any] | None:
    """The weekly agreement check (when due) and the label-buffer trigger. Returns the check's
    evidence when one ran this call."""
    now = clock.now()
    checks = store.audit.timeline(action_type=CHECK_ENTRY, limit=1)
    last = checks[0].evidence if checks else None
    ran = None
    if last is None or now - (_iso(last.get("checked_at")) or now) >= WEEK:
        since = _iso(last.get("until")) if last else None
        labels = [lb for lb in collect_labels(store, since=since) if since is None or lb.at > since]
        model = active_model(store)
        until = max((lb.at for lb in labels), default=since)
        ev: dict[str, Any] = {
            "checked_at": now.isoformat(),
            "since": since.isoformat() if since else None,
            "until": until.isoformat() if until else None,
            "model": model.version,
            "labels": len(labels),
            "sources": sources_of(labels),
        }
        if len(labels) < MIN_CHECK_LABELS:
            ev.update(decision="insufficient", until=ev["since"])  # the labels count toward next week
        else:
            agr = agreement(model, labels, resamples=resamples, seed=seed)
            ev.update(agreement=agr.to_json(), decision=_decision(agr.value))
        store.audit.record(CHECK_ENTRY, triggered_by="tier1 weekly check", actor="improve", evidence=ev)
        if ev["decision"] in ("recalibrate", "monitor"):
            propose(store, f"weekly:{ev['checked_at']}", {"trigger": "weekly_agreement", "check": ev})
        ran = ev
    refits = store.audit.timeline(action_type=REFIT_ENTRY, limit=1)
    since_fit = _iso(refits[0].evidence.get("labels_until")) if refits else None
    # each pass asks: the newest 2 x BUFFER_SIZE of each source are enough to tell whether 200 arrived
    recent = collect_labels(store, since=since_fit, limit=2 * BUFFER_SIZE)
    fresh = [lb for lb in recent if since_fit is None or lb.at > since_fit]
    if len(fresh) >= BUFFER_SIZE:
        propose(store, f"labels:{fresh[0].at.isoformat()}", {"trigger": "label_buffer", "new_labels": len(fresh)})
    return ran
