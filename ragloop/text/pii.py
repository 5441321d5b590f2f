"""Personal data out of everything ragloop writes down: `Redactor` finds typed spans and replaces them.

Questions, answers, prompts, model responses and feedback used to be stored verbatim (answers and
evaluations tables, call log, job payloads, conversation memory, logs). The write seams (the answer
recorder, the call log, feedback and reviews, the conversation log and checkpointer, the chat cache,
log records) pass their text through one `Redactor` first; what the user is shown is never changed.

What is found, and why each rule looks the way it does (measured by `benchmarks/pii_redaction.py` on
a labelled sample whose negatives are the false-positive traps a RAG service sees: versions, dates,
IPs, hex literals, ISBNs, prices, timestamps, SQuAD prose with numbers):
- `EMAIL`: local@domain.tld; the TLD must be letters, so `pkg@1.2.3` and `a@b` stay.
- `CARD`: 13-19 digits, bare or in the printed groupings (4-4-4-4[-3], Amex 4-6-5, Diners 4-6-4),
  with a card brand's leading digits *and* a valid Luhn check digit: an ISBN-13 (978/979), a
  millisecond timestamp (1...) or a random id is not a card.
- `IBAN`: country code, check digits, then exactly that country's length (so trailing words are not
  swallowed), and the ISO 7064 mod-97 check.
- `PHONE`: `+` and 8-15 digits (E.164); North American 3-3-4 with one consistent separator or a
  bracketed area code; a trunk-0 national number with 10-11 digits (`020 7946 0958`); or 7-15 digits
  right after a word such as "phone", "tel", "call me at". Never digits joined by dots that look
  like versions or IPs.
- `ACCOUNT`: 6-20 digits right after a word that names an account ("account", "IBAN", "sort code",
  "customer number", "SSN", "policy no.", ...), and US social security numbers (3-2-4 with dashes,
  the never-issued areas excluded). A bare long number without such a word is not redacted: unix
  timestamps, ids and counts are far more common in a RAG service's text than account numbers.
- Extra types from `RAGLOOP_PII_PATTERNS`: a JSON object `{"TYPE": "regex"}` inline, or the path of a
  JSON file holding one; each match becomes `[TYPE]`.

`RAGLOOP_PII_REDACTION=off` turns it all off (default on). Placeholders carry no digits or `@`, so
redacting twice changes nothing.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import TypeVar

REDACTION_ENV = "RAGLOOP_PII_REDACTION"
PATTERNS_ENV = "RAGLOOP_PII_PATTERNS"
T = TypeVar("T")


class PiiType(StrEnum):
    EMAIL = "EMAIL"
    PHONE = "PHONE"
    CARD = "CARD"
    IBAN = "IBAN"
    ACCOUNT = "ACCOUNT"


BUILTIN_TYPES: tuple[str, ...] = tuple(t.value for t in PiiType)
# when spans overlap, the more specific (checksummed) type wins
_PRIORITY = {PiiType.IBAN: 0, PiiType.CARD: 1, PiiType.EMAIL: 2, PiiType.ACCOUNT: 3, PiiType.PHONE: 4}


@dataclass(frozen=True)
class PiiSpan:
    """One finding: `text[start:end]` is personal data of `type` (a `PiiType` value or a configured name)."""

    start: int
    end: int
    type: str
    text: str

    @property
    def placeholder(self) -> str:
        return f"[{self.type}]"


# ---- checksums ---------------------------------------------------------------------------------


def luhn_ok(digits: str) -> bool:
    """The Luhn (mod 10) check digit every payment card carries."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


_CARD_PREFIX = re.compile(r"4|5[1-5]|2[2-7]|3[47]|3[068]|35|6")


def card_ok(digits: str) -> bool:
    return 13 <= len(digits) <= 19 and _CARD_PREFIX.match(digits) is not None and luhn_ok(digits)


# ISO 13616 lengths (the registry's countries that people in the sample's languages write most)
IBAN_LENGTHS: dict[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BR": 29,
    "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24,
    "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HR": 21,
    "HU": 28, "IE": 22, "IL": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LI": 21,
    "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MR": 27, "MT": 31, "MU": 30,
    "NL": 18, "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24,
    "SE": 24, "SI": 19, "SK": 24, "SM": 27, "TN": 24, "TR": 26, "UA": 29, "VG": 24, "XK": 20,
}  # fmt: skip


