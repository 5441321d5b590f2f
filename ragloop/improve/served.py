"""What a diagnosis needs to know about a served answer: the question and answer, the contexts it was
generated from, the ranking that served it, the collection, the pipeline version, the ideal answer.

Read from the store only (never from the serving path): the tier-1 job's payload (the copy of the
answer the recorder made for the evaluation tiers), the answer and query rows, the feedback, the
golden set and the stored pipeline version. Choices, and why:

- **Ideal answer**: the user's correction, else the golden set's reference for the question, else
  the tier-2 judge's answer (`failure_evidence.reference_answer`, when a judge writes one; today's
  judges score, they do not answer). A correction is the user saying what was wrong, with the most
  weight; a reference is curated; a judge's answer is a model's.
- **Collection**: answers do not record it, so the one whose current index holds the answer's
  served chunks is taken (the default collection first), else the default.
- **Ranking**: the served chunks in their served order are ranks 1..n (what the generator actually
  saw, even if the index moved on since), then the served pipeline's retrieval replayed for the
  standalone question fills ranks n+1.. up to the classifier's `max_rank`: the served answer only
  kept its top 10, and a ranking failure is read from ranks 11..100.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ragloop.config import PipelineConfig, Settings
from ragloop.improve.payload import EvaluationPayload, PayloadHit, StoredTrace, answer_payload
from ragloop.improve.types import RankedChunk
from ragloop.retrieval.collection import Collection, CollectionError, list_collections
from ragloop.store import Store, UserFeedback, question_hash
from ragloop.store.vocabulary import Tier

MAX_CONTEXT_CHARS = 2000


class IdealSource(StrEnum):
    REVIEW = "review"
    CORRECTION = "correction"
    REFERENCE = "reference"
    JUDGE = "judge"


@dataclass(frozen=True)
class Ideal:
    text: str
    source: IdealSource


def choose_ideal(
    feedback: Sequence[UserFeedback],
    reference: str | None,
    judge_answer: str | None,
    review: str | None = None,
) -> Ideal | None:
    """Reviewer's correction > user's correction (the latest non-empty one) > reference > judge's answer.

    A tier-3 reviewer's corrected answer comes first: it is the most trusted label the system gets,
    and without it an answer that only a reviewer corrected had nothing to be diagnosed against (the
    offline judge writes no answer, and users correct rarely)."""
    if review and review.strip():
        return Ideal(review.strip(), IdealSource.REVIEW)
    for fb in sorted(feedback, key=lambda f: f.created_at, reverse=True):
        if fb.corrected_answer and fb.corrected_answer.strip():
            return Ideal(fb.corrected_answer.strip(), IdealSource.CORRECTION)
    if reference and reference.strip():
        return Ideal(reference.strip(), IdealSource.REFERENCE)
    if judge_answer and judge_answer.strip():
        return Ideal(judge_answer.strip(), IdealSource.JUDGE)
    return None


@dataclass(frozen=True)
class ServedAnswer:
    answer_id: str
    question: str
    standalone: str
    """The question made self-contained by the graph (a follow-up with its conversation folded in)."""
    query: str
    """What retrieval was asked (the first retrieval's query, else the standalone question)."""
    answer: str
    refused: bool
    contexts: tuple[str, ...]
    served: tuple[RankedChunk, ...]
    pipeline_version: str
    collection_hint: str | None = None
    user_reported: bool = False
    ideal: Ideal | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def answer_collection(store: Store, answer_id: str) -> str | None:
    """The collection the answer was served from, as its evaluation job recorded it (None: not recorded)."""
    p = answer_payload(store, answer_id)
    return p.collection or None if p is not None else None


def _judge_answer(store: Store, answer_id: str) -> str | None:
    row = store.evaluations.latest(answer_id, "llm_judge")
    if row is None or row.status != "completed":
        return None
    value = (row.failure_evidence or {}).get("reference_answer")
    return value if isinstance(value, str) else None


def _review_correction(store: Store, answer_id: str) -> str | None:
    row = store.evaluations.latest(answer_id, Tier.HUMAN)
    if row is None or row.status != "completed":
        return None
    value = (row.failure_evidence or {}).get("corrected_answer")
    return value if isinstance(value, str) else None


def _reference(store: Store, question: str, payload: EvaluationPayload) -> str | None:
    ref = payload.reference
    if ref and ref.strip():
        return ref
    h = question_hash(question)
    # the held-out 20% never feeds diagnosis or remediation (it is for out-of-sample evaluation only)
    live = store.golden.current_golden_set(include_held_out=False)
    return next((e.expected_answer for e in live if question_hash(e.question) == h), None)


def load_served(store: Store, answer_id: str) -> ServedAnswer | None:
    """The answer as served, with its ideal answer; None when the answer is gone."""
    answer = store.queries.get_answer(answer_id)
    query = store.queries.query_for_answer(answer_id)
    if answer is None or query is None:
        return None
    p = answer_payload(store, answer_id) or EvaluationPayload()
    feedback = store.feedback.for_answer(answer_id)
    retrieved = [r for r in p.retrieved if r.chunk_id]
    if not retrieved:
        retrieved = [PayloadHit(chunk_id=c) for c in query.retrieved_chunk_ids or []]
    # served order is the rank the generator saw (a hit's own rank is within its query's retrieval)
    served = tuple(
        RankedChunk(chunk_id=r.chunk_id, doc_id=r.doc_id, rank=i, score=r.score) for i, r in enumerate(retrieved, 1)
    )
    texts = [s.text for s in p.sources] if p.sources else [r.text for r in retrieved]
    contexts = tuple(t[:MAX_CONTEXT_CHARS] for t in texts if t)
    question = p.question or query.question_text
    standalone = p.standalone_question or question
    return ServedAnswer(
        answer_id=answer_id,
        question=question,
        standalone=standalone,
        query=StoredTrace.load(answer.trace).first_query() or standalone,
        answer=p.answer if p.answer is not None else answer.answer_text,
        refused=p.refused if p.carries_answer else answer.refused,
        contexts=contexts,
        served=served,
        pipeline_version=answer.pipeline_version,
        collection_hint=p.collection,
        user_reported=any(f.rating == "negative" or f.corrected_answer for f in feedback),
        ideal=choose_ideal(
            feedback,
            _reference(store, question, p),
            _judge_answer(store, answer_id),
            review=_review_correction(store, answer_id),
        ),
    )


def pipeline_config(store: Store, version_id: str) -> PipelineConfig:
    """The stored config of the version that served the answer; the active one (or the defaults)
    when that version is unknown."""
    row = store.pipelines.get(version_id) or store.pipelines.current()
    return PipelineConfig.model_validate(row.config) if row is not None else PipelineConfig()


class Collections:
    """Opened collections by name, for one pass (or one worker): opening loads an index."""

    def __init__(self, settings: Settings, default: str = "default") -> None:
        self.settings = settings
        self.default = default
        self._open: dict[str, Collection] = {}

    def get(self, name: str) -> Collection:
        coll = self._open.get(name)
        if coll is None:
            coll = Collection(name, self.settings)
            if not coll.exists():
                raise CollectionError(f"no collection named {name!r}")
            self._open[name] = coll
        return coll

    def resolve(self, served: ServedAnswer) -> Collection:
        """The collection that served the answer (see the module docstring)."""
        if served.collection_hint:
            return self.get(served.collection_hint)
        ids = [c.chunk_id for c in served.served]
        names = [self.default] + [n for n in list_collections(self.settings) if n != self.default]
        best: tuple[int, str] | None = None
        for name in names:
            try:
                gen = self.get(name).load()
            except CollectionError:
                continue
            held = sum(1 for cid in ids if cid in gen.position)
            if ids and held == len(ids):
                return self.get(name)
            if held and (best is None or held > best[0]):
                best = (held, name)
        return self.get(best[1] if best is not None else self.default)

    def close(self) -> None:
        for coll in self._open.values():
            coll.close()
        self._open.clear()


def ranking(served: Sequence[RankedChunk], replay: Sequence[RankedChunk], max_rank: int) -> tuple[RankedChunk, ...]:
    """Served chunks first (ranks 1..n), then the replayed ranking's other chunks, renumbered."""
    out = list(served[:max_rank])
    seen = {c.chunk_id for c in out}
    for c in replay:
        if len(out) >= max_rank:
            break
        if c.chunk_id not in seen:
            seen.add(c.chunk_id)
            out.append(c.model_copy(update={"rank": len(out) + 1}))
    return tuple(out)
