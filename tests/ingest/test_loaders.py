"""Loaders: every format on small realistic files, every way a file can be bad, and a slice of
the real Python documentation sources."""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import pytest
from pypdf import PdfReader, PdfWriter

from ragloop.ingest.chunking import chunk_document
from ragloop.ingest.cleaning import clean_text, strip_rst_inline
from ragloop.ingest.loaders import SUPPORTED_SUFFIXES, is_supported, load_file
from ragloop.ingest.types import LoadedDocument, LoaderError
from tests.conftest import DATASETS

PYDOCS = DATASETS / "python311-docs-rst"


def _load_one(tmp_path: Path, name: str, content: str | bytes) -> LoadedDocument:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_bytes(content)
    docs = load_file(path, tmp_path)
    assert len(docs) == 1
    return docs[0]


def _kinds(doc: LoadedDocument, kind: str) -> list[str]:
    return [b.text for b in doc.blocks if b.kind == kind]


def _pdf_escape(line: str) -> str:
    return line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def make_pdf(pages: list[str], title: str | None = None) -> bytes:
    """A minimal valid PDF with one Helvetica text stream per page, offsets computed for real."""
    objs: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    kids = []
    for text in pages:
        shows = " ".join(f"({_pdf_escape(x)}) Tj T*" for x in text.split("\n"))
        stream = f"BT /F1 12 Tf 14 TL 72 720 Td {shows} ET".encode("latin-1")
        objs.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
        objs.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (len(objs))
        )
        kids.append(len(objs))
    objs[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % k for k in kids), len(kids))
    if title:
        objs.append(b"<< /Title (%s) >>" % _pdf_escape(title).encode("latin-1"))
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objs, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n%s\nendobj\n" % (n, body))
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1))
    out.write(b"".join(b"%010d 00000 n \n" % off for off in offsets))
    info = b" /Info %d 0 R" % len(objs) if title else b""
    out.write(b"trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, info, xref))
    return out.getvalue()


# ---------------------------------------------------------------- cleaning


def test_clean_text_normalises_unicode_whitespace_and_controls() -> None:
    decomposed = "Cafe\u0301"
    raw = f"  {decomposed}  au   lait\r\n\r\n\r\n\r\nnext\x00\x07 line\tx  \r"
    out = clean_text(raw)
    assert "Café" in out and "\u0301" not in out
    assert out.startswith("  Café au lait\n")  # leading indentation is structure, kept
    assert "  " not in out.strip()
    assert "\r" not in out and "\x00" not in out and "\x07" not in out
    assert "\n\n\n" not in out and "\n\n" in out
    assert "\t" in out
    assert out == clean_text(out)  # idempotent


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (":func:`os.walk`", "os.walk"),
        (":class:`~pathlib.Path`", "Path"),
        (":meth:`!Path.stat`", "Path.stat"),
        ("``x``", "x"),
        ("``**kwargs**``", "**kwargs**"),
        ("`text <https://example.org>`_", "text"),
        ("`anonymous <https://example.org>`__", "anonymous"),
        ("**b** and *i*", "b and i"),
        (":pep:`8`", "PEP 8"),
        (":ref:`the guide <some-label>`", "the guide"),
        (":c:func:`PyConfig_Read`", "PyConfig_Read"),
        ("os.spawn*p* stays", "os.spawn*p* stays"),
        ("f(*args, **kwargs)", "f(*args, **kwargs)"),
    ],
)
def test_strip_rst_inline(raw: str, want: str) -> None:
    assert strip_rst_inline(raw) == want


def test_strip_rst_inline_spans_wrapped_lines() -> None:
    raw = "see :ref:`surrogateescape\n   handler <surrogateescape>` and ``(dirpath,\n   dirnames)``"
    out = strip_rst_inline(raw)
    assert "`" not in out and ":ref:" not in out and "surrogateescape\n   handler" in out


# ---------------------------------------------------------------- detection


