"""Document upload (validated, staged, ingested in the background with progress) and deletion."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from ragloop.config import Settings
from ragloop.retrieval.collection import Collection
from ragloop.service.documents import uploads_root
from ragloop.store import Store
from tests.service.conftest import SERVICE, build_app, make_keys, running

pytestmark = pytest.mark.anyio

NEW_DOC = b"# Vell lighthouse\n\nThe Vell lighthouse was lit for the first time in 1902 by keeper Ansel Brock.\n"


async def wait_job(c: httpx.AsyncClient, job_id: str, headers: dict[str, str]) -> dict[str, Any]:
    for _ in range(400):
        job = (await c.get(f"/v1/jobs/{job_id}", headers=headers)).json()
        if job["status"] in ("succeeded", "failed"):
            return job
        await asyncio.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish: {job}")


def staging_empty(collection: str) -> bool:
    stage = uploads_root(Settings(), collection) / ".staging"
    return not stage.exists() or not any(stage.rglob("*.*"))


@pytest.mark.usefixtures("kb_backend")  # uploads are kept by the storage on PostgreSQL
async def test_upload_ingest_query_delete(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        r = await c.post(
            "/v1/collections/default/documents",
            files=[("files", ("lighthouse.md", NEW_DOC, "text/markdown"))],
            headers=keys.a,
        )
        assert r.status_code == 202, r.text
        job = r.json()
        assert job["kind"] == "ingest" and job["documents"] == ["lighthouse.md"]
        done = await wait_job(c, job["job_id"], keys.a)
        assert done["status"] == "succeeded", done
        assert done["progress"]["fraction"] == 1.0 and done["result"]["files"]["new"] == 1
        q = {"question": "Who lit the Vell lighthouse?", "session_id": "doc"}
        ans = (await c.post("/v1/query", json=q, headers=keys.u)).json()
        assert "Ansel Brock" in ans["answer"] and ans["citations"][0]["doc_id"] == "lighthouse.md"

        # unknown documents and collections are 404
        assert (await c.delete("/v1/collections/default/documents/nope.md", headers=keys.a)).status_code == 404
        assert (await c.delete("/v1/collections/nope/documents/x.md", headers=keys.a)).status_code == 404

        r = await c.delete("/v1/collections/default/documents/lighthouse.md", headers=keys.a)
        assert r.status_code == 202
        done = await wait_job(c, r.json()["job_id"], keys.a)
        assert done["status"] == "succeeded" and done["result"]["files"]["deleted"] == 1
        ans = (await c.post("/v1/query", json={**q, "session_id": "doc2"}, headers=keys.u)).json()
        assert all(c_["doc_id"] != "lighthouse.md" for c_ in ans["citations"])
        assert not (uploads_root(Settings(), "default") / "lighthouse.md").exists()
        assert staging_empty("default")

        # a document ingested from a directory (the CLI) leaves the index; its file stays where it is
        r = await c.delete("/v1/collections/default/documents/bridge.md", headers=keys.a)
        done = await wait_job(c, r.json()["job_id"], keys.a)
        assert done["status"] == "succeeded" and "is still there" in done["result"]["note"]
        ans = (
            await c.post(
                "/v1/query", json={"question": "Who completed the Zorblat Bridge?", "session_id": "d3"}, headers=keys.u
            )
        ).json()
        assert all(c_["doc_id"] != "bridge.md" for c_ in ans["citations"])
        assert set(collection.registry.files()) == {"tower.md", "ferry.md", "guide/trams.md"}


@pytest.mark.usefixtures("kb_backend")  # uploads are kept by the storage on PostgreSQL
async def test_upload_into_a_new_collection(store: Store) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        r = await c.post(
            "/v1/collections/fresh/documents",
            files=[("files", ("a.txt", b"The Vell river floods every spring.", "text/plain"))],
            headers=keys.a,
        )
        done = await wait_job(c, r.json()["job_id"], keys.a)
        assert done["status"] == "succeeded", done
        q = {"question": "When does the Vell river flood?", "session_id": "n", "collection": "fresh"}
        ans = (await c.post("/v1/query", json=q, headers=keys.u)).json()
        assert "spring" in ans["answer"]


@pytest.mark.parametrize(
    ("name", "content", "status", "message"),
    [
        ("evil.exe", b"MZ\x90\x00", 415, "unsupported type"),
        ("../escape.md", b"# x\n\ntext here", 422, "is not allowed"),
        (".hidden.md", b"# x\n\ntext here", 422, "is not allowed"),
        ("empty.md", b"", 422, "is empty"),
        ("broken.pdf", b"%PDF-1.4 this is not really a pdf", 422, "broken.pdf"),
        ("latin1.txt", "caf\xe9 cr\xe8me".encode("latin-1") + b"\xff\xfe\x00\x00" * 4, 422, "latin1.txt"),
        ("bad.jsonl", b'{"text": "ok", "id": 1}\n{not json\n', 422, "bad.jsonl"),
        ("blank.md", b"   \n\n  \n", 422, "blank.md"),
        ("bridge.md", b"# Clash\n\nA different bridge text for the same id.", 409, "ingested from"),
    ],
)
async def test_malformed_uploads_leave_nothing_behind(
    collection: Collection, store: Store, name: str, content: bytes, status: int, message: str
) -> None:
    keys = make_keys(store)
    gen = collection.generation()
    async with running(build_app(store)) as c:
        r = await c.post(
            "/v1/collections/default/documents",
            files=[("files", (name, content, "application/octet-stream"))],
            headers=keys.a,
        )
        assert r.status_code == status, r.text
        assert message in r.json()["detail"], r.json()
    assert collection.generation() == gen
    assert staging_empty("default")
    root = uploads_root(Settings(), "default")
    assert not root.exists() or not [p for p in root.iterdir() if not p.name.startswith(".")]


async def test_upload_limits(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    app = build_app(store, service_config=SERVICE.with_(max_upload_bytes=1000, max_upload_files=2))
    async with running(app) as c:
        r = await c.post(
            "/v1/collections/default/documents",
            files=[("files", ("big.md", b"# Big\n\n" + b"word " * 400, "text/markdown"))],
            headers=keys.a,
        )
        assert r.status_code == 413 and "1,000 byte limit" in r.json()["detail"]
        files = [("files", (f"f{i}.md", b"# F\n\nsome text here", "text/markdown")) for i in range(3)]
        r = await c.post("/v1/collections/default/documents", files=files, headers=keys.a)
        assert r.status_code == 413 and "at most 2 files" in r.json()["detail"]
        # not multipart at all / no files
        r = await c.post("/v1/collections/default/documents", json={"files": []}, headers=keys.a)
        assert r.status_code == 422
        r = await c.post(
            "/v1/collections/default/documents",
            content=b"--xyz\r\ngarbage",
            headers={**keys.a, "Content-Type": "multipart/form-data; boundary=xyz"},
        )
        assert 400 <= r.status_code < 500
        r = await c.post(
            "/v1/collections/bad name!/documents", files=[("files", ("a.md", b"# a\n\nb c d", "x"))], headers=keys.a
        )
        assert r.status_code == 422 and "name: String should match pattern" in r.json()["detail"]
    assert staging_empty("default")


@pytest.mark.usefixtures("kb_backend")  # uploads are kept by the storage on PostgreSQL
def test_deleting_the_last_upload_empties_the_uploads(store: Store) -> None:
    """The service re-ingests its upload root; a root with nothing left still ingests cleanly."""
    from ragloop.service.documents import DocumentJobs, StagedFile
    from tests.service.conftest import CFG

    jobs = DocumentJobs(Settings(), store, lambda: CFG)
    stage = jobs.staging_dir("solo", "j1")
    stage.mkdir(parents=True)
    (stage / "only.md").write_text("# Only\n\nThe only document in this collection.")
    staged = [StagedFile("only.md", stage / "only.md")]
    jobs.validate_staged("solo", staged)
    job = jobs.submit_upload("solo", "j1", staged)
    jobs.shutdown(wait=True, drain=True)
    done = store.document_jobs.get(job.job_id)
    assert done is not None and done.status == "succeeded", done.error if done else None
    jobs = DocumentJobs(Settings(), store, lambda: CFG)
    job = jobs.submit_delete("solo", "only.md")
    jobs.shutdown(wait=True, drain=True)
    done = store.document_jobs.get(job.job_id)
    assert done is not None and done.status == "succeeded", done.error if done else None
    assert not (uploads_root(Settings(), "solo") / "only.md").exists()
    coll = Collection("solo", Settings())
    try:
        assert coll.stats()["files"] == 0
    finally:
        coll.close()
