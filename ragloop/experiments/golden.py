"""The golden set: one source of truth, the `golden_set_entries` table.

JSONL is only a way in and out. `import_jsonl` reads either the contract's lines
(`{"question", "expected_answer", "required_doc_ids", ...}`) or the harness's `GoldenItem` lines
(`ragloop.evaluation.golden`: `reference_answer`, `relevant_doc_ids`, ...); `export_jsonl` writes
`GoldenItem` lines, the one format the harness reads (`ragloop eval run --dataset golden` reads
the database set itself when no file is given). Unanswerable items (`should_refuse`) are kept as
entries with an empty expected answer and the `unanswerable` domain tag.

Versioned by insert + deprecate (the store's triggers refuse anything else); every change is one
golden-set version (an import batch is one), and any past version can be rebuilt, exported and
evaluated (`ragloop.experiments.golden_versions`). 20% of entries are
**held out** by a stable hash of the normalised question (`is_held_out`): the same question is
held out on every machine and in every import, and the nightly regression and remediation
checks never read them (`working_set`), only out-of-sample evaluation does (`held_out_set`).
Importing a question that is already live is skipped, so an import can be repeated.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ragloop.evaluation.golden import GoldenItem
from ragloop.store.repositories.golden import NewEntry
from ragloop.store.vocabulary import GoldenChange, GoldenSource

if TYPE_CHECKING:
    from ragloop.store import GoldenSetEntry, Store

HELD_OUT_SHARE = 0.2
UNANSWERABLE_TAG = "unanswerable"
_DIFFICULTY_IN = {"easy": "easy", "medium": "standard", "standard": "standard", "hard": "hard"}
_DIFFICULTY_OUT = {"easy": "easy", "standard": "medium", "hard": "hard"}
_SOURCE_ALIASES = {"auto_promoted": GoldenSource.AUTO_NOMINATED}


class GoldenImportError(ValueError):
    pass


_CITATION = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]")


def without_citations(text: str) -> str:
    """A served answer as a proposed expected answer: its `[n]` markers point into one retrieval's
    sources, which a golden answer does not have."""
    return _CITATION.sub("", text).strip()


def normalise(question: str) -> str:
    return re.sub(r"\s+", " ", question).strip().lower()


def is_held_out(question: str, share: float = HELD_OUT_SHARE) -> bool:
    """Stable: sha256 of the normalised question, read as a number in [0, 1), below `share`."""
    digest = hashlib.sha256(normalise(question).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64 < share


class GoldenLine(BaseModel):
    """One imported line, in either accepted shape."""

    model_config = ConfigDict(extra="ignore")

    question: str = Field(min_length=1)
    expected_answer: str | None = None
    reference_answer: str | None = None
    required_doc_ids: list[str] = Field(default_factory=list)
    relevant_doc_ids: list[str] = Field(default_factory=list)
    required_chunk_ids: list[str] = Field(default_factory=list)
    relevant_chunk_ids: list[str] = Field(default_factory=list)
    difficulty: str = "standard"
    domain_tags: list[str] = Field(default_factory=list)
    source: str = "imported"
    should_refuse: bool = False
    type: str | None = None


@dataclass(frozen=True)
class ImportResult:
    added: int
    skipped: int
    held_out: int
    golden_set_version: int

    def to_json(self) -> dict[str, int]:
        return {
            "added": self.added,
            "skipped": self.skipped,
            "held_out": self.held_out,
            "golden_set_version": self.golden_set_version,
        }


def parse_lines(text: str, origin: str) -> list[GoldenLine]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("//"):
            continue
        try:
            out.append(GoldenLine.model_validate(json.loads(line)))
        except (json.JSONDecodeError, ValidationError) as exc:
            raise GoldenImportError(f"{origin}:{n}: {exc}") from None
    return out


def source_of(raw: str) -> GoldenSource:
    """A line's `source` as the vocabulary's member; anything unknown counts as imported."""
    raw = _SOURCE_ALIASES.get(raw, raw)
    return GoldenSource(raw) if raw in set(GoldenSource) else GoldenSource.IMPORTED


def new_entry(line: GoldenLine, *, source: GoldenSource | None = None) -> NewEntry:
    """A line as the repository's insert; held out by the stable hash, never by the caller."""
    unanswerable = line.should_refuse or line.type == "unanswerable"
    tags = list(dict.fromkeys([*line.domain_tags, *([UNANSWERABLE_TAG] if unanswerable else [])]))
    return NewEntry(
        question=line.question.strip(),
        expected_answer="" if unanswerable else (line.expected_answer or line.reference_answer or ""),
        source=source or source_of(line.source),
        required_chunk_ids=tuple(line.required_chunk_ids or line.relevant_chunk_ids),
        required_doc_ids=tuple(line.required_doc_ids or line.relevant_doc_ids),
        difficulty=_DIFFICULTY_IN.get(line.difficulty, "standard"),
        domain_tags=tuple(tags),
        held_out=is_held_out(line.question),
    )


