"""`reader:` scorer: which strip of the retrieved chunks CONTAINS the answer, read offline.

The sentence most similar to a question is often the one that restates it ("Such problems are
called NP-intermediate problems."), while the answer is in the next sentence, or in the one that
shares the question's rare terms. The reader scores every strip (`split_strips`) of every chunk
of a batch with a logistic model over features of the strip, of its neighbours and of the
batch, fitted on SQuAD 2.0 (an answer-bearing strip vs the other strips of its paragraph and of
the two most similar other paragraphs, as retrieval would bring them):

- similarity: `cos` (MiniLM cosine to the question), `cos_prev` / `cos_next` (its neighbours
  in the chunk; 0 at the chunk's ends), `cos_gap_chunk` / `cos_gap_batch` (minus the best cosine
  of the chunk / the batch), `rank_chunk` / `rank_batch` (1 / (1 + rank of the cosine)),
  `chunk_cos` (the chunk's best cosine: how relevant the chunk is);
- lexical: `cov` (share of the question's content terms in the strip), `cov_prev` / `cov_next`
  and `cov_win` (in the +-1 window), `idf_cov` / `idf_win` (the same IDF-weighted, IDF over the
  strips of the batch: rare shared terms count most), `idf_gap_batch` (minus the batch's best);
- batch bests: `best_cos` / `best_idf` (the strip has the batch's best cosine / IDF coverage),
  `after_best_cos` (the strip follows the batch's best-cosine strip in its chunk);
- reading: `novelty` (share of the strip's content terms the question lacks: a restatement has
  none), `new_entities` (log 1 + names and numbers the question lacks), `kind_match` /
  `kind_missing` (the question asks for a year / number / name / place, by its wh-word, and the
  strip has / lacks a new one), `anaphor` (the strip opens with he / it / this / such ...:
  it continues the previous one) and `anaphor_cos_prev` / `anaphor_idf_prev` (that, times the
  previous strip's cosine / IDF coverage);
- shape: `length` (log 1 + content terms), `position` (0 first .. 1 last in the chunk), `first`.

All of these are in each `Judgement.features`; the shipped model reads the subset named in its
weights file: leaving out the neighbour (`cos_prev`/`cos_next`) and anaphora features cost
nothing in cross-validation (the batch bests carry the "answer follows the restatement" signal),
so `benchmarks/reader.py --fit` drops them (its ablation table has the numbers).

`score_strips(query, chunks)` returns one `Judgement` per strip of each chunk, with
`p = P(the strip contains the answer)`; everything (query + all strips, deduplicated) is embedded
in ONE embedder call. `relevance(query, passages)` is `score_strips` with each passage's best
strip (so the reader also works as a plain relevance scorer). `support` is not what the reader
is for: a Platt map of the claim's best strip cosine, like `embedding:minilm`.

Using it in refine: call `score_strips(question, [chunk texts])` (its strips come back in the
order `split_strips` gives them) and keep strips with `p >= weights.thresholds["refine"]`: p is
P(answer-bearing), about one strip in twenty, so the pipeline's 0.35 (set for relevance-style
scorers) drops answers. `relevance` on single strips (how refine calls scorers today) also works,
without the chunk context (a little worse: `benchmarks/results/reader.md`).

Weights: `weights/reader-default.json` (fitted by `benchmarks/reader.py --fit` on articles 3-11
of the SQuAD 2.0 dev split; articles 0-2 are held out for the report), loaded by file stem, id
or path with `ReaderScorer.from_weights`.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ragloop.config.settings import Settings
from ragloop.models.embedding import Embedder
from ragloop.models.scoring.base import Judgement, Scorer
from ragloop.models.scoring.calibration import LogisticModel, ScorerWeights, find_weights, platt, shipped_weights
from ragloop.text.analysis import content_terms, entities, numbers
from ragloop.text.sentences import split_strips

MINILM = "onnx:all-minilm-l6-v2"
SHIPPED = "reader-default"

FEATURES = (
    "cos",
    "cos_prev",
    "cos_next",
    "cos_gap_chunk",
    "cos_gap_batch",
    "rank_chunk",
    "rank_batch",
    "chunk_cos",
    "cov",
    "cov_prev",
    "cov_next",
    "cov_win",
    "idf_cov",
    "idf_win",
    "idf_gap_batch",
    "best_cos",
    "best_idf",
    "after_best_cos",
    "novelty",
    "new_entities",
    "kind_match",
    "kind_missing",
    "anaphor",
    "anaphor_cos_prev",
    "anaphor_idf_prev",
    "length",
    "position",
    "first",
)

# Hand-set fallback (no shipped weights): cosine and rare-term coverage, the restatement penalty.
_FALLBACK_RELEVANCE = LogisticModel(
    ("cos", "idf_cov", "cos_prev", "novelty", "kind_match", "kind_missing"),
    (4.0, 3.0, 1.5, 1.0, 0.5, -0.5),
    -5.0,
    (0.0,) * 6,
    (1.0,) * 6,
)
_FALLBACK_SUPPORT = platt("max_cos", 10.0, -5.0)


# --- what the question asks for ----------------------------------------------------------------------

_YEAR = re.compile(r"\b(1\d{3}|20\d{2})s?\b")
_CENTURY = re.compile(r"\b(\d{1,2}(st|nd|rd|th)|first|second|third|\w+teenth|twentieth|twenty-first) century\b")
_NUMBER_WORDS = re.compile(
    r"\b(one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|dozen|twenty|thirty|forty|fifty|"
    r"hundred|thousand|million|billion|trillion|half|quarter)\b",
    re.IGNORECASE,
)
_KIND_PATTERNS = (
    ("year", re.compile(r"\b(what|which|in what|in which) (year|century|decade|date|time period)\b|\bwhen\b")),
    (
        "number",
        re.compile(
            r"\bhow (many|much|long|old|far|big|large|high|tall|wide|often|fast)\b|"
            r"\bwhat (percentage|percent|number|amount|proportion|fraction|share|size|population|age)\b"
        ),
    ),
    (
        "name",
        re.compile(r"^\s*(who|whom|whose)\b|\bwho (was|is|were|are|did|does)\b|\b(what|which) (person|man|woman)\b"),
    ),
    (
        "place",
        re.compile(
            r"^\s*where\b|\bwhere (was|is|were|are|did|does|do)\b|"
            r"\b(what|which) (country|city|town|region|state|province|place|continent|island|river|area|location)\b"
        ),
    ),
)


def expected_kind(question: str) -> str | None:
    """The kind of answer the question's wh-word asks for: year, number, name, place (or None)."""
    q = question.lower()
    for kind, pattern in _KIND_PATTERNS:
        if pattern.search(q):
            return kind
    return None


