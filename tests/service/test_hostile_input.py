"""Hostile text at every route, on SQLite and on PostgreSQL: no 5xx and no lost write.

The operations come from the app's OpenAPI document, so a new route, parameter or body field is
probed without editing this file. Each text slot (every string position of a JSON body, every path
and query parameter, an upload's file name) gets every hostile string in turn, the rest of the
request staying valid; bodies with a `stream` flag are sent both ways. A response passes when it is
under 500, carries no error event inside a 2xx stream, and every id a 2xx write hands back (answer,
feedback, evaluation, key, job, pipeline version) is readable afterwards: the answer is polled
briefly, because answers may be stored just after the response.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from sqlalchemy import select

from ragloop.retrieval.collection import Collection
from ragloop.store import Store, UserFeedback
from tests.service.conftest import CFG, build_app, make_keys, open_store

pytestmark = pytest.mark.anyio

Q = "When was the Zorblat Bridge completed?"
HOSTILE: dict[str, str] = {
    "nul": "When was the Zorblat\x00 Bridge completed?",
    "nul-only": "\x00",
    "c0": "Zorblat\x01\x08\x0b\x0c\x1b[31m Bridge\x7f",
    "c0-at-ends": "\x1fZorblat\x1c",
    "c1": "Zorblat\x85\x9b Bridge",
    "lone-high": "Zorblat \ud800 Bridge",
    "lone-low": "\udc80",
    "bidi-override": "Zorblat \u202eegdirB\u202c completed?",
    "bidi-isolate": "\u2066Zorblat\u2069 Bridge",
    "too-long": "Zorblat Bridge " * 400,
    "huge-token": "x" * 100_000,
    "sql": "x'; DROP TABLE answers; --",
    "sql-or": "1' OR '1'='1",
    "traversal": "../../etc/passwd",
    "traversal-win": "..\\..\\windows\\win.ini",
    "nfd": "Cafe\u0301 near the Zorblat Bridge?",
    "compat": "\ufb01\u212b\uff21\u2460 Zorblat",
    "zero-width": "Zor\u200bblat\u200d\ufeff Bridge",
    "noncharacter": "Zorblat \uffff\ufffe",
    "astral": "\U0001d518\U0001d52b \U0001f309 Zorblat?",
    "empty": "",
    "blank": " \t\r\n ",
    "format": "%s%n{0}${x}\\u0000",
    "operator": '{"$ne": null}',
    "newlines": "Zorblat\r\nBridge\tcompleted?",
}
# percent-encoded as sent, for path and query slots only
RAW_URL: dict[str, str] = {
    "pct-nul": "%00",
    "pct-nul-mid": "a%00b",
    "pct-dotdot": "%2e%2e%2f",
    "pct-dotdot-deep": "..%2f..%2fetc%2fpasswd",
    "pct-bad-utf8": "%ff%fe",
    "pct-surrogate": "%ed%a0%80",
    "pct-overlong": "%c0%ae%c0%ae",
    "pct-crlf": "%0d%0aSet-Cookie:%20x=1",
    "pct-bidi": "%e2%80%aeabc",
}
URL_MAX = 6000
# reads first; deletions last (they remove the fixtures); a rollback after the other writes (it
# changes the pipeline that answers)
ORDER = {"GET": 0, "POST": 1, "DELETE": 3}
LAST_POSTS = ("/v1/pipeline/rollback",)


@dataclass
class Op:
    method: str
    path: str
    params: list[dict[str, Any]]
    body: dict[str, Any] | None
    multipart: bool

    @property
    def name(self) -> str:
        return f"{self.method} {self.path}"


def operations(app: FastAPI, spec: dict[str, Any]) -> list[Op]:
    """Every operation of the OpenAPI document, and the routes left out of it (the web pages) with
    their path parameters."""
    ops = []
    for route in iter_route_contexts(app.routes):
        if route.methods and route.path_format and not getattr(route, "include_in_schema", True):
            params = [{"name": name, "in": "path"} for name in re.findall(r"{(\w+)", route.path_format)]
            ops += [Op(m, route.path_format, params, None, False) for m in sorted(route.methods - {"HEAD"})]
    for path, item in spec["paths"].items():
        for method, op in item.items():
            content = op.get("requestBody", {}).get("content", {})
            body = content.get("application/json") or content.get("multipart/form-data")
            ops.append(
                Op(
                    method.upper(),
                    path,
                    op.get("parameters", []),
                    body["schema"] if body else None,
                    "multipart/form-data" in content,
                )
            )
    rank = {op.name: (ORDER.get(op.method, 2) + (op.path in LAST_POSTS), op.path) for op in ops}
    return sorted(ops, key=lambda op: rank[op.name])


class Sampler:
    """A valid value for a JSON schema (hints by property name), and the paths of its text slots."""

    def __init__(self, spec: dict[str, Any], hints: dict[str, Any]) -> None:
        self.spec = spec
        self.hints = hints

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            schema = self.spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
        return schema

    def admits_text(self, schema: dict[str, Any]) -> bool:
        options = [self.resolve(o) for o in self.resolve(schema).get("anyOf", [schema])]
        return any(o.get("type") == "string" and o.get("format") != "binary" for o in options)

    def body(self, schema: dict[str, Any], minimal: bool) -> tuple[Any, list[tuple[Any, ...]]]:
        """A fresh valid body (hints are re-read: some depend on the state) and its text slots; the
        minimal body has only the required properties."""
        slots: list[tuple[Any, ...]] = []
        return self.sample(schema, "body", (), slots, minimal), slots

    def sample(
        self, schema: dict[str, Any], name: str, at: tuple[Any, ...], slots: list[tuple[Any, ...]], minimal: bool
    ) -> Any:
        schema = self.resolve(schema)
        if self.admits_text(schema):
            slots.append(at)
        if name in self.hints:
            hint = self.hints[name]
            return copy.deepcopy(hint() if callable(hint) else hint)
        if "anyOf" in schema:
            options = [self.resolve(o) for o in schema["anyOf"] if o.get("type") != "null"]
            return self.sample(options[0], name, at, [], minimal)
        if "enum" in schema:
            return schema["enum"][0]
        if "const" in schema:
            return schema["const"]
        kind = str(schema.get("type"))
        if kind == "object":
            props = schema.get("properties", {})
            if minimal and not at:  # required properties only, at the top
                props = {k: v for k, v in props.items() if k in schema.get("required", ())}
            return {k: self.sample(v, k, (*at, k), slots, minimal) for k, v in props.items()}
        if kind == "array":
            return [self.sample(schema.get("items", {}), name, (*at, 0), slots, minimal)]
        return {"string": "hello", "integer": schema.get("minimum", 1), "number": 0.5, "boolean": False}.get(kind)


def put(value: Any, at: tuple[Any, ...], new: Any) -> Any:
    out = copy.deepcopy(value)
    target = out
    for key in at[:-1]:
        target = target[key]
    target[at[-1]] = new
    return out


@dataclass
class Probe:
    client: httpx.AsyncClient
    store: Store
    headers: dict[str, str]
    failures: list[str] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    sent: int = 0

    async def send(self, op: Op, label: str, path: dict[str, str], query: str, body: Any, filename: str) -> None:
        url = op.path
        for k, v in path.items():
            url = url.replace("{" + k + "}", v)
        if query:
            url += "?" + query
        where = f"{op.name} [{label}]"
        self.sent += 1
        try:
            if op.multipart:
                files = [("files", (filename, b"# Hostile\n\nA scratch file about a Zorblat tram.\n", "text/markdown"))]
                r = await self.client.request(op.method, url, files=files, headers=self.headers)
            elif body is not None:
                content = json.dumps(body).encode()  # ensure_ascii: lone surrogates travel as \udXXX escapes
                headers = {**self.headers, "Content-Type": "application/json"}
                r = await self.client.request(op.method, url, content=content, headers=headers)
            else:
                r = await self.client.request(op.method, url, headers=self.headers)
        except Exception as exc:
            self.failures.append(f"{where}: the request raised {type(exc).__name__}: {exc}"[:300])
            return
        self.statuses[r.status_code] += 1
        if r.status_code >= 500:
            self.failures.append(f"{where}: {r.status_code} {r.text[:200]}")
        elif r.status_code < 300 and op.method != "GET":
            await self.read_back(where, r)

    async def read_back(self, where: str, r: httpx.Response) -> None:
        if r.headers.get("content-type", "").startswith("text/event-stream"):
            payloads = []
            for line in r.text.splitlines():
                if line.startswith("event: error"):
                    self.failures.append(f"{where}: 200 stream with an error event: {r.text[-200:]}")
                if line.startswith("data: {"):
                    payloads.append(json.loads(line[6:]))
            for p in payloads:
                if "error" in p:
                    self.failures.append(f"{where}: 200 stream with an error: {p['error']}")
                await self.check_ids(where, p)
        elif r.content:
            await self.check_ids(where, r.json())

    async def check_ids(self, where: str, data: Any) -> None:
        if not isinstance(data, dict):
            return
        for nested in ("ragloop",):
            if isinstance(data.get(nested), dict):
                await self.check_ids(where, data[nested])
        if (aid := data.get("answer_id")) and not await self.readable(f"/v1/answers/{aid}"):
            self.failures.append(f"{where}: lost write, answer {aid} is not readable")
        if (jid := data.get("job_id")) and not await self.readable(f"/v1/jobs/{jid}"):
            self.failures.append(f"{where}: lost write, job {jid} is not readable")
        if (eid := data.get("eval_id")) and eid not in (await self.get(f"/v1/evaluations/{data['answer_id']}")).text:
            self.failures.append(f"{where}: lost write, evaluation {eid} is not readable")
        if (kid := data.get("key_id")) and data.get("key") and kid not in (await self.get("/v1/keys")).text:
            self.failures.append(f"{where}: lost write, key {kid} is not listed")
        if (fid := data.get("feedback_id")) and not self.feedback_stored(fid):
            self.failures.append(f"{where}: lost write, feedback {fid} is not stored")
        if "config" in data and (await self.get("/v1/pipeline/current")).json().get("version") != data["version"]:
            self.failures.append(f"{where}: lost write, pipeline {data['version']} is not current")

    async def get(self, url: str) -> httpx.Response:
        return await self.client.get(url, headers=self.headers)

    async def readable(self, url: str, wait_s: float = 5.0) -> bool:
        deadline = time.monotonic() + wait_s
        while True:
            if (await self.get(url)).status_code == 200:
                return True
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.1)

    def feedback_stored(self, feedback_id: str) -> bool:
        with self.store.db.transaction(write=False) as s:
            return s.scalar(select(UserFeedback.feedback_id).where(UserFeedback.feedback_id == feedback_id)) is not None


def url_safe(values: dict[str, str]) -> dict[str, str]:
    """The values a URL or a multipart header can carry: not too long, and encodable as UTF-8 (a lone
    surrogate has no UTF-8 form; RAW_URL sends its would-be bytes instead)."""
    return {k: v for k, v in values.items() if len(v) <= URL_MAX and not any("\ud800" <= ch <= "\udfff" for ch in v)}


def url_values() -> dict[str, str]:
    """Hostile values as they appear in a URL: percent-encoded text, then raw encodings."""
    return {**{k: quote(v, safe="") for k, v in url_safe(HOSTILE).items()}, **RAW_URL}


async def probe_operation(probe: Probe, op: Op, sampler: Sampler, path_hints: dict[str, Any]) -> None:
    path_names = [p["name"] for p in op.params if p["in"] == "path"]
    query_names = [p["name"] for p in op.params if p["in"] == "query"]

    def path_values(**raw: str) -> dict[str, str]:
        hints = {k: path_hints.get(k, "hello") for k in path_names}
        return {k: quote(str(h() if callable(h) else h), safe="") for k, h in hints.items()} | raw

    def body(minimal: bool = False, stream: bool = False) -> Any:
        if op.body is None or op.multipart:
            return None
        value = sampler.body(op.body, minimal)[0]
        return value | {"stream": True} if stream else value

    if op.body is not None and not op.multipart:
        full, required = sampler.body(op.body, False)[1], sampler.body(op.body, True)[1]
        # the body with every property, then with only the required ones (when that differs: e.g. a
        # stateless chat completion), each also streamed when it can be (errors and ids then travel
        # inside a 200)
        shapes = [(False, at) for at in full] + ([(True, at) for at in required] if required != full else [])
        streams = [False, True] if "stream" in body() else [False]
        for stream in streams:
            for minimal, at in shapes:
                where = f"body{'(required)' if minimal else ''}.{'.'.join(map(str, at))}"
                for label, text in HOSTILE.items():
                    value = put(body(minimal, stream), at, text)
                    await probe.send(op, f"{where}={label} stream={stream}", path_values(), "", value, "")
    for name in path_names:
        for label, raw in url_values().items():
            await probe.send(op, f"path.{name}={label}", path_values(**{name: raw}), "", body(), "hostile.md")
    for name in query_names:
        for label, raw in url_values().items():
            await probe.send(op, f"query.{name}={label}", path_values(), f"{name}={raw}", body(), "hostile.md")
    for label in ("pct-nul", "pct-bidi"):  # a parameter the route does not declare is checked too
        await probe.send(op, f"query.undeclared={label}", path_values(), f"x={RAW_URL[label]}", body(), "hostile.md")
    if op.multipart:
        for label, text in url_safe(HOSTILE).items():
            await probe.send(op, f"files.filename={label}", path_values(), "", None, text)


@asynccontextmanager
async def client_for(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """Like conftest's `running`, but an unhandled error comes back as the 500 a client would see."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://ragloop.test", timeout=60) as client:
            yield client


