"""Split passages into strips: sentences, with code blocks and list items kept whole.

Strips carry character offsets into the passage, so a refined context can always be mapped
back to the chunk (and the place in it) that a citation points at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

StripKind = Literal["sentence", "code", "list_item"]

# a sentence ends at . ! ? (optionally closed by quotes/brackets) followed by space and a
# non-lowercase character; common abbreviations do not end one.
_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+(?=[^\sa-z])")
_ABBREV = re.compile(r"(?:\b(?:e\.g|i\.e|etc|vs|cf|Mr|Mrs|Ms|Dr|St|No|Fig|approx|Inc|Ltd|Jr|Sr)|\b[A-Z])\.$")
_FENCE = re.compile(r"^(```|~~~)")
_LIST = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")


@dataclass(frozen=True)
class Strip:
    text: str
    start: int
    end: int
    kind: StripKind = "sentence"


def _sentences(text: str, offset: int, min_chars: int) -> list[Strip]:
    out: list[Strip] = []
    start = 0
    for m in _END.finditer(text):
        candidate = text[start : m.start()]
        if _ABBREV.search(candidate.rstrip()):
            continue
        out.append(Strip(candidate, offset + start, offset + m.start()))
        start = m.end()
    if start < len(text):
        out.append(Strip(text[start:], offset + start, offset + len(text)))
    merged: list[Strip] = []
    for s in out:
        stripped = s.text.strip()
        if not stripped:
            continue
        if merged and len(stripped) < min_chars:  # "Yes." or a stray fragment joins its predecessor
            prev = merged[-1]
            merged[-1] = Strip(prev.text + " " + stripped, prev.start, s.end)
        else:
            lead = len(s.text) - len(s.text.lstrip())
            merged.append(Strip(stripped, s.start + lead, s.start + lead + len(stripped)))
    return merged


def split_strips(text: str, min_chars: int = 12) -> list[Strip]:
    """Paragraph by paragraph: fenced or indented code stays one strip, each list item is one
    strip, prose splits into sentences."""
    strips: list[Strip] = []
    lines = text.split("\n")
    pos = 0
    buf_start = 0
    buf: list[str] = []
    in_fence = False

    def flush_prose() -> None:
        nonlocal buf
        if buf:
            para = "\n".join(buf)
            strips.extend(_sentences(para.replace("\n", " "), buf_start, min_chars))
        buf = []

    code_start = -1
    for line in lines:
        line_end = pos + len(line)
        if _FENCE.match(line.strip()):
            if in_fence:
                strips.append(Strip(text[code_start:line_end], code_start, line_end, "code"))
                in_fence = False
            else:
                flush_prose()
                in_fence, code_start = True, pos
        elif in_fence:
            pass
        elif _LIST.match(line):
            flush_prose()
            strips.append(Strip(line.strip(), pos + len(line) - len(line.lstrip()), line_end, "list_item"))
        elif not line.strip():
            flush_prose()
        elif line.startswith(("    ", "\t", ">>>")) and not buf:
            if strips and strips[-1].kind == "code" and strips[-1].end == pos - 1:
                prev = strips.pop()
                strips.append(Strip(text[prev.start : line_end], prev.start, line_end, "code"))
            else:
                strips.append(Strip(line, pos, line_end, "code"))
        else:
            if not buf:
                buf_start = pos
            buf.append(line)
        pos = line_end + 1
    if in_fence:
        strips.append(Strip(text[code_start:], code_start, len(text), "code"))
    flush_prose()
    return strips


def split_sentences(text: str, min_chars: int = 12) -> list[str]:
    return [s.text for s in split_strips(text, min_chars)]
