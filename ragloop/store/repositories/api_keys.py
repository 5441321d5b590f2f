"""API keys. Its own module because it is the only place that handles a secret: keys are stored as
prefix + sha256 and the plain key exists only in `create_api_key`'s return value."""

from __future__ import annotations

import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import String, bindparam, select, update
from sqlalchemy.engine import RowMapping

from ragloop.store.db import Database
from ragloop.store.models import API_KEY_ROLES, ApiKey, utcnow
from ragloop.store.repositories._base import _require, _sha256

API_KEY_PREFIX = "rlk"
_KEY_RE = re.compile(r"^rlk_([0-9a-f]{16})_([A-Za-z0-9_-]{20,})$")
_DUMMY_HASH = _sha256("rlk_0000000000000000_dummy-key-for-constant-time-miss")
_NO_KEY_ID = "-" * 16  # what a malformed key looks up: issued ids are hex, so no row has it
_FIELDS = ("key_id", "key_hash", "role", "name", "rate_limit_per_minute", "created_at", "revoked_at", "last_used_at")
# one row whether or not the key id exists (NULLs when it does not): a miss reads like a hit
_PRESENTED = select(bindparam("key_id", type_=String(32)).label("key_id")).subquery("presented")
_LOOKUP = (
    select(*(getattr(ApiKey, f) for f in _FIELDS))
    .select_from(_PRESENTED)
    .outerjoin(ApiKey, ApiKey.key_id == _PRESENTED.c.key_id)
)


@dataclass(frozen=True)
class ApiKeyRecord:
    """What the service knows about a key: never the key itself."""

    key_id: str
    role: str
    name: str | None
    rate_limit_per_minute: int | None
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    @classmethod
    def from_mapping(cls, row: RowMapping | Mapping[str, Any]) -> ApiKeyRecord:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})

    @classmethod
    def from_row(cls, row: ApiKey) -> ApiKeyRecord:
        return cls(
            key_id=row.key_id,
            role=row.role,
            name=row.name,
            rate_limit_per_minute=row.rate_limit_per_minute,
            created_at=row.created_at,
            revoked_at=row.revoked_at,
            last_used_at=row.last_used_at,
        )


@dataclass(frozen=True)
class IssuedApiKey:
    """The plain `key` exists only here: show it once; the database keeps its hash."""

    key: str
    record: ApiKeyRecord

    def __repr__(self) -> str:  # keep the secret out of logs and tracebacks
        return f"IssuedApiKey(key='rlk_{self.record.key_id}_…', record={self.record!r})"


def hash_api_key(key: str) -> str:
    """sha256 of the whole key (the keys are 256-bit random, so no salt or slow hash is needed)."""
    return _sha256(key)


def api_key_id(key: str) -> str | None:
    """The public prefix id of a well-formed key, else None."""
    m = _KEY_RE.match(key.strip())
    return m.group(1) if m else None


class ApiKeys:
    def __init__(self, db: Database) -> None:
        self.db = db

    def create_api_key(
        self, role: str, *, name: str | None = None, rate_limit_per_minute: int | None = 60
    ) -> IssuedApiKey:
        """A new key `rlk_<key_id>_<secret>` for `role` (user | admin); the plain key is returned once."""
        if role not in API_KEY_ROLES:
            raise ValueError(f"role must be one of {API_KEY_ROLES}, got {role!r}")
        if rate_limit_per_minute is not None and rate_limit_per_minute < 1:
            raise ValueError("rate_limit_per_minute must be positive (or None for the service default)")
        key_id = secrets.token_hex(8)
        key = f"{API_KEY_PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"
        with self.db.transaction() as s:
            row = ApiKey(
                key_id=key_id,
                key_hash=hash_api_key(key),
                role=role,
                name=name,
                rate_limit_per_minute=rate_limit_per_minute,
            )
            s.add(row)
            s.flush()
            return IssuedApiKey(key=key, record=ApiKeyRecord.from_row(row))

    def verify_api_key(self, key: str, *, touch: bool = False) -> ApiKeyRecord | None:
        """The record of a valid, unrevoked key; None otherwise.

        Every refusal does the same work, so its timing does not tell whether a key id exists: one
        indexed lookup that returns one row either way (NULLs for a key id that does not exist, and a
        key id no key can have when the presented key is malformed), one sha256 and one constant-time
        comparison (against a dummy hash when nothing was found), and no ORM object.
        `touch=True` also stamps `last_used_at` (a write per call)."""
        key = key.strip()
        key_id = api_key_id(key)
        presented = hash_api_key(key)
        with self.db.transaction(write=touch) as s:
            row = s.execute(_LOOKUP, {"key_id": key_id or _NO_KEY_ID}).mappings().one()
            found = row["key_hash"] is not None
            matches = hmac.compare_digest(presented, row["key_hash"] if found else _DUMMY_HASH)
            if not matches or not found or row["revoked_at"] is not None:
                return None
            record = ApiKeyRecord.from_mapping(row)
            if touch:
                now = utcnow()
                s.execute(update(ApiKey).where(ApiKey.key_id == record.key_id).values(last_used_at=now))
                record = replace(record, last_used_at=now)
            return record

    def revoke(self, key_id: str) -> bool:
        """Revoke a key by its id; False if unknown or already revoked."""
        with self.db.transaction() as s:
            result = s.execute(
                update(ApiKey)
                .where(ApiKey.key_id == key_id, ApiKey.revoked_at.is_(None))
                .values(revoked_at=utcnow())
                .execution_options(synchronize_session=False)
            )
            return bool(getattr(result, "rowcount", 0))

    def set_rate_limit(self, key_id: str, rate_limit_per_minute: int | None) -> ApiKeyRecord:
        with self.db.transaction() as s:
            row = _require(s, ApiKey, key_id)
            row.rate_limit_per_minute = rate_limit_per_minute
            s.flush()
            return ApiKeyRecord.from_row(row)

    def get(self, key_id: str) -> ApiKeyRecord | None:
        with self.db.transaction(write=False) as s:
            row = s.get(ApiKey, key_id)
            return ApiKeyRecord.from_row(row) if row is not None else None

    def list_keys(self, *, include_revoked: bool = False) -> list[ApiKeyRecord]:
        stmt = select(ApiKey)
        if not include_revoked:
            stmt = stmt.where(ApiKey.revoked_at.is_(None))
        with self.db.transaction(write=False) as s:
            return [ApiKeyRecord.from_row(r) for r in s.scalars(stmt.order_by(ApiKey.created_at, ApiKey.key_id))]
