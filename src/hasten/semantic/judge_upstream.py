"""The upstream judge: a model asked, through the gateway's own upstream path, whether two
questions ask for the same answer (one token, yes or no, temperature 0).

The call goes where a request for that model goes (``UpstreamClient.open`` on the model's
route: its deployments, hedging, failover, retries), with the upstream's configured key
only: a client's own key is never kept for a background call, so behind a pass-through
upstream (no ``api_key``) the upstream judge fails (counted as ``judge_errors``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from hasten.apis.chat import CHAT, CHAT_API
from hasten.semantic.judge import Judged
from hasten.semantic.judge_rules import JudgeCase, parse_verdict, prompt
from hasten.upstream.bridge import ClientRequest

if TYPE_CHECKING:
    from hasten.routing.models import ModelRouter
    from hasten.upstream.client import UpstreamClient

# (route name, body without its model) -> (status, response body)
Send = Callable[[str, dict[str, Any]], Awaitable[tuple[int, bytes]]]
_HEADERS = {"content-type": "application/json", "accept": "application/json"}


def judge_body(case: JudgeCase) -> dict[str, Any]:
    """The chat request that judges ``case`` (its model is set by ``Send``)."""
    return {
        "messages": [{"role": "user", "content": prompt(case.asked, case.stored)}],
        "max_tokens": 1,
        "temperature": 0,
        "stream": False,
    }


def read_verdict(status: int, body: bytes) -> Judged:
    """The verdict in a chat completion (None unless a 200 whose first word is yes or no)."""
    if status != 200:
        raise ValueError(f"the judge's upstream answered {status}")
    parsed = orjson.loads(body)
    content = parsed["choices"][0]["message"].get("content")
    usage = parsed.get("usage")
    total = usage.get("total_tokens") if isinstance(usage, dict) else None
    verdict = parse_verdict(content) if isinstance(content, str) else None
    return Judged(verdict, total if isinstance(total, int) else None)


class UpstreamJudge:
    """Asks ``model`` (a route name), or each pair's own model when ``model`` is None."""

    def __init__(self, send: Send, *, model: str | None = None) -> None:
        self._send = send
        self._model = model

    @property
    def name(self) -> str:
        return f"upstream:{self._model or 'request model'}"

    @property
    def is_metered(self) -> bool:
        return True

    async def judge(self, case: JudgeCase) -> Judged:
        status, body = await self._send(self._model or case.model, judge_body(case))
        return read_verdict(status, body)


def gateway_send(router: ModelRouter, client: UpstreamClient) -> Send:
    """``Send`` through the gateway's router and upstream client."""

    async def send(model: str, body: dict[str, Any]) -> tuple[int, bytes]:
        resolved = router.resolve(model)
        full = {"model": resolved.upstream_model, **body}
        request = ClientRequest(
            CHAT, orjson.dumps(full), full, _HEADERS, model=resolved.upstream_model, is_stream=False
        )
        call = await client.open(resolved, request, CHAT_API, parsed=full, is_stream=False)
        try:
            return call.status, await call.read()
        finally:
            call.close()

    return send
