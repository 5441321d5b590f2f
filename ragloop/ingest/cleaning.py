"""Text normalisation shared by every loader, and reStructuredText inline-markup removal.

Cleaning exists so that the same content always yields the same chunk text (and so the same
chunk ids and hashes) whatever editor, platform or Unicode form produced it, and so that BM25
sees words rather than markup. Leading indentation is kept: plain-text and list blocks use it
for structure, and only the interior runs of spaces are layout noise.
"""

from __future__ import annotations

import re
import unicodedata

_LINE_BREAKS = re.compile(r"\r\n?|[\x0b\x0c\x85\u2028\u2029]")
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x84\x86-\x9f]")
_INNER_SPACES = re.compile(r"(?<=\S) {2,}")
_TRAILING_WS = re.compile(r"(?<![ \t])[ \t]+$", re.MULTILINE)  # lookbehind: linear on long runs
_BLANK_RUNS = re.compile(r"\n{3,}")


def clean_text(text: str) -> str:
    """NFC, `\\n` line endings, no control characters but `\\n`/`\\t`, single spaces between words,
    no trailing blanks, and at most one blank line in a row (three or more newlines become two)."""
    text = unicodedata.normalize("NFC", text)
    text = _LINE_BREAKS.sub("\n", text)
    text = _CONTROL.sub("", text)
    text = _INNER_SPACES.sub(" ", text)
    text = _TRAILING_WS.sub("", text)
    text = _BLANK_RUNS.sub("\n\n", text)
    return text.strip("\n").rstrip()


def clean_code(text: str) -> str:
    """Like `clean_text` but keeps interior spacing, which carries meaning in code (alignment,
    string literals); only trailing blanks and surrounding blank lines go."""
    text = unicodedata.normalize("NFC", text)
    text = _LINE_BREAKS.sub("\n", text)
    text = _CONTROL.sub("", text)
    text = _TRAILING_WS.sub("", text)
    return text.strip("\n")


# One alternation scanned left to right, so the inside of a ``literal`` is never re-read as
# emphasis or a role (``**kwargs`` must stay `**kwargs`).
_INLINE = re.compile(
    r"``(?P<lit>.+?)``"
    r"|(?<![\w`]):(?P<role>[A-Za-z][\w.+-]*(?::[A-Za-z][\w.+-]*)?):`(?P<rtext>(?:\\.|[^`\\])+?)`"
    r"|(?<![\w`])`(?P<ref>(?:\\.|[^`\\])+?)`(?:__?)?(?![\w`])"
    r"|(?<![\w*\\])\*\*(?P<strong>\S(?:.*?\S)??)\*\*(?!\w)"
    r"|(?<![\w*\\])\*(?P<em>[^\s*](?:[^*]*?[^\s*\\])??)\*(?!\w)"
    r"|\s?\[(?:#[\w-]*|\d+|\*)\]_(?!\w)"
    r"|(?<![\w|])\|(?P<sub>\w[\w .-]*?)\|(?:__?)?(?![\w|])"
    r"|\\(?P<esc>.)",
    re.DOTALL,
)
_TARGET = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$", re.DOTALL)
_ROLE_PREFIXES = {"pep": "PEP ", "rfc": "RFC "}


def _role_text(role: str, text: str) -> str:
    name = role.rsplit(":", 1)[-1]
    if name == "samp":  # {placeholder} braces are markup
        text = re.sub(r"(?<!\\)[{}]", "", text)
    text = re.sub(r"\\(.)", r"\1", text)
    m = _TARGET.match(text)
    if m:
        text = m["title"] or m["target"]
    if text.startswith("!"):
        text = text[1:]
    elif text.startswith("~"):
        text = text[1:]
        head, paren, rest = text.partition("(")
        text = head.rsplit(".", 1)[-1] + paren + rest
    if name in _ROLE_PREFIXES:
        text = _ROLE_PREFIXES[name] + text.split("#", 1)[0]
    return text


def _inline(m: re.Match[str]) -> str:
    if m["lit"] is not None:
        return m["lit"]
    if m["role"] is not None:
        return _role_text(m["role"], m["rtext"])
    if m["ref"] is not None:
        t = _TARGET.match(m["ref"])
        return (t["title"] or t["target"]) if t else m["ref"]
    for group in ("strong", "em", "sub"):
        if m[group] is not None:
            return m[group]
    if m["esc"] is not None:
        return "" if m["esc"].isspace() else m["esc"]
    return ""  # footnote reference


def strip_rst_inline(text: str) -> str:
    """Replace inline reST markup with the text a reader sees, keeping identifiers whole.

    `:func:`os.walk`` -> `os.walk`; `:class:`~pathlib.Path`` -> `Path` (the `~` form shows the
    last component, as Sphinx does); ``` ``x`` ``` -> `x`; `` `text <url>`_ `` -> `text`;
    `**b**` / `*i*` -> `b` / `i`; `:pep:`8`` -> `PEP 8`; footnote references are dropped.
    """
    return _INLINE.sub(_inline, text)
