"""Integration: the real embedder and BM25 on real SQuAD 2.0 paragraphs (one file each)."""

from __future__ import annotations

import pytest

from ragloop.config import PipelineConfig, Settings
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.retriever import Retriever
from tests.conftest import write_squad_docs


@pytest.fixture(scope="module")
def squad(tmp_path_factory: pytest.TempPathFactory) -> tuple[Collection, list[tuple[str, str]]]:
    home = tmp_path_factory.mktemp("home")
    docs = tmp_path_factory.mktemp("docs")
    questions = write_squad_docs(docs, articles=1, paragraphs=40)
    coll = Collection("squad", Settings(home=home))
    coll.ingest([docs], PipelineConfig())
    return coll, questions


@pytest.mark.parametrize("mode,floor", [("bm25", 0.85), ("dense", 0.8), ("hybrid", 0.9)])
def test_recall_at_5_on_real_questions(
    squad: tuple[Collection, list[tuple[str, str]]], mode: str, floor: float
) -> None:
    coll, questions = squad
    retriever = Retriever(coll, PipelineConfig().retrieval)
    sample = questions[::3]
    found = sum(
        any(h.doc_id == f"{stem}.md" for h in retriever.retrieve(q, k=5, mode=mode))  # type: ignore[arg-type]
        for q, stem in sample
    )
    assert found / len(sample) >= floor, (mode, found, len(sample))
