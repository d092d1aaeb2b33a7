"""The asynchronous judge in the gateway: a paraphrase misses, is judged by the upstream in
the background, its fresh answer agrees, and the next asking of it hits as an alias."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson

from hasten.config import CacheConfig, GatewayConfig
from hasten.config.semantic import SemanticConfig
from tests.support.gateway import completion, make_config, read_request, running_gateway
from tests.support.gateway import send_answer as send_scripted
from tests.support.servers import ServerThread

ADMIN_KEY = "judge-admin-key"
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
QUESTION = "What is the capital of France?"
PARAPHRASE = "Which city is the capital of France?"


@dataclass
class Upstream:
    """Answers questions with ``answer`` and the judge's one-token requests with ``verdict``."""

    answer: str = "Paris."
    verdict: str = "yes"
    judged: list[dict[str, Any]] = field(default_factory=list)
    asked: list[dict[str, Any]] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = orjson.loads(await read_request(receive))
        is_judgement = body.get("max_tokens") == 1
        (self.judged if is_judgement else self.asked).append(body)
        content = self.verdict if is_judgement else self.answer
        stream = body.get("stream") is True
        await send_scripted(send, 200, [], completion(content), is_stream=stream)


def _config(upstream_url: str, tmp: Path, **judge: Any) -> GatewayConfig:
    config = make_config(
        {"up": upstream_url},
        cache=CacheConfig(backend="sqlite", sqlite_path=str(tmp / "exact.sqlite3")),
        admin_api_key=ADMIN_KEY,
    )
    semantic = SemanticConfig(
        is_enabled=True, path=str(tmp / "semantic.sqlite3"), judge="upstream", **judge
    )
    return replace(config, semantic=semantic)


def _ask(client: openai.OpenAI, text: str) -> Any:
    return client.chat.completions.with_raw_response.create(
        model="sim-model", messages=[{"role": "user", "content": text}], temperature=0
    )


def _latin(gateway: ServerThread, name: str, at_least: int) -> dict[str, Any]:
    """The latin script's semantic counters once ``name`` reached ``at_least`` (bounded)."""
    for _ in range(500):
        stats = httpx.get(f"{gateway.url}/admin/cache/stats", headers=ADMIN).json()["semantic"]
        latin: dict[str, Any] = stats["by_script"].get("latin", {})
        if latin.get(name, 0) >= at_least:
            return latin
        time.sleep(0.02)
    raise AssertionError(f"{name} never reached {at_least}: {stats}")


def _run(tmp: Path, upstream: Upstream, **judge: Any) -> tuple[list[str], dict[str, Any]]:
    """The question, its paraphrase (a miss, judged), then the paraphrase again (with a
    trailing newline: no exact hit); the cache outcome of each and the latin counters."""
    with ServerThread(upstream) as server, running_gateway(_config(server.url, tmp, **judge)) as gw:
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0)
        outcomes = [_ask(client, QUESTION).headers["x-hasten-cache"]]
        _latin(gw, "misses", 1)
        for _ in range(200):  # the first answer indexed
            stats = httpx.get(f"{gw.url}/admin/cache/stats", headers=ADMIN).json()["semantic"]
            if stats["entries"] >= 1:
                break
            time.sleep(0.02)
        outcomes.append(_ask(client, PARAPHRASE).headers["x-hasten-cache"])
        _latin(gw, "misses", 2)
        for _ in range(200):  # the paraphrase stored: as an alias or as its own entry
            stats = httpx.get(f"{gw.url}/admin/cache/stats", headers=ADMIN).json()["semantic"]
            if stats["entries"] >= 2 or stats["judge"].get("judge_dropped_budget"):
                break
            time.sleep(0.02)
        again = _ask(client, PARAPHRASE + "\n")
        outcomes.append(again.headers["x-hasten-cache"])
        outcomes.append(again.headers.get("x-hasten-semantic-verifier", ""))
        latin = _latin(gw, "misses", 0)
    return outcomes, latin


def test_a_judged_paraphrase_whose_answer_agrees_hits_as_an_alias(tmp_path: Path) -> None:
    upstream = Upstream()
    outcomes, latin = _run(tmp_path, upstream)
    assert outcomes == ["miss", "miss", "semantic", "alias"]
    assert len(upstream.judged) == 1 and len(upstream.asked) == 2  # the alias hit is free
    judgement = upstream.judged[0]
    assert judgement["temperature"] == 0 and judgement["model"] == "sim-model"
    assert PARAPHRASE in judgement["messages"][0]["content"]
    assert latin["judge_yes"] == latin["judge_agreed"] == latin["aliases_made"] == 1
    assert latin["alias_hits"] == 1


def test_a_no_never_makes_an_alias(tmp_path: Path) -> None:
    outcomes, latin = _run(tmp_path / "no", Upstream(verdict="no"))
    assert outcomes[:2] == ["miss", "miss"] and outcomes[3] != "alias"
    assert latin["judge_no"] == 1 and "aliases_made" not in latin


def test_an_answer_that_disagrees_never_makes_an_alias(tmp_path: Path) -> None:
    class Changing(Upstream):
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            self.answer = "Paris." if not self.asked else "The Eiffel Tower is 330 m tall."
            await super().__call__(scope, receive, send)

    outcomes, latin = _run(tmp_path, Changing())
    assert outcomes[3] != "alias"
    assert latin["judge_yes"] == latin["judge_disagreed"] == 1 and "aliases_made" not in latin


def test_over_budget_the_pair_is_dropped_unjudged(tmp_path: Path) -> None:
    upstream = Upstream()
    outcomes, latin = _run(tmp_path, upstream, judge_max_tokens_per_minute=5)
    assert upstream.judged == [] and latin["judge_dropped_budget"] == 1
    assert outcomes[3] != "alias"
