"""The oracle's per-collection background and the per-sentence chunk score: what raises the
oracle threshold on a collection whose non-supporting chunks score high, and why a chunk must
state a span answer in one sentence."""

from __future__ import annotations

import asyncio

import pytest

from ragloop.improve.calibration import impostors, probes, summarise
from ragloop.improve.classifier import classify
from ragloop.improve.oracle import IdealAnswer, OracleRetriever, score_chunks, score_statements, statements
from ragloop.improve.types import (
    BackgroundCalibration,
    FailureMode,
    KnowledgeGapEvidence,
    Thresholds,
)
from ragloop.ingest.types import Chunk
from ragloop.models.scoring import LexicalScorer
from ragloop.retrieval.collection import Collection
from tests.agent.conftest import HASHED
from tests.improve.test_classifier import cand, make, ranked

SENT = "The cursor object executes statements against the open database connection today."


def chunk(cid: str, doc: str, text: str) -> Chunk:
    return Chunk(chunk_id=cid, doc_id=doc, ordinal=0, text=text)


def test_probes_are_clozes_of_the_collections_own_sentences() -> None:
    chunks = [chunk(f"c{i}", f"d{i}", f"{SENT} {SENT.replace('cursor', f'handle{i}')}") for i in range(6)]
    got = probes(chunks, 20, seed=3)
    assert got == probes(chunks, 20, seed=3)  # deterministic for a seed
    assert got != probes(chunks, 20, seed=4)
    # one per chunk at most; a drawn span without a content term ("against the") is skipped
    assert 3 <= len(got) <= 6 and len({pos for pos, _, _ in got}) == len(got)
    for pos, question, answer in got:
        words = answer.split()
        assert 1 <= len(words) <= 4
        assert question.endswith("?") and "what" in question.split()
        # the question is the sentence with the span replaced: put back, it is the sentence
        restored = question[:-1].replace("what", answer, 1)
        assert restored in chunks[pos].text


def test_impostors_are_other_documents_not_holding_the_span() -> None:
    chunks = [
        chunk("a", "d1", "the open database connection"),
        chunk("b", "d1", "something else in the same document"),
        chunk("c", "d2", "it restates the open database connection elsewhere"),
        chunk("d", "d3", "a database with a connection that is open"),
    ]
    assert impostors(chunks, 0, "open database connection", [0, 1, 2, 3]) == [3]


def test_summarise_and_the_nearest_stored_quantile() -> None:
    b = summarise([0.1 * i for i in range(11)], seed=0)
    assert b.probes == 11 and b.quantiles["0.50"] == pytest.approx(0.5)
    assert b.at(0.8) == pytest.approx(0.8) and b.at(0.79) == pytest.approx(0.8)
    assert BackgroundCalibration(probes=0, seed=0, quantiles={}).at(0.8) == 0.0


BG = BackgroundCalibration(probes=200, seed=0, quantiles={"0.50": 0.2, "0.80": 0.5, "0.90": 0.7})


def _case(score: float, background: BackgroundCalibration | None):  # type: ignore[no-untyped-def]
    inp = make(ranked("x", "y", "z"), [cand("x", score), cand("w", 0.1)])
    return inp.model_copy(update={"oracle": inp.oracle.model_copy(update={"background": background})})


def test_a_high_background_raises_the_oracle_threshold_to_a_gap() -> None:
    t = Thresholds(oracle=0.25, oracle_relative=0.0, background_quantile=0.8)
    # 0.4 clears the absolute 0.25 but not what a non-supporting chunk scores here (q0.8 = 0.5)
    d = classify(_case(0.4, BG), t)
    assert d.mode is FailureMode.KNOWLEDGE_GAP
    assert isinstance(d.evidence, KnowledgeGapEvidence) and d.evidence.threshold == 0.5
    assert "background" in d.rule
    # the same case without a background, or with the calibration off, is a success
    assert classify(_case(0.4, None), t).mode is FailureMode.RETRIEVAL_SUCCESS
    assert classify(_case(0.4, BG), t.model_copy(update={"background_quantile": None})).mode is (
        FailureMode.RETRIEVAL_SUCCESS
    )
    # above the background it is support again
    assert classify(_case(0.6, BG), t).mode is FailureMode.RETRIEVAL_SUCCESS
    # a low background never lowers the absolute threshold
    low = BackgroundCalibration(probes=200, seed=0, quantiles={"0.80": 0.05})
    assert classify(_case(0.2, low), t).mode is FailureMode.KNOWLEDGE_GAP