@pytest.mark.parametrize(
    ("name", "supported"),
    [
        ("guide.md", True),
        ("GUIDE.MD", True),
        ("notes.markdown", True),
        ("os.rst.txt", True),
        ("page.htm", True),
        ("data.jsonl", True),
        ("paper.pdf", True),
        ("script.py", False),
        ("README", False),
        ("archive.tar.gz", False),
    ],
)
def test_is_supported(name: str, supported: bool) -> None:
    assert is_supported(Path(name)) is supported
    if supported:
        assert any(name.lower().endswith(s) for s in SUPPORTED_SUFFIXES)


def test_rst_txt_is_parsed_as_restructuredtext(tmp_path: Path) -> None:
    src = "Title\n=====\n\nUse :func:`os.walk` here.\n"
    as_rst = _load_one(tmp_path, "os.rst.txt", src)
    as_txt = _load_one(tmp_path, "plain.txt", src)
    assert as_rst.title == "Title" and as_rst.blocks[0].text == "Use os.walk here."
    assert as_txt.title == "plain" and ":func:" in as_txt.text


def test_doc_id_is_relative_posix_path(tmp_path: Path) -> None:
    doc = _load_one(tmp_path, "a/b/c.txt", "hello there")
    assert doc.doc_id == "a/b/c.txt"


# ---------------------------------------------------------------- Markdown

MARKDOWN = """---
title: Deployment Guide
owner: ops-team
version: 3
tags: [a, b]
---
Intro with a [link](https://example.org/x) to docs.

# Installing

Run the installer:

```bash
# this is a comment, not a heading
pip install ragloop
```

Configuration
-------------

- first item
  continues here
- second item

| key | value |
|-----|-------|
| size | 1200 |

~~~
## also not a heading
~~~

### Troubleshooting ###

Check the logs.
"""


def test_markdown_structure(tmp_path: Path) -> None:
    doc = _load_one(tmp_path, "guide.md", MARKDOWN)
    assert doc.title == "Deployment Guide"
    assert doc.metadata == {"owner": "ops-team", "version": "3"}
    paths = {b.heading_path for b in doc.blocks}
    assert ("Installing", "Configuration", "Troubleshooting") in paths
    assert all("not a heading" not in p[-1] for p in paths if p)
    code = _kinds(doc, "code")
    assert code == ["# this is a comment, not a heading\npip install ragloop", "## also not a heading"]
    assert _kinds(doc, "list") == ["- first item\n  continues here\n- second item"]
    assert _kinds(doc, "table") == ["key | value\nsize | 1200"]
    intro = doc.blocks[0]
    assert intro.heading_path == () and "link" in intro.text and "https" not in intro.text


def test_markdown_title_falls_back_to_h1_then_stem(tmp_path: Path) -> None:
    assert _load_one(tmp_path, "a.md", "Some text.\n\n# The Heading\n\nMore.").title == "The Heading"
    assert _load_one(tmp_path, "b-notes.md", "## Only h2\n\nText.").title == "b-notes"


# ---------------------------------------------------------------- reStructuredText

RST = """\
.. _top-label:

~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
:mod:`walker` --- Walking trees
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~

.. module:: walker
   :synopsis: Walk directory trees.

.. index:: single: walking

This module uses :func:`os.walk` and :class:`~pathlib.Path`.

Basics
======

For example::

   for root, dirs, files in walk("."):
       print(root)

   print("after a blank line")

>>> walk_count(".")
3

.. function:: walk(top, topdown=True)

   Yield ``(dirpath, dirnames, filenames)`` for *top*.

   .. versionchanged:: 3.6
      Accepts a :term:`path-like object`.

.. function:: walker.count(top)

   Count entries.

.. class:: Walker(root)

   A reusable walker.

   .. method:: run()

      Run the walk.

.. note::

   Symlinks are not followed.

..
   This is a comment and must vanish.

Details
-------

.. code-block:: python
   :linenos:

   x = 1

   y = 2

.. toctree::
   :maxdepth: 1

   walking/intro.rst
   Advanced topics <walking/advanced>

More
====

Back at level two.
"""