def _new_items(strip: str, question_low: str, q_numbers: set[str]) -> tuple[int, int, int]:
    """(new years, new numbers, new names) of the strip: ones the question does not mention."""
    years = {m.group(1) for m in _YEAR.finditer(strip) if m.group(1) not in q_numbers}
    centuries = {c for m in _CENTURY.finditer(strip) if (c := m.group(0).lower()) not in question_low}
    words = {w for m in _NUMBER_WORDS.finditer(strip) if (w := m.group(0).lower()) not in question_low}
    nums = (numbers(strip) - q_numbers) | words
    names = {e for e in entities(strip) if e.lower() not in question_low}
    return len(years) + len(centuries), len(nums), len(names)


def _kind_present(kind: str, years: int, nums: int, names: int) -> bool:
    if kind == "year":
        return years > 0
    if kind == "number":
        return nums > 0
    return names > 0  # name, place: a capitalised name the question lacks


# --- features -----------------------------------------------------------------------------------------


# A strip that opens by pointing back ("He called it packet switching", "It stopped ...") reads
# its subject from the previous strip: the answer often follows the sentence that names it.
_ANAPHOR = re.compile(
    r"^[\"'“(]*(he|she|it|they|this|these|that|those|his|her|its|their|such|there|the latter|the former)\b",
    re.IGNORECASE,
)


def _ranks(values: np.ndarray) -> np.ndarray:
    """0 for the best; ties share the better rank (a chunk retrieved twice scores the same twice)."""
    return np.asarray([int(np.sum(values > v)) for v in values], dtype=np.float64)


def _share(wanted: set[str], have: set[str]) -> float:
    return len(wanted & have) / len(wanted) if wanted else 0.0


