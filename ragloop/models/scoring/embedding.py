"""`embedding:` scorer: bi-encoder similarity at sentence level, Platt-calibrated.

relevance(query, passages): the passages are split into strips (sentences, code blocks, list
items); the features are the max cosine between the query and a strip (`max_cos`), the mean
of the two best strips (`top2_mean`) and the whole-passage cosine (`passage_cos`); `p` is a
Platt map of `max_cos` fitted on labelled pairs and shipped (`weights/embedding-minilm.json`).
support(claims, contexts): the same between each claim and the strips of its context.

Every call embeds all distinct texts of the batch (queries/claims, strips, whole passages)
in ONE embedder call, in a worker thread so the event loop stays free.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from ragloop.models.embedding import Embedder
from ragloop.models.scoring.base import Judgement, Scorer
from ragloop.models.scoring.calibration import LogisticModel, ScorerWeights, platt
from ragloop.text.sentences import split_sentences

FEATURES = ("max_cos", "top2_mean", "passage_cos")

# Used for an embedder with no fitted calibration: cosine 0.5 maps to p = 0.5, steep around it.
# A rough prior, not a calibration: fit one (`benchmarks/scorers.py --fit`) for real use.
UNCALIBRATED = platt("max_cos", 10.0, -5.0)


def passage_strips(text: str) -> list[str]:
    strips = split_sentences(text)
    return strips or ([text.strip()] if text.strip() else [])


class EmbeddingScorer(Scorer):
    def __init__(
        self,
        embedder: Embedder,
        weights: ScorerWeights | None = None,
        *,
        name: str = "",
        whole_passage: bool = True,
    ) -> None:
        """`whole_passage=False` skips the whole-passage embedding (the `passage_cos` feature):
        the costliest text of a batch when the passages are not in the embedding cache already."""
        self.embedder = embedder
        self.whole_passage = whole_passage
        self.weights = weights
        self.name = name or f"embedding:{embedder.name}"
        self._rel: LogisticModel = (weights.relevance if weights else None) or UNCALIBRATED
        self._sup: LogisticModel = (weights.support if weights else None) or UNCALIBRATED

    async def _embed(self, texts: list[str]) -> dict[str, np.ndarray]:
        unique = list(dict.fromkeys(texts))
        if not unique:
            return {}
        vectors = await asyncio.to_thread(self.embedder.embed, unique)
        return dict(zip(unique, vectors, strict=True))

    def _features(
        self, target: np.ndarray, strips: list[str], whole: str, vec: dict[str, np.ndarray]
    ) -> tuple[dict[str, float], str]:
        if not strips:
            feats = {"max_cos": 0.0, "top2_mean": 0.0}
            return ({**feats, "passage_cos": 0.0} if self.whole_passage else feats), ""
        sims = np.array([float(vec[s] @ target) for s in strips])
        order = np.argsort(-sims, kind="stable")
        top2 = sims[order[:2]]
        feats = {"max_cos": float(sims[order[0]]), "top2_mean": float(top2.mean())}
        if self.whole_passage:
            feats["passage_cos"] = float(vec[whole] @ target)
        return feats, strips[int(order[0])]

    def _wholes(self, texts: Sequence[str]) -> list[str]:
        return [t.strip() for t in texts] if self.whole_passage else [""] * len(texts)

    async def relevance(self, query: str, passages: Sequence[str]) -> list[Judgement]:
        if not passages:
            return []
        strips = [passage_strips(p) for p in passages]
        wholes = self._wholes(passages)
        vec = await self._embed([query, *(s for ss in strips for s in ss), *(w for w in wholes if w)])
        target = vec[query]
        rows = [self._features(target, ss, w, vec) for ss, w in zip(strips, wholes, strict=True)]
        ps = self._rel.predict_rows([f for f, _ in rows])
        return [Judgement(float(p), ev, f) for p, (f, ev) in zip(ps, rows, strict=True)]

    async def support(self, claims: Sequence[str], contexts: Sequence[str]) -> list[Judgement]:
        if len(claims) != len(contexts):
            raise ValueError(f"support() is pairwise: {len(claims)} claims vs {len(contexts)} contexts")
        if not claims:
            return []
        strips = [passage_strips(c) for c in contexts]
        wholes = self._wholes(contexts)
        vec = await self._embed([*claims, *(s for ss in strips for s in ss), *(w for w in wholes if w)])
        rows = [self._features(vec[c], ss, w, vec) for c, ss, w in zip(claims, strips, wholes, strict=True)]
        ps = self._sup.predict_rows([f for f, _ in rows])
        return [Judgement(float(p), ev, f) for p, (f, ev) in zip(ps, rows, strict=True)]
