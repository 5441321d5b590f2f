"""Index variants: the index a pipeline version needs when its chunking differs from the collection's.

A collection is indexed with one set of index-time knobs (its fingerprint: chunking, lexical
settings, embedder). A pipeline version with other chunking (a collection-wide chunking candidate)
cannot be served from that index, and serving it from there silently would make its experiment and
golden check measure the wrong thing. So it gets a *variant*: a collection of its own, named
`<collection>.ix-<fingerprint>`, built from the same registered sources with the version's chunking
and kept in step with the collection it derives from (the *primary*): every read checks the
primary's generation, and a variant behind it is rebuilt under its own writer lock before it
answers. The primary stays the one that ingest, delete and upload write to; a variant is derived
data and could be dropped and rebuilt at any time.

A rebuild re-chunks every registered file but embeds only chunk texts no current generation of the
variant or primary holds (plus the embedding cache), so it costs chunking time and the changed
chunks' vectors. Per-document overrides carry over from the primary when they are larger than the
variant's size (a document the loop found needs larger chunks keeps them), and the variant's own
overrides (a re-chunk applied while the variant served) win over both. On a large corpus a variant
is a second full index: storage doubles per live chunking, which is why only candidates and the
serving version create one, and a rebuild per primary generation would become per-file there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Set
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from sqlalchemy.exc import SQLAlchemyError

from ragloop.config.pipeline import ChunkingConfig, PipelineConfig
from ragloop.config.settings import Settings
from ragloop.ingest.chunking import chunk_document
from ragloop.ingest.loaders import load_file
from ragloop.ingest.registry import FileRecord, RegistryTxn
from ragloop.ingest.scan import chunk_fingerprint
from ragloop.ingest.types import Chunk
from ragloop.models import make_embedder
from ragloop.retrieval.collection import VARIANT_MARK, Collection, CollectionError, _with_source
from ragloop.retrieval.derived import DerivedCollection
from ragloop.retrieval.rechunk import _file_hash, _known_vectors, _source_root
from ragloop.retrieval.storage import stored_collection_names
from ragloop.retrieval.store import IndexGeneration, IndexSpec, index_text

PRIMARY_GENERATION = "primary_generation"
log = logging.getLogger("ragloop.retrieval")


def is_variant_name(name: str) -> bool:
    return VARIANT_MARK in name


def variant_name(primary: str, fingerprint: str) -> str:
    name = f"{primary}{VARIANT_MARK}{fingerprint[:10]}"
    if len(name) > 64:
        raise CollectionError(f"collection name {primary!r} is too long for an index variant (at most 50 characters)")
    return name


def index_for(collection: Collection, config: PipelineConfig) -> Collection:
    """The index that serves `config` over `collection`: the collection itself when it was indexed
    with `config`'s index knobs (or has no index yet), else its variant for them."""
    if isinstance(collection, IndexVariant):
        if collection.fingerprint == config.index_fingerprint():
            return collection
        collection = collection.primary
    if isinstance(collection, DerivedCollection) or not collection.exists():
        return collection
    indexed = collection.registry.get_state("fingerprint")
    if indexed in (None, config.index_fingerprint()):
        return collection
    return IndexVariant(collection, config)


@dataclass(frozen=True)
class VariantRows:
    chunks: list[Chunk]
    vectors: np.ndarray
    records: dict[str, FileRecord]
    chunking: ChunkingConfig