def test_a_span_must_be_stated_in_one_sentence() -> None:
    ideal = IdealAnswer("Cursors are created by any of the what?", "connection shortcut methods")
    stated = "Cursors are created by any of the connection shortcut methods. Nothing else here."
    scattered = (
        "Cursors are created by the connection object. Some methods are shortcuts. "
        "The shortcut helpers wrap other methods."
    )
    got = asyncio.run(score_chunks(LexicalScorer(name="lexical"), ideal, [stated, scattered]))
    assert got[0].score > 0.5 and got[0].coverage == 1.0
    assert "connection shortcut methods" in got[0].evidence
    # every term of the answer is in the chunk, but no one sentence states it
    assert ideal.coverage(scattered) == 1.0
    assert got[1].coverage < 1.0 and got[1].score < got[0].score / 2
    # a sentence-long ideal answer may draw on several sentences: the chunk is scored whole
    long = IdealAnswer("How are cursors made?", "Cursors are created by the connection object or its shortcut methods.")
    assert statements(long, scattered) == [scattered]


def test_a_several_claim_answer_is_supported_by_a_chunk_stating_one_claim() -> None:
    answer = (
        "Cloudant replicates databases between regions over HTTPS. "
        "Billing is based on provisioned throughput capacity per second. "
        "Backups are kept for thirty days and can be restored by support."
    )
    ideal = IdealAnswer("How does Cloudant billing work?", answer)
    assert [p.text for p in ideal.parts()] == [
        "Cloudant replicates databases between regions over HTTPS.",
        "Billing is based on provisioned throughput capacity per second.",
        "Backups are kept for thirty days and can be restored by support.",
    ]
    states_one = "Cloudant billing is based on provisioned throughput capacity, measured per second."
    unrelated = "The dashboard lists every database with its size and document count."
    scorer = LexicalScorer(name="lexical")
    per_claim = asyncio.run(score_chunks(scorer, ideal, [states_one, unrelated]))
    whole = asyncio.run(score_statements(scorer, ideal, [states_one, unrelated]))
    # scored whole, a chunk that states one of three claims covers a third of the answer's terms
    assert whole[0].score < Thresholds().oracle <= per_claim[0].score
    assert per_claim[0].coverage == 1.0 and whole[0].coverage < 0.5
    assert per_claim[1].score < Thresholds().oracle
    # a span or a one-claim answer is its own only part: scored exactly as before
    for short in ("1887", "The bridge was completed in 1887 by Marta Quill."):
        one = IdealAnswer("When was it built?", short)
        assert one.parts() == (one,)
        texts = ["It was completed in 1887.", states_one]
        assert asyncio.run(score_chunks(scorer, one, texts)) == asyncio.run(score_statements(scorer, one, texts))


def test_the_oracle_measures_and_stores_the_collections_background(coll: Collection) -> None:
    o = OracleRetriever(coll, LexicalScorer(name="lexical"), config=HASHED.retrieval, background_probes=20)
    r = asyncio.run(o.retrieve("When was the Zorblat Bridge completed?", "1887"))
    assert r.background is not None and r.background.probes > 0
    qs = list(r.background.quantiles.values())
    assert qs == sorted(qs) and all(0.0 <= q <= 1.0 for q in qs)
    again = OracleRetriever(coll, LexicalScorer(name="lexical"), config=HASHED.retrieval, background_probes=20)
    assert asyncio.run(again.background()) == r.background  # measured the same way twice
    off = OracleRetriever(coll, LexicalScorer(name="lexical"), config=HASHED.retrieval, background_probes=0)
    assert asyncio.run(off.retrieve("When was the Zorblat Bridge completed?", "1887")).background is None