def test_rst_structure(tmp_path: Path) -> None:
    doc = _load_one(tmp_path, "walker.rst", RST)
    top = "walker --- Walking trees"
    assert doc.title == top
    by_text = {b.text: b for b in doc.blocks}
    assert by_text["This module uses os.walk and Path."].heading_path == (top,)
    assert "For example:" in by_text
    literal = 'for root, dirs, files in walk("."):\n    print(root)\n\nprint("after a blank line")'
    assert by_text[literal].kind == "code" and by_text[literal].heading_path == (top, "Basics")
    assert by_text['>>> walk_count(".")\n3'].kind == "code"
    sig = by_text["walker.walk(top, topdown=True)"]
    assert sig.heading_path == (top, "Basics", "walker.walk")
    assert by_text["Yield (dirpath, dirnames, filenames) for top."].heading_path[-1] == "walker.walk"
    assert by_text["Changed in version 3.6: Accepts a path-like object."].heading_path[-1] == "walker.walk"
    assert "walker.count(top)" in by_text  # already qualified: not walker.walker.count
    assert by_text["class walker.Walker(root)"].heading_path[-1] == "walker.Walker"
    run = by_text["walker.Walker.run()"]
    assert run.heading_path == (top, "Basics", "walker.Walker", "walker.Walker.run")
    assert by_text["Symlinks are not followed."].heading_path == (top, "Basics")
    # "-" first appears after "=", so Details is a level below Basics; "More" is back at level 2
    assert by_text["x = 1\n\ny = 2"].heading_path == (top, "Basics", "Details")
    assert by_text["Back at level two."].heading_path == (top, "More")
    assert by_text["- walking/intro\n- Advanced topics"].kind == "list"
    text = doc.text
    for gone in ("comment", ".. ", "index::", "synopsis", "linenos", ":func:", "top-label"):
        assert gone not in text


def test_rst_tables_and_lists(tmp_path: Path) -> None:
    src = """\
Tables
======

+----------+---------------------+
| Name     | Meaning             |
+==========+=====================+
| ``sep``  | the path separator, |
|          | :data:`os.sep`      |
+----------+---------------------+

=====  ======
Flag   Effect
=====  ======
``-v``  verbose
``-q``  quiet
=====  ======

* one :func:`a`
* two, with code::

     print(2)

#. numbered
"""
    doc = _load_one(tmp_path, "t.rst", src)
    assert _kinds(doc, "table") == [
        "Name | Meaning\nsep | the path separator, os.sep",
        "Flag | Effect\n-v | verbose\n-q | quiet",
    ]
    assert "print(2)" in _kinds(doc, "code")
    lists = "\n".join(_kinds(doc, "list"))
    assert "- one a" in lists and "- two, with code:" in lists and "numbered" in lists


# ---------------------------------------------------------------- HTML

HTML = """<!DOCTYPE html>
<html><head><title>Widget Manual</title><style>p { color: red }</style>
<script>var tracking = 1;</script></head>
<body>
<nav><a href="/">Home</a> | <a href="/about">About</a></nav>
<header><h1>Site banner</h1></header>
<h1>Widgets</h1>
<p>A <b>widget</b> is configured with <code>widget.conf</code>.</p>
<!-- an HTML comment -->
<h2>Example</h2>
<pre><code>def make():
    return Widget()
</code></pre>
<ul><li>small</li><li>large<ul><li>extra large</li></ul></li></ul>
<table><tr><th>size</th><th>price</th></tr><tr><td>small</td><td>3</td></tr></table>
<aside>Ad: buy more widgets</aside>
<footer>Copyright</footer>
</body></html>
"""


