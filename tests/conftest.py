"""Test-wide fixtures: every test gets its own RAGLOOP_HOME; shared data is read from ../shared."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("RAGLOOP_SHARED", REPO.parent / "shared"))
DATASETS = SHARED / "datasets"


@pytest.fixture(autouse=True)
def ragloop_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "ragloop-home"
    monkeypatch.setenv("RAGLOOP_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("RAGLOOP_COLLECTIONS_URL", raising=False)  # embedded collections unless `kb_backend`
    return home


def write_squad_docs(dest: Path, articles: int = 1, paragraphs: int | None = None) -> list[tuple[str, str]]:
    """SQuAD 2.0 paragraphs as one Markdown file each (as the contract checks do);
    returns (question, gold file stem) for the answerable questions."""
    data = json.loads((DATASETS / "squad2" / "squad2-dev-12articles.json").read_text())
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for a in data["data"][:articles]:
        for i, p in enumerate(a["paragraphs"][:paragraphs]):
            stem = f"{a['title']}_p{i:03d}"
            (dest / f"{stem}.md").write_text(f"# {a['title'].replace('_', ' ')} ({i})\n\n{p['context']}\n")
            out += [(q["question"], stem) for q in p["qas"] if not q["is_impossible"]]
    return out


PGVECTOR_URL_ENV = "RAGLOOP_TEST_PGVECTOR_URL"


@pytest.fixture(scope="session")
def pgvector_server() -> Iterator[tuple[str, Path | None]]:
    """(URL, data folder) of a PostgreSQL with pgvector: `RAGLOOP_TEST_PGVECTOR_URL` (folder None),
    else a server started from the pgserver wheel in a temp folder for this session only.
    Skips when neither works, fails under CI=true (make install brings the wheel)."""
    ci = os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")
    url = os.environ.get(PGVECTOR_URL_ENV)
    if url:
        import psycopg

        try:
            with psycopg.connect(url, connect_timeout=5, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error as exc:
            reason = f"{PGVECTOR_URL_ENV} has no usable pgvector ({type(exc).__name__}: {str(exc).strip()[:200]})"
            if ci:
                pytest.fail(f"{reason}; CI=true requires the pgvector tests", pytrace=False)
            pytest.skip(reason)
        yield url, None
        return
    import shutil
    import socket
    import tempfile

    try:
        from ragloop.store.pgvector_server import start_server, stop_server
    except ImportError as exc:  # pragma: no cover - only without the package itself
        pytest.fail(str(exc))
    folder = Path(tempfile.mkdtemp(prefix="ragloop-pgvector-"))  # /tmp: the server's OS user can enter it
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    try:
        server = start_server(folder, port=port)
    except Exception as exc:
        shutil.rmtree(folder, ignore_errors=True)
        reason = f"cannot start a pgvector server ({type(exc).__name__}: {str(exc).strip()[:300]})"
        if ci:
            pytest.fail(f"{reason}; CI=true requires the pgvector tests", pytrace=False)
        pytest.skip(f"{reason}; pip install 'ragloop[pgvector]' or set {PGVECTOR_URL_ENV}")
    try:
        yield server.url, folder
    finally:
        stop_server(folder)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def pgvector_url(pgvector_server: tuple[str, Path | None], monkeypatch: pytest.MonkeyPatch) -> str:
    """The pgvector server's URL, also as RAGLOOP_PGVECTOR_URL for code that reads the environment."""
    monkeypatch.setenv("RAGLOOP_PGVECTOR_URL", pgvector_server[0])
    return pgvector_server[0]


# -- collection storage backends ----------------------------------------------------------------
# A test module that asks for `kb_backend` (e.g. `pytestmark = pytest.mark.usefixtures("kb_backend")`)
# runs once on the embedded files and once on PostgreSQL (`RAGLOOP_COLLECTIONS_URL`), with
# `Settings()` picking the backend up from the environment. PostgreSQL gets one scratch database
# per session, emptied of collection schemas after every test; unreachable, the PostgreSQL half
# is skipped, or fails under CI=true (as for the store suite).


@pytest.fixture(scope="session")
def kb_postgres_url() -> Iterator[str]:
    import secrets

    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.pool import NullPool

    from tests.store.conftest import DEFAULT_POSTGRES_URL, POSTGRES_URL_ENV, _ci, require_postgres

    admin_url = require_postgres(os.environ.get(POSTGRES_URL_ENV, DEFAULT_POSTGRES_URL), ci=_ci())
    name = f"ragloop_kb_{secrets.token_hex(4)}"
    admin = create_engine(admin_url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def drop_collection_schemas(url: str) -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            schemas = conn.execute(text(r"SELECT nspname FROM pg_namespace WHERE nspname LIKE 'rlkb\_%'")).scalars()
            for schema in list(schemas):
                conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    finally:
        engine.dispose()


@pytest.fixture(params=["files", pytest.param("postgres", marks=pytest.mark.postgres)])
def kb_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Where this test's collections live: "files" or "postgres"."""
    if request.param == "files":
        monkeypatch.delenv("RAGLOOP_COLLECTIONS_URL", raising=False)
        yield "files"
        return
    url = request.getfixturevalue("kb_postgres_url")
    monkeypatch.setenv("RAGLOOP_COLLECTIONS_URL", url)
    try:
        yield "postgres"
    finally:
        import gc

        gc.collect()  # collections the test dropped give their connections back before the schemas go
        drop_collection_schemas(url)