def _rows(
    primary: Collection,
    config: PipelineConfig,
    variant: Collection | None,
    stack: ExitStack,
    *,
    passages: bool,
    docs: Set[str] | None = None,
    document_overrides: bool = True,
) -> VariantRows:
    """Every registered file of `primary` chunked with `config` (only the documents `docs`, when
    given), and the vectors: reused where a current generation of `variant` or `primary` holds the
    same indexed text, embedded otherwise. `passages`: also cache the scorers' passage vectors of new
    chunks (for an index that will serve). `document_overrides=False`: every document at `config`'s
    size, none at its per-document re-chunk's."""
    registry = primary.registry
    files = registry.files()
    size = config.chunking.size
    overrides = {}
    if document_overrides:
        overrides = {k: o for k, o in registry.document_overrides().items() if o.size > size}
        if variant is not None and variant.exists():
            overrides.update(variant.registry.document_overrides())
    chunking = registry.chunking_for(config.chunking, overrides)
    headings = config.retrieval.index_headings
    chunks: list[Chunk] = []
    records: dict[str, FileRecord] = {}
    for rel, record in sorted(files.items()):
        root = _source_root(primary, rel, Path(record.root), stack)
        path = root / rel
        if not path.is_file() or _file_hash(path) != record.content_hash:
            raise CollectionError(f"{rel} changed or went missing since it was indexed: re-ingest {primary.name!r}")
        loaded = load_file(path, root, max_bytes=primary.settings.max_file_bytes)
        mine = [
            _with_source(c, rel)
            for d in loaded
            if docs is None or d.doc_id in docs
            for c in chunk_document(d, *chunking.for_record(rel, d.doc_id), chunking.min_size)
        ]
        chunks += mine
        records[rel] = replace(record, n_docs=len(loaded), n_chunks=len(mine))
    dense = config.retrieval.dense
    known: dict[str, np.ndarray] = {}
    for source in (primary, variant):
        if source is None or not source.exists() or source.generation() == 0:
            continue
        m = Collection.load(source).manifest  # not a variant's own load: that would sync (and wait on its lock)
        if m.embedder == dense.embedder and m.index_headings == headings:
            known.update(_known_vectors(source, [source.generation()], headings))
    texts = [index_text(c, headings) for c in chunks]
    missing = [t for t in dict.fromkeys(texts) if t not in known]
    embedder = make_embedder(dense.embedder, primary.settings, max_tokens=dense.max_tokens, batch_size=dense.batch_size)
    if missing:
        for t, v in zip(missing, embedder.embed_many(missing), strict=True):
            known[t] = np.asarray(v)
        if passages and primary.settings.precompute_passage_vectors:
            fresh = set(missing)
            Collection._embed_passage_texts(
                embedder, [c for c, t in zip(chunks, texts, strict=True) if t in fresh], None
            )
    dim = embedder.dim
    vectors = np.stack([known[t] for t in texts]).astype(np.float32) if texts else np.zeros((0, dim), np.float32)
    return VariantRows(chunks, vectors, records, chunking)


def preview_variant(
    primary: Collection,
    config: PipelineConfig,
    *,
    focus: Set[str] | None = None,
    rest: Collection | None = None,
    document_overrides: bool = True,
) -> DerivedCollection:
    """`primary`'s sources chunked as `config` says, in memory: what a chunking candidate is measured
    on before it is registered. Only chunking may differ (the preview reads with the primary's
    lexical settings and embedder). With `focus` (document ids), only those documents are re-chunked
    and embedded; every other one keeps its chunks and vectors in `rest` (default `primary`; the
    index that serves now), so a fit pays for the documents its questions' hits come from, not the
    whole collection. `document_overrides=False`: the focus without its per-document re-chunks."""
    m = primary.load().manifest
    if m.embedder != config.retrieval.dense.embedder or m.index_headings != config.retrieval.index_headings:
        raise ValueError("a variant preview changes chunking only; the embedder and headings must match")
    with ExitStack() as stack:
        rows = _rows(primary, config, None, stack, passages=False, docs=focus, document_overrides=document_overrides)
    chunks, vectors = rows.chunks, rows.vectors
    if focus is not None:
        kept = Collection.load(rest or primary)  # not a variant's own load: the serving index is read as it is
        idx = [i for i, c in enumerate(kept.chunks) if c.doc_id not in focus]
        chunks = chunks + [kept.chunks[i] for i in idx]
        vectors = np.concatenate([vectors, kept.vectors[idx]]) if idx else vectors
    return DerivedCollection(f"preview{VARIANT_MARK}{config.index_fingerprint()[:10]}", primary, chunks, vectors)


