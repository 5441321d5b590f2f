"""The decision tree, branch by branch, on hand-built inputs (no retrieval, no models)."""

from __future__ import annotations

import json

import pytest

from ragloop.improve.classifier import classify
from ragloop.improve.types import (
    ActionKind,
    AnswerAssessment,
    ChunkingEvidence,
    DiagnosisInput,
    EmbeddingEvidence,
    FailureMode,
    GenerationEvidence,
    KnowledgeGapEvidence,
    OracleChunk,
    OracleResult,
    RankedChunk,
    RankingEvidence,
    SplitCandidate,
    SuccessEvidence,
    Thresholds,
    VariantKind,
)

T = Thresholds(
    oracle=0.5,
    oracle_relative=0.0,
    split_gain=0.2,
    split_score=0.5,
    faithfulness=0.7,
    claim_support=0.5,
    grounding=True,
    context_precision=0.3,
)


def ranked(*ids: str) -> tuple[RankedChunk, ...]:
    return tuple(RankedChunk(chunk_id=c, doc_id=f"doc-{c}", rank=i) for i, c in enumerate(ids, start=1))


def cand(chunk_id: str, score: float, *, cos: float = 0.4, ordinal: int = 0, doc: str = "") -> OracleChunk:
    return OracleChunk(
        chunk_id=chunk_id,
        doc_id=doc or f"doc-{chunk_id}",
        ordinal=ordinal,
        score=score,
        found_by=(VariantKind.IDEAL_ANSWER,),
        query_cosine=cos,
    )


def make(
    retrieval: tuple[RankedChunk, ...],
    candidates: list[OracleChunk],
    *,
    k: int = 3,
    splits: tuple[SplitCandidate, ...] = (),
    faith: float | None = 1.0,
    cp: float | None = 1.0,
    refused: bool = False,
    unfaithful: tuple[str, ...] = (),
) -> DiagnosisInput:
    return DiagnosisInput(
        question="q?",
        ideal_answer="a",
        k=k,
        retrieval=retrieval,
        oracle=OracleResult(
            question="q?",
            ideal_answer="a",
            variants=(),
            candidates=tuple(sorted(candidates, key=lambda c: (-c.score, c.chunk_id))),
            splits=splits,
        ),
        assessment=AnswerAssessment(
            faithfulness=faith, context_precision=cp, unfaithful_claims=unfaithful, refused=refused
        ),
    )


TOP = ranked(*(f"c{i}" for i in range(1, 101)))


def split(a: str = "c7", b: str = "c8", straddle: float = 0.9, inside: float = 0.3) -> SplitCandidate:
    return SplitCandidate(
        doc_id="doc-x",
        first_chunk_id=a,
        second_chunk_id=b,
        first_ordinal=0,
        sentence="The bridge was | completed in 1887.",
        straddle_score=straddle,
        inside_score=inside,
    )


def test_success_when_an_oracle_chunk_is_in_the_top_k() -> None:
    d = classify(make(TOP, [cand("c2", 0.9), cand("c50", 0.6)]), T)
    assert d.mode is FailureMode.RETRIEVAL_SUCCESS
    assert isinstance(d.evidence, SuccessEvidence)
    assert [(m.chunk_id, m.rank) for m in d.evidence.matched] == [("c2", 2)]
    assert d.actions == ()


def test_ranking_failure_names_the_missed_chunks_and_their_ranks() -> None:
    d = classify(make(TOP, [cand("c40", 0.8), cand("c12", 0.7), cand("c1", 0.2)]), T)
    assert d.mode is FailureMode.RANKING_FAILURE
    assert isinstance(d.evidence, RankingEvidence)
    assert [(m.chunk_id, m.rank) for m in d.evidence.missed] == [("c12", 12), ("c40", 40)]
    assert [a.kind for a in d.actions] == [ActionKind.RANKING_BUFFER]
    assert d.actions[0].chunk_ids == ("c12", "c40")


def test_ranks_beyond_max_rank_do_not_count_as_retrieved() -> None:
    inp = make(TOP, [cand("c90", 0.8)])
    assert classify(inp, T).mode is FailureMode.RANKING_FAILURE
    assert classify(inp, T.model_copy(update={"max_rank": 50})).mode is FailureMode.EMBEDDING_FAILURE


