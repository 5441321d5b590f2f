"""API keys: hashed at rest, the plain key returned once, constant-time verification, revocation."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect, text

from ragloop.store import Database, Store, api_key_id, hash_api_key


def _all_stored_values(db: Database) -> list[str]:
    """Every non-null value of every column of every table in the database, as text."""
    values: list[str] = []
    with db.engine.connect() as conn:
        for name in inspect(conn).get_table_names():
            for row in conn.execute(text(f"SELECT * FROM {name}")):
                values += [str(v) for v in row if v is not None]
    return values


def test_create_returns_the_plain_key_once_and_stores_only_its_hash(store: Store, db: Database) -> None:
    issued = store.api_keys.create_api_key("admin", name="ops", rate_limit_per_minute=120)
    assert issued.key.startswith(f"rlk_{issued.record.key_id}_")
    assert issued.record.role == "admin" and issued.record.is_admin and issued.record.active
    assert issued.key not in repr(issued)

    stored = _all_stored_values(db)
    secret = issued.key.split("_", 2)[2]
    assert not any(issued.key in v or secret in v for v in stored), "the plain key (or its secret) is in the DB"
    assert hash_api_key(issued.key) in stored
    with db.engine.connect() as conn:
        row = conn.execute(text("SELECT key_id, key_hash FROM api_keys")).one()
    assert row == (issued.record.key_id, hash_api_key(issued.key))
    assert len(row[1]) == 64


def test_verify(store: Store) -> None:
    user = store.api_keys.create_api_key("user")
    admin = store.api_keys.create_api_key("admin")
    got = store.api_keys.verify_api_key(user.key)
    assert got is not None and got.key_id == user.record.key_id and got.role == "user"
    assert got.rate_limit_per_minute == 60
    assert store.api_keys.verify_api_key(f"  {admin.key}\n").role == "admin"  # type: ignore[union-attr]

    tampered = user.key[:-1] + ("A" if user.key[-1] != "A" else "B")
    other_prefix = f"rlk_{admin.record.key_id}_{user.key.split('_', 2)[2]}"  # user's secret, admin's id
    for bad in ("", "garbage", "Bearer " + user.key, tampered, other_prefix, "rlk_" + "0" * 16 + "_" + "x" * 43):
        assert store.api_keys.verify_api_key(bad) is None, bad
    assert api_key_id(user.key) == user.record.key_id and api_key_id("nope") is None


def test_revocation_and_rate_limits(store: Store) -> None:
    issued = store.api_keys.create_api_key("user", rate_limit_per_minute=5)
    assert store.api_keys.set_rate_limit(issued.record.key_id, 9).rate_limit_per_minute == 9
    assert store.api_keys.verify_api_key(issued.key).rate_limit_per_minute == 9  # type: ignore[union-attr]
    assert store.api_keys.revoke(issued.record.key_id) is True
    assert store.api_keys.revoke(issued.record.key_id) is False
    assert store.api_keys.verify_api_key(issued.key) is None
    assert store.api_keys.list_keys() == []
    [revoked] = store.api_keys.list_keys(include_revoked=True)
    assert revoked.revoked_at is not None and not revoked.active


def test_touch_records_last_use(store: Store) -> None:
    issued = store.api_keys.create_api_key("user")
    assert store.api_keys.verify_api_key(issued.key).last_used_at is None  # type: ignore[union-attr]
    assert store.api_keys.verify_api_key(issued.key, touch=True).last_used_at is not None  # type: ignore[union-attr]


def test_bad_roles_and_limits_are_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="role"):
        store.api_keys.create_api_key("root")
    with pytest.raises(ValueError, match="rate_limit"):
        store.api_keys.create_api_key("user", rate_limit_per_minute=0)
