"""One client request on its way through the gateway: the pipeline's own record of it.

Only the request path writes it; the services it asks get values read from it and give
back what they decided (``hasten.proxy.ports``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hasten.apis.api import Api
from hasten.proxy.fronts import Front
from hasten.proxy.ports import NO_LIMIT, Limit
from hasten.proxy.track import ResponseTrack
from hasten.routing.models import ResolvedModel
from hasten.values.caller import Caller
from hasten.values.outcome import BYPASS
from hasten.values.previous import PreviousResponse
from hasten.values.stage import NO_STAGE, Stage
from hasten.wire.asgi import DisconnectWatcher, Headers, Scope, Send


@dataclass(slots=True)
class Exchange:
    """One client request on its way through the gateway."""

    scope: Scope
    send: Send
    api: Api
    body: dict[str, Any]
    raw_body: bytes  # as the client sent it; see _upstream_body
    model: ResolvedModel
    tenant: str
    is_stream: bool
    wants_usage: bool  # a stream with stream_options.include_usage
    started_s: float
    request_id: str
    extra_headers: tuple[tuple[bytes, bytes], ...] = ()
    # What goes upstream, built (and refused if it cannot be forwarded unchanged) up front.
    forwarded_headers: dict[str, str] = field(default_factory=dict)
    # A stored stream asks upstream for usage so the cache can serve it to anyone; a
    # client that did not ask gets its copy without the usage event.
    is_usage_added: bool = False
    is_rewritten: bool = False  # a parameter policy changed ``body`` (hasten.policy)
    trace: Stage = NO_STAGE  # the request's root span (hasten.telemetry)
    # What the metrics observers learn (hasten.proxy.outcome); set along the way.
    track: ResponseTrack | None = None
    cache_label: str = BYPASS
    call_headers: Mapping[str, str] | None = None  # the upstream's, with the router's account
    deployment: str | None = None
    upstream_ttfb_ms: float | None = None
    is_upstream_call: bool = False
    semantic_s: float | None = None
    saved_s: float | None = None
    usage_tail: bytes | None = None  # where the usage is when the client's copy has none
    # Asked upstream as a stream, answered as one assembled body (hasten.proxy.assemble).
    is_assembled: bool = False
    caller: Caller = field(kw_only=True)  # the key's limits and allowed models (hasten.limits)
    limit: Limit = NO_LIMIT  # the key's limits: admitted once hit or miss is known
    resume: str = ""  # how a broken stream was continued (hasten.proxy.resumer)
    front: Front = field(kw_only=True)  # what the body resolved to (hasten.proxy.fronts)
    # A Responses follow-up's previous response, expanded into ``body`` (hasten.responses).
    previous: PreviousResponse | None = field(default=None, kw_only=True)
    # Listens for the client going away from the first wait on; an L1 hit never waits, so it
    # never pays for the listening task (see ``listen``).
    watcher: DisconnectWatcher | None = None

    @property
    def is_generating(self) -> bool:
        """It asks for generated text (embeddings do not)."""
        return self.api.is_generating

    @property
    def chat_view(self) -> Mapping[str, Any] | None:
        """The request as chat (the semantic tier's question): itself for chat, a
        translation for Responses and Messages, None for the others and without a
        semantic tier."""
        return self.front.chat_view

    @property
    def is_upstream_stream(self) -> bool:
        return self.is_stream or self.is_assembled

    def listen(self) -> None:
        """From now on a disconnect ends the answer (before anything that can wait: the
        upstream, the L2 or semantic lookup, a limit's admission, a paced replay)."""
        if self.watcher is not None:
            self.watcher.arm()

    def base_headers(self, cache_label: bytes, ttfb_ms: float | None) -> Headers:
        gateway_ms = (time.perf_counter() - self.started_s) * 1000.0 - (ttfb_ms or 0.0)
        timing = f"hasten;dur={gateway_ms:.3f}"
        if ttfb_ms is not None:
            timing += f", upstream;dur={ttfb_ms:.3f}"
        return [
            (b"x-hasten-cache", cache_label),
            (b"x-hasten-request-id", self.request_id.encode()),
            (b"server-timing", timing.encode()),
            *self.extra_headers,
        ]
