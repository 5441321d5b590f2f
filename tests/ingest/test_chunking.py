"""Chunking invariants: sizes, overlap, code kept whole, heading paths, stable local ids."""

from __future__ import annotations

import itertools
import re
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragloop.ingest.chunking import CODE_SOLO_FACTOR, TINY_MERGE_FACTOR, chunk_document
from ragloop.ingest.types import Block, Chunk, LoadedDocument

WORDS = [
    *("retrieval", "index", "chunk", "section", "heading", "overlap", "sentence", "boundary"),
    *("token", "vector", "query", "answer", "document", "corpus", "lexical", "dense", "fusion"),
    *("ranker", "passage", "context", "window", "pipeline"),
]


def _sentences(n: int, seed: int = 0, words: int = 9) -> str:
    out = []
    for i in range(n):
        ws = [WORDS[(seed + i * 7 + j * 3) % len(WORDS)] for j in range(words)]
        out.append(f"{ws[0].capitalize()} {' '.join(ws[1:])} number {seed}-{i}.")
    return " ".join(out)


def _code(lines: int, tag: str) -> str:
    body = []
    for i in range(lines):
        body.append(f"def {tag}_{i}(x):\n    return x * {i}  # {tag}")
    return "\n\n".join(body)


def _doc(*blocks: Block, doc_id: str = "docs/guide.md") -> LoadedDocument:
    return LoadedDocument(doc_id, "Guide", tuple(blocks), {"source": "test"})


def _assert_well_formed(chunks: list[Chunk], doc: LoadedDocument) -> None:
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    assert len({c.chunk_id for c in chunks}) == len(chunks)
    paths = {b.heading_path for b in doc.blocks}
    for c in chunks:
        assert c.doc_id == doc.doc_id and c.title == doc.title and c.metadata == doc.metadata
        assert c.heading_path in paths
        assert c.text == c.text.strip() and c.text


def test_text_block_splits_within_size_with_overlap() -> None:
    size, overlap = 300, 120  # sentences are ~80 characters: a sentence start is always in reach
    text = _sentences(40)
    doc = _doc(Block(text, ("Intro",)))
    chunks = chunk_document(doc, size, overlap)
    _assert_well_formed(chunks, doc)
    assert len(chunks) > len(text) // size
    assert all(len(c.text) <= size for c in chunks)
    sentence_starts = {m.start() for m in re.finditer(r"[A-Z]", text)}
    for prev, cur in itertools.pairwise(chunks):
        longest = min(len(prev.text), len(cur.text))
        shared = next(k for k in range(longest, 0, -1) if prev.text.endswith(cur.text[:k]))
        assert 0 < shared <= overlap, "each piece starts with the tail of the previous one"
        assert text.find(cur.text) in sentence_starts, "overlap snaps to a sentence start"
        assert prev.text[-1] == ".", "pieces end at sentence ends"
    # nothing lost: every sentence of the block is in some chunk
    for sentence in re.findall(r"[A-Z][^.]*\.", text):
        assert any(sentence in c.text for c in chunks)


def test_long_sentence_falls_back_to_word_boundaries() -> None:
    text = " ".join(f"{WORDS[i % len(WORDS)]}{i}" for i in range(400))  # no sentence end at all
    chunks = chunk_document(_doc(Block(text)), 250, 40)
    words = set(text.split())
    assert all(len(c.text) <= 250 for c in chunks)
    for c in chunks:
        assert set(c.text.split()) <= words, "no word was cut"
    assert chunks[1].text.split()[0] in chunks[0].text.split(), "word-snapped overlap"


def test_unbreakable_token_is_cut_hard() -> None:
    chunks = chunk_document(_doc(Block("x" * 1000)), 120, 20)
    assert all(len(c.text) <= 120 for c in chunks)
    assert "".join(c.text for c in chunks).count("x") >= 1000


def test_code_larger_than_size_is_its_own_chunk() -> None:
    size = 200
    code = _code(6, "mid")
    assert size < len(code) <= CODE_SOLO_FACTOR * size
    doc = _doc(Block("Before the code."), Block(code, kind="code"), Block("After the code."))
    chunks = chunk_document(doc, size, 50, min_size=0)
    assert [c.text for c in chunks] == ["Before the code.", code, "After the code."]


def test_huge_code_splits_only_at_blank_lines_then_lines() -> None:
    size = 150
    code = _code(40, "big") + "\n\n" + "\n".join(f"line_{i} = {i}" for i in range(40))
    long_line = "payload = '" + "z" * (2 * size) + "'"
    code += "\n\n" + long_line
    assert len(code) > CODE_SOLO_FACTOR * size
    chunks = chunk_document(_doc(Block(code, kind="code")), size, 50)
    source_lines = code.split("\n")
    assert len(chunks) > 4
    for c in chunks:
        for line in c.text.split("\n"):
            assert line in source_lines, "never split mid-line"
    assert any(long_line in c.text for c in chunks), "a single huge line stays whole"
    assert "\n".join(c.text for c in chunks).replace("\n\n", "\n") == code.replace("\n\n", "\n")


def test_heading_change_starts_a_new_chunk_and_text_has_no_headings() -> None:
    a = _sentences(2, seed=1)
    b = _sentences(2, seed=2)
    doc = _doc(Block(a, ("Guide", "Install")), Block(b, ("Guide", "Configure")))
    chunks = chunk_document(doc, 1000, 100)
    assert [(c.heading_path, c.text) for c in chunks] == [
        (("Guide", "Install"), a),
        (("Guide", "Configure"), b),
    ]


