"""The ranking buffer's retrieval refit beyond fusion weights: the retrieval mode (a dense-only
start can move to hybrid or BM25) and the top k (oracle chunks just below k → a larger k, at the
knee of the hit curve), each registered only on a gain interval above zero."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from ragloop.config.pipeline import RetrievalConfig
from ragloop.improve.clock import ManualClock
from ragloop.improve.remediation import ranking
from ragloop.improve.remediation.ranking import RankingTuple, fit_fusion
from ragloop.improve.remediation.topk import fit_top_k
from ragloop.improve.scheduler import Outcome, Scheduler
from ragloop.improve.types import ActionKind
from ragloop.retrieval.collection import Collection
from ragloop.store import Store
from tests.agent.conftest import DOCS, make_collection
from tests.improve.remediation_support import K1, context

DEGRADED = RetrievalConfig(mode="dense", k=2)


def _tuples(ranks: Sequence[int]) -> list[RankingTuple]:
    return [RankingTuple(query=f"q{i}", chunk_id=f"c{i}", rank=r) for i, r in enumerate(ranks)]


def _rank_of(ranks: Sequence[int]):
    def rr_of(cfg: RetrievalConfig, query: str, chunk_ids: Sequence[str]) -> list[float]:
        return [1.0 / ranks[int(query[1:])] for _ in chunk_ids]

    return rr_of


def test_oracle_chunks_just_below_k_give_a_larger_k_at_the_knee() -> None:
    ranks = [3, 4, 5, 3, 4, 5, 4, 3] * 5 + [60] * 10  # most just below k=2, a few far down
    fit = fit_top_k(_tuples(ranks), DEGRADED, _rank_of(ranks))
    assert fit.improves and fit.fitted == 5 and fit.lo > 0
    assert fit.curve[5] == pytest.approx(0.8) and fit.curve[10] == fit.curve[5]
    far = [50] * 30  # nothing a few more chunks would recover: no change
    assert not fit_top_k(_tuples(far), DEGRADED, _rank_of(far)).improves


def test_a_dense_only_start_can_move_to_another_mode() -> None:
    def lexical_helps(cfg: RetrievalConfig, query: str, chunk_ids: Sequence[str]) -> list[float]:
        good = cfg.mode == "bm25" or (cfg.mode == "hybrid" and cfg.fusion.dense_weight <= 0.3)
        return [1.0 if good else 0.1 for _ in chunk_ids]

    fit = fit_fusion(_tuples([5] * 30), DEGRADED, lexical_helps)
    assert fit.improves and fit.lo > 0
    assert fit.mode in ("bm25", "hybrid") and (fit.mode == "bm25" or fit.dense_weight <= 0.3)
    modes = {row["mode"] for row in fit.grid}
    assert modes == {"hybrid", "dense", "bm25"}


@pytest.fixture
def coll(tmp_path: Path) -> Iterator[Collection]:
    c = make_collection("kb", DOCS, tmp_path / "docs")
    yield c
    c.close()


def test_the_refit_registers_mode_and_k_in_one_candidate(
    store: Store, coll: Collection, monkeypatch: pytest.MonkeyPatch
) -> None:
    ranks = [3, 4, 3, 4, 2, 3] * 5

    def rr(cfg: RetrievalConfig, query: str, chunk_ids: Sequence[str]) -> list[float]:
        bonus = 2 if cfg.mode == "hybrid" and cfg.fusion.dense_weight == 0.4 else 0  # hybrid 0.4 ranks it higher
        return [1.0 / max(1, ranks[int(query[1:])] - bonus) for _ in chunk_ids]

    monkeypatch.setattr(ranking, "retriever_rr", lambda *_a, **_k: rr)
    monkeypatch.setattr(ranking.RankingBufferAction, "buffer", lambda self, ctx: _tuples(ranks))
    start = K1.with_overrides(retrieval={"mode": "dense", "k": 1})
    ctx = context(store, coll, ManualClock(), config=start, ranking_buffer_size=3)
    store.improvement_actions.propose(
        ActionKind.RANKING_BUFFER.value,
        "ranking_buffer:kb",
        start.version_id,
        domain="kb",
        answer_ids=["a"],
        evidence={"confidence": 0.9},
        payload={"collection": "kb", "question": "q0", "chunk_ids": ["c0"]},
    )
    [result] = Scheduler(ctx).run()
    assert result.outcome is Outcome.APPLIED and result.candidate_version is not None
    row = store.pipelines.get(result.candidate_version)
    assert row is not None and row.created_by == "remediation:ranking_buffer"
    assert row.parent_version_id == start.version_id
    retrieval = row.config["retrieval"]
    assert retrieval["mode"] == "hybrid" and retrieval["fusion"]["dense_weight"] == 0.4 and retrieval["k"] == 2
    [refit] = store.audit.timeline(action_type=ranking.REFIT_ACTION)
    assert refit.evidence["overrides"]["k"] == 2 and refit.evidence["top_k"]["fitted"] == 2
