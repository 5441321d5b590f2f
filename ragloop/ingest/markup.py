"""Markdown and HTML to heading-aware blocks (reST lives in `rst.py`).

Retrieval needs three things from markup: the heading path of every passage (it is prepended
to chunk text and shown in citations), code kept whole (a split doctest answers nothing), and
prose free of markup noise so BM25 matches words, not URLs or tags. The parsers are forgiving:
malformed markup degrades to paragraphs instead of failing the file.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import NamedTuple

import yaml
from bs4 import BeautifulSoup, NavigableString, Tag
from bs4.element import PreformattedString

from ragloop.ingest.cleaning import clean_code, clean_text
from ragloop.ingest.types import Block, BlockKind


class Parsed(NamedTuple):
    title: str | None
    blocks: list[Block]
    metadata: dict[str, str]


def indent_of(line: str) -> int:
    return len(line) - len(line.lstrip())


def dedent(lines: list[str]) -> list[str]:
    width = min((indent_of(x) for x in lines if x.strip()), default=0)
    return [x[width:] for x in lines]


@dataclass
class Sink:
    """Collects blocks under a heading stack where a new heading of level L pops levels >= L."""

    blocks: list[Block] = field(default_factory=list)
    stack: list[tuple[int, str]] = field(default_factory=list)

    def path(self, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
        return tuple(t for _, t in self.stack) + extra

    def heading(self, level: int, title: str) -> None:
        while self.stack and self.stack[-1][0] >= level:
            self.stack.pop()
        self.stack.append((level, title))

    def add(self, text: str, kind: BlockKind = "text", extra: tuple[str, ...] = ()) -> None:
        text = clean_code(text) if kind == "code" else clean_text(text)
        if text.strip():
            self.blocks.append(Block(text, self.path(extra), kind))


# ---------------------------------------------------------------- Markdown

_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})")
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_HR = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_MD_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,9}[.)])(?:\s+|$)")
_TABLE_SEP = re.compile(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)\s]*(?:\s+\"[^\"]*\")?\)")


def _md_inline(text: str) -> str:
    """Links keep their words and lose their URLs, which would only add noise terms to BM25."""
    return _LINK.sub(r"\1", text)


def _front_matter(lines: list[str]) -> tuple[dict[str, object], list[str]]:
    if not lines or lines[0].strip() != "---":
        return {}, lines
    for j in range(1, len(lines)):
        if lines[j].strip() in ("---", "..."):
            try:
                data = yaml.safe_load("\n".join(lines[1:j]))
            except yaml.YAMLError:
                return {}, lines
            return (data, lines[j + 1 :]) if isinstance(data, dict) else ({}, lines)
    return {}, lines


def _table_cells(line: str) -> list[str]:
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") and not line.endswith("\\|") else line
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)]


def parse_markdown(text: str) -> Parsed:
    meta, lines = _front_matter(text.split("\n"))
    title = str(meta["title"]) if isinstance(meta.get("title"), str | int | float) else None
    metadata = {str(k): str(v) for k, v in meta.items() if k != "title" and isinstance(v, str | int | float)}
    sink, n, i = Sink(), len(lines), 0
    para: list[str] = []
    first_h1: str | None = None

    def flush() -> None:
        if para:
            sink.add(_md_inline(" ".join(para)))
            para.clear()

    while i < n:
        line = lines[i]
        stripped = line.strip()
        if not stripped:
            flush()
            i += 1
        elif fence := _FENCE.match(line):
            flush()
            mark, pad = fence[2], len(fence[1])
            close = re.compile(rf"^ {{0,3}}{re.escape(mark[0])}{{{len(mark)},}}\s*$")
            j = i + 1
            while j < n and not close.match(lines[j]):
                j += 1
            sink.add("\n".join(x[min(pad, indent_of(x)) :] for x in lines[i + 1 : j]), "code")
            i = j + 1
        elif atx := _ATX.match(line):
            flush()
            heading = clean_text(_md_inline(atx[2] or ""))
            if heading:
                sink.heading(len(atx[1]), heading)
                first_h1 = first_h1 or (heading if len(atx[1]) == 1 else None)
            i += 1
        elif para and _SETEXT.match(line):
            heading = clean_text(_md_inline(" ".join(para)))
            para.clear()
            level = 1 if stripped[0] == "=" else 2
            sink.heading(level, heading)
            first_h1 = first_h1 or (heading if level == 1 else None)
            i += 1
        elif _HR.match(line):
            flush()
            i += 1
        elif "|" in line and i + 1 < n and "-" in lines[i + 1] and _TABLE_SEP.match(lines[i + 1]):
            flush()
            rows = [_table_cells(line)]
            i += 2
            while i < n and lines[i].strip() and "|" in lines[i]:
                rows.append(_table_cells(lines[i]))
                i += 1
            sink.add("\n".join(" | ".join(_md_inline(c) for c in r) for r in rows), "table")
        elif _MD_ITEM.match(line) and (not para or not stripped[0].isdigit()):
            flush()
            items = []
            while i < n:
                if lines[i].strip():
                    if _FENCE.match(lines[i]) or _ATX.match(lines[i]) or _HR.match(lines[i]):
                        break
                    items.append(lines[i].rstrip())
                    i += 1
                    continue
                k = i
                while k < n and not lines[k].strip():
                    k += 1
                if k < n and (_MD_ITEM.match(lines[k]) or indent_of(lines[k]) >= 2):
                    i = k
                    continue
                break
            sink.add(_md_inline("\n".join(dedent(items))), "list")
        elif not para and indent_of(line.expandtabs(4)) >= 4:
            j = i
            while j < n and (not lines[j].strip() or indent_of(lines[j].expandtabs(4)) >= 4):
                j += 1
            sink.add("\n".join(dedent([x.expandtabs(4) for x in lines[i:j]])), "code")
            i = j
        elif stripped.startswith("<!--"):
            flush()
            while i < n and "-->" not in lines[i]:
                i += 1
            i += 1
        else:
            para.append(re.sub(r"^(?:>\s?)+", "", stripped))
            i += 1
    flush()
    return Parsed(title or first_h1, sink.blocks, metadata)


# ---------------------------------------------------------------- HTML

_DROP_TAGS = {"script", "style", "nav", "header", "footer", "aside", "noscript", "template", "head", "title"}
_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
_INLINE_TAGS = {
    "a", "abbr", "b", "bdi", "bdo", "cite", "code", "data", "dfn", "em", "i", "kbd", "mark", "q",
    "s", "samp", "small", "span", "strong", "sub", "sup", "time", "u", "var", "wbr", "font",
}  # fmt: skip


def _words(el: Tag) -> str:
    return " ".join(el.get_text(" ").split())


def _list_lines(lst: Tag, depth: int) -> list[str]:
    out: list[str] = []
    for n, li in enumerate(lst.find_all("li", recursive=False), 1):
        words: list[str] = []
        nested: list[str] = []
        for child in li.children:
            if isinstance(child, Tag) and child.name in ("ul", "ol"):
                nested += _list_lines(child, depth + 1)
            elif isinstance(child, Tag) and child.name not in _DROP_TAGS:
                words.append(child.get_text(" "))
            elif isinstance(child, NavigableString) and not isinstance(child, PreformattedString):
                words.append(str(child))
        marker = f"{n}." if lst.name == "ol" else "-"
        out.append("  " * depth + f"{marker} " + " ".join(" ".join(words).split()))
        out += nested
    return out


@dataclass
class _Html(Sink):
    inline: list[str] = field(default_factory=list)
    first_h1: str | None = None

    def flush(self) -> None:
        self.add(" ".join("".join(self.inline).split()))
        self.inline.clear()

    def walk(self, el: Tag) -> None:
        for child in el.children:
            if isinstance(child, PreformattedString):  # comments, doctype, CDATA
                continue
            if isinstance(child, NavigableString):
                self.inline.append(str(child))
            elif not isinstance(child, Tag) or child.name in _DROP_TAGS:
                continue
            elif child.name in _INLINE_TAGS and not (child.name == "code" and "\n" in child.get_text().strip()):
                self.walk(child)
            elif child.name == "br":
                self.inline.append(" ")
            else:
                self.flush()
                self.block(child)
                self.flush()

    def block(self, el: Tag) -> None:
        if el.name in _HEADINGS:
            heading = clean_text(_words(el))
            if heading:
                self.heading(int(el.name[1]), heading)
                self.first_h1 = self.first_h1 or (heading if el.name == "h1" else None)
        elif el.name in ("pre", "code"):
            self.add(el.get_text(), "code")
        elif el.name in ("ul", "ol"):
            self.add("\n".join(_list_lines(el, 0)), "list")
        elif el.name == "table":
            rows = [[_words(c) for c in tr.find_all(["td", "th"])] for tr in el.find_all("tr")]
            self.add("\n".join(" | ".join(r) for r in rows if any(r)), "table")
        else:
            self.walk(el)


def parse_html(text: str) -> Parsed:
    with warnings.catch_warnings():  # bs4 warns about input that looks like a URL or XML
        warnings.simplefilter("ignore")
        soup = BeautifulSoup(text, "html.parser")
    sink = _Html()
    sink.walk(soup.body or soup)
    sink.flush()
    title = clean_text(soup.title.get_text(" ")) if soup.title else ""
    return Parsed(title or sink.first_h1, sink.blocks, {})