def test_embedding_failure_when_the_oracle_chunks_were_not_retrieved_at_all() -> None:
    d = classify(make(TOP, [cand("x1", 0.9, cos=0.25), cand("x2", 0.6, cos=0.4)]), T)
    assert d.mode is FailureMode.EMBEDDING_FAILURE
    assert isinstance(d.evidence, EmbeddingEvidence)
    assert d.evidence.query_distance == pytest.approx(0.6)
    assert {m.rank for m in d.evidence.missed} == {None}
    assert d.actions[0].kind is ActionKind.EXPANSION_CACHE
    assert set(d.actions[0].chunk_ids) == {"x1", "x2"}


def test_knowledge_gap_when_nothing_reaches_the_oracle_threshold() -> None:
    d = classify(make(TOP, [cand("c3", 0.45), cand("x9", 0.1)]), T)
    assert d.mode is FailureMode.KNOWLEDGE_GAP
    assert isinstance(d.evidence, KnowledgeGapEvidence)
    assert (d.evidence.best_chunk_id, d.evidence.best_score) == ("c3", 0.45)
    # answered anyway: the gate let an unsupported answer through
    assert [a.kind for a in d.actions] == [ActionKind.KNOWLEDGE_GAP_LOG, ActionKind.THRESHOLD_RECALIBRATION]
    refused = classify(make(TOP, [cand("c3", 0.45)], refused=True, faith=None), T)
    assert [a.kind for a in refused.actions] == [ActionKind.KNOWLEDGE_GAP_LOG]


def test_knowledge_gap_with_no_candidates_at_all() -> None:
    d = classify(make((), []), T)
    assert d.mode is FailureMode.KNOWLEDGE_GAP
    assert isinstance(d.evidence, KnowledgeGapEvidence)
    assert d.evidence.best_chunk_id is None


def test_generation_failure_needs_low_faithfulness_and_useful_context() -> None:
    inp = make(TOP, [cand("c1", 0.9)], faith=0.0, cp=1.0, unfaithful=("The bridge opened in 1999.",))
    d = classify(inp, T)
    assert d.mode is FailureMode.GENERATION_FAILURE
    assert isinstance(d.evidence, GenerationEvidence)
    assert d.evidence.unfaithful_claims == ("The bridge opened in 1999.",)
    assert d.evidence.retrieved_context == ("c1", "c2", "c3")
    assert d.actions[0].kind is ActionKind.PROMPT_CANDIDATE
    # the same answer on useless context is not the generator's fault
    assert classify(make(TOP, [cand("c1", 0.9)], faith=0.0, cp=0.1), T).mode is FailureMode.RETRIEVAL_SUCCESS
    # faithful enough
    assert classify(make(TOP, [cand("c1", 0.9)], faith=0.7, cp=1.0), T).mode is FailureMode.RETRIEVAL_SUCCESS


def test_a_faithful_answer_that_misses_the_ideal_proposes_an_answer_graph_candidate() -> None:
    """Retrieval was right (the mode says so), but the answer does not give the ideal answer: the
    answer graph lost it, and the same candidate a generation failure asks for is proposed."""
    base = make(TOP, [cand("c2", 0.9)])
    missed = base.model_copy(update={"assessment": base.assessment.model_copy(update={"gives_ideal": False})})
    d = classify(missed, T)
    assert d.mode is FailureMode.RETRIEVAL_SUCCESS and "misses the ideal answer" in d.rule
    assert [a.kind for a in d.actions] == [ActionKind.PROMPT_CANDIDATE]
    assert classify(DiagnosisInput.model_validate_json(missed.model_dump_json()), T) == d  # replays
    right = base.model_copy(update={"assessment": base.assessment.model_copy(update={"gives_ideal": True})})
    assert classify(right, T).actions == () and classify(base, T).actions == ()  # None: an input stored before


def test_a_refusal_is_never_a_generation_failure_and_asks_for_recalibration() -> None:
    d = classify(make(TOP, [cand("c1", 0.9)], faith=None, cp=1.0, refused=True), T)
    assert d.mode is FailureMode.RETRIEVAL_SUCCESS
    assert [a.kind for a in d.actions] == [ActionKind.THRESHOLD_RECALIBRATION]


def test_chunking_failure_comes_before_ranking() -> None:
    # one half of the split passage is retrieved at rank 7: the seed's order would say ranking
    inp = make(TOP, [cand("c7", 0.6, doc="doc-x"), cand("c8", 0.2, doc="doc-x", ordinal=1)], splits=(split(),))
    d = classify(inp, T)
    assert d.mode is FailureMode.CHUNKING_FAILURE
    assert isinstance(d.evidence, ChunkingEvidence)
    assert d.evidence.chunk_ids == ("c7", "c8")
    assert d.evidence.retrieved_parts == ()
    assert d.actions[0].kind is ActionKind.RECHUNK_DOCUMENT
    assert d.actions[0].doc_id == "doc-x"


