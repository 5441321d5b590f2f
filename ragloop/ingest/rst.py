"""reStructuredText to heading-aware blocks, tuned on the Python documentation sources.

Section levels follow docutils: the order in which adornment styles first appear. Python-domain
directives (`.. function:: walk(...)`) become a signature line qualified with the current
module and a heading-path level of their own, because in API reference pages the object, not
the section, is what a question is about. Markup that carries no words a user would search for
(index entries, targets, comments, highlight settings) is dropped; everything unknown degrades
to text rather than failing the file.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field, replace

from ragloop.ingest.cleaning import clean_text, strip_rst_inline
from ragloop.ingest.markup import Parsed, Sink, dedent, indent_of
from ragloop.ingest.types import Block, LoaderError

MAX_RST_DEPTH = 32

_ADORN = re.compile(r"^([!-/:-@\[-`{-~])\1+\s*$")
_DIRECTIVE = re.compile(r"^\.\.\s+(?P<name>[\w:.+-]+)::(?:\s++(?P<args>.*\S))?\s*$")  # linear: no lazy .*? before \s*
_EXPLICIT = re.compile(r"^\.\.(?:\s|$)")
_FOOTNOTE = re.compile(r"^\.\.\s+\[[^\]]+\]\s+(.*)$")
_OPTION = re.compile(r"^:[\w.-]+:(?:\s|$)")
_BULLET = re.compile(r"^(?P<m>[-*+•]|#\.|\d+\.|\(?\d+\))(?: +|$)")
_SIMPLE_TABLE = re.compile(r"^=+(?: +=+)+\s*$")
_GRID = re.compile(r"^\+[-=+]+\+\s*$")
_DOC_FIELDS = re.compile(r"^:(?:orphan|tocdepth|nosearch)\b")

PY_OBJECTS = {
    "function", "method", "class", "attribute", "data", "exception", "decorator", "decoratormethod",
    "classmethod", "staticmethod", "abstractmethod", "coroutinefunction", "coroutinemethod",
    "property", "type",
}  # fmt: skip
PLAIN_OBJECTS = {"envvar", "cmdoption", "option", "opcode", "describe", "object", "pdbcommand", "2to3fixer"}
CODE_DIRECTIVES = {
    "code-block", "code", "sourcecode", "doctest", "testcode", "testoutput", "parsed-literal",
    "productionlist",
}  # fmt: skip
DROP_DIRECTIVES = {
    "index", "highlight", "highlightlang", "sectionauthor", "moduleauthor", "codeauthor",
    "tabularcolumns", "include", "literalinclude", "image", "raw", "contents", "audit-event",
    "audit-event-table", "testsetup", "testcleanup", "meta", "default-role", "role", "program",
    "rst-class", "cssclass", "todo", "namespace", "namespace-push", "namespace-pop",
}  # fmt: skip
ARGS_NOT_TEXT = {"only", "ifconfig", "container", "figure", "hlist", "glossary"}
VERSION_LABELS = {
    "versionadded": "New in version {0}",
    "versionchanged": "Changed in version {0}",
    "deprecated": "Deprecated since version {0}",
    "deprecated-removed": "Deprecated since version {0}, will be removed in version {1}",
}
KIND_WORDS = {
    "class": "class ", "exception": "exception ", "decorator": "@", "decoratormethod": "@",
    "classmethod": "classmethod ", "staticmethod": "staticmethod ", "abstractmethod": "abstractmethod ",
    "coroutinefunction": "coroutine ", "coroutinemethod": "coroutine ",
}  # fmt: skip


@dataclass
class _Rst(Sink):
    styles: list[tuple[str, bool]] = field(default_factory=list)
    module: str | None = None
    title: str | None = None
    depth: int = 0

    def text(self, text: str, extra: tuple[str, ...]) -> None:
        self.add(strip_rst_inline(text), "text", extra)


def _block(lines: list[str], i: int, width: int | None = None) -> tuple[list[str], int]:
    """The indented block starting at `i` (blank lines inside it included), dedented by its
    own smallest indent, or by `width` (a list item's text column) when given."""
    j = i
    while j < len(lines) and (not lines[j].strip() or indent_of(lines[j]) > 0):
        j += 1
    body = lines[i:j]
    while body and not body[-1].strip():
        body.pop()
    return (dedent(body) if width is None else [x[min(width, indent_of(x)) :] for x in body]), j


def _title_at(lines: list[str], i: int) -> tuple[str, tuple[str, bool], int] | None:
    line, n = lines[i], len(lines)
    if _ADORN.match(line) and i + 2 < n and lines[i + 1].strip() and not _ADORN.match(lines[i + 1]):
        under = lines[i + 2].strip()
        if _ADORN.match(under) and under[0] == line.strip()[0]:
            return lines[i + 1].strip(), (under[0], True), i + 3
    if i + 1 < n and indent_of(line) == 0 and not _ADORN.match(line) and _ADORN.match(lines[i + 1]):
        under = lines[i + 1].strip()
        if indent_of(lines[i + 1]) == 0 and (len(under) >= len(line.strip()) or len(under) >= 4):
            return line.strip(), (under[0], False), i + 2
    return None


def _qualify(kind: str, sig: str, module: str | None, cls: str | None) -> tuple[str, str]:
    """(qualified name, signature text) with Sphinx's rule: a name is relative to the enclosing
    class, else to the current module, unless it already starts with that prefix."""
    m = re.match(r"([\w.]+)(.*)$", sig, re.DOTALL)
    if not m:
        return sig, sig
    name, rest = m[1], m[2]
    if cls and not name.startswith(cls + "."):
        short = cls.rsplit(".", 1)[-1]
        if name.startswith(short + "."):
            name = f"{module}.{name}" if module and not name.startswith(module + ".") else name
        else:
            name = f"{cls}.{name}"
    elif not cls and module and not name.startswith(module + "."):
        name = f"{module}.{name}"
    return name, KIND_WORDS.get(kind, "") + name + rest


def _plain_name(domain: str, kind: str, sig: str) -> str:
    if domain in ("c", "cpp"):
        m = re.search(r"([A-Za-z_]\w*)\s*\(", sig) or re.search(r"([A-Za-z_][\w.]*)\W*$", sig)
        return m[1] if m else sig
    return sig if kind in ("describe", "object") else sig.split()[0]


def _split_directive(body: list[str]) -> tuple[list[str], dict[str, str], list[str]]:
    """(argument continuation lines, options, content) of a directive's indented block."""
    k, head, opts = 0, [], {}
    while k < len(body) and body[k].strip() and not _OPTION.match(body[k].strip()):
        head.append(body[k].strip())
        k += 1
    while k < len(body) and body[k].strip() and _OPTION.match(body[k].strip()):
        key, _, value = body[k].strip()[1:].partition(":")
        opts[key] = value.strip()
        k += 1
    return head, opts, body[k:]


def _code_body(body: list[str]) -> str:
    k = 0
    while k < len(body) and body[k].strip() and _OPTION.match(body[k].strip()):
        k += 1
    return "\n".join(dedent(body[k:]))


def _list_table(content: list[str]) -> list[str]:
    rows: list[list[str]] = []
    for line in content:
        s = line.strip()
        if s.startswith("* -"):
            rows.append([s[3:].strip()])
        elif s.startswith("- ") and rows:
            rows[-1].append(s[2:].strip())
        elif s and rows:
            rows[-1][-1] += " " + s
    return [" | ".join(strip_rst_inline(c) for c in r) for r in rows]


def _directive(st: _Rst, name: str, args: str, body: list[str], extra: tuple[str, ...], cls: str | None) -> None:
    domain, _, kind = name.rpartition(":")
    head, opts, content = _split_directive(body)
    if domain in ("", "py") and kind in PY_OBJECTS and args:
        module = opts.get("module", st.module) or None
        quals, sigs = zip(*(_qualify(kind, s, module, cls) for s in [args, *head] if s), strict=True)
        inner = (*extra, quals[0])
        st.add("\n".join(sigs), "text", inner)
        _rst_body(st, dedent(content), inner, quals[0] if kind in ("class", "exception") else cls, False)
    elif domain in ("c", "cpp") or kind in PLAIN_OBJECTS:
        plain = [s for s in [args, *head] if s]
        inner = (*extra, _plain_name(domain, kind, plain[0])) if plain else extra
        st.add("\n".join(plain), "text", inner)
        _rst_body(st, dedent(content), inner, cls, False)
    elif kind in ("module", "currentmodule"):
        st.module = args.strip() if args.strip() not in ("", "None") else None
    elif kind in CODE_DIRECTIVES:
        code = _code_body(body)
        st.add(strip_rst_inline(code) if kind == "parsed-literal" else code, "code", extra)
    elif kind == "toctree":
        entries = [re.sub(r"^(.*?)\s*<.*>$", r"\1", x.strip()) for x in content if x.strip()]
        entries = [re.sub(r"\.(rst|txt|md)$", "", e) for e in entries if not e.startswith(":")]
        st.add("\n".join(f"- {e}" for e in entries), "list", extra)
    elif kind == "list-table":
        st.add("\n".join(_list_table(content)), "table", extra)
    elif kind == "csv-table":
        rows = csv.reader([x.strip() for x in content if x.strip()], skipinitialspace=True)
        st.add("\n".join(" | ".join(strip_rst_inline(c) for c in r) for r in rows), "table", extra)
    elif kind in VERSION_LABELS:
        parts = args.split(None, 2 if kind == "deprecated-removed" else 1)
        nver = 2 if kind == "deprecated-removed" else 1
        lead = VERSION_LABELS[kind].format(*[*parts[:nver], "?", "?"][:nver])
        rest = " ".join(parts[nver:])
        start = len(st.blocks)
        if rest or head:  # the text goes on in `head`, maybe into a literal block in `content`
            _rst_body(st, [f"{lead}: {rest}", *head, *content], extra, cls, False)
        else:
            _rst_body(st, dedent(content), extra, cls, False)
            first = st.blocks[start] if len(st.blocks) > start else None
            if first is not None and first.kind == "text":
                st.blocks[start] = replace(first, text=f"{lead}: {first.text}")
            else:
                st.blocks.insert(start, Block(f"{lead}.", st.path(extra), "text"))
    elif kind not in DROP_DIRECTIVES:
        label = "Availability: " if kind == "availability" else ""
        if kind not in ARGS_NOT_TEXT and args:
            st.text(label + args, extra)
        _rst_body(st, _code_body(body).split("\n"), extra, cls, False)


def _explicit(st: _Rst, lines: list[str], i: int, extra: tuple[str, ...], cls: str | None) -> int:
    body, j = _block(lines, i + 1)
    m = _DIRECTIVE.match(lines[i])
    if m:
        _directive(st, m["name"].lower(), (m["args"] or "").strip(), body, extra, cls)
    elif fn := _FOOTNOTE.match(lines[i]):
        st.text(" ".join([fn[1], *(x.strip() for x in body)]), extra)
    # anything else is a comment, a hyperlink target or a substitution definition
    return j


def _rst_list(st: _Rst, lines: list[str], i: int, extra: tuple[str, ...], cls: str | None) -> int:
    """A run of list items becomes one `list` block; a code block inside an item is emitted on
    its own (code is never folded into a list's text, so it stays whole and recognisable)."""
    items: list[str] = []
    n = len(lines)
    while i < n:
        k = i
        while k < n and not lines[k].strip():
            k += 1
        m = _BULLET.match(lines[k]) if k < n and indent_of(lines[k]) == 0 else None
        if not m:
            break
        rest, i = _block(lines, k + 1, m.end())
        start = len(st.blocks)
        _rst_body(st, [lines[k][m.end() :], *rest], extra, cls, False)
        new = st.blocks[start:]
        del st.blocks[start:]
        marker = m["m"] if m["m"][0].isdigit() else "-"
        parts: list[str] = []
        for b in new:
            if b.kind == "code":
                if parts:
                    items.append(f"{marker} " + "\n  ".join(parts))
                    parts, marker = [], " "  # the item goes on after its code block
                st.add("\n".join(items), "list", extra)
                items.clear()
                st.blocks.append(b)
            else:
                parts.append(b.text.replace("\n", "\n  "))
        if parts:
            items.append(f"{marker} " + "\n  ".join(parts))
    st.add("\n".join(items), "list", extra)
    return i


def _rst_table(st: _Rst, lines: list[str], i: int, extra: tuple[str, ...]) -> int:
    """Grid and simple tables; a cell's lines are joined before inline markup is stripped,
    because roles and literals often wrap inside a cell."""
    rows: list[list[str]] = []
    n, grid = len(lines), bool(_GRID.match(lines[i]))
    cuts = [m.start() for m in re.finditer(r"\+" if grid else r"=+", lines[i])]
    spans = list(zip(cuts, [*cuts[1:], None], strict=True))
    new_row = True
    i += 1
    while i < n:
        line = lines[i]
        i += 1
        if grid and line.strip()[:1] not in ("+", "|"):
            i -= 1
            break
        if (grid and line.strip().startswith("+")) or (not grid and re.match(r"^=+[ =]*$", line)):
            new_row = True
            if not grid and (i >= n or not lines[i].strip()):
                break
            continue
        if not line.strip() or re.match(r"^[-=+| ]+$", line):
            continue
        cells = [line[a:b].strip(" |" if grid else " ") for a, b in spans]
        if not grid:
            new_row = new_row or bool(cells[0])
        if new_row or not rows:
            rows.append(cells)
        else:
            rows[-1] = [f"{x} {y}".strip() for x, y in zip(rows[-1], cells, strict=True)]
        new_row = False
    unwrap = re.compile(r"^\.\.\s+[\w:.-]+::\s*")  # a directive in a cell: keep its argument
    text = "\n".join(" | ".join(strip_rst_inline(unwrap.sub("", c)) for c in r if c) for r in rows)
    st.add(text, "table", extra)
    return i


def _rst_body(st: _Rst, lines: list[str], extra: tuple[str, ...], cls: str | None, top: bool) -> None:
    """One nesting level (the document, a block quote, a list item, a directive's body). Each level
    copies the lines it holds, so a staircase of 3,000 indents cost 25 s before Python's recursion
    limit refused it; MAX_RST_DEPTH levels (the Python docs use fewer than 10) refuse it at once."""
    if st.depth >= MAX_RST_DEPTH:
        raise LoaderError(f"reStructuredText nested more than {MAX_RST_DEPTH} levels deep")
    st.depth += 1
    try:
        _rst_lines(st, lines, extra, cls, top)
    finally:
        st.depth -= 1


def _rst_lines(st: _Rst, lines: list[str], extra: tuple[str, ...], cls: str | None, top: bool) -> None:
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        if not line.strip():
            i += 1
        elif indent_of(line) > 0:  # block quote or definition body: same heading, parsed alike
            body, i = _block(lines, i)
            _rst_body(st, body, extra, cls, False)
        elif top and (t := _title_at(lines, i)):
            title, style, i = t
            if style not in st.styles:
                st.styles.append(style)
            heading = clean_text(strip_rst_inline(title))
            st.heading(st.styles.index(style), heading)
            st.title = st.title or heading
        elif _ADORN.match(line) and len(line.strip()) >= 4:  # transition
            i += 1
        elif _EXPLICIT.match(line):
            i = _explicit(st, lines, i, extra, cls)
        elif _GRID.match(line) or _SIMPLE_TABLE.match(line):
            i = _rst_table(st, lines, i, extra)
        elif _BULLET.match(line):
            i = _rst_list(st, lines, i, extra, cls)
        else:
            j = i
            doctest = line.startswith(">>>")  # runs to the blank line, indented output included
            while j < n and lines[j].strip() and (doctest or indent_of(lines[j]) == 0):
                j += 1
            para, i = lines[i:j], j
            if doctest:
                st.add("\n".join(para), "code", extra)
                continue
            if all(_DOC_FIELDS.match(x) for x in para):
                continue
            text = " ".join(x.strip() for x in para)
            if text.endswith("::"):  # "Example::" -> "Example:", "Example ::" and "::" vanish
                text = "" if text == "::" else text[:-3] if text.endswith(" ::") else text[:-1]
                while j < n and not lines[j].strip():
                    j += 1
                if j < n and indent_of(lines[j]) > 0:
                    st.text(text, extra)
                    code, i = _block(lines, j)
                    st.add("\n".join(code), "code", extra)
                    continue
            st.text(text, extra)


def parse_rst(text: str) -> Parsed:
    st = _Rst()
    _rst_body(st, text.expandtabs(8).split("\n"), (), None, True)
    return Parsed(st.title, st.blocks, {})
