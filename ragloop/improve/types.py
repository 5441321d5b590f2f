"""The typed vocabulary of failure diagnosis: modes, actions, the classifier's inputs and its output.

Everything here is a frozen pydantic model so a diagnosis can be stored with its evaluation as
JSON and replayed later (`DiagnosisInput.model_validate_json(...)` then `classify`): the LOOP's
"diagnosis is deterministic and cheap to replay" rule, and the way a classifier change is measured
on past traffic. Nothing here computes anything.

`FailureMode` (the seed's classifier outcomes, section 4.2) is defined once, with the other values
the tables hold, in `ragloop.store.vocabulary` and re-exported here; the human-review vocabulary
there (`ReviewFailureMode`) is built from its members, plus a coarse `retrieval_failure` a reviewer
may pick, and lacks `retrieval_success`, which is a classifier outcome, not a reviewer's label.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from ragloop.store.vocabulary import FailureMode  # re-exported: diagnosis imports it from here


class ActionKind(StrEnum):
    """The remediation each mode proposes (LOOP.md); applied later by the remediation queue."""

    EXPANSION_CACHE = "expansion_cache"
    RECHUNK_DOCUMENT = "rechunk_document"
    KNOWLEDGE_GAP_LOG = "knowledge_gap_log"
    RANKING_BUFFER = "ranking_buffer"
    PROMPT_CANDIDATE = "prompt_candidate"
    THRESHOLD_RECALIBRATION = "threshold_recalibration"


class VariantKind(StrEnum):
    """Which query of the oracle found a chunk."""

    QUESTION = "question"
    IDEAL_ANSWER = "ideal_answer"
    PARAPHRASE = "paraphrase"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# -- inputs -----------------------------------------------------------------------------------------


class RankedChunk(_Frozen):
    """One hit of the retrieval that served the answer (ranks 1..100, not just the top k)."""

    chunk_id: str
    doc_id: str
    rank: int = Field(ge=1)
    score: float = 0.0


class QueryVariant(_Frozen):
    kind: VariantKind
    text: str
    source: str = ""
    """Who wrote it: "" for the question and the ideal answer, the paraphraser's name otherwise."""


class OracleChunk(_Frozen):
    """A chunk the oracle's queries found, scored against the ideal answer."""

    chunk_id: str
    doc_id: str
    ordinal: int
    score: float
    """max over the ideal answer's claims of P(claim supported by this chunk)."""
    found_by: tuple[VariantKind, ...]
    evidence: str = ""
    """The chunk's sentence that decided the score."""
    query_cosine: float = 0.0
    """cos(question vector, chunk vector) in the collection's own embedding space."""
    coverage: float | None = None
    """Share of a short ideal answer's content terms the chunk mentions (a factor of `score`)."""


class SplitCandidate(_Frozen):
    """Two adjacent chunks of one document and the best sentence that crosses their boundary.

    `straddle_score` scores that sentence whole; `inside_score` is the best sentence (or
    fragment) that lies inside one of the two chunks. A large gain means the supporting passage
    exists only across the boundary."""

    doc_id: str
    first_chunk_id: str
    second_chunk_id: str
    first_ordinal: int
    sentence: str
    straddle_score: float
    inside_score: float

    @property
    def gain(self) -> float:
        return self.straddle_score - self.inside_score

    @property
    def chunk_ids(self) -> tuple[str, str]:
        return (self.first_chunk_id, self.second_chunk_id)


class OracleResult(_Frozen):
    """Every candidate with its score (not only those above the threshold), so a diagnosis can
    be replayed under another threshold without retrieving again."""

    question: str
    ideal_answer: str
    variants: tuple[QueryVariant, ...]
    candidates: tuple[OracleChunk, ...]
    """Best first (score, then chunk id)."""
    splits: tuple[SplitCandidate, ...] = ()
    """Best gain first."""
    scorer: str = ""
    corpus_chunks: int = 0
    latency_ms: float = 0.0

    def oracle_set(self, threshold: float) -> tuple[OracleChunk, ...]:
        return tuple(c for c in self.candidates if c.score >= threshold)

    @property
    def best(self) -> OracleChunk | None:
        return self.candidates[0] if self.candidates else None


