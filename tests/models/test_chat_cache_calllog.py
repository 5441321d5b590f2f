"""The response cache on a real SQLite file, and the call log (`Logged`) into a sink with the current
`call_scope` (the store-backed sink is tested end to end in tests/service/test_call_log.py)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy import func, inspect, select

from ragloop.calls import CallRecord
from ragloop.config.settings import Settings
from ragloop.models.chat import (
    Cached,
    CallPurpose,
    CallSink,
    ChatCacheDB,
    ChatModel,
    ChatRequest,
    ChatResponse,
    Logged,
    MemorySink,
    Price,
    PriceTable,
    TestModel,
    Usage,
    call_scope,
    current_scope,
    make_wrapped,
    run_sync,
    wrap,
)
from ragloop.models.chat.db import chat_cache
from ragloop.models.chat.wrappers import RateLimited, Retrying
from ragloop.models.errors import StructuredOutputError


class Clock:
    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Answer(BaseModel):
    text: str


@pytest.fixture
def db(tmp_path: Path) -> Iterator[ChatCacheDB]:
    with ChatCacheDB(tmp_path / "models.sqlite") as d:
        yield d


def _resp(text: str, latency_ms: float = 1234.5) -> ChatResponse:
    return ChatResponse(
        text=text,
        model="test:scripted",
        usage=Usage(prompt_tokens=10, completion_tokens=5),
        latency_ms=latency_ms,
    )


def test_the_cache_file_holds_the_cache_only(tmp_path: Path) -> None:
    for _ in range(2):  # created idempotently
        with ChatCacheDB(tmp_path / "m.sqlite") as d:
            names = set(inspect(d.engine).get_table_names())
    assert names == {"chat_cache"}  # no second call log: that is the store's model_calls
    with ChatCacheDB.for_settings(Settings(home=tmp_path / "home")) as d:
        assert d.path == tmp_path / "home" / "cache" / "chat.sqlite" and d.path.exists()


def test_cache_hit_is_marked_and_keeps_the_original_latency(db: ChatCacheDB) -> None:
    inner = TestModel([_resp("first", latency_ms=987.0), _resp("second")])
    model = Cached(inner, db)
    a = run_sync(model.request(ChatRequest.user("q")))
    b = run_sync(model.request(ChatRequest.user("q")))
    assert (a.text, a.cached) == ("first", False)
    assert (b.text, b.cached, b.latency_ms) == ("first", True, 987.0)
    assert b.usage == a.usage
    assert len(inner.requests) == 1
    c = run_sync(model.request(ChatRequest.user("another question")))
    assert c.text == "second" and not c.cached
    assert model.stats()["hits"] == 1 and model.stats()["entries"] == 2


def test_cache_survives_a_new_process_view_of_the_same_file(tmp_path: Path) -> None:
    with ChatCacheDB(tmp_path / "c.sqlite") as d1:
        run_sync(Cached(TestModel(["kept"]), d1).request(ChatRequest.user("q")))
    with ChatCacheDB(tmp_path / "c.sqlite") as d2:
        again = run_sync(Cached(TestModel(["fresh"]), d2).request(ChatRequest.user("q")))
    assert again.text == "kept" and again.cached


def test_cache_ttl_expires_entries(db: ChatCacheDB) -> None:
    clock = Clock()
    inner = TestModel(["old", "new"])
    model = Cached(inner, db, ttl_s=60, clock=clock)
    run_sync(model.request(ChatRequest.user("q")))
    clock.t += 59
    assert run_sync(model.request(ChatRequest.user("q"))).text == "old"
    clock.t += 2  # 61 s after it was stored
    fresh = run_sync(model.request(ChatRequest.user("q")))
    assert fresh.text == "new" and not fresh.cached
    assert len(inner.requests) == 2


def test_cache_size_cap_evicts_least_recently_used(db: ChatCacheDB) -> None:
    clock = Clock()
    model = Cached(TestModel(["a", "b", "c", "a2"]), db, max_entries=2, clock=clock)
    for q in ("qa", "qb"):
        run_sync(model.request(ChatRequest.user(q)))
        clock.t += 1
    assert run_sync(model.request(ChatRequest.user("qa"))).cached  # qa is now the most recent
    clock.t += 1
    run_sync(model.request(ChatRequest.user("qc")))  # evicts qb, the least recently used
    with db.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(chat_cache)).scalar_one() == 2
    assert run_sync(model.request(ChatRequest.user("qa"))).cached
    assert not run_sync(model.request(ChatRequest.user("qb"))).cached


def test_cache_byte_cap(db: ChatCacheDB) -> None:
    clock = Clock()
    model = Cached(TestModel(["x" * 300, "y" * 300, "z" * 300]), db, max_entries=None, max_bytes=None, clock=clock)
    run_sync(model.request(ChatRequest.user("q1")))
    one = model.stats()["bytes"]
    model.max_bytes = int(2.5 * one)  # room for two entries of this size, not three
    for q in ("q2", "q3"):
        clock.t += 1
        run_sync(model.request(ChatRequest.user(q)))
    stats = model.stats()
    assert stats["entries"] == 2 and stats["bytes"] <= model.max_bytes
    assert run_sync(model.request(ChatRequest.user("q3"))).cached
    assert not run_sync(model.request(ChatRequest.user("q1"))).cached


def test_cached_structured_output_is_revalidated(db: ChatCacheDB) -> None:
    model = Cached(TestModel(['{"text": "hi"}']), db)
    run_sync(model.request(ChatRequest.user("q", output_type=Answer)))
    hit = run_sync(model.request(ChatRequest.user("q", output_type=Answer)))
    assert hit.cached and hit.parsed == Answer(text="hi")


def test_a_broken_cache_costs_a_miss_not_the_call(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = ChatCacheDB(tmp_path / "broken.sqlite")
    model = Cached(TestModel(["first", "second"]), d)
    with d.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE chat_cache")
    assert run_sync(model.request(ChatRequest.user("q"))).text == "first"
    assert run_sync(model.request(ChatRequest.user("q"))).text == "second"  # nothing could be cached
    assert model.errors == 4 and "chat cache" in caplog.text
    d.close()


def test_failures_are_not_cached(db: ChatCacheDB) -> None:
    inner = TestModel(["bad", "worse", '{"text": "ok"}'])
    model = Cached(inner, db)
    with pytest.raises(StructuredOutputError):
        run_sync(model.request(ChatRequest.user("q", output_type=Answer)))
    assert run_sync(model.request(ChatRequest.user("q", output_type=Answer))).parsed == Answer(text="ok")


class FailingSink:
    def record(self, call: CallRecord) -> object:
        raise RuntimeError("database is down")


def _logged(inner: ChatModel, sink: CallSink, **kw: Any) -> Logged:
    return Logged(inner, sink, prices=kw.pop("prices", PriceTable({"test:*": Price(1.0, 2.0)})), **kw)


def test_every_call_is_logged_with_its_scope_tokens_latency_and_cost(db: ChatCacheDB) -> None:
    sink = MemorySink()
    inner = TestModel([_resp("a"), _resp("b")])
    model = _logged(Cached(inner, db), sink, purpose=CallPurpose.ANSWER)
    with call_scope(run_id="run-1"):
        run_sync(model.request(ChatRequest.user("q1")))
        with call_scope(step="generate"):
            run_sync(model.request(ChatRequest.user("q1")))  # a cache hit: logged, not charged
    with call_scope(answer_id="a" * 32, run_id="job-7", purpose=CallPurpose.LLM_JUDGE):
        run_sync(model.request(ChatRequest.user("q2")))
    run_sync(model.request(ChatRequest.user("q3", run_id="explicit")))
    rows = sink.calls
    assert [(r.run_id, r.answer_id, r.purpose, r.step, r.response, r.cached) for r in rows] == [
        ("run-1", None, "answer", None, "a", False),
        ("run-1", None, "answer", "generate", "a", True),
        ("job-7", "a" * 32, "llm_judge", None, "b", False),
        ("explicit", None, "answer", None, rows[3].response, False),
    ]
    assert rows[0].prompt_tokens == 10 and rows[0].completion_tokens == 5
    assert rows[0].latency_ms == 1234.5 and rows[1].latency_ms == 1234.5
    assert rows[0].prompt == [{"role": "user", "content": "q1"}] and rows[0].model == "test:scripted"
    assert rows[0].cost_usd == pytest.approx((10 * 1.0 + 5 * 2.0) / 1e6)
    assert rows[1].cost_usd == 0.0
    assert current_scope().run_id is None  # every scope was left


def test_a_call_outside_any_scope_is_marked_unattributed() -> None:
    sink = MemorySink()
    run_sync(_logged(TestModel(["x"]), sink).request(ChatRequest.user("q")))
    assert sink.calls[0].purpose == CallPurpose.UNATTRIBUTED and sink.calls[0].run_id is None


def test_failed_calls_are_logged_with_their_error_and_spent_tokens() -> None:
    sink = MemorySink()
    model = _logged(TestModel(["nope", "nope again"]), sink, prices=PriceTable({}))
    with pytest.raises(StructuredOutputError):
        run_sync(model.request(ChatRequest.user("q", output_type=Answer)))
    (row,) = sink.calls
    assert row.error is not None and row.error.startswith("StructuredOutputError")
    assert row.response == "nope again" and row.completion_tokens > 0
    assert row.cost_usd is None  # no price known


def test_streams_are_logged_when_they_end() -> None:
    sink = MemorySink()
    model = _logged(TestModel(["one two three"]), sink)

    async def consume() -> str:
        with call_scope(run_id="s"):
            return "".join([p async for p in model.stream(ChatRequest.user("q"))])

    assert run_sync(consume()) == "one two three"
    (row,) = sink.calls
    assert row.response == "one two three" and row.error is None and row.run_id == "s"


def test_a_log_write_that_fails_never_fails_the_call(caplog: pytest.LogCaptureFixture) -> None:
    model = _logged(TestModel(["still answered"]), FailingSink())
    assert run_sync(model.request(ChatRequest.user("q"))).text == "still answered"
    assert model.failed_writes == 1
    assert "not logged" in caplog.text


def test_scopes_follow_tasks_threads_and_run_sync() -> None:
    """The graph runs nodes as tasks and scorers in threads; a scope set above them must reach the log."""
    sink = MemorySink()
    model = _logged(TestModel(["t", "th", "rs"]), sink)

    async def main() -> None:
        with call_scope(run_id="outer", purpose=CallPurpose.DIAGNOSIS):
            await asyncio.create_task(model.request(ChatRequest.user("task")))
            await asyncio.to_thread(lambda: run_sync(model.request(ChatRequest.user("thread"))))
            run_sync(model.request(ChatRequest.user("nested loop")))  # inside a running loop: a worker thread

    asyncio.run(main())
    assert [(r.run_id, r.purpose) for r in sink.calls] == [("outer", "diagnosis")] * 3


def test_scopes_do_not_leak_between_concurrent_tasks() -> None:
    sink = MemorySink()
    model = _logged(TestModel(["x"] * 20), sink)

    async def one(i: int) -> None:
        with call_scope(run_id=f"r{i}"):
            await asyncio.sleep(0.001 * (i % 3))
            await model.request(ChatRequest.user(f"q{i}"))

    async def main() -> None:
        await asyncio.gather(*(one(i) for i in range(10)))

    asyncio.run(main())
    assert sorted((r.run_id, r.prompt[0]["content"]) for r in sink.calls) == sorted(
        (f"r{i}", f"q{i}") for i in range(10)
    )


def test_leaving_a_scope_in_another_context_is_harmless() -> None:
    """An async generator finalised elsewhere exits its `with call_scope` in a foreign context."""
    cm = call_scope(run_id="gen")
    cm.__enter__()
    errors: list[BaseException] = []

    def leave() -> None:
        try:
            cm.__exit__(None, None, None)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=contextvars.Context().run, args=(leave,))
    t.start()
    t.join()
    assert errors == []


def test_price_table_lookup_order() -> None:
    table = PriceTable({"openai:a": Price(1, 1), "openai:*": Price(5, 5)})
    assert table.get("openai:a") == Price(1, 1)
    assert table.get("openai:b") == Price(5, 5)
    assert table.get("other:b") is None
    assert PriceTable().cost("local:smollm2-135m", Usage(prompt_tokens=100)) == 0.0


def test_price_table_from_env_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "prices.json"
    path.write_text('{"openai:custom": [3, 4]}')
    monkeypatch.setenv("RAGLOOP_MODEL_PRICES", str(path))
    table = PriceTable.from_env()
    assert table.get("openai:custom") == Price(3.0, 4.0)
    assert table.get("openai:gpt-4o-mini") is not None  # defaults kept


def test_wrap_stacks_the_layers_in_order(tmp_path: Path) -> None:
    sink = MemorySink()
    with ChatCacheDB(tmp_path / "w.sqlite") as d:
        model = wrap(TestModel(["x"]), cache_db=d, rpm=60, sink=sink, purpose=CallPurpose.LLM_JUDGE)
        assert isinstance(model, Logged)
        assert isinstance(model.inner, Cached)
        assert isinstance(model.inner.inner, Retrying)
        assert isinstance(model.inner.inner.inner, RateLimited)
        assert run_sync(model.request(ChatRequest.user("q"))).text == "x"
    assert [(c.purpose, c.response) for c in sink.calls] == [("llm_judge", "x")]


def test_wrap_without_a_sink_logs_nothing_and_opens_and_closes_its_cache(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home")
    model = wrap(TestModel(["y"]), settings=settings, max_attempts=1)
    assert isinstance(model, Cached) and model.close_db

    async def use() -> str:
        async with model:
            return (await model.request(ChatRequest.user("q"))).text

    assert run_sync(use()) == "y"
    assert (settings.home / "cache" / "chat.sqlite").exists()
    assert not (settings.home / "models.sqlite").exists()


def test_make_wrapped_is_what_production_factories_use(tmp_path: Path) -> None:
    sink = MemorySink()
    model = make_wrapped("test:echo", Settings(home=tmp_path), sink=sink)
    assert isinstance(model, Logged) and model.name == "test:echo"
    assert run_sync(model.request(ChatRequest.user("hello"))).text == "hello"
    assert sink.calls[0].response == "hello"


def test_call_purposes_of_the_tiers_are_the_tier_names() -> None:
    from ragloop.store.vocabulary import Tier

    assert CallPurpose.HEURISTIC == Tier.HEURISTIC
    assert CallPurpose.LLM_JUDGE == Tier.LLM_JUDGE
    assert CallPurpose.DIAGNOSIS == Tier.DIAGNOSIS
