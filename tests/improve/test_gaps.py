"""The knowledge-gap log: grouping by embedding cosine (lexical fallback), counting, generated questions."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from ragloop.improve.gaps import GROUP_COSINE, GapLogger, GapOccurrence, TemplateQuestions, jaccard, topic
from ragloop.models.embedding import Embedder
from ragloop.store import Store


class TopicEmbedder(Embedder):
    """One axis per topic word: questions about the same topic point the same way."""

    name = "test:topics"
    dim = 3

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), 3), dtype=np.float32)
        for i, t in enumerate(texts):
            low = t.lower()
            out[i] = [("nitrogen" in low) + 0.1, ("helium" in low) * 1.0, 0.05]
        return out


def answer(store: Store) -> str:
    return store.queries.record_answer(session_id="s", question="q", answer_text="a", pipeline_version="pv").answer_id


def log(logger: GapLogger, store: Store, question: str, ideal: str = "") -> str:
    occ = GapOccurrence("kb", answer(store), question, ideal or None, "c1", 0.1)
    prepared = asyncio.run(logger.prepare(occ))
    return logger.log(prepared).gap_id


def test_paraphrases_join_a_group_and_other_topics_start_one(store: Store) -> None:
    logger = GapLogger(store, embedder=TopicEmbedder())
    first = log(logger, store, "What is the boiling point of liquid nitrogen?", "About -196 C.")
    assert log(logger, store, "At what temperature does nitrogen boil?", "77 K.") == first
    other = log(logger, store, "How cold is liquid helium?")
    assert other != first
    groups = {g.gap_id: g for g in store.knowledge_gaps.listed(collection="kb")}
    assert groups[first].count == 2 and groups[other].count == 1
    assert groups[first].ideal_answers == ["About -196 C.", "77 K."]
    assert groups[first].embedder == "test:topics" and groups[first].vector is not None


def test_without_an_embedder_grouping_falls_back_to_shared_terms(store: Store) -> None:
    logger = GapLogger(store)
    first = log(logger, store, "Boiling point of liquid nitrogen at sea level?")
    assert log(logger, store, "liquid nitrogen boiling point, sea level") == first
    assert log(logger, store, "Who painted the Zorblat Bridge?") != first
    assert jaccard("liquid nitrogen boiling point", "boiling point of liquid nitrogen") == 1.0
    assert GROUP_COSINE > 0.8  # a high bar on purpose: two groups for one topic beat one for two


def test_template_questions_come_from_the_question_and_the_correction() -> None:
    got, by = asyncio.run(
        TemplateQuestions().write("What is the boiling point of liquid nitrogen?", ["Liquid nitrogen boils at 77 K."])
    )
    assert by == "template"
    assert got == [
        "What is the boiling point of liquid nitrogen?",
        "What are the key facts about boiling point liquid nitrogen?",
        "Is it true that liquid nitrogen boils at 77 K?",
    ]
    assert topic("Who designed the Quill Tower?") == "designed Quill Tower"
