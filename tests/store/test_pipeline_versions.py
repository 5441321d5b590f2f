"""Pipeline versions: exactly one active, activate / rollback in one transaction, both audited."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from ragloop.config import PipelineConfig
from ragloop.store import Database, Store, StoreConflictError


def _active(store: Store) -> list[str]:
    return [v.version_id for v in store.pipelines.list_versions(status="active")]


def test_register_is_idempotent_and_keyed_by_the_config_hash(store: Store) -> None:
    cfg = PipelineConfig()
    row = store.pipelines.register_config(cfg)
    assert row.version_id == cfg.version_id and row.version_id.startswith("pv-")
    assert row.status == "candidate" and row.config["retrieval"]["k"] == cfg.retrieval.k
    assert store.pipelines.register_config(cfg).version_id == row.version_id
    assert len(store.pipelines.list_versions()) == 1
    with pytest.raises(StoreConflictError):
        store.pipelines.register(cfg.version_id, {"something": "else"})


def test_activate_and_rollback(store: Store) -> None:
    a = store.pipelines.register("pv-a", {"k": 5}).version_id
    b = store.pipelines.register("pv-b", {"k": 7}).version_id
    c = store.pipelines.register("pv-c", {"k": 9}).version_id
    assert store.pipelines.current() is None

    store.pipelines.activate(a, actor="admin:1", reason="bootstrap")
    store.pipelines.activate(b, actor="experiment:e12", reason="promote_experiment", quality={"faithfulness": 0.94})
    store.pipelines.activate(c, actor="experiment:e13", reason="promote_experiment")
    assert _active(store) == [c]
    assert {v.version_id: v.status for v in store.pipelines.list_versions()} == {
        a: "retired",
        b: "retired",
        c: "active",
    }
    assert store.pipelines.get(b).quality_at_promotion == {"faithfulness": 0.94}  # type: ignore[union-attr]

    back = store.pipelines.rollback(actor="admin:1", reason="quality_regression_on_golden_set")
    assert back.version_id == b and back.status == "active" and _active(store) == [b]
    assert store.pipelines.rollback(reason="again").version_id == a  # steps further back
    with pytest.raises(StoreConflictError, match="no previous"):
        store.pipelines.rollback()
    assert store.pipelines.rollback(target_version=c, reason="explicit").version_id == c
    assert _active(store) == [c]

    audit = list(reversed(store.audit.timeline(limit=50)))
    assert [(e.action_type, e.pipeline_version_before, e.pipeline_version_after) for e in audit] == [
        ("pipeline_activate", None, a),
        ("pipeline_activate", a, b),
        ("pipeline_activate", b, c),
        ("pipeline_rollback", c, b),
        ("pipeline_rollback", b, a),
        ("pipeline_rollback", a, c),
    ]
    assert audit[3].triggered_by == "quality_regression_on_golden_set" and audit[3].actor == "admin:1"


def test_activating_the_active_version_changes_nothing(store: Store) -> None:
    store.pipelines.register("pv-a", {})
    store.pipelines.activate("pv-a")
    store.pipelines.activate("pv-a")
    assert len(store.audit.timeline()) == 1


def test_rollback_without_an_active_version_and_unknown_versions(store: Store) -> None:
    with pytest.raises(StoreConflictError, match="no active"):
        store.pipelines.rollback()
    with pytest.raises(LookupError):
        store.pipelines.activate("pv-missing")


def test_the_database_refuses_a_second_active_version(store: Store, db: Database) -> None:
    store.pipelines.register("pv-a", {})
    store.pipelines.register("pv-b", {})
    store.pipelines.activate("pv-a")
    with pytest.raises(IntegrityError), db.engine.begin() as conn:
        conn.execute(text("UPDATE pipeline_versions SET status = 'active' WHERE version_id = 'pv-b'"))


def test_concurrent_activations_leave_exactly_one_active(store: Store, db: Database) -> None:
    versions = [store.pipelines.register(f"pv-{i}", {"i": i}).version_id for i in range(6)]
    errors: list[BaseException] = []

    def worker(version_id: str) -> None:
        try:
            for _ in range(3):
                store.pipelines.activate(version_id, reason="race")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(v,)) for v in versions]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert len(_active(store)) == 1


def test_servers_starting_together_register_and_activate_one_version(store_url: str, store: Store) -> None:
    """Each "server" has its own connection pool, like a process; all start with the same config.
    Before `register` took the version writers' lock, all but one failed on PostgreSQL's primary key."""
    from ragloop.service.pipelines import ensure_active_version

    others = [Store.open(store_url) for _ in range(4)]
    errors: list[BaseException] = []
    try:
        for k in (3, 4, 5):  # a few rounds: the race is narrow
            cfg = PipelineConfig().with_overrides(retrieval={"k": k})
            start = threading.Barrier(len(others))

            def server(s: Store, cfg: PipelineConfig = cfg, start: threading.Barrier = start) -> None:
                try:
                    start.wait()
                    ensure_active_version(s, cfg)
                except BaseException as exc:  # reported below
                    errors.append(exc)

            threads = [threading.Thread(target=server, args=(s,)) for s in others]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            assert errors == []
            assert _active(store) == [cfg.version_id]
    finally:
        for s in others:
            s.close()
