"""Two processes opening a new collection registry at once must both come up."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import event

from ragloop.ingest.registry import Registry, files_table


def test_a_table_created_by_another_process_mid_way_is_not_an_error(tmp_path: Path) -> None:
    """The race, made deterministic: just before this process creates `files`, "another process"
    (a raw sqlite3 connection) creates it. Before the fix this raised "table files already exists"
    and a server starting beside its worker died."""
    db = tmp_path / "registry.sqlite"
    raced = []

    def other_process_wins(target: object, connection: object, **_: object) -> None:
        if not raced:
            raced.append(True)
            with sqlite3.connect(db) as other:
                other.execute(
                    "CREATE TABLE files (rel VARCHAR PRIMARY KEY, root VARCHAR, size BIGINT, mtime_ns BIGINT,"
                    " content_hash VARCHAR, fingerprint VARCHAR, n_docs INTEGER, n_chunks INTEGER, ingested_at FLOAT)"
                )

    event.listen(files_table, "before_create", other_process_wins)
    try:
        registry = Registry(f"sqlite:///{db}")
    finally:
        event.remove(files_table, "before_create", other_process_wins)
    assert raced, "the simulated race never happened: the test would prove nothing"
    try:
        assert registry.files() == {}
        assert registry.get_state("generation") is None
    finally:
        registry.close()