def test_html_structure(tmp_path: Path) -> None:
    doc = _load_one(tmp_path, "manual.html", HTML)
    assert doc.title == "Widget Manual"
    text = doc.text
    for gone in ("tracking", "color", "Home", "banner", "comment", "Ad:", "Copyright"):
        assert gone not in text
    assert doc.blocks[0].text == "A widget is configured with widget.conf."
    assert doc.blocks[0].heading_path == ("Widgets",)
    assert _kinds(doc, "code") == ["def make():\n    return Widget()"]
    assert _kinds(doc, "list") == ["- small\n- large\n  - extra large"]
    assert _kinds(doc, "table") == ["size | price\nsmall | 3"]
    assert {b.heading_path for b in doc.blocks if b.kind != "text"} == {("Widgets", "Example")}


def test_html_title_fallbacks(tmp_path: Path) -> None:
    assert _load_one(tmp_path, "a.htm", "<h1>First</h1><p>text</p>").title == "First"
    assert _load_one(tmp_path, "b-page.html", "<p>only text</p>").title == "b-page"


# ---------------------------------------------------------------- PDF


def test_pdf_pages_become_blocks(tmp_path: Path) -> None:
    pages = ["Retrieval augmented generation.\nIt cites (sources).", "The second page."]
    doc = _load_one(tmp_path, "paper.pdf", make_pdf(pages, title="RAG Paper"))
    assert doc.title == "RAG Paper"
    assert [b.heading_path for b in doc.blocks] == [("Page 1",), ("Page 2",)]
    assert "It cites (sources)." in doc.blocks[0].text
    assert doc.blocks[1].text == "The second page."
    assert doc.metadata["pages"] == "2"
    assert _load_one(tmp_path, "untitled.pdf", make_pdf(["text"])).title == "untitled"


def _write_encrypted(path: Path, user_password: str) -> None:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf(["secret text"]))))
    writer.encrypt(user_password, owner_password="owner", algorithm="RC4-128")
    with path.open("wb") as f:
        writer.write(f)


def test_pdf_encrypted_with_password_is_refused(tmp_path: Path) -> None:
    _write_encrypted(tmp_path / "locked.pdf", "hunter2")
    with pytest.raises(LoaderError, match="encrypted"):
        load_file(tmp_path / "locked.pdf", tmp_path)


def test_pdf_with_empty_user_password_opens(tmp_path: Path) -> None:
    _write_encrypted(tmp_path / "restricted.pdf", "")
    (doc,) = load_file(tmp_path / "restricted.pdf", tmp_path)
    assert doc.blocks[0].text == "secret text"


