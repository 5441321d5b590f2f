"""The web pages: a chat page at `/` and an admin page at `/admin`, static files shipped in this package.

No build step and no template engine: the pages are plain HTML, CSS and JavaScript modules that call
the JSON API with the key the user types in (kept in the tab's `sessionStorage`, sent as a bearer
header, never in a URL or a cookie, so there is nothing for a cross-site request to ride on). Every
asset is served from here (the machine may be offline: no CDN), and every response carries a
Content-Security-Policy that allows only this origin's scripts, styles and connections, so text that
slips into the page as markup still cannot run.

`router` is included by the service's app factory; the page routes stay out of the OpenAPI document.
"""

from __future__ import annotations

from ragloop.web.pages import STATIC_DIR, router

__all__ = ["STATIC_DIR", "router"]
