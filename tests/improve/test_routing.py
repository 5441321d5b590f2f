"""Tier routing: deterministic sampling coins, the tier-1 routing decision and its reasons."""

from __future__ import annotations

import pytest

from ragloop.improve.routing import RoutingConfig, RoutingReason, disagreement, route_tier1, sampled
from ragloop.store.vocabulary import Tier

NO_SAMPLES = RoutingConfig(tier2_sample_rate=0.0, tier3_sample_rate=0.0)


def test_sampling_is_deterministic_per_answer() -> None:
    ids = [f"{i:032x}" for i in range(20_000)]
    hits = sum(sampled(a, "tier2", 0.01) for a in ids)
    assert 120 <= hits <= 280
    assert [sampled(a, "tier2", 0.01) for a in ids[:500]] == [sampled(a, "tier2", 0.01) for a in ids[:500]]
    assert not any(sampled(a, "x", 0.0) for a in ids[:100]) and all(sampled(a, "x", 1.0) for a in ids[:100])


def test_tier1_routes_low_scores_golden_questions_and_samples() -> None:
    answer = "0" * 32
    assert route_tier1(answer, 0.9, golden=False, config=NO_SAMPLES).routed_to == []
    low = route_tier1(answer, 0.59, golden=True, config=NO_SAMPLES)
    assert low.tier2_reasons == [RoutingReason.LOW_HEURISTIC_SCORE, RoutingReason.GOLDEN_SET]
    assert low.routed_to == [Tier.LLM_JUDGE] and not low.human
    everything = route_tier1(
        answer, 0.9, golden=False, config=RoutingConfig(tier2_sample_rate=1.0, tier3_sample_rate=1.0)
    )
    assert everything.tier2_reasons == ["random_sample"] and everything.routed_to == ["llm_judge", "human"]


def test_disagreement_needs_both_scores() -> None:
    assert disagreement(0.2, 0.9) == pytest.approx(0.7)
    assert disagreement(None, 0.9) is None and disagreement(0.5, None) is None
