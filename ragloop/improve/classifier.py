"""The failure classifier: a decision tree over a `DiagnosisInput`, not a model.

Deterministic, pure and cheap, so a stored input replays to the same diagnosis and a change to
the tree can be measured on past traffic. The tree (thresholds in `Thresholds`):

    split  = best adjacent-chunk pair of one document whose boundary sentence scores >= split_score
             and gains >= split_gain over every sentence (or cut fragment) inside either chunk
    oracle = candidates with oracle score >= oracle and >= oracle_relative x the best one's
    1. split, and no other top-k chunk supports the answer as well                 -> CHUNKING
    2. oracle empty                                                                -> KNOWLEDGE GAP
    3. oracle ∩ top k empty:  oracle ∩ top 100 non-empty -> RANKING, else            EMBEDDING
    4. faithfulness (claims supported at p >= claim_support, naming nothing the context lacks)
       < faithfulness
       and context precision >= context_precision                                  -> GENERATION
    5.                                                                                SUCCESS
       (an answer that does not give the ideal answer also proposes an answer-graph candidate)

Where it departs from the seed's sketch (section 4.2), and why:
- Chunking is tested first. The seed reaches it only when no oracle chunk is in the top 100;
  but half of a split passage is usually retrieved (it shares the question's words), which
  the seed would call a ranking failure or a success, and the fix (re-chunk that document) is
  what matters. As the issue defines it, the failure is the boundary, not the retrieval: two
  halves both in the top k still reach the generator as two unrelated passages, and the fix
  (re-chunk that document) is the same; the evidence lists which parts were retrieved.
- Knowledge gap is "no candidate reaches the oracle threshold" rather than "no oracle chunk in
  the corpus": the oracle set is what decides whether the corpus holds the answer.
- Generation failure reads faithfulness at the tree's own claim-support threshold and with the
  names-and-numbers grounding check (the offline judge passes a claim with one name swapped),
  and the chosen context-precision floor is 0: rule 4 is only reached with an oracle chunk in
  the top k, which already says the context was the right one.

Retrieval success keeps its name when the answer misses the ideal answer (the mode says where the
pipeline went wrong: not in retrieval), but it then proposes the same answer-graph candidate a
generation failure does (`prompt_candidate`: prompt variants and refinement / composer knobs, tried
on the golden set): on MTRAG-UN the refinement step, not retrieval, made most wrong answers
(`benchmarks/results/loop_knobs.md`).

`confidence` is the distance of the deciding signal from its threshold, mapped to [0.5, 1]:
an ordering for the scheduler, not a calibrated probability.
"""

from __future__ import annotations

from ragloop.improve.types import (
    ActionKind,
    ChunkingEvidence,
    Diagnosis,
    DiagnosisInput,
    EmbeddingEvidence,
    Evidence,
    FailureMode,
    GenerationEvidence,
    KnowledgeGapEvidence,
    MissedChunk,
    OracleChunk,
    ProposedAction,
    RankingEvidence,
    SplitCandidate,
    SuccessEvidence,
    Thresholds,
)

MAX_EVIDENCE_CHUNKS = 5


def _confidence(margin: float, scale: float) -> float:
    if scale <= 0:
        return 1.0
    return round(0.5 + 0.5 * max(0.0, min(1.0, margin / scale)), 4)


def _missed(chunks: list[OracleChunk], rank_of: dict[str, int]) -> tuple[MissedChunk, ...]:
    return tuple(
        MissedChunk(
            chunk_id=c.chunk_id, oracle_score=c.score, rank=rank_of.get(c.chunk_id), query_cosine=c.query_cosine
        )
        for c in chunks[:MAX_EVIDENCE_CHUNKS]
    )


def find_split(inp: DiagnosisInput, t: Thresholds) -> SplitCandidate | None:
    """The split passage that explains the failure, if any (tree rule 1)."""
    top_k = {h.chunk_id for h in inp.top_k()}
    score_of = {c.chunk_id: c.score for c in inp.oracle.candidates}
    for s in inp.oracle.splits:
        if s.straddle_score < t.split_score or s.gain < t.split_gain:
            continue
        others = (score_of.get(c, 0.0) for c in top_k - set(s.chunk_ids))
        if max(others, default=0.0) >= s.straddle_score:
            continue  # the generator had another chunk that supports the answer as well
        return s
    return None


