"""The metrics an experiment may decide on or guard, and where each one's per-answer score lives.

| metric | per-answer score | from |
|---|---|---|
| `tier1_score` | `evaluations.heuristic_score` (tier 1, every answer) | heuristic |
| `faithfulness`, `answer_relevancy`, `context_precision`, `context_recall` | tier-2 RAGAS scores | llm_judge |
| `latency_p99` | `answers.latency_ms / 1000` (seconds) | the answer |
| `refusal_rate` | `answers.refused` as 0/1 | the answer |
| `user_rating` | the answer's latest explicit rating, positive 1 / negative 0 (rated answers only) | users |

`latency_p99` is reported per arm as the 99th percentile, but the *test* compares mean latency:
a percentile has no additive per-answer score for the sequential test, and a p99 regression
without a mean regression is rare for a pipeline change (more retrieval, more calls: every answer
pays). Latency and refusals are lower-is-better; everything else higher-is-better.
"""

from __future__ import annotations

from enum import StrEnum

from ragloop.experiments.decisions import Direction
from ragloop.store.vocabulary import Tier


class Metric(StrEnum):
    TIER1_SCORE = "tier1_score"
    FAITHFULNESS = "faithfulness"
    ANSWER_RELEVANCY = "answer_relevancy"
    CONTEXT_PRECISION = "context_precision"
    CONTEXT_RECALL = "context_recall"
    LATENCY_P99 = "latency_p99"
    REFUSAL_RATE = "refusal_rate"
    USER_RATING = "user_rating"

    @property
    def direction(self) -> Direction:
        if self in (Metric.LATENCY_P99, Metric.REFUSAL_RATE):
            return Direction.LOWER_IS_BETTER
        return Direction.HIGHER_IS_BETTER

    @property
    def tier(self) -> Tier | None:
        """The evaluation tier that scores it (None: read from the answer row)."""
        if self is Metric.TIER1_SCORE:
            return Tier.HEURISTIC
        if self in (Metric.LATENCY_P99, Metric.REFUSAL_RATE, Metric.USER_RATING):
            return None
        return Tier.LLM_JUDGE

    @property
    def column(self) -> str:
        """The `evaluations` column (or answer field) holding the score."""
        return {
            Metric.TIER1_SCORE: "heuristic_score",
            Metric.ANSWER_RELEVANCY: "answer_relevance",
            Metric.LATENCY_P99: "latency_ms",
            Metric.REFUSAL_RATE: "refused",
            Metric.USER_RATING: "rating",
        }.get(self, self.value)

    @property
    def planning_sd(self) -> float:
        """A guess of one answer's spread, for `SequentialDesign.plan` (a wrong guess costs width only)."""
        return {Metric.LATENCY_P99: 1.0, Metric.REFUSAL_RATE: 0.4, Metric.USER_RATING: 0.5}.get(self, 0.2)


ALIASES: dict[str, Metric] = {
    "heuristic_score": Metric.TIER1_SCORE,
    "heuristic": Metric.TIER1_SCORE,
    "tier1": Metric.TIER1_SCORE,
    "answer_relevance": Metric.ANSWER_RELEVANCY,
    "latency": Metric.LATENCY_P99,
    "refusal": Metric.REFUSAL_RATE,
    "rating": Metric.USER_RATING,
}


def parse_metric(name: str) -> Metric:
    """A metric by name or alias; ValueError naming the known metrics otherwise."""
    key = str(name).strip().lower()
    if key in ALIASES:
        return ALIASES[key]
    try:
        return Metric(key)
    except ValueError:
        known = ", ".join(m.value for m in Metric)
        raise ValueError(f"unknown metric {name!r}; known metrics: {known}") from None
