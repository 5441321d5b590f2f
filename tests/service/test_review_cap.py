"""The capped tier-3 intake in the service: the worker loop caps a flood of tier-1/tier-2
disagreements and the review gauges match (the intake itself: `tests/improve/test_review_intake.py`)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from ragloop.retrieval.collection import Collection
from ragloop.store import Store, Tier
from tests.service.conftest import build_app, make_keys, running, worker_for

pytestmark = pytest.mark.anyio

QUESTIONS = [
    "When was the Zorblat Bridge completed?",
    "How tall is the Quill Tower?",
    "When did the ferry service end?",
    "Who designed the Quill Tower?",
    "Who built the Zorblat Bridge?",
]


def gauge(text: str, name: str) -> float:
    m = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
    assert m is not None, name
    return float(m.group(1))


async def test_the_worker_caps_a_flood_and_the_gauges_match(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    # every answer to tier 2, every disagreement a candidate, no random tier-3 sample; at most 2 a day
    changes: dict[str, Any] = {
        "tier2_threshold": 1.01,
        "tier3_disagreement": -1.0,
        "tier3_sample_rate": 0.0,
        "tier3_disagreement_share": 1.0,
        "tier3_disagreement_daily_max": 2,
        "tier3_disagreement_daily_min": 0,  # no floor: every candidate waits for the day's ranked selection
    }
    async with running(build_app(store)) as c:
        ids = []
        for i, q in enumerate(QUESTIONS):
            r = await c.post("/v1/query", json={"question": q, "session_id": f"cap{i}"}, headers=keys.u)
            assert r.status_code == 200, r.text
            ids.append(r.json()["answer_id"])
        await worker_for(store, **changes).run(drain=True)
        metrics = (await c.get("/metrics", headers=keys.a)).text
        assert gauge(metrics, "ragloop_review_candidates") == len(ids)
        assert gauge(metrics, "ragloop_review_queue_depth") == 0
        # once the day (and its grace) is over, the worker loop chooses the intake (a fresh worker sweeps at once)
        real = store.queue.clock
        store.queue.clock = lambda: real() + timedelta(days=2)
        try:
            await worker_for(store, **changes).run(drain=True)
        finally:
            store.queue.clock = real
        disagreement = {}
        for a in ids:
            ev = store.evaluations.latest(a, Tier.LLM_JUDGE)
            assert ev is not None and ev.failure_evidence is not None and ev.failure_evidence["review_candidate"]
            disagreement[a] = ev.failure_evidence["disagreement"]
        queue = (await c.get("/v1/review", headers=keys.a)).json()
        expected = sorted(ids, key=lambda a: -disagreement[a])[:2]
        assert {i["answer_id"] for i in queue} == set(expected)
        assert all(i["reasons"] == ["tier1_tier2_disagreement"] for i in queue)
        metrics = (await c.get("/metrics", headers=keys.a)).text
        assert gauge(metrics, "ragloop_review_queue_depth") == 2 == store.queue.count(Tier.HUMAN)
        assert gauge(metrics, "ragloop_review_candidates") == 0
