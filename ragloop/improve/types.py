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
    CHUNKING_BUFFER = "chunking_buffer"
    """Chunking failures across documents, until a collection-wide chunking candidate is fitted."""
    PROMPT_CANDIDATE = "prompt_candidate"
    THRESHOLD_RECALIBRATION = "threshold_recalibration"
    ANSWER_CHECK = "answer_check"
    """Proposed with the τL refit from labelled traffic when an answer-check reader is configured."""
    TIER1_RECALIBRATION = "tier1_recalibration"
    """Not a diagnosis's proposal: the weekly agreement check and the label buffer propose it
    (`ragloop.improve.recalibration`)."""


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
    """How well the chunk supports the ideal answer (`oracle.score_texts`)."""
    found_by: tuple[VariantKind, ...]
    evidence: str = ""
    """The chunk's sentence that decided the score."""
    query_cosine: float = 0.0
    """cos(question vector, chunk vector) in the collection's own embedding space."""
    coverage: float | None = None
    """Share of the ideal answer's content terms the chunk mentions (a factor of `score`)."""


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


class BackgroundCalibration(_Frozen):
    """What a chunk that does not hold the answer scores in this collection
    (`ragloop.improve.calibration`): quantiles of the best impostor score over cloze probes."""

    probes: int
    seed: int
    quantiles: dict[str, float]
    """Quantile (as "0.90") -> score."""

    def at(self, q: float) -> float:
        """The stored quantile nearest `q` (from above where two are equally near)."""
        if not self.quantiles:
            return 0.0
        key = min(self.quantiles, key=lambda k: (abs(float(k) - q), -float(k)))
        return self.quantiles[key]


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
    background: BackgroundCalibration | None = None
    """The collection's background (None: not calibrated; the absolute threshold alone)."""

    def floor(self, threshold: float, background_quantile: float | None = None) -> float:
        """The absolute oracle threshold, raised to the collection's background quantile."""
        if background_quantile is None or self.background is None:
            return threshold
        return max(threshold, self.background.at(background_quantile))

    def oracle_set(
        self, threshold: float, relative: float = 0.0, background_quantile: float | None = None
    ) -> tuple[OracleChunk, ...]:
        """Candidates scoring >= `floor(threshold, background_quantile)` and >= `relative` x the
        best candidate's score."""
        best = self.candidates[0].score if self.candidates else 0.0
        floor = max(self.floor(threshold, background_quantile), relative * best)
        return tuple(c for c in self.candidates if c.score >= floor)

    @property
    def best(self) -> OracleChunk | None:
        return self.candidates[0] if self.candidates else None


class AnswerAssessment(_Frozen):
    """The served answer as the harness metrics read it (ragloop.evaluation.metrics.answer).

    `faithfulness` and `unfaithful_claims` are the harness's (a claim is supported at p >= 0.5);
    `claims` with their `claim_support` probabilities let the tree apply its own support
    threshold, which is measured per judge (an uncalibrated offline judge passes entity swaps
    at 0.5)."""

    faithfulness: float | None
    context_precision: float | None
    unfaithful_claims: tuple[str, ...] = ()
    refused: bool = False
    judge: str = ""
    claims: tuple[str, ...] = ()
    claim_support: tuple[float, ...] = ()
    claim_ungrounded: tuple[tuple[str, ...], ...] = ()
    """Per claim: its names and numbers the context never mentions (`diagnosis.ungrounded_names`)."""
    gives_ideal: bool | None = None
    """Does the answer give the ideal answer, by the harness's end-to-end rule
    (`evaluation.metrics.item.expected_answer_correct`)? None for a refusal or an input stored before
    it was recorded. A faithful answer from the right context can still miss it: the answer graph
    (refinement, the composer) dropped the passage that says it."""

    def faithfulness_at(self, threshold: float, grounding: bool = False) -> tuple[float | None, tuple[str, ...]]:
        """(share of claims supported at p >= threshold, and with `grounding` naming nothing the
        context lacks; the other claims); the harness's values when the per-claim probabilities
        were not recorded."""
        if not self.claim_support or len(self.claims) != len(self.claim_support):
            return self.faithfulness, self.unfaithful_claims
        loose = [()] * len(self.claims) if len(self.claim_ungrounded) != len(self.claims) else self.claim_ungrounded
        bad = tuple(
            c
            for c, p, u in zip(self.claims, self.claim_support, loose, strict=True)
            if p < threshold or (grounding and u)
        )
        return (len(self.claims) - len(bad)) / len(self.claims), bad


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
    """The decision tree's constants. The defaults are the values `search_thresholds` chose on
    the dev parts of both injected-failure sets together (SQuAD 2.0 even articles and Python-docs
    even pages; benchmarks/results/diagnosis_accuracy*.md, "joint fit") for the `lexical` scorer
    as oracle scorer and judge, reported on the odd articles and pages; another scorer needs its
    own search."""

    oracle: float = 0.25
    """A candidate with score >= this is in the oracle set; none above it: knowledge gap."""
    oracle_relative: float = 0.8
    """...and with score >= this share of the best candidate's: a chunk that merely shares the
    answer's words is no oracle chunk next to one that states it (seed 6.2's false-positive
    rejection)."""
    split_gain: float = 0.02
    """straddle_score - inside_score needed to call a passage split across chunks."""
    split_score: float = 0.3
    """...and the straddling sentence itself must score at least this."""
    faithfulness: float = 0.7
    claim_support: float = 0.8
    """A claim of the answer counts as supported at this judge probability (the harness: 0.5)..."""
    grounding: bool = True
    """...and only when the context mentions each of its names and numbers."""
    context_precision: float = 0.0
    """The seed's "context precision high" (0.8). Chosen 0: the tree reaches rule 4 only with an
    oracle chunk in the top k, and every floor above 0 lost generation failures whose gold
    chunk the lexical judge rated irrelevant to the question (context precision 0)."""
    max_rank: int = 100
    """Ranks the classifier reads (the seed's top 100)."""
    background_quantile: float | None = 0.8
    """The oracle threshold is raised to this quantile of the collection's background (the best
    score of a chunk that does not hold the answer, `ragloop.improve.calibration`); None: off.
    The search picks 0.8 on the SQuAD dev part alone too."""


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
