"""`redact_deep`: apply a string function to every string inside a nested structure, copying only what
changes. Used where the stored form is a structure, not a string: the conversation checkpoints
(LangGraph state with LangChain messages and our typed trace records), stored traces and job payloads.

Identifiers are skipped by name (`id`, `*_id`, `*_ids`, `version`, `hash`, `key`): a chunk id or a
version stamp that happened to look like a number would otherwise be rewritten and break a lookup.
Objects of other types (numbers, enums, numpy arrays, LangGraph's `Send`) pass through as they are.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from enum import Enum
from typing import Any

from pydantic import BaseModel

_SKIP_EXACT = frozenset({"id", "ids", "version", "versions", "hash", "key", "type", "role", "name"})
_SKIP_SUFFIX = ("_id", "_ids", "_version", "_hash", "_key")


def skipped(name: object) -> bool:
    return isinstance(name, str) and (name in _SKIP_EXACT or name.endswith(_SKIP_SUFFIX))


def redact_deep(obj: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(obj, str):
        return obj if isinstance(obj, Enum) else fn(obj)
    if obj is None or isinstance(obj, (int, float, bool, bytes, Enum)):
        return obj
    if isinstance(obj, dict):
        out = {k: (v if skipped(k) else redact_deep(v, fn)) for k, v in obj.items()}
        if all(out[k] is v for k, v in obj.items()):
            return obj
        return out if type(obj) is dict else type(obj)(out)
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = [redact_deep(v, fn) for v in obj]
        if all(a is b for a, b in zip(items, obj, strict=False)) and not isinstance(obj, (set, frozenset)):
            return obj
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a NamedTuple (LangGraph's _DeltaSnapshot)
            return type(obj)._make(items)  # type: ignore[attr-defined]
        return type(obj)(items) if type(obj) in (list, tuple, set, frozenset) else list(items)
    if isinstance(obj, BaseModel):
        changed = {}
        for name in type(obj).model_fields:
            if skipped(name):
                continue
            value = getattr(obj, name, None)
            new = redact_deep(value, fn)
            if new is not value:
                changed[name] = new
        return obj.model_copy(update=changed) if changed else obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        updates = {}
        for f in dataclasses.fields(obj):
            if skipped(f.name):
                continue
            value = getattr(obj, f.name, None)
            new = redact_deep(value, fn)
            if new is not value:
                updates[f.name] = new
        if not updates:
            return obj
        clone = copy.copy(obj)
        for name, value in updates.items():
            object.__setattr__(clone, name, value)  # frozen dataclasses too: the clone is ours
        return clone
    return obj
