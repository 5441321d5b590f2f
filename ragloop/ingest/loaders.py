"""Files to `LoadedDocument`s: format detection, safe reading, and the structure-less formats.

Every failure is a `LoaderError` with a one-line message a user can act on (the ingest run
records it against the file and carries on), so nothing here lets an `OSError`,
`UnicodeDecodeError` or parser exception escape. Size is checked with `stat` before reading,
so a stray multi-gigabyte file costs nothing.

What a loader returns can always be stored: every string of every document (id, title, heading
path, text, metadata) is checked last (`_storable`) for the two things UTF-8 writers and
PostgreSQL refuse, a lone surrogate and NUL. Neither is repaired: a file holding one is refused
with where it is, like invalid UTF-8 bytes, because replacing would silently change the text
(bytes can only carry them as a JSON `\\ud800` escape, a YAML escape or a PDF's text map). Control
characters in text, titles and metadata are removed by `clean_text`; in a record id they refuse
the file, as an id is an address and must not change.
"""

from __future__ import annotations

import codecs
import io
import json
import re
import stat
import warnings
from collections.abc import Callable
from pathlib import Path

from ragloop.ingest.cleaning import clean_text
from ragloop.ingest.markup import Parsed, parse_html, parse_markdown
from ragloop.ingest.rst import parse_rst
from ragloop.ingest.types import Block, LoadedDocument, LoaderError

SUPPORTED_SUFFIXES: tuple[str, ...] = (
    ".md", ".markdown", ".rst", ".txt", ".html", ".htm", ".pdf", ".jsonl", ".json",
)  # fmt: skip
_FORMATS = {
    ".md": "markdown", ".markdown": "markdown", ".rst": "rst", ".txt": "text", ".html": "html",
    ".htm": "html", ".pdf": "pdf", ".jsonl": "jsonl", ".json": "json",
}  # fmt: skip
# Sphinx publishes its sources as `name.rst.txt` (and MyST ones as `name.md.txt`).
_DOUBLE_SUFFIXES = {".rst.txt": "rst", ".md.txt": "markdown"}
TEXT_KEYS = ("text", "contents", "content", "body", "passage")
ID_KEYS = ("id", "_id", "doc_id", "document_id")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_ID_REFUSED = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _format(path: Path) -> tuple[str, str] | None:
    """(format, the suffix that decided it), or None for an unsupported file."""
    name = path.name.lower()
    for suffix, fmt in _DOUBLE_SUFFIXES.items():
        if name.endswith(suffix) and len(name) > len(suffix):
            return fmt, suffix
    suffix = path.suffix.lower()
    return (_FORMATS[suffix], suffix) if suffix in _FORMATS and name != suffix else None


def is_supported(path: Path) -> bool:
    return _format(path) is not None


def _size(n: int) -> str:
    if n < 1000:
        return f"{n} bytes"
    return f"{n / 1000:.1f} KB" if n < 1_000_000 else f"{n / 1e6:.1f} MB"


def _read(path: Path, max_bytes: int) -> bytes:
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise LoaderError("not a regular file")
        if st.st_size > max_bytes:
            raise LoaderError(f"file is {_size(st.st_size)}, over the {_size(max_bytes)} limit")
        with path.open("rb") as f:
            data = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise LoaderError("file not found (deleted, or a dangling symlink)") from None
    except PermissionError:
        raise LoaderError("cannot read file: permission denied") from None
    except IsADirectoryError:
        raise LoaderError("not a regular file") from None
    except OSError as exc:
        raise LoaderError(f"cannot read file: {exc.strerror or exc}") from None
    if len(data) > max_bytes:  # grew between stat and read
        raise LoaderError(f"file is over the {_size(max_bytes)} limit")
    if not data.strip():
        raise LoaderError("empty file")
    return data


