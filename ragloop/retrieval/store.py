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


def write_generation(
    collection_dir: Path,
    generation: int,
    chunks: list[Chunk],
    vectors: np.ndarray,
    *,
    lexical: LexicalConfig,
    embedder: str,
    fingerprint: str,
    dense_backend: str,
    ann_threshold: int,
    index_headings: bool,
) -> Path:
    final = gen_dir(collection_dir, generation)
    tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    texts = [index_text(c, index_headings) for c in chunks]
    with (tmp / "chunks.jsonl").open("w", encoding="utf-8") as f:
        for c in chunks:
            f.write(json.dumps(c.to_json(), ensure_ascii=False) + "\n")
    np.save(tmp / "vectors.npy", np.ascontiguousarray(vectors, dtype=np.float32))
    bm25 = BM25Index(lexical)
    bm25.build(texts)
    (tmp / "bm25").mkdir()
    bm25.save(tmp / "bm25")
    dim = int(vectors.shape[1]) if vectors.ndim == 2 else 0
    index = make_vector_index(dense_backend, dim, expected_size=len(chunks), ann_threshold=ann_threshold)  # type: ignore[arg-type]
    if index.name != "exact":
        index.add(vectors)
        (tmp / "ann").mkdir()
        index.save(tmp / "ann")
    manifest = Manifest(
        generation=generation,
        created_at=time.time(),
        n_chunks=len(chunks),
        embedder=embedder,
        dim=dim,
        lexical=lexical.model_dump(mode="json"),
        fingerprint=fingerprint,
        dense_backend=index.name,
        index_headings=index_headings,
    )
    (tmp / "manifest.json").write_text(json.dumps(asdict(manifest), indent=2))
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
    bm25 = BM25Index.load(path / "bm25", LexicalConfig.model_validate(manifest.lexical))
    if (path / "ann").exists():
        vindex = load_vector_index(path / "ann")
    else:
        vindex = make_vector_index("exact", manifest.dim)
        if len(chunks):
            vindex.add(np.asarray(vectors))
    return IndexGeneration(path, manifest, chunks, vectors, bm25, vindex)


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