def test_pdf_broken_and_textless(tmp_path: Path) -> None:
    good = make_pdf(["some words"])
    (tmp_path / "cut.pdf").write_bytes(good[: len(good) // 3])
    with pytest.raises(LoaderError, match="PDF"):
        load_file(tmp_path / "cut.pdf", tmp_path)
    (tmp_path / "fake.pdf").write_text("not a pdf at all")
    with pytest.raises(LoaderError, match="not a PDF"):
        load_file(tmp_path / "fake.pdf", tmp_path)
    writer = PdfWriter()
    writer.add_blank_page(200, 200)
    with (tmp_path / "scan.pdf").open("wb") as f:
        writer.write(f)
    with pytest.raises(LoaderError, match=r"no extractable text \(scanned PDF\?\)"):
        load_file(tmp_path / "scan.pdf", tmp_path)


# ---------------------------------------------------------------- plain text


def test_plain_text_paragraphs(tmp_path: Path) -> None:
    doc = _load_one(tmp_path, "notes.txt", "First para\nline two.\n\n\n\nSecond   para.\n")
    assert doc.title == "notes"
    assert [b.text for b in doc.blocks] == ["First para\nline two.", "Second para."]
    assert all(b.heading_path == () and b.kind == "text" for b in doc.blocks)


# ---------------------------------------------------------------- JSON lines


def test_jsonl_records(tmp_path: Path) -> None:
    rows = [
        {"id": "A-1", "title": "Alpha", "text": "alpha body", "year": 1974, "ok": True, "tags": ["x"]},
        {"_id": 7, "contents": "seven body"},
        {"passage": "no id here", "content": "content wins over passage"},
    ]
    lines = [json.dumps(r) for r in rows]
    path = tmp_path / "sub" / "c.jsonl"
    path.parent.mkdir()
    path.write_text(lines[0] + "\n\n" + lines[1] + "\n" + lines[2] + "\n")
    docs = load_file(path, tmp_path)
    assert [d.doc_id for d in docs] == ["sub/c.jsonl#A-1", "sub/c.jsonl#7", "sub/c.jsonl#4"]
    assert docs[0].title == "Alpha" and docs[0].metadata == {"year": "1974", "ok": "true"}
    assert docs[1].text == "seven body"
    assert docs[2].text == "content wins over passage" and docs[2].metadata == {"passage": "no id here"}


def test_json_list_and_json_lines_named_json(tmp_path: Path) -> None:
    listed = _records = [{"doc_id": "d1", "body": "one"}, {"doc_id": "d2", "body": "two"}]
    (tmp_path / "list.json").write_text(json.dumps(listed, indent=2))
    assert [d.doc_id for d in load_file(tmp_path / "list.json", tmp_path)] == ["list.json#d1", "list.json#d2"]
    (tmp_path / "lines.json").write_text("\n".join(json.dumps(r) for r in _records))
    assert [d.text for d in load_file(tmp_path / "lines.json", tmp_path)] == ["one", "two"]
    (tmp_path / "obj.json").write_text(json.dumps({"config": {"a": 1}}, indent=2))
    with pytest.raises(LoaderError, match="neither JSON lines nor a list"):
        load_file(tmp_path / "obj.json", tmp_path)


def test_real_cacm_json_lines() -> None:
    path = DATASETS / "cacm" / "cacm.json"
    if not path.exists():
        pytest.skip("shared CACM data set not present")
    docs = load_file(path, path.parent)
    assert len(docs) == sum(1 for line in path.read_text().splitlines() if line.strip())
    assert all(d.doc_id.startswith("cacm.json#CACM-") and d.text for d in docs)
    assert len({d.doc_id for d in docs}) == len(docs)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"id": 1, "text": "ok"}\n{"id": 2, "text": "broken"\n', r"malformed JSON on line 2"),
        ('{"id": 1, "text": "ok"}\n\n{"id": 2, "title": "no body"}\n', r"line 3: record has no text field"),
        ('{"id": 1, "text": "a"}\n{"id": 1, "text": "b"}\n', r"line 2: duplicate record id '1'"),
        ('["not", "an", "object"]\n', r"line 1: expected a JSON object"),
    ],
)
def test_jsonl_errors_name_the_line(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "bad.jsonl").write_text(content)
    with pytest.raises(LoaderError, match=message):
        load_file(tmp_path / "bad.jsonl", tmp_path)


# ---------------------------------------------------------------- bad input


def test_unreadable_file(tmp_path: Path) -> None:
    if os.geteuid() == 0:  # root reads through chmod 000: use things that cannot be read at all
        (tmp_path / "dir.md").mkdir()
        with pytest.raises(LoaderError, match="not a regular file"):
            load_file(tmp_path / "dir.md", tmp_path)
        (tmp_path / "dangling.md").symlink_to(tmp_path / "missing-target.md")
        with pytest.raises(LoaderError, match="dangling symlink"):
            load_file(tmp_path / "dangling.md", tmp_path)
    else:
        path = tmp_path / "secret.md"
        path.write_text("# hidden\n\ntext")
        path.chmod(0)
        try:
            with pytest.raises(LoaderError, match="permission denied"):
                load_file(path, tmp_path)
        finally:
            path.chmod(0o644)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("nul.md", b"# Title\n\ntext\x00more", r"binary content \(NUL byte at offset 13\)"),
        ("empty.txt", b"", r"^empty file$"),
        ("blank.md", b"   \n\n\t\n", r"^empty file$"),
        ("latin1.txt", "ok then caf\xe9".encode("latin-1"), r"invalid UTF-8 at byte offset 11"),
        ("bom-bad.txt", b"\xef\xbb\xbfab\xff", r"invalid UTF-8 at byte offset 5"),
        ("utf16.txt", "hello".encode("utf-16"), r"UTF-16"),
        (
            "scripts.html",
            b"<html><script>var x = 1;</script><style>p{}</style></html>",
            r"no text after cleaning",
        ),
        ("comment.rst", b".. just a comment\n   spanning lines\n", r"no text after cleaning"),
        ("blank.jsonl", b'{"id": 1, "text": "   "}\n', r"no text after cleaning"),
    ],
)
def test_bad_content(tmp_path: Path, name: str, content: bytes, message: str) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(LoaderError, match=message) as info:
        load_file(tmp_path / name, tmp_path)
    assert "\n" not in str(info.value)