def batch_features(
    query: str, chunks: Sequence[Sequence[str]], vectors: Mapping[str, np.ndarray]
) -> list[list[dict[str, float]]]:
    """Features of every strip of every chunk (`chunks[i]` = the strips of chunk i, in order);
    `vectors` maps the query and every strip to its L2-normalised embedding."""
    flat = [s for strips in chunks for s in strips]
    if not flat:
        return [[] for _ in chunks]
    q_vec = np.asarray(vectors[query], dtype=np.float64)
    cos_flat = np.asarray([float(np.asarray(vectors[s], dtype=np.float64) @ q_vec) for s in flat])
    batch_max = float(cos_flat.max())
    batch_rank = _ranks(cos_flat)

    q_terms = content_terms(query)
    terms_flat = [content_terms(s) for s in flat]
    df: Counter[str] = Counter(t for ts in terms_flat for t in ts)
    n = len(flat)
    idf = {t: math.log((n + 1) / (df.get(t, 0) + 0.5)) for t in q_terms}
    idf_total = sum(idf.values())

    def idf_share(have: set[str]) -> float:
        return sum(idf[t] for t in q_terms & have) / idf_total if idf_total > 0 else 0.0

    q_low = query.lower()
    q_numbers = numbers(query)
    kind = expected_kind(query)

    out: list[list[dict[str, float]]] = []
    rows_flat: list[dict[str, float]] = []
    prev_flat: list[int] = []  # flat index of each strip's predecessor in its chunk (-1: none)
    offset = 0
    for strips in chunks:
        k = len(strips)
        cos = cos_flat[offset : offset + k]
        terms = terms_flat[offset : offset + k]
        rows: list[dict[str, float]] = []
        if k:
            chunk_max = float(cos.max())
            chunk_rank = _ranks(cos)
        for i, strip in enumerate(strips):
            prev_terms = terms[i - 1] if i > 0 else set()
            next_terms = terms[i + 1] if i + 1 < k else set()
            window = terms[i] | prev_terms | next_terms
            years, nums, names = _new_items(strip, q_low, q_numbers)
            has_kind = bool(kind) and _kind_present(kind or "", years, nums, names)
            novel = terms[i] - q_terms
            row = {
                "cos": float(cos[i]),
                "cos_prev": float(cos[i - 1]) if i > 0 else 0.0,
                "cos_next": float(cos[i + 1]) if i + 1 < k else 0.0,
                "cos_gap_chunk": float(cos[i]) - chunk_max,
                "cos_gap_batch": float(cos[i]) - batch_max,
                "rank_chunk": 1.0 / (1.0 + float(chunk_rank[i])),
                "rank_batch": 1.0 / (1.0 + float(batch_rank[offset + i])),
                "chunk_cos": chunk_max,
                "cov": _share(q_terms, terms[i]),
                "cov_prev": _share(q_terms, prev_terms),
                "cov_next": _share(q_terms, next_terms),
                "cov_win": _share(q_terms, window),
                "idf_cov": idf_share(terms[i]),
                "idf_win": idf_share(window),
                "novelty": len(novel) / len(terms[i]) if terms[i] else 0.0,
                "new_entities": math.log1p(years + nums + names),
                "kind_match": float(has_kind),
                "kind_missing": float(bool(kind) and not has_kind),
                "length": math.log1p(len(terms[i])),
                "position": i / (k - 1) if k > 1 else 0.0,
                "first": float(i == 0),
            }
            rows.append(row)
            rows_flat.append(row)
            prev_flat.append(offset + i - 1 if i > 0 else -1)
        out.append(rows)
        offset += k
    best_idf = max(r["idf_cov"] for r in rows_flat)
    for j, r in enumerate(rows_flat):
        prev = prev_flat[j]
        anaphor = float(bool(_ANAPHOR.match(flat[j])))
        r["idf_gap_batch"] = r["idf_cov"] - best_idf
        r["best_cos"] = float(cos_flat[j] == batch_max)
        r["best_idf"] = float(best_idf > 0 and r["idf_cov"] == best_idf)
        r["after_best_cos"] = float(prev >= 0 and cos_flat[prev] == batch_max)
        r["anaphor"] = anaphor
        r["anaphor_cos_prev"] = anaphor * r["cos_prev"]
        r["anaphor_idf_prev"] = anaphor * (rows_flat[prev]["idf_cov"] if prev >= 0 else 0.0)
    return out


def chunk_strips(text: str) -> list[str]:
    """The strips of a chunk, as `split_strips` cuts them (the texts, in order)."""
    return [s.text for s in split_strips(text)]


# --- the scorer -----------------------------------------------------------------------------------------