def add_entry(store: Store, line: GoldenLine, *, created_by: str, source: GoldenSource | None = None) -> GoldenSetEntry:
    """One question as one golden-set change (version)."""
    e = new_entry(line, source=source)
    return store.golden.add_golden_entries([e], created_by=created_by, kind=GoldenChange.ADD)[0]


def import_lines(store: Store, lines: Iterable[GoldenLine], *, created_by: str) -> ImportResult:
    """The new questions of an import as one golden-set change (one version for the whole batch)."""
    live = {normalise(e.question) for e in store.golden.current_golden_set()}
    batch: list[NewEntry] = []
    skipped = 0
    for line in lines:
        key = normalise(line.question)
        if key in live:
            skipped += 1
            continue
        batch.append(new_entry(line))
        live.add(key)
    rows = store.golden.add_golden_entries(batch, created_by=created_by, kind=GoldenChange.IMPORT)
    added, held = len(rows), sum(1 for r in rows if r.held_out)
    if added:
        store.audit.record(
            "golden_import",
            triggered_by="golden import",
            actor=created_by,
            evidence={"added": added, "skipped": skipped, "held_out": held},
        )
    return ImportResult(added, skipped, held, store.golden.golden_set_version())


def import_jsonl(store: Store, path: str | Path, *, created_by: str) -> ImportResult:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise GoldenImportError(f"cannot read {p}: {exc}") from None
    return import_lines(store, parse_lines(text, str(p)), created_by=created_by)


def to_item(entry: GoldenSetEntry) -> GoldenItem:
    """An entry as the harness's `GoldenItem` (its id is the question's lineage id)."""
    unanswerable = UNANSWERABLE_TAG in (entry.domain_tags or [])
    named = bool(entry.required_chunk_ids or entry.required_doc_ids)
    return GoldenItem(
        id=entry.lineage_id,
        type="unanswerable" if unanswerable else "answerable",
        question=entry.question,
        reference_answer=entry.expected_answer,
        relevant_chunk_ids=[] if unanswerable else list(entry.required_chunk_ids or []),
        relevant_doc_ids=[] if unanswerable else list(entry.required_doc_ids or []),
        should_refuse=unanswerable,
        difficulty=_DIFFICULTY_OUT.get(entry.difficulty, "medium"),  # type: ignore[arg-type]
        source=entry.source,
        status="accepted" if unanswerable or named else "draft",
        notes="held_out" if entry.held_out else "",
    )


def working_set(store: Store) -> list[GoldenSetEntry]:
    """What regression and remediation checks may read: live, not held out."""
    return store.golden.current_golden_set(include_held_out=False)


def held_out_set(store: Store) -> list[GoldenSetEntry]:
    return [e for e in store.golden.current_golden_set() if e.held_out]


def items(store: Store, *, include_held_out: bool = True, version: int | None = None) -> list[GoldenItem]:
    """The live set (or the set at golden-set `version`) as harness items."""
    if version is None:
        rows = store.golden.current_golden_set(include_held_out=include_held_out)
    else:
        rows = store.golden.golden_set_at_version(version, include_held_out=include_held_out)
    return [to_item(e) for e in rows]


def export_jsonl(store: Store, path: str | Path, *, include_held_out: bool = True, version: int | None = None) -> int:
    """Write the live set (or the set at `version`) as `GoldenItem` lines, atomically; returns how many."""
    rows = items(store, include_held_out=include_held_out, version=version)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text("".join(r.model_dump_json() + "\n" for r in rows), encoding="utf-8")
    tmp.replace(p)
    return len(rows)


def entry_json(e: GoldenSetEntry) -> dict[str, Any]:
    return {
        "entry_id": e.entry_id,
        "lineage_id": e.lineage_id,
        "version": e.version,
        "question": e.question,
        "expected_answer": e.expected_answer,
        "required_doc_ids": list(e.required_doc_ids or []),
        "required_chunk_ids": list(e.required_chunk_ids or []),
        "source": e.source,
        "difficulty": e.difficulty,
        "domain_tags": list(e.domain_tags or []),
        "held_out": e.held_out,
        "created_by": e.created_by,
        "approved_at": e.approved_at.isoformat() if e.approved_at else None,
        "created_at": e.created_at.isoformat(),
        "deprecated_at": e.deprecated_at.isoformat() if e.deprecated_at else None,
        "added_in": e.added_in,
        "deprecated_in": e.deprecated_in,
        "superseded_by": e.superseded_by,
    }


def revise(store: Store, entry_id: str, *, actor: str, note: str | None = None, **changes: Any) -> GoldenSetEntry:
    """A person's revision of a live entry: the next version of its lineage, approved by `actor`
    (a human edit is its own approval). Held out is re-decided by the stable hash of the question."""
    from ragloop.store import utcnow

    current = store.golden.get(entry_id)
    question = changes.get("question") or (current.question if current is not None else "")
    return store.golden.revise_golden_entry(
        entry_id,
        created_by=actor,
        held_out=is_held_out(question) if current is not None else None,
        approved_at=utcnow(),
        note=note,
        **{k: v for k, v in changes.items() if v is not None},
    )
