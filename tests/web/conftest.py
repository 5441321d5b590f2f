"""Fixtures for the page tests: the service fixtures (a tiny hashed-embedder collection, a store) for
in-process checks, and for the browser tests a real `ragloop serve` on 127.0.0.1 with headless
Chromium (Debian's `/usr/bin/chromium`, driven by Playwright's own driver; never a downloaded browser).

One server and one browser per module (start-up is most of the cost); every test opens its own page
in a fresh browser context, so session storage, keys and conversations never leak between tests.
Under CI=true a missing Chromium or Playwright fails the run instead of skipping it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from ragloop.config import PipelineConfig, Settings
from ragloop.retrieval.collection import Collection
from ragloop.service.pipelines import ensure_active_version
from ragloop.store import Store
from tests.agent.conftest import DOCS
from tests.service.conftest import CFG, anyio_backend, collection, sqlite_url, store

__all__ = ["anyio_backend", "collection", "sqlite_url", "store"]

RAGLOOP = Path(sys.executable).parent / "ragloop"
REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("RAGLOOP_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = os.environ.get("RAGLOOP_UI_SCREENSHOTS", "")
"""A folder to save a screenshot of each page state in (`1`: benchmarks/results/ui)."""

# entity grounding on: a question naming what no passage mentions is refused (the shipped default)
WEB_CFG: PipelineConfig = CFG.with_overrides(agent={"entity_grounding": True})
# an older version the admin test rolls back to: the same answers, one more passage retrieved
OLD_CFG: PipelineConfig = WEB_CFG.with_overrides(retrieval={"k": WEB_CFG.retrieval.k + 1})

HOSTILE = "festival.md"
WEB_DOCS: dict[str, str] = {
    **DOCS,
    HOSTILE: (
        '# Lantern <b>festival</b> <img src=x onerror="window.__pwned=3">\n\n'
        "The lantern festival <script>window.__pwned = 1</script> is held every May in the harbour of Ostria. "
        '<img src=x onerror="window.__pwned=2"> Boats carry paper lanterns.\n'
    ),
}


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _missing(what: str) -> None:
    message = f"{what}: the browser tests need it (.ci/run installs chromium with apt; playwright is in the dev extra)"
    if _ci():
        pytest.fail(message)
    pytest.skip(message)


@dataclass
class Served:
    base: str
    home: Path
    log: Path
    user: str
    admin: str
    db_url: str

    def api(self, method: str, path: str, key: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"}
        return httpx.request(method, self.base + path, headers=headers, timeout=60, **kwargs)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("RAGLOOP_DATABASE_URL", None)
    env.update(
        RAGLOOP_HOME=str(home),
        RAGLOOP_BLOCK_REAL_CALLS="1",
        RAGLOOP_JUDGE="lexical",
        RAGLOOP_HEURISTIC_SUPPORT="lexical",
        RAGLOOP_TIER2_SAMPLE_RATE="0",
        RAGLOOP_POLL_INTERVAL_S="0.1",
        HF_HUB_OFFLINE="1",
    )
    return env


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`ragloop serve` over the tiny collection plus a document full of markup, with a user and an
    admin key, and an older pipeline version to roll back to."""
    root = tmp_path_factory.mktemp("web")
    home = root / "home"
    docs = root / "docs"
    for rel, text in WEB_DOCS.items():
        (docs / rel).parent.mkdir(parents=True, exist_ok=True)
        (docs / rel).write_text(text)
    coll = Collection("default", Settings(home=home))
    try:
        coll.ingest([docs], WEB_CFG)
    finally:
        coll.close()
    db_url = f"sqlite:///{home / 'ragloop.db'}"
    with Store.open(db_url) as st:
        ensure_active_version(st, OLD_CFG, actor="tests")
        user = st.api_keys.create_api_key("user", name="web-user", rate_limit_per_minute=10_000).key
        admin = st.api_keys.create_api_key("admin", name="web-admin", rate_limit_per_minute=10_000).key
    cfg = root / "pipeline.yaml"
    cfg.write_text(yaml.safe_dump(WEB_CFG.model_dump(mode="json", by_alias=True)))
    port = _free_port()
    log_path = root / "server.log"
    log = log_path.open("w")
    proc = subprocess.Popen(
        [str(RAGLOOP), "serve", "--host", "127.0.0.1", "--port", str(port), "--config", str(cfg)],
        cwd=REPO,
        env=_env(home),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"ragloop serve exited {proc.returncode}: {log_path.read_text()[-2000:]}")
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("ragloop serve did not become healthy in 90 s")
            time.sleep(0.2)
        yield Served(base, home, log_path, user, admin, db_url)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists() and not shutil.which(str(CHROMIUM)):
        _missing(f"no Chromium at {CHROMIUM}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("Playwright for Python is not installed")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=60_000)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any, served: Served) -> Iterator[Any]:
    """A page in its own context (own session storage); JavaScript errors fail the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 860}, base_url=served.base)
    context.set_default_timeout(20_000)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield pg
    finally:
        context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def shot(page: Any, name: str, *, full_page: bool = False, element: Any = None) -> None:
    """Save a screenshot of the page's current state (or of one element of it) when
    RAGLOOP_UI_SCREENSHOTS is set."""
    if not SCREENSHOTS:
        return
    folder = REPO / "benchmarks" / "results" / "ui" if SCREENSHOTS == "1" else Path(SCREENSHOTS)
    folder.mkdir(parents=True, exist_ok=True)
    path = str(folder / f"{name}.png")
    # the question box sticks to the viewport's bottom: in a picture taller than the viewport it
    # would sit over the middle of it
    sticky = "document.querySelectorAll('.ask').forEach((e) => { e.style.position = %s; })"
    page.evaluate(sticky % "'static'")
    try:
        if element is not None:
            element.screenshot(path=path, animations="disabled")
        else:
            page.screenshot(path=path, full_page=full_page, animations="disabled")
    finally:
        page.evaluate(sticky % "''")