def test_chunking_failure_with_nothing_above_the_oracle_threshold() -> None:
    inp = make(TOP, [cand("x7", 0.3, doc="doc-x")], splits=(split("x7", "x8"),))
    assert classify(inp, T).mode is FailureMode.CHUNKING_FAILURE


@pytest.mark.parametrize(
    ("sp", "why"),
    [
        (split(straddle=0.9, inside=0.8), "gain below split_gain"),
        (split(straddle=0.45, inside=0.0), "straddling sentence below split_score"),
    ],
)
def test_split_candidates_that_do_not_explain_the_failure(sp: SplitCandidate, why: str) -> None:
    inp = make(TOP, [cand("c7", 0.6, doc="doc-x")], splits=(sp,))
    assert classify(inp, T).mode is not FailureMode.CHUNKING_FAILURE, why


def test_a_split_is_a_chunking_failure_even_with_both_parts_retrieved() -> None:
    inp = make(TOP, [cand("c1", 0.6, doc="doc-x"), cand("c2", 0.3, doc="doc-x")], splits=(split("c1", "c2"),))
    d = classify(inp, T)
    assert d.mode is FailureMode.CHUNKING_FAILURE
    assert isinstance(d.evidence, ChunkingEvidence) and d.evidence.retrieved_parts == ("c1", "c2")


def test_a_top_k_chunk_as_good_as_the_split_passage_wins() -> None:
    inp = make(TOP, [cand("c2", 0.95), cand("c7", 0.6, doc="doc-x")], splits=(split(),))
    assert classify(inp, T).mode is FailureMode.RETRIEVAL_SUCCESS


def test_thresholds_move_the_boundaries() -> None:
    inp = make(TOP, [cand("c40", 0.55)])
    assert classify(inp, T).mode is FailureMode.RANKING_FAILURE
    assert classify(inp, T.model_copy(update={"oracle": 0.6})).mode is FailureMode.KNOWLEDGE_GAP


def test_the_relative_cut_drops_chunks_that_only_share_the_answers_words() -> None:
    # the oracle's best chunk (0.9) is at rank 30; a 0.55 chunk in the top k only names the answer
    inp = make(TOP, [cand("c30", 0.9), cand("c2", 0.55)])
    assert classify(inp, T).mode is FailureMode.RETRIEVAL_SUCCESS
    d = classify(inp, T.model_copy(update={"oracle_relative": 0.7}))
    assert d.mode is FailureMode.RANKING_FAILURE
    assert [m.chunk_id for m in d.evidence.missed] == ["c30"]  # type: ignore[union-attr]


def test_confidence_grows_with_the_margin() -> None:
    near = classify(make(TOP, [cand("c40", 0.52)]), T)
    far = classify(make(TOP, [cand("c40", 0.95)]), T)
    assert 0.5 <= near.confidence < far.confidence <= 1.0


def test_inputs_replay_from_json_to_the_same_diagnosis() -> None:
    inp = make(TOP, [cand("c7", 0.6, doc="doc-x"), cand("c40", 0.7)], splits=(split(),), faith=0.5)
    blob = json.dumps(inp.model_dump(mode="json"))
    again = DiagnosisInput.model_validate_json(blob)
    assert again == inp
    first, second = classify(inp, T), classify(again, T)
    assert first == second
    assert first.model_dump(mode="json") == json.loads(first.model_dump_json())


def test_the_tree_applies_its_own_claim_support_threshold() -> None:
    # the judge passed an entity swap at p = 0.6 (>= the harness's 0.5): faithful at 0.5, not at 0.8
    claims = ("Karakorum allows the Council to govern mergers.",)
    inp = make(TOP, [cand("c1", 0.9)], faith=1.0, cp=1.0)
    inp = inp.model_copy(
        update={"assessment": inp.assessment.model_copy(update={"claims": claims, "claim_support": (0.6,)})}
    )
    assert classify(inp, T).mode is FailureMode.RETRIEVAL_SUCCESS
    d = classify(inp, T.model_copy(update={"claim_support": 0.8}))
    assert d.mode is FailureMode.GENERATION_FAILURE
    assert isinstance(d.evidence, GenerationEvidence)
    assert d.evidence.unfaithful_claims == claims and d.evidence.faithfulness == 0.0
    # without per-claim probabilities the harness's values stand
    assert inp.assessment.model_copy(update={"claim_support": ()}).faithfulness_at(0.99) == (1.0, ())
