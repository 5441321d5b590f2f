"""Routes that serve the pages and their assets (`/`, `/admin`, `/ui/...`)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse, RedirectResponse

STATIC_DIR = Path(__file__).resolve().parent / "static"

MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
}

# Scripts, styles, fetches and images from this origin only; no inline script, no plugins, no framing.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


def _file(rel: str) -> FileResponse:
    path = (STATIC_DIR / rel).resolve()
    media = MEDIA_TYPES.get(path.suffix)
    if media is None or not path.is_relative_to(STATIC_DIR) or not path.is_file():
        raise HTTPException(404, "no such page")
    return FileResponse(path, media_type=media, headers=HEADERS)


@router.get("/")
def chat_page() -> FileResponse:
    return _file("index.html")


@router.get("/admin")
def admin_page() -> FileResponse:
    return _file("admin.html")


@router.get("/ui")
def ui_root() -> RedirectResponse:
    return RedirectResponse("/", status_code=307)


@router.get("/ui/{rel:path}")
def asset(rel: str) -> FileResponse:
    return _file(rel)