def _decode(data: bytes) -> str:
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise LoaderError("UTF-16 text is not supported: re-save the file as UTF-8")
    nul = data.find(b"\x00")  # anywhere: no text format has a NUL byte
    if nul >= 0:
        raise LoaderError(f"binary content (NUL byte at offset {nul}), not a text file")
    skip = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[skip:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LoaderError(f"invalid UTF-8 at byte offset {exc.start + skip}") from None


def _paragraphs(text: str) -> list[Block]:
    return [Block(p) for p in re.split(r"\n[ \t]*\n", clean_text(text)) if p.strip()]


def parse_plain(text: str) -> Parsed:
    return Parsed(None, _paragraphs(text), {})


def _stem(path: Path, suffix: str) -> str:
    return path.name[: -len(suffix)] or path.name


def load_file(path: Path, root: Path, max_bytes: int = 50 * 1024 * 1024) -> list[LoadedDocument]:
    """All documents in one file: one per file, or one per record for JSON lines / JSON lists."""
    found = _format(path)
    if found is None:
        raise LoaderError(f"unsupported file type: {path.name}")
    fmt, suffix = found
    try:
        rel = path.relative_to(root).as_posix()
    except ValueError:
        try:
            rel = path.resolve().relative_to(root.resolve()).as_posix()
        except (ValueError, OSError):
            raise LoaderError(f"{path} is not under the ingest root {root}") from None
    data = _read(path, max_bytes)
    if fmt == "pdf":
        return [_storable(_load_pdf(data, rel, _stem(path, suffix)))]
    text = _decode(data)
    try:
        if fmt in ("jsonl", "json"):
            return _load_records(text, rel, fmt)
        parsed = _PARSERS[fmt](text)
    except RecursionError:
        raise LoaderError(f"{fmt} nested too deeply to parse") from None
    except (LoaderError, MemoryError):
        raise
    except Exception as exc:  # a parser's own failure on odd input: this file's reason, not the run's
        first = (str(exc).strip().splitlines() or [""])[0]
        raise LoaderError(f"cannot parse as {fmt}: {type(exc).__name__} {first[:200]!r}") from None
    if not parsed.blocks:
        raise LoaderError("no text after cleaning")
    title = parsed.title or _stem(path, suffix)
    meta = {clean_text(k): clean_text(v) for k, v in parsed.metadata.items()}
    return [_storable(LoadedDocument(rel, clean_text(title), tuple(parsed.blocks), meta))]


_PARSERS: dict[str, Callable[[str], Parsed]] = {
    "markdown": parse_markdown,
    "rst": parse_rst,
    "html": parse_html,
    "text": parse_plain,
}


def _storable(doc: LoadedDocument, where: str = "") -> LoadedDocument:
    """`doc`, or a LoaderError naming the first lone surrogate or NUL in any of its strings."""
    fields = [("id", doc.doc_id), ("title", doc.title)]
    fields += [f for k, v in doc.metadata.items() for f in (("metadata key", k), (f"metadata {k!r}", v))]
    for b in doc.blocks:
        fields += [("heading", h) for h in b.heading_path] + [("text", b.text)]
    for name, value in fields:
        if m := _UNSTORABLE.search(value):
            c = m.group()
            what = "a NUL character" if c == "\x00" else f"a lone surrogate U+{ord(c):04X} (not valid Unicode)"
            raise LoaderError(f"{where}{name} has {what} at character {m.start()}: fix or remove it")
    return doc


def _load_pdf(data: bytes, rel: str, stem: str) -> LoadedDocument:
    """One block per page, headed "Page N", so citations can point at a page."""
    from pypdf import PdfReader  # import cost only for corpora that have PDFs

    if b"%PDF" not in data[:1024]:
        raise LoaderError("not a PDF (no %PDF header)")
    try:
        with warnings.catch_warnings():  # pypdf warns about every small spec violation
            warnings.simplefilter("ignore")
            reader = PdfReader(io.BytesIO(data), strict=False)
            if reader.is_encrypted:
                try:  # an empty user password (owner-only restrictions) opens for everyone
                    opened = reader.decrypt("")
                except Exception:
                    opened = 0  # type: ignore[assignment]
                if not opened:
                    raise LoaderError("encrypted PDF (needs a password)")
            pages = [page.extract_text() or "" for page in reader.pages]
            info = reader.metadata
    except LoaderError:
        raise
    except Exception as exc:  # pypdf raises many types on damaged input
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise LoaderError(f"broken PDF: {first[:200]}") from None
    blocks = [Block(t, (f"Page {n}",)) for n, raw in enumerate(pages, 1) if (t := clean_text(raw))]
    if not blocks:
        raise LoaderError("no extractable text (scanned PDF?)")
    meta = {"pages": str(len(pages))}
    title = ""
    if info is not None:
        title = clean_text(str(info.title or ""))
        if info.author:
            meta["author"] = clean_text(str(info.author))
    return LoadedDocument(rel, title or stem, tuple(blocks), meta)


def _json_lines(text: str) -> list[tuple[str, int, object]]:
    out: list[tuple[str, int, object]] = []
    for n, line in enumerate(text.split("\n"), 1):
        if line.strip():
            try:
                out.append((f"line {n}", n, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise LoaderError(f"malformed JSON on line {n}: {exc.msg} (column {exc.colno})") from None
            except RecursionError:
                raise LoaderError(f"JSON on line {n} is nested too deeply to parse") from None
    return out


def _records(text: str, fmt: str) -> list[tuple[str, int, object]]:
    """JSON lines, or for `.json` a single document that is a list of records."""
    if fmt == "json":
        try:
            whole = json.loads(text)
        except json.JSONDecodeError:
            return _json_lines(text)  # several documents: JSON lines named .json
        if isinstance(whole, list):
            return [(f"record {n}", n, r) for n, r in enumerate(whole, 1)]
        if not (isinstance(whole, dict) and "\n" not in text.strip()):
            raise LoaderError("JSON file is neither JSON lines nor a list of records")
    return _json_lines(text)


def _scalar(v: object) -> str | None:
    if isinstance(v, str):
        return v
    return json.dumps(v) if isinstance(v, bool | int | float) else None


def _load_records(text: str, rel: str, fmt: str) -> list[LoadedDocument]:
    docs: list[LoadedDocument] = []
    seen: set[str] = set()
    for where, n, rec in _records(text, fmt):
        if not isinstance(rec, dict):
            raise LoaderError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        text_key = next((k for k in TEXT_KEYS if isinstance(rec.get(k), str)), None)
        if text_key is None:
            raise LoaderError(f"{where}: record has no text field (one of {', '.join(TEXT_KEYS)})")
        id_key = next((k for k in ID_KEYS if _scalar(rec.get(k)) not in (None, "")), None)
        rid = (_scalar(rec[id_key]) if id_key else None) or str(n)
        if _ID_REFUSED.search(rid):
            raise LoaderError(f"{where}: record id {rid!r} has a control character or a lone surrogate")
        if rid in seen:
            raise LoaderError(f"{where}: duplicate record id {rid!r}")
        seen.add(rid)
        blocks = _paragraphs(rec[text_key])
        if not blocks:
            continue  # an empty record has nothing to retrieve
        title = clean_text(rec["title"]) if isinstance(rec.get("title"), str) else ""
        skip = {text_key, id_key, "title"}
        meta = {clean_text(k): clean_text(s) for k, v in rec.items() if k not in skip and (s := _scalar(v)) is not None}
        docs.append(_storable(LoadedDocument(f"{rel}#{rid}", title or rid, tuple(blocks), meta), f"{where}: "))
    if not docs:
        raise LoaderError("no text after cleaning")
    return docs
