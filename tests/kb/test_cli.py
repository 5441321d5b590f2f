"""The CLI as a user or a script drives it: real `ragloop` processes, JSON output, exit codes."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragloop.config import PipelineConfig, Settings
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.retriever import Retriever
from tests.conftest import write_squad_docs

RAGLOOP = [sys.executable, "-m", "ragloop"]


def ragloop(*args: str, home: Path, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, RAGLOOP_HOME=str(home))
    p = subprocess.run([*RAGLOOP, *args], env=env, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"ragloop {args} exited {p.returncode}: {p.stderr[-2000:]}")
    return p


def test_ingest_search_collections_json(tmp_path: Path, ragloop_home: Path) -> None:
    docs = tmp_path / "docs"
    questions = write_squad_docs(docs, articles=1, paragraphs=12)
    summary = json.loads(ragloop("ingest", str(docs), "--collection", "sq", "--json", home=ragloop_home).stdout)
    assert summary["files"]["new"] == 12 and summary["chunks_total"] >= 12 and summary["generation"] == 1

    for mode in ("bm25", "dense", "hybrid"):
        res = json.loads(
            ragloop(
                "search", questions[0][0], "-c", "sq", "--mode", mode, "-k", "3", "--json", home=ragloop_home
            ).stdout
        )
        assert res["mode"] == mode and len(res["hits"]) == 3
        hit = res["hits"][0]
        assert set(hit) >= {
            "rank",
            "chunk_id",
            "doc_id",
            "title",
            "heading_path",
            "score",
            "scores",
            "ranks",
            "text",
        }
    found = 0
    for question, stem in questions[::3]:
        res = json.loads(ragloop("search", question, "-c", "sq", "-k", "5", "--json", home=ragloop_home).stdout)
        found += any(h["doc_id"] == f"{stem}.md" for h in res["hits"])
    assert found >= 0.8 * len(questions[::3]), found

    listing = json.loads(ragloop("collections", "--json", home=ragloop_home).stdout)
    (row,) = listing["collections"]
    assert row["name"] == "sq" and row["files"] == 12 and row["chunks"] == summary["chunks_total"]

    again = json.loads(ragloop("ingest", str(docs), "--collection", "sq", "--json", home=ragloop_home).stdout)
    assert again["files"]["unchanged"] == 12 and again["chunks_embedded"] == 0


def test_errors_are_one_clear_line_and_a_nonzero_exit(tmp_path: Path, ragloop_home: Path) -> None:
    p = ragloop("search", "anything", "-c", "nope", "--json", home=ragloop_home, check=False)
    assert p.returncode == 2 and "no collection named 'nope'" in p.stderr and "Traceback" not in p.stderr
    p = ragloop("ingest", str(tmp_path / "missing"), home=ragloop_home, check=False)
    assert p.returncode == 2 and "no such file or directory" in p.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("retrieval:\n  mode: telepathy\n")
    p = ragloop("search", "x", "--config", str(bad), home=ragloop_home, check=False)
    assert p.returncode == 2 and "telepathy" in p.stderr


def test_sigint_during_ingest_keeps_the_previous_index(tmp_path: Path, ragloop_home: Path) -> None:
    docs = tmp_path / "docs"
    write_squad_docs(docs, articles=1, paragraphs=5)
    ragloop("ingest", str(docs), "-c", "kb", home=ragloop_home)
    write_squad_docs(docs, articles=5)  # ~250 more paragraphs: many seconds of embedding, even on a fast machine
    env = dict(os.environ, RAGLOOP_HOME=str(ragloop_home))
    # a background job of a non-interactive shell (how CI may run us) inherits SIGINT ignored, and
    # Python then never raises KeyboardInterrupt: give the child the default disposition, as a
    # terminal would
    proc = subprocess.Popen(
        [*RAGLOOP, "ingest", str(docs), "-c", "kb"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    cache = ragloop_home / "cache" / "embeddings.sqlite"
    try:
        deadline = time.time() + 120
        baseline = _cached(cache)
        while _cached(cache) <= baseline + 16:  # interrupt once embedding of the new files is under way
            assert proc.poll() is None, "ingest finished before it could be interrupted"
            assert time.time() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=180)  # the batch in flight finishes first: slow on a loaded machine
    finally:
        if proc.poll() is None:  # never leak the child into the next test
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130 and "previous index" in err

    coll = Collection("kb", Settings())
    assert coll.generation() == 1 and len({c.doc_id for c in coll.load().chunks}) == 5
    assert Retriever(coll).retrieve("Normandy", k=3)
    s = coll.ingest([docs], PipelineConfig())
    assert s.generation == 2 and s.chunks_embedded < s.chunks_total  # work done before the interrupt was kept


def _cached(path: Path) -> int:
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(path, timeout=5) as db:
            return int(db.execute("SELECT count(*) FROM embeddings").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


@pytest.mark.parametrize("cmd", [["--help"], ["ingest", "--help"], ["search", "--help"]])
def test_help_works(cmd: list[str], ragloop_home: Path) -> None:
    assert "Usage" in ragloop(*cmd, home=ragloop_home).stdout
