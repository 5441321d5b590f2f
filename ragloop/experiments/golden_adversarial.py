"""Adversarial golden candidates, aimed at the coverage gaps (`golden_coverage`).

Seeds are the representatives of the uncovered query clusters, largest first, each with the
latest non-refused answer production served it (its text and cited documents), when there is one.
Four kinds of question, the ways a RAG pipeline is known to fail:

- **multi_document**: two seeds answered from different documents, asked as one question; the
  expected answer needs both (required docs: the union).
- **misleading**: a seed prefixed with a confident false premise (another seed's answer): the
  expected answer is the seed's own, unmoved by the premise.
- **negation**: "which statement is NOT correct" over the seed's answer and a distractor from
  another seed's answer; the expected answer names the distractor.
- **near_miss_entity**: a seed with one entity changed to a near miss (a number shifted by one, or
  a proper noun swapped for one from another seed): the documents do not answer it, so the
  proposed behaviour is a refusal (the `unanswerable` tag, empty expected answer).

With a chat model configured (`chat`), the model writes them from the same seeds (one structured
call per seed, JSON validated; a seed whose output fails validation falls back to the templates);
otherwise deterministic templates do, offline. Either way every result is only a *candidate*: the
proposed answer is built from the pipeline's own output or a template, so a reviewer must confirm
or rewrite it before it enters the set (`golden_review.approve`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, ValidationError

from ragloop.experiments.golden import UNANSWERABLE_TAG, without_citations
from ragloop.store.repositories.golden_candidates import Proposal
from ragloop.store.vocabulary import GoldenDifficulty, GoldenSource

if TYPE_CHECKING:
    from ragloop.experiments.golden_coverage import CoverageReport
    from ragloop.models.chat.base import ChatModel
    from ragloop.store import Store

Kind = Literal["multi_document", "misleading", "negation", "near_miss_entity"]
KINDS: tuple[Kind, ...] = ("multi_document", "misleading", "negation", "near_miss_entity")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_NUMBER = re.compile(r"\b\d{1,4}\b")
_PROPER = re.compile(r"(?<!^)(?<![.?!]\s)\b[A-Z][a-z]{2,}\b")


@dataclass(frozen=True)
class Seed:
    question: str
    answer: str | None = None
    doc_ids: tuple[str, ...] = ()
    chunk_ids: tuple[str, ...] = ()
    cluster_size: int = 1


@dataclass
class GenerationResult:
    generator: str
    proposals: list[Proposal] = field(default_factory=list)
    fallbacks: int = 0
    """Seeds a chat model failed on (templates wrote them instead)."""


def first_sentence(text: str, limit: int = 240) -> str:
    s = _SENTENCE.split(text.strip(), maxsplit=1)[0].strip()
    s = without_citations(s)  # citation markers belong to the served answer, not the premise
    return s if len(s) <= limit else s[: limit - 1].rstrip() + "…"


def _strip_q(q: str) -> str:
    return q.strip().rstrip("?").rstrip()


def _lower_first(q: str) -> str:
    return q[:1].lower() + q[1:] if q[:2] != q[:2].upper() else q


def _flip(key: str) -> bool:
    return hashlib.sha256(key.encode()).digest()[0] % 2 == 1


def _proposal(seed: Seed, kind: Kind, question: str, answer: str, **kw: Any) -> Proposal:
    tags = [f"adversarial:{kind}", *kw.pop("extra_tags", [])]
    return Proposal(
        question=question,
        proposed_answer=answer,
        source=GoldenSource.ADVERSARIAL,
        generator=kind,
        required_doc_ids=kw.pop("doc_ids", seed.doc_ids),
        required_chunk_ids=kw.pop("chunk_ids", seed.chunk_ids),
        difficulty=GoldenDifficulty.HARD,
        domain_tags=tags,
        evidence={"seed_question": seed.question, "cluster_size": seed.cluster_size, **kw},
    )


def near_miss(question: str, others: Sequence[str]) -> str | None:
    """`question` with one entity changed to a near miss, or None when it names none."""
    m = _NUMBER.search(question)
    if m:
        return question[: m.start()] + str(int(m.group()) + 1) + question[m.end() :]
    own = _PROPER.findall(question)
    if not own:
        return None
    pool = [w for o in others for w in _PROPER.findall(o) if w not in own]
    if not pool:
        return None
    swap = sorted(set(pool))[int(hashlib.sha256(question.encode()).hexdigest(), 16) % len(set(pool))]
    return re.sub(rf"\b{re.escape(own[0])}\b", swap, question, count=1)


def from_templates(seeds: Sequence[Seed], *, limit: int) -> list[Proposal]:
    """The offline generator: deterministic for the same seeds."""
    out: list[Proposal] = []
    answered = [s for s in seeds if s.answer]
    for i, seed in enumerate(seeds):
        if len(out) >= limit:
            break
        other = next((o for o in answered[i + 1 :] + answered[:i] if o is not seed and o.answer), None)
        if seed.answer and other is not None and other.answer:
            a, b = first_sentence(seed.answer), first_sentence(other.answer)
            if set(seed.doc_ids) != set(other.doc_ids):
                out.append(
                    _proposal(
                        seed,
                        "multi_document",
                        f"{_strip_q(seed.question)}, and {_lower_first(_strip_q(other.question))}?",
                        f"{seed.answer.strip()}\n\n{other.answer.strip()}",
                        doc_ids=tuple(dict.fromkeys([*seed.doc_ids, *other.doc_ids])),
                        chunk_ids=tuple(dict.fromkeys([*seed.chunk_ids, *other.chunk_ids])),
                        second_question=other.question,
                    )
                )
            out.append(
                _proposal(
                    seed,
                    "misleading",
                    f'I was told that "{b}" Given that, {_lower_first(_strip_q(seed.question))}?',
                    seed.answer.strip(),
                    premise=b,
                )
            )
            first, second = (b, a) if _flip(seed.question) else (a, b)
            wrong = "(a)" if first == b else "(b)"
            out.append(
                _proposal(
                    seed,
                    "negation",
                    f"{_strip_q(seed.question)}? Which of these statements is NOT correct: (a) {first} (b) {second}",
                    f"{wrong} {b}",
                    distractor=b,
                )
            )
        changed = near_miss(seed.question, [s.question for s in seeds if s is not seed])
        if changed and changed != seed.question:
            out.append(
                _proposal(
                    seed, "near_miss_entity", changed, "", extra_tags=[UNANSWERABLE_TAG], doc_ids=(), chunk_ids=()
                )
            )
    return out[:limit]


class _Written(BaseModel):
    kind: Literal["multi_document", "misleading", "negation", "near_miss_entity"]
    question: str = Field(min_length=5, max_length=2000)
    expected_answer: str = Field(max_length=8000)
    """Empty when the documents cannot answer it (the expected behaviour is a refusal)."""


class _Batch(BaseModel):
    items: list[_Written] = Field(max_length=8)


PROMPT = """You write adversarial test questions for a question-answering system over a document collection.
Seed question users ask: {question}
The answer the system gave (from its documents): {answer}
Another topic users ask about: {other}

