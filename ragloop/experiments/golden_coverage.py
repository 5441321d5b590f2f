"""How much of production the golden set speaks for, and where it is silent.

**Coverage** = the share of recent production queries (the `queries` table, the last `days` days,
repeats counted) whose nearest live golden question lies within `radius` by cosine similarity of
the collection's own embedder (the model its index was built with, so "near" means what it means
to retrieval). Reported with n and a Wilson 95% interval: a golden set that looks complete on 40
queries may not be.

**Gaps** are the uncovered queries grouped into clusters: a greedy leader clustering at the same
radius (each uncovered question joins the first cluster whose leader is within `radius`, else
leads a new one; questions are taken most-asked first, so a leader is a typical question). The
clusters, largest first, are what the adversarial generator (`golden_adversarial`) aims at.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from ragloop.experiments.simulation import wilson

if TYPE_CHECKING:
    from ragloop.config.settings import Settings
    from ragloop.models import Embedder
    from ragloop.store import Store

DEFAULT_RADIUS = 0.5
"""Chosen on SQuAD 2.0 with MiniLM (`benchmarks/golden_coverage.py`): a golden set from six of twelve
articles covers 61% [55, 67] of traffic from its own articles and 7% [5, 11] from the others at 0.5,
and all 20 largest gap clusters point at articles it lacks; at 0.8 two different questions are
almost never "near" (3% in-domain), at 0.4 a quarter of the foreign traffic counts as covered.
Another embedder has other distances: measure before trusting the default."""
DEFAULT_DAYS = 7.0
MAX_QUERIES = 5000
MAX_EXAMPLES = 3


@dataclass(frozen=True)
class AskedQuestion:
    question: str
    count: int
    question_key: str


@dataclass(frozen=True)
class UncoveredCluster:
    size: int
    """Production queries in the cluster (repeats counted)."""
    representative: str
    examples: list[str]
    nearest_golden_question: str | None
    nearest_similarity: float | None
    question_keys: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "representative": self.representative,
            "examples": self.examples,
            "nearest_golden_question": self.nearest_golden_question,
            "nearest_similarity": self.nearest_similarity,
        }


@dataclass(frozen=True)
class CoverageReport:
    collection: str
    embedder: str
    radius: float
    days: float
    n: int
    covered: int
    golden_entries: int
    uncovered_clusters: list[UncoveredCluster]

    @property
    def coverage(self) -> float | None:
        return self.covered / self.n if self.n else None

    @property
    def ci95(self) -> tuple[float, float] | None:
        return wilson(self.covered, self.n) if self.n else None

    def to_json(self) -> dict[str, Any]:
        ci = self.ci95
        return {
            "collection": self.collection,
            "embedder": self.embedder,
            "radius": self.radius,
            "days": self.days,
            "n": self.n,
            "covered": self.covered,
            "coverage": None if self.coverage is None else round(self.coverage, 4),
            "ci95": None if ci is None else [round(ci[0], 4), round(ci[1], 4)],
            "golden_entries": self.golden_entries,
            "uncovered_clusters": [c.to_json() for c in self.uncovered_clusters],
        }


def measure(
    asked: Sequence[AskedQuestion],
    golden_questions: Sequence[str],
    embedder: Embedder,
    *,
    radius: float = DEFAULT_RADIUS,
    collection: str = "",
    days: float = DEFAULT_DAYS,
    max_clusters: int = 20,
) -> CoverageReport:
    """Coverage of `asked` by `golden_questions` (pure: the store is read by `coverage`)."""
    if not 0.0 < radius <= 1.0:
        raise ValueError(f"radius is a cosine similarity in (0, 1], not {radius}")
    asked = sorted(asked, key=lambda a: (-a.count, a.question))
    n = sum(a.count for a in asked)
    name = getattr(embedder, "name", type(embedder).__name__)
    if not asked:
        return CoverageReport(collection, name, radius, days, 0, 0, len(golden_questions), [])
    q = np.asarray(embedder.embed([a.question for a in asked]), dtype=np.float32)
    if golden_questions:
        g = np.asarray(embedder.embed(list(golden_questions)), dtype=np.float32)
        sims = q @ g.T
        best = sims.argmax(axis=1)
        best_sim = sims[np.arange(len(asked)), best]
    else:
        best = np.zeros(len(asked), dtype=int)
        best_sim = np.full(len(asked), -1.0, dtype=np.float32)
    is_covered = best_sim >= radius
    covered = int(sum(a.count for a, c in zip(asked, is_covered, strict=True) if c))
    clusters = _cluster([i for i in range(len(asked)) if not is_covered[i]], q, radius)
    out = []
    for members in clusters[:max_clusters]:
        lead = members[0]
        out.append(
            UncoveredCluster(
                size=sum(asked[i].count for i in members),
                representative=asked[lead].question,
                examples=[asked[i].question for i in members[1 : 1 + MAX_EXAMPLES]],
                nearest_golden_question=golden_questions[int(best[lead])] if golden_questions else None,
                nearest_similarity=round(float(best_sim[lead]), 4) if golden_questions else None,
                question_keys=[asked[i].question_key for i in members],
            )
        )
    return CoverageReport(collection, name, radius, days, n, covered, len(golden_questions), out)


def _cluster(order: list[int], vectors: np.ndarray, radius: float) -> list[list[int]]:
    """Greedy leader clustering, largest cluster first (ties: the earlier leader)."""
    leaders: list[int] = []
    members: list[list[int]] = []
    for i in order:
        if leaders:
            sims = vectors[leaders] @ vectors[i]
            j = int(sims.argmax())
            if sims[j] >= radius:
                members[j].append(i)
                continue
        leaders.append(i)
        members.append([i])
    return sorted(members, key=lambda m: (-len(m), m[0]))


def collection_embedder(settings: Settings, collection: str) -> Embedder:
    """The embedder the collection's current index was built with (a LookupError if it has none)."""
    from ragloop.models import make_embedder
    from ragloop.retrieval.collection import Collection, CollectionError

    try:
        col = Collection(collection, settings)
    except CollectionError as exc:
        raise LookupError(str(exc)) from None
    if not col.exists() or not col.generation():
        raise LookupError(f"collection {collection!r} has no index: ingest documents first")
    return make_embedder(col.load().manifest.embedder, settings)


def coverage(
    store: Store,
    embedder: Embedder,
    *,
    collection: str = "",
    radius: float = DEFAULT_RADIUS,
    days: float = DEFAULT_DAYS,
    now: datetime | None = None,
    max_clusters: int = 20,
) -> CoverageReport:
    """Coverage of the last `days` of production queries by the live golden set (held-out included:
    coverage is about what the set can speak for, not what a regression may read)."""
    from ragloop.store import utcnow

    since = (now or utcnow()) - timedelta(days=days)
    asked = [AskedQuestion(q, c, k) for k, q, c in store.golden_candidates.recent_questions(since, limit=MAX_QUERIES)]
    golden = [e.question for e in store.golden.current_golden_set()]
    return measure(asked, golden, embedder, radius=radius, collection=collection, days=days, max_clusters=max_clusters)
