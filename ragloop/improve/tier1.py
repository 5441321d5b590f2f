"""Tier 1: cheap quality signals for every answer, combined by a stored, versioned linear model.

Five features (the self-improving RAG design, section 4.1):

- `citation_coverage`: share of the answer's claim sentences that carry an [n] citation;
- `bm25_overlap`: BM25 of the question against the answer, the answer scored as one document of
  a small corpus made of the answer and its context (IDF from that corpus), normalised by the
  question's total IDF so a full match at average length is about 1;
- `retrieval_gap`: top-1 minus top-5 retrieval score (the last one when fewer came back);
- `length_ok`: 1 while the answer/context token ratio is at most 1.5, falling linearly to 0 at 3
  (an answer much longer than its context is a hallucination signal); the raw ratio is kept too;
- `support`: the support scorer's probability for the least-supported claim (the claim with the
  lowest term overlap with any context passage) against its best passage. The only feature that
  calls a model; without a scorer it is left out;
- `refused`: 1 for a refusal. The other features read an answer's text against its context, which
  says little about a refusal; this one lets a fitted model give refusals their own level (the
  prior leaves it out: weight 0).

`HeuristicModel` is `bias + Σ wᵢ·xᵢ`, clipped to [0, 1], with a version id that is a hash of its
weights; features that are missing (no claims, no support scorer) are dropped and the remaining
weights rescaled, so a partial feature vector still lands on the same scale. The shipped model is
a prior; `ragloop.improve.recalibration` refits it (`HeuristicModel.fit`, weighted) on labels from
tier 2, tier 3 and user feedback and keeps the versions in the audit log, the newest one serving.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ragloop.models.scoring.base import Scorer
from ragloop.text.sentences import split_sentences
from ragloop.text.tokenize import ENGLISH_STOPWORDS

FEATURES = ("citation_coverage", "bm25_overlap", "retrieval_gap", "length_ok", "support", "refused")
CITE = re.compile(r"\s*\[(\d+)\]")
NOTE_SEP = "\n\nNote: "
MIN_CLAIM_WORDS = 3
LENGTH_RATIO_FLAG = 1.5
BM25_K1 = 1.2
BM25_B = 0.75


_WORD = re.compile(r"[a-z0-9]+")


def tokens(text: str) -> list[str]:
    """Lower-case words and numbers without stopwords, singular-ish (a trailing plural "s" dropped).

    Deliberately cruder than the index analyzer (no stemmer, one regex): these are signals for a
    linear model, and this keeps the five features well under a millisecond on long contexts."""
    out = []
    for w in _WORD.findall(text.lower()):
        if len(w) < 2 or w in ENGLISH_STOPWORDS:
            continue
        out.append(w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w)
    return out


def claim_sentences(answer: str) -> list[tuple[str, bool]]:
    """(sentence without markers, whether it carries a citation) for each claim of the answer body."""
    body = answer.split(NOTE_SEP, 1)[0]
    out = []
    for s in split_sentences(body):
        clean = " ".join(CITE.sub("", s).split())
        if len(clean.split()) >= MIN_CLAIM_WORDS:
            out.append((clean, bool(CITE.search(s))))
    return out


@dataclass(frozen=True)
class Tier1Input:
    question: str
    answer: str
    contexts: Sequence[str]
    """The passages the answer was generated from (or the retrieved chunks)."""
    retrieval_scores: Sequence[float] = ()
    refused: bool = False


@dataclass
class Tier1Features:
    values: dict[str, float | None]
    length_ratio: float
    least_supported_claim: str | None = None
    claim_context: str | None = None
    n_claims: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def as_scores(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {k: (round(v, 4) if v is not None else None) for k, v in self.values.items()}
        out["length_ratio"] = round(self.length_ratio, 4)
        return out


def bm25_overlap(question: str, answer: str, contexts: Sequence[str]) -> float:
    return _bm25(set(tokens(question)), tokens(answer), [tokens(c) for c in contexts])


def _bm25(q: set[str], a: list[str], ctx_tokens: Sequence[list[str]]) -> float:
    if not q or not a:
        return 0.0
    n = 1 + len(ctx_tokens)
    avgdl = (len(a) + sum(len(d) for d in ctx_tokens)) / n or 1.0
    df: Counter[str] = Counter(set(a) & q)
    for d in ctx_tokens:
        df.update(q.intersection(d))
    tf = Counter(t for t in a if t in q)
    norm = 1 - BM25_B + BM25_B * len(a) / avgdl
    score = 0.0
    total_idf = 0.0
    for t in q:
        idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
        total_idf += idf
        if tf[t]:
            score += idf * tf[t] * (BM25_K1 + 1) / (tf[t] + BM25_K1 * norm)
    return min(1.0, score / total_idf) if total_idf > 0 else 0.0


def retrieval_gap(scores: Sequence[float]) -> float:
    if not scores:
        return 0.0
    ranked = sorted((float(s) for s in scores), reverse=True)
    return max(0.0, ranked[0] - ranked[min(4, len(ranked) - 1)])


def length_ok(ratio: float) -> float:
    if ratio <= LENGTH_RATIO_FLAG:
        return 1.0
    return max(0.0, 1.0 - (ratio - LENGTH_RATIO_FLAG) / LENGTH_RATIO_FLAG)


def cheap_features(item: Tier1Input) -> Tier1Features:
    """Every feature but the support check: pure Python over tokens (well under a millisecond)."""
    claims = claim_sentences(item.answer)
    coverage = sum(cited for _, cited in claims) / len(claims) if claims else 0.0
    ctx_tokens = [tokens(c) for c in item.contexts]
    answer_tokens = tokens(item.answer)
    answer_len = len(tokens(item.answer.split(NOTE_SEP, 1)[0])) if NOTE_SEP in item.answer else len(answer_tokens)
    context_len = sum(len(t) for t in ctx_tokens)
    ratio = answer_len / context_len if context_len else (float(answer_len) if answer_len else 0.0)
    least: str | None = None
    least_ctx: str | None = None
    if claims and item.contexts:
        ctx_sets = [set(t) for t in ctx_tokens]
        worst = 2.0
        for claim, _ in claims:
            terms = set(tokens(claim))
            if not terms:
                continue
            overlaps = [len(terms & cs) / len(terms) for cs in ctx_sets]
            best = int(np.argmax(overlaps))
            if overlaps[best] < worst:
                worst, least, least_ctx = overlaps[best], claim, item.contexts[best]
    values: dict[str, float | None] = {
        "citation_coverage": coverage,
        "bm25_overlap": _bm25(set(tokens(item.question)), answer_tokens, ctx_tokens),
        "retrieval_gap": retrieval_gap(item.retrieval_scores),
        "length_ok": length_ok(ratio),
        "support": None,
        "refused": float(item.refused),
    }
    return Tier1Features(values, ratio, least, least_ctx, len(claims), {"refused": float(item.refused)})


async def compute_features(item: Tier1Input, support_scorer: Scorer | None) -> Tier1Features:
    feats = cheap_features(item)
    if support_scorer is not None and feats.least_supported_claim and feats.claim_context:
        [j] = await support_scorer.support([feats.least_supported_claim], [feats.claim_context])
        feats.values["support"] = float(j.p)
        feats.extra["support_scorer"] = support_scorer.name
    return feats


# --------------------------------------------------------------------------- the linear model


@dataclass(frozen=True)
class HeuristicModel:
    weights: Mapping[str, float]
    bias: float
    name: str = "prior"
    trained_on: int = 0

    @property
    def version(self) -> str:
        blob = json.dumps({"w": dict(sorted(self.weights.items())), "b": self.bias}, sort_keys=True)
        return f"h-{self.name}-{hashlib.sha256(blob.encode()).hexdigest()[:8]}"

    def score(self, values: Mapping[str, float | None]) -> float:
        present = {k: w for k, w in self.weights.items() if values.get(k) is not None}
        total = sum(abs(w) for w in self.weights.values())
        have = sum(abs(w) for w in present.values())
        scale = total / have if have else 0.0
        raw = self.bias + scale * sum(w * float(values[k] or 0.0) for k, w in present.items())
        return float(min(1.0, max(0.0, raw)))

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "name": self.name,
            "weights": dict(self.weights),
            "bias": self.bias,
            "trained_on": self.trained_on,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HeuristicModel:
        weights = {str(k): float(v) for k, v in dict(data["weights"]).items()}
        unknown = set(weights) - set(FEATURES)
        if unknown:
            raise ValueError(f"heuristic model has unknown features {sorted(unknown)}; known: {FEATURES}")
        return cls(weights, float(data["bias"]), str(data.get("name", "fitted")), int(data.get("trained_on", 0)))

    @classmethod
    def fit(
        cls,
        rows: Sequence[Mapping[str, float | None]],
        targets: Sequence[float],
        name: str,
        weights: Sequence[float] | None = None,
    ) -> HeuristicModel:
        """Weighted least squares (ridge 1e-3) of `targets` (judge, human or feedback scores in [0, 1])
        on the features, each pair counting `weights[i]` (default 1); missing features are imputed
        with the column mean. A feature no row has keeps weight 0."""
        if len(rows) != len(targets) or len(rows) < len(FEATURES) + 1:
            raise ValueError(f"need at least {len(FEATURES) + 1} (features, score) pairs of equal length")
        w = np.ones(len(rows)) if weights is None else np.asarray(weights, dtype=np.float64)
        if w.shape != (len(rows),) or (w < 0).any() or w.sum() <= 0:
            raise ValueError("weights must be one non-negative number per row, not all zero")
        x = np.array([[np.nan if r.get(f) is None else float(r[f] or 0.0) for f in FEATURES] for r in rows])
        seen = ~np.isnan(x)
        counts = seen.sum(axis=0)
        means = np.where(counts > 0, np.where(seen, x, 0.0).sum(axis=0) / np.maximum(counts, 1), 0.0)
        x = np.where(seen, x, means)
        design = np.hstack([np.ones((len(x), 1)), x])
        y = np.asarray(targets, dtype=np.float64)
        ridge = 1e-3 * float(w.mean()) * np.eye(design.shape[1])
        ridge[0, 0] = 0.0
        wd = design * w[:, None]
        coef = np.linalg.solve(design.T @ wd + ridge, wd.T @ y)
        coef[1:][counts == 0] = 0.0
        return cls(
            {f: round(float(c), 6) for f, c in zip(FEATURES, coef[1:], strict=True)},
            round(float(coef[0]), 6),
            name,
            len(rows),
        )


PRIOR = HeuristicModel(
    weights={
        "citation_coverage": 0.30,
        "bm25_overlap": 0.15,
        "retrieval_gap": 0.05,
        "length_ok": 0.10,
        "support": 0.35,
    },
    bias=0.05,
    name="prior",
)
