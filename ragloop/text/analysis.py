"""Cheap lexical reading: the aspects of a question an answer must cover.

Used offline where a model would read: which content terms, names, numbers and years a
question asks about, so the critique can say which of them no cited sentence covers.
"""

from __future__ import annotations

import re
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
