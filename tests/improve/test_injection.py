"""The injected-failure set: its helpers, and that every case it builds carries the failure it
claims, on a small synthetic SQuAD-shaped corpus (hashed embedder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragloop.config import Settings
from ragloop.evaluation.datasets import Passage, SquadDataset, SquadQuestion, squad_paragraph_id
from ragloop.evaluation.metrics.answer import contains_gold
from ragloop.improve.injection import BASE, GAP, RECHUNK, SquadInjector, answer_sentence, cut_offset, extractive_answer
from ragloop.improve.types import FailureMode
from ragloop.models.embedding import HashedEmbedder
from ragloop.retrieval.collection import Collection
from tests.agent.conftest import HASHED


def test_answer_sentence_and_cut_offset() -> None:
    text = "Bridges are old. The Zorblat Bridge was completed in 1887 by Marta Quill. It spans the Vell."
    s_start, s_end, a_start, a_end = answer_sentence(text, "1887") or (0, 0, 0, 0)
    assert text[s_start:s_end] == "The Zorblat Bridge was completed in 1887 by Marta Quill."
    assert text[a_start:a_end] == "1887"
    # the question's words precede the answer: cut before it
    cut = cut_offset(text, "1887", "When was the Zorblat Bridge completed?")
    assert cut is not None and text[:cut].endswith("completed in ") and text[cut:].startswith("1887")
    # the question's words follow the answer: cut after it
    text2 = "Quill built it. In 1887 the engineer Marta Quill finished the long Zorblat Bridge."
    cut2 = cut_offset(text2, "1887", "When did Marta Quill finish the Zorblat Bridge?")
    assert cut2 is not None and text2[:cut2].endswith("1887 ") and text2[cut2:].startswith("the engineer")
    assert cut_offset(text, "1999", "When?") is None
    assert cut_offset("Yes 1887.", "1887", "Yes?") is None  # nothing to cut away
    # no question term on either side: the cut would separate nothing
    assert cut_offset(text, "1887", "What year?") is None


def test_extractive_answer_cites_the_best_overlapping_sentence() -> None:
    ans = extractive_answer(
        "When was the Zorblat Bridge completed?",
        ["The ferry ended in 1890.", "It spans the Vell. The Zorblat Bridge was completed in 1887."],
    )
    assert ans == "The Zorblat Bridge was completed in 1887 [2]."
    assert extractive_answer("anything", []).startswith("I don't know")


TOPICS = [
    ("Zorblat", "The Zorblat Bridge was completed in {y} by the engineer Marta Quill after six years of work."),
    ("Ostria", "The Ostria tram network opened in {y} with four lines across the river Vell."),
    ("Quill", "The Quill Tower was finished in {y} and stands ninety metres tall over the harbour."),
    ("Vell", "The Vell ferry service ended in {y} after three years of competition with the bridge."),
    ("Marta", "Marta Quill was born in {y} in the coastal village of Ardent near the capital."),
    ("Harbour", "The harbour lighthouse was lit in {y} to guide the grain ships into the Vell estuary."),
]


def synthetic() -> SquadDataset:
    passages, questions = [], []
    for a, title in enumerate(("Alpha", "Beta")):
        for i, (topic, template) in enumerate(TOPICS):
            year = str(1800 + 10 * i + a)
            pid = squad_paragraph_id(title, i)
            filler = f"{topic} {title} is discussed at length by the local historians of the region."
            passages.append(Passage(pid, f"{filler} {template.format(y=year)} Nothing else happened then.", title))
            q = f"In what year did the {topic} event of {title} happen?"
            questions.append(SquadQuestion(f"{title}-{i}", q, pid, title, False, (year,)))
    return SquadDataset(tuple(passages), tuple(questions))


@pytest.fixture
def squad_coll(tmp_path: Path) -> tuple[Collection, SquadDataset]:
    ds = synthetic()
    corpus = ds.write_corpus(tmp_path / "corpus")
    coll = Collection("syn", Settings())
    coll.ingest([corpus.parent], HASHED)
    return coll, ds


def test_every_injected_case_carries_its_failure(squad_coll: tuple[Collection, SquadDataset]) -> None:
    coll, ds = squad_coll
    built = SquadInjector(coll, ds, HashedEmbedder(), per_class=2, k=2, seed=1).build()
    assert built.cases
    # twelve chunks: a top 100 always holds the answer, so no embedding failure can be injected
    assert {c.label for c in built.cases} == set(FailureMode) - {FailureMode.EMBEDDING_FAILURE}
    gold_doc = {q.qid: f"syn.jsonl#{q.paragraph_id}".replace("syn.jsonl", ds.corpus_filename) for q in ds.questions}
    for case in built.cases:
        coll_now = built.collections[case.collection]
        texts = {c.chunk_id: c.text for c in coll_now.load().chunks}
        top = [h for h in case.retrieval if h.rank <= case.k]
        assert case.contexts == tuple(texts[h.chunk_id] for h in top)
        bearing_top = [h for h in top if contains_gold(texts[h.chunk_id], case.answers)]
        qid = case.case_id.split(":", 1)[1]
        if case.label in (FailureMode.RETRIEVAL_SUCCESS, FailureMode.GENERATION_FAILURE):
            assert case.collection == BASE and bearing_top
        if case.label is FailureMode.GENERATION_FAILURE:
            assert case.answer != extractive_answer(case.question, case.contexts)
        if case.label is FailureMode.RANKING_FAILURE:
            rank = int(case.injection.split("rank ")[1].split(",")[0])
            assert not bearing_top and case.k < rank <= 100
            assert any(h.rank == rank and contains_gold(texts[h.chunk_id], case.answers) for h in case.retrieval)
        if case.label is FailureMode.KNOWLEDGE_GAP:
            assert case.collection == GAP
            assert gold_doc[qid] not in {c.doc_id for c in coll_now.load().chunks}
            assert not any(contains_gold(t, case.answers) for t in texts.values())
        if case.label is FailureMode.CHUNKING_FAILURE:
            assert case.collection == RECHUNK
            halves = [c for c in coll_now.load().chunks if c.doc_id == gold_doc[qid]]
            assert len(halves) == 2
            assert not [h for h in bearing_top if h.chunk_id not in {c.chunk_id for c in halves}]
        if case.label is FailureMode.EMBEDDING_FAILURE:
            assert not any(contains_gold(texts[h.chunk_id], case.answers) for h in case.retrieval)
        assert set(case.answer_chunks) == {cid for cid, t in texts.items() if contains_gold(t, case.answers)}
    again = SquadInjector(coll, ds, HashedEmbedder(), per_class=2, k=2, seed=1).build()
    assert [c.case_id for c in again.cases] == [c.case_id for c in built.cases]
    assert {c.part for c in built.cases} == {"dev", "test"}
