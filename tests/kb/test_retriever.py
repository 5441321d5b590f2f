"""Retriever stages: modes, fusion variants, rerank, MMR and pinned expansions."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragloop.config import PipelineConfig, Settings
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.retriever import Retriever

pytestmark = pytest.mark.usefixtures("kb_backend")  # embedded files and PostgreSQL

HASHED = PipelineConfig().with_overrides(retrieval={"dense": {"embedder": "test:hashed"}})
DOCS = {
    "walk.md": "# os.walk\n\nGenerate the file names in a directory tree by walking it top-down.",
    "listdir.md": "# os.listdir\n\nReturn a list containing the names of the entries in the directory.",
    "json.md": "# json.loads\n\nDeserialize a str containing a JSON document to a Python object.",
    "dup1.md": "# Copies\n\nshutil.copytree copies an entire directory tree rooted at src.",
    "dup2.md": "# More copies\n\nshutil.copytree copies an entire directory tree rooted at src!",
    "sockets.md": "# socket\n\nCreate a TCP socket and connect it to a remote address.",
}


@pytest.fixture
def coll(tmp_path: Path) -> Collection:
    root = tmp_path / "docs"
    root.mkdir()
    for name, text in DOCS.items():
        (root / name).write_text(text)
    c = Collection("kb", Settings())
    c.ingest([root], HASHED)
    return c


def _retriever(coll: Collection, **retrieval: object) -> Retriever:
    return Retriever(coll, HASHED.with_overrides(retrieval=retrieval).retrieval)


@pytest.mark.parametrize("mode", ["bm25", "dense", "hybrid"])
def test_each_mode_finds_the_identifier_and_records_its_stages(coll: Collection, mode: str) -> None:
    hits = _retriever(coll).retrieve("os.walk directory", k=3, mode=mode)  # type: ignore[arg-type]
    assert hits[0].doc_id == "walk.md"
    assert [h.rank for h in hits] == [1, 2, 3]
    stages = {"bm25": {"bm25"}, "dense": {"dense"}, "hybrid": {"fusion"}}[mode]
    assert stages <= set(hits[0].scores)
    assert all(hits[i].score >= hits[i + 1].score for i in range(len(hits) - 1))


@pytest.mark.parametrize("method", ["rrf", "weighted"])
def test_fusion_methods_rank_the_clear_winner_first(coll: Collection, method: str) -> None:
    hits = _retriever(coll, fusion={"method": method}).retrieve("json.loads deserialize", k=2)
    assert hits[0].doc_id == "json.md"
    assert {"bm25", "dense", "fusion"} <= set(hits[0].scores)


def test_rerank_stage_scores_and_keeps_a_relevant_top(coll: Collection) -> None:
    hits = _retriever(coll, rerank={"enabled": True, "top_n": 5}).retrieve("names in a directory listing", k=3)
    assert all("rerank" in h.scores for h in hits)
    assert hits[0].doc_id in {"listdir.md", "walk.md"}


def test_mmr_demotes_a_near_duplicate(coll: Collection) -> None:
    plain = [h.doc_id for h in _retriever(coll).retrieve("shutil.copytree directory tree", k=2)]
    assert set(plain) == {"dup1.md", "dup2.md"}
    diverse = [
        h.doc_id
        for h in _retriever(coll, mmr={"enabled": True, "lambda": 0.3}).retrieve("shutil.copytree directory tree", k=2)
    ]
    assert len({"dup1.md", "dup2.md"} & set(diverse)) == 1


def test_pinned_expansion_comes_first(coll: Collection) -> None:
    sock = next(c.chunk_id for c in coll.load().chunks if c.doc_id == "sockets.md")
    coll.registry.pin("How do I talk to a server?", [sock, "no-such-chunk"])
    hits = _retriever(coll).retrieve("how do I  TALK to a server?", k=3)
    assert hits[0].chunk_id == sock and hits[0].scores == {"pinned": 1.0}
    off = _retriever(coll, use_expansion_cache=False).retrieve("how do I talk to a server?", k=3)
    assert not any("pinned" in h.scores for h in off)


def test_empty_query_and_k_larger_than_collection(coll: Collection) -> None:
    assert _retriever(coll).retrieve("   ") == []
    assert len(_retriever(coll).retrieve("directory", k=50)) <= len(DOCS)


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
def test_a_query_with_no_embeddable_text_does_not_crash(coll: Collection, mode: str) -> None:
    """The hashed embedder maps symbol-only text to a zero vector: dense search has nothing to say."""
    hits = _retriever(coll).retrieve("∑ ∫ ≈", k=3, mode=mode)  # type: ignore[arg-type]
    assert hits == [] or all("dense" not in h.scores for h in hits)