def test_same_section_blocks_pack_together() -> None:
    blocks = [Block(_sentences(1, seed=i), ("S",)) for i in range(6)]
    chunks = chunk_document(_doc(*blocks), 300, 30)
    assert "\n\n".join(c.text for c in chunks) == "\n\n".join(b.text for b in blocks)
    assert all(len(c.text) <= 300 for c in chunks)
    assert len(chunks) < len(blocks)


def test_tiny_chunks_merge_into_neighbours() -> None:
    body = _sentences(3, seed=4)
    doc = _doc(
        Block("Tiny lead.", ("A",)),
        Block(body, ("B",)),
        Block("New in 3.7.", ("B", "x")),
        Block(body + " Again.", ("C",)),
    )
    chunks = chunk_document(doc, 1000, 100, min_size=40)
    assert [c.heading_path for c in chunks] == [("B",), ("C",)]
    assert chunks[0].text == f"Tiny lead.\n\n{body}\n\nNew in 3.7."
    # the same tiny piece stays alone when merging would overflow 1.25 * size
    big = Block(_code(8, "big"), ("B",), "code")
    alone = chunk_document(_doc(big, Block("New in 3.7.", ("B", "x"))), 240, 0, min_size=40)
    assert len(big.text) + 2 + len("New in 3.7.") > 240 * TINY_MERGE_FACTOR
    assert [c.heading_path for c in alone] == [("B",), ("B", "x")]


def test_lead_in_moves_with_its_code() -> None:
    code = _code(2, "ex")
    filler = _sentences(4, seed=9)
    doc = _doc(Block(filler), Block("For example:"), Block(code, kind="code"))
    assert len(filler) + 2 + len("For example:") <= 400 < len(filler) + len("For example:") + 4 + len(code)
    chunks = chunk_document(doc, 400, 40)
    assert chunks[-1].text == f"For example:\n\n{code}"


def test_ids_are_stable_and_change_only_where_text_changed() -> None:
    sections = [Block(_sentences(12, seed=s), (f"Section {s}",)) for s in range(4)]
    doc = _doc(*sections)
    first = chunk_document(doc, 400, 60)
    again = chunk_document(doc, 400, 60)
    assert [c.chunk_id for c in first] == [c.chunk_id for c in again]
    edited = list(sections)
    edited[2] = replace(sections[2], text=sections[2].text.replace("number 2-11.", "number 2-11, edited."))
    after = chunk_document(_doc(*edited), 400, 60)
    before_ids = {c.chunk_id: c for c in first}
    changed = [c for c in after if c.chunk_id not in before_ids]
    assert changed and all(c.heading_path == ("Section 2",) for c in changed)
    untouched = [c for c in first if c.heading_path != ("Section 2",)]
    assert {c.chunk_id for c in untouched} <= {c.chunk_id for c in after}
    other_doc = chunk_document(replace(doc, doc_id="docs/other.md"), 400, 60)
    assert not {c.chunk_id for c in other_doc} & set(before_ids)


def test_duplicate_texts_get_distinct_ids() -> None:
    same = "The very same paragraph, repeated in two sections of one document."
    chunks = chunk_document(_doc(Block(same, ("A",)), Block(same, ("B",))), 500, 50)
    assert len(chunks) == 2 and chunks[0].chunk_id != chunks[1].chunk_id


def test_bad_parameters() -> None:
    with pytest.raises(ValueError, match="size"):
        chunk_document(_doc(Block("text")), 0, 0)
    text = _sentences(20)
    chunks = chunk_document(_doc(Block(text)), 100, 500)  # overlap >= size is clamped, still ends
    assert all(len(c.text) <= 100 for c in chunks) and text.endswith(chunks[-1].text[-20:])


# ---------------------------------------------------------------- property-style

_paths = st.sampled_from([(), ("A",), ("A", "B"), ("C",)])


@st.composite
def _documents(draw: st.DrawFn) -> tuple[LoadedDocument, int, int]:
    size = draw(st.integers(60, 400))
    overlap = draw(st.integers(0, size // 2))
    blocks = []
    for i in range(draw(st.integers(1, 12))):
        path = draw(_paths)
        if draw(st.booleans()):
            n = draw(st.integers(1, 3 * size // 20 + 1))
            blocks.append(Block(_code(n, f"c{i}"), path, "code"))
        else:
            blocks.append(Block(_sentences(draw(st.integers(1, 40)), seed=i), path))
    return _doc(*blocks), size, overlap


@settings(max_examples=120, deadline=None)
@given(_documents())
def test_property_code_whole_sizes_bounded_nothing_lost(case: tuple[LoadedDocument, int, int]) -> None:
    doc, size, overlap = case
    chunks = chunk_document(doc, size, overlap)
    _assert_well_formed(chunks, doc)
    all_words = {w for c in chunks for w in c.text.split()}
    for block in doc.blocks:
        if block.kind == "code" and len(block.text) <= CODE_SOLO_FACTOR * size:
            holders = [c for c in chunks if block.text in c.text]
            assert len(holders) == 1, "every code block intact in exactly one chunk"
        elif block.kind == "code":
            lines = set(block.text.split("\n"))
            assert all(line in lines for c in chunks if c.text in block.text for line in c.text.split("\n"))
        assert set(block.text.split()) <= all_words, "nothing lost"
    code_texts = [b.text for b in doc.blocks if b.kind == "code"]
    for c in chunks:
        if not any(code in c.text for code in code_texts):
            assert len(c.text) <= int(size * TINY_MERGE_FACTOR)
    assert [c.chunk_id for c in chunk_document(doc, size, overlap)] == [c.chunk_id for c in chunks]