def iban_ok(compact: str) -> bool:
    """Length for the country and the mod-97 check (ISO 7064), on an IBAN without spaces."""
    if IBAN_LENGTHS.get(compact[:2]) != len(compact):
        return False
    moved = compact[4:] + compact[:4]
    return int("".join(str(int(ch, 36)) for ch in moved)) % 97 == 1


# ---- detectors ---------------------------------------------------------------------------------

Detector = Callable[[str, int, int], Iterator[tuple[int, int]]]
"""(text, pos, endpos) -> spans: digit-based detectors run only on windows around digit runs."""

_EMAIL = re.compile(
    r"(?<![\w.%+-])[A-Za-z0-9](?:[A-Za-z0-9._%+-]{0,63})@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+"
    r"[A-Za-z]{2,24}(?![\w-])"
)
_CARD = re.compile(
    r"(?<![\w+.-])(?<!\d[ -])"
    r"(?:\d{13,19}|\d{4}([ -])\d{4}\1\d{4}\1\d{4}(?:\1\d{3})?|\d{4}([ -])\d{6}\2\d{4,5})"
    r"(?![\w-]|[ .]\d)"
)
_IBAN = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]){10,30}")
_PHONE_INTL = re.compile(r"(?<![\w+])(?<!\d[ .-])\+\d[\d ().\-]{6,22}\d(?![\w]|[.\-]\d)")
_PHONE_NANP = re.compile(
    r"(?<![\w.+-])(?<!\d[ .-])(?:1[ .-])?"
    r"(?:\([2-9]\d{2}\) ?\d{3}[ .-]\d{4}|[2-9]\d{2}([ .-])\d{3}\1\d{4})(?![\w-]|\.\d)"
)
_PHONE_TRUNK = re.compile(r"(?<![\w.+-])(?<!\d[ .-])0\d{2,4}[ -]\d{3,4}[ -]?\d{3,4}(?![\w-]|[.,]\d)")
_PHONE_CUE = re.compile(
    r"(?i:\b(?:phone|tel|telephone|mobile|cell|cellphone|fax|whatsapp|sms|call me(?: at| on)?|text me(?: at| on)?"
    r"|reach me(?: at| on)?|ring me(?: at| on)?|contact number|phone number|telefon|handy|t[ée]l[ée]phone)\b)"
    r"(?:\s*(?:is|was|number|no\.?|nr\.?|:|#|-|=))*\s*"
    r"(\+?\(?\d[\d ().\-]{5,22}\d)(?![\w]|[.\-]\d)"
)
_ACCOUNT_CUE = re.compile(
    r"(?i:\b(?:account|acct|a/c|iban|routing|sort code|bsb|ssn|social security|kontonummer|konto"
    r"|(?:customer|client|member|membership|policy|contract|passport|tax|national|insurance|loan|mortgage)"
    r"\s+(?:number|no\.?|nr\.?|id|#))\b\.?)"
    r"(?:\s*(?:is|was|number|no\.?|nr\.?|ending in|ends in|:|#|-|=))*\s*"
    r"(\d(?:[ \-]?\d){5,19})(?![\w]|[.,\-]\d)"
)
_SSN = re.compile(r"(?<![\w-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\w-])")


def _digits(s: str) -> str:
    return "".join(ch for ch in s if ch.isdigit())


def _emails(text: str, pos: int, endpos: int) -> Iterator[tuple[int, int]]:
    for m in _EMAIL.finditer(text, pos, endpos):
        yield m.span()


_ID_CUE = re.compile(
    r"(?i:\b(?:id|ids|chunk|order|invoice|tracking|ref|reference|ticket|doc|document|build|commit|hash|isbn|doi"
    r"|serial|timestamp|epoch|row|offset)\b)\W{0,3}$"
)


def _cards(text: str, pos: int, endpos: int) -> Iterator[tuple[int, int]]:
    for m in _CARD.finditer(text, pos, endpos):
        if not card_ok(_digits(m.group())):
            continue
        if m.group().isdigit() and _ID_CUE.search(text, max(0, m.start() - 24), m.start()):
            continue  # a bare number named as an identifier ("chunk 4539...", "order id 5555...")
        yield m.span()


def _ibans(text: str, pos: int, endpos: int) -> Iterator[tuple[int, int]]:
    for m in _IBAN.finditer(text, pos, endpos):
        raw = m.group()
        want = IBAN_LENGTHS.get(raw[:2])
        if want is None:
            continue
        seen, end = 0, None  # cut the candidate at the country's length (trailing words are not the IBAN)
        for i, ch in enumerate(raw):
            if ch != " ":
                seen += 1
                if seen == want:
                    end = i + 1
                    break
        if end is None or (m.start() + end < len(text) and text[m.start() + end].isalnum()):
            continue
        if iban_ok(raw[:end].replace(" ", "")):
            yield m.start(), m.start() + end


