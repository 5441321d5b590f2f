"""Response cache, call log and usage ledger on a real SQLite file."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel
from sqlalchemy import func, inspect, select

from ragloop.config.settings import Settings
from ragloop.models.chat import (
    Cached,
    ChatRequest,
    ChatResponse,
    Logged,
    ModelsDB,
    Price,
    PriceTable,
    TestModel,
    Usage,
    call_rows,
    ledger_rows,
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
def db(tmp_path: Path) -> Iterator[ModelsDB]:
    with ModelsDB(tmp_path / "models.sqlite") as d:
        yield d


def _resp(text: str, latency_ms: float = 1234.5) -> ChatResponse:
    return ChatResponse(
        text=text,
        model="test:scripted",
        usage=Usage(prompt_tokens=10, completion_tokens=5),
        latency_ms=latency_ms,
    )


def test_tables_are_created_idempotently(tmp_path: Path) -> None:
    for _ in range(2):
        with ModelsDB(tmp_path / "m.sqlite") as d:
            names = set(inspect(d.engine).get_table_names())
    assert {"chat_cache", "chat_calls", "usage_ledger"} <= names
    with ModelsDB.for_settings(Settings(home=tmp_path / "home")) as d:
        assert d.path == tmp_path / "home" / "models.sqlite" and d.path.exists()


def test_cache_hit_is_marked_and_keeps_the_original_latency(db: ModelsDB) -> None:
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
    with ModelsDB(tmp_path / "c.sqlite") as d1:
        run_sync(Cached(TestModel(["kept"]), d1).request(ChatRequest.user("q")))
    with ModelsDB(tmp_path / "c.sqlite") as d2:
        again = run_sync(Cached(TestModel(["fresh"]), d2).request(ChatRequest.user("q")))
    assert again.text == "kept" and again.cached


def test_cache_ttl_expires_entries(db: ModelsDB) -> None:
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


def test_cache_size_cap_evicts_least_recently_used(db: ModelsDB) -> None:
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


def test_cache_byte_cap(db: ModelsDB) -> None:
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


def test_cached_structured_output_is_revalidated(db: ModelsDB) -> None:
    model = Cached(TestModel(['{"text": "hi"}']), db)
    run_sync(model.request(ChatRequest.user("q", output_type=Answer)))
    hit = run_sync(model.request(ChatRequest.user("q", output_type=Answer)))
    assert hit.cached and hit.parsed == Answer(text="hi")


def test_failures_are_not_cached(db: ModelsDB) -> None:
    inner = TestModel(["bad", "worse", '{"text": "ok"}'])
    model = Cached(inner, db)
    with pytest.raises(StructuredOutputError):
        run_sync(model.request(ChatRequest.user("q", output_type=Answer)))
    assert run_sync(model.request(ChatRequest.user("q", output_type=Answer))).parsed == Answer(text="ok")


def test_call_log_and_ledger_rows(db: ModelsDB) -> None:
    clock = Clock(dt.datetime(2026, 11, 29, 12, tzinfo=dt.UTC).timestamp())
    prices = PriceTable({"test:*": Price(1.0, 2.0)})
    inner = TestModel([_resp("a"), _resp("b")])
    model = Logged(Cached(inner, db), db, run_id="run-1", prices=prices, clock=clock)
    run_sync(model.request(ChatRequest.user("q1")))
    run_sync(model.request(ChatRequest.user("q1")))  # a cache hit: logged, not charged
    run_sync(model.request(ChatRequest.user("q2", run_id="run-2")))
    rows = call_rows(db)
    assert [(r["run_id"], r["response"], r["cached"]) for r in rows] == [
        ("run-1", "a", False),
        ("run-1", "a", True),
        ("run-2", "b", False),
    ]
    assert rows[0]["prompt_tokens"] == 10 and rows[0]["completion_tokens"] == 5
    assert rows[0]["latency_ms"] == 1234.5 and rows[1]["latency_ms"] == 1234.5
    assert '"q1"' in rows[0]["prompt"] and rows[0]["model"] == "test:scripted"
    assert rows[0]["cost_usd"] == pytest.approx((10 * 1.0 + 5 * 2.0) / 1e6)
    assert rows[1]["cost_usd"] == 0.0
    assert [r["run_id"] for r in call_rows(db, run_id="run-2")] == ["run-2"]
    (ledger,) = ledger_rows(db)
    assert ledger["day"] == "2026-11-29" and ledger["model"] == "test:scripted"
    assert (ledger["requests"], ledger["prompt_tokens"], ledger["completion_tokens"]) == (2, 20, 10)
    assert ledger["cost_usd"] == pytest.approx(2 * 20 / 1e6)
    clock.t += 86400
    run_sync(model.request(ChatRequest.user("q3")))
    assert [r["day"] for r in ledger_rows(db)] == ["2026-11-30", "2026-11-29"]


def test_failed_calls_are_logged_with_their_error_and_spent_tokens(db: ModelsDB) -> None:
    model = Logged(TestModel(["nope", "nope again"]), db, prices=PriceTable({}))
    with pytest.raises(StructuredOutputError):
        run_sync(model.request(ChatRequest.user("q", output_type=Answer)))
    (row,) = call_rows(db)
    assert row["error"].startswith("StructuredOutputError")
    assert row["response"] == "nope again" and row["completion_tokens"] > 0
    assert row["cost_usd"] is None  # no price known
    (ledger,) = ledger_rows(db)
    assert ledger["unpriced_requests"] == 1 and ledger["prompt_tokens"] == row["prompt_tokens"]


def test_streams_are_logged_when_they_end(db: ModelsDB) -> None:
    model = Logged(TestModel(["one two three"]), db)

    async def consume() -> str:
        return "".join([p async for p in model.stream(ChatRequest.user("q"))])

    assert run_sync(consume()) == "one two three"
    (row,) = call_rows(db)
    assert row["response"] == "one two three" and row["error"] is None


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
    with ModelsDB(tmp_path / "w.sqlite") as d:
        model = wrap(TestModel(["x"]), db=d, rpm=60, run_id="r")
        assert isinstance(model, Logged)
        assert isinstance(model.inner, Cached)
        assert isinstance(model.inner.inner, Retrying)
        assert isinstance(model.inner.inner.inner, RateLimited)
        assert run_sync(model.request(ChatRequest.user("q"))).text == "x"
        assert call_rows(d)[0]["run_id"] == "r"


def test_wrap_opens_and_closes_its_own_database(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home")
    model = wrap(TestModel(["x"]), settings=settings, max_attempts=1)
    assert isinstance(model, Logged) and model.close_db

    async def use() -> str:
        async with model:
            return (await model.request(ChatRequest.user("q"))).text

    assert run_sync(use()) == "x"
    with ModelsDB.for_settings(settings) as d:
        assert [r["response"] for r in call_rows(d)] == ["x"]
    cache_only = wrap(TestModel(["y"]), settings=settings, log=False)
    assert isinstance(cache_only, Cached) and cache_only.close_db
    run_sync(cache_only.aclose())
