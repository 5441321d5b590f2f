"""Incremental ingest, bad input and atomic generations, through the Collection API."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from ragloop.config import PipelineConfig, Settings
from ragloop.models import make_embedder
from ragloop.models.scoring import EmbeddingScorer, passage_embed_texts
from ragloop.retrieval.collection import Collection, CollectionError
from ragloop.retrieval.retriever import Retriever

pytestmark = pytest.mark.usefixtures("kb_backend")  # embedded files and PostgreSQL

HASHED = PipelineConfig().with_overrides(retrieval={"dense": {"embedder": "test:hashed"}})


def _docs(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "walk.md").write_text(
        "# os\n\n## os.walk\n\nGenerate the file names in a directory tree by walking the tree "
        "top-down or bottom-up.\n\n```python\nfor root, dirs, files in os.walk('.'):\n    print(root)\n```\n"
    )
    (root / "json.md").write_text("# json\n\nParse a JSON document with json.loads and write one with json.dumps.\n")
    sub = root / "guide"
    sub.mkdir(exist_ok=True)
    (sub / "docker.md").write_text("# Docker\n\nThe daemon reads daemon.json; limit memory with --memory.\n")


def _ids(coll: Collection, query: str, k: int = 3) -> list[str]:
    return [h.doc_id for h in Retriever(coll, HASHED.retrieval).retrieve(query, k=k)]


def test_incremental_reingest_touches_only_what_changed(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    _docs(root)
    coll = Collection("kb", Settings())
    first = coll.ingest([root], HASHED)
    assert (first.new, first.changed, first.unchanged, first.generation) == (3, 0, 0, 1)
    assert first.chunks_embedded == first.chunks_total > 0
    assert _ids(coll, "os.walk directory tree")[0] == "walk.md"
    assert "guide/docker.md" in _ids(coll, "daemon.json --memory")  # doc ids are relative paths

    again = coll.ingest([root], HASHED)
    assert (again.new, again.changed, again.unchanged, again.generation) == (0, 0, 3, 1)
    assert again.chunks_embedded == 0

    os.utime(root / "json.md", ns=(1, 1))  # touched, same content: still unchanged, nothing embedded
    touched = coll.ingest([root], HASHED)
    assert (touched.changed, touched.unchanged, touched.generation) == (0, 3, 1)

    (root / "json.md").write_text(
        "# json\n\nParse a JSON document with json.loads.\n\nA brand new paragraph about orjson.\n"
    )
    changed = coll.ingest([root], HASHED)
    assert (changed.changed, changed.unchanged, changed.generation) == (1, 2, 2)
    assert 0 < changed.chunks_embedded <= 2  # only the changed file's new chunk texts
    assert _ids(coll, "orjson")[0] == "json.md"

    (root / "guide" / "docker.md").unlink()
    deleted = coll.ingest([root], HASHED)
    assert deleted.deleted == 1
    assert "guide/docker.md" not in _ids(coll, "daemon.json --memory", k=10)
    coll.close()


def test_chunk_ids_are_stable_across_collections(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    _docs(root)
    a, b = Collection("a", Settings()), Collection("b", Settings())
    a.ingest([root], HASHED)
    b.ingest([root], HASHED)
    assert [c.chunk_id for c in a.load().chunks] == [c.chunk_id for c in b.load().chunks]


def test_bad_files_are_skipped_counted_and_explained(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    _docs(root)
    (root / "empty.md").write_text("")
    (root / "binary.txt").write_bytes(b"abc\x00\x01\x02" * 100)
    (root / "latin1.md").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (root / "broken.pdf").write_bytes(b"%PDF-1.4\n1 0 obj << /Type /Catalog >> garbage")
    (root / "bad.jsonl").write_text('{"id": 1, "text": "fine"}\n{not json}\n')
    (root / "huge.txt").write_text("word " * 5000)
    (root / "picture.png").write_bytes(b"\x89PNG\r\n")
    coll = Collection("kb", Settings(max_file_bytes=20_000))
    summary = coll.ingest([root], HASHED)
    reasons = dict(summary.skipped)
    assert set(reasons) == {"empty.md", "binary.txt", "latin1.md", "broken.pdf", "bad.jsonl", "huge.txt"}
    assert all(r for r in reasons.values())
    assert "line 2" in reasons["bad.jsonl"]
    assert "MB" in reasons["huge.txt"]
    assert summary.ignored == 1  # unsupported type, not an error
    assert summary.new == 3
    assert _ids(coll, "os.walk")[0] == "walk.md"


def test_file_that_turns_bad_keeps_its_previous_chunks(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    _docs(root)
    coll = Collection("kb", Settings())
    coll.ingest([root], HASHED)
    (root / "json.md").write_bytes(b"\xff\xfe broken \x00")
    s = coll.ingest([root], HASHED)
    assert [p for p, _ in s.skipped] == ["json.md"]
    assert "json.md" in _ids(coll, "json.loads json.dumps")


def test_changed_index_settings_rebuild_everything(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    _docs(root)
    coll = Collection("kb", Settings())
    coll.ingest([root], HASHED)
    smaller = HASHED.with_overrides(chunking={"size": 60, "overlap": 10})
    s = coll.ingest([root], smaller)
    assert s.new == 3 and s.generation == 2
    assert s.chunks_total > coll.registry.files()["walk.md"].n_chunks - 1


def test_missing_collection_and_bad_names_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(CollectionError, match="has no index"):
        Collection("nothing", Settings()).load()
    with pytest.raises(CollectionError, match="invalid collection name"):
        Collection("../escape", Settings())
    with pytest.raises(FileNotFoundError):
        Collection("kb", Settings()).ingest([tmp_path / "missing"], HASHED)


def test_interrupted_write_leaves_previous_generation_serving(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash after the new generation's files are half written must not change what is served."""
    import ragloop.retrieval.store as store

    root = tmp_path / "docs"
    _docs(root)
    coll = Collection("kb", Settings())
    coll.ingest([root], HASHED)
    (root / "new.md").write_text("# New\n\nA fresh document about asyncio event loops.\n")

    def explode(*_a: object, **_k: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
        m.setattr(store.BM25Index, "save", explode)
        coll.ingest([root], HASHED)
    reopened = Collection("kb", Settings())
    assert reopened.generation() == 1
    assert "new.md" not in {c.doc_id for c in reopened.load().chunks}
    s = reopened.ingest([root], HASHED)  # the next run picks the new file up and cleans the orphan
    assert s.new == 1 and s.generation == 2
    assert not list(reopened.dir.glob("*.tmp-*"))


def test_delete_documents_removes_them_in_a_new_generation(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    _docs(root)
    coll = Collection("kb", Settings())
    coll.ingest([root], HASHED)
    s = coll.delete_documents(["guide/docker.md"])
    assert (s.deleted, s.generation) == (1, 2)
    assert "guide/docker.md" not in {c.doc_id for c in coll.load().chunks}
    assert "guide/docker.md" not in coll.registry.files()
    assert _ids(coll, "os.walk")[0] == "walk.md"
    with pytest.raises(CollectionError, match="not in collection"):
        coll.delete_documents(["nope.md"])
    assert coll.generation() == 2  # a failed delete changes nothing


def test_an_empty_tree_gives_an_empty_searchable_collection(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    coll = Collection("kb", Settings())
    s = coll.ingest([tmp_path / "empty"], HASHED)
    assert (s.generation, s.chunks_total) == (1, 0)
    assert _ids(coll, "anything") == []


@pytest.mark.parametrize("precompute", [True, False])
def test_ingest_embeds_what_the_scorers_will_read(tmp_path: Path, precompute: bool) -> None:
    """With passage vectors precomputed, scoring a retrieved chunk embeds only the question."""
    _docs(tmp_path / "docs")
    settings = Settings(precompute_passage_vectors=precompute)
    coll = Collection("kb", settings)
    coll.ingest([tmp_path / "docs"], HASHED)
    chunks = coll.load().chunks

    embedder = make_embedder("test:hashed", settings)
    scorer = EmbeddingScorer(embedder)
    asyncio.run(scorer.relevance("how do I walk a directory tree?", [ch.text for ch in chunks]))
    passage_texts = {t for ch in chunks for t in passage_embed_texts(ch.text)}
    assert len(passage_texts) > len(chunks)  # sentences too
    assert embedder.misses == (1 if precompute else 1 + len(passage_texts))