async def test_hostile_text_at_every_route_is_never_a_5xx_or_a_lost_write(
    collection: Collection, store_url: str
) -> None:
    store = open_store(store_url)
    try:
        other = store.pipelines.register_config(CFG.with_overrides(retrieval={"k": 4}))
        store.pipelines.activate(other.version_id, actor="test", reason="a version to roll back to")
        keys = make_keys(store)
        spare = store.api_keys.create_api_key("user", name="spare").record.key_id
        app = build_app(store)
        async with client_for(app) as c:
            admin = keys.a
            r = await c.post("/v1/query", json={"question": Q, "session_id": "s-hostile"}, headers=admin)
            assert r.status_code == 200, r.text
            answer_id = r.json()["answer_id"]
            files = [("files", ("hello.md", b"# Hello\n\nThe Zorblat tram is green.\n", "text/markdown"))]
            r = await c.post("/v1/collections/scratch/documents", files=files, headers=admin)
            assert r.status_code == 202, r.text
            job_id = r.json()["job_id"]

            def not_current() -> str:
                current = store.pipelines.current()
                assert current is not None
                return other.version_id if current.version_id != other.version_id else CFG.version_id

            spec = app.openapi()
            sampler = Sampler(
                spec,
                {
                    "question": Q,
                    "content": Q,
                    "session_id": "s-hostile",
                    "user": "u-hostile",
                    "collection": "default",
                    "model": "ragloop",
                    "role": "user",
                    "name": "hostile",
                    "target_version": not_current,
                },
            )
            path_hints: dict[str, Any] = {
                "answer_id": answer_id,
                "session_id": "s-hostile",
                "name": "scratch",
                "doc_id": "hello.md",
                "job_id": job_id,
                "key_id": spare,
            }
            probe = Probe(c, store, admin)
            t0 = time.perf_counter()
            ops = operations(app, spec)
            for op in ops:
                await probe_operation(probe, op, sampler, path_hints)
            elapsed = time.perf_counter() - t0
        print(f"{probe.sent} requests over {len(ops)} operations in {elapsed:.1f}s: {dict(probe.statuses)}")
        assert len(ops) >= 20 and probe.sent > 1000
        assert not probe.failures, f"{len(probe.failures)} failures:\n" + "\n".join(probe.failures[:80])
    finally:
        store.close()
