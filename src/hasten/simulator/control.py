"""The `/sim/*` control endpoints: read counters, reset them, read or change the config."""

from __future__ import annotations

from urllib.parse import parse_qs

import orjson

from hasten.errors import ConfigError, InvalidRequest
from hasten.proxy.validation import parse_body
from hasten.simulator.inputs import MAX_BODY_BYTES
from hasten.simulator.state import SimState
from hasten.simulator.stats import Outcome
from hasten.wire.asgi import Receive, Scope, Send, read_body, send_json

_TRUE_VALUES = ("1", "true", "yes")
MAX_BURST_REQUESTS = 1_000_000


class ControlEndpoints:
    """Handlers share the app's `SimState`; each returns COMPLETED (not counted in stats)."""

    def __init__(self, state: SimState) -> None:
        self._state = state

    def stats_json(self) -> bytes:
        data = self._state.stats.to_dict()
        data["num_prefix_cache_blocks"] = len(self._state.prefix_cache)
        return orjson.dumps(data)

    async def get_stats(
        self, scope: Scope, receive: Receive, send: Send, start_s: float
    ) -> Outcome:
        await send_json(send, 200, self.stats_json())
        return Outcome.COMPLETED

    async def reset(self, scope: Scope, receive: Receive, send: Send, start_s: float) -> Outcome:
        """Zeroes counters and reseeds the RNG; `?clear_prefix_cache=1` also empties the cache."""
        await read_body(receive, scope, MAX_BODY_BYTES)
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        clear = any(value.lower() in _TRUE_VALUES for value in query.get("clear_prefix_cache", []))
        self._state.reset(clear_prefix_cache=clear)
        await send_json(send, 200, self.stats_json())
        return Outcome.COMPLETED

    async def get_config(
        self, scope: Scope, receive: Receive, send: Send, start_s: float
    ) -> Outcome:
        await send_json(send, 200, orjson.dumps(self._state.config.to_dict()))
        return Outcome.COMPLETED

    async def set_config(
        self, scope: Scope, receive: Receive, send: Send, start_s: float
    ) -> Outcome:
        """Applies the given fields on top of the current config; returns the whole new one."""
        changes = parse_body(await read_body(receive, scope, MAX_BODY_BYTES))
        try:
            config = self._state.config.updated(changes)
        except ConfigError as exc:
            raise InvalidRequest(str(exc), code="invalid_config") from None
        self._state.apply_config(config)
        await send_json(send, 200, orjson.dumps(config.to_dict()))
        return Outcome.COMPLETED

    async def burst(self, scope: Scope, receive: Receive, send: Send, start_s: float) -> Outcome:
        """Arms a 5xx burst: ``{"num_requests": N, "status": 503}`` (status default 500);
        the next N completion or embedding requests fail with it, then the simulator
        recovers. ``num_requests: 0`` ends a burst early."""
        changes = parse_body(await read_body(receive, scope, MAX_BODY_BYTES))
        unknown = sorted(set(changes) - {"num_requests", "status"})
        if unknown:
            raise InvalidRequest(f"unknown burst field {unknown[0]}", param=unknown[0])
        num_requests = changes.get("num_requests")
        if not _is_int_within(num_requests, 0, MAX_BURST_REQUESTS):
            message = f"num_requests must be an integer in [0, {MAX_BURST_REQUESTS}]"
            raise InvalidRequest(message, param="num_requests")
        status = changes.get("status", 500)
        if not _is_int_within(status, 500, 599):
            raise InvalidRequest("status must be an integer in [500, 599]", param="status")
        assert isinstance(num_requests, int) and isinstance(status, int)
        self._state.arm_burst(num_requests, status)
        body = {"num_requests": num_requests, "status": status}
        await send_json(send, 200, orjson.dumps(body))
        return Outcome.COMPLETED


def _is_int_within(value: object, minimum: int, maximum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and minimum <= value <= maximum
