"""`Retriever.retrieve(query, k) -> list[Hit]`: lexical + dense, fusion, rerank, MMR.

Each stage records its own score and rank on the hit, so a trace (and the evaluation harness)
can tell which stage put a chunk where it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ragloop.config.pipeline import RetrievalConfig
from ragloop.models import CachedEmbedder, make_embedder
from ragloop.models.embedding import Embedder
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.expansion import ExpansionLookup
from ragloop.retrieval.fusion import normalize, rrf, weighted
from ragloop.retrieval.mmr import mmr
from ragloop.retrieval.rerank import Reranker, make_reranker
from ragloop.retrieval.store import IndexGeneration
from ragloop.retrieval.types import Hit, Mode


def _mmr_head(k: int) -> int:
    """How many fused candidates MMR chooses its k from."""
    return max(4 * k, 20)


@dataclass
class _Candidate:
    pos: int
    score: float
    scores: dict[str, float]
    ranks: dict[str, int]


class Retriever:
    def __init__(
        self,
        collection: Collection,
        config: RetrievalConfig | None = None,
        *,
        embedder: Embedder | None = None,
        expansion: ExpansionLookup | None = None,
    ) -> None:
        """`embedder` lets several retrievers over one collection share a loaded embedder (and
        whatever it memoises, e.g. query vectors in an evaluation sweep); it must be the
        model the index was built with. By default the index manifest's embedder is loaded.
        `expansion`: a semantic query-expansion lookup consulted after the registry's exact pins
        (when `use_expansion_cache` is on)."""
        self.collection = collection
        self.config = config or RetrievalConfig()
        self.expansion = expansion
        self._embedder: Embedder | None = embedder
        self._reranker: Reranker | None = None
        self._last_query: tuple[str, np.ndarray] | None = None

    @property
    def embedder(self) -> Embedder:
        """The index's own embedder (from its manifest), whatever the query config says."""
        if self._embedder is None:
            manifest = self.collection.load().manifest
            dense = self.config.dense
            self._embedder = make_embedder(
                manifest.embedder,
                self.collection.settings,
                max_tokens=dense.max_tokens,
                batch_size=dense.batch_size,
            )
        return self._embedder

    def _query_vector(self, query: str) -> np.ndarray:
        """Memoised for the call in flight (dense search and MMR both need it)."""
        if self._last_query is None or self._last_query[0] != query:
            emb = self.embedder
            inner = emb.inner if isinstance(emb, CachedEmbedder) else emb  # queries rarely repeat
            self._last_query = (query, inner.embed_one(query))
        return self._last_query[1]

    def retrieve(self, query: str, k: int | None = None, mode: Mode | None = None) -> list[Hit]:
        cfg = self.config
        k = k or cfg.k
        mode = mode or cfg.mode
        gen = self.collection.load()
        if not gen.chunks or not query.strip():
            return []
        pinned = self._pinned(gen, query) if cfg.use_expansion_cache else []
        # only the head of the fused list can reach the answer: the top k (after pinned ones),
        # the reranked head and the MMR head; the rest is never materialised
        depth = k + len(pinned)
        if cfg.rerank.enabled:
            depth = max(depth, cfg.rerank.top_n)
        if cfg.mmr.enabled:
            depth = max(depth, _mmr_head(k))
        pool = self._candidates(gen, query, mode, depth)
        if cfg.rerank.enabled and pool:
            pool = self._rerank(gen, query, pool)
        if cfg.mmr.enabled and pool:
            pool = self._mmr(gen, query, pool, k)
        pinned_pos = {c.pos for c in pinned}
        final = pinned + [c for c in pool if c.pos not in pinned_pos]
        hits = []
        for rank, c in enumerate(final[:k], start=1):
            ch = gen.chunks[c.pos]
            hits.append(
                Hit(
                    chunk_id=ch.chunk_id,
                    doc_id=ch.doc_id,
                    text=ch.text,
                    heading_path=ch.heading_path,
                    title=ch.title,
                    score=c.score,
                    rank=rank,
                    scores=c.scores,
                    ranks=c.ranks,
                )
            )
        return hits

    # stages -------------------------------------------------------------------------------
    def _candidates(self, gen: IndexGeneration, query: str, mode: Mode, depth: int) -> list[_Candidate]:
        """Fused candidates, best first, cut at `depth` (fusion itself sees every candidate)."""
        n = self.config.candidates
        results: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if mode in ("bm25", "hybrid"):
            results["bm25"] = gen.bm25.top(query, n)
        qvec = self._query_vector(query) if mode in ("dense", "hybrid") else None
        if qvec is not None and qvec.any():  # a query with no embeddable text has no dense neighbours
            ids, scores = gen.vectors_index.search(qvec, n)
            keep = ids >= 0
            results["dense"] = (ids[keep], scores[keep])
        # per stage: id -> (score, rank); a repeated id keeps its last entry
        stages: dict[str, dict[int, tuple[float, int]]] = {}
        for stage, (ids, scores) in results.items():
            pairs = zip(ids.tolist(), scores.tolist(), strict=True)
            stages[stage] = {int(i): (float(s), r) for r, (i, s) in enumerate(pairs, start=1)}
        fused: list[tuple[int, float]]
        if not results:
            return []
        if mode != "hybrid" or len(results) == 1:
            (stage,) = results
            fused = [(int(i), stages[stage][int(i)][0]) for i in results[stage][0][:depth].tolist()]
            mode = "bm25" if stage == "bm25" else "dense"  # one stage left: nothing was fused
        elif self.config.fusion.method == "rrf":
            fused = rrf({s: [int(i) for i in ids] for s, (ids, _) in results.items()}, k=self.config.fusion.rrf_k)
        else:
            w = self.config.fusion.dense_weight
            fused = weighted(results, {"dense": w, "bm25": 1.0 - w}, self.config.fusion.normalization)
        out = []
        for r, (i, s) in enumerate(fused[:depth], start=1):
            c = _Candidate(i, float(s), {}, {})
            for stage, found in stages.items():
                if i in found:
                    c.scores[stage], c.ranks[stage] = found[i]
            if mode == "hybrid":
                c.scores["fusion"] = float(s)
                c.ranks["fusion"] = r
            out.append(c)
        return out

    def _rerank(self, gen: IndexGeneration, query: str, pool: list[_Candidate]) -> list[_Candidate]:
        cfg = self.config.rerank
        if self._reranker is None:
            self._reranker = make_reranker(cfg.reranker, self.embedder)
        head, tail = pool[: cfg.top_n], pool[cfg.top_n :]
        rr = self._reranker.score(query, [gen.chunks[c.pos].text for c in head])
        base = normalize(np.array([c.score for c in head], dtype=np.float32), "minmax")
        combined = (1 - cfg.weight) * base + cfg.weight * normalize(rr, "minmax")
        for c, r, s in zip(head, rr.tolist(), combined.tolist(), strict=True):
            c.scores["rerank"] = float(r)
            c.score = float(s)
        head.sort(key=lambda c: (-c.score, c.pos))
        for r, c in enumerate(head, start=1):
            c.ranks["rerank"] = r
        floor = min((c.score for c in head), default=0.0)
        for j, c in enumerate(tail, start=1):  # the unreranked tail keeps its order, below the head
            c.score = floor - 1e-3 * j
        return head + tail

    def _mmr(self, gen: IndexGeneration, query: str, pool: list[_Candidate], k: int) -> list[_Candidate]:
        head = pool[: _mmr_head(k)]
        vecs = np.asarray(gen.vectors[[c.pos for c in head]], dtype=np.float32)
        rel = np.array([c.score for c in head], dtype=np.float32)
        order = mmr(self._query_vector(query), vecs, rel, min(k, len(head)), self.config.mmr.lambda_)
        picked = [head[i] for i in order]
        for r, c in enumerate(picked, start=1):
            c.ranks["mmr"] = r
        chosen = {id(c) for c in picked}
        return picked + [c for c in pool if id(c) not in chosen]

    def _pinned(self, gen: IndexGeneration, query: str) -> list[_Candidate]:
        out: list[_Candidate] = []
        ids = list(self.collection.registry.pinned(query))
        if self.expansion is not None:
            ids += self.expansion.lookup(query, self._query_vector(query))
        for cid in dict.fromkeys(ids):
            pos = gen.position.get(cid)
            if pos is not None:
                out.append(_Candidate(pos, 1.0, {"pinned": 1.0}, {"pinned": len(out) + 1}))
        return out
