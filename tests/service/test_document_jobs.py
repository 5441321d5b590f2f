"""Document jobs are durable: kept in the store, listed after a restart, and taken up at start-up
(resumed when they still can run, failed with the reason when not; other instances' jobs untouched)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragloop.config import Settings
from ragloop.retrieval.collection import Collection
from ragloop.service.document_recovery import recover_document_jobs
from ragloop.service.documents import INTERRUPTED, DocumentJobs, default_owner, uploads_root
from ragloop.store import Store
from tests.service.conftest import CFG, build_app, make_keys, running
from tests.service.test_documents import NEW_DOC, staging_empty, wait_job

pytestmark = pytest.mark.anyio


def stage_files(jobs_settings: Settings, collection: str, job_id: str, files: dict[str, str]) -> Path:
    stage = uploads_root(jobs_settings, collection) / ".staging" / job_id
    stage.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (stage / name).write_text(text)
    return stage


async def test_the_job_list_survives_a_restart(collection: Collection, any_store: Store) -> None:
    store = any_store
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        r = await c.post(
            "/v1/collections/default/documents",
            files=[("files", ("lighthouse.md", NEW_DOC, "text/markdown"))],
            headers=keys.a,
        )
        upload = await wait_job(c, r.json()["job_id"], keys.a)
        r = await c.delete("/v1/collections/default/documents/ferry.md", headers=keys.a)
        delete = await wait_job(c, r.json()["job_id"], keys.a)
        assert upload["status"] == delete["status"] == "succeeded"
        assert upload["started_at"] is not None and upload["started_at"] <= upload["finished_at"]

    async with running(build_app(store)) as c:  # a new instance of the service on the same database
        for job in (upload, delete):
            again = (await c.get(f"/v1/jobs/{job['job_id']}", headers=keys.a)).json()
            assert again == job
            # jobs are admin-only like the uploads that make them: the same 403 for every id
            assert (await c.get(f"/v1/jobs/{job['job_id']}", headers=keys.u)).status_code == 403
        listed = (await c.get("/v1/jobs", headers=keys.a)).json()
        assert [j["job_id"] for j in listed] == [delete["job_id"], upload["job_id"]]
        only = (await c.get("/v1/jobs", params={"status": "succeeded", "limit": 1}, headers=keys.a)).json()
        assert [j["job_id"] for j in only] == [delete["job_id"]]
        assert (await c.get("/v1/jobs", params={"collection": "other"}, headers=keys.a)).json() == []
        assert (await c.get("/v1/jobs", headers=keys.u)).status_code == 403  # listing is for admins
        assert (await c.get("/v1/jobs", params={"status": "lost"}, headers=keys.a)).status_code == 422
        assert (await c.get("/v1/jobs/nope", headers=keys.u)).status_code == 403
        assert (await c.get("/v1/jobs/nope", headers=keys.a)).status_code == 404


async def test_jobs_left_unfinished_are_resumed_or_failed_at_start_up(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    settings = Settings()
    me, other = default_owner(settings), "other-host:/srv/ragloop"
    jobs = store.document_jobs

    # an upload that was running when the process died: its file still staged
    stage_files(settings, "default", "running1", {"lighthouse.md": NEW_DOC.decode()})
    jobs.create("running1", owner=me, collection="default", kind="ingest", files=["lighthouse.md"])
    jobs.start("running1")
    # an upload that was running with its file already moved into place (the ingest did not finish)
    root = uploads_root(settings, "default")
    root.mkdir(parents=True, exist_ok=True)
    (root / "harbour.md").write_text("# Harbour\n\nThe Ostria harbour was dredged in 1911 by the Vell company.")
    stage_files(settings, "default", "moved1", {})
    jobs.create("moved1", owner=me, collection="default", kind="ingest", files=["harbour.md"])
    jobs.start("moved1")
    # a queued upload whose staged files are gone: it cannot run
    jobs.create("lost1", owner=me, collection="default", kind="ingest", files=["gone.md"])
    # a deletion that was running: it runs again
    jobs.create("delete1", owner=me, collection="default", kind="delete", files=["ferry.md"])
    jobs.start("delete1")
    # another instance's job (its files are on its own disk): left alone
    jobs.create("theirs", owner=other, collection="default", kind="ingest", files=["x.md"])
    jobs.start("theirs")

    async with running(build_app(store)) as c:
        resumed = await wait_job(c, "running1", keys.a)
        assert resumed["status"] == "succeeded", resumed
        assert resumed["result"]["resumed_after_restart"] is True and resumed["result"]["files"]["new"] >= 1
        moved = await wait_job(c, "moved1", keys.a)
        assert moved["status"] == "succeeded", moved
        lost = (await c.get("/v1/jobs/lost1", headers=keys.a)).json()
        assert lost["status"] == "failed" and lost["error"] == INTERRUPTED and lost["finished_at"] is not None
        deleted = await wait_job(c, "delete1", keys.a)
        assert deleted["status"] == "succeeded" and deleted["result"]["files"]["deleted"] == 1, deleted
        assert (await c.get("/v1/jobs/theirs", headers=keys.a)).json()["status"] == "running"

        q = {"question": "Who lit the Vell lighthouse?", "session_id": "r"}
        ans = (await c.post("/v1/query", json=q, headers=keys.u)).json()
        assert "Ansel Brock" in ans["answer"] and ans["citations"][0]["doc_id"] == "lighthouse.md"
    files = set(collection.registry.files())
    assert {"lighthouse.md", "harbour.md"} <= files and "ferry.md" not in files
    assert (root / "lighthouse.md").is_file() and staging_empty("default")
    row = jobs.get("running1")
    assert row is not None and row.attempts == 2


def test_a_deletion_interrupted_after_the_index_changed_succeeds(collection: Collection, store: Store) -> None:
    """The index already dropped the document, the job row still says running: the resumed job finds
    the work done instead of failing on an unknown document."""
    settings = Settings()
    collection.delete_documents(["tower.md"])
    store.document_jobs.create(
        "d1", owner=default_owner(settings), collection="default", kind="delete", files=["tower.md"]
    )
    store.document_jobs.start("d1")
    jobs = DocumentJobs(settings, store, lambda: CFG)
    try:
        assert recover_document_jobs(jobs) == {"d1": "resumed"}
    finally:
        jobs.shutdown(wait=True, drain=True)
    row = store.document_jobs.get("d1")
    assert row is not None and row.status == "succeeded" and row.result is not None
    assert row.result["resumed_after_restart"] is True and "before the restart" in row.result["note"]


def test_a_second_process_on_the_same_home_leaves_the_jobs_alone(store: Store) -> None:
    settings = Settings()
    first = DocumentJobs(settings, store, lambda: CFG)
    second = DocumentJobs(settings, store, lambda: CFG)
    try:
        assert recover_document_jobs(first) == {}  # holds the home's job lock from now on
        store.document_jobs.create("q1", owner=first.owner, collection="c", kind="ingest", files=["a.md"])
        assert recover_document_jobs(second) == {}  # the first is alive: its queued job is its own
        assert store.document_jobs.get("q1").status == "queued"  # type: ignore[union-attr]
        first.shutdown(wait=True)  # releases the lock
        assert recover_document_jobs(second) == {"q1": "failed"}  # nothing staged: cannot run
        assert store.document_jobs.get("q1").error == INTERRUPTED  # type: ignore[union-attr]
    finally:
        first.shutdown(wait=True)
        second.shutdown(wait=True)
