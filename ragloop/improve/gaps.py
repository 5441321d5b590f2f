"""The knowledge-gap log: similar unanswerable questions grouped, counted, and turned into the questions
the missing content would have to answer.

A knowledge gap is a diagnosis, not a guess from a refusal: the oracle found nothing that supports
the ideal answer even with that answer as the query (`classifier`, rule 2). What a curator needs
from the log is *which content to write*, so each group keeps its member questions, the corrections
users gave (what the content must say), the best chunk the collection did have (evidence that it is
really missing), and a few questions a document filling the gap would answer.

Choices, and why:
- Grouping by cosine between question embeddings (`GROUP_COSINE`), with the collection's own
  embedder: the space the collection is searched in, so "similar" means what retrieval would take
  as similar. A paraphrase of a logged gap joins its group; a different topic starts a new one.
  Where no embedding is at hand (or the group was stored by another embedder), the content-term
  Jaccard of the two questions decides (`GROUP_JACCARD`), so grouping never silently stops.
  0.85 is deliberately high: two groups for one topic cost a curator a glance, one group for two
  topics hides a gap.
- The join-or-start decision reads the groups and writes one under the collection's gap lock
  (`KnowledgeGaps.exclusive`), inside the caller's transaction, so two workers logging the same
  new question at once make one group.
- Generated questions: a chat model when one is configured (its failure falls back to the
  templates, and `generated_by` says so); offline, templates over the question and the
  corrections: the question itself, "What are the key facts about <topic>?", and one
  verification question per sentence of the correction. Crude, deterministic and honest about
  where they came from.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from pydantic import BaseModel

from ragloop.models.embedding import Embedder
from ragloop.models.errors import ModelError
from ragloop.store import KnowledgeGap, Store
from ragloop.text.analysis import content_terms
from ragloop.text.sentences import split_sentences

if TYPE_CHECKING:
    from ragloop.models.chat.base import ChatModel

GROUP_COSINE = 0.85
GROUP_JACCARD = 0.5
MAX_GENERATED = 5
_WORD = re.compile(r"[A-Za-z0-9][\w'’-]*")


# ------------------------------------------------------------------ generated questions


class QuestionWriter(Protocol):
    name: str

    async def write(self, question: str, ideal_answers: Sequence[str]) -> tuple[list[str], str]:
        """The questions the missing content would answer, and who wrote them."""
        ...


def topic(question: str) -> str:
    """The question's content words in their own spelling: "boiling point liquid nitrogen sea level"."""
    words = [w for w in _WORD.findall(question) if content_terms(w)]  # no stopwords, no question words
    return " ".join(words)


class TemplateQuestions:
    name = "template"

    async def write(self, question: str, ideal_answers: Sequence[str]) -> tuple[list[str], str]:
        q = " ".join(question.split()).rstrip("?. ") + "?"
        out = [q]
        t = topic(question)
        if t:
            out.append(f"What are the key facts about {t}?")
        for ideal in ideal_answers[:2]:
            for sentence in split_sentences(ideal, min_chars=8)[:2]:
                s = sentence.strip().rstrip(".!? ")
                if s:
                    out.append(f"Is it true that {s[0].lower()}{s[1:]}?")
        return list(dict.fromkeys(out))[:MAX_GENERATED], self.name


class _Questions(BaseModel):
    questions: list[str]


PROMPT = """A document collection cannot answer this question:
{question}

A correct answer, given by a user, is:
{ideal}

Write {n} short questions that a new document filling this gap would answer. Reply with JSON only."""


class ChatQuestions:
    """Questions from a chat model (temperature 0, fixed seed); the templates stand in when it fails."""

    def __init__(self, model: ChatModel, *, timeout_s: float = 30.0, n: int = 3) -> None:
        self.model = model
        self.timeout_s = timeout_s
        self.n = n
        self.name = f"chat:{model.name}"
        self.fallback = TemplateQuestions()

    async def write(self, question: str, ideal_answers: Sequence[str]) -> tuple[list[str], str]:
        from ragloop.models.chat.base import ChatRequest
        from ragloop.models.chat.calllog import call_scope

        req = ChatRequest.user(
            PROMPT.format(question=question, ideal="\n".join(ideal_answers[:3]) or "(none given)", n=self.n),
            output_type=_Questions,
            temperature=0.0,
            seed=0,
            timeout_s=self.timeout_s,
        )
        try:
            with call_scope(step="gap_questions"):
                resp = await self.model.request(req)
        except (ModelError, TimeoutError) as exc:
            got, _ = await self.fallback.write(question, ideal_answers)
            return got, f"template (chat model failed: {type(exc).__name__})"
        parsed = resp.parsed if isinstance(resp.parsed, _Questions) else None
        qs = [q.strip() for q in (parsed.questions if parsed else []) if q.strip()]
        if not qs:
            got, _ = await self.fallback.write(question, ideal_answers)
            return got, "template (chat model gave no questions)"
        return list(dict.fromkeys(qs))[:MAX_GENERATED], self.name


