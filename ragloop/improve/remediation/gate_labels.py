"""Labelled gate scores for the τL refit, from every label a collection's traffic carries.

The gate refuses an answer when its best grade is below τL. To choose τL we need, per answer, the
gate's score and two facts: would *answering* have been right (`answer_right`) and would *refusing*
have been right (`refusal_right`). Each label source tells part of that:

| label | served answered | served refused |
|---|---|---|
| user rating positive | answer right, refusal wrong | refusal right, answer wrong |
| user rating negative | answer wrong, refusal ? | refusal wrong, answer ? |
| correction / relevant documents | refusal wrong (it is answerable) | refusal wrong |
| reviewer: knowledge_gap, `unanswerable` | refusal right, answer wrong | same |
| reviewer: another failure mode, `incorrect` | answer wrong (refusal wrong if a mode) | refusal wrong |
| reviewer: `correct` | answer right, refusal wrong | refusal right, answer wrong |
| reviewer: a corrected answer | refusal wrong | refusal wrong |
| diagnosis: knowledge_gap | refusal right, answer wrong | same |
| diagnosis: another mode | refusal wrong | refusal wrong |

Several labels on one answer are combined by weight (a rating's weight is the feedback row's:
explicit feedback counts more than one automatic verdict; a reviewer counts 3, a diagnosis 1).
A "?" is **imputed** from the answers whose fact is known, nearest in gate score (`impute`): a
wrong answer at score s would have been rightly refused about as often as the wrong answers near s
whose answerability is known; an answerable question refused at s would have been answered right
about as often as answerable questions answered near s were. So a negative rating on a refusal is
not assumed to be a missed right answer, nor a negative rating on an answer a question that should
have been refused. With no known neighbours the prior is 0.5.

Every sample says which sources labelled it (`label_source`), so the fit's audit entry lists them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragloop.improve.served import answer_collection
from ragloop.store import Store
from ragloop.store.vocabulary import FailureMode, Tier

REVIEW_WEIGHT = 3.0
DIAGNOSIS_WEIGHT = 1.0
NEIGHBOURS = 25
PRIOR = 0.5
GAP = FailureMode.KNOWLEDGE_GAP.value


@dataclass(frozen=True)
class Label:
    answer_right: bool | None
    refusal_right: bool | None
    source: str
    weight: float = 1.0


@dataclass(frozen=True)
class Labelled:
    """One answer's gate score and what its labels say (fractions in [0, 1]; None: not known)."""

    answer_id: str
    score: float
    refused: bool
    answer_right: float | None
    refusal_right: float | None
    sources: tuple[str, ...]


def rating_labels(rating: str, refused: bool, *, corrected: bool, documents: bool, weight: float) -> list[Label]:
    out = []
    if rating == "positive":
        out.append(Label(False, True, "rating", weight) if refused else Label(True, False, "rating", weight))
    elif rating == "negative":
        out.append(Label(None, False, "rating", weight) if refused else Label(False, None, "rating", weight))
    if corrected or documents:
        out.append(Label(None, False, "correction" if corrected else "documents", weight))
    return out


def review_labels(
    failure_mode: str | None, labels: Iterable[str], refused: bool, *, corrected: bool = False
) -> list[Label]:
    tags = {str(t).strip().lower() for t in labels}
    w = REVIEW_WEIGHT
    if failure_mode == GAP or tags & {"unanswerable", "should_refuse"}:
        return [Label(False, True, "reviewer", w)]
    out = []
    if failure_mode is not None:
        out.append(Label(None if refused else False, False, "reviewer", w))
    if "correct" in tags:
        out.append(Label(False, True, "reviewer", w) if refused else Label(True, False, "reviewer", w))
    if corrected:  # the reviewer wrote the right answer: the question is answerable
        out.append(Label(None, False, "reviewer", w))
    if "incorrect" in tags:
        out.append(Label(None, False, "reviewer", w) if refused else Label(False, None, "reviewer", w))
    if "answerable" in tags:
        out.append(Label(None, False, "reviewer", w))
    return out


def diagnosis_label(failure_mode: str) -> Label:
    if failure_mode == GAP:
        return Label(False, True, "diagnosis", DIAGNOSIS_WEIGHT)
    return Label(None, False, "diagnosis", DIAGNOSIS_WEIGHT)


def combine(labels: Sequence[Label]) -> tuple[float | None, float | None]:
    def vote(values: list[tuple[bool, float]]) -> float | None:
        total = sum(w for _, w in values)
        return None if total <= 0 else sum(w for v, w in values if v) / total

    a = [(bool(lb.answer_right), lb.weight) for lb in labels if lb.answer_right is not None]
    r = [(bool(lb.refusal_right), lb.weight) for lb in labels if lb.refusal_right is not None]
    return vote(a), vote(r)


