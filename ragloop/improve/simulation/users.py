"""Simulated users and the simulated reviewer: what they decide from an answer and the gold label.

A user rates a share of answers (`rate_share`, 30% by default): positive when the answer is right,
negative when it is wrong, when an answerable question was refused, or when an unanswerable one was
answered. "Right" is the evaluation harness's own `answer_correct` (a gold span contained in the
answer; for a reference in words, token F1 >= 0.5), so users and the measurement agree on what
correct means. Of the ratings, `correction_share` (5%) come with a correction (the reference answer)
or, for a wrong retrieval, the relevant document; `flip_share` of ratings are flipped (noise: 10% by
default, 50% is the adversarial run). The reviewer scores a tier-3 item from the same gold, with the
same flip noise, at `reviews_per_day` a simulated day; an answer it marks wrong to a question the gold
says should be refused is labelled `unanswerable`, a wrong one to an answerable question gets the
reference as its correction.

All draws come from one seeded generator per simulation arm, so a rerun makes the same decisions.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from ragloop.evaluation.metrics.item import answer_correct
from ragloop.evaluation.suites import EvalItem


@dataclass(frozen=True)
class UserModel:
    rate_share: float = 0.30
    correction_share: float = 0.05
    flip_share: float = 0.10
    reviews_per_day: int = 20


def served_right(item: EvalItem, answer: dict[str, Any]) -> bool:
    """Was the served answer right for this gold item (refusing an unanswerable question is right)?"""
    refused = bool(answer.get("refused"))
    if item.should_refuse:
        return refused
    if item.kind == "underspecified":
        return refused  # the right reply asks back; an answer is a guess
    rec = {"refused": refused, "answer": answer.get("answer", ""), "answers": list(item.answers)}
    rec["reference"] = item.reference
    return bool(answer_correct(rec))


def doc_passage(doc_id: str, prefix: str) -> str:
    return doc_id[len(prefix) :] if prefix and doc_id.startswith(prefix) else doc_id


class Users:
    def __init__(self, model: UserModel, seed: int, doc_prefix: str) -> None:
        self.model = model
        self.rng = random.Random(f"users:{seed}")
        self.doc_prefix = doc_prefix
        self.counts = {"answers": 0, "rated": 0, "flipped": 0, "corrections": 0, "documents": 0, "right": 0}

    def react(self, item: EvalItem, answer: dict[str, Any]) -> dict[str, Any] | None:
        """The feedback body this user sends for `answer`, or None (most users do not rate)."""
        right = served_right(item, answer)
        self.counts["answers"] += 1
        self.counts["right"] += right
        if self.rng.random() >= self.model.rate_share:
            return None
        self.counts["rated"] += 1
        positive = right
        if self.rng.random() < self.model.flip_share:
            positive = not positive
            self.counts["flipped"] += 1
        body: dict[str, Any] = {"rating": "positive" if positive else "negative"}
        if not positive and self.rng.random() < self.model.correction_share:
            cited = {doc_passage(str(c.get("doc_id", "")), self.doc_prefix) for c in answer.get("citations") or []}
            if item.gold_docs and not cited & set(item.gold_docs):
                body["relevant_doc_ids"] = [f"{self.doc_prefix}{d}" for d in item.gold_docs[:3]]
                body["issues"] = ["missing_context"]
                self.counts["documents"] += 1
            elif item.reference and not item.should_refuse:
                body["corrected_answer"] = item.reference
                body["issues"] = ["wrong_answer"]
                self.counts["corrections"] += 1
        return body

    def review(self, item: EvalItem, answer: dict[str, Any]) -> dict[str, Any]:
        """A reviewer's scores for a tier-3 item, from the gold with the same flip noise."""
        right = served_right(item, answer)
        if self.rng.random() < self.model.flip_share:
            right = not right
            self.counts["flipped"] += 1
        score = 1.0 if right else 0.0
        labels = ["correct" if right else "incorrect"]
        if not right and item.should_refuse and not answer.get("refused"):
            # the gold says the documents do not answer it: a reviewer who marks the answer wrong says
            # why (the review API's `unanswerable` label); without it answerability is known only for
            # answerable questions (from corrections) and the τL refit imputes the rest from them
            labels.append("unanswerable")
        body: dict[str, Any] = {
            "scores": {"faithfulness": score, "answer_relevance": score},
            "labels": labels,
            "notes": "simulated reviewer (scored from the gold label)",
        }
        if not right and item.reference and not item.should_refuse:
            body["corrected_answer"] = item.reference
        return body
