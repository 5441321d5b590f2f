"""Markdown and HTML to heading-aware blocks (reST lives in `rst.py`).

Retrieval needs three things from markup: the heading path of every passage (it is prepended
to chunk text and shown in citations), code kept whole (a split doctest answers nothing), and
prose free of markup noise so BM25 matches words, not URLs or tags. The parsers are forgiving:
malformed markup degrades to paragraphs instead of failing the file. Hostile shapes are refused
fast instead: HTML nested deeper than `MAX_HTML_DEPTH` stops the parse at that depth, more than
`MAX_HTML_TAGS` tags is refused before parsing (html.parser with bs4 costs ~30 µs a tag on 2 busy
cores), and an unterminated tag or comment at the end is dropped, as HTML5 does, before the parse
(CPython 3.11's html.parser rescans it once per `<`, quadratic). Every regex here runs in linear time.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, NamedTuple

import yaml
from bs4 import BeautifulSoup, NavigableString, PageElement, Tag
from bs4.builder._htmlparser import BeautifulSoupHTMLParser, HTMLParserTreeBuilder
from bs4.element import PreformattedString
from bs4.exceptions import ParserRejectedMarkup

from ragloop.ingest.cleaning import clean_code, clean_text
from ragloop.ingest.types import Block, BlockKind, LoaderError

MAX_HTML_DEPTH = 512  # Chromium's HTML parser stops nesting at 512 too
MAX_HTML_TAGS = 200_000  # every `<` and `&` counts: ~100k elements, a page of about 2 MB
MAX_HTML_ATTRIBUTES = 200_000  # in all the file's start tags together
MAX_FRONT_MATTER = 64 * 1024


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
_TABLE_SEP = re.compile(r"^\s*(?:\|\s*)?:?-+:?\s*(?:\|\s*:?-+:?\s*)*(?:\|\s*)?$")  # no two adjacent \s*
# Neither the link text nor the URL runs past a `[`: a run of unclosed brackets is scanned once, not
# once per bracket (quadratic before: 20k `[a](` took two minutes).
_LINK = re.compile(r"!?\[([^\[\]]*)\]\([^)\s\[]*(?:\s+\"[^\"]*\")?\)")


def _md_inline(text: str) -> str:
    """Links keep their words and lose their URLs, which would only add noise terms to BM25; twice, so
    a badge (an image inside a link) keeps only its words."""
    return _LINK.sub(r"\1", _LINK.sub(r"\1", text))


def _front_matter(lines: list[str]) -> tuple[dict[str, object], list[str]]:
    """YAML between `---` lines at the top; malformed, or over MAX_FRONT_MATTER characters (PyYAML
    takes seconds on a deeply nested one), it is text like the rest."""
    if not lines or lines[0].strip() != "---":
        return {}, lines
    for j in range(1, len(lines)):
        if lines[j].strip() in ("---", "..."):
            raw = "\n".join(lines[1:j])
            try:
                if len(raw) > MAX_FRONT_MATTER:
                    return {}, lines
                data = yaml.safe_load(raw)
            except (yaml.YAMLError, RecursionError):
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
            sink.add("\n".join(_md_inline(" | ".join(r)) for r in rows), "table")  # one call a row, not a cell
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


# One match per tag name or attribute (a quoted value is taken whole), counted in C before html.parser
# loops over the attributes in Python (~5 µs each: 500k bare attributes in 1 MB took 2.4 s).
_ATTRIBUTE = re.compile(r"""[^\s/>=]+(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s>]*))?""")


class _VoidTags(Counter[str]):
    """bs4 keeps the void elements (`<br>`, `<wbr>`, `<img>`) still waiting for a stray end tag in a
    list that every end tag searches: quadratic, 184 s on a real 4.9 MB rustdoc page with 20k `<wbr>`.
    The same multiset, with the list's three operations in constant time."""

    def append(self, tag: str) -> None:
        self[tag] += 1

    def remove(self, tag: str) -> None:
        self[tag] -= 1
        if self[tag] <= 0:
            del self[tag]


