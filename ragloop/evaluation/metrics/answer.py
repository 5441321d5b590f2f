"""Answer metrics: string-match scores (SQuAD EM/F1, token F1, answer-contains-gold), the RAGAS
formulas computed through the `Scorer` interface (faithfulness, answer relevancy, context
precision@K, context recall), citation precision/recall and judged context sufficiency.

The RAGAS metrics (Es et al. 2023, and the `ragas` library's definitions) need an LLM for two
steps: splitting text into claims, and generating questions from an answer. Here:

- claims are the sentences of the text (citation markers removed, fragments under
  `MIN_CLAIM_WORDS` words dropped) — offline and with a judge alike;
- a claim is *supported* by a context when the judge's `support(claim, context)` is >= 0.5;
- a chunk is *relevant* when the judge's `relevance(query, chunk)` is >= 0.5;
- answer relevancy's generated questions come from a chat model when one is given; offline the
  answer's claims stand in for them and the judge's relevance probability stands in for the
  cosine similarity (see `answer_relevancy`).

So the same formulas run offline with the offline scorers (uncalibrated as judges: every report
says so until `ragloop eval calibrate` has been run) and with an `llm:` judge when configured.
Every function returns a float in [0, 1] or None when the metric is undefined for the item
(no claims, a refusal, no reference).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ragloop.models.scoring.base import Scorer
from ragloop.text.sentences import split_sentences

CITE = re.compile(r"\s*\[(\d+)\]")
NOTE_SEP = "\n\nNote: "
SUPPORT_THRESHOLD = 0.5
RELEVANCE_THRESHOLD = 0.5
MIN_CLAIM_WORDS = 3

# -- SQuAD-style string metrics ------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """The official SQuAD v2 normalisation: lower case, drop punctuation, drop the articles
    a/an/the, collapse whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _tokens(text: str) -> list[str]:
    return normalize_answer(text).split()


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD token F1 on normalised tokens; both empty -> 1, one empty -> 0."""
    pred, ref = _tokens(prediction), _tokens(gold)
    if not pred or not ref:
        return float(pred == ref)
    common = Counter(pred) & Counter(ref)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred)
    recall = same / len(ref)
    return 2 * precision * recall / (precision + recall)


def max_over_golds(fn: object, prediction: str, golds: Sequence[str]) -> float:
    assert callable(fn)
    return max((float(fn(prediction, g)) for g in golds), default=0.0)


def contains_gold(prediction: str, golds: Sequence[str]) -> float:
    """1 when some normalised gold answer occurs in the normalised prediction as whole tokens."""
    pred = f" {normalize_answer(prediction)} "
    return float(any(normalize_answer(g) and f" {normalize_answer(g)} " in pred for g in golds))


@dataclass(frozen=True)
class SquadScores:
    exact: float
    f1: float
    contains: float


def squad_scores(prediction: str, refused: bool, golds: Sequence[str], is_impossible: bool) -> SquadScores:
    """SQuAD 2.0 scoring of one question, with a refusal read as the empty ("no answer")
    prediction: on an unanswerable question a refusal scores EM = F1 = 1 and an answer 0; on an
    answerable one a refusal scores 0 and an answer max over the gold answers."""
    if is_impossible:
        v = 1.0 if refused else 0.0
        return SquadScores(v, v, v)
    if refused:
        return SquadScores(0.0, 0.0, 0.0)
    text = strip_citations(answer_body(prediction))
    return SquadScores(
        max_over_golds(exact_match, text, golds),
        max_over_golds(token_f1, text, golds),
        contains_gold(text, golds),
    )


# -- claims ----------------------------------------------------------------------------------------


def answer_body(answer: str) -> str:
    """The answer without the appended "Note: ..." about residual deficiencies."""
    return answer.split(NOTE_SEP, 1)[0].strip()


def strip_citations(text: str) -> str:
    return " ".join(CITE.sub("", text).split())


def claims(text: str) -> list[str]:
    """The claim sentences of a text: citation markers removed, fragments of fewer than
    `MIN_CLAIM_WORDS` words dropped."""
    out = []
    for s in split_sentences(answer_body(text)):
        clean = strip_citations(s).strip()
        if len(clean.split()) >= MIN_CLAIM_WORDS:
            out.append(clean)
    return out


def cited_sentences(text: str) -> list[tuple[str, list[int]]]:
    """(claim sentence without markers, citation numbers in it) for each claim sentence."""
    out = []
    for s in split_sentences(answer_body(text)):
        clean = strip_citations(s).strip()
        if len(clean.split()) >= MIN_CLAIM_WORDS:
            out.append((clean, [int(n) for n in CITE.findall(s)]))
    return out


def reference_claims(reference: str, question: str = "") -> list[str]:
    """Claims of a reference answer. A short span (SQuAD's "France") is not a claim on its own:
    it is read together with its question ("In what country is Normandy located? France")."""
    ref = reference.strip()
    if not ref:
        return []
    if len(ref.split()) < 5 and question:
        return [f"{question.strip()} {ref}"]
    return claims(ref) or [ref]


# -- RAGAS through the scorer interface -----------------------------------------------------------


async def _supported(judge: Scorer, statements: Sequence[str], context: str) -> list[float]:
    if not statements:
        return []
    judged = await judge.support(list(statements), [context] * len(statements))
    return [float(j.p) for j in judged]


async def faithfulness(judge: Scorer, answer: str, contexts: Sequence[str]) -> float | None:
    """|claims of the answer supported by the context| / |claims|; the context is the
    concatenation of the passages the answer was generated from. None without claims."""
    cs = claims(answer)
    if not cs or not contexts:
        return None if not cs else 0.0
    ps = await _supported(judge, cs, "\n\n".join(contexts))
    return sum(p >= SUPPORT_THRESHOLD for p in ps) / len(cs)


async def answer_relevancy(
    judge: Scorer,
    question: str,
    answer: str,
    *,
    generated_questions: Sequence[str] | None = None,
    embed: object | None = None,
) -> float | None:
    """RAGAS answer relevancy: mean over N questions generated from the answer of
    cos(E(generated), E(question)).

    With `generated_questions` and `embed` (a callable texts -> unit vectors) this is exactly
    the RAGAS formula. Offline there is no question generator: each answer claim stands in for
    a generated question and the judge's calibrated relevance P(claim answers question) stands
    in for the cosine, so the metric reads "how much of the answer is about the question"."""
    if generated_questions and embed is not None:
        assert callable(embed)
        vecs = np.asarray(embed([question, *generated_questions]), dtype=np.float64)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        vecs = vecs / np.where(norms > 0, norms, 1.0)
        return float(np.mean(vecs[1:] @ vecs[0]))
    cs = claims(answer)
    if not cs:
        return None
    judged = await judge.relevance(question, cs)
    return float(np.mean([j.p for j in judged]))


async def chunk_relevance(judge: Scorer, query: str, chunks: Sequence[str]) -> list[bool]:
    if not chunks:
        return []
    judged = await judge.relevance(query, list(chunks))
    return [j.p >= RELEVANCE_THRESHOLD for j in judged]


def context_precision_from(relevant: Sequence[bool], k: int | None = None) -> float | None:
    """RAGAS context precision@K = sum_{k<=K} (precision@k * v_k) / |relevant in top K|, v_k the
    0/1 relevance of the chunk at rank k: 1 when every relevant chunk precedes every irrelevant
    one, lower the later the relevant ones come; 0 when none is relevant."""
    top = list(relevant)[:k] if k else list(relevant)
    if not top:
        return None
    hits = 0
    total = 0.0
    for i, v in enumerate(top, start=1):
        if v:
            hits += 1
            total += hits / i
    return total / hits if hits else 0.0


async def context_precision(
    judge: Scorer, question: str, ranked_contexts: Sequence[str], k: int | None = None, reference: str = ""
) -> float | None:
    """Context precision@K with chunk relevance judged against the question (and the reference
    answer when there is one: the query is "question reference")."""
    query = f"{question} {reference}".strip() if reference else question
    top = list(ranked_contexts)[:k] if k else list(ranked_contexts)
    return context_precision_from(await chunk_relevance(judge, query, top))


async def context_recall(judge: Scorer, reference: str, contexts: Sequence[str], question: str = "") -> float | None:
    """|claims of the reference answer supported by the context| / |reference claims|.
    None without a reference; 0 with no context."""
    ref = reference_claims(reference, question)
    if not ref:
        return None
    if not contexts:
        return 0.0
    ps = await _supported(judge, ref, "\n\n".join(contexts))
    return sum(p >= SUPPORT_THRESHOLD for p in ps) / len(ref)


# -- citations ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CitationScores:
    precision: float | None
    """supporting (sentence, citation) pairs / all pairs whose citation resolves to a chunk."""
    recall: float | None
    """claim sentences with at least one supporting citation / all claim sentences."""
    pairs: int
    sentences: int


async def citation_scores(judge: Scorer, answer: str, cited_text: dict[int, str]) -> CitationScores:
    """`cited_text` maps citation number -> the cited chunk's text. A marker with no chunk is an
    unsupported pair (it counts against precision)."""
    sents = cited_sentences(answer)
    if not sents:
        return CitationScores(None, None, 0, 0)
    pairs = [(i, s, n) for i, (s, ns) in enumerate(sents) for n in ns]
    known = [(i, s, n) for i, s, n in pairs if n in cited_text]
    ps = (
        [float(j.p) for j in await judge.support([s for _, s, _ in known], [cited_text[n] for _, _, n in known])]
        if known
        else []
    )
    good = {(i, n) for (i, _, n), p in zip(known, ps, strict=True) if p >= SUPPORT_THRESHOLD}
    precision = len(good) / len(pairs) if pairs else None
    recall = len({i for i, _ in good}) / len(sents)
    return CitationScores(precision, recall, len(pairs), len(sents))


async def context_sufficiency(judge: Scorer, question: str, contexts: Sequence[str]) -> float | None:
    """Retrieval precision as a judge sees it: 1 when the judge finds at least one context chunk
    that answers the question (relevance >= 0.5), else 0; None with no context."""
    if not contexts:
        return None
    return float(any(await chunk_relevance(judge, question, contexts)))


@dataclass(frozen=True)
class Correctness:
    recall: float
    """Reference claims supported by the answer / reference claims: does the answer say what the
    reference says? The judged correctness: correct when >= 0.5."""
    precision: float | None
    """Answer claims supported by the reference / answer claims (None: no answer claim)."""

    @property
    def f1(self) -> float:
        """RAGAS answer correctness (its factual part): F1 of the two."""
        p, r = self.precision or 0.0, self.recall
        return 0.0 if p + r == 0 else 2 * p * r / (p + r)


async def correctness(judge: Scorer, answer: str, reference: str, question: str = "") -> Correctness | None:
    """Claim-level agreement of an answer with the reference answer, through the judge. None
    without a reference or an answer."""
    body = strip_citations(answer_body(answer))
    ref = reference_claims(reference, question)
    if not ref or not body:
        return None
    recall_ps = await _supported(judge, ref, body)
    ans = claims(answer)
    precision_ps = await _supported(judge, ans, reference) if ans else []
    return Correctness(
        sum(p >= SUPPORT_THRESHOLD for p in recall_ps) / len(ref),
        sum(p >= SUPPORT_THRESHOLD for p in precision_ps) / len(ans) if ans else None,
    )


async def judge_correct(judge: Scorer, answer: str, reference: str, question: str = "") -> float | None:
    """The judged correctness score: the share of reference claims the answer supports."""
    c = await correctness(judge, answer, reference, question)
    return None if c is None else c.recall
