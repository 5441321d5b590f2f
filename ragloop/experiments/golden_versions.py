"""Golden-set versions: what changed between two of them, and whether the set's difficulty mix is
where it should be.

A version is a point in the insert + deprecate history (`GoldenSet.golden_set_at_version`). Two
versions differ by *lineage* (one question across its revisions): a lineage live only in the later
one was **added**, one live only in the earlier one was **deprecated**, one live in both under
different rows was **changed** (a revision), with the fields that differ.

The difficulty mix is a share per difficulty, reported against a target (`TargetMix`, default
easy 0.3 / standard 0.5 / hard 0.2, `RAGLOOP_GOLDEN_TARGET_MIX="easy=0.3,standard=0.5,hard=0.2"`)
with n and a Wilson 95% interval per share: a share whose interval excludes its target is off
target; one whose interval holds it is not distinguishable from it at this n (no verdict on a
point estimate).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ragloop.experiments.golden import entry_json
from ragloop.experiments.simulation import wilson
from ragloop.store.vocabulary import GoldenDifficulty

if TYPE_CHECKING:
    from ragloop.store import GoldenSetEntry, Store

TARGET_MIX_ENV = "RAGLOOP_GOLDEN_TARGET_MIX"
COMPARED_FIELDS = (
    "question",
    "expected_answer",
    "required_doc_ids",
    "required_chunk_ids",
    "difficulty",
    "domain_tags",
    "source",
    "held_out",
)


@dataclass(frozen=True)
class ChangedEntry:
    lineage_id: str
    before: GoldenSetEntry
    after: GoldenSetEntry
    fields: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "lineage_id": self.lineage_id,
            "fields": list(self.fields),
            "before": entry_json(self.before),
            "after": entry_json(self.after),
        }


@dataclass(frozen=True)
class GoldenDiff:
    from_version: int
    to_version: int
    added: list[GoldenSetEntry]
    deprecated: list[GoldenSetEntry]
    changed: list[ChangedEntry]
    unchanged: int

    def to_json(self) -> dict[str, Any]:
        return {
            "from_version": self.from_version,
            "to_version": self.to_version,
            "added": [entry_json(e) for e in self.added],
            "deprecated": [entry_json(e) for e in self.deprecated],
            "changed": [c.to_json() for c in self.changed],
            "unchanged": self.unchanged,
        }


def diff_sets(
    a: Sequence[GoldenSetEntry], b: Sequence[GoldenSetEntry], from_version: int, to_version: int
) -> GoldenDiff:
    before = {e.lineage_id: e for e in a}
    after = {e.lineage_id: e for e in b}
    changed = []
    unchanged = 0
    for lid in before.keys() & after.keys():
        x, y = before[lid], after[lid]
        if x.entry_id == y.entry_id:
            unchanged += 1
            continue
        fields = tuple(f for f in COMPARED_FIELDS if _norm(getattr(x, f)) != _norm(getattr(y, f)))
        changed.append(ChangedEntry(lid, x, y, fields))
    return GoldenDiff(
        from_version,
        to_version,
        added=[after[k] for k in after if k not in before],
        deprecated=[before[k] for k in before if k not in after],
        changed=sorted(changed, key=lambda c: c.after.created_at),
        unchanged=unchanged,
    )


def diff_versions(store: Store, a: int, b: int) -> GoldenDiff:
    """What changed from version `a` to version `b` (either order; NotFoundError for a future one)."""
    return diff_sets(store.golden.golden_set_at_version(a), store.golden.golden_set_at_version(b), a, b)


def _norm(v: Any) -> Any:
    return list(v) if isinstance(v, list | tuple) else v


# --------------------------------------------------------------------------- difficulty mix


@dataclass(frozen=True)
class TargetMix:
    shares: Mapping[GoldenDifficulty, float]

    def __post_init__(self) -> None:
        if set(self.shares) != set(GoldenDifficulty):
            raise ValueError(f"a target mix names every difficulty ({', '.join(GoldenDifficulty)})")
        if any(v < 0 for v in self.shares.values()) or abs(sum(self.shares.values()) - 1.0) > 1e-6:
            raise ValueError(f"target shares must be >= 0 and sum to 1, not {dict(self.shares)}")

    @classmethod
    def default(cls) -> TargetMix:
        return cls({GoldenDifficulty.EASY: 0.3, GoldenDifficulty.STANDARD: 0.5, GoldenDifficulty.HARD: 0.2})

    @classmethod
    def parse(cls, text: str) -> TargetMix:
        """`easy=0.3,standard=0.5,hard=0.2` (every difficulty, shares summing to 1)."""
        shares: dict[GoldenDifficulty, float] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, _, value = part.partition("=")
            try:
                shares[GoldenDifficulty(name.strip())] = float(value)
            except ValueError:
                raise ValueError(f"bad target mix item {part!r}: want difficulty=share, e.g. easy=0.3") from None
        return cls(shares)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TargetMix:
        raw = (os.environ if environ is None else environ).get(TARGET_MIX_ENV, "").strip()
        return cls.parse(raw) if raw else cls.default()


def target_mix(text: str | None) -> TargetMix:
    """The configured mix (`ServiceConfig.golden_target_mix`, a CLI option), or the default."""
    return TargetMix.parse(text) if text and text.strip() else TargetMix.default()


@dataclass(frozen=True)
class MixRow:
    difficulty: GoldenDifficulty
    count: int
    n: int
    share: float | None
    ci95: tuple[float, float] | None
    target: float

    @property
    def verdict(self) -> str:
        """`below` / `above` when the interval excludes the target, `on_target` when it holds it."""
        if self.ci95 is None:
            return "no_data"
        lo, hi = self.ci95
        return "below" if hi < self.target else "above" if lo > self.target else "on_target"

    def to_json(self) -> dict[str, Any]:
        return {
            "difficulty": str(self.difficulty),
            "count": self.count,
            "n": self.n,
            "share": self.share,
            "ci95": list(self.ci95) if self.ci95 else None,
            "target": self.target,
            "verdict": self.verdict,
        }


def mix_report(entries: Sequence[GoldenSetEntry], target: TargetMix) -> list[MixRow]:
    n = len(entries)
    rows = []
    for d in GoldenDifficulty:
        k = sum(1 for e in entries if e.difficulty == d)
        rows.append(MixRow(d, k, n, k / n if n else None, wilson(k, n) if n else None, target.shares[d]))
    return rows


def summary(store: Store, target: TargetMix, *, version: int | None = None) -> dict[str, Any]:
    """The set at `version` (default: now): counts by source, held out, and the mix against target."""
    entries = store.golden.current_golden_set() if version is None else store.golden.golden_set_at_version(version)
    by_source: dict[str, int] = {}
    for e in entries:
        by_source[e.source] = by_source.get(e.source, 0) + 1
    return {
        "golden_set_version": store.golden.golden_set_version() if version is None else version,
        "count": len(entries),
        "held_out": sum(1 for e in entries if e.held_out),
        "by_source": dict(sorted(by_source.items())),
        "mix": [r.to_json() for r in mix_report(entries, target)],
    }
