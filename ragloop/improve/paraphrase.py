"""Three rephrasings of a question for the oracle retriever (seed 6.2: "for robustness").

With a chat model configured, it writes them (`ChatParaphraser`). Offline, `OfflineParaphraser`
derives them from the collection's own vocabulary, deterministically (no salted `hash`, no set
iteration order: the same question and collection give the same variants under any
PYTHONHASHSEED, so a stored diagnosis replays):

- `term_drop`: the question's content words only, without its most common one (the term that
  discriminates least in this collection: lowest document frequency wins the tie-break last);
- `vocabulary`: each content word in the collection's most frequent spelling of its stem, plus
  the collection term that co-occurs most with the question's rarest term that has one (at
  least two chunks share them; a synonym stand-in:
  no thesaurus ships offline, and the corpus's own co-occurrence is what its chunks will match);
- `reorder`: the question rotated to start at its rarest content word (moves the entity ahead
  of the wh-phrase, which is what changes a bi-encoder's pooled vector; BM25 is unmoved).

A chat model that fails falls back to the offline variants, and the variants say so
(`source`), so the diagnosis records which paraphrases it actually used.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel

from ragloop.improve.types import QueryVariant, VariantKind
from ragloop.ingest.types import Chunk
from ragloop.models.errors import ModelError
from ragloop.text.tokenize import Tokenizer

if TYPE_CHECKING:  # the chat package pulls in SQLAlchemy (its cache); the offline path never needs it
    from ragloop.models.chat.base import ChatModel

_WORD = re.compile(r"[A-Za-z0-9][\w'’-]*")
_QUESTION_WORDS = frozenset(
    [
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "when",
        "where",
        "why",
        "how",
        "many",
        "much",
        "name",
        "named",
        "called",
        "kind",
        "type",
        "does",
        "did",
        "do",
    ]
)
_stemmer = Tokenizer("english", stopwords=True)


def _stem(word: str) -> str | None:
    """The word's single content stem, or None for a stopword / question word."""
    if word.lower() in _QUESTION_WORDS:
        return None
    terms = _stemmer.tokenize(word)
    return terms[0] if terms else None


@dataclass(frozen=True)
class Vocabulary:
    """Document frequencies, spellings and per-chunk stems of a collection."""

    n_docs: int
    df: dict[str, int]
    spelling: dict[str, str]
    """stem -> its most frequent surface form (lowercase), ties to the alphabetically first."""
    postings: dict[str, tuple[int, ...]]
    doc_terms: tuple[tuple[str, ...], ...]

    @classmethod
    def from_chunks(cls, chunks: Sequence[Chunk]) -> Vocabulary:
        df: Counter[str] = Counter()
        forms: Counter[tuple[str, str]] = Counter()
        postings: dict[str, list[int]] = {}
        doc_terms: list[tuple[str, ...]] = []
        for i, ch in enumerate(chunks):
            seen: dict[str, None] = {}
            for w in _WORD.findall(ch.text):
                s = _stem(w)
                if s:
                    forms[(s, w.lower())] += 1
                    seen[s] = None
            for s in seen:
                df[s] += 1
                postings.setdefault(s, []).append(i)
            doc_terms.append(tuple(seen))
        spelling: dict[str, str] = {}
        for (s, form), _n in sorted(forms.items(), key=lambda kv: (kv[0][0], -kv[1], kv[0][1])):
            spelling.setdefault(s, form)
        return cls(len(chunks), dict(df), spelling, {s: tuple(p) for s, p in postings.items()}, tuple(doc_terms))

    def idf(self, stem: str) -> float:
        return math.log((self.n_docs + 1) / (self.df.get(stem, 0) + 0.5))

    def related(self, stem: str, exclude: set[str]) -> str | None:
        """The stem found in the most chunks that hold `stem` (at least 2 of them), weighted by
        its own idf so ubiquitous words do not win; ties to the alphabetically first."""
        docs = self.postings.get(stem, ())
        if len(docs) < 2:
            return None
        both: Counter[str] = Counter(t for d in docs for t in self.doc_terms[d])
        scored = [
            (n / len(docs) * self.idf(t), t) for t, n in both.items() if n >= 2 and t != stem and t not in exclude
        ]
        if not scored:
            return None
        return min(scored, key=lambda st: (-st[0], st[1]))[1]


