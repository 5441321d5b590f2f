"""Re-chunk one document of a collection as a new index generation.

The chunking remediation's mechanism (and its revert, which re-chunks with the previous override):
only the document's chunks change, in place in the chunk order; every other chunk keeps its id and
vector. The document is named by its doc id: for a single-document file that is the file's path,
so the whole file is re-chunked; for one record of a multi-record file (JSON lines, a JSON list:
doc id `path#record`) only that record is, so a fix meant for one MTRAG-UN passage no longer
re-chunks the 858 others stored in the same file. The size/overlap is recorded as a per-document
override in the registry under that same id (`ChunkingConfig.for_record`), so later ingests keep
it without touching the collection's index fingerprint.

Atomic like an ingest (`Collection.publish`): the generation is stored whole, then the override,
the file's registry row and the generation pointer change in one registry transaction. Anything
failing before that commit removes what was staged and leaves the previous generation serving.
Vectors of chunks whose indexed text already exists in the current or previous generation are
reused, so a revert restores the previous vectors exactly instead of re-embedding them.
An uploaded document on a shared backend is read from the collection's storage (any instance
can re-chunk it, whichever received the upload), a local one from its registered root.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Iterable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ragloop.config.pipeline import ChunkingConfig, PipelineConfig
from ragloop.ingest.chunking import chunk_document
from ragloop.ingest.loaders import load_file
from ragloop.ingest.registry import DocumentOverride, FileRecord, RegistryTxn
from ragloop.ingest.scan import chunk_fingerprint
from ragloop.ingest.types import Chunk
from ragloop.models import make_embedder
from ragloop.retrieval.collection import Collection, CollectionError, _source, _with_source
from ragloop.retrieval.derived import DerivedCollection
from ragloop.retrieval.store import IndexSpec, Manifest, index_text


@dataclass(frozen=True)
class RechunkResult:
    rel: str
    """The source file."""
    doc_id: str
    """The document re-chunked (and the override's key): `rel` itself, or one record `rel#record`."""
    generation_before: int
    generation_after: int
    override_before: DocumentOverride | None
    override_after: DocumentOverride | None
    chunk_ids_before: tuple[str, ...]
    chunk_ids_after: tuple[str, ...]
    embedded: int
    """Chunks whose vector had to be computed (the rest were reused)."""


def source_of(collection: Collection, doc_id: str) -> str:
    """The registered source file holding `doc_id` (a JSONL record's doc id is `path#record`)."""
    for ch in collection.load().chunks:
        if ch.doc_id == doc_id:
            return _source(ch)
    raise CollectionError(f"no document {doc_id!r} in collection {collection.name!r}")


def _file_of(collection: Collection, doc_id: str, files: Iterable[str]) -> str:
    """The file `doc_id` names (itself) or the file holding it as a record. A doc id that is both a
    registered path and a record of another file (`a.jsonl` record `b.md` next to a file named
    `a.jsonl#b.md`) is refused: an override under it would apply to both."""
    holders = {_source(ch) for ch in collection.load().chunks if ch.doc_id == doc_id}
    if doc_id in set(files):
        holders.add(doc_id)
    if len(holders) > 1:
        raise CollectionError(f"document id {doc_id!r} is ambiguous in {collection.name!r}: {sorted(holders)}")
    if not holders:
        raise CollectionError(f"no document {doc_id!r} in collection {collection.name!r}")
    return holders.pop()


def _source_root(collection: Collection, rel: str, registered: Path, stack: ExitStack) -> Path:
    """Where to read `rel` from: a private folder holding the stored source (removed with `stack`),
    or the root it was ingested from."""
    stored = collection.storage.source(rel)
    if stored is None:
        return registered
    root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ragloop-rechunk-")))
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_bytes(stored)
    return root


def _file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _known_vectors(collection: Collection, generations: list[int], headings: bool) -> dict[str, np.ndarray]:
    """index text -> vector over the given generations still stored (newest wins)."""
    out: dict[str, np.ndarray] = {}
    for g in sorted(generations):
        found = collection.storage.rows(g) if g > 0 else None
        if found is None:
            continue
        chunks, vectors = found
        for i, chunk in enumerate(chunks):
            out[index_text(chunk, headings)] = np.asarray(vectors[i])
    return out


@dataclass(frozen=True)
class _Plan:
    """The generation a re-chunk would publish, and what its registry changes need."""

    rel: str
    record: FileRecord
    fingerprint: str
    chunking: ChunkingConfig
    n_docs: int
    before: DocumentOverride | None
    generation: int
    manifest: Manifest
    old_ids: tuple[str, ...]
    fresh: list[Chunk]
    chunks: list[Chunk]
    vectors: np.ndarray
    embedded: int


def _plan(
    collection: Collection,
    doc_id: str,
    override: DocumentOverride | None,
    config: PipelineConfig,
    stack: ExitStack,
) -> _Plan:
    if override is not None and override.rel != doc_id:
        raise ValueError(f"override for {override.rel!r} given to re-chunk {doc_id!r}")
    registry = collection.registry
    fingerprint = config.index_fingerprint()
    if registry.get_state("fingerprint") != fingerprint:
        raise CollectionError(f"collection {collection.name!r} was not indexed with this pipeline config")
    files = registry.files()
    rel = _file_of(collection, doc_id, files)
    record = files.get(rel)
    if record is None:
        raise CollectionError(f"not in collection {collection.name!r}: {rel}")
    whole = doc_id == rel  # the file itself, else one of its records
    root = _source_root(collection, rel, Path(record.root), stack)
    path = root / rel
    if _file_hash(path) != record.content_hash:
        raise CollectionError(f"{rel} changed on disk since it was indexed: re-ingest it instead")
    overrides = registry.document_overrides()
    before = overrides.get(doc_id)
    if override is None:
        overrides.pop(doc_id, None)
    else:
        overrides[doc_id] = override
    chunking = registry.chunking_for(config.chunking, overrides)
    docs = load_file(path, root, max_bytes=collection.settings.max_file_bytes)
    targets = docs if whole else [d for d in docs if d.doc_id == doc_id]
    if not targets:
        raise CollectionError(f"{rel} no longer holds record {doc_id!r}: re-ingest it instead")
    fresh = [
        _with_source(c, rel)
        for d in targets
        for c in chunk_document(d, *chunking.for_record(rel, d.doc_id), chunking.min_size)
    ]
    if not fresh:
        raise CollectionError(f"{doc_id} has no text to index after cleaning")

    old_gen = collection.generation()
    cur = collection.load()
    m = cur.manifest
    mine = [i for i, ch in enumerate(cur.chunks) if _source(ch) == rel and (whole or ch.doc_id == doc_id)]
    at = mine[0] if mine else len(cur.chunks)
    mine_set = set(mine)
    kept = [i for i in range(len(cur.chunks)) if i not in mine_set]
    head = [i for i in kept if i < at]
    tail = [i for i in kept if i > at]

    known = _known_vectors(collection, [old_gen - 1, old_gen], m.index_headings)
    texts = [index_text(c, m.index_headings) for c in fresh]
    missing = [t for t in dict.fromkeys(texts) if t not in known]
    if missing:
        dense = config.retrieval.dense
        embedder = make_embedder(
            m.embedder, collection.settings, max_tokens=dense.max_tokens, batch_size=dense.batch_size
        )
        for t, v in zip(missing, embedder.embed(missing), strict=True):
            known[t] = v
    new_vectors = np.stack([known[t] for t in texts]).astype(np.float32)
    old_vectors = np.asarray(cur.vectors, dtype=np.float32)
    return _Plan(
        rel=rel,
        record=record,
        fingerprint=fingerprint,
        chunking=chunking,
        n_docs=len(docs),
        before=before,
        generation=old_gen,
        manifest=m,
        old_ids=tuple(cur.chunks[i].chunk_id for i in mine),
        fresh=fresh,
        chunks=[cur.chunks[i] for i in head] + fresh + [cur.chunks[i] for i in tail],
        vectors=np.concatenate(
            [old_vectors[head].reshape(-1, m.dim), new_vectors, old_vectors[tail].reshape(-1, m.dim)]
        ),
        embedded=len(missing),
    )


def preview_rechunk(
    collection: Collection, doc_id: str, override: DocumentOverride | None, config: PipelineConfig
) -> DerivedCollection:
    """The collection as `rechunk_document` would leave it, in memory: what the remediation
    measures before it changes what serves. Reads the committed generation; writes nothing."""
    with ExitStack() as stack:
        plan = _plan(collection, doc_id, override, config, stack)
    return DerivedCollection(f"preview-{plan.generation}", collection, plan.chunks, plan.vectors)


def rechunk_document(
    collection: Collection, doc_id: str, override: DocumentOverride | None, config: PipelineConfig
) -> RechunkResult:
    """Re-chunk document `doc_id` with `override` (None: the config's own chunking for it), as one
    new generation. `doc_id` is a registered file's path (the whole file, every record of a
    multi-record one) or one record's doc id `path#record` (that record alone); the override is
    stored under it. `config` must be the pipeline the collection was indexed with."""
    with collection.exclusive(), ExitStack() as stack:
        plan = _plan(collection, doc_id, override, config, stack)
        n_file = sum(1 for ch in plan.chunks if _source(ch) == plan.rel)
        new_gen = plan.generation + 1

        def changes(txn: RegistryTxn) -> None:
            if override is None:
                txn.clear_document_override(doc_id)
            else:
                txn.set_document_override(override)
            txn.upsert_file(
                replace(
                    plan.record,
                    fingerprint=chunk_fingerprint(plan.chunking, plan.rel, plan.fingerprint),
                    n_docs=plan.n_docs,
                    n_chunks=n_file,
                    ingested_at=time.time(),
                )
            )

        collection.publish(new_gen, plan.chunks, plan.vectors, IndexSpec.of(plan.manifest), changes)
        return RechunkResult(
            rel=plan.rel,
            doc_id=doc_id,
            generation_before=plan.generation,
            generation_after=new_gen,
            override_before=plan.before,
            override_after=override,
            chunk_ids_before=plan.old_ids,
            chunk_ids_after=tuple(c.chunk_id for c in plan.fresh),
            embedded=plan.embedded,
        )