def _near(scores: np.ndarray, values: np.ndarray, weights: np.ndarray, score: float, k: int) -> float:
    """Weighted mean of `values` over the `k` nearest in score among those with weight > 0."""
    keep = weights > 0
    scores, values, weights = scores[keep], values[keep], weights[keep]
    if len(scores) == 0:
        return PRIOR
    idx = np.argsort(np.abs(scores - score), kind="stable")[:k]
    w = weights[idx]
    return PRIOR if w.sum() <= 0 else float((values[idx] * w).sum() / w.sum())


def impute(samples: Sequence[Labelled], k: int = NEIGHBOURS) -> list[tuple[float, float]]:
    """(answer_right, refusal_right) for each sample, unknowns filled from known neighbours in score.

    First `refusal_right` of a wrong answer: the share of rightly refusable ones among the `k` wrong
    answers (or refusals whose answer is known wrong) nearest in score whose answerability is known.
    Then `answer_right` of an answerable refusal: among the `k` answers nearest in score whose
    correctness is known, the share that were right, each weighted by how likely its question was
    answerable (1 - refusal_right), so wrong answers to unanswerable questions do not count."""
    score = np.array([s.score for s in samples], dtype=np.float64)
    known_r = np.array([s.refusal_right is not None and s.answer_right == 0 for s in samples], dtype=bool)
    r_val = np.array([s.refusal_right if s.refusal_right is not None else 0.0 for s in samples], dtype=np.float64)
    r_fill = np.array(
        [
            s.refusal_right
            if s.refusal_right is not None
            else _near(score[known_r], r_val[known_r], np.ones(int(known_r.sum())), s.score, k)
            for s in samples
        ],
        dtype=np.float64,
    )
    known_a = np.array([s.answer_right is not None for s in samples], dtype=bool)
    a_val = np.array([s.answer_right if s.answer_right is not None else 0.0 for s in samples], dtype=np.float64)
    out = []
    for i, s in enumerate(samples):
        a = (
            s.answer_right
            if s.answer_right is not None
            else _near(score[known_a], a_val[known_a], 1.0 - r_fill[known_a], s.score, k)
        )
        out.append((float(a), float(r_fill[i])))
    return out


def labelled_answers(
    store: Store, collection: str, gate_score: Callable[[dict[str, Any]], float | None], *, limit: int = 5000
) -> list[Labelled]:
    """Every labelled answer of the collection (answers whose collection was not recorded count too:
    a single-collection service), newest labels first, with its gate score (`gate_score(trace)`)."""
    from sqlalchemy import select

    from ragloop.store.models import Evaluation, UserFeedback

    feedback: dict[str, list[UserFeedback]] = defaultdict(list)
    reviews: dict[str, list[Evaluation]] = defaultdict(list)
    with store.db.transaction(write=False) as s:
        for f in s.scalars(select(UserFeedback).order_by(UserFeedback.created_at.desc()).limit(limit)):
            feedback[f.answer_id].append(f)
        human = select(Evaluation).where(Evaluation.evaluation_tier == Tier.HUMAN.value)
        for r in s.scalars(human.order_by(Evaluation.evaluated_at.desc()).limit(limit)):
            reviews[r.answer_id].append(r)
    diagnosed = {
        d.answer_id: str(d.failure_mode)
        for d in store.diagnoses.listed(status="completed", collection=collection, limit=limit)
        if d.failure_mode
    }
    out: list[Labelled] = []
    for answer_id in dict.fromkeys([*feedback, *reviews, *diagnosed]):
        if answer_id not in diagnosed and answer_collection(store, answer_id) not in (None, collection):
            continue
        answer = store.queries.get_answer(answer_id)
        score = gate_score(answer.trace or {}) if answer is not None else None
        if answer is None or score is None:
            continue
        refused = bool(answer.refused)
        found: list[Label] = []
        for f in feedback[answer_id]:
            found += rating_labels(
                f.rating,
                refused,
                corrected=bool(f.corrected_answer),
                documents=bool(f.relevant_doc_ids),
                weight=float(f.weight or 1.0),
            )
        for r in reviews[answer_id]:
            ev = r.failure_evidence or {}
            corrected = bool(ev.get("corrected_answer"))
            found += review_labels(r.failure_mode, ev.get("labels") or (), refused, corrected=corrected)
        if answer_id in diagnosed:
            found.append(diagnosis_label(diagnosed[answer_id]))
        answer_right, refusal_right = combine(found)
        if answer_right is None and refusal_right is None:
            continue
        out.append(
            Labelled(
                answer_id=answer_id,
                score=min(1.0, max(0.0, float(score))),
                refused=refused,
                answer_right=answer_right,
                refusal_right=refusal_right,
                sources=tuple(sorted({lb.source for lb in found})),
            )
        )
    return out
