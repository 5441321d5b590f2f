"""A labelled set for the failure classifier, built by injecting known failures into SQuAD 2.0 dev.

The label is the injected mechanism; the classifier sees only what production would see (the
question, the ideal answer, the served ranking and answer, the collection as it then is). Where
the answer is, the injector decides by the gold answer strings: an *answer-bearing* chunk holds
one of them (normalised, whole tokens, `contains_gold`). Each class, on a real pipeline (hybrid
retrieval, k = 5, the real embedder):

- retrieval_success: untouched; an answer-bearing chunk of the gold paragraph is in the top k.
- generation_failure: as success, but the answer is corrupted: the answer sentence with its
  answer swapped for another article's answer, a sentence from another article, or a faithful
  sentence followed by such a foreign one (in turn).
- ranking_failure: the gold chunk is at rank r in 2..100; k is cut to min(5, r - 1) (so natural
  rank > 5 cases keep k = 5); no answer-bearing chunk in the cut top k.
- embedding_failure: dense-only retrieval with noise added to the query vector
  (`NoisyQueryEmbedder`); no answer-bearing chunk in its top 100.
- knowledge_gap: the gold paragraph removed from the collection; kept only when no remaining
  chunk is answer-bearing (otherwise the removal made no gap).
- chunking_failure: the gold paragraph (holding its answer once) re-chunked into two chunks cut
  inside the answer sentence, between the answer and the side of the sentence holding more of
  the question's terms; kept when the served top k holds no other answer-bearing chunk.

Every other case of a class is served by the same edited collection, so a case never sees a
collection edited for another class. Answers of the non-generation classes come from
`extractive_answer`, a faithful stand-in for the generator (the best-overlapping sentence of
the top k, cited): generation is not what is measured here, the classifier is. Parts: dev =
even-numbered articles of the file, test = odd (whole articles apart, as in
benchmarks/retrieval_quality.py). Deterministic for a seed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ragloop.config.pipeline import RetrievalConfig
from ragloop.evaluation.datasets import SquadDataset, SquadQuestion
from ragloop.evaluation.metrics.answer import normalize_answer
from ragloop.improve.faults import NoisyQueryEmbedder, rechunked, without_documents
from ragloop.improve.oracle import join_adjacent, ranked_chunks
from ragloop.improve.types import FailureMode, RankedChunk
from ragloop.models.embedding import Embedder
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.retriever import Retriever
from ragloop.text.analysis import content_terms
from ragloop.text.sentences import split_strips

Part = Literal["dev", "test"]
BASE, GAP, RECHUNK = "base", "gap", "rechunk"
DEPTH = 100
CLASSES = tuple(FailureMode)


@dataclass(frozen=True)
class InjectedCase:
    """One labelled case. `label`, `answers` and `injection` are the injector's; the rest is
    what the classifier's inputs are built from."""

    case_id: str
    label: FailureMode
    part: Part
    question: str
    ideal_answer: str
    collection: str
    k: int
    retrieval: tuple[RankedChunk, ...]
    answer: str
    contexts: tuple[str, ...]
    answers: tuple[str, ...] = ()
    injection: str = ""
    answer_chunks: tuple[str, ...] = ()
    """The collection's answer-bearing chunks (for the report's analysis; never a classifier input)."""


@dataclass
class InjectedSet:
    cases: list[InjectedCase]
    collections: dict[str, Collection]
    dropped: dict[str, int] = field(default_factory=dict)
    """Candidates the verification rejected, per class (the injection did not cause the failure)."""


def extractive_answer(question: str, contexts: Sequence[str]) -> str:
    """The context sentence sharing most content terms with the question (earliest on ties),
    with its citation: a faithful answer, right or wrong."""
    terms = content_terms(question)
    best: tuple[int, int, str] = (-1, 0, "")
    for n, text in enumerate(contexts, start=1):
        for s in split_strips(text):
            overlap = len(terms & content_terms(s.text))
            if overlap > best[0]:
                best = (overlap, n, s.text)
    if best[0] < 0:
        return "I don't know based on the provided documents."
    sentence = best[2].rstrip()
    return f"{sentence.rstrip('.')} [{best[1]}]."


def answer_sentence(text: str, answer: str) -> tuple[int, int, int, int] | None:
    """(sentence start, sentence end, answer start, answer end) of the first occurrence of
    `answer` in `text`, or None."""
    at = text.find(answer)
    if at < 0:
        at = text.lower().find(answer.lower())
    if at < 0 or not answer.strip():
        return None
    for s in split_strips(text):
        if s.start <= at < s.end:
            return s.start, s.end, at, at + len(answer)
    return None


