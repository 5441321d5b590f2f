"""The pages and their assets, served by the app in-process: every asset local, strict security
headers, no page route in the OpenAPI document, nothing outside the static folder reachable."""

from __future__ import annotations

import re

import pytest

from ragloop.retrieval.collection import Collection
from ragloop.store import Store
from ragloop.web import STATIC_DIR
from tests.service.conftest import build_app, running

pytestmark = pytest.mark.anyio


async def test_pages_and_assets_are_served_locally(store: Store, collection: Collection) -> None:
    async with running(build_app(store)) as client:
        for path in ("/", "/admin"):
            resp = await client.get(path)
            assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html")
            html = resp.text
            assert "<html" in html.lower()
            csp = resp.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
            assert resp.headers["x-content-type-options"] == "nosniff"
            refs = re.findall(r'(?:src|href)\s*=\s*["\']([^"\']+)', html)
            assert refs and not [u for u in refs if re.match(r"(https?:)?//", u)]
            for ref in refs:
                if ref.startswith("/ui/"):
                    asset = await client.get(ref)
                    assert asset.status_code == 200, ref
        # every module a page imports is there, with a JavaScript media type (module scripts need one)
        for js in sorted((STATIC_DIR / "js").glob("*.js")):
            resp = await client.get(f"/ui/js/{js.name}")
            assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/javascript")
            for imported in re.findall(r'from "\./([\w.]+)"', resp.text):
                assert (STATIC_DIR / "js" / imported).is_file(), (js.name, imported)
        assert (await client.get("/ui", follow_redirects=False)).headers["location"] == "/"
        schema = (await client.get("/openapi.json")).json()
        assert "/" not in schema["paths"] and "/admin" not in schema["paths"]


async def test_nothing_outside_the_static_folder(store: Store, collection: Collection) -> None:
    async with running(build_app(store)) as client:
        for path in ("/ui/../pages.py", "/ui/%2e%2e/pages.py", "/ui/..%2fpages.py", "/ui/js", "/ui/nope.css"):
            assert (await client.get(path)).status_code == 404, path


def test_no_markup_is_built_from_data() -> None:
    """Text reaches the page as text nodes: no innerHTML, outerHTML, insertAdjacentHTML or document.write."""
    for js in (STATIC_DIR / "js").glob("*.js"):
        source = js.read_text()
        assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(", source), js.name
    for html in STATIC_DIR.glob("*.html"):
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html.read_text()), "inline script in " + html.name
