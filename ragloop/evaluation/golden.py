"""Golden sets: our own evaluation questions, one JSON object per line.

Schema (`GoldenItem`): `id`, `type` (answerable | vague | unanswerable), `question`,
`conversation` (earlier turns, oldest first, each `{"speaker": "user"|"agent", "text"}`; only
the user turns are fed to the agent, through the conversation path), `reference_answer`,
`relevant_chunk_ids` and/or `relevant_doc_ids` (doc id = path relative to the ingested root),
`should_refuse`, `difficulty`, `source`, `verified`, plus review bookkeeping (`status`,
`reviewer`, `reviewed_at`, `review_action`, `notes`) and `candidates` (pooled chunk ids shown
to the labeller).

Rules checked by `validate` (and so by `load_golden`): unique non-empty ids and questions;
unanswerable <=> should_refuse; an unanswerable item names no relevant ids; an answerable
item that is accepted names at least one; `verified` only with a reviewer and a review time
(an item becomes verified only through `review`, i.e. a human action).

Tools: `draft_offline` (question templates from headings and definition sentences of a
collection's chunks), `draft_llm` (a chat model writes a question and answer per seed chunk),
`pool` (top-k BM25 and top-k dense candidates per question, TREC-style, for gold labelling)
and `review` (accept / edit / reject / skip, driven by an `ask` callback so the CLI prompts a
person and tests script the answers).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ragloop.config import PipelineConfig
from ragloop.retrieval.collection import Collection

ItemType = Literal["answerable", "vague", "unanswerable"]


class GoldenError(ValueError):
    """A golden-set file is malformed or breaks a rule."""


class GoldenTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    speaker: Literal["user", "agent"]
    text: str


class GoldenItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    type: ItemType = "answerable"
    question: str
    conversation: list[GoldenTurn] = Field(default_factory=list)
    reference_answer: str = ""
    relevant_chunk_ids: list[str] = Field(default_factory=list)
    relevant_doc_ids: list[str] = Field(default_factory=list)
    should_refuse: bool = False
    difficulty: Literal["easy", "medium", "hard"] = "medium"
    source: str = "human"
    verified: bool = False
    status: Literal["draft", "accepted", "rejected"] = "draft"
    reviewer: str | None = None
    reviewed_at: str | None = None
    review_action: Literal["accept", "edit", "reject"] | None = None
    notes: str = ""
    candidates: list[str] = Field(default_factory=list)

    def user_turns(self) -> list[str]:
        return [t.text for t in self.conversation if t.speaker == "user"]


def item_problems(item: GoldenItem) -> list[str]:
    problems = []
    if not item.id.strip():
        problems.append("empty id")
    if not item.question.strip():
        problems.append("empty question")
    if (item.type == "unanswerable") != item.should_refuse:
        problems.append(f"type {item.type} with should_refuse={item.should_refuse}")
    if item.type == "unanswerable" and (item.relevant_chunk_ids or item.relevant_doc_ids):
        problems.append("an unanswerable item names relevant ids")
    if (
        item.type != "unanswerable"
        and item.status == "accepted"
        and not (item.relevant_chunk_ids or item.relevant_doc_ids)
    ):
        problems.append("an accepted answerable item names no relevant chunk or doc id")
    if item.verified and not (item.reviewer and item.reviewed_at):
        problems.append("verified without a reviewer and a review time")
    if item.verified and item.status != "accepted":
        problems.append(f"verified but status {item.status}")
    return problems


def validate(items: Sequence[GoldenItem]) -> list[str]:
    """Every rule violation as "id: problem"; empty when the set is valid."""
    out = []
    seen: set[str] = set()
    for it in items:
        if it.id in seen:
            out.append(f"{it.id}: duplicate id")
        seen.add(it.id)
        out += [f"{it.id}: {p}" for p in item_problems(it)]
    return out


def parse_golden(text: str, origin: str = "<golden>") -> list[GoldenItem]:
    items = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("//"):
            continue
        try:
            items.append(GoldenItem.model_validate(json.loads(line)))
        except (json.JSONDecodeError, ValidationError) as exc:
            raise GoldenError(f"{origin}:{n}: {exc}") from None
    return items


def load_golden(path: str | Path, *, check: bool = True) -> list[GoldenItem]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise GoldenError(f"cannot read golden set {p}: {exc}") from None
    items = parse_golden(text, str(p))
    if check:
        problems = validate(items)
        if problems:
            raise GoldenError(f"golden set {p} is invalid: " + "; ".join(problems[:10]))
    return items


def save_golden(items: Iterable[GoldenItem], path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text("".join(it.model_dump_json(exclude_defaults=False) + "\n" for it in items), encoding="utf-8")
    tmp.replace(p)
    return p


def usable(items: Iterable[GoldenItem], verified_only: bool = False) -> list[GoldenItem]:
    """The items an evaluation runs on: not rejected, and verified when asked."""
    return [it for it in items if it.status != "rejected" and (it.verified or not verified_only)]


# -- drafting ---------------------------------------------------------------------------------------

_DEFINITION = re.compile(
    r"^(?P<term>(?:[A-Z][\w.\-()/]*|`[^`]+`)(?:\s+[\w.\-()/`]+){0,5}?)\s+"
    r"(?:is|are|refers to|means|returns|provides)\s+(?P<rest>.{15,})$"
)


def _clean_heading(h: str) -> str:
    return " ".join(h.replace("`", "").strip(" #:").split())


def draft_offline(collection: Collection, n: int = 20, seed: int = 0) -> list[GoldenItem]:
    """Template questions from a collection: "What is X?" from a definition sentence ("X is
    ...", reference answer = that sentence), and "What does the documentation say about H?" /
    a vague "H?" from section headings. Deterministic for a seed; unverified drafts."""
    from ragloop.text.sentences import split_sentences

    chunks = list(collection.load().chunks)
    rng = random.Random(seed)
    rng.shuffle(chunks)
    out: list[GoldenItem] = []
    seen_q: set[str] = set()

    def add(kind: ItemType, q: str, ref: str, chunk_id: str, doc_id: str, how: str) -> None:
        key = q.lower()
        if key in seen_q or len(out) >= n:
            return
        seen_q.add(key)
        out.append(
            GoldenItem(
                id=f"draft-{len(out) + 1:04d}",
                type=kind,
                question=q,
                reference_answer=ref,
                relevant_chunk_ids=[chunk_id],
                relevant_doc_ids=[doc_id],
                difficulty="easy" if kind == "answerable" else "medium",
                source=f"drafted:offline:{how}",
            )
        )

    for c in chunks:
        if len(out) >= n:
            break
        for s in split_sentences(c.text)[:6]:
            m = _DEFINITION.match(s.strip())
            if m and len(m.group("term")) <= 60:
                term = m.group("term").strip("` ")
                add("answerable", f"What is {term}?", s.strip(), c.chunk_id, c.doc_id, "definition")
                break
        heading = _clean_heading(c.heading_path[-1]) if c.heading_path else ""
        if heading and 3 <= len(heading) <= 80:
            if rng.random() < 0.75:
                add(
                    "answerable",
                    f"What does the documentation say about {heading}?",
                    "",
                    c.chunk_id,
                    c.doc_id,
                    "heading",
                )
            else:
                add("vague", f"{heading}?", "", c.chunk_id, c.doc_id, "heading")
    return out


class _Drafted(BaseModel):
    question: str
    answer: str


async def draft_llm(collection: Collection, chat: object, n: int = 20, seed: int = 0) -> list[GoldenItem]:
    """A chat model writes one question and its grounded answer per sampled seed chunk."""
    from ragloop.models.chat import ChatModel, ChatRequest
    from ragloop.models.errors import ModelError

    assert isinstance(chat, ChatModel)
    chunks = list(collection.load().chunks)
    rng = random.Random(seed)
    rng.shuffle(chunks)
    out: list[GoldenItem] = []
    for c in chunks:
        if len(out) >= n:
            break
        prompt = (
            "Write one question a user of this documentation might ask that the passage below answers, "
            "and the answer using only the passage. Reply as JSON with keys question and answer.\n\n"
            f"Passage:\n{c.text[:2000]}"
        )
        try:
            resp = await chat.request(ChatRequest.user(prompt, output_type=_Drafted, max_tokens=256, seed=seed))
        except ModelError:
            continue
        parsed = resp.parsed
        if not isinstance(parsed, _Drafted) or not parsed.question.strip():
            continue
        out.append(
            GoldenItem(
                id=f"draft-{len(out) + 1:04d}",
                type="answerable",
                question=parsed.question.strip(),
                reference_answer=parsed.answer.strip(),
                relevant_chunk_ids=[c.chunk_id],
                relevant_doc_ids=[c.doc_id],
                source=f"drafted:llm:{chat.name}",
            )
        )
    return out


# -- pooling -----------------------------------------------------------------------------------------


def pool(items: Sequence[GoldenItem], collection: Collection, config: PipelineConfig, k: int = 5) -> list[GoldenItem]:
    """Candidates for gold labelling: the union of the top-k BM25 and top-k dense chunks for
    each question (the TREC pooling method), BM25 first. The gold ids are left alone."""
    from ragloop.retrieval.retriever import Retriever

    retriever = Retriever(collection, config.retrieval.model_copy(update={"use_expansion_cache": False}))
    out = []
    for it in items:
        ids: list[str] = []
        for mode in ("bm25", "dense"):
            for h in retriever.retrieve(it.question, k=k, mode=mode):
                if h.chunk_id not in ids:
                    ids.append(h.chunk_id)
        out.append(it.model_copy(update={"candidates": ids}))
    return out


# -- review ------------------------------------------------------------------------------------------

Ask = Callable[[str, str], str]
"""ask(prompt, default) -> the reviewer's reply."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def review(
    items: Sequence[GoldenItem],
    reviewer: str,
    ask: Ask,
    show: Callable[[str], None] = print,
    excerpts: Callable[[str], str] | None = None,
    include_verified: bool = False,
) -> tuple[list[GoldenItem], dict[str, int]]:
    """Walk the unreviewed items: [a]ccept, [e]dit, [r]eject, [s]kip or [q]uit. Accept and edit
    set `verified`, the reviewer and the time; reject marks the item rejected. Returns the new
    list (same order) and counts per action."""
    if not reviewer.strip():
        raise GoldenError("a review needs the reviewer's name")
    out = list(items)
    counts = {"accept": 0, "edit": 0, "reject": 0, "skip": 0}
    for i, it in enumerate(out):
        if it.status == "rejected" or (it.verified and not include_verified):
            continue
        show(f"\n[{it.id}] ({it.type}) {it.question}")
        if it.user_turns():
            show("  earlier turns: " + " | ".join(it.user_turns()))
        show(f"  reference: {it.reference_answer or '-'}")
        chunks_txt = ", ".join(it.relevant_chunk_ids) or "-"
        show(f"  gold chunks: {chunks_txt}  gold docs: {', '.join(it.relevant_doc_ids) or '-'}")
        for n, cid in enumerate(it.candidates, 1):
            show(f"  ({n}) {cid}: {excerpts(cid) if excerpts else ''}")
        action = ask("accept / edit / reject / skip / quit [a/e/r/s/q]", "s").strip().lower()[:1]
        if action == "q":
            break
        if action == "s" or action not in "aer":
            counts["skip"] += 1
            continue
        stamp = {"reviewer": reviewer, "reviewed_at": _now()}
        if action == "r":
            out[i] = it.model_copy(update={**stamp, "status": "rejected", "verified": False, "review_action": "reject"})
            counts["reject"] += 1
            continue
        update: dict[str, object] = {**stamp, "status": "accepted", "verified": True}
        if action == "e":
            question = ask("question", it.question).strip() or it.question
            kind = ask("type answerable/vague/unanswerable", it.type).strip() or it.type
            if kind not in ("answerable", "vague", "unanswerable"):
                kind = it.type
            reference = ask("reference answer", it.reference_answer).strip()
            gold = list(it.relevant_chunk_ids)
            if kind != "unanswerable" and it.candidates:
                picked = ask("gold candidates (numbers, comma separated; empty keeps the current gold)", "")
                nums = [int(x) for x in re.findall(r"\d+", picked)]
                if nums:
                    gold = [it.candidates[n - 1] for n in nums if 1 <= n <= len(it.candidates)]
            update |= {
                "question": question,
                "type": kind,
                "should_refuse": kind == "unanswerable",
                "reference_answer": reference,
                "relevant_chunk_ids": [] if kind == "unanswerable" else gold,
                "relevant_doc_ids": [] if kind == "unanswerable" else list(it.relevant_doc_ids),
                "review_action": "edit",
            }
            counts["edit"] += 1
        else:
            update["review_action"] = "accept"
            counts["accept"] += 1
        new = it.model_copy(update=update)
        problems = item_problems(new)
        if problems:
            show(f"  not accepted: {'; '.join(problems)}")
            counts["skip"] += 1
            counts["edit" if action == "e" else "accept"] -= 1
            continue
        out[i] = new
    return out, counts