class IndexVariant(Collection):
    """The collection `primary` indexed with `config`'s index knobs; rebuilt on read when behind."""

    def __init__(self, primary: Collection, config: PipelineConfig) -> None:
        self.fingerprint = config.index_fingerprint()
        super().__init__(variant_name(primary.name, self.fingerprint), primary.settings)
        self.primary = primary
        self.config = config
        self._failed_at: str | None = None
        """The primary generation a catch-up failed for: not retried on every read until it moves."""

    def behind(self) -> bool:
        try:
            if self.generation() > 0:  # 0 when it does not exist
                return self.registry.get_state(PRIMARY_GENERATION) != str(self.primary.generation())
        except SQLAlchemyError:
            pass  # dropped under a handle that took it to exist (`drop_variant`)
        # missing (never built, or dropped): whatever this object holds of it is gone, so the rebuild
        # opens the storage afresh and its generations, numbered anew, are not mistaken for cached ones
        Collection.close(self)
        self._loaded = None
        return True

    def load(self) -> IndexGeneration:
        """The variant's committed generation, brought level with the primary first. When it cannot
        catch up (a source changed on disk and was not re-ingested) but has an index, that index
        serves on, logged, rather than failing every question; a variant with none raises."""
        if self.behind():
            target = str(self.primary.generation())
            if self._failed_at != target:
                try:
                    self.sync()
                    self._failed_at = None
                except CollectionError as exc:
                    if self.generation() == 0:
                        raise
                    self._failed_at = target
                    log.warning(
                        "index variant %s serves generation %d: cannot follow %s (%s)",
                        self.name,
                        self.generation(),
                        self.primary.name,
                        exc,
                    )
        return super().load()

    def sync(self) -> int:
        """Bring the variant level with the primary's committed generation; returns the variant's
        generation. A no-op when another process did it first (checked again under the lock); a
        chunk list equal to the current one moves only the marker, not the generation."""
        with self.exclusive(), ExitStack() as stack:
            target = str(self.primary.generation())
            if target == "0":
                raise CollectionError(f"collection {self.primary.name!r} has no index yet")
            if self.generation() and self.registry.get_state(PRIMARY_GENERATION) == target:
                return self.generation()
            rows = _rows(self.primary, self.config, self, stack, passages=True)
            old_gen = self.generation()
            current = super().load().chunks if old_gen else None
            if current is not None and [c.chunk_id for c in current] == [c.chunk_id for c in rows.chunks]:
                with self.registry.transaction() as txn:
                    txn.set_state(PRIMARY_GENERATION, target)
                return old_gen
            known = self.registry.files() if self.exists() else {}
            dense = self.config.retrieval.dense
            spec = IndexSpec(
                lexical=self.config.retrieval.lexical,
                embedder=dense.embedder,
                fingerprint=self.fingerprint,
                dense_backend=dense.backend,
                ann_threshold=dense.ann_threshold,
                index_headings=self.config.retrieval.index_headings,
            )

            def changes(txn: RegistryTxn) -> None:
                for rel in set(known) - set(rows.records):
                    txn.delete_file(rel)
                for rel, rec in rows.records.items():
                    fp = chunk_fingerprint(rows.chunking, rel, self.fingerprint)
                    txn.upsert_file(replace(rec, fingerprint=fp, ingested_at=time.time()))
                txn.set_state("fingerprint", self.fingerprint)
                txn.set_state("primary", self.primary.name)
                txn.set_state(PRIMARY_GENERATION, target)

            self.publish(old_gen + 1, rows.chunks, rows.vectors, spec, changes)
            return old_gen + 1

    def close(self) -> None:
        super().close()
        self.primary.close()


def drop_variant(settings: Settings, name: str) -> None:
    """Delete index variant `name` (derived data: rebuilt on demand if a version needs it again)."""
    if not is_variant_name(name):
        raise CollectionError(f"{name!r} is not an index variant: only variants are dropped here")
    coll = Collection(name, settings)
    try:
        coll.storage.drop()
    finally:
        coll.close()


def prune_variants(settings: Settings, collection: str, keep: Iterable[PipelineConfig]) -> list[str]:
    """Drop `collection`'s index variants that none of `keep` (the versions that serve or may soon)
    is served from; returns their names. Each is a second index of the whole corpus."""
    prefix = f"{collection}{VARIANT_MARK}"
    wanted = {variant_name(collection, c.index_fingerprint()) for c in keep}
    dropped = sorted(n for n in stored_collection_names(settings) if n.startswith(prefix) and n not in wanted)
    for name in dropped:
        drop_variant(settings, name)
    return dropped