class ReaderScorer(Scorer):
    """P(this strip contains the answer), from a logistic model over strip, neighbour and batch
    features (see the module docstring). Batch-first: one embedder call per call."""

    def __init__(self, embedder: Embedder, weights: ScorerWeights | None = None, *, name: str = "") -> None:
        if weights is None:
            weights = shipped_weights(SHIPPED) or ScorerWeights(
                scorer="reader", relevance=_FALLBACK_RELEVANCE, support=_FALLBACK_SUPPORT
            )
        self.embedder = embedder
        self.weights = weights
        self.name = name or (weights.scorer or "reader")
        self._rel = weights.relevance or _FALLBACK_RELEVANCE
        self._sup = weights.support or _FALLBACK_SUPPORT

    @classmethod
    def from_weights(
        cls, ref: str | Path = SHIPPED, settings: Settings | None = None, *, embedder: Embedder | None = None
    ) -> ReaderScorer:
        """Weights by file stem (`reader-default`), id, or `.json` path (shipped, then
        `RAGLOOP_HOME/scorers/`), with the content-hash-cached MiniLM embedder (or `embedder`:
        the weights were fitted on MiniLM cosines, so another embedder is for tests only)."""
        from ragloop.models import make_embedder
        from ragloop.models.errors import UnknownModelError

        settings = settings or Settings.from_env()
        weights = find_weights(str(ref), [settings.home / "scorers"])
        if weights is None:
            raise UnknownModelError(f"no reader scorer weights {str(ref)!r} (a file stem, an id or a .json path)")
        stem = Path(str(ref)).stem
        name = "reader:default" if stem == SHIPPED else f"reader:{stem}"
        return cls(embedder or make_embedder(MINILM, settings), weights, name=name)

    async def _embed(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        unique = list(dict.fromkeys(texts))
        if not unique:
            return {}
        vectors = await asyncio.to_thread(self.embedder.embed, unique)
        return dict(zip(unique, vectors, strict=True))

    def _judge(self, query: str, strips: list[list[str]], vec: Mapping[str, np.ndarray]) -> list[list[Judgement]]:
        feats = batch_features(query, strips, vec)
        flat = [f for rows in feats for f in rows]
        ps = self._rel.predict_rows(flat)
        out: list[list[Judgement]] = []
        i = 0
        for ss, rows in zip(strips, feats, strict=True):
            out.append([Judgement(float(ps[i + j]), s, f) for j, (s, f) in enumerate(zip(ss, rows, strict=True))])
            i += len(ss)
        return out

    async def score_strips(self, query: str, chunks: Sequence[str]) -> list[list[Judgement]]:
        """One judgement per strip of `split_strips(chunk)`, for each chunk, in order."""
        strips = [chunk_strips(c) for c in chunks]
        if not any(strips):
            return [[] for _ in strips]
        vec = await self._embed([query, *(s for ss in strips for s in ss)])
        return self._judge(query, strips, vec)

    async def relevance(self, query: str, passages: Sequence[str]) -> list[Judgement]:
        """p = the passage's best strip p (evidence: that strip); 0 for an empty passage."""
        out: list[Judgement] = []
        for js in await self.score_strips(query, passages):
            best = max(js, key=lambda j: j.p, default=None)
            out.append(best if best is not None else Judgement(0.0, ""))
        return out

    async def support(self, claims: Sequence[str], contexts: Sequence[str]) -> list[Judgement]:
        """Not the reader's purpose: a Platt map of the claim's best strip cosine in its context."""
        if len(claims) != len(contexts):
            raise ValueError(f"support() is pairwise: {len(claims)} claims vs {len(contexts)} contexts")
        if not claims:
            return []
        strips = [chunk_strips(c) or ([c.strip()] if c.strip() else []) for c in contexts]
        vec = await self._embed([*claims, *(s for ss in strips for s in ss)])
        out: list[Judgement] = []
        for claim, ss in zip(claims, strips, strict=True):
            if not ss:
                out.append(Judgement(float(self._sup.predict({"max_cos": 0.0})), "", {"max_cos": 0.0}))
                continue
            sims = [float(vec[s] @ vec[claim]) for s in ss]
            best = int(np.argmax(sims))
            feats = {"max_cos": sims[best]}
            out.append(Judgement(float(self._sup.predict(feats)), ss[best], feats))
        return out


__all__ = ["FEATURES", "SHIPPED", "ReaderScorer", "batch_features", "chunk_strips", "expected_kind"]
