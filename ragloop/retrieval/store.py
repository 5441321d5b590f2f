"""On-disk index generations: chunks, BM25, vectors, written whole and swapped atomically.

A generation is a directory `gen-000042/` written first as `gen-000042.tmp-<pid>/`, fsynced and
renamed; the registry then points at it in one transaction. Readers only ever open a finished
directory, and an interrupted ingest leaves at most an orphan `.tmp` folder that the next run
removes. Vectors are one float32 `.npy` loaded with mmap, so opening a collection costs
milliseconds even when the matrix is large.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ragloop.config.pipeline import LexicalConfig
from ragloop.ingest.types import Chunk
from ragloop.retrieval.dense import VectorIndex, load_vector_index, make_vector_index
from ragloop.retrieval.lexical import BM25Index

GEN_PREFIX = "gen-"


@dataclass(frozen=True)
class Manifest:
    generation: int
    created_at: float
    n_chunks: int
    embedder: str
    dim: int
    lexical: dict[str, object]
    fingerprint: str
    dense_backend: str
    index_headings: bool


def index_text(chunk: Chunk, headings: bool) -> str:
    """What BM25 and the embedder see: the heading path gives a chunk the context its own text
    leaves implicit (a paragraph under "os > os.walk" rarely repeats "os.walk")."""
    if not headings:
        return chunk.text
    path = list(chunk.heading_path)
    if chunk.title and (not path or path[0] != chunk.title):
        path.insert(0, chunk.title)
    return (" > ".join(path) + "\n" + chunk.text) if path else chunk.text


@dataclass
class IndexGeneration:
    path: Path
    manifest: Manifest
    chunks: list[Chunk]
    vectors: np.ndarray
    bm25: BM25Index
    vectors_index: VectorIndex

    def __post_init__(self) -> None:
        self.position = {c.chunk_id: i for i, c in enumerate(self.chunks)}


def gen_dir(collection_dir: Path, generation: int) -> Path:
    return collection_dir / f"{GEN_PREFIX}{generation:06d}"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class IndexSpec:
    """How a generation is indexed (everything but its rows): the same for every storage backend."""

    lexical: LexicalConfig
    embedder: str
    fingerprint: str
    dense_backend: str
    ann_threshold: int  # 0 when `dense_backend` is named explicitly (no auto choice)
    index_headings: bool

    @classmethod
    def of(cls, manifest: Manifest) -> IndexSpec:
        """The spec a generation was written with, to write its successor the same way."""
        return cls(
            lexical=LexicalConfig.model_validate(manifest.lexical),
            embedder=manifest.embedder,
            fingerprint=manifest.fingerprint,
            dense_backend=manifest.dense_backend,
            ann_threshold=0,
            index_headings=manifest.index_headings,
        )


def build_generation(
    directory: Path, generation: int, chunks: list[Chunk], vectors: np.ndarray, spec: IndexSpec
) -> Manifest:
    """Every file of a generation (chunks, vectors, BM25, ANN, manifest) into an empty `directory`;
    no fsync, no rename: the caller makes it durable and visible its own way."""
    texts = [index_text(c, spec.index_headings) for c in chunks]
    with (directory / "chunks.jsonl").open("w", encoding="utf-8") as f:
        for c in chunks:
            f.write(json.dumps(c.to_json(), ensure_ascii=False) + "\n")
    np.save(directory / "vectors.npy", np.ascontiguousarray(vectors, dtype=np.float32))
    bm25 = BM25Index(spec.lexical)
    bm25.build(texts)
    (directory / "bm25").mkdir()
    bm25.save(directory / "bm25")
    dim = int(vectors.shape[1]) if vectors.ndim == 2 else 0
    index = make_vector_index(
        spec.dense_backend,  # type: ignore[arg-type]
        dim,
        expected_size=len(chunks),
        ann_threshold=spec.ann_threshold,
    )
    if index.name != "exact":
        index.add(vectors)
        (directory / "ann").mkdir()
        index.save(directory / "ann")
    manifest = Manifest(
        generation=generation,
        created_at=time.time(),
        n_chunks=len(chunks),
        embedder=spec.embedder,
        dim=dim,
        lexical=spec.lexical.model_dump(mode="json"),
        fingerprint=spec.fingerprint,
        dense_backend=index.name,
        index_headings=spec.index_headings,
    )
    (directory / "manifest.json").write_text(json.dumps(asdict(manifest), indent=2))
    return manifest


def write_generation(
    collection_dir: Path, generation: int, chunks: list[Chunk], vectors: np.ndarray, spec: IndexSpec
) -> Path:
    final = gen_dir(collection_dir, generation)
    tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    build_generation(tmp, generation, chunks, vectors, spec)
    for p in tmp.rglob("*"):
        if p.is_file():
            with p.open("rb+") as fh:
                os.fsync(fh.fileno())
    _fsync_dir(tmp)
    os.replace(tmp, final)
    _fsync_dir(collection_dir)
    return final


def read_manifest(path: Path) -> Manifest:
    return Manifest(**json.loads((path / "manifest.json").read_text()))


def load_generation(path: Path) -> IndexGeneration:
    manifest = read_manifest(path)
    with (path / "chunks.jsonl").open(encoding="utf-8") as f:
        chunks = [Chunk.from_json(json.loads(line)) for line in f]
    vectors = np.load(path / "vectors.npy", mmap_mode="r")
    bm25, vindex = open_indexes(path, manifest, vectors)
    return IndexGeneration(path, manifest, chunks, vectors, bm25, vindex)


def open_indexes(directory: Path, manifest: Manifest, vectors: np.ndarray) -> tuple[BM25Index, VectorIndex]:
    """The BM25 index saved under `directory/bm25`, and the saved ANN index under `directory/ann`
    (or an exact index over `vectors` when the generation has none)."""
    bm25 = BM25Index.load(directory / "bm25", LexicalConfig.model_validate(manifest.lexical))
    if (directory / "ann").exists():
        return bm25, load_vector_index(directory / "ann")
    vindex = make_vector_index("exact", manifest.dim)
    if len(vectors):
        vindex.add(np.asarray(vectors))
    return bm25, vindex


def remove_stale(collection_dir: Path, current: int) -> None:
    """Drop generations older than the previous one, and orphan temp folders of interrupted runs.

    The previous generation stays so a reader that looked up the pointer just before a swap
    can still open what it was told to open.
    """
    if not collection_dir.exists():
        return
    keep = {gen_dir(collection_dir, current).name, gen_dir(collection_dir, current - 1).name}
    for p in collection_dir.iterdir():
        if p.name.startswith(GEN_PREFIX) and p.is_dir() and p.name not in keep:
            _drop_external_vectors(p / "ann")
            shutil.rmtree(p, ignore_errors=True)


def _drop_external_vectors(ann: Path) -> None:
    """A pgvector generation keeps its rows in a server table, not in the folder: drop it too."""
    try:
        backend = json.loads((ann / "vectors.json").read_text(encoding="utf-8")).get("backend")
    except (OSError, ValueError):
        return
    if backend == "pgvector":
        from ragloop.retrieval.pgvector_index import drop_saved

        drop_saved(ann)
