"""What an upload must be before the service stages it: names it accepts, and the error it answers
with. A failed job's reason is here too, so a job never reports a raw codec message."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ragloop.retrieval.collection import NAME_RE

FILENAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.()+-]{0,150}$")


class UploadError(ValueError):
    """An upload the service refuses; `status` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class StagedFile:
    name: str
    path: Path


def check_collection_name(name: str) -> None:
    if not NAME_RE.match(name):
        raise UploadError(f"invalid collection name {name!r}: use letters, digits, '_', '.', '-'", 422)


def check_filename(raw: str | None, extensions: tuple[str, ...]) -> str:
    name = (raw or "").strip()
    if not name:
        raise UploadError("every uploaded file needs a file name")
    if "/" in name or "\\" in name or name.startswith(".") or not FILENAME_RE.match(name):
        raise UploadError(
            f"file name {name!r} is not allowed: use a plain name of letters, digits, spaces and _ . ( ) + -"
        )
    lower = name.lower()
    if not any(lower.endswith(ext) for ext in extensions):
        raise UploadError(f"{name}: unsupported type; allowed: {', '.join(extensions)}", 415)
    return name


def failure_reason(exc: Exception) -> str:
    """A failed job's `error`: one line, never a raw codec message, nothing the database refuses."""
    if isinstance(exc, UnicodeError):
        return "a file holds text that is not valid Unicode (it cannot be stored as UTF-8): fix it and upload again"
    line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]
    return line.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")
