"""The input policy: one rule for the text of every request, applied once at the API boundary, so
SQLite and PostgreSQL see the same requests and a route cannot forget it.

**The rule.** Text a client sends (every string field of a request body, every path and query
value, and query parameter names) may not contain

- control characters other than tab, line feed and carriage return: C0 (U+0000–U+001F), DEL
  (U+007F) and C1 (U+0080–U+009F). NUL is the one PostgreSQL refuses outright (a `text` value
  cannot hold it: `UntranslatableCharacter`), which made `/v1/query` a 503, feedback and key names
  a 500, and an OpenAI completion a 200 whose answer was never stored; SQLite stores it, so the
  same request behaved differently per engine. The others are never typed by a person (ingest
  cleaning removes them from documents for the same reason).
- unpaired surrogates (JSON's `"\\ud800"` escapes): not Unicode text; they cannot be encoded for
  the database or a model.
- bidirectional embedding, override and isolate controls (U+202A–U+202E, U+2066–U+2069). They are
  invisible and reorder how the text around them is displayed ("Trojan Source"): a question
  stored with U+202E is shown to reviewers and in the conversation list looking like something
  else. Right-to-left text needs none of them (the Unicode bidi algorithm orders Arabic and Hebrew
  by itself); the implicit marks U+200E/U+200F, which cannot reorder runs, stay allowed.

Anything else is taken as sent (SQL-looking text, `../`, NFD or compatibility forms, zero-width
characters, astral characters): it is data, bound as parameters and never normalised.

**Reject, not normalise.** A request that breaks the rule is a 422 that names the field or
parameter, the character and its position, and nothing is stored. These characters in a request
are a client bug (a C string, a bad decoder, a paste from a terminal); silently deleting them would
change a user's question or correction without telling anyone, store something the client never
sent, and hide the bug. One rule for every field also means no field-by-field exceptions to
remember; identifiers (session ids, collection names) additionally have their own patterns.

**Where it runs.** Bodies: `RequestModel` (the base of every request model in `schemas.py` and
of the OpenAI request models) checks every field, nested models and lists of strings included, so
a new field is covered without a line of its own. Path and query values: `checked_params`, a
dependency of the whole app, checks every decoded value after routing and raises the same
`RequestValidationError` as a bad field, so the app's handler answers 422 in the plain shape, or
OpenAI's on the OpenAI routes (`%00` in a path is a 422, never a 500 and a dropped connection). It
runs before authentication, so a malformed URL is a 422 even without a key.

**Output.** Documents are not client input, and a document may carry bidi controls. Text shown
to a client that comes from documents or a model (answers, citation titles and excerpts, and
stored questions) passes `display_text`, which removes bidi controls, so a document cannot make
an answer display as something it does not say; the stored rows keep the pipeline's exact output.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError

_CONTROL = "\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"
_SURROGATE = "\ud800-\udfff"
_BIDI = "\u202a-\u202e\u2066-\u2069"
_REFUSED = re.compile(f"[{_CONTROL}{_SURROGATE}{_BIDI}]")
_BIDI_RE = re.compile(f"[{_BIDI}]")


def text_problem(text: str) -> str | None:
    """Why `text` breaks the input policy (naming the first offending character), or None."""
    m = _REFUSED.search(text)
    if m is None:
        return None
    ch, at = m.group(), m.start()
    code = f"U+{ord(ch):04X} at position {at}"
    if "\ud800" <= ch <= "\udfff":
        return f"text contains invalid Unicode: an unpaired surrogate escape ({code})"
    if _BIDI_RE.match(ch):
        return f"text contains an invisible bidirectional control character ({code}); send the text without it"
    return f"text contains a control character ({code}); only tab, line feed and carriage return are allowed"


def check_text(value: Any, *, deep: bool = True) -> Any:
    """`value` unchanged when every string in it is within the policy; ValueError naming where
    otherwise. A string, or the strings of a list, always; with `deep`, also strings nested anywhere
    in lists and dicts, keys included (free-form bodies such as config overrides). Anything else
    passes through to the field's own validation."""
    if problem := _problem(value, "", deep):
        raise ValueError(problem)
    return value


def _problem(value: Any, where: str, deep: bool) -> str | None:
    if isinstance(value, str):
        problem = text_problem(value)
        return f"{where}: {problem}" if problem and where else problem
    items: list[tuple[str, Any]] = []
    if isinstance(value, list | tuple):
        items = [(f"item {i}", v) for i, v in enumerate(value) if deep or isinstance(v, str)]
    elif isinstance(value, dict) and deep:
        for k, v in value.items():
            items += [(f"key {k!r}", k), (repr(k), v)]
    for label, item in items:
        if problem := _problem(item, f"{where} {label}".strip(), deep):
            return problem
    return None


def checked_params(request: Request) -> None:
    """The app-wide dependency: every decoded path value, query name and query value obeys the
    policy, else 422 naming the parameter (`path.job_id: Value error, text contains ...`)."""
    values = [(("path", k), v) for k, v in request.path_params.items() if isinstance(v, str)]
    for k, v in request.query_params.multi_items():
        values += [(("query", k), k), (("query", k), v)]
    errors = [
        {"type": "value_error", "loc": loc, "msg": f"Value error, {problem}", "input": value}
        for loc, value in values
        if (problem := text_problem(value))
    ]
    if errors:
        raise RequestValidationError(errors)


def display_text(text: str) -> str:
    """`text` without bidirectional embedding, override and isolate controls, for what a client is
    shown from documents and models."""
    return _BIDI_RE.sub("", text)
