"""The semantic tier through the gateway, driven by the openai SDK against the simulator."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from hasten.auth import Authenticator
from hasten.config import CacheConfig, GatewayConfig
from hasten.config.semantic import SemanticConfig
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import (
    OddUpstream,
    ScriptedUpstream,
    completion,
    make_config,
    running_gateway,
    sim_stats,
)
from tests.support.servers import ServerThread

ADMIN_KEY = "semantic-admin-key"
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
# The namespace of a pass-through caller whose SDK sends the key "k".
K_TENANT = Authenticator(()).tenant_for(b"Bearer k")
QUESTION = "What is the capital of France?"
PARAPHRASE = "Which city is the capital of France?"


def _config(
    sim_url: str, tmp: Path, *, min_similarity: float | None = 0.96, **keys: str
) -> GatewayConfig:
    """The gateway with the semantic tier. The tier's mechanics (tenants, reports, import,
    answer classes, ambiguity) are tested at the cosine cut-off 0.96 their question pairs
    were chosen for; ``min_similarity=None`` is the calibrated default (target_precision)."""
    config = make_config(
        {"sim": sim_url + "/v1"},
        cache=CacheConfig(backend="sqlite", sqlite_path=str(tmp / "exact.sqlite3")),
        api_keys=list(keys.items()),
        admin_api_key=ADMIN_KEY,
    )
    semantic = SemanticConfig(
        is_enabled=True, path=str(tmp / "semantic.sqlite3"), min_similarity=min_similarity
    )
    return replace(config, semantic=semantic)


@pytest.fixture()
def sim() -> Iterator[ServerThread]:
    with ServerThread(build_app(SimConfig())) as server:
        yield server


def _ask(
    client: openai.OpenAI, text: str, history: list[dict[str, str]] | None = None, **extra: object
) -> openai.APIResponse:  # type: ignore[type-arg]
    messages = [*(history or []), {"role": "user", "content": text}]
    return client.chat.completions.with_raw_response.create(  # type: ignore[call-overload, no-any-return]
        model="sim-model", messages=messages, temperature=0, **extra
    )


def _wait_indexed(gateway: ServerThread, num_entries: int, key: str = "") -> None:
    headers = {"authorization": f"Bearer {key or ADMIN_KEY}"}
    for _ in range(200):
        stats = httpx.get(f"{gateway.url}/admin/cache/stats", headers=headers).json()
        if stats["semantic"]["entries"] >= num_entries:
            return
        import time

        time.sleep(0.02)
    raise AssertionError(f"semantic index never reached {num_entries} entries: {stats}")


def test_paraphrase_hits_stream_and_not(sim: ServerThread, tmp_path: Path) -> None:
    with running_gateway(_config(sim.url, tmp_path)) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0)
        first = _ask(client, QUESTION)
        assert first.headers["x-hasten-cache"] == "miss"
        _wait_indexed(gateway, 1)
        again = _ask(client, PARAPHRASE)
        assert again.headers["x-hasten-cache"] == "semantic"
        assert float(again.headers["x-hasten-semantic-similarity"]) > 0.9
        assert again.headers["x-hasten-semantic-entry"]
        answer = first.parse().choices[0].message.content
        assert again.parse().choices[0].message.content == answer
        stream = client.chat.completions.create(
            model="sim-model",
            messages=[{"role": "user", "content": PARAPHRASE}],
            temperature=0,
            stream=True,
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == answer
        assert sim_stats(sim.url)["num_requests"] == 1


def test_a_semantic_hit_with_no_form_for_its_client_goes_upstream(tmp_path: Path) -> None:
    # A stream client stores an answer whose text is a number: it merges into no body, so a
    # non-stream paraphrase is not served it (no 500) but asked upstream as a miss.
    upstream = OddUpstream()
    with ServerThread(upstream) as up, running_gateway(_config(up.url, tmp_path)) as gateway:
        url = f"{gateway.url}/v1/chat/completions"
        body = {"model": "sim-model", "temperature": 0}
        question = [{"role": "user", "content": QUESTION}]
        first = httpx.post(url, json={**body, "messages": question, "stream": True}, timeout=30)
        assert first.status_code == 200 and first.headers["x-hasten-cache"] == "miss"
        _wait_indexed(gateway, 1)
        paraphrase = [{"role": "user", "content": PARAPHRASE}]
        again = httpx.post(url, json={**body, "messages": paraphrase}, timeout=30)
        stats = httpx.get(f"{gateway.url}/stats", headers=ADMIN).json()["requests"]
    assert again.status_code == 502, again.text
    assert again.json()["error"]["code"] == "upstream_stream_error"
    assert upstream.num_calls == 2
    assert stats["unservable_entries"] == 1 and "semantic_hit" not in stats


def test_the_calibrated_default_serves_with_its_risk(sim: ServerThread, tmp_path: Path) -> None:
    with running_gateway(_config(sim.url, tmp_path, min_similarity=None)) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0)
        assert _ask(client, QUESTION).headers["x-hasten-cache"] == "miss"
        _wait_indexed(gateway, 1)
        # The same question but for a trailing newline (not the same body: no exact hit):
        # served, with its calibrated risk. A paraphrase is not: no evidence here makes one
        # 95% safe.
        assert _ask(client, PARAPHRASE).headers["x-hasten-cache"] == "miss"
        _wait_indexed(gateway, 2)
        stats = httpx.get(f"{gateway.url}/admin/cache/stats", headers=ADMIN).json()["semantic"]
        again = _ask(client, "What is the capital of France?\n")
        assert again.headers["x-hasten-cache"] == "semantic"
        assert 0.0 <= float(again.headers["x-hasten-semantic-risk"]) < 0.05
        # Decided by the text: only a repeat can be served at 0.95, so nothing was embedded.
        assert again.headers["x-hasten-semantic-similarity"] == "1.0000"
        after = httpx.get(f"{gateway.url}/admin/cache/stats", headers=ADMIN).json()["semantic"]
        assert after["embedded_texts"] == stats["embedded_texts"]
        assert after["by_script"]["latin"]["not_repeated"] == 2  # the first two questions
        # Another capital: the guard or the risk refuses it.
        other = _ask(client, "What is the capital of Germany?")
        assert other.headers["x-hasten-cache"] == "miss"
        assert "x-hasten-semantic-risk" not in other.headers
        stats = httpx.get(f"{gateway.url}/admin/cache/stats", headers=ADMIN).json()["semantic"]
        assert stats["target_precision"] == 0.95 and stats["min_similarity"] is None
        assert stats["by_script"]["latin"]["hits"] == 1
        assert stats["by_script"]["latin"]["misses"] >= 2
        overview = httpx.get(f"{gateway.url}/stats", headers=ADMIN).json()
        assert overview["semantic"]["latin"] == stats["by_script"]["latin"]


def test_only_the_same_text_is_a_repeat(sim: ServerThread, tmp_path: Path) -> None:
    """Issue 41, defect 6: the text path served "What is 10² + 1?" the answer to "What is
    102 + 1?" (NFKC), and code or quoted text spaced otherwise each other's answers."""
    pairs = [
        ("What is 102 + 1?", "What is 10² + 1?"),
        ("Fix this:\nif x:\n    y()\nz()", "Fix this:\nif x:\n    y()\n    z()"),
        ("How long is 'a  b'?", "How long is 'a b'?"),
    ]
    with running_gateway(_config(sim.url, tmp_path, min_similarity=None)) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0)
        for number, (first, second) in enumerate(pairs, 1):
            assert _ask(client, first).headers["x-hasten-cache"] == "miss"
            _wait_indexed(gateway, 2 * number - 1)
            other = _ask(client, second)
            assert other.headers["x-hasten-cache"] == "miss", second
            _wait_indexed(gateway, 2 * number)
            again = _ask(client, first + "\n")  # the same text, not the same body
            assert again.headers["x-hasten-cache"] == "semantic", first
            assert (
                again.parse().choices[0].message.content
                == _ask(client, first).parse().choices[0].message.content
            )
    assert sim_stats(sim.url)["num_requests"] == 2 * len(pairs)