def _respell(word: str, form: str) -> str:
    """`form` with the case of `word` (a capitalised name stays capitalised)."""
    if word.isupper() and len(word) > 1:
        return form.upper()
    return form[:1].upper() + form[1:] if word[:1].isupper() else form


class Paraphraser(Protocol):
    name: str

    async def paraphrase(self, question: str, n: int = 3) -> list[QueryVariant]: ...


class OfflineParaphraser:
    name = "offline:vocabulary"

    def __init__(self, vocabulary: Vocabulary) -> None:
        self.vocabulary = vocabulary

    def variants(self, question: str) -> list[str]:
        words = _WORD.findall(question)
        stems = [_stem(w) for w in words]
        content = [(i, w, s) for i, (w, s) in enumerate(zip(words, stems, strict=True)) if s]
        if not content:
            return [question, question, question]
        voc = self.vocabulary
        # rarest first; ties by position so the result never depends on dict or set order
        by_rarity = sorted(content, key=lambda t: (-voc.idf(t[2]), t[0]))
        commonest = by_rarity[-1][0]
        kept = [w for i, w, _ in content if len(content) < 3 or i != commonest]
        term_drop = " ".join(kept)
        respelled = [_respell(w, voc.spelling.get(s, w)) if s else w for w, s in zip(words, stems, strict=True)]
        own = {s for _, _, s in content}
        related = next((r for r in (voc.related(s, own) for _, _, s in by_rarity) if r), None)
        vocabulary = " ".join(respelled + ([voc.spelling.get(related, related)] if related else []))
        start = by_rarity[0][0]
        reorder = " ".join(words[start:] + words[:start])
        return [term_drop, vocabulary, reorder]

    async def paraphrase(self, question: str, n: int = 3) -> list[QueryVariant]:
        return [
            QueryVariant(kind=VariantKind.PARAPHRASE, text=t, source=f"{self.name}:{label}")
            for t, label in zip(self.variants(question), ("term_drop", "vocabulary", "reorder"), strict=True)
        ][:n]


class _Paraphrases(BaseModel):
    paraphrases: list[str]


PROMPT = (
    "Rewrite the question below in {n} different ways that a search engine would match against "
    "documents: change the wording and word order, keep every name, number and the meaning. "
    'Reply with JSON {{"paraphrases": [...]}}.\n\nQuestion: {question}'
)


class ChatParaphraser:
    """Paraphrases from a chat model (temperature 0, fixed seed); the offline variants stand in
    for any it fails to give, and say why in their `source`."""

    def __init__(self, model: ChatModel, fallback: OfflineParaphraser, *, timeout_s: float = 30.0) -> None:
        self.model = model
        self.fallback = fallback
        self.timeout_s = timeout_s
        self.name = f"chat:{model.name}"

    async def paraphrase(self, question: str, n: int = 3) -> list[QueryVariant]:
        from ragloop.models.chat.base import ChatRequest
        from ragloop.models.chat.calllog import call_scope

        req = ChatRequest.user(
            PROMPT.format(n=n, question=question),
            output_type=_Paraphrases,
            temperature=0.0,
            seed=0,
            timeout_s=self.timeout_s,
        )
        got: list[str] = []
        reason = "chat model gave fewer paraphrases"
        try:
            with call_scope(step="paraphrase"):
                resp = await self.model.request(req)
            parsed = resp.parsed if isinstance(resp.parsed, _Paraphrases) else None
            got = [p.strip() for p in (parsed.paraphrases if parsed else []) if p.strip()]
        except (ModelError, TimeoutError) as exc:
            reason = f"chat model failed: {type(exc).__name__}"
        out = [QueryVariant(kind=VariantKind.PARAPHRASE, text=t, source=self.name) for t in got[:n]]
        if len(out) < n:
            fill = await self.fallback.paraphrase(question, n)
            out += [v.model_copy(update={"source": f"{v.source} ({reason})"}) for v in fill[len(out) : n]]
        return out
