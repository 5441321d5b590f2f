"""The oracle retriever on a real (hashed-embedder) collection: what it finds, how it scores,
split passages, and that it repeats exactly."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ragloop.improve.faults import rechunked, without_documents
from ragloop.improve.oracle import IdealAnswer, OracleRetriever, join_adjacent, score_statements
from ragloop.improve.paraphrase import ChatParaphraser, OfflineParaphraser, Vocabulary
from ragloop.improve.types import Thresholds, VariantKind
from ragloop.ingest.registry import DocumentOverride
from ragloop.models.chat.testing import FunctionModel
from ragloop.models.errors import TransientModelError
from ragloop.models.scoring import LexicalScorer
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.rechunk import rechunk_document
from ragloop.retrieval.retriever import Retriever
from ragloop.retrieval.types import Hit
from tests.agent.conftest import DOCS, HASHED
from tests.improve.conftest import IDEAL, QUESTION

REPO = Path(__file__).resolve().parents[2]


def run(o: OracleRetriever, question: str = QUESTION, ideal: str = IDEAL):  # type: ignore[no-untyped-def]
    return asyncio.run(o.retrieve(question, ideal))


def test_the_ideal_answer_finds_and_scores_the_supporting_chunk(oracle: OracleRetriever) -> None:
    r = run(oracle)
    kinds = [v.kind for v in r.variants]
    assert kinds == [VariantKind.QUESTION, VariantKind.IDEAL_ANSWER] + [VariantKind.PARAPHRASE] * 3
    assert r.variants[1].text == f"{QUESTION} {IDEAL}"  # a short span is read with its question
    assert r.best is not None and r.best.doc_id == "bridge.md"
    assert r.best.score > 0.5
    assert "1887" in r.best.evidence
    # a chunk that never names the answer cannot support it
    assert all(c.score == 0.0 for c in r.candidates if c.doc_id != "bridge.md")
    assert r.corpus_chunks == 4 and r.scorer == "lexical"
    assert [c.chunk_id for c in r.oracle_set(0.5)] == [r.best.chunk_id]


def test_a_sentence_long_ideal_answer_is_its_own_query(oracle: OracleRetriever) -> None:
    ideal = "The Zorblat Bridge was completed in 1887 by the engineer Marta Quill."
    r = run(oracle, ideal=ideal)
    assert r.variants[1].text == ideal
    assert r.best is not None and r.best.doc_id == "bridge.md" and r.best.coverage == 1.0
    others = [c for c in r.candidates if c.doc_id != "bridge.md"]
    assert max(c.score for c in others) < r.best.score
    # partial coverage counts squared: "Marta Quill" alone is a fraction of the answer
    tower = next(c for c in others if c.doc_id == "tower.md")
    assert tower.coverage is not None and 0 < tower.coverage < 1


def test_a_paragraph_ideal_answer_finds_the_chunk_that_states_one_of_its_claims(oracle: OracleRetriever) -> None:
    """An MTRAG-style reference: several sentences, only one of them stated in the corpus. Scored
    whole, the bridge chunk covers too little of the paragraph to clear the threshold and the tree
    would call the failure a knowledge gap; claim by claim it is the oracle chunk."""
    ideal = (
        "The Zorblat Bridge was completed in 1887 by the engineer Marta Quill. "
        "Visitors praise its elegant lamps and sweeping views at sunset. "
        "Guided walks leave from the northern abutment every Saturday morning."
    )
    t = Thresholds()
    r = run(oracle, ideal=ideal)
    found = r.oracle_set(t.oracle, t.oracle_relative, t.background_quantile)
    assert found and {c.doc_id for c in found} == {"bridge.md"}
    chunk = next(c.text for c in oracle.collection.load().chunks if c.doc_id == "bridge.md")
    whole = asyncio.run(score_statements(oracle.scorer, IdealAnswer(QUESTION, ideal), [chunk]))[0]
    assert whole.score < t.oracle <= found[0].score


def test_coverage_of_the_ideal_answer() -> None:
    ideal = IdealAnswer(QUESTION, "Marta Quill")
    assert ideal.coverage("Quill designed it") == 0.5
    assert ideal.coverage("Marta Quill designed it") == 1.0
    assert IdealAnswer("Which letter?", "k").coverage("a factor less than k") == 1.0
    assert IdealAnswer("Which letter?", "k").coverage("a factor less than n") == 0.0


def test_the_oracle_repeats_exactly(coll: Collection) -> None:
    a = run(OracleRetriever(coll, LexicalScorer(name="lexical"), config=HASHED.retrieval))
    b = run(OracleRetriever(coll, LexicalScorer(name="lexical"), config=HASHED.retrieval))
    assert a.model_copy(update={"latency_ms": 0.0}) == b.model_copy(update={"latency_ms": 0.0})
    assert a.latency_ms > 0


def test_an_index_that_moves_while_the_oracle_reads_is_read_anew(coll: Collection) -> None:
    """A re-chunk lands between the oracle reading the index and retrieving from it (the worker's
    remediation pass runs beside its diagnoses): the oracle reads the new generation, not a mix."""
    oracle = OracleRetriever(coll, LexicalScorer(name="lexical"), config=HASHED.retrieval)
    real, moved = oracle.retriever.retrieve, []

    def retrieve(query: str, k: int | None = None, mode: Any = None) -> list[Hit]:
        if not moved:
            moved.append(rechunk_document(coll, "bridge.md", DocumentOverride("bridge.md", 60, 0, "test"), HASHED))
        return real(query, k, mode)

    oracle.retriever.retrieve = retrieve  # type: ignore[method-assign]
    result = run(oracle)
    assert moved and len(result.candidates) > 0 and result.corpus_chunks == len(coll.load().chunks) > 4
    fresh = run(OracleRetriever(coll, LexicalScorer(name="lexical"), config=HASHED.retrieval))
    assert result.model_copy(update={"latency_ms": 0.0}) == fresh.model_copy(update={"latency_ms": 0.0})


def test_query_cosines_are_read_in_the_index_space(oracle: OracleRetriever, coll: Collection) -> None:
    r = run(oracle)
    gen = coll.load()
    q = Retriever(coll, HASHED.retrieval).embedder.embed([QUESTION])[0]
    for c in r.candidates:
        assert abs(float(gen.vectors[gen.position[c.chunk_id]] @ q) - c.query_cosine) < 1e-5


def test_removed_documents_leave_nothing_to_support_the_answer(coll: Collection) -> None:
    gap = without_documents(coll, ["bridge.md"], "kb.gap")
    r = run(OracleRetriever(gap, LexicalScorer(name="lexical"), config=HASHED.retrieval))
    assert r.corpus_chunks == 3
    assert "bridge.md" not in {c.doc_id for c in r.candidates}
    assert r.oracle_set(0.05) == ()


def test_a_passage_cut_mid_sentence_is_found_as_a_split(coll: Collection) -> None:
    text = coll.load().chunks[coll.load().position[_bridge(coll)]].text
    cut = text.index("1887")  # "...was completed in | 1887 by the engineer..."
    emb = Retriever(coll, HASHED.retrieval).embedder
    split_coll = rechunked(coll, {"bridge.md": (text, cut)}, emb, "kb.cut")
    parts = [c for c in split_coll.load().chunks if c.doc_id == "bridge.md"]
    assert [p.ordinal for p in parts] == [0, 1] and parts[0].text.endswith("completed in")
    r = run(OracleRetriever(split_coll, LexicalScorer(name="lexical"), config=HASHED.retrieval))
    assert r.splits, "the two halves are neighbours"
    s = r.splits[0]
    assert s.chunk_ids == (parts[0].chunk_id, parts[1].chunk_id)
    assert "completed in 1887" in s.sentence
    assert s.straddle_score > s.inside_score


def test_a_clean_boundary_offers_the_sentences_either_side(coll: Collection) -> None:
    text = coll.load().chunks[coll.load().position[_bridge(coll)]].text
    cut = text.index("It spans")
    emb = Retriever(coll, HASHED.retrieval).embedder
    split_coll = rechunked(coll, {"bridge.md": (text, cut)}, emb, "kb.clean")
    r = run(OracleRetriever(split_coll, LexicalScorer(name="lexical"), config=HASHED.retrieval))
    assert r.splits
    # the answer sits whole in the first chunk: no gain from joining
    assert r.splits[0].straddle_score <= r.splits[0].inside_score + 1e-9


def test_join_adjacent_writes_the_chunker_overlap_once() -> None:
    joined, end, start = join_adjacent("One two three. Four five six", "Four five six seven.")
    assert joined == "One two three. Four five six seven."
    assert (end, start) == (len("One two three. Four five six"), len("One two three. "))
    joined, end, start = join_adjacent("A short one", "and the rest.")
    assert joined == "A short one and the rest." and start == end + 1


def test_offline_paraphrases_use_the_collection_vocabulary(coll: Collection) -> None:
    voc = Vocabulary.from_chunks(coll.load().chunks)
    term_drop, vocabulary, reorder = OfflineParaphraser(voc).variants(QUESTION)
    # "Bridge" is in three of the four documents: the least discriminating term goes
    assert term_drop == "Zorblat completed"
    # "zorblat" co-occurs with "vell" in both of its chunks
    assert vocabulary == "When was the Zorblat Bridge completed vell"
    # rotated to start at the rarest term ("completed": one chunk)
    assert reorder == "completed When was the Zorblat Bridge"


def test_a_chat_model_writes_the_paraphrases_and_a_failing_one_falls_back(coll: Collection) -> None:
    voc = Vocabulary.from_chunks(coll.load().chunks)
    good = FunctionModel(lambda _req: '{"paraphrases": ["a one", "a two", "a three", "a four"]}')
    got = asyncio.run(ChatParaphraser(good, OfflineParaphraser(voc)).paraphrase(QUESTION))
    assert [v.text for v in got] == ["a one", "a two", "a three"]
    assert {v.source for v in got} == {f"chat:{good.name}"}

    def broken(_req: object) -> str:
        raise TransientModelError("down")

    got = asyncio.run(ChatParaphraser(FunctionModel(broken), OfflineParaphraser(voc)).paraphrase(QUESTION))
    assert [v.text for v in got] == OfflineParaphraser(voc).variants(QUESTION)
    assert all("chat model failed: TransientModelError" in v.source for v in got)
    short = FunctionModel(lambda _req: '{"paraphrases": ["only one"]}')
    got = asyncio.run(ChatParaphraser(short, OfflineParaphraser(voc)).paraphrase(QUESTION))
    assert got[0].text == "only one" and got[1].text == OfflineParaphraser(voc).variants(QUESTION)[1]
    assert "fewer paraphrases" in got[1].source and len(got) == 3


def test_paraphrases_do_not_depend_on_the_hash_seed(tmp_path: Path) -> None:
    script = tmp_path / "para.py"
    script.write_text(
        "import json, sys\n"
        "from ragloop.improve.paraphrase import ChatParaphraser, OfflineParaphraser, Vocabulary\n"
        "from ragloop.ingest.types import Chunk\n"
        f"DOCS = {dict(DOCS)!r}\n"
        "chunks = [Chunk(k, k, 0, v) for k, v in DOCS.items()]\n"
        "p = OfflineParaphraser(Vocabulary.from_chunks(chunks))\n"
        "qs = ['When was the Zorblat Bridge completed?', 'Who designed the tower in Ostria?', 'How tall is it']\n"
        "print(json.dumps([p.variants(q) for q in qs]))\n"
    )
    outs = set()
    for seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)}
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, check=True)
        outs.add(done.stdout)
    assert len(outs) == 1
    assert len(json.loads(outs.pop())) == 3


def _bridge(coll: Collection) -> str:
    return next(c.chunk_id for c in coll.load().chunks if c.doc_id == "bridge.md")
