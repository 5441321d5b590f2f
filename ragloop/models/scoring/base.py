"""The two questions the answer graph asks constantly, each answered with a probability and
the evidence behind it:

- relevance: does this passage answer this query?
- support:   is this claim supported by this context?

Batch-first: one call scores a whole list (50 strips are one call, not 50), so a backend can
embed everything at once or pack one LLM prompt. Async because the `llm:` backend is; the
offline backends simply compute.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Judgement:
    """`p` is a calibrated probability; `evidence` is the passage/context sentence that decided it."""

    p: float
    evidence: str = ""
    features: dict[str, float] = field(default_factory=dict)


class Scorer(ABC):
    name: str

    @abstractmethod
    async def relevance(self, query: str, passages: Sequence[str]) -> list[Judgement]:
        """One judgement per passage: P(the passage answers the query)."""

    @abstractmethod
    async def support(self, claims: Sequence[str], contexts: Sequence[str]) -> list[Judgement]:
        """Pairwise (`len(claims) == len(contexts)`): P(claim i is supported by context i)."""


@runtime_checkable
class StripScorer(Protocol):
    """A scorer that reads strips in context: one judgement per strip of `split_strips(chunk)`,
    for each chunk, in order (the answer-sentence reader)."""

    async def score_strips(self, query: str, chunks: Sequence[str]) -> list[list[Judgement]]: ...