class AnswerAssessment(_Frozen):
    """The served answer as the harness metrics read it (ragloop.evaluation.metrics.answer)."""

    faithfulness: float | None
    context_precision: float | None
    unfaithful_claims: tuple[str, ...] = ()
    refused: bool = False
    judge: str = ""


class DiagnosisInput(_Frozen):
    """All a diagnosis reads: what production sees after an answer, nothing an injection knows."""

    question: str
    ideal_answer: str
    k: int = Field(ge=1)
    """How many chunks the answer was generated from."""
    retrieval: tuple[RankedChunk, ...]
    oracle: OracleResult
    assessment: AnswerAssessment

    def top_k(self) -> tuple[RankedChunk, ...]:
        return tuple(h for h in self.retrieval if h.rank <= self.k)


# -- thresholds -------------------------------------------------------------------------------------


class Thresholds(_Frozen):
    """The decision tree's constants. Defaults are the values chosen on the dev part of the
    injected-failure set (benchmarks/diagnosis_accuracy.py); the seed's 0.7 / 0.8 are the
    starting point of the faithfulness / context-precision search."""

    oracle: float = 0.5
    """A candidate with score >= this is in the oracle set; none above it: knowledge gap."""
    split_gain: float = 0.2
    """straddle_score - inside_score needed to call a passage split across chunks."""
    split_score: float = 0.5
    """...and the straddling sentence itself must score at least this."""
    faithfulness: float = 0.7
    context_precision: float = 0.3
    max_rank: int = 100
    """Ranks the classifier reads (the seed's top 100)."""


# -- evidence and output ----------------------------------------------------------------------------


class MissedChunk(_Frozen):
    chunk_id: str
    oracle_score: float
    rank: int | None
    """Its rank in the served retrieval; None when it was not in the top `max_rank`."""
    query_cosine: float = 0.0


class RankingEvidence(_Frozen):
    kind: Literal["ranking"] = "ranking"
    k: int
    missed: tuple[MissedChunk, ...]


class EmbeddingEvidence(_Frozen):
    kind: Literal["embedding"] = "embedding"
    missed: tuple[MissedChunk, ...]
    query_distance: float
    """1 - max cos(question vector, oracle chunk vector): how far the query landed."""


class ChunkingEvidence(_Frozen):
    kind: Literal["chunking"] = "chunking"
    doc_id: str
    chunk_ids: tuple[str, str]
    first_ordinal: int
    sentence: str
    straddle_score: float
    inside_score: float
    retrieved_parts: tuple[str, ...]
    """Which of the two chunks were in the served top k."""


class KnowledgeGapEvidence(_Frozen):
    kind: Literal["knowledge_gap"] = "knowledge_gap"
    best_chunk_id: str | None
    best_score: float
    threshold: float


class GenerationEvidence(_Frozen):
    kind: Literal["generation"] = "generation"
    faithfulness: float
    context_precision: float
    unfaithful_claims: tuple[str, ...]
    retrieved_context: tuple[str, ...]
    """Chunk ids of the top k the answer was generated from."""


class SuccessEvidence(_Frozen):
    kind: Literal["success"] = "success"
    matched: tuple[MissedChunk, ...]
    """Oracle chunks found in the top k (with their ranks)."""
    faithfulness: float | None
    context_precision: float | None


Evidence = Annotated[
    RankingEvidence
    | EmbeddingEvidence
    | ChunkingEvidence
    | KnowledgeGapEvidence
    | GenerationEvidence
    | SuccessEvidence,
    Field(discriminator="kind"),
]


class ProposedAction(_Frozen):
    kind: ActionKind
    reason: str
    chunk_ids: tuple[str, ...] = ()
    doc_id: str | None = None


class Diagnosis(_Frozen):
    mode: FailureMode
    confidence: float = Field(ge=0.0, le=1.0)
    evidence: Evidence
    actions: tuple[ProposedAction, ...]
    rule: str
    """The path through the tree that decided, for the audit log ("oracle-not-in-top-k > ...")."""
    thresholds: Thresholds
