"""Cheap lexical reading: the aspects of a question an answer must cover.

Used offline where a model would read: which content terms, names, numbers and years a
question asks about, so the critique can say which of them no cited sentence covers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from ragloop.text.tokenize import Tokenizer

_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?:%|st|nd|rd|th)?(?![\w])")
_ENTITY = re.compile(r"\b[A-Z][a-zA-Z'’-]+(?:\s+(?:of|the|de|von|van|and)?\s*[A-Z][a-zA-Z'’-]+)*")
_QUESTION_WORDS = frozenset(
    {
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
        "does",
        "did",
        "do",
        "is",
        "are",
        "was",
        "were",
        "can",
        "could",
        "should",
        "would",
        "name",
        "list",
        "give",
        "tell",
        "describe",
        "explain",
    }
)
_SENTENCE_START_NOISE = frozenset(
    {
        "What",
        "Which",
        "Who",
        "Whom",
        "Whose",
        "When",
        "Where",
        "Why",
        "How",
        "The",
        "A",
        "An",
        "In",
        "On",
        "At",
        "Of",
        "For",
        "Did",
        "Does",
        "Do",
        "Is",
        "Are",
        "Was",
        "Were",
        "Can",
        "Could",
        "Should",
        "Would",
        "Will",
        "Has",
        "Have",
        "Had",
        "If",
        "Though",
        "Although",
        "After",
        "Before",
        "During",
        "Since",
        "From",
        "To",
        "By",
        "With",
    }
)


@lru_cache(maxsize=4)
def _tokenizer(stem: bool) -> Tokenizer:
    return Tokenizer(stemmer="english" if stem else "none", stopwords=True)


def content_terms(text: str) -> set[str]:
    """Stemmed content words and identifiers, without stopwords or question words."""
    return {t for t in _tokenizer(True).tokenize(text) if t not in _QUESTION_WORDS and len(t) > 1}


def numbers(text: str) -> set[str]:
    return {m.group(0).rstrip("stndrh").replace(",", "") for m in _NUMBER.finditer(text)}


def entities(text: str) -> set[str]:
    """Capitalised names; a capital at the start of a sentence only counts with company."""
    out = set()
    for m in _ENTITY.finditer(text):
        words = m.group(0).split()
        while words and words[0] in _SENTENCE_START_NOISE:  # "Did Krellmark" is about Krellmark
            words = words[1:]
        if words:
            out.add(" ".join(words))
    return out


_IDENTIFIER = re.compile(r"\w+(?:\.\w+)+|\w*_\w*")


def _name_words(text: str) -> set[str]:
    """Unstemmed words, plus each plural's singular: names must match as written ("Marshall" is
    not `marshal`), but "the Normans" are mentioned by "the Norman conquest"."""
    words = set(_tokenizer(False).tokenize(text))
    return words | {w[:-1] for w in words if len(w) > 3 and w.endswith("s")}


def _mentioned(word: str, bag: set[str]) -> bool:
    """Exact, or a shared stem of at least 5 letters with at most 3 letters either side
    ("Europe" / "European", a typo's extra letter "Raouliii" / "Raoulii")."""
    if word in bag:
        return True
    if len(word) < 5:
        return False
    return any(len(w) >= 5 and abs(len(w) - len(word)) <= 3 and (w.startswith(word) or word.startswith(w)) for w in bag)


_SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s+)[\"'(\[]*([A-Z][\w'’-]*)")


def ungrounded_entities(question: str, passages: Sequence[str]) -> list[str]:
    """The question's names that no single passage mentions (every word of the name in one
    passage). A name no retrieved passage knows is the clearest sign that a question is about
    something other than the collection: "the Marshall Plan" retrieves the `marshal` module,
    "Jackson" the json docs."""
    text = _IDENTIFIER.sub(" ", question)  # `multiprocessing.ProcessError` is an API, not a name
    starts = {m.group(1) for m in _SENTENCE_START.finditer(text)}
    # a lone capitalised word opening a sentence is no evidence of a name ("Sorry, ...", "Briefly
    # narrate ...", "Complexity theory ..."): 10 of MTRAG dev's 52 false refusals were these
    names = {n for n in entities(text) if " " in n or n not in starts}
    if not names:
        return []
    bags = [_name_words(p) for p in passages]
    out = []
    for name in sorted(names):
        words = {w[:-1] if len(w) > 3 and w.endswith("s") else w for w in _tokenizer(False).tokenize(name)}
        if words and not any(all(_mentioned(w, bag) for w in words) for bag in bags):
            out.append(name)
    return out


@dataclass(frozen=True)
class Aspects:
    terms: frozenset[str]  # stemmed, for matching
    entities: frozenset[str]
    numbers: frozenset[str]
    surface: tuple[tuple[str, str], ...] = ()  # (stem, the word as the question wrote it)

    def word(self, stem: str) -> str:
        return dict(self.surface).get(stem, stem)


def aspects(question: str) -> Aspects:
    surface = []
    for w in re.findall(r"[\w.'-]+", question):
        for t in content_terms(w):
            surface.append((t, w.strip(".'")))
    return Aspects(
        frozenset(content_terms(question)),
        frozenset(entities(question)),
        frozenset(numbers(question)),
        tuple(dict(surface).items()),
    )


def coverage(aspect: Aspects, text: str) -> tuple[float, list[str]]:
    """Share of the question's aspects found in `text`, and the missing ones (entities and
    numbers count double: an answer about the wrong year or name is the wrong answer)."""
    terms = content_terms(text)
    lower = text.lower()
    missing: list[str] = []
    total = 0.0
    found = 0.0
    for t in sorted(aspect.terms):
        total += 1
        if t in terms:
            found += 1
        else:
            missing.append(t)
    for e in sorted(aspect.entities):
        total += 2
        if all(part.lower() in lower for part in e.split()):
            found += 2
        else:
            missing.append(e)
    for n in sorted(aspect.numbers):
        total += 2
        if n in numbers(text):
            found += 2
        else:
            missing.append(n)
    return (found / total if total else 1.0), missing
