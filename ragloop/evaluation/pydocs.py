"""A SQuAD-shaped QA set over the Python 3.11 documentation (`../shared/datasets/python311-docs-rst`).

The docs come without questions (datasets README), so the failure classifier's injected-failure
set cannot use a QA file for them: this module derives one, deterministically, so that the
injector (`ragloop.improve.injection.SquadInjector`) runs on a real technical corpus unchanged.

- **Pages**: every `every`-th file of `library/` in sorted name order (files 0, every, 2·every,
  ...); `every=8` gives 40 pages (`argparse`, `csv`, `datetime`, `logging`, `sqlite3`, ...).
- **Passages** (the corpus, one document each): the prose of each headed section (an RST title
  with its underline), with code (literal blocks after `::`, code/doctest/table/toctree/index
  directives, `>>>` sessions), directive lines, field lists and tables dropped and inline markup
  reduced to its text (``:func:`~json.dumps` `` -> `dumps`). A section's paragraphs are packed
  into passages of at most `max_chars` characters at paragraph boundaries; sections with less
  than 200 characters of prose are left out. Passage title: "<page title> / <section heading>".
- **Questions**: per passage, up to `per_passage` sentences in order that have 8 to 40 words and
  end in a full stop; the **answer** is the sentence's last three words (a plain-word span with
  at least two content terms, found exactly once in its passage, ignoring case), the
  **question** is `"<section heading>: <the sentence before the answer> what?"` (a cloze). The
  gold passage is the question's own passage, the ideal answer the span, as SQuAD's are.
- **Article** (the injector's unit of the dev/test split): the page, so a page's sections are
  all on one side of the split.

Nothing here imports the retrieval stack; the sentence splitter and content terms are the ones
the injector and the classifier use.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ragloop.evaluation.datasets import Passage, SquadDataset, SquadQuestion, _resolve
from ragloop.text.analysis import content_terms
from ragloop.text.sentences import split_strips

__all__ = ["PYDOCS_DIR", "load_pydocs_qa", "pydocs_pages", "sections"]

PYDOCS_DIR = Path("python311-docs-rst")
_UNDERLINE = re.compile(r"^([=\-~^*\"'+#`:.])\1{2,}\s*$")
_CODE_DIRECTIVES = {
    "code-block", "code", "sourcecode", "doctest", "testcode", "testoutput", "testsetup", "testcleanup",
    "productionlist", "literalinclude", "toctree", "csv-table", "list-table", "table", "raw", "highlight",
    "image", "figure", "only", "include", "index", "graphviz", "audit-event", "impl-detail",
}  # fmt: skip
_DIRECTIVE = re.compile(r"^\.\.\s+([\w:-]+)::")
_ROLE = re.compile(r":[\w:.+-]+:`([^`]*)`")
_LITERAL = re.compile(r"``(.+?)``")
_LINK = re.compile(r"`([^`<]*?)\s*<[^>]*>`_{1,2}")
_REF = re.compile(r"`([^`]+)`_{1,2}")
_EMPH = re.compile(r"\*{1,2}(\S[^*]*?)\*{1,2}")
_FOOTNOTE = re.compile(r"\s*\[[#*\w-]*\]_")
_ANSWER = re.compile(r"^[A-Za-z][A-Za-z0-9' -]*[A-Za-z0-9]$")


def _role_text(m: re.Match[str]) -> str:
    inner = m.group(1)
    if inner.endswith(">") and "<" in inner:
        return inner[: inner.index("<")].strip()
    inner = inner.lstrip("!")
    return inner[1:].rsplit(".", 1)[-1] if inner.startswith("~") else inner


def clean_inline(text: str) -> str:
    """RST inline markup reduced to the text a reader sees."""
    text = _ROLE.sub(_role_text, text)
    text = _LITERAL.sub(r"\1", text)
    text = _LINK.sub(r"\1", text)
    text = _REF.sub(r"\1", text)
    text = _EMPH.sub(r"\1", text)
    text = _FOOTNOTE.sub("", text)
    return re.sub(r"\s+", " ", text).strip()


def _blocks(lines: list[str]) -> list[tuple[int, list[str]]]:
    """Runs of non-blank lines as (indent of the first line, lines)."""
    out: list[tuple[int, list[str]]] = []
    cur: list[str] = []
    for line in [*lines, ""]:
        if line.strip():
            cur.append(line)
        elif cur:
            out.append((len(cur[0]) - len(cur[0].lstrip()), cur))
            cur = []
    return out


def _prose(lines: list[str]) -> list[str]:
    """A section's body lines as cleaned prose paragraphs (code, directives and tables dropped)."""
    paragraphs: list[str] = []
    skip_deeper: int | None = None  # blocks indented deeper than this are code
    for indent, block in _blocks(lines):
        if skip_deeper is not None:
            if indent > skip_deeper:
                continue
            skip_deeper = None
        first = block[0].strip()
        directive = _DIRECTIVE.match(first)
        if directive or first.startswith(".."):
            if directive is None or directive.group(1) in _CODE_DIRECTIVES or first.startswith(".. _"):
                skip_deeper = indent
            continue  # a describing directive (function, note, ...): its indented body is prose
        if first.startswith((">>>", "+-", "===", ":")) or _UNDERLINE.match(first):
            continue
        text = " ".join(line.strip() for line in block)
        if text.startswith(("* ", "- ", "#. ")):
            text = text.split(" ", 1)[1]
        if text.endswith("::"):
            skip_deeper = indent
            text = text[:-1]
        text = clean_inline(text)
        if len(text.split()) >= 5:
            paragraphs.append(text)
    return paragraphs