def classify(inp: DiagnosisInput, t: Thresholds | None = None) -> Diagnosis:
    t = t or Thresholds()
    retrieval = [h for h in inp.retrieval if h.rank <= t.max_rank]
    rank_of: dict[str, int] = {}
    for h in sorted(retrieval, key=lambda h: h.rank):
        rank_of.setdefault(h.chunk_id, h.rank)
    top_k = [h.chunk_id for h in sorted(retrieval, key=lambda h: h.rank) if h.rank <= inp.k]
    oracle = list(inp.oracle.oracle_set(t.oracle, t.oracle_relative, t.background_quantile))
    floor = inp.oracle.floor(t.oracle, t.background_quantile)
    a = inp.assessment

    def done(mode: FailureMode, conf: float, evidence: Evidence, actions: list[ProposedAction], rule: str) -> Diagnosis:
        if a.refused and mode in (FailureMode.RETRIEVAL_SUCCESS, FailureMode.GENERATION_FAILURE):
            actions.append(
                ProposedAction(
                    kind=ActionKind.THRESHOLD_RECALIBRATION,
                    reason="refused although the top k held an oracle chunk: the grader's gate is too strict here",
                )
            )
        if not a.refused and mode is FailureMode.KNOWLEDGE_GAP:
            actions.append(
                ProposedAction(
                    kind=ActionKind.THRESHOLD_RECALIBRATION,
                    reason="answered although the corpus holds no support: the grader's gate let it through",
                )
            )
        return Diagnosis(mode=mode, confidence=conf, evidence=evidence, actions=tuple(actions), rule=rule, thresholds=t)

    split = find_split(inp, t)
    if split is not None:
        parts = tuple(c for c in split.chunk_ids if c in top_k)
        ev = ChunkingEvidence(
            doc_id=split.doc_id,
            chunk_ids=split.chunk_ids,
            first_ordinal=split.first_ordinal,
            sentence=split.sentence,
            straddle_score=split.straddle_score,
            inside_score=split.inside_score,
            retrieved_parts=parts,
        )
        act = ProposedAction(
            kind=ActionKind.RECHUNK_DOCUMENT,
            reason=f"the supporting passage crosses the boundary after chunk {split.first_ordinal} of {split.doc_id}",
            chunk_ids=split.chunk_ids,
            doc_id=split.doc_id,
        )
        pooled = ProposedAction(
            kind=ActionKind.CHUNKING_BUFFER,
            reason="pooled with the collection's other chunking failures for a collection-wide chunking fit",
            chunk_ids=split.chunk_ids,
            doc_id=split.doc_id,
        )
        return done(
            FailureMode.CHUNKING_FAILURE,
            _confidence(split.gain - t.split_gain, 0.3),
            ev,
            [act, pooled],
            f"split passage gain {split.gain:.3f} >= {t.split_gain}",
        )
    if not oracle:
        best = inp.oracle.best
        best_score = best.score if best else 0.0
        ev_gap = KnowledgeGapEvidence(
            best_chunk_id=best.chunk_id if best else None, best_score=best_score, threshold=floor
        )
        act = ProposedAction(
            kind=ActionKind.KNOWLEDGE_GAP_LOG,
            reason=f"no chunk supports the ideal answer (best {best_score:.3f} < {floor:.3f})",
            chunk_ids=(best.chunk_id,) if best else (),
        )
        return done(
            FailureMode.KNOWLEDGE_GAP,
            _confidence(floor - best_score, floor),
            ev_gap,
            [act],
            f"oracle empty: best {best_score:.3f} < {floor:.3f}"
            + (f" (background q{t.background_quantile})" if floor > t.oracle else ""),
        )
    in_top_k = [c for c in oracle if c.chunk_id in set(top_k)]
    margin_scale = max(1e-6, 1.0 - floor)
    if not in_top_k:
        ranked = sorted((c for c in oracle if c.chunk_id in rank_of), key=lambda c: (rank_of[c.chunk_id], c.chunk_id))
        if ranked:
            missed = _missed(ranked, rank_of)
            act = ProposedAction(
                kind=ActionKind.RANKING_BUFFER,
                reason=f"oracle chunk {ranked[0].chunk_id} at rank {rank_of[ranked[0].chunk_id]} > k={inp.k}",
                chunk_ids=tuple(m.chunk_id for m in missed),
            )
            return done(
                FailureMode.RANKING_FAILURE,
                _confidence(max(c.score for c in ranked) - floor, margin_scale),
                RankingEvidence(k=inp.k, missed=missed),
                [act],
                f"oracle not in top {inp.k}, in top {t.max_rank}",
            )
        missed = _missed(oracle, rank_of)
        distance = 1.0 - max(c.query_cosine for c in oracle)
        act = ProposedAction(
            kind=ActionKind.EXPANSION_CACHE,
            reason=f"the question's vector misses the oracle chunks (cosine distance {distance:.3f})",
            chunk_ids=tuple(m.chunk_id for m in missed),
        )
        return done(
            FailureMode.EMBEDDING_FAILURE,
            _confidence(max(c.score for c in oracle) - floor, margin_scale),
            EmbeddingEvidence(missed=missed, query_distance=round(distance, 6)),
            [act],
            f"oracle not in top {t.max_rank}",
        )
    (faith, unfaithful), cp = a.faithfulness_at(t.claim_support, t.grounding), a.context_precision
    if faith is not None and faith < t.faithfulness and (cp or 0.0) >= t.context_precision:
        ev_gen = GenerationEvidence(
            faithfulness=faith,
            context_precision=cp or 0.0,
            unfaithful_claims=unfaithful,
            retrieved_context=tuple(top_k),
        )
        act = ProposedAction(
            kind=ActionKind.PROMPT_CANDIDATE,
            reason=f"faithfulness {faith:.2f} < {t.faithfulness} on context precision {cp or 0.0:.2f}",
            chunk_ids=tuple(top_k),
        )
        return done(
            FailureMode.GENERATION_FAILURE,
            _confidence(t.faithfulness - faith, t.faithfulness),
            ev_gen,
            [act],
            f"faithfulness {faith:.3f} < {t.faithfulness}, context precision {cp or 0.0:.3f} >= {t.context_precision}",
        )
    matched = _missed(in_top_k, rank_of)
    missed_ideal: list[ProposedAction] = []
    if not a.refused and a.gives_ideal is False:
        missed_ideal.append(
            ProposedAction(
                kind=ActionKind.PROMPT_CANDIDATE,
                reason="an oracle chunk was in the top k and the answer is faithful, but it does not give the "
                "ideal answer: the answer graph (refinement, composer) lost it",
                chunk_ids=tuple(top_k),
            )
        )
    return done(
        FailureMode.RETRIEVAL_SUCCESS,
        _confidence(max(c.score for c in in_top_k) - floor, margin_scale),
        SuccessEvidence(matched=matched, faithfulness=faith, context_precision=cp),
        missed_ideal,
        f"oracle chunk in top {inp.k}" + ("; the answer misses the ideal answer" if missed_ideal else ""),
    )
