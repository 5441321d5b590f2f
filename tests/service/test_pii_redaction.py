"""End to end: personal data in a question and in feedback is stored nowhere in clear.

A real app (in-process, lifespan and embedded worker on) with a real store under a temporary
`RAGLOOP_HOME` (SQLite; and PostgreSQL, read back with `pg_dump --data-only`) answers a question that
carries an email address and a card number with the echoing chat model, takes negative feedback whose
correction repeats them, answers a follow-up in the same conversation (whose condensation reads the
conversation back), and lets the worker evaluate and diagnose. Then no file
under the home or the store's directory, and no row of the database, holds either string (the card
with or without its spaces). The client, meanwhile, got the answer as the graph wrote it.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from ragloop.retrieval.collection import Collection
from ragloop.store import Store
from ragloop.text.pii import Redactor
from tests.service.conftest import CFG, SERVICE, build_app, make_keys, open_store, running

pytestmark = pytest.mark.anyio

EMAIL, CARD = "alice.mcgregor@example.org", "4111 1111 1111 1111"
SECRETS = (EMAIL.encode(), CARD.encode(), CARD.replace(" ", "").encode())
ECHO = CFG.with_overrides(agent={"chat_model": "test:echo"})
QUESTION = f"When was the Zorblat Bridge completed? My email is {EMAIL} and my card is {CARD}."


def leaks_in_files(root: Path) -> list[str]:
    return [
        str(f.relative_to(root)) for f in root.rglob("*") if f.is_file() and any(s in f.read_bytes() for s in SECRETS)
    ]


async def _settle(store: Store, timeout_s: float = 30.0) -> None:
    """Until the embedded worker has nothing pending (tier 1, tier 2, diagnosis)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        st = await asyncio.to_thread(store.queue.stats)
        if st.counts.get("pending", 0) + st.counts.get("running", 0) == 0:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the worker did not drain: {st.counts}")


async def _converse(store: Store) -> str:
    keys = make_keys(store)
    app = build_app(store, config=ECHO, service_config=SERVICE.with_(tier2_sample_rate=1.0), worker=True)
    async with running(app) as c:
        r = await c.post("/v1/query", json={"question": QUESTION, "session_id": "pii"}, headers=keys.u)
        assert r.status_code == 200, r.text
        shown = r.json()
        answer_id = shown["answer_id"]
        fb = {
            "rating": "negative",
            "corrected_answer": f"Write to {EMAIL}; the card {CARD} was charged.",
            "highlighted_passages": [{"text": f"card {CARD.replace(' ', '')}", "note": f"mail {EMAIL}"}],
        }
        r = await c.post(f"/v1/answers/{answer_id}/feedback", json=fb, headers=keys.u)
        assert r.status_code == 201, r.text
        r = await c.post("/v1/query", json={"question": "And who built it?", "session_id": "pii"}, headers=keys.u)
        assert r.status_code == 200, r.text
        follow_up = r.json()["answer_id"]
        await _settle(store)
        # what an admin reads back is the redacted copy of what the user was shown
        got = (await c.get(f"/v1/answers/{answer_id}", headers=keys.a)).json()
        assert got["question"] == Redactor().redact(QUESTION) and "[EMAIL]" in got["question"]
        assert got["answer"] == Redactor().redact(shown["answer"])
        # the follow-up's condensation read the conversation back from the (redacted) checkpoint
        calls = (await c.get(f"/v1/answers/{follow_up}/model-calls", headers=keys.a)).json()["calls"]
        assert calls and any("[EMAIL]" in str(call["prompt"]) for call in calls)
    return str(shown["answer"])


async def test_no_personal_data_under_the_home_or_in_sqlite(
    collection: Collection, ragloop_home: Path, tmp_path: Path
) -> None:
    store = open_store(f"sqlite:///{ragloop_home / 'ragloop.db'}")
    try:
        answer = await _converse(store)
    finally:
        store.close()
    assert "Zorblat" in answer
    assert leaks_in_files(tmp_path) == []


@pytest.mark.postgres
async def test_no_personal_data_in_postgresql(
    collection: Collection, postgres_url: str, ragloop_home: Path, tmp_path: Path
) -> None:
    store = open_store(postgres_url)
    try:
        await _converse(store)
    finally:
        store.close()
    assert leaks_in_files(tmp_path) == []
    url = make_url(postgres_url)
    schema = str(url.query["options"]).split("search_path=", 1)[1]
    plain = url.set(query={}).set(drivername="postgresql").render_as_string(hide_password=False)
    dump = subprocess.run(
        ["pg_dump", "--data-only", f"--schema={schema}", plain], capture_output=True, check=True, timeout=60
    ).stdout
    assert b"model_calls" in dump and b"checkpoint" in dump  # the dump did read the service's tables
    assert [s for s in SECRETS if s in dump] == []


async def test_spans_with_content_capture_carry_no_personal_data(collection: Collection, store: Store) -> None:
    """Content capture (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`) exports text to a collector:
    redacted too, while the span still shows the question's shape."""
    from ragloop import tracing
    from tests.service.test_tracing import _provider

    provider, exporter = _provider()
    keys = make_keys(store)
    with tracing.use_provider(provider, content=True):
        async with running(build_app(store, config=ECHO)) as c:
            r = await c.post("/v1/query", json={"question": QUESTION, "session_id": "otel"}, headers=keys.u)
            assert r.status_code == 200, r.text
    finished = exporter.get_finished_spans()
    (graph,) = [s for s in finished if s.name == "ragloop.graph"]
    assert graph.attributes is not None and "[EMAIL]" in str(graph.attributes["input.value"])
    exported = repr([dict(s.attributes or {}) for s in finished]).encode()
    assert [s for s in SECRETS if s in exported] == []
