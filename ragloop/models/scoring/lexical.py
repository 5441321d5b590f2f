"""`lexical:` scorer: term coverage and agreement features, combined by a shipped logistic model.

Relevance features (query vs passage):
- `cov`: share of the query's content terms (stemmed, stopwords out) found in the passage;
  `strip_cov`: the same in the passage's best strip (sentence); `bigram_cov`: share of the
  query's adjacent content-term pairs found adjacent in the passage;
- `ent_cov`: share of the query's entities (capitalised names, acronyms, identifiers) in the
  passage; `num_cov`: share of the query's numbers in the passage (1 when it has none);
- `num_expected_missing`: the question asks for a number or a date (how many, when, what
  year, ...) and the best strip has none; `n_terms`: log(1 + number of query terms).

Support features (claim vs context):
- `cov`, `strip_cov`, `bigram_cov` as above for the claim's content words;
- `num_agree`: every number/date of the claim appears in the context (1 when it has none);
  `num_missing`: how many do not;
- `ent_agree`: share of the claim's entities found in the context (1 when it has none);
- `neg_mismatch`: one side of (claim, best strip) is negated and the other is not.

All features are in `Judgement.features`; `evidence` is the best strip.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from ragloop.models.scoring.base import Judgement, Scorer
from ragloop.models.scoring.calibration import LogisticModel, ScorerWeights, shipped_weights
from ragloop.text.sentences import split_sentences
from ragloop.text.tokenize import ENGLISH_STOPWORDS, Tokenizer

RELEVANCE_FEATURES = (
    "cov",
    "strip_cov",
    "bigram_cov",
    "ent_cov",
    "num_cov",
    "num_expected_missing",
    "n_terms",
)
SUPPORT_FEATURES = ("cov", "strip_cov", "bigram_cov", "num_agree", "num_missing", "ent_agree", "neg_mismatch")

_tokenizer = Tokenizer("english", stopwords=True)

# Words that make a question a question, not what it is about (after stemming).
_QUESTION_WORDS = {
    t
    for w in ("many", "much", "name", "named", "called", "kind", "type", "one", "also", "usually", "often")
    for t in _tokenizer.tokenize(w)
}

_NUMBER_RE = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")
_NUMBER_WORDS = {
    w: str(i)
    for i, w in enumerate(
        [
            *("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"),
            *("eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen"),
            *("eighteen", "nineteen", "twenty"),
        ]
    )
}
_NUMBER_WORD_RE = re.compile(r"\b(" + "|".join(_NUMBER_WORDS) + r")\b", re.IGNORECASE)
_NEGATION_RE = re.compile(r"\b(?:not|no|never|none|nor|neither|nothing|nobody|cannot|without)\b|n't\b", re.IGNORECASE)
_NUMERIC_QUESTION_RE = re.compile(
    r"\b(?:how (?:many|much|long|old|far|large|big|high|often)|when|what (?:year|date|decade|century|"
    r"percentage|percent|number|time|age|day|month)|which (?:year|century|decade))\b",
    re.IGNORECASE,
)
_CONNECTORS = {"of", "the", "de", "du", "la", "le", "von", "van", "der", "da", "di", "al"}
# A capitalised word (Name, McName, O'Name, EU, U.S.), possibly joined by connectors ("University
# of Chicago", "Cathedral of the Holy Spirit"); or an identifier (snake_case, dotted.path,
# camelCase, a::b, call(), `code`).
_CAP_WORD = r"(?:[A-Z][\w'’.-]*\w|[A-Z])"
_ENTITY_RE = re.compile(
    rf"(?<![\w'’.-]){_CAP_WORD}(?:\s+(?:(?:of the|of|de|du|la|le|von|van|der|da|di|al)\s+)?{_CAP_WORD})*"
)
_IDENT_RE = re.compile(r"`[^`]+`|\b\w+(?:(?:\.|::)\w+)+(?:\(\))?|\b\w*_\w+\b|\b[a-z]+[A-Z]\w*\b|\b\w+\(\)")
_SENTENCE_START_RE = re.compile(r"(?:^|[.!?:;\"“(]\s*|\n)\s*$")
_NUMERIC_RE = re.compile(r"[\d.,]+")
_COMMON_CAPS = ENGLISH_STOPWORDS | {
    "what",
    "which",
    "who",
    "whom",
    "whose",
    "when",
    "where",
    "why",
    "how",
    "in",
    "on",
    "at",
    "after",
    "before",
    "during",
    "however",
    "although",
    "while",
    "many",
    "some",
    "most",
    "one",
    "this",
    "these",
    "it",
    "its",
    "there",
    "since",
    "because",
    "also",
}


def content_terms(text: str) -> list[str]:
    return [t for t in _tokenizer.tokenize(text) if t not in _QUESTION_WORDS]


def numbers(text: str) -> set[str]:
    """Numbers and dates as normalised strings (`1,000` -> `1000`; `three` -> `3`)."""
    out = set()
    for m in _NUMBER_RE.finditer(text):
        v = m.group(0).replace(",", "").rstrip(".")
        if "." in v:
            v = v.rstrip("0").rstrip(".")
        out.add(v.lstrip("0") or "0")
    for m in _NUMBER_WORD_RE.finditer(text):
        out.add(_NUMBER_WORDS[m.group(1).lower()])
    return out


def entities(text: str) -> set[str]:
    """Capitalised (multi)word names, acronyms and identifiers, lowercased. A lone capitalised
    common word ("The", "However", a question word) is not an entity, nor is a lone word at the
    start of a sentence unless it is all capitals or appears capitalised elsewhere in the text."""
    out = set()
    found: list[tuple[list[str], bool]] = []
    for m in _ENTITY_RE.finditer(text):
        words = m.group(0).split()
        initial = bool(_SENTENCE_START_RE.search(text[: m.start()]))
        while words and words[0].lower() in _COMMON_CAPS:
            words, initial = words[1:], False
        while words and words[-1].lower() in _CONNECTORS:
            words = words[:-1]
        if words:
            found.append((words, initial))
    elsewhere = {w[0] for w, initial in found if not initial and len(w) == 1}
    for words, initial in found:
        ent = " ".join(words).strip(".'’").lower()
        if len(words) == 1:
            word = words[0]
            if ent in _COMMON_CAPS or len(ent) < 2:
                continue
            if initial and not word.isupper() and word not in elsewhere:
                continue
        out.add(ent)
    for m in _IDENT_RE.finditer(text):
        ident = m.group(0).strip("`").lower()
        if not _NUMERIC_RE.fullmatch(ident):
            out.add(ident)
    return out


@lru_cache(maxsize=4096)
def _word_set(text: str) -> frozenset[str]:
    return frozenset(re.findall(r"[\w'’]+", text.lower()))


def entity_present(entity: str, text_lower: str, words: frozenset[str]) -> bool:
    """Verbatim (case-insensitive), or every non-connector word of the entity appears."""
    if entity in text_lower:
        return True
    parts = [w for w in re.findall(r"[\w'’]+", entity) if w not in _CONNECTORS]
    return bool(parts) and all(p in words for p in parts)


def negated(text: str) -> bool:
    return bool(_NEGATION_RE.search(text))


def _bigrams(terms: Sequence[str]) -> set[tuple[str, str]]:
    return set(itertools.pairwise(terms))


@dataclass(frozen=True)
class _Analysed:
    text: str
    terms: list[str]
    term_set: frozenset[str]
    bigrams: set[tuple[str, str]]
    strips: list[str]
    strip_terms: list[frozenset[str]]


def _analyse(text: str) -> _Analysed:
    terms = content_terms(text)
    strips = split_sentences(text) or ([text] if text.strip() else [])
    return _Analysed(
        text=text,
        terms=terms,
        term_set=frozenset(terms),
        bigrams=_bigrams(terms),
        strips=strips,
        strip_terms=[frozenset(content_terms(s)) for s in strips],
    )


def _coverage(wanted: frozenset[str], have: frozenset[str]) -> float:
    return len(wanted & have) / len(wanted) if wanted else 0.0


def _best_strip(wanted: frozenset[str], doc: _Analysed) -> tuple[int, float]:
    best, best_cov = -1, -1.0
    for i, st in enumerate(doc.strip_terms):
        c = _coverage(wanted, st)
        if c > best_cov:
            best, best_cov = i, c
    return best, max(best_cov, 0.0)


def relevance_features(query: str, passage: str) -> tuple[dict[str, float], str]:
    q_terms = content_terms(query)
    q_set = frozenset(q_terms)
    doc = _analyse(passage)
    idx, strip_cov = _best_strip(q_set, doc)
    evidence = doc.strips[idx] if idx >= 0 else ""
    q_bigrams = _bigrams(q_terms)
    low = passage.lower()
    words = _word_set(passage)
    q_ents = entities(query)
    q_nums = numbers(query)
    p_nums = numbers(passage)
    feats = {
        "cov": _coverage(q_set, doc.term_set),
        "strip_cov": strip_cov,
        "bigram_cov": len(q_bigrams & doc.bigrams) / len(q_bigrams) if q_bigrams else 0.0,
        "ent_cov": sum(entity_present(e, low, words) for e in q_ents) / len(q_ents) if q_ents else 1.0,
        "num_cov": len(q_nums & p_nums) / len(q_nums) if q_nums else 1.0,
        "num_expected_missing": float(bool(_NUMERIC_QUESTION_RE.search(query)) and not numbers(evidence)),
        "n_terms": math.log1p(len(q_set)),
    }
    return feats, evidence


def support_features(claim: str, context: str) -> tuple[dict[str, float], str]:
    c_terms = content_terms(claim)
    c_set = frozenset(c_terms)
    doc = _analyse(context)
    idx, strip_cov = _best_strip(c_set, doc)
    evidence = doc.strips[idx] if idx >= 0 else ""
    c_bigrams = _bigrams(c_terms)
    low = context.lower()
    words = _word_set(context)
    c_nums = numbers(claim)
    missing_nums = c_nums - numbers(context)
    c_ents = entities(claim)
    feats = {
        "cov": _coverage(c_set, doc.term_set),
        "strip_cov": strip_cov,
        "bigram_cov": len(c_bigrams & doc.bigrams) / len(c_bigrams) if c_bigrams else 0.0,
        "num_agree": float(not missing_nums),
        "num_missing": float(len(missing_nums)),
        "ent_agree": sum(entity_present(e, low, words) for e in c_ents) / len(c_ents) if c_ents else 1.0,
        "neg_mismatch": float(negated(claim) != negated(evidence)) if evidence else 0.0,
    }
    return feats, evidence


# Hand-set fallbacks, used only when no fitted weights are shipped (a fresh checkout before
# `benchmarks/scorers.py --fit`): coverage dominates, disagreement pulls down.
_FALLBACK_RELEVANCE = LogisticModel(
    RELEVANCE_FEATURES, (4.0, 2.0, 1.0, 1.0, 1.0, -1.0, 0.0), -4.0, (0.0,) * 7, (1.0,) * 7
)
_FALLBACK_SUPPORT = LogisticModel(SUPPORT_FEATURES, (3.0, 3.0, 1.0, 2.0, -1.0, 2.0, -2.0), -7.0, (0.0,) * 7, (1.0,) * 7)
SHIPPED = "lexical-default"


class LexicalScorer(Scorer):
    """Fast (no model), explainable; strong on number/entity/negation disagreement."""

    def __init__(self, weights: ScorerWeights | None = None, *, name: str = "lexical") -> None:
        if weights is None:
            weights = shipped_weights(SHIPPED) or ScorerWeights(
                scorer="lexical", relevance=_FALLBACK_RELEVANCE, support=_FALLBACK_SUPPORT
            )
        self.weights = weights
        self.name = name
        self._rel = weights.relevance or _FALLBACK_RELEVANCE
        self._sup = weights.support or _FALLBACK_SUPPORT

    def relevance_sync(self, query: str, passages: Sequence[str]) -> list[Judgement]:
        rows = [relevance_features(query, p) for p in passages]
        ps = self._rel.predict_rows([f for f, _ in rows])
        return [Judgement(float(p), ev, f) for p, (f, ev) in zip(ps, rows, strict=True)]

    def support_sync(self, claims: Sequence[str], contexts: Sequence[str]) -> list[Judgement]:
        if len(claims) != len(contexts):
            raise ValueError(f"support() is pairwise: {len(claims)} claims vs {len(contexts)} contexts")
        rows = [support_features(c, x) for c, x in zip(claims, contexts, strict=True)]
        ps = self._sup.predict_rows([f for f, _ in rows])
        return [Judgement(float(p), ev, f) for p, (f, ev) in zip(ps, rows, strict=True)]

    async def relevance(self, query: str, passages: Sequence[str]) -> list[Judgement]:
        return self.relevance_sync(query, passages)

    async def support(self, claims: Sequence[str], contexts: Sequence[str]) -> list[Judgement]:
        return self.support_sync(claims, contexts)
