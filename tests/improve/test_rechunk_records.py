"""Re-chunking one record of a multi-record file (a JSONL corpus: each record its own document,
doc id `path#record`): only that record's chunks change, every other chunk keeps its id and vector,
revert restores the collection exactly, and later ingests of the file keep the record's override.
Before, a "per-document" re-chunk of an MTRAG-UN passage re-chunked all 858 records of its file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ragloop.config import Settings
from ragloop.config.pipeline import ChunkingConfig, ChunkOverride
from ragloop.improve.clock import ManualClock
from ragloop.improve.remediation import ActionSpec, RechunkAction
from ragloop.improve.types import ActionKind
from ragloop.ingest.registry import DocumentOverride
from ragloop.retrieval.collection import Collection, CollectionError
from ragloop.retrieval.rechunk import rechunk_document
from ragloop.store import Store
from tests.improve.remediation_support import context
from tests.improve.test_rechunk import DOCS, SENTENCE, SMALL, small_collection

pytestmark = pytest.mark.usefixtures("kb_backend")  # embedded files and PostgreSQL

FILLER = (
    "The {name} archive keeps ledgers of every cargo landed at the quay since 1880. "
    "Its reading room opens on weekdays and the catalogue lists maps, letters and tide tables. "
    "Volunteers transcribe the oldest ledgers each winter."
)
RECORDS = [
    {"id": "p1", "title": "Archive", "text": FILLER.format(name="harbour")},
    {"id": "p2", "title": "Lighthouse", "text": "The lighthouse of Ostria stands on the north mole. " + SENTENCE},
    {"id": "p3", "title": "Museum", "text": FILLER.format(name="museum")},
    {"id": "p4", "title": "Ferries", "text": FILLER.format(name="ferry")},
]
TARGET = "corpus.jsonl#p2"


def _jsonl(records: list[dict[str, str]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


@pytest.fixture
def coll(tmp_path: Path) -> Iterator[Collection]:
    c = small_collection(tmp_path / "docs", {"corpus.jsonl": _jsonl(RECORDS), "other.md": DOCS["other.md"]})
    yield c
    c.close()


@pytest.fixture
def store(sqlite_store: Store) -> Store:
    return sqlite_store


def _snapshot(coll: Collection) -> tuple[list[tuple[str, str, str]], np.ndarray]:
    """(chunk id, doc id, text) in index order, and the vectors."""
    gen = coll.load()
    return [(c.chunk_id, c.doc_id, c.text) for c in gen.chunks], np.asarray(gen.vectors).copy()


def _by_id(coll: Collection) -> dict[str, tuple[str, np.ndarray]]:
    gen = coll.load()
    vectors = np.asarray(gen.vectors)
    return {c.chunk_id: (c.doc_id, vectors[i].copy()) for i, c in enumerate(gen.chunks)}


def _ids_of(coll: Collection, doc_id: str) -> list[str]:
    return [c.chunk_id for c in coll.load().chunks if c.doc_id == doc_id]


def test_one_record_is_rechunked_and_reverted_alone(coll: Collection, store: Store) -> None:
    chunks0, vectors0 = _snapshot(coll)
    by_id0 = _by_id(coll)
    target0 = _ids_of(coll, TARGET)
    assert len(target0) >= 2 and not any(SENTENCE in t for _, d, t in chunks0 if d == TARGET)  # it straddles
    gen0 = coll.generation()
    spec = ActionSpec(
        action_id="act-rec",
        kind=ActionKind.RECHUNK_DOCUMENT,
        component=f"doc:kb/{TARGET}",
        domain="kb",
        evidence={"confidence": 0.8, "diagnosis": {"kind": "chunking", "sentence": SENTENCE}},
        payload={"collection": "kb", "question": "Who rebuilt the lighthouse?", "doc_id": TARGET},
    )
    action = RechunkAction(spec)
    ctx = context(store, coll, ManualClock(), config=SMALL, paraphrases=False)
    change = action.apply(ctx)

    assert coll.generation() == gen0 + 1
    overrides = coll.registry.document_overrides()
    assert set(overrides) == {TARGET} and (overrides[TARGET].size, overrides[TARGET].overlap) == (192, 48)
    target1 = _ids_of(coll, TARGET)
    assert set(target1).isdisjoint(target0) and any(
        SENTENCE in c.text for c in coll.load().chunks if c.doc_id == TARGET
    )
    by_id1 = _by_id(coll)
    others0 = {k: v for k, v in by_id0.items() if v[0] != TARGET}
    others1 = {k: v for k, v in by_id1.items() if v[0] != TARGET}
    assert others1.keys() == others0.keys()  # every other chunk kept its id ...
    assert all(np.array_equal(others1[k][1], others0[k][1]) for k in others0)  # ... and its vector
    assert len(by_id1) - len(by_id0) == len(target1) - len(target0)  # the count moved by the record's only
    order1 = [c for c, _, _ in _snapshot(coll)[0]]
    assert [c for c in order1 if c not in target1] == [c for c, _, _ in chunks0 if c not in target0]  # order kept
    assert change.revert["doc_id"] == TARGET and change.revert["rel"] == "corpus.jsonl"
    assert coll.registry.files()["corpus.jsonl"].n_chunks == sum(
        1 for c in coll.load().chunks if c.metadata.get("source") == "corpus.jsonl"
    )

    action.revert(ctx, change)
    chunks2, vectors2 = _snapshot(coll)
    assert chunks2 == chunks0 and np.array_equal(vectors2, vectors0)  # exactly the collection before
    assert coll.registry.document_overrides() == {} and coll.generation() == gen0 + 2


def test_later_ingests_keep_the_record_override(coll: Collection, tmp_path: Path) -> None:
    p1_0, p4_0 = _ids_of(coll, "corpus.jsonl#p1"), _ids_of(coll, "corpus.jsonl#p4")
    rechunk_document(coll, TARGET, DocumentOverride(TARGET, 300, 60, "test"), SMALL)
    after = _snapshot(coll)
    target1 = _ids_of(coll, TARGET)

    summary = coll.ingest([tmp_path / "docs"], SMALL)
    assert summary.changed == 0 and summary.unchanged == 2  # the file's fingerprint holds its record's override
    assert _snapshot(coll)[0] == after[0]

    edited = [*RECORDS[:3], {**RECORDS[3], "text": RECORDS[3]["text"] + " A new quay opened in 1990."}]
    (tmp_path / "docs" / "corpus.jsonl").write_text(_jsonl(edited))
    summary = coll.ingest([tmp_path / "docs"], SMALL)
    assert summary.changed == 1
    assert _ids_of(coll, TARGET) == target1  # the changed file is chunked with the record's override again
    assert max(len(c.text) for c in coll.load().chunks if c.doc_id == TARGET) > 120
    assert _ids_of(coll, "corpus.jsonl#p1") == p1_0  # other records: the collection's chunking
    assert _ids_of(coll, "corpus.jsonl#p4") != p4_0
    assert set(coll.registry.document_overrides()) == {TARGET}


def test_the_whole_file_is_still_one_override_away(coll: Collection) -> None:
    """Naming the file re-chunks every record in it (a file-level override), as before."""
    other0 = _ids_of(coll, "other.md")
    r = rechunk_document(coll, "corpus.jsonl", DocumentOverride("corpus.jsonl", 300, 60, "test"), SMALL)
    assert r.doc_id == r.rel == "corpus.jsonl"
    records = {c.doc_id for c in coll.load().chunks if c.chunk_id in r.chunk_ids_after}
    assert records == {f"corpus.jsonl#p{i}" for i in (1, 2, 3, 4)} and _ids_of(coll, "other.md") == other0


def test_an_id_that_is_both_a_path_and_a_record_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "amb"
    root.mkdir()
    (root / "corpus.jsonl").write_text(_jsonl([{"id": "x.md", "text": FILLER.format(name="x")}]))
    (root / "corpus.jsonl#x.md").write_text("# X\n\n" + FILLER.format(name="file"))
    c = Collection("amb", Settings())
    try:
        c.ingest([root], SMALL)
        with pytest.raises(CollectionError, match="ambiguous"):
            rechunk_document(c, "corpus.jsonl#x.md", DocumentOverride("corpus.jsonl#x.md", 300, 60, "t"), SMALL)
        assert c.registry.document_overrides() == {}
    finally:
        c.close()


def test_a_record_override_applies_to_its_record_only() -> None:
    cfg = ChunkingConfig(
        size=120,
        overlap=0,
        overrides=(ChunkOverride(glob="*", size=500), ChunkOverride(glob="c.jsonl", size=300, overlap=30)),
    )
    with_record = cfg.model_copy(update={"overrides": (*cfg.overrides, ChunkOverride(glob="c.jsonl#7", size=800))})
    assert with_record.for_record("c.jsonl", "c.jsonl#7") == (800, 30)
    assert with_record.for_record("c.jsonl", "c.jsonl#8") == (300, 30)  # "*" matches the id, but counts once
    assert with_record.for_document("c.jsonl") == (300, 30) and with_record.for_record("a.md", "a.md") == (500, 0)
