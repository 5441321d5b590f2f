"""Preparing a simulation home after an interrupted run must not corrupt its embedding cache."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from ragloop.improve.simulation.run import seed_cache


def _db(path: Path, rows: range, size: int = 64) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute("CREATE TABLE IF NOT EXISTS v (h TEXT PRIMARY KEY, x BLOB)")
    con.executemany("INSERT INTO v VALUES (?, ?)", [(f"h{i}", bytes(size)) for i in rows])
    con.commit()
    return con


def test_a_half_built_home_keeps_its_own_cache_and_its_write_ahead_log(tmp_path: Path) -> None:
    prepared = tmp_path / "prepared"
    ready = prepared / "squad-sq-c1200-150"
    _db(ready / "cache" / "embeddings.sqlite", range(0, 500), size=300).close()
    (ready / ".ready").write_text("ok")
    # an ingest killed mid-way: its writes are still in the WAL, not in the main file
    half = prepared / "squad-sq-c200-25"
    _db(half / "cache" / "embeddings.sqlite", range(2000, 6000)).close()
    killed = (
        "import os, sqlite3, sys\n"
        "con = sqlite3.connect(sys.argv[1])\n"
        "con.execute('PRAGMA wal_autocheckpoint=0')\n"
        "con.executemany('INSERT INTO v VALUES (?, ?)', [(f'h{i}', bytes(64)) for i in range(1000, 1300)])\n"
        "con.commit()\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", killed, str(half / "cache" / "embeddings.sqlite")], check=True)
    assert (half / "cache" / "embeddings.sqlite-wal").stat().st_size > 0
    seed_cache(half, prepared, "squad-sq-c")
    con = sqlite3.connect(half / "cache" / "embeddings.sqlite")
    assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert con.execute("SELECT count(*) FROM v").fetchone() == (4300,)
    con.close()


def test_a_new_home_starts_from_a_ready_homes_cache(tmp_path: Path) -> None:
    prepared = tmp_path / "prepared"
    ready = prepared / "mtrag-m-c1200-150"
    _db(ready / "cache" / "embeddings.sqlite", range(0, 50)).close()
    (ready / ".ready").write_text("ok")
    (prepared / "mtrag-m-c999-0" / "cache").mkdir(parents=True)  # not ready: never a source
    new = prepared / "mtrag-m-c200-25"
    seed_cache(new, prepared, "mtrag-m-c")
    con = sqlite3.connect(new / "cache" / "embeddings.sqlite")
    assert con.execute("SELECT count(*) FROM v").fetchone() == (50,)
    con.close()
    seed_cache(tmp_path / "other", prepared, "squad-")  # nothing ready for that corpus: no cache
    assert not (tmp_path / "other" / "cache").exists()
