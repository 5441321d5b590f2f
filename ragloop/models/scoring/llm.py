"""`llm:<chat model>` scorer: P(yes) from the first token's log-probabilities, calibrated.

Each pair is one short request ("... Answer yes or no.", one token, top-k log-probabilities):
`P(yes) = mass(yes-like tokens) / (mass(yes-like) + mass(no-like))` over the first token's
top-k alternatives ("yes", " Yes", "YES", ... vs "no", ...). When one side is missing from the
top-k, its mass is bounded by the smallest listed probability. The feature is
`logit_p_yes`; `p` is a Platt map of it fitted on labelled pairs and shipped per model
(`weights/llm-<provider>-<model>.json`). Small models say "yes" to almost everything
(Qwen 1.5B: 96.5% yes at 0.5 on SQuAD 2.0), so the raw 0.5 is never the boundary; a model
with no fitted calibration gets a prior that puts the boundary at raw P(yes) = 0.9.

A backend that returns no log-probabilities is asked for a structured verdict instead
(`{"supported": bool, "confidence": float}`), `p = confidence` or `1 - confidence`
(uncalibrated, marked `llm_verdict = 1`).

A model failure (invalid structured output after the repair attempt, a model error, no
yes/no token at all) never raises out of the scorer: that pair is scored by the `fallback`
scorer (lexical by default), marked `llm_failed = 1`, and counted (`llm_scorer_stats()`).
Blocked real calls and exhausted quotas are not failures of a pair: they propagate.

The batch API loops over requests (`concurrency` at a time): an LLM call per pair.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from ragloop.models.chat.base import ChatModel, ChatRequest, ChatResponse
from ragloop.models.errors import ModelError, QuotaExhaustedError, RealCallsBlockedError
from ragloop.models.scoring import lexical
from ragloop.models.scoring.base import Judgement, Scorer
from ragloop.models.scoring.calibration import LogisticModel, ScorerWeights, logit, platt, shipped_weights

Task = Literal["relevance", "support"]
Mode = Literal["auto", "logprobs", "verdict"]

YES_TOKENS = frozenset({"yes", "y", "true"})
NO_TOKENS = frozenset({"no", "n", "false"})
LOGIT_CLIP = 12.0
# No fitted calibration: the boundary at raw P(yes) = 0.9 (MODELS.md: Qwen 1.5B's cross-validated
# threshold on SQuAD 2.0 answerability), slope 1 in logit space.
PRIOR = platt("logit_p_yes", 1.0, -float(logit(0.9)))
MAX_CONTEXT_CHARS = 6000

REL_SYSTEM = (
    "You are a strict grader. You decide whether a passage contains the answer to a question. "
    "Answer with one word: yes or no."
)
REL_PROMPT = (
    "Passage:\n{passage}\n\nQuestion: {query}\n\nDoes the passage contain the answer to the question? Answer yes or no."
)
SUP_SYSTEM = (
    "You are a strict fact checker. You decide whether a claim is fully supported by a context. "
    "Answer with one word: yes or no."
)
SUP_PROMPT = (
    "Context:\n{context}\n\nClaim: {claim}\n\nIs every part of the claim supported by the context? Answer yes or no."
)
VERDICT_NOTE = (
    "\n\nReply with a JSON object: `supported` is true for yes and false for no, `confidence` is "
    "your confidence in that verdict between 0 and 1."
)


class Verdict(BaseModel):
    """The structured verdict asked for when log-probabilities are not available."""

    supported: bool
    confidence: float = Field(ge=0.0, le=1.0)


_lock = threading.Lock()
_stats: dict[str, Counter[str]] = {}


def _count(model: str, event: str) -> None:
    with _lock:
        _stats.setdefault(model, Counter())[event] += 1


def llm_scorer_stats() -> dict[str, dict[str, int]]:
    """Per chat model: `requested`, `logprobs`, `verdict`, `failed` pairs since the process started
    (or the last reset)."""
    with _lock:
        return {m: dict(c) for m, c in _stats.items()}


def reset_llm_scorer_stats() -> None:
    with _lock:
        _stats.clear()


def weights_name(chat_model_name: str) -> str:
    """`local:qwen2.5-coder-1.5b` -> `llm-local-qwen2.5-coder-1.5b` (the shipped file's stem)."""
    return "llm-" + chat_model_name.replace(":", "-").replace("/", "-")


def yes_probability(resp: ChatResponse) -> float | None:
    """yes / (yes + no) over the first token's top-k alternatives; None when neither appears."""
    probs = resp.first_token_probs()
    if not probs:
        return None

    def norm(token: str) -> str:
        return token.strip().lstrip("_▁Ġ").strip(".,!:").lower()

    yes = sum(p for t, p in probs.items() if norm(t) in YES_TOKENS)
    no = sum(p for t, p in probs.items() if norm(t) in NO_TOKENS)
    if yes == 0.0 and no == 0.0:
        return None
    floor = min(probs.values())
    yes, no = yes or floor, no or floor
    return yes / (yes + no)


class LLMFailure(Exception):
    """Internal: the reply carried no usable yes/no."""


def _clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_CONTEXT_CHARS else text[:MAX_CONTEXT_CHARS] + " ..."


class LLMScorer(Scorer):
    def __init__(
        self,
        model: ChatModel,
        *,
        weights: ScorerWeights | None = None,
        fallback: Scorer | None = None,
        mode: Mode = "auto",
        top_logprobs: int = 10,
        concurrency: int = 1,
        timeout_s: float | None = None,
        name: str = "",
    ) -> None:
        self.model = model
        self.name = name or f"llm:{model.name}"
        if weights is None:
            weights = shipped_weights(weights_name(model.name))
        self.weights = weights
        self._rel: LogisticModel = (weights.relevance if weights else None) or PRIOR
        self._sup: LogisticModel = (weights.support if weights else None) or PRIOR
        self.fallback: Scorer = fallback if fallback is not None else lexical.LexicalScorer()
        self.mode: Mode = mode
        self.top_logprobs = top_logprobs
        self.timeout_s = timeout_s
        self.concurrency = max(1, concurrency)

    # -- one pair ------------------------------------------------------------------------------

    def _request(self, task: Task, a: str, b: str, verdict: bool) -> ChatRequest:
        if task == "relevance":
            system, prompt = REL_SYSTEM, REL_PROMPT.format(passage=_clip(b), query=a.strip())
        else:
            system, prompt = SUP_SYSTEM, SUP_PROMPT.format(context=_clip(b), claim=a.strip())
        if verdict:
            return ChatRequest.user(
                prompt + VERDICT_NOTE,
                system=system,
                output_type=Verdict,
                max_tokens=64,
                timeout_s=self.timeout_s,
            )
        return ChatRequest.user(
            prompt, system=system, max_tokens=1, top_logprobs=self.top_logprobs, timeout_s=self.timeout_s
        )

    async def _raw_p(self, task: Task, a: str, b: str) -> tuple[float, bool]:
        """(raw P(yes), came from a verdict)."""
        if self.mode != "verdict":
            resp = await self.model.request(self._request(task, a, b, verdict=False))
            if resp.logprobs:
                p = yes_probability(resp)
                if p is None:
                    raise LLMFailure(f"no yes/no among the first token's alternatives: {resp.text!r}")
                _count(self.model.name, "logprobs")
                return p, False
            if self.mode == "logprobs":
                raise LLMFailure("the backend returned no log-probabilities")
            self.mode = "verdict"  # this backend has none: stop asking for them
        resp = await self.model.request(self._request(task, a, b, verdict=True))
        v = resp.parsed
        if not isinstance(v, Verdict):
            raise LLMFailure(f"no structured verdict in the reply: {resp.text!r}")
        _count(self.model.name, "verdict")
        conf = min(1.0, max(0.0, v.confidence))
        return (conf if v.supported else 1.0 - conf), True

    async def _judge(self, task: Task, a: str, b: str, sem: asyncio.Semaphore) -> Judgement | None:
        """None when the model failed (the caller falls back)."""
        async with sem:
            _count(self.model.name, "requested")
            try:
                p_raw, from_verdict = await self._raw_p(task, a, b)
            except (RealCallsBlockedError, QuotaExhaustedError):
                raise
            except (ModelError, LLMFailure):
                _count(self.model.name, "failed")
                return None
        z = float(min(LOGIT_CLIP, max(-LOGIT_CLIP, float(logit(p_raw)))))
        if from_verdict:
            p = p_raw
            feats = {"p_yes_raw": p_raw, "logit_p_yes": z, "llm_verdict": 1.0}
        else:
            model = self._rel if task == "relevance" else self._sup
            p = model.predict({"logit_p_yes": z})
            feats = {"p_yes_raw": p_raw, "logit_p_yes": z}
        if task == "relevance":
            _, evidence = lexical.relevance_features(a, b)
        else:
            _, evidence = lexical.support_features(a, b)
        return Judgement(float(p) if math.isfinite(p) else 0.0, evidence, feats)

    # -- batches -------------------------------------------------------------------------------

    async def _batch(self, task: Task, pairs: list[tuple[str, str]]) -> list[Judgement]:
        sem = asyncio.Semaphore(self.concurrency)  # per batch: a semaphore binds to one event loop
        got = await asyncio.gather(*(self._judge(task, a, b, sem) for a, b in pairs))
        failed = [i for i, j in enumerate(got) if j is None]
        out: list[Judgement | None] = list(got)
        if failed:
            if task == "relevance":
                fb = await self.fallback.relevance(pairs[0][0], [pairs[i][1] for i in failed])
            else:
                fb = await self.fallback.support([pairs[i][0] for i in failed], [pairs[i][1] for i in failed])
            for i, j in zip(failed, fb, strict=True):
                out[i] = Judgement(j.p, j.evidence, {**j.features, "llm_failed": 1.0})
        return [j for j in out if j is not None]

    async def relevance(self, query: str, passages: Sequence[str]) -> list[Judgement]:
        return await self._batch("relevance", [(query, p) for p in passages])

    async def support(self, claims: Sequence[str], contexts: Sequence[str]) -> list[Judgement]:
        if len(claims) != len(contexts):
            raise ValueError(f"support() is pairwise: {len(claims)} claims vs {len(contexts)} contexts")
        return await self._batch("support", list(zip(claims, contexts, strict=True)))