Write up to four questions, one of each kind:
- multi_document: needs this answer AND the other topic's answer together;
- misleading: contains a confident but false premise; the expected answer is still the correct one;
- negation: asks which statement is NOT true, or what does NOT apply;
- near_miss_entity: names an entity close to, but different from, the one in the seed, so the documents
  cannot answer it (expected_answer: empty string).
Every expected answer must follow from the answer above (or be empty for near_miss_entity)."""


async def from_chat(chat: ChatModel, seeds: Sequence[Seed], *, limit: int) -> GenerationResult:
    """A chat model writes the candidates; a seed it fails on gets the templates."""
    from ragloop.models.chat.base import ChatRequest
    from ragloop.models.errors import ModelError

    res = GenerationResult(generator=f"chat:{getattr(chat, 'name', type(chat).__name__)}")
    for i, seed in enumerate(seeds):
        if len(res.proposals) >= limit:
            break
        other = seeds[(i + 1) % len(seeds)] if len(seeds) > 1 else seed
        req = ChatRequest.user(
            PROMPT.format(question=seed.question, answer=seed.answer or "(none)", other=other.question),
            output_type=_Batch,
            temperature=0.0,
            seed=7,
        )
        try:
            resp = await chat.request(req)
            batch = resp.parsed if isinstance(resp.parsed, _Batch) else _Batch.model_validate_json(resp.text)
        except (ModelError, ValidationError, ValueError, TimeoutError, OSError):  # a bad reply or a failed call
            res.fallbacks += 1
            res.proposals.extend(from_templates([seed, *[s for s in seeds if s is not seed]], limit=4)[:4])
            continue
        for w in batch.items:
            unanswerable = w.kind == "near_miss_entity" or not w.expected_answer.strip()
            res.proposals.append(
                _proposal(
                    seed,
                    w.kind,
                    w.question.strip(),
                    "" if unanswerable else w.expected_answer.strip(),
                    extra_tags=[UNANSWERABLE_TAG] if unanswerable else [],
                    doc_ids=() if unanswerable else seed.doc_ids,
                    chunk_ids=() if unanswerable else seed.chunk_ids,
                    model=res.generator,
                )
            )
    res.proposals = res.proposals[:limit]
    return res


def seeds_from(store: Store, report: CoverageReport) -> list[Seed]:
    """The gap clusters' representatives, with what production served them."""
    keys = [c.question_keys[0] for c in report.uncovered_clusters if c.question_keys]
    served = store.golden_candidates.served_answers(keys)
    out = []
    for c in report.uncovered_clusters:
        key = c.question_keys[0] if c.question_keys else ""
        text, docs, chunks = served.get(key, (None, [], []))
        out.append(
            Seed(c.representative, without_citations(text) if text else None, tuple(docs), tuple(chunks), c.size)
        )
    return out


