"""Identifier-preserving analyzer for BM25 over technical documentation.

Generic word tokenizers split `os.walk` into `os` + `walk` and `--memory` into `memory`, so an
exact-identifier query loses to any document that merely uses both words. Here an identifier is
kept whole (unstemmed, so `settings.py` never becomes `set`) *and* its parts are emitted as
ordinary words, so the whole token gives exact matches a rare-term boost while the parts still
let prose queries ("walk the os tree") find it.

Identifier parts go through the same stopword/stem pipeline as prose words: with the english
stemmer `--memory` yields `--memory` + `memori`, which is exactly what the query word "memory"
turns into. Keeping parts unstemmed would split one concept into two vocabulary entries.

Speed comes from analysing each distinct raw token once (a dict cache): real text repeats the
same few thousand surface forms, so 10 MB tokenizes in seconds.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

import Stemmer

# The classic english list (Lucene/NLTK style) plus contraction fragments such as the `s`/`t`
# that `user's` / `don't` split into.
_STOPWORD_TEXT = """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could d did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself
    just ll m me more most my myself no nor not now o of off on once only or other our ours
    ourselves out over own re s same she should so some such t than that the their theirs them
    themselves then there these they this those through to too under until up ve very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    aren couldn didn doesn don hadn hasn haven isn shouldn wasn weren won wouldn
"""
ENGLISH_STOPWORDS: frozenset[str] = frozenset(_STOPWORD_TEXT.split())

# A candidate token: an optional leading `--`/`-` (CLI flag) or single `.` (dotfile), then word
# characters joined by `.`, `-`, `::` only when another word character follows (so a sentence's
# final period or a dash before a space is never part of the token), then an optional `++`/`+`/`#`
# suffix for C++, C#, F#. Lookbehinds stop `...and` becoming `.and` or `---x` becoming `--x`.
_TOKEN_RE = re.compile(
    r"(?:(?<![\w-])--?(?=[^\W\d])|(?<![\w.])\.(?=[^\W\d]))?"
    r"\w+(?:(?:[.\-]|::)\w+)*"
    r"(?:(?:\+\+|\+|#)(?![\w+#]))?"
)
_VERSION_RE = re.compile(r"v?\d+(?:\.\d+)+")
_SEPARATORS_RE = re.compile(r"[._\-:+#]+")
# camelCase / PascalCase / HTTPServer pieces; digits stay attached to the letters before them
# so `utf8` and `ipv6` remain single pieces.
_CAMEL_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z0-9]+")

_CACHE_LIMIT = 1_000_000


class Tokenizer:
    """Lowercasing analyzer; deterministic for a given (stemmer, stopwords) pair."""

    def __init__(self, stemmer: Literal["english", "none"] = "english", stopwords: bool = True) -> None:
        if stemmer not in ("english", "none"):
            raise ValueError(f"unknown stemmer {stemmer!r}; expected 'english' or 'none'")
        self.stemmer_name = stemmer
        self.stopwords = stopwords
        self._stemmer = Stemmer.Stemmer("english") if stemmer == "english" else None
        self._stop = ENGLISH_STOPWORDS if stopwords else frozenset()
        self._cache: dict[str, tuple[str, ...]] = {}

    def tokenize(self, text: str) -> list[str]:
        out: list[str] = []
        cache = self._cache
        for raw in _TOKEN_RE.findall(text):
            terms = cache.get(raw)
            if terms is None:
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                terms = cache[raw] = self._analyse(raw)
            out.extend(terms)
        return out

    def tokenize_many(self, texts: Sequence[str]) -> list[list[str]]:
        return [self.tokenize(t) for t in texts]

    # -- analysis of one raw token -------------------------------------------------------------

    def _word(self, word: str) -> str | None:
        """A plain lowercase word: stopword check, then stem (words with digits are left alone)."""
        if word in self._stop:
            return None
        if self._stemmer is None or not word.isalpha():
            return word
        return str(self._stemmer.stemWord(word))

    def _analyse(self, raw: str) -> tuple[str, ...]:
        low = raw.lower()
        if _VERSION_RE.fullmatch(low) or raw.isdigit():
            return (low,)
        if raw.isalnum() and len(_pieces(raw)) <= 1:
            # nothing to split: an ordinary word (`Hello`, `HTTP`, `utf8`) is analysed as a word
            w = self._word(low)
            return (w,) if w else ()
        terms = [low]
        seen = {low}
        for chunk in _SEPARATORS_RE.split(raw):
            for piece in _pieces(chunk):
                if len(piece) < 2:
                    continue  # single letters (`c` of C++, `x` of x.y) are noise
                w = self._word(piece.lower())
                if w and w not in seen:
                    seen.add(w)
                    terms.append(w)
        return tuple(terms)


def _pieces(chunk: str) -> list[str]:
    """camelCase pieces of a separator-free chunk; single-case chunks stay whole (keeps `café`)."""
    if not chunk:
        return []
    if chunk.islower() or chunk.isupper() or chunk.istitle():
        return [chunk]
    return _CAMEL_RE.findall(chunk) or [chunk]
