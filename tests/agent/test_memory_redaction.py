"""The write seams below the service, each on its real backend: the call log (`Logged`) stores redacted
prompts and responses while the caller gets the model's text; the chat cache skips a response that
holds personal data; the conversation log and the checkpoints (SQLite files, and PostgreSQL) hold no
personal data, the answer keeps it, and a follow-up reads the redacted history back."""

from __future__ import annotations

import os
import subprocess
from functools import partial
from pathlib import Path

import pytest
from sqlalchemy import func, select

from ragloop.agent.api import Agent
from ragloop.agent.memory import ConversationMemory
from ragloop.models.chat import Cached, ChatCacheDB, ChatRequest, FunctionModel, Logged, MemorySink, run_sync
from ragloop.models.chat.db import chat_cache
from ragloop.retrieval.collection import Collection
from ragloop.text.pii import Redactor
from tests.agent.conftest import ask, build_agent
from tests.store.conftest import DEFAULT_POSTGRES_URL, POSTGRES_URL_ENV, _ci, require_postgres

EMAIL, CARD = "alice.mcgregor@example.org", "4111 1111 1111 1111"
SECRETS = (EMAIL.encode(), CARD.encode(), CARD.replace(" ", "").encode())
QUESTION = f"When was the Zorblat Bridge completed? Mail {EMAIL}, card {CARD}."


def _echo(req: ChatRequest) -> str:
    return f"you wrote: {req.messages[-1].content}"


def test_call_log_is_redacted_and_the_cache_skips_personal_responses(tmp_path: Path) -> None:
    sink = MemorySink()
    with ChatCacheDB(tmp_path / "chat.sqlite") as db:
        model = Logged(Cached(FunctionModel(_echo, name="test:echo"), db), sink)
        resp = run_sync(model.request(ChatRequest.user(f"hi, I am {EMAIL}")))
        assert EMAIL in resp.text  # the caller gets what the model said
        plain = run_sync(model.request(ChatRequest.user("no personal data here")))
        assert plain.text == "you wrote: no personal data here"
        with db.engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(chat_cache)).scalar() == 1  # only the plain one
    row = sink.calls[0]
    assert row.prompt == [{"role": "user", "content": "hi, I am [EMAIL]"}]
    assert row.response == "you wrote: hi, I am [EMAIL]"
    assert not [s for s in SECRETS if any(s in f.read_bytes() for f in tmp_path.rglob("*") if f.is_file())]


def test_checkpoints_and_conversation_log_hold_no_personal_data(coll: Collection, ragloop_home: Path) -> None:
    agent = build_agent(coll)
    ans = ask(agent, QUESTION, thread_id="t-pii")
    assert "Zorblat" in ans.answer and not ans.refused
    # retrieval, grading and the draft read the question without the personal data
    assert ans.standalone_question == "When was the Zorblat Bridge completed? Mail, card."
    follow = ask(agent, "And who built it?", thread_id="t-pii")
    assert follow.answer
    log = agent.log.messages("t-pii")
    assert "[EMAIL]" in str(log) and "[CARD]" in str(log)
    assert next(m["content"] for m in log if m["role"] == "user") == (
        "When was the Zorblat Bridge completed? Mail [EMAIL], card [CARD]."
    )
    agent.memory.close()
    files = [f for f in ragloop_home.rglob("*") if f.is_file()]
    assert any(f.name.startswith("checkpoints.sqlite") for f in files)
    assert [str(f) for f in files if any(s in f.read_bytes() for s in SECRETS)] == []


def test_redaction_off_keeps_the_text(coll: Collection, ragloop_home: Path) -> None:
    """The switch works, and the scan above can fail."""
    memory = ConversationMemory(
        f"sqlite:///{ragloop_home / 'cp.sqlite'}",
        f"sqlite:///{ragloop_home / 'log.sqlite'}",
        Redactor(enabled=False),
    )
    agent = build_agent(coll, agent_cls=partial(Agent, memory=memory))  # type: ignore[arg-type]
    ask(agent, QUESTION, thread_id="t-clear")
    memory.close()
    leaked = {f.name for f in ragloop_home.rglob("*") if f.is_file() and EMAIL.encode() in f.read_bytes()}
    assert any(n.startswith("cp.sqlite") for n in leaked) and any(n.startswith("log.sqlite") for n in leaked)


@pytest.mark.postgres
def test_postgres_checkpoints_hold_no_personal_data(coll: Collection) -> None:
    import uuid

    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.pool import NullPool

    admin_url = require_postgres(os.environ.get(POSTGRES_URL_ENV, DEFAULT_POSTGRES_URL), ci=_ci())
    schema = f"pii_{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, poolclass=NullPool)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        url = make_url(admin_url).update_query_dict({"options": f"-csearch_path={schema}"})
        cp = url.set(drivername="postgresql").render_as_string(hide_password=False)
        memory = ConversationMemory(cp, url.set(drivername="postgresql+psycopg").render_as_string(hide_password=False))
        agent = build_agent(coll, agent_cls=partial(Agent, memory=memory))  # type: ignore[arg-type]
        ask(agent, QUESTION, thread_id="t-pg")
        ask(agent, "And who built it?", thread_id="t-pg")
        memory.close()
        plain = make_url(admin_url).set(drivername="postgresql").render_as_string(hide_password=False)
        dump = subprocess.run(
            ["pg_dump", "--data-only", f"--schema={schema}", plain], capture_output=True, check=True, timeout=60
        ).stdout
        assert b"checkpoint_blobs" in dump and b"conversation_log" in dump
        assert [s for s in SECRETS if s in dump] == []
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        admin.dispose()