class _CountingParser(BeautifulSoupHTMLParser):
    """Counts the attributes of every start tag, and refuses the file past MAX_HTML_ATTRIBUTES before
    html.parser reads them one by one."""

    attributes = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.already_closed_empty_element = _VoidTags()  # type: ignore[assignment]

    def check_for_whole_start_tag(self, i: int) -> int:
        raw, gt = self.rawdata, self.rawdata.find(">", i)
        gt = len(raw) if gt < 0 else gt
        # more separators than the budget up to the first `>`: a flood, refused before the stdlib's
        # regex walks it (no document has 200k spaces in one tag)
        if sum(raw.count(c, i, gt) for c in " \n\t/") > MAX_HTML_ATTRIBUTES:
            self._too_many()
        end: int = super().check_for_whole_start_tag(i)
        if end > i:
            room = MAX_HTML_ATTRIBUTES - self.attributes + 2  # the tag name matches too
            self.attributes += len(list(islice(_ATTRIBUTE.finditer(raw, i + 1, end), room))) - 1
            if self.attributes > MAX_HTML_ATTRIBUTES:
                self._too_many()
        return end

    @staticmethod
    def _too_many() -> None:
        raise LoaderError(f"HTML has more than {MAX_HTML_ATTRIBUTES:,} attributes")


class _CountingBuilder(HTMLParserTreeBuilder):
    def feed(self, markup: Any, _parser_class: type[BeautifulSoupHTMLParser] = _CountingParser) -> None:
        super().feed(markup, _parser_class)


class _BoundedSoup(BeautifulSoup):
    """Stops the parse at the first element nested deeper than MAX_HTML_DEPTH: 200k nested `<div>`s
    are refused after 512 of them (milliseconds), not after building the whole tree (12 s)."""

    def pushTag(self, tag: Tag) -> None:
        if len(self.tagStack) > MAX_HTML_DEPTH:  # the stack holds the document root too
            raise LoaderError(f"HTML nests elements more than {MAX_HTML_DEPTH} deep (unclosed tags?)")
        super().pushTag(tag)


_TAG_OPEN = re.compile(r"<[A-Za-z/!?]")


def _drop_unterminated_tail(text: str) -> str:
    """Cut at the first tag, comment or declaration opened after the last `>`: it runs to the end of
    the file, and HTML5 drops a tag (and the text of a comment) left open at the end of the input."""
    m = _TAG_OPEN.search(text, text.rfind(">") + 1)
    return text[: m.start()] if m else text


@dataclass
class _Html(Sink):
    inline: list[str] = field(default_factory=list)
    first_h1: str | None = None

    def flush(self) -> None:
        self.add(" ".join("".join(self.inline).split()))
        self.inline.clear()

    def walk(self, root: Tag) -> None:
        """Depth-first over the tree with an explicit stack (no recursion, whatever the depth): inline
        elements add to the current paragraph, a block element flushes it before and after."""
        stack: list[tuple[Iterator[PageElement], bool]] = [(iter(root.children), False)]
        while stack:
            children, is_block = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                if is_block:
                    self.flush()
            elif isinstance(child, PreformattedString):  # comments, doctype, CDATA
                continue
            elif isinstance(child, NavigableString):
                self.inline.append(str(child))
            elif not isinstance(child, Tag) or child.name in _DROP_TAGS:
                continue
            elif child.name in _INLINE_TAGS and not (child.name == "code" and "\n" in child.get_text().strip()):
                stack.append((iter(child.children), False))
            elif child.name == "br":
                self.inline.append(" ")
            else:
                self.flush()
                if self.block(child):
                    stack.append((iter(child.children), True))
                else:
                    self.flush()

    def block(self, el: Tag) -> bool:
        """Adds a heading, code, list or table element whole; True for any other block element, whose
        children the walk goes on with."""
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
            return True
        return False


def parse_html(text: str) -> Parsed:
    tags = text.count("<") + text.count("&")
    if tags > MAX_HTML_TAGS:
        raise LoaderError(
            f"HTML has {tags:,} tags and character references, over the {MAX_HTML_TAGS:,} limit: split the file"
        )
    try:
        with warnings.catch_warnings():  # bs4 warns about input that looks like a URL or XML
            warnings.simplefilter("ignore")
            soup = _BoundedSoup(_drop_unterminated_tail(text), builder=_CountingBuilder())
    except ParserRejectedMarkup as exc:  # its last line is html.parser's own complaint
        detail = str(exc).strip().splitlines()[-1].strip().removeprefix("AssertionError: ")
        raise LoaderError(f"malformed HTML: {detail[:200]}") from None
    sink = _Html()
    sink.walk(soup.body or soup)
    sink.flush()
    title = clean_text(soup.title.get_text(" ")) if soup.title else ""
    return Parsed(title or sink.first_h1, sink.blocks, {})