def test_bom_is_stripped(tmp_path: Path) -> None:
    doc = _load_one(tmp_path, "bom.md", b"\xef\xbb\xbf# Heading\n\nBody.")
    assert doc.title == "Heading" and doc.blocks[0].text == "Body."


def test_size_limit_is_checked_before_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "big.txt"
    path.write_text("word " * 400)

    def no_reading(*args: object, **kwargs: object) -> None:
        raise AssertionError("the file was opened")

    monkeypatch.setattr(Path, "open", no_reading)
    monkeypatch.setattr(Path, "read_bytes", no_reading)
    with pytest.raises(LoaderError, match=r"file is 2\.0 KB, over the 1\.0 KB limit"):
        load_file(path, tmp_path, max_bytes=1000)
    monkeypatch.undo()
    assert load_file(path, tmp_path, max_bytes=2000)[0].text.startswith("word word")


def test_unsupported_and_outside_root(tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text("print(1)")
    with pytest.raises(LoaderError, match="unsupported"):
        load_file(tmp_path / "x.py", tmp_path)
    (tmp_path / "a.txt").write_text("text")
    with pytest.raises(LoaderError, match="not under"):
        load_file(tmp_path / "a.txt", tmp_path / "elsewhere")


# ---------------------------------------------------------------- real corpus


def _sample_pydocs(n: int) -> list[Path]:
    files = sorted(PYDOCS.rglob("*.rst.txt"))
    step = max(1, len(files) // n)
    picked = [PYDOCS / "library" / "os.rst.txt", PYDOCS / "tutorial" / "controlflow.rst.txt"]
    picked += [f for f in files[::step] if f not in picked]
    return picked[:n]


@pytest.mark.skipif(not PYDOCS.exists(), reason="shared Python docs sources not present")
def test_real_python_docs() -> None:
    files = _sample_pydocs(20)
    assert len(files) == 20
    role = re.compile(r":[a-z]+(?::[a-z]+)?:`")
    all_chunks = []
    for path in files:
        (doc,) = load_file(path, PYDOCS)
        assert doc.doc_id == path.relative_to(PYDOCS).as_posix()
        assert doc.title and not role.search(doc.title)
        chunks = chunk_document(doc, 1200, 150)
        assert chunks, path
        for block in doc.blocks:
            if block.kind == "code" and len(block.text) <= 4 * 1200:
                assert sum(block.text in c.text for c in chunks) >= 1
        all_chunks += chunks
    for c in all_chunks:
        assert not role.search(c.text), (c.doc_id, c.text[:200])
        assert ".. index::" not in c.text and ".. function::" not in c.text
    os_chunks = [c for c in all_chunks if c.doc_id == "library/os.rst.txt"]
    walk = [c for c in os_chunks if c.heading_path[-1:] == ("os.walk",)]
    assert walk and any("os.walk(top, topdown=True" in c.text for c in walk)
    assert any(c.heading_path[-2:] == ("Files and Directories", "os.walk") for c in walk)
    flow = [c for c in all_chunks if c.doc_id == "tutorial/controlflow.rst.txt"]
    assert flow[0].title == "More Control Flow Tools"
    assert any(c.heading_path[-1] == "if Statements" and ">>> if x < 0:" in c.text for c in flow)