def test_other_conversation_does_not_hit(sim: ServerThread, tmp_path: Path) -> None:
    with running_gateway(_config(sim.url, tmp_path)) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0)
        obama = [
            {"role": "user", "content": "Tell me about Barack Obama."},
            {"role": "assistant", "content": "He was the 44th US president."},
        ]
        biden = [
            {"role": "user", "content": "Tell me about Joe Biden."},
            {"role": "assistant", "content": "He was the 46th US president."},
        ]
        _ask(client, "How old is he?", obama)
        _wait_indexed(gateway, 1)
        assert _ask(client, "How old is he?", biden).headers["x-hasten-cache"] == "miss"
        assert _ask(client, "How old is he now?", obama).headers["x-hasten-cache"] in (
            "semantic",
            "miss",
        )  # same conversation: allowed to hit, never required


def test_tenants_are_isolated(sim: ServerThread, tmp_path: Path) -> None:
    with running_gateway(_config(sim.url, tmp_path, a="key-a", b="key-b")) as gateway:
        a = openai.OpenAI(base_url=gateway.url + "/v1", api_key="key-a", max_retries=0)
        b = openai.OpenAI(base_url=gateway.url + "/v1", api_key="key-b", max_retries=0)
        _ask(a, QUESTION)
        _wait_indexed(gateway, 1, "key-a")
        assert _ask(b, PARAPHRASE).headers["x-hasten-cache"] == "miss"
        hit = _ask(a, PARAPHRASE)
        assert hit.headers["x-hasten-cache"] == "semantic"
        # B naming A's entry id neither evicts it nor teaches its threshold anything.
        report = httpx.post(
            f"{gateway.url}/admin/cache/report",
            json={"entry_id": int(hit.headers["x-hasten-semantic-entry"]), "similarity": 0.99},
            headers={"authorization": "Bearer key-b"},
        )
        assert report.json() == {"evicted": False}
        stats = httpx.get(f"{gateway.url}/admin/cache/stats", headers=ADMIN).json()["semantic"]
        assert stats.get("reported_wrong", 0) == 0
        assert _ask(a, PARAPHRASE).headers["x-hasten-cache"] == "semantic"


