"""BM25 over chunks, analysed by the identifier-preserving `Tokenizer`.

bm25s does the index maths (eager per-(term, doc) scores in a CSC matrix); we keep only its
three arrays and score queries ourselves: that is a handful of vectorised adds, it lets us drop
unknown query terms before they reach bm25s (which raises on them in some paths), and it makes
the zero-document and all-empty-document corner cases ordinary instead of bm25s errors.

On disk: three .npy arrays (memory-mapped on load, so opening a big index is instant), the
vocabulary as JSON and a manifest with the config the index was built with. Loading with a
different config is an error: the analyzer and k1/b are baked into the stored scores.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragloop.config.pipeline import LexicalConfig
from ragloop.text.tokenize import Tokenizer

_FORMAT = 1
_MANIFEST = "bm25.json"
_VOCAB = "bm25_vocab.json"
_ARRAYS = ("data", "indices", "indptr")
_NONOCC = "nonoccurrence"


def _quiet_bm25s() -> None:
    """bm25s sets its logger to DEBUG and logs per query; keep it out of our logs."""
    logging.getLogger("bm25s").setLevel(logging.WARNING)


class BM25Index:
    def __init__(self, config: LexicalConfig) -> None:
        self.config = config
        self.tokenizer = Tokenizer(stemmer=config.stemmer, stopwords=config.stopwords)
        self._reset(0)

    def _reset(self, num_docs: int) -> None:
        self._num_docs = num_docs
        self._vocab: dict[str, int] = {}
        self._data = np.zeros(0, dtype=np.float32)
        self._indices = np.zeros(0, dtype=np.int32)
        self._indptr = np.zeros(1, dtype=np.int64)
        # BM25L / BM25+ give every document a per-term floor; bm25s stores it separately
        self._nonocc: np.ndarray | None = None

    def __len__(self) -> int:
        return self._num_docs

    def build(self, texts: Sequence[str]) -> None:
        corpus = self.tokenizer.tokenize_many(texts)
        self._reset(len(corpus))
        if not any(corpus):
            return  # no documents, or none with a single term: every query scores zero
        import bm25s

        _quiet_bm25s()
        c = self.config
        model = bm25s.BM25(k1=c.k1, b=c.b, method=c.method, dtype="float32", int_dtype="int32")
        model.index(corpus, create_empty_token=False, show_progress=False)
        self._vocab = {str(k): int(v) for k, v in model.vocab_dict.items()}
        self._data = np.asarray(model.scores["data"], dtype=np.float32)
        self._indices = np.asarray(model.scores["indices"], dtype=np.int32)
        self._indptr = np.asarray(model.scores["indptr"], dtype=np.int64)
        nonocc = getattr(model, "nonoccurrence_array", None)
        self._nonocc = None if nonocc is None else np.asarray(nonocc, dtype=np.float32)

    def _score(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """(scores, matched): `matched` marks documents containing at least one query term."""
        scores = np.zeros(self._num_docs, dtype=np.float32)
        matched = np.zeros(self._num_docs, dtype=bool)
        ids = [self._vocab[t] for t in self.tokenizer.tokenize(query) if t in self._vocab]
        for tid in ids:  # a repeated query term counts again, as in bm25s and Lucene
            start, end = int(self._indptr[tid]), int(self._indptr[tid + 1])
            docs = self._indices[start:end]
            # within one term's column each document appears once, so fancy `+=` is safe
            scores[docs] += self._data[start:end]
            matched[docs] = True
        if self._nonocc is not None and ids:
            scores += np.float32(self._nonocc[np.asarray(ids)].sum())
        return scores, matched

    def scores(self, query: str) -> np.ndarray:
        return self._score(query)[0]

    def top(self, query: str, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Best `n` documents that share a term with the query and score above zero.

        The "shares a term" condition only matters for BM25L/BM25+, whose per-term floor would
        otherwise give every document in the collection a positive score.
        """
        if n <= 0 or self._num_docs == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        scores, matched = self._score(query)
        cand = np.flatnonzero(matched & (scores > 0))
        if cand.size > n:
            # keep everything tied with the n-th best so the tie-break below stays exact
            kth = np.partition(scores[cand], cand.size - n)[cand.size - n]
            cand = cand[scores[cand] >= kth]
        order = np.lexsort((cand, -scores[cand]))[:n]
        best = cand[order].astype(np.int64)
        return best, scores[best]

    # -- persistence ---------------------------------------------------------------------------

    def save(self, directory: Path) -> None:
        """Each file is written beside its target and renamed over it, so saving an index that
        was loaded (memory-mapped) from the same directory never truncates a mapped file."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)

        def put(name: str, arr: np.ndarray) -> None:
            tmp = directory / f"tmp-{name}"
            np.save(tmp, np.ascontiguousarray(arr), allow_pickle=False)
            os.replace(tmp, directory / name)

        arrays: list[np.ndarray] = [self._data, self._indices, self._indptr]
        for name, arr in zip(_ARRAYS, arrays, strict=True):
            put(f"bm25_{name}.npy", arr)
        if self._nonocc is not None:
            put(f"bm25_{_NONOCC}.npy", self._nonocc)
        (directory / _VOCAB).write_text(json.dumps(self._vocab, ensure_ascii=False), encoding="utf-8")
        manifest = {
            "format": _FORMAT,
            "num_docs": self._num_docs,
            "config": self.config.model_dump(mode="json"),
            "nonoccurrence": self._nonocc is not None,
        }
        (directory / _MANIFEST).write_text(json.dumps(manifest, sort_keys=True), encoding="utf-8")

    @classmethod
    def load(cls, directory: Path, config: LexicalConfig) -> BM25Index:
        directory = Path(directory)
        try:
            manifest: dict[str, Any] = json.loads((directory / _MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"no readable BM25 index in {directory}: {exc}") from exc
        if manifest.get("format") != _FORMAT:
            raise ValueError(f"BM25 index in {directory} has format {manifest.get('format')}, need {_FORMAT}")
        wanted = config.model_dump(mode="json")
        if manifest["config"] != wanted:
            raise ValueError(
                f"BM25 index in {directory} was built with {manifest['config']}, "
                f"but the config asks for {wanted}; rebuild the index"
            )
        index = cls(config)
        index._num_docs = int(manifest["num_docs"])
        index._vocab = json.loads((directory / _VOCAB).read_text(encoding="utf-8"))
        index._data, index._indices, index._indptr = (
            np.load(directory / f"bm25_{name}.npy", mmap_mode="r", allow_pickle=False) for name in _ARRAYS
        )
        if manifest["nonoccurrence"]:
            index._nonocc = np.load(directory / f"bm25_{_NONOCC}.npy", allow_pickle=False)
        return index
