"""Unit tests for hasten.proxy.continuation: which requests are deterministic, which deployments
a continuation may go to, and the prefill request for each mechanism."""

from __future__ import annotations

from typing import Any

import pytest

from hasten.config import ModelRoute, UpstreamConfig
from hasten.config.cache_policy import ModelCachePolicy
from hasten.proxy.continuation import (
    is_deterministic,
    prefill_body,
    prefill_target,
    regenerate_excluded,
)
from hasten.routing.models import Route, build_route

MESSAGES = [{"role": "user", "content": "hi"}]


def _route(*prefills: str) -> Route:
    names = [chr(ord("a") + i) for i in range(len(prefills))]
    upstreams = {
        n: UpstreamConfig(name=n, url=f"http://{n}.test", prefill=p)
        for n, p in zip(names, prefills, strict=True)
    }
    route = ModelRoute(name="m", upstream=names[0], fallbacks=tuple(names[1:]))
    return build_route(route, upstreams, ModelCachePolicy())


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"temperature": 0}, True),
        ({"temperature": 0.0}, True),
        ({"seed": 3}, True),
        ({"temperature": 1.2, "seed": 0}, True),
        ({"temperature": 0.7}, False),
        ({}, False),  # the upstream's default temperature is not 0
        ({"seed": True}, False),
        ({"temperature": False}, False),
        ({"seed": "3"}, False),
    ],
)
def test_is_deterministic(body: dict[str, Any], expected: bool) -> None:
    assert is_deterministic(body) is expected


def test_a_regeneration_avoids_the_failed_deployments_unless_none_is_left() -> None:
    route = _route("none", "none")
    assert regenerate_excluded(route, frozenset({"a"})) == {"a"}
    assert regenerate_excluded(route, frozenset({"a", "b"})) == frozenset()
    assert regenerate_excluded(_route("none"), frozenset({"a"})) == frozenset()


def test_prefill_goes_to_deployments_that_declare_one_mechanism() -> None:
    assert prefill_target(_route("none", "none"), frozenset({"a"})) is None
    route = _route("none", "assistant_prefix", "continue_final_message", "assistant_prefix")
    target = prefill_target(route, frozenset({"a"}))
    assert target is not None and target.mechanism == "assistant_prefix"
    assert target.excluded == {"a", "c"}  # b and d share the mechanism
    # The failed one when it is the only one able: its cut may have been bad luck.
    only = prefill_target(_route("continue_final_message", "none"), frozenset({"a"}))
    assert only is not None and only.excluded == {"b"}


def test_prefill_bodies_per_mechanism() -> None:
    sent = {"model": "m", "messages": MESSAGES, "stream": True}
    vllm = prefill_body(sent, "chat", "Hel", "continue_final_message")
    assert vllm == {
        **sent,
        "messages": [*MESSAGES, {"role": "assistant", "content": "Hel"}],
        "continue_final_message": True,
        "add_generation_prompt": False,
    }
    deepseek = prefill_body(sent, "chat", "Hel", "assistant_prefix")
    assert deepseek is not None
    assert deepseek["messages"][-1] == {"role": "assistant", "content": "Hel", "prefix": True}
    assert sent["messages"] == MESSAGES  # the sent body is not changed
    assert prefill_body(sent, "chat", "Hel", "none") is None


def test_prefill_of_a_completion_extends_its_prompt() -> None:
    sent = {"model": "m", "prompt": "Once", "stream": True}
    assert prefill_body(sent, "completions", " upon", "assistant_prefix") == {
        **sent,
        "prompt": "Once upon",
    }
    assert prefill_body({**sent, "prompt": ["a", "b"]}, "completions", "x", "x") is None
    assert prefill_body({**sent, "echo": True}, "completions", "x", "x") is None


def test_no_prefill_for_several_choices() -> None:
    sent = {"model": "m", "messages": MESSAGES, "n": 2}
    assert prefill_body(sent, "chat", "Hi", "assistant_prefix") is None