def _count(text: str, q: SquadQuestion) -> int:
    """Occurrences of the question's first answer in `text`, ignoring case."""
    return text.lower().count(q.answers[0].lower())


def cut_offset(text: str, answer: str, question: str, min_words: int = 3) -> int | None:
    """Where to cut `text` so its answer sentence crosses the boundary with the answer on one
    side and the words that tie it to the question on the other: before the answer when the
    sentence's part before it holds at least as many of the question's content terms as the
    part after, else after it. None when that side has fewer than `min_words` words or none of
    the question's terms (the cut would not separate anything)."""
    found = answer_sentence(text, answer)
    if found is None:
        return None
    s_start, s_end, a_start, a_end = found
    terms = content_terms(question)
    head, tail = text[s_start:a_start], text[a_end:s_end]
    before = (len(terms & content_terms(head)), len(head.split()))
    after = (len(terms & content_terms(tail)), len(tail.split()))
    if before[0] >= after[0]:
        if before[0] and before[1] >= min_words and a_start > 0 and text[a_start - 1].isspace():
            return a_start
        return None
    if after[1] >= min_words:
        m = re.match(r"[^\s]*\s", text[a_end:])
        return a_end + (m.end() if m else 0)
    return None


_NON_WORD = re.compile(r"[^\w\s]")


def _words(text: str) -> str:
    """`normalize_answer` with punctuation turned into spaces first (a word boundary, not glue)."""
    return normalize_answer(_NON_WORD.sub(" ", text))


