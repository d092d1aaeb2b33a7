"""Parameter policies through the gateway, against a real loopback simulator."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import openai
import orjson
import pytest

from hasten.config import GatewayConfig
from hasten.policy import ParamPolicy
from hasten.server.logs import JsonFormatter
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import BodyRecorder, chat_body, make_config, running_gateway, sim_stats
from tests.support.servers import ServerThread

BATCH_KEY, WEB_KEY = "gw-batch-key", "gw-web-key"


@pytest.fixture()
def recorder() -> BodyRecorder:
    return BodyRecorder(build_app(SimConfig()))


@pytest.fixture()
def sim(recorder: BodyRecorder) -> Iterator[ServerThread]:
    with ServerThread(recorder) as server:
        yield server


def policy_config(
    sim: ServerThread, model: ParamPolicy | None, **tenants: ParamPolicy
) -> GatewayConfig:
    config = make_config(
        {"sim": sim.url + "/v1"}, api_keys=[("batch", BATCH_KEY), ("web", WEB_KEY)]
    )
    models = {name: replace(route, policy=model) for name, route in config.models.items()}
    return replace(config, models=models, tenant_policies=tenants)


def post(gateway: ServerThread, body: Any, key: str = WEB_KEY) -> httpx.Response:
    return httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )


def sent(recorder: BodyRecorder) -> dict[str, Any]:
    """The body the simulator got last."""
    body: dict[str, Any] = orjson.loads(recorder.bodies[-1])
    return body


def test_default_max_tokens_when_absent(sim: ServerThread, recorder: BodyRecorder) -> None:
    with running_gateway(policy_config(sim, ParamPolicy(default_max_tokens=7))) as gateway:
        response = post(gateway, chat_body("a"))
        assert response.status_code == 200
        assert response.headers["x-hasten-policy"] == "max_tokens=7(default)"
        assert sent(recorder)["max_tokens"] == 7
        assert response.json()["usage"]["completion_tokens"] == 7
        asked = post(gateway, chat_body("b", max_tokens=3))
        assert "x-hasten-policy" not in asked.headers
        assert sent(recorder)["max_tokens"] == 3


def test_cap_clamps_and_shares_the_cache_entry_of_a_request_at_the_cap(
    sim: ServerThread, recorder: BodyRecorder
) -> None:
    with running_gateway(policy_config(sim, ParamPolicy(max_tokens_cap=5))) as gateway:
        capped = post(gateway, chat_body("q", max_tokens=4096))
        assert capped.headers["x-hasten-policy"] == "max_tokens 4096->5(cap)"
        assert capped.headers["x-hasten-cache"] == "miss"
        assert sent(recorder)["max_tokens"] == 5
        assert capped.json()["choices"][0]["finish_reason"] == "length"
        at_cap = post(gateway, chat_body("q", max_tokens=5))
        # Upstream would have seen the same request: one entry, one upstream call.
        assert at_cap.headers["x-hasten-cache"] == "hit"
        assert "x-hasten-policy" not in at_cap.headers
        again = post(gateway, chat_body("q", max_tokens=999))
        assert again.headers["x-hasten-cache"] == "hit"
        assert again.headers["x-hasten-policy"] == "max_tokens 999->5(cap)"  # on hits too
        assert at_cap.json() == capped.json() == again.json()
        assert sim_stats(sim.url)["num_requests"] == 1


def test_reject_mode_is_an_openai_400_naming_the_param(sim: ServerThread) -> None:
    policy = ParamPolicy(max_tokens_cap=5, is_reject_on_exceed=True)
    with running_gateway(policy_config(sim, policy)) as gateway:
        response = post(gateway, chat_body("q", max_completion_tokens=6))
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["param"] == "max_completion_tokens"
        assert error["type"] == "invalid_request_error"
        assert error["code"] == "policy_limit_exceeded"
        assert response.headers["x-hasten-policy"] == "max_completion_tokens 6>5(reject)"
        assert sim_stats(sim.url)["num_requests"] == 0
        assert post(gateway, chat_body("q", max_completion_tokens=5)).status_code == 200


def test_n_cap(sim: ServerThread, recorder: BodyRecorder) -> None:
    with running_gateway(policy_config(sim, ParamPolicy(max_n=2))) as gateway:
        response = post(gateway, chat_body("q", n=5))
        assert response.headers["x-hasten-policy"] == "n 5->2(cap)"
        assert len(response.json()["choices"]) == 2
        assert sent(recorder)["n"] == 2


def test_default_stop_only_when_the_client_sent_none(
    sim: ServerThread, recorder: BodyRecorder
) -> None:
    with running_gateway(policy_config(sim, ParamPolicy(default_stop=("zz",)))) as gateway:
        assert post(gateway, chat_body("a")).headers["x-hasten-policy"] == "stop(default)"
        assert sent(recorder)["stop"] == ["zz"]
        assert "x-hasten-policy" not in post(gateway, chat_body("b", stop=["yy"])).headers
        assert sent(recorder)["stop"] == ["yy"]


def test_drop_and_set(sim: ServerThread, recorder: BodyRecorder) -> None:
    policy = ParamPolicy(drop=("logit_bias",), set_fields={"temperature": 0, "top_p": 0.5})
    with running_gateway(policy_config(sim, policy)) as gateway:
        response = post(gateway, chat_body("q", temperature=0.9, logit_bias={"1": 3}))
        assert response.headers["x-hasten-policy"] == (
            "drop logit_bias, set temperature=0, set top_p=0.5"
        )
        upstream = sent(recorder)
        assert "logit_bias" not in upstream
        assert upstream["temperature"] == 0 and upstream["top_p"] == 0.5
        # Forced to temperature 0, the request is now deterministic: cached.
        assert response.headers["x-hasten-cache"] == "miss"
        plain = post(gateway, chat_body("q", temperature=0, top_p=0.5))
        assert plain.headers["x-hasten-cache"] == "hit"


def test_tenant_and_model_policies_combine(sim: ServerThread, recorder: BodyRecorder) -> None:
    model = ParamPolicy(default_max_tokens=9, max_tokens_cap=9, set_fields={"seed": 1})
    batch = ParamPolicy(default_max_tokens=20, max_tokens_cap=4, set_fields={"seed": 2})
    with running_gateway(policy_config(sim, model, batch=batch)) as gateway:
        web = post(gateway, chat_body("q"), WEB_KEY)
        assert web.headers["x-hasten-policy"] == "set seed=1, max_tokens=9(default)"
        assert sent(recorder)["max_tokens"] == 9
        batched = post(gateway, chat_body("q"), BATCH_KEY)
        # Caps: the lower holds, and so does the default under it; set: the tenant's last.
        assert batched.headers["x-hasten-policy"] == "set seed=2, max_tokens=4(default)"
        assert sent(recorder)["max_tokens"] == 4 and sent(recorder)["seed"] == 2
        clamped = post(gateway, chat_body("r", max_tokens=8), BATCH_KEY)
        assert clamped.headers["x-hasten-policy"] == "set seed=2, max_tokens 8->4(cap)"
        web_again = post(gateway, chat_body("r", max_tokens=8), WEB_KEY)
        assert web_again.headers["x-hasten-policy"] == "set seed=1"
        # Repeats take each tenant's kept front (hasten.proxy.fronts), with its own policy.
        for key, applied in (
            (WEB_KEY, "set seed=1, max_tokens=9(default)"),
            (BATCH_KEY, "set seed=2, max_tokens=4(default)"),
        ):
            assert post(gateway, chat_body("q"), key).headers["x-hasten-policy"] == applied


def test_without_a_policy_the_client_bytes_go_upstream_untouched(
    sim: ServerThread, recorder: BodyRecorder
) -> None:
    # A policy that does not act on this request leaves the zero-copy path alone too. (A
    # stream that asks for usage itself: a non-stream one is asked upstream as a stream.)
    with running_gateway(policy_config(sim, ParamPolicy(max_tokens_cap=100))) as gateway:
        raw = (
            b'{ "messages":[{"role":"user","content":"hi"}],  "model":"sim-model","max_tokens":5,'
            b' "stream": true, "stream_options": {"include_usage": true}}'
        )
        response = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            content=raw,
            headers={"authorization": f"Bearer {WEB_KEY}", "content-type": "application/json"},
        )
        assert response.status_code == 200 and "x-hasten-policy" not in response.headers
        assert recorder.bodies[-1] == raw


def test_embeddings_are_not_rewritten(sim: ServerThread) -> None:
    policy = ParamPolicy(default_max_tokens=5, set_fields={"temperature": 0})
    with running_gateway(policy_config(sim, policy)) as gateway:
        response = httpx.post(
            f"{gateway.url}/v1/embeddings",
            json={"model": "sim-model", "input": "hello"},
            headers={"authorization": f"Bearer {WEB_KEY}"},
        )
        assert response.status_code == 200 and "x-hasten-policy" not in response.headers


def test_the_json_access_log_carries_the_policy(
    sim: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    config = policy_config(
        sim, ParamPolicy(max_n=1), batch=ParamPolicy(max_n=1, is_reject_on_exceed=True)
    )
    config = replace(config, server=replace(config.server, log_format="json"))
    # The log outlives the gateway: a request's record is written after its response left.
    with caplog.at_level(logging.INFO, "hasten.access"), running_gateway(config) as gateway:
        capped = post(gateway, chat_body("q", n=3)).headers["x-hasten-request-id"]
        untouched = post(gateway, chat_body("q")).headers["x-hasten-request-id"]
        refused = post(gateway, chat_body("q", n=2), BATCH_KEY)
        assert refused.status_code == 400
    records = {getattr(r, "request_id", ""): r for r in caplog.records if r.name == "hasten.access"}

    def logged(request_id: str) -> dict[str, Any]:
        line: dict[str, Any] = json.loads(JsonFormatter().format(records[request_id]))
        return line

    assert logged(capped)["policy"] == "n 3->1(cap)"
    assert "policy" not in logged(untouched)
    assert logged(refused.headers["x-hasten-request-id"])["policy"] == "n 2>1(reject)"


def test_the_openai_sdk_sees_the_cap_and_the_refusal(sim: ServerThread) -> None:
    model = ParamPolicy(max_tokens_cap=4)
    batch = ParamPolicy(max_tokens_cap=2, is_reject_on_exceed=True)
    with running_gateway(policy_config(sim, model, batch=batch)) as gateway:
        web = openai.OpenAI(base_url=gateway.url + "/v1", api_key=WEB_KEY, max_retries=0)
        raw = web.chat.completions.with_raw_response.create(
            model="sim-model", messages=[{"role": "user", "content": "hi"}], max_tokens=4096
        )
        assert raw.headers["x-hasten-policy"] == "max_tokens 4096->4(cap)"
        usage = raw.parse().usage
        assert usage is not None and usage.completion_tokens == 4
        strict = openai.OpenAI(base_url=gateway.url + "/v1", api_key=BATCH_KEY, max_retries=0)
        with pytest.raises(openai.BadRequestError) as refused:
            strict.chat.completions.create(
                model="sim-model", messages=[{"role": "user", "content": "hi"}], max_tokens=3
            )
        assert refused.value.param == "max_tokens"
        stream = strict.chat.completions.create(
            model="sim-model",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            max_tokens=2,
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