def sections(rst: str) -> list[tuple[str, list[str]]]:
    """(heading, prose paragraphs) of each headed section of an RST file, in order."""
    lines = rst.splitlines()
    heads: list[int] = []
    for i in range(len(lines) - 1):
        title, under = lines[i].rstrip(), lines[i + 1].rstrip()
        plain = title.strip() and not title.startswith(" ") and not _UNDERLINE.match(title)
        if plain and _UNDERLINE.match(under) and len(under) >= len(title.strip()):
            heads.append(i)
    out: list[tuple[str, list[str]]] = []
    for n, i in enumerate(heads):
        end = heads[n + 1] - 1 if n + 1 < len(heads) else len(lines)
        out.append((clean_inline(lines[i]), _prose(lines[i + 2 : end])))
    return out


def pydocs_pages(root: Path, every: int) -> list[Path]:
    """Every `every`-th file of `library/` in sorted name order (the stated, stable subset)."""
    return sorted((root / "library").glob("*.rst.txt"))[::every]


def _pack(paragraphs: list[str], max_chars: int) -> list[str]:
    out: list[str] = []
    cur = ""
    for p in paragraphs:
        if cur and len(cur) + 2 + len(p) > max_chars:
            out.append(cur)
            cur = p
        else:
            cur = f"{cur}\n\n{p}" if cur else p
    return [*out, cur] if cur else out


def _question(heading: str, sentence: str, passage: str) -> tuple[str, str] | None:
    """(question, answer) from one sentence, or None when it does not make a fair cloze."""
    words = sentence.split()
    if not 8 <= len(words) <= 40 or not sentence.endswith("."):
        return None
    answer = " ".join(words[-3:]).rstrip(".")
    head = " ".join(words[:-3])
    if not _ANSWER.match(answer) or len(content_terms(answer)) < 2 or len(content_terms(head)) < 2:
        return None
    if passage.lower().count(answer.lower()) != 1:
        return None
    return f"{heading}: {head} what?", answer


def load_pydocs_qa(
    datasets_dir: str | Path | None = None,
    *,
    every: int = 8,
    max_chars: int = 2400,
    per_passage: int = 4,
    pages: Sequence[str] | None = None,
) -> SquadDataset:
    """The Python-docs QA set described in the module docstring, as a `SquadDataset` named
    `pydocs` (titles = page stems, so the injector's article split is by page). `pages`: library
    page stems to use instead of every `every`-th (a test's tiny subset)."""
    root = _resolve(datasets_dir, PYDOCS_DIR)
    passages: list[Passage] = []
    questions: list[SquadQuestion] = []
    files = pydocs_pages(root, every) if pages is None else [root / "library" / f"{p}.rst.txt" for p in pages]
    for page in files:
        stem = page.name.removesuffix(".rst.txt")
        secs = sections(page.read_text(encoding="utf-8"))
        page_title = secs[0][0] if secs else stem
        n = 0
        for heading, paragraphs in secs:
            if sum(len(p) for p in paragraphs) < 200:
                continue
            title = page_title if heading == page_title else f"{page_title} / {heading}"
            for text in _pack(paragraphs, max_chars):
                pid = f"{stem}_p{n:03d}"
                n += 1
                passages.append(Passage(pid, text, title))
                made = 0
                for s in split_strips(text):
                    if made >= per_passage:
                        break
                    qa = _question(heading, s.text.strip(), text)
                    if qa is not None:
                        questions.append(SquadQuestion(f"{pid}_q{made}", qa[0], pid, stem, False, (qa[1],)))
                        made += 1
    return SquadDataset(tuple(passages), tuple(questions), name="pydocs")
