"""Heading-aware chunking: a chunk answers one question, so it stays inside one section.

Rules, in order:

1. Blocks are grouped by heading path; a chunk never spans two groups (see rule 6 for the only
   exception). Within a group, whole blocks are packed greedily up to `size` characters,
   joined with a blank line.
2. A text, list or table block longer than `size` is split into pieces of at most `size`:
   text at sentence ends, lists and tables at line ends, then at whitespace, and only as a
   last resort mid-word. A boundary is taken only if it fills at least a third of the piece,
   so one short leading sentence does not become a chunk of its own. Each piece after the
   first starts with up to `overlap` characters repeated from the end of the previous one,
   snapped to a sentence start (else a word start), so a fact cut by the split is whole in
   at least one piece.
3. Code is never split mid-block: a code block up to `size` packs like any block, one up to
   `4 * size` becomes a chunk of its own, and only a bigger one is split, at blank lines,
   then at line ends, never mid-line (so a single huge line stays whole), without overlap.
4. A text piece ending in ":" followed by a code block that fits moves to the next chunk with
   the code rather than be cut off from the example it introduces.
5. Chunk text is the block texts only; the indexer prepends title and headings itself.
6. A chunk shorter than `min_size` (a lone "New in version 3.7." under its own heading) would
   win BM25 on length normalisation alone while saying nothing, so it is appended to the
   previous chunk of the document if that stays within `1.25 * size`, keeping the previous
   chunk's heading path; a leading one is prepended to the next chunk instead, and one that
   fits nowhere stays as it is.

Ids come from `make_chunk_id` over the final text, so re-chunking an unchanged document gives
the same ids, and editing one section changes only the ids of the chunks whose text changed.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from itertools import groupby

from ragloop.ingest.types import Block, Chunk, LoadedDocument, make_chunk_id

_SENTENCE_END = re.compile(r"[.!?…]+[\"'”’)\]]*\s+(?=[^\sa-z])|[。！？]+\s*")
_WHITESPACE = re.compile(r"\s+")
_LINE_END = re.compile(r"\n")
_BLANK_LINES = re.compile(r"\n[ \t]*\n\s*")
CODE_SOLO_FACTOR = 4
TINY_MERGE_FACTOR = 1.25


def _boundaries(text: str, pattern: re.Pattern[str]) -> list[int]:
    """Offsets where a new piece may start (just after the separator), in order."""
    return [m.end() for m in pattern.finditer(text) if 0 < m.end() < len(text)]


def _split(text: str, size: int, overlap: int, tiers: list[list[int]], hard: bool) -> list[str]:
    """Greedy split of `text` at the best boundary tier that fills a third of `size`.

    `hard`: with no boundary in reach, cut at `size` (text); otherwise run on to the next
    boundary, however far (code, which must not be cut mid-line).
    """
    pieces: list[str] = []
    n, start, pos = len(text), 0, 0
    while n - start > size:
        limit, cut = start + size, 0
        for rank, tier in enumerate(tiers):
            i = bisect_right(tier, limit) - 1
            if i >= 0 and tier[i] > pos:
                cut = max(cut, tier[i])
                if tier[i] - start >= size // 3 or rank == len(tiers) - 1:
                    cut = tier[i]
                    break
        if not cut:
            after = [t[bisect_right(t, pos)] for t in tiers if bisect_right(t, pos) < len(t)]
            cut = limit if hard else min(after, default=n)
        pieces.append(text[start:cut].strip())
        pos = cut
        if cut >= n or not text[cut:].strip():
            return [p for p in pieces if p]
        start = cut
        for tier in (tiers[0], tiers[-1]) if overlap else ():  # sentence/line start, else word start
            i = bisect_left(tier, cut - overlap)
            if i < len(tier) and tier[i] < cut:
                start = tier[i]
                break
    pieces.append(text[start:].strip())
    return [p for p in pieces if p]


def _pieces(block: Block, size: int, overlap: int) -> list[str]:
    text = block.text
    if len(text) <= size:
        return [text]
    words = _boundaries(text, _WHITESPACE)
    if block.kind == "code":
        if len(text) <= CODE_SOLO_FACTOR * size:
            return [text]
        tiers = [_boundaries(text, _BLANK_LINES), _boundaries(text, _LINE_END)]
        return _split(text, size, 0, tiers, hard=False)
    if block.kind in ("list", "table"):
        tiers = [_boundaries(text, _LINE_END), _boundaries(text, _SENTENCE_END), words]
    else:
        tiers = [_boundaries(text, _SENTENCE_END), words]
    return _split(text, size, overlap, tiers, hard=True)


@dataclass
class _Draft:
    path: tuple[str, ...]
    parts: list[str] = field(default_factory=list)
    length: int = -2  # as if joined: each part adds its length and the 2-char separator

    def add(self, text: str) -> None:
        self.parts.append(text)
        self.length += len(text) + 2

    def absorb(self, other: _Draft, before: bool = False) -> None:
        self.parts = other.parts + self.parts if before else self.parts + other.parts
        self.length += other.length + 2


def _merge_tiny(drafts: list[_Draft], size: int, min_size: int) -> list[_Draft]:
    limit = int(size * TINY_MERGE_FACTOR)
    out: list[_Draft] = []
    for d in drafts:
        if out and d.length < min_size and out[-1].length + 2 + d.length <= limit:
            out[-1].absorb(d)
        else:
            out.append(d)
    if len(out) > 1 and out[0].length < min_size and out[0].length + 2 + out[1].length <= limit:
        out[1].absorb(out.pop(0), before=True)
    return out


def chunk_document(doc: LoadedDocument, size: int, overlap: int, min_size: int = 40) -> list[Chunk]:
    if size < 1:
        raise ValueError(f"chunk size must be positive, got {size}")
    overlap = max(0, min(overlap, size - 1))
    drafts: list[_Draft] = []
    for path, blocks in groupby(doc.blocks, key=lambda b: b.heading_path):
        pieces = [(p, b.kind) for b in blocks for p in _pieces(b, size, overlap)]
        current: _Draft | None = None
        for i, (piece, kind) in enumerate(pieces):
            need = len(piece)
            nxt = pieces[i + 1] if i + 1 < len(pieces) else None
            if kind != "code" and piece.endswith(":") and nxt and nxt[1] == "code" and len(nxt[0]) <= size:
                need += 2 + len(nxt[0])  # a lead-in ("For example:") moves with its code
            if current is None or len(piece) > size or current.length + 2 + need > size:
                current = _Draft(path)
                drafts.append(current)
            current.add(piece)
            if len(piece) > size:  # an oversized code piece: nothing joins it
                current = None
    seen: dict[str, int] = {}
    chunks = []
    for ordinal, d in enumerate(_merge_tiny(drafts, size, min_size)):
        text = "\n\n".join(d.parts)
        chunk_id = make_chunk_id(doc.doc_id, text, seen)
        chunks.append(Chunk(chunk_id, doc.doc_id, ordinal, text, d.path, doc.title, dict(doc.metadata)))
    return chunks
