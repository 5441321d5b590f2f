"""End to end on a real (hashed) collection: assess the answer, run the oracle, classify."""

from __future__ import annotations

import asyncio

from ragloop.evaluation.metrics.answer import context_precision, faithfulness
from ragloop.improve.diagnosis import Diagnoser, assess_answer
from ragloop.improve.faults import rechunked, without_documents
from ragloop.improve.oracle import OracleRetriever, ranked_chunks
from ragloop.improve.types import DiagnosisInput, FailureMode, RankedChunk
from ragloop.models.scoring import LexicalScorer
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.retriever import Retriever
from tests.agent.conftest import HASHED
from tests.improve.conftest import IDEAL, QUESTION, served

RIGHT = "The Zorblat Bridge was completed in 1887 by the engineer Marta Quill [1]."
WRONG = "The Zorblat Bridge was completed in 1999 by the council of Ostria [1]."


def chunk_ids(coll: Collection) -> dict[str, str]:
    return {c.doc_id: c.chunk_id for c in coll.load().chunks}


def order(coll: Collection, *docs: str) -> list[RankedChunk]:
    ids = chunk_ids(coll)
    return [RankedChunk(chunk_id=ids[d], doc_id=d, rank=i) for i, d in enumerate(docs, start=1)]


def texts(coll: Collection, ranked: list[RankedChunk], k: int) -> list[str]:
    by = {c.chunk_id: c.text for c in coll.load().chunks}
    return [by[h.chunk_id] for h in ranked if h.rank <= k]


def diagnose(
    coll: Collection, ranked: list[RankedChunk], k: int, answer: str, scorer: LexicalScorer, refused: bool = False
):  # type: ignore[no-untyped-def]
    d = Diagnoser(OracleRetriever(coll, scorer, config=HASHED.retrieval), scorer)
    return asyncio.run(d.diagnose(QUESTION, IDEAL, answer, ranked, k, texts(coll, ranked, k), refused=refused))


def test_assessment_agrees_with_the_harness_metrics(coll: Collection, scorer: LexicalScorer) -> None:
    ctx = texts(coll, order(coll, "bridge.md", "ferry.md"), 2)
    answer = f"{RIGHT} The ferry carried passengers across the Vell [2]. Trams run on Mars every hour [2]."
    a = asyncio.run(assess_answer(scorer, QUESTION, answer, ctx, reference=IDEAL))
    assert a.faithfulness == asyncio.run(faithfulness(scorer, answer, ctx))
    assert a.context_precision == asyncio.run(context_precision(scorer, QUESTION, ctx, reference=IDEAL))
    assert a.unfaithful_claims == ("Trams run on Mars every hour.",)
    assert len(a.claims) == len(a.claim_support) == 3
    assert a.faithfulness_at(0.5) == (a.faithfulness, a.unfaithful_claims)
    refusal = asyncio.run(assess_answer(scorer, QUESTION, "I don't know.", ctx, refused=True))
    assert refusal.faithfulness is None and refusal.refused


def test_the_served_ranking_decides_success_ranking_and_embedding(coll: Collection, scorer: LexicalScorer) -> None:
    _, ok = diagnose(coll, order(coll, "bridge.md", "ferry.md", "tower.md"), 2, RIGHT, scorer)
    assert ok.mode is FailureMode.RETRIEVAL_SUCCESS
    _, rank = diagnose(
        coll, order(coll, "ferry.md", "tower.md", "bridge.md"), 2, "A ferry crossed the Vell [1].", scorer
    )
    assert rank.mode is FailureMode.RANKING_FAILURE
    assert [m.rank for m in rank.evidence.missed] == [3]  # type: ignore[union-attr]
    _, emb = diagnose(coll, order(coll, "ferry.md", "tower.md"), 2, "A ferry crossed the Vell [1].", scorer)
    assert emb.mode is FailureMode.EMBEDDING_FAILURE


def test_an_unfaithful_answer_on_the_right_context_is_a_generation_failure(
    coll: Collection, scorer: LexicalScorer
) -> None:
    inp, d = diagnose(coll, order(coll, "bridge.md", "ferry.md"), 2, WRONG, scorer)
    assert inp.assessment.faithfulness == 0.0
    assert d.mode is FailureMode.GENERATION_FAILURE
    assert d.evidence.unfaithful_claims == (WRONG.replace(" [1]", ""),)  # type: ignore[union-attr]


def test_a_removed_document_is_a_knowledge_gap(coll: Collection, scorer: LexicalScorer) -> None:
    gap = without_documents(coll, ["bridge.md"], "kb.gap")
    ranked = ranked_chunks(served(gap).retrieve(QUESTION, 100))
    _, d = diagnose(gap, list(ranked), 2, "Trams cross the Zorblat Bridge every ten minutes [1].", scorer)
    assert d.mode is FailureMode.KNOWLEDGE_GAP


def test_a_passage_cut_mid_sentence_is_a_chunking_failure(coll: Collection, scorer: LexicalScorer) -> None:
    bridge = next(c for c in coll.load().chunks if c.doc_id == "bridge.md")
    emb = Retriever(coll, HASHED.retrieval).embedder
    cut = rechunked(coll, {"bridge.md": (bridge.text, bridge.text.index("1887"))}, emb, "kb.cut")
    halves = [c for c in cut.load().chunks if c.doc_id == "bridge.md"]
    ids = {c.doc_id: c.chunk_id for c in cut.load().chunks if c.doc_id != "bridge.md"}
    ranked = [RankedChunk(chunk_id=halves[0].chunk_id, doc_id="bridge.md", rank=1)]
    ranked += [RankedChunk(chunk_id=ids[d], doc_id=d, rank=i) for i, d in enumerate(["ferry.md", "tower.md"], 2)]
    inp, d = diagnose(cut, ranked, 2, "The Zorblat Bridge was completed in [1].", scorer)
    assert d.mode is FailureMode.CHUNKING_FAILURE
    assert d.evidence.retrieved_parts == (halves[0].chunk_id,)  # type: ignore[union-attr]
    assert d.actions[0].doc_id == "bridge.md"
    # the stored input replays to the same diagnosis
    from ragloop.improve.classifier import classify

    assert classify(DiagnosisInput.model_validate_json(inp.model_dump_json()), d.thresholds) == d


def test_names_and_numbers_the_context_lacks() -> None:
    from ragloop.improve.diagnosis import ungrounded_names

    ctx = "Article 102 allows the Council to govern mergers. The fee was 3,000 in 1989. However, Quill left."
    assert ungrounded_names("Karakorum allows the Council to govern mergers.", ctx) == ("Karakorum",)
    assert ungrounded_names("The fee was 3000 in 1990.", ctx) == ("1990",)
    # sentence openers, stopwords, plurals and the context's own names are not ungrounded
    assert ungrounded_names("However, the Councils of Article 102 met Quill in 1989.", ctx) == ()


def test_a_swapped_name_the_judge_passes_is_caught_by_grounding(coll: Collection, scorer: LexicalScorer) -> None:
    swapped = "The Zorblat Bridge was completed in 1887 by the engineer Karla Voss [1]."
    inp, d = diagnose(coll, order(coll, "bridge.md", "ferry.md"), 2, swapped, scorer)
    assert inp.assessment.claim_ungrounded == (("Karla", "Voss"),)
    assert d.mode is FailureMode.GENERATION_FAILURE
    off = d.thresholds.model_copy(update={"grounding": False, "claim_support": 0.0})
    from ragloop.improve.classifier import classify

    assert classify(inp, off).mode is FailureMode.RETRIEVAL_SUCCESS
