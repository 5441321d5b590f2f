"""Uploads on a shared PostgreSQL collection backend: two instances (two homes, one database and one
store) upload, re-upload and delete the same documents, and a delete never comes back."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from ragloop.config import Settings
from ragloop.ingest.registry import DocumentOverride
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.rechunk import rechunk_document
from ragloop.service.documents import DocumentJobs, StagedFile, uploads_root
from ragloop.service.shared_uploads import job_marker, shared_upload_root
from ragloop.store import Store
from tests.conftest import drop_collection_schemas
from tests.service.conftest import CFG, Keys, make_keys, running
from tests.service.test_documents import wait_job

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

V1 = b"# Vell lighthouse\n\nThe Vell lighthouse was lit for the first time in 1902 by keeper Ansel Brock.\n"
V2 = b"# Vell lighthouse\n\nThe Vell lighthouse was lit for the first time in 1902 by keeper Mira Holt.\n"
FERRY = b"# Orm ferry\n\nThe Orm ferry crosses the bay twice a day, captained by Ilse Varga.\n"


@pytest.fixture
def shared_kb(kb_postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("RAGLOOP_COLLECTIONS_URL", kb_postgres_url)
    try:
        yield kb_postgres_url
    finally:
        import gc

        gc.collect()
        drop_collection_schemas(kb_postgres_url)


def home(tmp_path: Path, name: str) -> Settings:
    return replace(Settings(), home=tmp_path / name)


@asynccontextmanager
async def two_instances(store: Store, tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    from ragloop.service.app import create_app
    from tests.service.conftest import SERVICE

    async with AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(
                running(create_app(home(tmp_path, n), store=store, config=CFG, service_config=SERVICE))
            )
            for n in ("a", "b")
        ]
        yield clients[0], clients[1]


async def upload(c: httpx.AsyncClient, keys: Keys, name: str, data: bytes) -> dict[str, object]:
    r = await c.post(
        "/v1/collections/shared/documents", files=[("files", (name, data, "text/markdown"))], headers=keys.a
    )
    assert r.status_code == 202, r.text
    done = await wait_job(c, r.json()["job_id"], keys.a)
    assert done["status"] == "succeeded", done
    return done


async def ask(c: httpx.AsyncClient, keys: Keys, question: str, session: str) -> dict[str, object]:
    q = {"question": question, "session_id": session, "collection": "shared"}
    r = await c.post("/v1/query", json=q, headers=keys.u)
    assert r.status_code == 200, r.text
    return dict(r.json())


def local_uploads(settings: Settings) -> list[Path]:
    root = uploads_root(settings, "shared")
    return [p for p in root.rglob("*") if p.is_file() and p.name != ".jobs.lock"] if root.exists() else []


async def test_upload_reupload_delete_across_instances(shared_kb: str, store: Store, tmp_path: Path) -> None:
    keys = make_keys(store)
    async with two_instances(store, tmp_path) as (a, b):
        await upload(a, keys, "lighthouse.md", V1)
        done = await upload(b, keys, "lighthouse.md", V2)  # another instance replaces it: no 409
        assert done["result"]["files"]["changed"] == 1, done  # type: ignore[index]
        for i, c in enumerate((a, b)):
            ans = await ask(c, keys, "Who lit the Vell lighthouse?", f"l{i}")
            assert "Mira Holt" in str(ans["answer"]) and "Ansel Brock" not in str(ans["answer"]), ans

        r = await b.delete("/v1/collections/shared/documents/lighthouse.md", headers=keys.a)
        assert r.status_code == 202, r.text
        done = await wait_job(b, r.json()["job_id"], keys.a)
        assert done["status"] == "succeeded" and done["result"]["files"]["deleted"] == 1, done

        await upload(a, keys, "ferry.md", FERRY)  # the instance that first took the lighthouse in
        for i, c in enumerate((a, b)):
            ans = await ask(c, keys, "Who lit the Vell lighthouse?", f"d{i}")
            assert all(x["doc_id"] != "lighthouse.md" for x in ans["citations"]), ans  # type: ignore[attr-defined]
            ans = await ask(c, keys, "Who captains the Orm ferry?", f"f{i}")
            assert "Ilse Varga" in str(ans["answer"]), ans

        # a re-upload of the deleted name is a fresh document again, from either instance
        await upload(b, keys, "lighthouse.md", V1)

    coll = Collection("shared", home(tmp_path, "a"))
    try:
        files = coll.registry.files()
        assert set(files) == {"ferry.md", "lighthouse.md"}
        assert {rec.root for rec in files.values()} == {shared_upload_root("shared")}
        assert coll.storage.source("ferry.md") == FERRY and coll.storage.source("lighthouse.md") == V1
        assert coll.registry.get_state(job_marker("x")) is None
    finally:
        coll.close()
    # nothing stays in either home: no copy a later ingest could bring back, no staging left over
    assert local_uploads(home(tmp_path, "a")) == [] and local_uploads(home(tmp_path, "b")) == []


def test_a_document_deleted_elsewhere_is_not_resumed_back(shared_kb: str, store: Store, tmp_path: Path) -> None:
    """An upload that committed before its instance died, deleted meanwhile on another instance,
    is not ingested again when the first instance resumes the job."""
    a, b = home(tmp_path, "a"), home(tmp_path, "b")
    jobs = DocumentJobs(a, store, lambda: CFG)
    stage = jobs.staging_dir("shared", "j1")
    stage.mkdir(parents=True)
    (stage / "lighthouse.md").write_bytes(V1)
    staged = [StagedFile("lighthouse.md", stage / "lighthouse.md")]
    jobs.validate_staged("shared", staged)
    row = store.document_jobs.create(
        "j1", owner=jobs.owner, collection="shared", kind="ingest", files=["lighthouse.md"]
    )
    # the ingest commits, then the instance dies before recording the outcome
    from ragloop.service import shared_uploads

    coll = Collection("shared", a)
    summary = shared_uploads.ingest_staged(
        coll, stage, ("lighthouse.md",), CFG, lambda *_: None, job_id="j1", interrupted="x"
    )
    assert summary["files"]["new"] == 1  # type: ignore[index]
    store.document_jobs.start("j1")
    # another instance deletes the document
    other = DocumentJobs(b, store, lambda: CFG)
    gone = other.submit_delete("shared", "lighthouse.md")
    other.shutdown(wait=True, drain=True)
    assert (store.document_jobs.get(gone.job_id) or row).status == "succeeded"
    # the first instance restarts and takes its job up again
    from ragloop.service.document_recovery import recover_document_jobs

    jobs.shutdown()
    restarted = DocumentJobs(a, store, lambda: CFG)
    assert recover_document_jobs(restarted) == {"j1": "resumed"}
    restarted.shutdown(wait=True, drain=True)
    done = store.document_jobs.get("j1")
    assert done is not None and done.status == "succeeded" and done.result is not None
    assert done.result["note"] == "ingested before the restart"
    coll = Collection("shared", a)
    try:
        assert coll.registry.files() == {} and coll.storage.source("lighthouse.md") is None
        assert coll.registry.get_state(job_marker("j1")) is None
    finally:
        coll.close()
    assert not stage.exists()


def test_rechunk_reads_the_stored_source(shared_kb: str, store: Store, tmp_path: Path) -> None:
    """A document uploaded through one instance is re-chunked by another (no file in its home)."""
    jobs = DocumentJobs(home(tmp_path, "a"), store, lambda: CFG)
    stage = jobs.staging_dir("shared", "j2")
    stage.mkdir(parents=True)
    (stage / "ferry.md").write_bytes(FERRY * 20)
    jobs.submit_upload("shared", "j2", [StagedFile("ferry.md", stage / "ferry.md")])
    jobs.shutdown(wait=True, drain=True)
    assert (store.document_jobs.get("j2") or pytest.fail("no job")).status == "succeeded"
    assert local_uploads(home(tmp_path, "a")) == []  # the source is in the database only
    coll = Collection("shared", home(tmp_path, "b"))
    try:
        before = coll.load().manifest.n_chunks
        result = rechunk_document(coll, "ferry.md", DocumentOverride("ferry.md", 200, 20, "test"), CFG)
        assert result.generation_after == result.generation_before + 1
        assert coll.load().manifest.n_chunks != before
    finally:
        coll.close()