def test_report_wrong_hit_evicts_and_invalidate_by_model(sim: ServerThread, tmp_path: Path) -> None:
    with running_gateway(_config(sim.url, tmp_path)) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0)
        _ask(client, QUESTION)
        _wait_indexed(gateway, 1)
        hit = _ask(client, PARAPHRASE)
        entry_id = int(hit.headers["x-hasten-semantic-entry"])
        report = httpx.post(
            f"{gateway.url}/admin/cache/report",
            json={"entry_id": entry_id, "similarity": 0.99},
            headers=ADMIN,
        )
        assert report.json() == {"evicted": True}
        assert _ask(client, "Which city is France's capital?").headers["x-hasten-cache"] == "miss"
        _wait_indexed(gateway, 1)
        gone = httpx.post(
            f"{gateway.url}/admin/cache/invalidate",
            json={"model": "sim-model", "tenant": K_TENANT},
            headers=ADMIN,
        )
        assert gone.json()["semantic_deleted"] >= 1
        bad = httpx.post(
            f"{gateway.url}/admin/cache/report",
            json={"entry_id": "x"},
            headers=ADMIN,
        )
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "entry_id"


def test_import_warms_and_persists_across_restart(sim: ServerThread, tmp_path: Path) -> None:
    config = _config(sim.url, tmp_path)
    lines = (
        b'{"question": "How tall is Mount Everest?", "answer": "8,849 metres.", '
        b'"model": "sim-model", "tenant": "' + K_TENANT.encode() + b'"}\n'
    )
    with running_gateway(config) as gateway:
        result = httpx.post(
            f"{gateway.url}/admin/cache/import",
            content=lines,
            headers=ADMIN,
        )
        assert result.json() == {"imported": 1, "vectors_pending": 0}  # at 0.96: embedded now
    with running_gateway(config) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0)
        reply = _ask(client, "What is the height of Mount Everest?")
        assert reply.headers["x-hasten-cache"] == "semantic"
        assert reply.parse().choices[0].message.content == "8,849 metres."
    assert sim_stats(sim.url)["num_requests"] == 0


