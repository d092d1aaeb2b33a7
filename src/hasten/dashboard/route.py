"""``GET /dashboard`` and ``GET /dashboard/data``: the page, its feed, and who may see them.

The page is read once, at startup, from the package (``page.html``: no CDN, no build
step); its inline script and style are allowed by their hashes in a strict
Content-Security-Policy, so nothing else can run on it or be loaded from anywhere.

Who may look: with an admin key configured, only its holder, as a Bearer token or as the
password of HTTP Basic. A browser cannot add a header to a navigation, so a 401 here asks
for Basic credentials: the browser prompts once and sends them again on the page's
same-origin fetches, and the key never appears in a URL. With gateway keys but no admin
key nobody may (the page shows every tenant's traffic); with no keys at all it is open, as
``/stats`` is.
"""

from __future__ import annotations

import base64
import hashlib
import re
import time
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING

import orjson

from hasten.auth import ADMIN_KEY_HINT, Authenticator
from hasten.dashboard.data import EngineStatus, TokenRate, build_snapshot
from hasten.dashboard.window import Completed, RollingWindow
from hasten.errors import AdminDisabled, CredentialsRequired, MethodNotAllowed
from hasten.wire.asgi import Scope, Send, header, send_json, send_response

if TYPE_CHECKING:
    from hasten.metrics.registry import EngineScrape
    from hasten.proxy.pipeline import Pipeline

PAGE_PATH = "/dashboard"
DATA_PATH = "/dashboard/data"
PATHS = frozenset({PAGE_PATH, DATA_PATH})
_NO_STORE = (
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)
_INLINE = re.compile(rb"<(script|style)>(.*?)</\1>", re.DOTALL)


def load_page() -> bytes:
    return resources.files("hasten.dashboard").joinpath("page.html").read_bytes()


def content_security_policy(page: bytes) -> bytes:
    """Only the page's own inline script and style (by hash) and fetches to itself."""
    hashes: dict[bytes, list[bytes]] = {b"script": [], b"style": []}
    for kind, body in _INLINE.findall(page):
        digest = base64.b64encode(hashlib.sha256(body).digest())
        hashes[kind].append(b"'sha256-" + digest + b"'")
    return b"; ".join(
        [
            b"default-src 'none'",
            b"script-src " + b" ".join(hashes[b"script"]),
            b"style-src " + b" ".join(hashes[b"style"]),
            b"connect-src 'self'",
            b"img-src 'self' data:",
            b"base-uri 'none'",
            b"form-action 'none'",
            b"frame-ancestors 'none'",
        ]
    )


class Dashboard:
    """The page, its headers and the rolling window; built once per gateway."""

    def __init__(
        self,
        window: RollingWindow,
        pipeline: Pipeline,
        auth: Authenticator,
        *,
        scrape: EngineScrape | None = None,
        engine: EngineStatus | None = None,
        clock: Callable[[], float] = time.monotonic,
        page: bytes | None = None,
        is_observing: bool = True,
    ) -> None:
        self.window = window
        self._pipeline, self._auth, self._scrape = pipeline, auth, scrape
        self.is_observing = is_observing  # False: nothing feeds the window
        self._engine = engine
        self._clock = clock
        self._page = page if page is not None else load_page()
        self._page_headers = [
            (b"content-type", b"text/html; charset=utf-8"),
            (b"content-security-policy", content_security_policy(self._page)),
            (b"x-frame-options", b"DENY"),
            *_NO_STORE,
        ]
        self._num_snapshots = 0
        self._token_rate = TokenRate()

    def observe(self, outcome: Completed) -> None:
        """The seam's observer: one finished request into the window."""
        self.window.observe(outcome, self._clock())

    async def handle(self, scope: Scope, send: Send) -> None:
        path: str = scope["path"]
        if scope["method"] not in ("GET", "HEAD"):
            raise MethodNotAllowed(
                f"{scope['method']} is not allowed on {path}; use GET", allow="GET, HEAD"
            )
        authorize(self._auth, scope)
        if path == PAGE_PATH:
            await send_response(send, 200, self._page, self._page_headers)
            return
        self._num_snapshots += 1
        scrape = self._scrape
        if scrape is not None and self._engine is not None:
            await scrape.sample_engine()  # the child's queue and counters, as /metrics has
        snapshot = build_snapshot(
            self._pipeline,
            self.window,
            self._engine,
            self._token_rate,
            now_s=self._clock(),
            wall_s=time.time(),
            scrape=scrape,
        )
        snapshot["snapshot"] = self._num_snapshots
        snapshot["is_observing"] = self.is_observing
        await send_json(send, 200, orjson.dumps(snapshot), _NO_STORE)


def authorize(auth: Authenticator, scope: Scope) -> None:
    """Returns for a caller who may see the dashboard; raises 401 or 403 otherwise."""
    if auth.has_admin_key:
        if not auth.is_admin_credential(header(scope, b"authorization")):
            raise CredentialsRequired(
                "the dashboard needs the admin key: sign in with it as the password "
                "(any user name), or send 'Authorization: Bearer <admin key>'"
            )
        return
    if auth.is_enforcing:
        raise AdminDisabled(
            "the dashboard shows every tenant's traffic and needs the admin key, and none "
            f"is configured. To enable it, {ADMIN_KEY_HINT}."
        )
