"""Hostile and malformed files: each is refused with a one-line reason, or parsed, in bounded time,
and nothing a loader returns holds text a UTF-8 writer or PostgreSQL refuses (a lone surrogate, NUL).

The time bounds are generous (the suites run on 2 shared cores); every case that had a bound to
beat took seconds to minutes before (the issue's 200k nested `<div>`s: 12.6 s in the server, 4.6 s
alone; 20k `[a](` in Markdown: two minutes; 60k unclosed `<a` at the end of an HTML file: minutes).
The measured time is printed and recorded as a test property."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ragloop.ingest import markup
from ragloop.ingest.loaders import load_file
from ragloop.ingest.markup import MAX_HTML_DEPTH
from ragloop.ingest.types import LoadedDocument, LoaderError
from tests.ingest.test_loaders import make_pdf

BOUND_S = 3.0
DEEP_HTML = "<div>" * 200_000 + "x" + "</div>" * 200_000  # the 2.2 MB file


def _timed(
    tmp_path: Path, name: str, content: str | bytes, record: Callable[[str, object], None]
) -> tuple[list[LoadedDocument] | LoaderError, float]:
    path = tmp_path / name
    path.write_bytes(content.encode("utf-8", "surrogatepass") if isinstance(content, str) else content)
    # CPU seconds of this process, not wall time: the bound is about the parser's work, and a CI
    # machine busy with other processes stretched a 2 s parse past it (3.05 s wall at load 10)
    start = time.process_time()
    try:
        out: list[LoadedDocument] | LoaderError = load_file(path, tmp_path)
    except LoaderError as exc:
        out = exc
    took = time.process_time() - start
    record(f"{name} seconds", round(took, 3))
    print(f"{name}: {took:.3f} s -> {out if isinstance(out, LoaderError) else 'parsed'}")
    return out, took


@pytest.mark.parametrize(
    ("name", "content", "refusal"),
    [
        ("deep.html", DEEP_HTML, r"^HTML has 400,000 tags and character references, over the 200,000 limit"),
        # under the tag budget, stopped by the depth cap after 513 elements, not after building the tree
        ("deep90k.html", "<div>" * 90_000 + "x" + "</div>" * 90_000, rf"more than {MAX_HTML_DEPTH} deep"),
        ("inline.html", "<b>" * 90_000 + "x", rf"more than {MAX_HTML_DEPTH} deep"),
        ("flat.html", "<p>x</p>" * 200_000, r"400,000 tags"),
        ("amp.html", "<p>" + "&amp;" * 300_000 + "</p>", r"300,002 tags and character references"),
        ("attrs.html", "<div " + "a " * 500_000 + ">x</div>", r"more than 200,000 attributes"),
        ("valued.html", "<div " + "".join(f" a{i}=1" for i in range(200_001)) + ">x</div>", r"200,000 attributes"),
        # CPython 3.11's html.parser rescans an unterminated construct at the end once per `<`
        ("open-tags.html", "<p>x</p>" + "<a" * 60_000, None),
        ("open-end-tags.html", "<p>x</p>" + "</" * 60_000, None),
        ("open-comments.html", "<p>x</p>" + "<!--" * 50_000, None),
        ("marked.html", "<p>x</p><![<![ y]]><p>z</p>", r"^malformed HTML: expected name token"),
        ("links.md", "[a](" * 50_000, None),
        ("brackets.md", "[" * 300_000, None),
        ("table.md", "a|b\n" + " " * 60_000 + "-x\n", None),
        ("pipes.md", "a|b\n-|-\n" + "|" * 300_000 + "\n", None),
        ("spaces.txt", (" " * 30_000 + "-x\n") * 3, None),
        ("staircase.rst", "\n".join(" " * i + "- x" for i in range(1500)), r"nested more than 32 levels deep"),
        ("directive.rst", ".. note:: x" + " " * 60_000 + "y\n\n   body\n", None),
        ("front.md", "---\na: " + "[" * 100_000 + "]" * 100_000 + "\n---\n# T\n\ntext\n", None),
        ("deep.jsonl", '{"text": "a", "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n", r"line 1 is nested too deeply"),
    ],
)
def test_hostile_shapes_are_refused_or_parsed_in_bounded_time(
    tmp_path: Path, record_property: Callable[[str, object], None], name: str, content: str, refusal: str | None
) -> None:
    out, took = _timed(tmp_path, name, content, record_property)
    if refusal is None:
        assert not isinstance(out, LoaderError), out
    else:
        assert isinstance(out, LoaderError), "parsed, expected a refusal"
        assert re.search(refusal, str(out)), str(out)
        assert "\n" not in str(out)
    assert took < BOUND_S, f"{name} took {took:.2f} s"


def test_void_elements_without_end_tags_parse_in_linear_time(
    tmp_path: Path, record_property: Callable[[str, object], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """bs4 searched a list of every unclosed `<wbr>`/`<br>` on each end tag: a real 4.9 MB rustdoc page
    (20k `<wbr>`) took 184 s, 8 s now. The list is a multiset now: each end tag is one lookup."""
    lookups = 0
    contains = markup._VoidTags.__contains__

    def counted(self: markup._VoidTags, tag: object) -> bool:
        nonlocal lookups
        lookups += 1
        return contains(self, tag)

    monkeypatch.setattr(markup._VoidTags, "__contains__", counted)
    html = "<p>" + "a<wbr>" * 10_000 + "</p>" + "<i>b</i>" * 10_000
    out, took = _timed(tmp_path, "wbr.html", html, record_property)
    assert not isinstance(out, LoaderError) and out[0].blocks[0].text.startswith("aaaa")
    assert lookups == 10_001  # one per end tag, against a multiset of 10k pending `wbr`s
    assert took < BOUND_S, f"took {took:.2f} s"
    # the stray end tag of a void element is still ignored, as before
    (doc,) = load_file(_write(tmp_path, "void.html", "<p>a<br></br>b<img src=x></img>c</p><p>d<wbr>e</p>"), tmp_path)
    assert [b.text for b in doc.blocks] == ["a b", "c", "de"]
    pending = markup._VoidTags()
    pending.append("br")
    pending.append("br")
    pending.remove("br")
    assert "br" in pending
    pending.remove("br")
    assert "br" not in pending and not pending


def _write(tmp_path: Path, name: str, content: str) -> Path:
    (tmp_path / name).write_text(content, encoding="utf-8", errors="surrogatepass")
    return tmp_path / name


def test_html_nested_up_to_the_cap_parses_and_an_unterminated_tail_is_dropped(tmp_path: Path) -> None:
    (doc,) = load_file(_write(tmp_path, "d.html", "<div>" * 500 + "deep" + "</div>" * 500), tmp_path)
    assert doc.blocks[0].text == "deep"  # 1000 frames of recursion before: a RecursionError
    (doc,) = load_file(_write(tmp_path, "t.html", "<p>kept</p> and this <a href='x' then <!-- gone"), tmp_path)
    assert [b.text for b in doc.blocks] == ["kept", "and this"]


def test_markdown_badges_keep_only_their_words(tmp_path: Path) -> None:
    md = '# T\n\n[![npm version](https://b.svg)](https://npm.im/x) see [the docs](http://a "t") [[x]].\n'
    (doc,) = load_file(_write(tmp_path, "r.md", md), tmp_path)
    assert doc.blocks[0].text == "npm version see the docs [[x]]."


# ---------------------------------------------------------------- text nothing may store


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "s.jsonl",
            '{"id":"a","text":"hello \\ud800 x"}\n',
            r"^line 1: text has a lone surrogate U\+D800 .* at character 6",
        ),
        ("t.jsonl", '{"id":"a","text":"ok","title":"\\udfff"}\n', r"^line 1: title has a lone surrogate U\+DFFF"),
        ("m.jsonl", '{"id":"a","text":"ok","src":"x\\ud83d"}\n', r"^line 1: metadata 'src' has a lone surrogate"),
        ("i.jsonl", '{"id":"a\\ud800","text":"ok"}\n', r"^line 1: record id 'a\\ud800' has a control character or"),
        ("n.jsonl", '{"id":"a\\u0000b","text":"ok"}\n', r"^line 1: record id 'a\\x00b' has a control character"),
        ("y.md", '---\nauthor: "a\\ud800b"\n---\n# T\n\ntext\n', r"^metadata 'author' has a lone surrogate U\+D800"),
        ("late-nul.txt", "word " * 3000 + "\x00 more", r"^binary content \(NUL byte at offset 15000\)"),
        ("late-nul.md", "# T\n\n" + "word " * 3000 + "\x00", r"NUL byte at offset 15005"),
    ],
)
def test_lone_surrogates_and_nul_refuse_the_file(tmp_path: Path, name: str, content: str, message: str) -> None:
    """A JSON `\\ud800` escape decodes to a lone surrogate, which no UTF-8 writer accepts; the file is
    refused with where it is (as invalid UTF-8 bytes are), never repaired silently."""
    with pytest.raises(LoaderError, match=message) as info:
        load_file(_write(tmp_path, name, content), tmp_path)
    assert "\n" not in str(info.value)
    str(info.value).encode("utf-8")  # the reason itself is storable


def test_nul_and_controls_inside_text_and_metadata_are_cleaned(tmp_path: Path) -> None:
    docs = load_file(_write(tmp_path, "c.jsonl", '{"id":"a","text":"x\\u0000y\\u0007z","k":"v\\u0000w"}\n'), tmp_path)
    assert docs[0].blocks[0].text == "xyz" and docs[0].metadata == {"k": "vw"}
    (doc,) = load_file(_write(tmp_path, "f.md", '---\ntitle: "A\\0B"\nauthor: "c\\0d"\n---\n\ntext\n'), tmp_path)
    assert doc.title == "AB" and doc.metadata == {"author": "cd"}


def test_a_truncated_pdf_is_refused(tmp_path: Path) -> None:
    pdf = make_pdf(["some words on a page"])
    for cut in (len(pdf) // 2, len(pdf) - 40):
        path = tmp_path / f"cut{cut}.pdf"
        path.write_bytes(pdf[:cut])
        with pytest.raises(LoaderError, match="PDF"):
            load_file(path, tmp_path)


# ---------------------------------------------------------------- the command line skips them alike


def test_ragloop_ingest_skips_each_hostile_file_with_its_reason(tmp_path: Path, ragloop_home: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "good.md").write_text("# Vell\n\nThe Vell lighthouse was lit in 1902 by keeper Ansel Brock.\n")
    bad = {
        "surrogate.jsonl": '{"id":"a","text":"hello \\ud800 x"}\n',
        "deep.html": DEEP_HTML,
        "nul.txt": "text\x00more",
        "empty.md": "",
        "deep.jsonl": "[" * 100_000 + "]" * 100_000 + "\n",
    }
    for name, text in bad.items():
        (docs / name).write_text(text, encoding="utf-8", errors="surrogatepass")
    (docs / "cut.pdf").write_bytes(make_pdf(["page text"])[:300])
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps({"retrieval": {"dense": {"embedder": "test:hashed"}}}))
    env = dict(os.environ, RAGLOOP_HOME=str(ragloop_home))
    start = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "ragloop", "ingest", str(docs), "-c", "h", "--config", str(cfg), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    print(f"ragloop ingest: {time.perf_counter() - start:.1f} s")
    summary = json.loads(p.stdout)
    assert summary["files"]["new"] == 1
    reasons = {s["path"]: s["reason"] for s in summary["skipped"]}
    assert set(reasons) == {*bad, "cut.pdf"}
    assert "lone surrogate" in reasons["surrogate.jsonl"] and "tags" in reasons["deep.html"]
    assert "NUL byte" in reasons["nul.txt"] and reasons["empty.md"] == "empty file"
    assert "nested too deeply" in reasons["deep.jsonl"] and "PDF" in reasons["cut.pdf"]