# ------------------------------------------------------------------ grouping


@dataclass(frozen=True)
class GapOccurrence:
    """One answer diagnosed as a knowledge gap, with what the log needs from its diagnosis."""

    collection: str
    answer_id: str
    question: str
    ideal_answer: str | None
    best_chunk_id: str | None
    best_score: float | None
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PreparedGap:
    """An occurrence with its embedding and generated questions: the slow part, done outside any
    transaction."""

    occurrence: GapOccurrence
    vector: list[float] | None
    embedder: str | None
    generated: list[str]
    generated_by: str


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape:
        return 0.0
    n = float(np.linalg.norm(x) * np.linalg.norm(y))
    return float(x @ y / n) if n > 0 else 0.0


def jaccard(a: str, b: str) -> float:
    x, y = content_terms(a), content_terms(b)
    return len(x & y) / len(x | y) if x and y else 0.0


def similarity(gap: KnowledgeGap, prepared: PreparedGap) -> tuple[float, float]:
    """(score, threshold) of a question against a group: cosine where both have a vector from one
    embedder, else the lexical fallback."""
    if prepared.vector is not None and gap.vector is not None and gap.embedder == prepared.embedder:
        return cosine(gap.vector, prepared.vector), GROUP_COSINE
    return jaccard(gap.representative_question, prepared.occurrence.question), GROUP_JACCARD


class GapLogger:
    def __init__(self, store: Store, *, embedder: Embedder | None = None, writer: QuestionWriter | None = None) -> None:
        self.store = store
        self.embedder = embedder
        self.writer: QuestionWriter = writer or TemplateQuestions()

    async def prepare(self, occ: GapOccurrence) -> PreparedGap:
        vector: list[float] | None = None
        name: str | None = None
        if self.embedder is not None:
            try:
                vec = np.asarray(self.embedder.embed_one(occ.question), dtype=np.float64)
                norm = float(np.linalg.norm(vec))
                if norm > 0:
                    vector, name = [round(float(v), 6) for v in vec / norm], self.embedder.name
            except Exception:  # an embedder failure costs only the grouping quality: lexical fallback
                vector, name = None, None
        ideals = [occ.ideal_answer] if occ.ideal_answer else []
        generated, by = await self.writer.write(occ.question, ideals)
        return PreparedGap(occ, vector, name, generated, by)

    def log(self, prepared: PreparedGap) -> KnowledgeGap:
        """Join the most similar open group of the collection (at or above its threshold) or start one.
        Joins the caller's transaction; holds the collection's gap lock until it ends."""
        occ = prepared.occurrence
        gaps = self.store.knowledge_gaps
        with gaps.exclusive(occ.collection):
            already = gaps.for_answer(occ.answer_id, occ.collection)
            if already is not None:  # a replayed diagnosis: counted once
                return already
            best: tuple[float, KnowledgeGap] | None = None
            for g in gaps.open_for(occ.collection):
                score, threshold = similarity(g, prepared)
                if score >= threshold and (best is None or score > best[0]):
                    best = (score, g)
            if best is not None:
                return gaps.add_occurrence(
                    best[1].gap_id,
                    occ.question,
                    answer_id=occ.answer_id,
                    ideal_answer=occ.ideal_answer,
                    generated_questions=prepared.generated,
                    best_chunk_id=occ.best_chunk_id,
                    best_score=occ.best_score,
                )
            return gaps.add(
                occ.collection,
                occ.question,
                answer_id=occ.answer_id,
                ideal_answer=occ.ideal_answer,
                vector=prepared.vector,
                embedder=prepared.embedder,
                generated_questions=prepared.generated,
                generated_by=prepared.generated_by,
                best_chunk_id=occ.best_chunk_id,
                best_score=occ.best_score,
                evidence=occ.evidence,
            )