def test_an_import_at_the_default_is_served_by_text_before_its_vectors(
    sim: ServerThread, tmp_path: Path
) -> None:
    config = _config(sim.url, tmp_path, min_similarity=None)
    lines = b"".join(
        b'{"question": "Which river flows through city %d?", "answer": "River %d.", '
        b'"model": "sim-model", "tenant": "%s"}\n' % (i, i, K_TENANT.encode())
        for i in range(3)
    )
    with running_gateway(config) as gateway:
        result = httpx.post(f"{gateway.url}/admin/cache/import", content=lines, headers=ADMIN)
        assert result.json() == {"imported": 3, "vectors_pending": 3}
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0)
        reply = _ask(client, "Which river flows through city 2? ")  # not the exact body
        assert reply.headers["x-hasten-cache"] == "semantic"
        assert reply.headers["x-hasten-semantic-similarity"] == "1.0000"
        assert reply.parse().choices[0].message.content == "River 2."
        for _ in range(500):  # the vectors follow in the background
            stats = httpx.get(f"{gateway.url}/admin/cache/stats", headers=ADMIN).json()
            if stats["semantic"]["vectors_pending"] == 0:
                break
            time.sleep(0.02)
        assert stats["semantic"]["vectors_pending"] == 0
        assert stats["semantic"]["vectors_filled"] == 3
    assert sim_stats(sim.url)["num_requests"] == 0


def test_opposite_command_does_not_hit(sim: ServerThread, tmp_path: Path) -> None:
    # e5 scores this pair about 0.965, above the default cut-off: only the guard tells them apart.
    with running_gateway(_config(sim.url, tmp_path)) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0)
        assert _ask(client, "Turn on the lights in the kitchen").headers["x-hasten-cache"] == "miss"
        _wait_indexed(gateway, 1)
        off = _ask(client, "Turn off the lights in the kitchen")
        assert off.headers["x-hasten-cache"] == "miss"
        assert "x-hasten-semantic-entry" not in off.headers
        stats = httpx.get(f"{gateway.url}/admin/cache/stats", headers=ADMIN).json()["semantic"]
        assert stats["guard_polarity"] == 1  # found above the cut-off, then vetoed
        assert _ask(client, "Switch on the lights in the kitchen").headers["x-hasten-cache"] in (
            "semantic",
            "miss",
        )  # the same command in other words may hit, never required
        assert sim_stats(sim.url)["num_requests"] >= 2


@pytest.mark.parametrize("min_similarity", [0.96, None])
def test_replicas_share_semantic_entries_through_redis(
    sim: ServerThread, tmp_path: Path, redis_url: str, min_similarity: float | None
) -> None:
    """At the cosine cut-off a paraphrase hits on the other replica; at the calibrated
    default a repeat does, found by the text key of a row applied from the shared stream."""

    def replica(name: str) -> GatewayConfig:
        cache = CacheConfig(backend="redis", redis_url=redis_url)
        config = make_config({"sim": sim.url + "/v1"}, cache=cache, admin_api_key=ADMIN_KEY)
        path = str(tmp_path / f"{name}.sqlite3")
        semantic = SemanticConfig(is_enabled=True, path=path, min_similarity=min_similarity)
        return replace(config, semantic=semantic)

    question = f"{QUESTION} ({tmp_path.name})"  # unique within the session's shared Redis
    again = f"{PARAPHRASE} ({tmp_path.name})" if min_similarity else question + "\n"
    with running_gateway(replica("one")) as one, running_gateway(replica("two")) as two:
        first = openai.OpenAI(base_url=one.url + "/v1", api_key="k", max_retries=0)
        second = openai.OpenAI(base_url=two.url + "/v1", api_key="k", max_retries=0)
        assert _ask(first, question).headers["x-hasten-cache"] == "miss"
        _wait_indexed(two, 1)  # applied from the shared stream, never asked on this replica
        hit = _ask(second, again)
        assert hit.headers["x-hasten-cache"] == "semantic"
        entry_id = int(hit.headers["x-hasten-semantic-entry"])
        gone = httpx.post(
            f"{two.url}/admin/cache/invalidate",
            json={"entry_id": entry_id, "tenant": K_TENANT},
            headers=ADMIN,
        )
        assert gone.json()["semantic_deleted"] == 1
        for _ in range(250):  # the other replica applies the invalidation from the stream
            stats = httpx.get(f"{one.url}/admin/cache/stats", headers=ADMIN).json()["semantic"]
            if stats.get("invalidated_shared"):
                break
            time.sleep(0.02)
        assert stats["invalidated_shared"] == 1
        assert sim_stats(sim.url)["num_requests"] == 1