def _grouping_ok(s: str) -> bool:
    """A phone number's separators: single, and no dotted triple that reads like a version or an IP."""
    if re.search(r"[ .\-]{2,}", s.replace(") ", ")")):
        return False
    return not re.fullmatch(r"\+?\d{1,3}(?:\.\d{1,3}){2,3}", s)


def _phones(text: str, pos: int, endpos: int) -> Iterator[tuple[int, int]]:
    for m in _PHONE_INTL.finditer(text, pos, endpos):
        if 8 <= len(_digits(m.group())) <= 15 and _grouping_ok(m.group()):
            yield m.span()
    for m in _PHONE_NANP.finditer(text, pos, endpos):
        yield m.span()
    for m in _PHONE_TRUNK.finditer(text, pos, endpos):
        if 10 <= len(_digits(m.group())) <= 11:
            yield m.span()
    for m in _PHONE_CUE.finditer(text, pos, endpos):
        if 7 <= len(_digits(m.group(1))) <= 15 and _grouping_ok(m.group(1)):
            yield m.span(1)


def _accounts(text: str, pos: int, endpos: int) -> Iterator[tuple[int, int]]:
    for m in _ACCOUNT_CUE.finditer(text, pos, endpos):
        yield m.span(1)
    for m in _SSN.finditer(text, pos, endpos):
        yield m.span()


_BUILTIN: dict[str, Detector] = {
    PiiType.EMAIL: _emails,
    PiiType.CARD: _cards,
    PiiType.IBAN: _ibans,
    PiiType.PHONE: _phones,
    PiiType.ACCOUNT: _accounts,
}
_NEEDS_DIGIT = frozenset({PiiType.CARD, PiiType.IBAN, PiiType.PHONE, PiiType.ACCOUNT})
# Every digit-based type holds a run of at least 6 digits joined by at most single separators; the
# detectors run only on windows around such runs (the cue words stand at most ~40 characters before,
# an IBAN's trailing letters at most 34 after), which makes prose with a few years in it cheap.
_ISLAND = re.compile(r"\d[\d \-.()/]{4,}\d")
WINDOW_BEFORE, WINDOW_AFTER = 48, 34


def digit_windows(text: str) -> list[tuple[int, int]]:
    """Merged (pos, endpos) windows around the runs of 6+ digits, in text order."""
    out: list[tuple[int, int]] = []
    for m in _ISLAND.finditer(text):
        if sum(ch.isdigit() for ch in m.group()) < 6:
            continue
        start, end = max(0, m.start() - WINDOW_BEFORE), min(len(text), m.end() + WINDOW_AFTER)
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _pattern_detector(rx: re.Pattern[str]) -> Detector:
    def find(text: str, pos: int, endpos: int) -> Iterator[tuple[int, int]]:
        for m in rx.finditer(text, pos, endpos):
            if m.end() > m.start():
                yield m.span()

    return find


class PiiConfigError(ValueError):
    """`RAGLOOP_PII_PATTERNS` is not a JSON object of names to valid regular expressions."""


def load_patterns(raw: str | None) -> dict[str, str]:
    """`RAGLOOP_PII_PATTERNS`: inline JSON (`{"EMPLOYEE_ID": "\\\\bE-\\\\d{6}\\\\b"}`) or a JSON file's path."""
    if not raw or not raw.strip():
        return {}
    text = raw.strip()
    if not text.startswith("{"):
        path = Path(text).expanduser()
        if not path.is_file():
            raise PiiConfigError(f"{PATTERNS_ENV}: {text!r} is neither a JSON object nor a file")
        text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PiiConfigError(f"{PATTERNS_ENV}: not JSON ({exc})") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise PiiConfigError(f"{PATTERNS_ENV}: must be a JSON object of TYPE -> regex strings")
    return data


