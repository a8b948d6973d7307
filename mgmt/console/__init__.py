"""The web console: a page at ``/`` over the REST API, its files under ``/console/``.

The page (``static/index.html``, ``static/console.js``, ``static/console.css``,
shipped as package data) is plain HTML, CSS and JavaScript: no build step and
nothing loaded from elsewhere, which its Content-Security-Policy enforces.  It
logs in with ``POST /service/login`` (the session cookie) and then talks to
``/api/latest`` with ``fetch``.  The files themselves need no login.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from litestar import MediaType, Request, Response, get
from litestar.handlers import BaseRouteHandler
from litestar.router import Router
from litestar.static_files import create_static_files_router

DIRECTORY = Path(__file__).resolve().parent / "static"
ASSETS_PATH = "/console"

#: the page may load only its own files and talk only to its own origin
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none';"
                               " base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    # a new broker version must not run with the previous version's script
    "Cache-Control": "no-cache",
}


async def _secure(response: Response[Any]) -> Response[Any]:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def route_handlers() -> list[BaseRouteHandler | Router]:
    """``GET /`` (the page) and ``/console/<file>`` (its script and style sheet)."""
    page = (DIRECTORY / "index.html").read_bytes()

    @get("/", include_in_schema=False, media_type=MediaType.HTML)
    async def console(request: Request[Any, Any, Any]) -> Response[bytes]:
        return Response(content=page, media_type=MediaType.HTML, headers=SECURITY_HEADERS)

    assets = create_static_files_router(path=ASSETS_PATH, directories=[DIRECTORY],
                                        name="console", after_request=_secure,
                                        include_in_schema=False)
    return [console, assets]