class SquadInjector:
    def __init__(
        self,
        base: Collection,
        dataset: SquadDataset,
        embedder: Embedder,
        *,
        per_class: int = 60,
        k: int = 5,
        sigma: float = 10.0,
        seed: int = 12,
    ) -> None:
        """`per_class`: cases per class and part before verification; `sigma`: the query
        noise of the embedding-failure injection (relative to the unit vector)."""
        self.base = base
        self.dataset = dataset
        self.embedder = embedder
        self.per_class = per_class
        self.k = k
        self.sigma = sigma
        self.seed = seed
        gen = base.load()
        self.gen = gen
        self._pid_of = [dataset.passage_id(c.doc_id) for c in gen.chunks]
        self._doc_of_pid = {pid: c.doc_id for pid, c in zip(self._pid_of, gen.chunks, strict=True)}
        self._text_of_pid: dict[str, str] = {}
        for pid, c in zip(self._pid_of, gen.chunks, strict=True):
            prev = self._text_of_pid.get(pid)
            self._text_of_pid[pid] = c.text if prev is None else join_adjacent(prev, c.text)[0]
        cfg = RetrievalConfig(use_expansion_cache=False)
        self.hybrid = Retriever(base, cfg, embedder=embedder)
        self.noisy = Retriever(
            base,
            RetrievalConfig(mode="dense", use_expansion_cache=False),
            embedder=NoisyQueryEmbedder(embedder, sigma, salt=seed),
        )
        self._config = cfg
        self._norm: dict[str, str] = {}

    # helpers --------------------------------------------------------------------------------------
    def _bearing(self, text: str, q: SquadQuestion) -> bool:
        """Does the text hold a gold answer as words (`contains_gold` with punctuation as a word
        boundary, the text's normalisation memoised)? SQuAD's normalisation deletes punctuation, so
        "a political focus.[citation]" reads "political focuscitation" and would hide the answer
        "political focus": a ranking-failure case whose top k still held the answer was kept."""
        norm = self._norm.get(text)
        if norm is None:
            norm = self._norm[text] = f" {_words(text)} "
        return any(g and f" {g} " in norm for g in (_words(a) for a in q.answers))

    def _gold_rank(self, ranked: Sequence[RankedChunk], q: SquadQuestion, texts: dict[str, str]) -> int | None:
        doc = self._doc_of_pid.get(q.paragraph_id)
        return next(
            (h.rank for h in ranked if h.doc_id == doc and self._bearing(texts[h.chunk_id], q)),
            None,
        )

    def _case(
        self, label: FailureMode, part: Part, q: SquadQuestion, coll: str, k: int, ranked: Sequence[RankedChunk],
        texts: dict[str, str], answer: str | None = None, injection: str = "",
    ) -> InjectedCase:  # fmt: skip
        contexts = tuple(texts[h.chunk_id] for h in ranked if h.rank <= k)
        return InjectedCase(
            case_id=f"{label.value}:{q.qid}",
            label=label,
            part=part,
            question=q.question,
            ideal_answer=q.answers[0],
            collection=coll,
            k=k,
            retrieval=tuple(ranked),
            answer=answer if answer is not None else extractive_answer(q.question, contexts),
            contexts=contexts,
            answers=q.answers,
            injection=injection,
            answer_chunks=tuple(cid for cid, t in texts.items() if self._bearing(t, q)),
        )

    def _corrupt(
        self, i: int, q: SquadQuestion, contexts: Sequence[str], foreign: Sequence[SquadQuestion]
    ) -> tuple[str, str]:
        """(corrupted answer, how) for generation-failure case number `i`."""
        other = foreign[(i * 7919) % len(foreign)]
        other_text = self._text_of_pid[other.paragraph_id]
        other_sentences = [s.text for s in split_strips(other_text)] or [other_text]
        alien = other_sentences[(i * 31) % len(other_sentences)].rstrip(".")
        kind = i % 3
        gold = self._text_of_pid[q.paragraph_id]
        found = answer_sentence(gold, q.answers[0])
        if kind == 0 and found is not None and other.answers:
            s_start, s_end, a_start, a_end = found
            swapped = gold[s_start:a_start] + other.answers[0] + gold[a_end:s_end]
            return f"{swapped.rstrip('.')} [1].", f"answer '{q.answers[0]}' swapped for '{other.answers[0]}'"
        if kind == 1:
            return f"{alien} [1].", "a sentence from another article"
        faithful = extractive_answer(q.question, contexts)
        return f"{faithful} {alien} [2].", "a faithful sentence followed by one from another article"

    # the set ------------------------------------------------------------------------------------
    def build(self) -> InjectedSet:
        ds = self.dataset
        articles = list(dict.fromkeys(q.title for q in ds.questions))
        part_of: dict[str, Part] = {t: ("dev" if i % 2 == 0 else "test") for i, t in enumerate(articles)}
        texts = {c.chunk_id: c.text for c in self.gen.chunks}
        rng = np.random.default_rng(self.seed)
        cases: list[InjectedCase] = []
        gap_q: list[tuple[Part, SquadQuestion]] = []
        cut_q: list[tuple[Part, SquadQuestion, int]] = []
        answerable = [q for q in ds.answerable() if q.paragraph_id in self._doc_of_pid and q.answers]
        for part in ("dev", "test"):
            pool = [q for q in answerable if part_of[q.title] == part]
            order = rng.permutation(len(pool))
            counts = dict.fromkeys(CLASSES, 0)
            quota = {c: self.per_class for c in CLASSES}
            quota[FailureMode.CHUNKING_FAILURE] = int(self.per_class * 1.3)  # verification drops some
            used_gap: set[str] = set()
            used_cut: set[str] = set()
            for j in order:
                q = pool[int(j)]
                open_classes = [c for c in CLASSES if counts[c] < quota[c]]
                if not open_classes:
                    break
                ranked = ranked_chunks(self.hybrid.retrieve(q.question, DEPTH))
                r = self._gold_rank(ranked, q, texts)
                # every injection but ranking's starts from a healthy case: the untouched pipeline
                # has the answer in its top k, so the failure is the injected one
                healthy = r is not None and r <= self.k
                eligible: list[FailureMode] = []
                if healthy:
                    eligible += [FailureMode.RETRIEVAL_SUCCESS, FailureMode.GENERATION_FAILURE]
                    eligible.append(FailureMode.EMBEDDING_FAILURE)  # verified below
                if r is not None and r >= 2:
                    k_cut = min(self.k, r - 1)
                    if not any(self._bearing(texts[h.chunk_id], q) for h in ranked if h.rank <= k_cut):
                        eligible.append(FailureMode.RANKING_FAILURE)
                gold_doc = self._doc_of_pid[q.paragraph_id]
                if (
                    healthy
                    and q.paragraph_id not in used_gap
                    and not any(self._bearing(c.text, q) for c in self.gen.chunks if c.doc_id != gold_doc)
                ):
                    eligible.append(FailureMode.KNOWLEDGE_GAP)
                para = self._text_of_pid[q.paragraph_id]
                offset = cut_offset(para, q.answers[0], q.question)
                # the answer once in its paragraph: no other sentence of either half can carry it
                if healthy and q.paragraph_id not in used_cut and offset is not None and _count(para, q) == 1:
                    eligible.append(FailureMode.CHUNKING_FAILURE)
                choice = sorted(
                    (c for c in eligible if c in open_classes), key=lambda c: (counts[c] / quota[c], CLASSES.index(c))
                )
                for label in choice:
                    if label is FailureMode.EMBEDDING_FAILURE:
                        noisy = ranked_chunks(self.noisy.retrieve(q.question, DEPTH))
                        if any(self._bearing(texts[h.chunk_id], q) for h in noisy):
                            continue
                        cases.append(
                            self._case(
                                label, part, q, BASE, self.k, noisy, texts, injection=f"query noise sigma={self.sigma}"
                            )
                        )
                    elif label is FailureMode.RETRIEVAL_SUCCESS:
                        cases.append(self._case(label, part, q, BASE, self.k, ranked, texts, injection="untouched"))
                    elif label is FailureMode.GENERATION_FAILURE:
                        ctx = [texts[h.chunk_id] for h in ranked if h.rank <= self.k]
                        foreign = [f for f in answerable if f.title != q.title]
                        ans, how = self._corrupt(counts[label], q, ctx, foreign)
                        cases.append(self._case(label, part, q, BASE, self.k, ranked, texts, answer=ans, injection=how))
                    elif label is FailureMode.RANKING_FAILURE:
                        assert r is not None
                        k_cut = min(self.k, r - 1)
                        cases.append(
                            self._case(
                                label, part, q, BASE, k_cut, ranked, texts, injection=f"gold at rank {r}, k={k_cut}"
                            )
                        )
                    elif label is FailureMode.KNOWLEDGE_GAP:
                        gap_q.append((part, q))
                        used_gap.add(q.paragraph_id)
                    else:
                        assert offset is not None
                        cut_q.append((part, q, offset))
                        used_cut.add(q.paragraph_id)
                    counts[label] += 1
                    break
        return self._finish(cases, gap_q, cut_q)

    def _finish(
        self,
        cases: list[InjectedCase],
        gap_q: list[tuple[Part, SquadQuestion]],
        cut_q: list[tuple[Part, SquadQuestion, int]],
    ) -> InjectedSet:
        """Build the two edited collections and serve their cases from them."""
        gap = without_documents(
            self.base, [self._doc_of_pid[q.paragraph_id] for _, q in gap_q], f"{self.base.name}.gap"
        )
        cuts = {self._doc_of_pid[q.paragraph_id]: (self._text_of_pid[q.paragraph_id], off) for _, q, off in cut_q}
        cut = rechunked(self.base, cuts, self.embedder, f"{self.base.name}.rechunk")
        dropped = dict.fromkeys([c.value for c in CLASSES], 0)
        served = Retriever(gap, self._config, embedder=self.embedder)
        gap_texts = {c.chunk_id: c.text for c in gap.load().chunks}
        for part, q in gap_q:
            ranked = ranked_chunks(served.retrieve(q.question, DEPTH))
            cases.append(
                self._case(
                    FailureMode.KNOWLEDGE_GAP,
                    part,
                    q,
                    GAP,
                    self.k,
                    ranked,
                    gap_texts,
                    injection="gold paragraph removed",
                )
            )
        served = Retriever(cut, self._config, embedder=self.embedder)
        cut_texts = {c.chunk_id: c.text for c in cut.load().chunks}
        kept: dict[Part, int] = {"dev": 0, "test": 0}
        for part, q, off in cut_q:
            if kept[part] >= self.per_class:
                continue
            doc = self._doc_of_pid[q.paragraph_id]
            ranked = ranked_chunks(served.retrieve(q.question, DEPTH))
            top = [h for h in ranked if h.rank <= self.k]
            others = [h for h in top if h.doc_id != doc and self._bearing(cut_texts[h.chunk_id], q)]
            if others:
                dropped[FailureMode.CHUNKING_FAILURE.value] += 1
                continue
            kept[part] += 1
            cases.append(
                self._case(
                    FailureMode.CHUNKING_FAILURE,
                    part,
                    q,
                    RECHUNK,
                    self.k,
                    ranked,
                    cut_texts,
                    injection=f"cut at character {off}",
                )
            )
        return InjectedSet(cases, {BASE: self.base, GAP: gap, RECHUNK: cut}, dropped)