class Redactor:
    """Finds personal data (`find`) and replaces it with typed placeholders (`redact`, `redact_deep`).

    `types` limits the built-in detectors (default: all); `patterns` adds named regular expressions.
    A disabled redactor returns its input unchanged."""

    def __init__(
        self,
        *,
        enabled: bool = True,
        types: tuple[str, ...] | None = None,
        patterns: Mapping[str, str] | None = None,
    ) -> None:
        self.enabled = enabled
        chosen = BUILTIN_TYPES if types is None else tuple(t.upper() for t in types)
        unknown = set(chosen) - set(BUILTIN_TYPES)
        if unknown:
            raise PiiConfigError(f"unknown PII types {sorted(unknown)}; built in: {list(BUILTIN_TYPES)}")
        self.detectors: list[tuple[str, Detector]] = [(t, _BUILTIN[t]) for t in chosen]
        for name, rx in (patterns or {}).items():
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,31}", name):
                raise PiiConfigError(f"PII pattern name {name!r}: letters, digits and _ only")
            try:
                compiled = re.compile(rx)
            except re.error as exc:
                raise PiiConfigError(f"PII pattern {name}: {exc}") from None
            self.detectors.append((name.upper(), _pattern_detector(compiled)))
        self._cached = lru_cache(maxsize=8192)(self._redact)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Redactor:
        env = os.environ if environ is None else environ
        flag = env.get(REDACTION_ENV, "on").strip().lower()
        return cls(enabled=flag not in ("0", "off", "false", "no"), patterns=load_patterns(env.get(PATTERNS_ENV)))

    def find(self, text: str) -> list[PiiSpan]:
        """Non-overlapping spans, in text order; on overlap the longer span, then the checksummed type, wins."""
        if not self.enabled or not text:
            return []
        windows = digit_windows(text)
        whole = [(0, len(text))]
        found: list[tuple[int, int, int, str]] = []
        for order, (name, detect) in enumerate(self.detectors):
            if name == PiiType.EMAIL and "@" not in text:
                continue
            rank = _PRIORITY.get(PiiType(name), 5 + order) if name in BUILTIN_TYPES else 5 + order
            for pos, endpos in windows if name in _NEEDS_DIGIT else whole:
                found.extend((s, e, rank, name) for s, e in detect(text, pos, endpos))
        found = sorted(set(found))  # a span may be found from two windows
        found.sort(key=lambda f: (f[0], -(f[1] - f[0]), f[2]))
        spans: list[PiiSpan] = []
        for s, e, _, name in found:
            if spans and s < spans[-1].end:
                continue
            spans.append(PiiSpan(s, e, name, text[s:e]))
        return spans

    def _redact(self, text: str) -> str:
        spans = self.find(text)
        if not spans:
            return text
        out, at = [], 0
        for sp in spans:
            out.append(text[at : sp.start])
            out.append(sp.placeholder)
            at = sp.end
        out.append(text[at:])
        return "".join(out)

    def redact(self, text: str) -> str:
        """`text` with every span replaced by its placeholder (`[EMAIL]`, `[CARD]`, ...)."""
        if not self.enabled or not text:
            return text
        return self._cached(text) if len(text) < 20_000 else self._redact(text)

    def remove(self, text: str) -> str:
        """`text` with its personal data removed (not replaced): what to search a knowledge base with.
        An address or a card number is about the user, never what the documents are about; left in,
        it drowned the question (a grade of 0.15 instead of 0.63 on a one-document collection), and a
        placeholder would read as a name the documents lack."""
        spans = self.find(text)
        if not spans:
            return text
        out, at = [], 0
        for sp in spans:
            out.append(text[at : sp.start])
            at = sp.end
        out.append(text[at:])
        return re.sub(r"\s+([.,;:!?])", r"\1", re.sub(r"\s{2,}", " ", "".join(out))).strip()

    def redact_optional(self, text: str | None) -> str | None:
        return None if text is None else self.redact(text)

    def redact_deep(self, obj: T) -> T:
        """Every string inside dicts, lists, tuples, pydantic models and dataclasses, redacted; identifiers
        (keys and fields named `id`, `*_id`, `*_ids`, `version`, `hash`) are left alone. Returns `obj`
        itself when nothing changed, new objects otherwise (the input is never mutated)."""
        if not self.enabled:
            return obj
        from ragloop.text.pii_walk import redact_deep

        out: T = redact_deep(obj, self.redact)
        return out


@lru_cache(maxsize=8)
def _from_env(flag: str, patterns: str) -> Redactor:
    return Redactor.from_env({REDACTION_ENV: flag, PATTERNS_ENV: patterns})


def default_redactor() -> Redactor:
    """The process's redactor from the environment (rebuilt when `RAGLOOP_PII_*` change, as in tests)."""
    return _from_env(os.environ.get(REDACTION_ENV, "on"), os.environ.get(PATTERNS_ENV, ""))
