"""The experiments' hooks into a running pipeline: an `Answerer` over an agent (for the regression
run) and the golden-set smoke test a promotion runs first.

Smoke test: the first `limit` entries of the working golden set (never the held-out share)
through the candidate; it passes when every entry is answered without an error and no metric's
mean falls more than `tolerance` below the last approved regression run's. It is a tripwire for
a broken candidate (an index it cannot read, a config that refuses everything), not a second
statistical test: the experiment already measured the treatment on live traffic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ragloop.experiments.golden import working_set
from ragloop.experiments.promotion import SmokeResult, SmokeTest
from ragloop.experiments.regression import METRICS, Answered, Answerer, last_approved, score_entry
from ragloop.experiments.versions import version_config

if TYPE_CHECKING:
    from ragloop.agent.api import Agent
    from ragloop.config import PipelineConfig, Settings
    from ragloop.models.chat import CallSink
    from ragloop.store import Store


def agent_answerer(agent: Agent) -> Answerer:
    from ragloop.models.chat import CallPurpose, call_scope

    def answer(question: str) -> Answered:
        with call_scope(purpose=CallPurpose.GOLDEN_RUN):  # the call log tells golden runs from served answers
            ans = agent.answer(question)
        docs = [c.doc_id for c in ans.citations] + [c.doc_id for c in ans.hits]
        return Answered(ans.answer, [d for d in dict.fromkeys(docs) if d], bool(ans.refused))

    return answer


def build_answerer(
    settings: Settings, collection: str, config: PipelineConfig, *, calls: CallSink | None = None
) -> Answerer:
    """`calls`: the call log (the store's `model_calls`) the agent's model calls are written to."""
    from ragloop.agent.build import build_agent
    from ragloop.retrieval.collection import Collection

    coll = Collection(collection, settings)
    if not coll.exists():
        raise LookupError(f"no collection named {collection!r}")
    return agent_answerer(build_agent(coll, config, calls=calls))


def golden_smoke_test(
    store: Store, settings: Settings, collection: str, *, limit: int = 5, tolerance: float = 0.1
) -> SmokeTest:
    def smoke(version_id: str) -> SmokeResult:
        entries = working_set(store)[:limit]
        if not entries:
            return SmokeResult(True, {"entries": 0, "note": "empty golden set: nothing to check"})
        try:
            answer = build_answerer(settings, collection, version_config(store, version_id), calls=store.model_calls)
            scored = [score_entry(e, answer(e.question)) for e in entries]
        except Exception as exc:
            return SmokeResult(False, {"error": f"{type(exc).__name__}: {str(exc)[:300]}"})
        means = {m: float(np.mean([s[m] for s in scored if m in s])) for m in METRICS if any(m in s for s in scored)}
        base = last_approved(store)
        drops = {
            m: round(base.metrics[m] - v, 6)
            for m, v in means.items()
            if base is not None and isinstance(base.metrics.get(m), int | float) and base.metrics[m] - v > tolerance
        }
        return SmokeResult(not drops, {"entries": len(entries), "means": means, "drops_beyond_tolerance": drops})

    return smoke
