"""Uploads are all or nothing and checked completely before the 202: a file the ingest would refuse
(a lone surrogate, markup too deep or too large, a truncated PDF, NUL bytes, nothing to index) is a
422 naming it and why, fast, and nothing of the upload is kept. Should a file still fail inside
the job, the job keeps the others and lists it with its reason; a job that fails says why in one
plain line, never a raw codec message."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from ragloop.config import Settings
from ragloop.retrieval.collection import Collection
from ragloop.service.documents import DocumentJobs, uploads_root
from ragloop.store import Store
from tests.ingest.test_loaders import make_pdf
from tests.service.conftest import build_app, make_keys, running
from tests.service.test_documents import NEW_DOC, staging_empty, wait_job

pytestmark = pytest.mark.anyio

SURROGATE = b'{"id":"a","text":"hello \\ud800 x"}\n'  # the JSON escape: json.loads makes a lone surrogate
DEEP_HTML = b"<div>" * 200_000 + b"x" + b"</div>" * 200_000  # 2.2 MB
UPLOAD = "/v1/collections/default/documents"


def uploaded(collection: str = "default") -> list[str]:
    root = uploads_root(Settings(), collection)
    return sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) if root.exists() else []


async def ask(c: httpx.AsyncClient, headers: dict[str, str], session: str) -> dict[str, Any]:
    q = {"question": "Who lit the Vell lighthouse?", "session_id": session}
    return dict((await c.post("/v1/query", json=q, headers=headers)).json())


async def test_a_lone_surrogate_beside_a_good_file_is_a_422_and_keeps_nothing(
    collection: Collection, store: Store
) -> None:
    keys = make_keys(store)
    gen = collection.generation()
    files = [
        ("files", ("lighthouse.md", NEW_DOC, "text/markdown")),
        ("files", ("records.jsonl", SURROGATE, "application/jsonl")),
    ]
    async with running(build_app(store)) as c:
        r = await c.post(UPLOAD, files=files, headers=keys.a)
        assert r.status_code == 422, r.text
        detail = r.json()["detail"]
        assert detail.startswith("records.jsonl: line 1: text has a lone surrogate U+D800"), detail
        assert "codec" not in detail
        assert collection.generation() == gen and uploaded() == [] and staging_empty("default")
        # nothing was taken in silently: the client was told which file to fix, and the good one uploads alone
        r = await c.post(UPLOAD, files=files[:1], headers=keys.a)
        done = await wait_job(c, r.json()["job_id"], keys.a)
        assert done["status"] == "succeeded" and "rejected" not in done["result"], done
        ans = await ask(c, keys.u, "s1")
        assert "Ansel Brock" in ans["answer"] and ans["citations"][0]["doc_id"] == "lighthouse.md"
    assert uploaded() == ["lighthouse.md"]


async def test_the_issues_deep_html_is_refused_in_well_under_a_second(
    collection: Collection, store: Store, record_property: Any
) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        start = time.perf_counter()
        r = await c.post(UPLOAD, files=[("files", ("deep.html", DEEP_HTML, "text/html"))], headers=keys.a)
        took = time.perf_counter() - start
    record_property("deep.html upload seconds", round(took, 3))
    print(f"deep.html (2.2 MB, 200k nested elements): {r.status_code} in {took:.3f} s")
    assert r.status_code == 422 and r.json()["detail"].startswith("deep.html: HTML has 400,000 tags"), r.text
    assert took < 3.0  # 12.6 s before (measured in the issue), 0.1-0.2 s here on 2 busy cores
    assert uploaded() == [] and staging_empty("default")


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("cut.pdf", make_pdf(["some words on a page"])[:400], "cut.pdf: broken PDF"),
        ("latin1.md", "# Caf\xe9\n\ncr\xe8me".encode("latin-1"), "latin1.md: invalid UTF-8 at byte offset 5"),
        ("nul.txt", b"word " * 3000 + b"\x00 more", "nul.txt: binary content (NUL byte at offset 15000)"),
        ("zeros.md", b"\x00" * 64, "zeros.md: binary content (NUL byte at offset 0)"),
        ("front.md", b'---\nauthor: "a\\ud800"\n---\n# T\n\ntext\n', "front.md: metadata 'author' has a lone"),
        ("id.jsonl", b'{"id":"a\\u0000","text":"ok"}\n', "id.jsonl: line 1: record id 'a\\x00' has a control"),
        ("deep.jsonl", b"[" * 100_000 + b"]" * 100_000 + b"\n", "deep.jsonl: JSON on line 1 is nested too deeply"),
        ("stairs.rst", "\n".join(" " * i + "- x" for i in range(800)).encode(), "stairs.rst: reStructuredText nested"),
        ("nested.html", b"<b>" * 1000 + b"x", "nested.html: HTML nests elements more than 512 deep"),
        ("attrs.html", b"<p " + b"a " * 300_000 + b">x</p>", "attrs.html: HTML has more than 200,000 attributes"),
        ("tags.html", b"<br>" * 2, "tags.html: no text"),
    ],
)
async def test_malformed_files_are_refused_naming_the_file(
    collection: Collection, store: Store, name: str, content: bytes, message: str
) -> None:
    keys = make_keys(store)
    gen = collection.generation()
    async with running(build_app(store)) as c:
        r = await c.post(
            UPLOAD,
            files=[("files", ("good.md", NEW_DOC, "text/markdown")), ("files", (name, content, "x"))],
            headers=keys.a,
        )
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith(message), r.json()
    assert collection.generation() == gen and uploaded() == [] and staging_empty("default")


async def test_a_file_the_job_still_refuses_is_listed_and_the_others_are_kept(
    collection: Collection, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check before the 202 is the ingest's own load and chunking, so this takes a check that
    missed a file (switched off here) to reach: the ingest skips it, and the job says so per file."""
    monkeypatch.setattr(DocumentJobs, "validate_staged", lambda self, collection, staged: None)
    keys = make_keys(store)
    files = [
        ("files", ("lighthouse.md", NEW_DOC, "text/markdown")),
        ("files", ("records.jsonl", SURROGATE, "application/jsonl")),
    ]
    async with running(build_app(store)) as c:
        r = await c.post(UPLOAD, files=files, headers=keys.a)
        assert r.status_code == 202, r.text
        done = await wait_job(c, r.json()["job_id"], keys.a)
        assert done["status"] == "succeeded", done
        (rejected,) = done["result"]["rejected"]
        assert rejected["document"] == "records.jsonl"
        assert rejected["reason"].startswith("line 1: text has a lone surrogate U+D800"), rejected
        ans = await ask(c, keys.u, "s2")
        assert "Ansel Brock" in ans["answer"] and ans["citations"][0]["doc_id"] == "lighthouse.md"
        # alone, the same file fails the job, with the reason
        r = await c.post(UPLOAD, files=files[1:], headers=keys.a)
        done = await wait_job(c, r.json()["job_id"], keys.a)
        assert done["status"] == "failed" and done["error"].startswith("records.jsonl: line 1: text has a lone")
    assert uploaded() == ["lighthouse.md"] and staging_empty("default")
    assert "records.jsonl" not in collection.registry.files()


async def test_a_failed_job_reports_one_plain_line_not_a_codec_error(
    collection: Collection, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_ingest(self: Collection, *args: Any, **kwargs: Any) -> Any:
        "\ud800".encode()  # what a lone surrogate did to the ingest before

    monkeypatch.setattr(Collection, "ingest", broken_ingest)
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        r = await c.post(UPLOAD, files=[("files", ("lighthouse.md", NEW_DOC, "text/markdown"))], headers=keys.a)
        done = await wait_job(c, r.json()["job_id"], keys.a)
        listed = await c.get("/v1/jobs", headers=keys.a)
    assert done["status"] == "failed"
    assert done["error"].startswith("a file holds text that is not valid Unicode"), done["error"]
    assert "codec" not in done["error"] and "\ud800" not in done["error"]
    assert listed.status_code == 200
    assert uploaded() == [] and staging_empty("default")
