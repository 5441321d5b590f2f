"""Tier routing: which answers go on from tier 1 to the judge (tier 2) and to human review (tier 3).

- After **tier 1** (every answer): to tier 2 when the answer is in the random sample
  (`tier2_sample_rate`), scores below `tier2_threshold`, or asks a golden-set question; to tier 3
  by a smaller random sample (`tier3_sample_rate`). `route_tier1` decides; the sampling coins are
  deterministic per answer, so a retried job routes the same way.
- After **tier 2**: a judge score farther than `tier3_disagreement` from tier 1's makes the answer a
  review *candidate*; each day's highest candidates go to review, capped (`review_intake.py`).
- From **feedback**: a negative rating sends the answer to tier 2, a correction or highlighted
  passages send it to tier 3 as well (`route_feedback`).

Reasons are stored in the follow-up job's payload (`reasons`), so the review queue and the judge's
evaluation say why an answer was routed. The knobs are `RoutingConfig`; the service builds it from
its environment (`ServiceConfig.routing`, the `RAGLOOP_TIER*` variables).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ragloop.store import EvaluationQueue
from ragloop.store.vocabulary import Tier


class RoutingReason(StrEnum):
    """Why an answer was sent on to tier 2 or tier 3 (a job payload's `reasons`)."""

    RANDOM_SAMPLE = "random_sample"
    LOW_HEURISTIC_SCORE = "low_heuristic_score"
    GOLDEN_SET = "golden_set"
    NEGATIVE_FEEDBACK = "negative_feedback"
    DETAILED_FEEDBACK = "detailed_feedback"
    DISAGREEMENT = "tier1_tier2_disagreement"


@dataclass(frozen=True)
class RoutingConfig:
    """The routing knobs (each one a `ServiceConfig` field and a `RAGLOOP_<NAME>` variable)."""

    tier2_sample_rate: float = 0.01
    """Share of answers the judge sees at random, whatever their tier-1 score."""
    tier2_threshold: float = 0.6
    """A tier-1 score below this sends the answer to the judge."""
    tier3_sample_rate: float = 0.001
    """Share of answers sent to human review at random."""
    tier3_disagreement: float = 0.3
    """A tier-2 score this far from tier 1's makes the answer a candidate for human review."""
    tier3_disagreement_share: float = 0.05
    """Of the answers judged at tier 2 in a UTC day, at most this share (rounded up) go to human
    review for disagreement: the highest-disagreement candidates, chosen when the day is over."""
    tier3_disagreement_daily_max: int = 25
    """And at most this many a day (0: disagreement sends nothing to review)."""
    tier3_disagreement_daily_min: int = 20
    """But the first this many disagreements of a UTC day (never more than the daily max) go to review
    at once, whatever the share allows: one reviewer's day of work. At low volume the share rounds to
    one item a day, a day late, and reviewers sat idle while diagnosis waited for their corrections."""


def sampled(answer_id: str, salt: str, rate: float) -> bool:
    """A deterministic coin per (answer, purpose): a retried job makes the same routing decision."""
    if rate <= 0:
        return False
    h = int.from_bytes(hashlib.sha256(f"{salt}:{answer_id}".encode()).digest()[:8], "big")
    return h / 2**64 < rate


@dataclass(frozen=True)
class Tier1Route:
    """Where a tier-1 evaluation sends the answer next."""

    tier2_reasons: list[RoutingReason] = field(default_factory=list)
    """Empty: no judge."""
    human: bool = False
    """In the random tier-3 sample."""

    @property
    def routed_to(self) -> list[Tier]:
        return [Tier.LLM_JUDGE] * bool(self.tier2_reasons) + [Tier.HUMAN] * self.human


def route_tier1(answer_id: str, score: float, *, golden: bool, config: RoutingConfig) -> Tier1Route:
    """The routing decision for an answer tier 1 scored `score` (`golden`: it asks a golden-set question)."""
    reasons: list[RoutingReason] = []
    if sampled(answer_id, "tier2", config.tier2_sample_rate):
        reasons.append(RoutingReason.RANDOM_SAMPLE)
    if score < config.tier2_threshold:
        reasons.append(RoutingReason.LOW_HEURISTIC_SCORE)
    if golden:
        reasons.append(RoutingReason.GOLDEN_SET)
    return Tier1Route(reasons, sampled(answer_id, "tier3", config.tier3_sample_rate))


def disagreement(judged: float | None, heuristic: float | None) -> float | None:
    """|tier-2 score − tier-1 score|, None unless both exist."""
    return abs(judged - heuristic) if judged is not None and heuristic is not None else None


def route_feedback(queue: EvaluationQueue, answer_id: str, *, negative: bool, detailed: bool, feedback_id: str) -> bool:
    """Queue what a user's feedback calls for: the judge for a negative rating, human review for
    detailed feedback (a correction, highlighted passages); an answer already queued at a tier is
    not queued again. Call it inside the transaction that stores the feedback. True when it queued
    anything."""
    jobs = {j.tier: j for j in queue.for_answer(answer_id)}
    base: dict[str, Any] = dict(jobs[Tier.HEURISTIC].payload) if Tier.HEURISTIC in jobs else {}
    queued = False
    if negative and Tier.LLM_JUDGE not in jobs:
        queue.enqueue(answer_id, Tier.LLM_JUDGE, {**base, "reasons": [RoutingReason.NEGATIVE_FEEDBACK]})
        queued = True
    if detailed and Tier.HUMAN not in jobs:
        queue.enqueue(answer_id, Tier.HUMAN, {"reasons": [RoutingReason.DETAILED_FEEDBACK], "feedback_id": feedback_id})
        queued = True
    return queued