# e5: FAR is 0.945 to NEAR (below the 0.96 cut-off); BETWEEN is 0.963 to FAR and 0.986 to
# NEAR, two stored questions with different answers: it is ambiguous, never served.
FAR = "Tell me the capital city of France."
NEAR = "What is the capital of France?"
BETWEEN = "Name the capital of France."


def _three_paraphrases(tmp_path: Path, answers: list[str]) -> tuple[list[str], dict[str, Any]]:
    upstream = ScriptedUpstream([(200, {}, completion(answer)) for answer in answers])
    with ServerThread(upstream) as server, running_gateway(_config(server.url, tmp_path)) as gw:
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0)
        outcomes = [_ask(client, FAR).headers["x-hasten-cache"]]
        _wait_indexed(gw, 1)
        outcomes.append(_ask(client, NEAR).headers["x-hasten-cache"])
        _wait_indexed(gw, 2)
        outcomes.append(_ask(client, BETWEEN).headers["x-hasten-cache"])
        stats = httpx.get(f"{gw.url}/admin/cache/stats", headers=ADMIN).json()["semantic"]
    assert len(upstream.calls) == outcomes.count("miss")
    return outcomes, stats


def test_paraphrases_with_disagreeing_answers_stay_ambiguous(tmp_path: Path) -> None:
    answers = ["Paris.", "The Eiffel Tower is 330 metres tall.", "Paris."]
    outcomes, stats = _three_paraphrases(tmp_path, answers)
    assert outcomes == ["miss", "miss", "miss"]
    assert stats["lookup_ambiguous"] == 1


def test_a_paraphrase_hits_on_the_responses_api(sim: ServerThread, tmp_path: Path) -> None:
    # The tier reads each API's request as chat (Api.chat_view): a Responses question and its
    # paraphrase meet as chat questions do, and the hit is replayed as a Responses answer.
    with running_gateway(_config(sim.url, tmp_path)) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0)
        ask = client.responses.with_raw_response.create
        first = ask(model="sim-model", input=QUESTION, temperature=0)
        assert first.headers["x-hasten-cache"] == "miss"
        _wait_indexed(gateway, 1)
        again = ask(model="sim-model", input=PARAPHRASE, temperature=0)
        assert again.headers["x-hasten-cache"] == "semantic"
        answer, served = first.parse(), again.parse()
        assert served.output_text == answer.output_text and served.id != answer.id
        with client.responses.stream(model="sim-model", input=PARAPHRASE, temperature=0) as stream:
            streamed = stream.get_final_response()
        assert streamed.output_text == answer.output_text
        assert sim_stats(sim.url)["num_requests"] == 1


def test_a_paraphrase_hits_on_the_messages_api(sim: ServerThread, tmp_path: Path) -> None:
    import anthropic

    with running_gateway(_config(sim.url, tmp_path)) as gateway:
        client = anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0)

        def ask(text: str) -> Any:
            return client.messages.with_raw_response.create(
                model="sim-model",
                max_tokens=64,
                messages=[{"role": "user", "content": text}],
                extra_body={"temperature": 0},
            )

        first = ask(QUESTION)
        assert first.headers["x-hasten-cache"] == "miss"
        _wait_indexed(gateway, 1)
        again = ask(PARAPHRASE)
        assert again.headers["x-hasten-cache"] == "semantic"
        answer, served = first.parse(), again.parse()
        assert served.content == answer.content and served.id != answer.id
        assert sim_stats(sim.url)["num_requests"] == 1
