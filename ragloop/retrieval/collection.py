"""A named collection: a registry + index generations, stored where `Settings` says.

Ingest is incremental: chunks (and their vectors) of unchanged files are carried over from the
current generation, new chunk texts are embedded through the content-hash cache, and BM25 is
rebuilt over the whole set (cheap next to embedding). Nothing a reader sees changes until the
new generation is stored whole and the registry's pointer moves to it (`_publish`); the storage's
writer lock keeps two ingests of the same collection from interleaving. Where generations live
(`RAGLOOP_HOME/collections/NAME`, or PostgreSQL with `RAGLOOP_COLLECTIONS_URL`) is the storage
backend's business: `ragloop.retrieval.storage`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ragloop.config.pipeline import PipelineConfig
from ragloop.config.settings import Settings
from ragloop.ingest.registry import FileRecord, Registry, RegistryTxn
from ragloop.ingest.scan import FileChange, IngestPlan, plan_ingest
from ragloop.ingest.types import Chunk
from ragloop.models import make_embedder
from ragloop.models.embedding import Embedder
from ragloop.models.scoring import passage_embed_texts
from ragloop.retrieval.storage import CollectionStorage, GenerationGone, open_storage, stored_collection_names
from ragloop.retrieval.store import IndexGeneration, IndexSpec, index_text

Progress = Callable[[str, int, int], None]
VARIANT_MARK = ".ix-"
"""In the name of an index variant (`ragloop.retrieval.variants`): a collection derived from another."""
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class CollectionError(Exception):
    """A collection that does not exist, has no index yet, or has an invalid name."""


@dataclass
class IngestSummary:
    collection: str
    generation: int
    new: int = 0
    changed: int = 0
    unchanged: int = 0
    deleted: int = 0
    ignored: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    chunks_total: int = 0
    chunks_embedded: int = 0
    embed_cache_hits: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "collection": self.collection,
            "generation": self.generation,
            "files": {
                "new": self.new,
                "changed": self.changed,
                "unchanged": self.unchanged,
                "deleted": self.deleted,
                "skipped": len(self.skipped),
                "ignored": self.ignored,
            },
            "skipped": [{"path": p, "reason": r} for p, r in self.skipped],
            "chunks_total": self.chunks_total,
            "chunks_embedded": self.chunks_embedded,
            "embed_cache_hits": self.embed_cache_hits,
            "seconds": round(self.seconds, 3),
        }


def _source(chunk: Chunk) -> str:
    return chunk.metadata.get("source", chunk.doc_id)


class Collection:
    def __init__(self, name: str, settings: Settings) -> None:
        if not NAME_RE.match(name):
            raise CollectionError(f"invalid collection name {name!r}: use letters, digits, '_', '.', '-'")
        self.name = name
        self.settings = settings
        self.dir = settings.collection_dir(name)  # local files (uploads, staging); generations: `storage`
        self._storage: CollectionStorage | None = None
        self._loaded: IndexGeneration | None = None

    @property
    def storage(self) -> CollectionStorage:
        if self._storage is None:
            self._storage = open_storage(self.name, self.settings)
        return self._storage

    @property
    def registry(self) -> Registry:
        return self.storage.registry

    def exists(self) -> bool:
        return self.storage.exists()

    def generation(self) -> int:
        if not self.exists():
            return 0
        return int(self.registry.get_state("generation", "0") or 0)

    def close(self) -> None:
        if self._storage is not None:
            self._storage.close()
            self._storage = None

    def exclusive(self) -> AbstractContextManager[None]:
        """The collection's writer lock (ingest, delete, re-chunk): one writer at a time."""
        return self.storage.writer_lock()

    def load(self) -> IndexGeneration:
        """The committed index; reloaded only when another ingest has moved the pointer."""
        for _ in range(3):  # a generation pruned between reading the pointer and opening it: look again
            gen = self.generation()
            if gen == 0:
                raise CollectionError(
                    f"collection {self.name!r} has no index: run `ragloop ingest PATH --collection {self.name}`"
                )
            if self._loaded is not None and self._loaded.manifest.generation == gen:
                return self._loaded
            try:
                self._loaded = self.storage.load(gen)
                return self._loaded
            except GenerationGone:
                continue
        raise CollectionError(f"collection {self.name!r} changed faster than it could be opened; try again")

    def publish(
        self,
        generation: int,
        chunks: list[Chunk],
        vectors: np.ndarray,
        spec: IndexSpec,
        registry_changes: Callable[[RegistryTxn], None],
    ) -> None:
        """Store `generation` whole, then apply `registry_changes` and point the registry at it in
        one transaction. Until that commit readers keep the previous generation; a failure before
        it removes what was staged (a killed writer's leftovers are removed by the next writer).
        Call under `exclusive()`."""
        storage = self.storage
        storage.discard(generation)  # an orphan of a killed run: the pointer never named it
        try:
            storage.stage(generation, chunks, vectors, spec)
            with self.registry.transaction() as txn:
                registry_changes(txn)
                txn.set_state("generation", str(generation))
        except BaseException:
            if self.generation() != generation:  # not committed: the previous generation serves on
                storage.discard(generation)
            raise
        storage.prune(generation)

    # ingest ------------------------------------------------------------------------------
    def ingest(
        self,
        paths: Sequence[Path],
        config: PipelineConfig,
        progress: Progress | None = None,
        *,
        root: str | None = None,
        sources: Mapping[str, bytes] | None = None,
        marker: str | None = None,
    ) -> IngestSummary:
        """Ingest `paths` (see `plan_ingest`) as one new generation. `root` registers every file
        under that name instead of the folder it was read from (uploads on a shared backend: the
        staging folder is no place to point at); `sources` (rel -> bytes) are kept by the storage
        with the registry rows of the files the ingest took (`CollectionStorage.write_sources`);
        `marker` is a registry state key set in the same transaction (a job's proof it committed)."""
        start = time.perf_counter()
        with self.exclusive():
            registry = self.registry
            fingerprint = config.index_fingerprint()
            full_rebuild = registry.get_state("fingerprint") not in (None, fingerprint)
            known = {} if full_rebuild else registry.files()
            scanned = 0

            def on_file(_rel: str) -> None:
                nonlocal scanned
                scanned += 1
                if progress:
                    progress("scan", scanned, 0)

            # a re-chunked document keeps its own size/overlap (registry overrides win over the config's)
            chunking = registry.chunking_for(config.chunking)
            plan = plan_ingest(paths, known, chunking, fingerprint, self.settings.max_file_bytes, on_file)
            if root is not None:
                plan.changes = [_rooted(c, root) for c in plan.changes]
            if full_rebuild:  # files ingested earlier but not named now keep their place
                plan = self._carry_unnamed(plan, registry.files())
            summary = self._summarise(plan)
            summary.collection = self.name
            old_gen = self.generation()
            touched = [c for c in plan.changes if c.touched]
            given = sources or {}
            taken = {c.rel: given[c.rel] for c in plan.changes if c.kind != "skipped" and c.rel in given}
            dropped = [c.rel for c in plan.changes if c.kind == "deleted"]
            if not plan.has_changes and not full_rebuild and old_gen:
                if touched or taken or marker:
                    with registry.transaction() as txn:
                        for c in touched:
                            assert c.record is not None
                            txn.upsert_file(c.record)
                        self.storage.write_sources(txn.conn, taken, dropped)
                        if marker:
                            txn.set_state(marker, "1")
                summary.generation = old_gen
                summary.chunks_total = self.load().manifest.n_chunks
                summary.seconds = time.perf_counter() - start
                return summary
            chunks, vectors, embedded, hits = self._assemble(plan, config, old_gen, full_rebuild, progress)
            new_gen = old_gen + 1
            if progress:
                progress("index", 0, 1)
            dense = config.retrieval.dense
            spec = IndexSpec(
                lexical=config.retrieval.lexical,
                embedder=dense.embedder,
                fingerprint=fingerprint,
                dense_backend=dense.backend,
                ann_threshold=dense.ann_threshold,
                index_headings=config.retrieval.index_headings,
            )

            def changes(txn: RegistryTxn) -> None:
                for c in plan.changes:
                    if c.kind == "deleted":
                        txn.delete_file(c.rel)
                    elif c.record is not None and (c.kind in ("new", "changed") or c.touched or full_rebuild):
                        txn.upsert_file(c.record)
                txn.set_state("fingerprint", fingerprint)
                self.storage.write_sources(txn.conn, taken, dropped)
                if marker:
                    txn.set_state(marker, "1")

            self.publish(new_gen, chunks, vectors, spec, changes)
            if progress:
                progress("index", 1, 1)
            summary.generation = new_gen
            summary.chunks_total = len(chunks)
            summary.chunks_embedded = embedded
            summary.embed_cache_hits = hits
            summary.seconds = time.perf_counter() - start
            return summary

    def _carry_unnamed(self, plan: IngestPlan, known: dict[str, FileRecord]) -> IngestPlan:
        """A changed index fingerprint rebuilds everything; files from other roots must be
        re-read too, or the rebuild would silently drop them."""
        named = {c.rel for c in plan.changes}
        roots = sorted({rec.root for rel, rec in known.items() if rel not in named})
        if not roots:
            return plan
        raise CollectionError(
            "the index settings changed; re-ingest every root of this collection together: " + " ".join(roots)
        )

    @staticmethod
    def _summarise(plan: IngestPlan) -> IngestSummary:
        s = IngestSummary(collection="", generation=0, ignored=plan.ignored)
        for c in plan.changes:
            if c.kind == "skipped":
                s.skipped.append((c.rel, c.error))
            else:
                setattr(s, c.kind, getattr(s, c.kind) + 1)
        return s

    def _assemble(
        self,
        plan: IngestPlan,
        config: PipelineConfig,
        old_gen: int,
        full_rebuild: bool,
        progress: Progress | None,
    ) -> tuple[list[Chunk], np.ndarray, int, int]:
        """Chunks of the new generation in file order, with their vectors."""
        # a file that turned unreadable is "skipped", not replaced: it keeps its previous chunks
        replaced = {c.rel for c in plan.changes if c.kind in ("new", "changed", "deleted")}
        fresh: dict[str, list[Chunk]] = {
            c.rel: [_with_source(ch, c.rel) for ch in c.chunks] for c in plan.changes if c.chunks
        }
        old_chunks: list[Chunk] = []
        old_vectors = np.zeros((0, 0), dtype=np.float32)
        if old_gen and not full_rebuild:
            cur = self.load()
            old_chunks, old_vectors = cur.chunks, np.asarray(cur.vectors)
        keep = [i for i, ch in enumerate(old_chunks) if _source(ch) not in replaced]
        new_chunks = [ch for rel in fresh for ch in fresh[rel]]
        dense = config.retrieval.dense
        embedder = make_embedder(
            dense.embedder, self.settings, max_tokens=dense.max_tokens, batch_size=dense.batch_size
        )
        texts = [index_text(ch, config.retrieval.index_headings) for ch in new_chunks]
        dim = embedder.dim
        new_vectors = embedder.embed_many(texts, _stage(progress, "embed"))
        chunks = [old_chunks[i] for i in keep] + new_chunks
        kept_vectors = old_vectors[keep] if keep else np.zeros((0, dim), dtype=np.float32)
        vectors = np.concatenate([kept_vectors, new_vectors]).astype(np.float32)
        hits, misses = getattr(embedder, "hits", 0), getattr(embedder, "misses", 0)
        if self.settings.precompute_passage_vectors:
            self._embed_passage_texts(embedder, new_chunks, progress)
        return chunks, vectors, misses, hits

    @staticmethod
    def _embed_passage_texts(embedder: Embedder, chunks: Sequence[Chunk], progress: Progress | None) -> None:
        """Fill the embedding cache with what the scorers will embed for these chunks (their
        sentences, strips and whole text), so grading, refining and reranking find it there."""
        texts = list(dict.fromkeys(t for ch in chunks for t in passage_embed_texts(ch.text)))
        embedder.embed_many(texts, _stage(progress, "sentences"))

    def delete_documents(self, rels: Sequence[str]) -> IngestSummary:
        """Remove source files (paths as registered, e.g. `guide/docker.md`) from the index, as
        one new generation. Unknown paths are an error, so a typo never looks like a success."""
        start = time.perf_counter()
        with self.exclusive():
            registry = self.registry
            known = registry.files()
            missing = sorted(set(rels) - set(known))
            if missing:
                raise CollectionError(f"not in collection {self.name!r}: {', '.join(missing)}")
            old_gen = self.generation()
            cur = self.load()
            gone = set(rels)
            keep = [i for i, ch in enumerate(cur.chunks) if _source(ch) not in gone]
            m = cur.manifest
            vectors = np.asarray(cur.vectors)[keep] if keep else np.zeros((0, m.dim), dtype=np.float32)
            new_gen = old_gen + 1

            def changes(txn: RegistryTxn) -> None:
                for rel in gone:
                    txn.delete_file(rel)
                self.storage.write_sources(txn.conn, {}, gone)

            self.publish(new_gen, [cur.chunks[i] for i in keep], vectors, IndexSpec.of(m), changes)
        return IngestSummary(
            collection=self.name,
            generation=new_gen,
            deleted=len(gone),
            chunks_total=len(keep),
            seconds=time.perf_counter() - start,
        )

    # queries about the collection ------------------------------------------------------------
    def stats(self) -> dict[str, object]:
        gen = self.generation()
        files = self.registry.files() if self.exists() else {}
        out: dict[str, object] = {"name": self.name, "generation": gen, "files": len(files)}
        if gen:
            m = self.load().manifest
            out.update(
                chunks=m.n_chunks,
                embedder=m.embedder,
                dense_backend=m.dense_backend,
                updated_at=m.created_at,
                bytes=self.storage.size_bytes(gen),
            )
        return out


def _stage(progress: Progress | None, stage: str) -> Callable[[int, int], None] | None:
    if progress is None:
        return None
    return lambda done, total: progress(stage, done, total)


def _rooted(change: FileChange, root: str) -> FileChange:
    record = None if change.record is None else replace(change.record, root=root)
    return replace(change, root=root, record=record)


def _with_source(chunk: Chunk, rel: str) -> Chunk:
    if chunk.metadata.get("source") == rel:
        return chunk
    return Chunk(
        chunk_id=chunk.chunk_id,
        doc_id=chunk.doc_id,
        ordinal=chunk.ordinal,
        text=chunk.text,
        heading_path=chunk.heading_path,
        title=chunk.title,
        metadata={**chunk.metadata, "source": rel},
    )


def list_collections(settings: Settings) -> list[str]:
    """The collections users made (index variants, `ragloop.retrieval.variants`, are derived data)."""
    return [n for n in stored_collection_names(settings) if VARIANT_MARK not in n]