async def generate(
    store: Store, report: CoverageReport, *, chat: ChatModel | None = None, limit: int = 20
) -> tuple[GenerationResult, list[Any]]:
    """Write candidates at the gaps of `report` and queue them for review; returns the result and
    the candidate rows inserted (a question already proposed is not proposed again)."""
    seeds = seeds_from(store, report)
    if chat is not None and seeds:
        result = await from_chat(chat, seeds, limit=limit)
    else:
        result = GenerationResult(generator="templates", proposals=from_templates(seeds, limit=limit))
    rows = store.golden_candidates.propose(result.proposals)
    store.audit.record(
        "golden_adversarial",
        triggered_by="golden generate",
        evidence={
            "generator": result.generator,
            "seeds": len(seeds),
            "proposed": len(result.proposals),
            "queued": len(rows),
            "fallbacks": result.fallbacks,
            "coverage": report.coverage,
            "n": report.n,
        },
    )
    return result, rows


def make_generator_chat(
    settings: Any, chat_model: str | None, mode: str = "auto", *, calls: Any = None
) -> ChatModel | None:
    """The chat model the generator uses: `chat_model` (a pipeline's `agent.chat_model`) unless
    `mode` is `templates`; `mode` `chat` without one is a LookupError. It gets the production
    wrappers and, with `calls` (the store's `model_calls`), the call log (purpose `golden_draft`)."""
    if mode == "templates" or (mode == "auto" and not chat_model):
        return None
    if not chat_model:
        raise LookupError("no chat model is configured (agent.chat_model): use the templates generator")
    from ragloop.models.chat import CallPurpose
    from ragloop.models.chat.registry import make_wrapped

    return make_wrapped(chat_model, settings, sink=calls, purpose=CallPurpose.GOLDEN_DRAFT)
