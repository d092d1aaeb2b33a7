"""Anthropic prompt-cache breakpoints added where a Messages request set none."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from hasten.apis.cache_control import MIN_CACHEABLE_TOKENS, with_breakpoints
from hasten.apis.messages import MAX_CACHE_BREAKPOINTS, check_request, count_cache_breakpoints

LONG = "word " * (MIN_CACHEABLE_TOKENS * 2)


def _body(**extra: Any) -> dict[str, Any]:
    return {
        "model": "claude",
        "max_tokens": 64,
        "messages": [
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": "second question"},
        ],
        **extra,
    }


def test_a_long_system_prompt_and_history_get_breakpoints() -> None:
    tool = {"name": "search", "description": LONG, "input_schema": {"type": "object"}}
    marked = with_breakpoints(_body(system=LONG, tools=[tool]))
    assert marked is not None
    check_request(marked)  # still a valid request, within Anthropic's rules
    assert marked["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert marked["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert marked["messages"][1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in str(marked["messages"][2])  # the new turn is not stable
    assert count_cache_breakpoints(marked) == 3


def test_a_short_prompt_or_a_client_s_own_breakpoints_are_left_alone() -> None:
    assert with_breakpoints(_body(system="be brief")) is None
    own = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    assert with_breakpoints(_body(system=own)) is None


@given(
    st.lists(st.text(max_size=3000), min_size=2, max_size=6),
    st.one_of(st.none(), st.text(max_size=6000)),
)
def test_never_more_than_four_breakpoints_and_the_body_otherwise_unchanged(
    turns: list[str], system: str | None
) -> None:
    roles = ["user", "assistant"]
    messages = [{"role": roles[i % 2], "content": t or "x"} for i, t in enumerate(turns)]
    if messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": "go on"})
    body = _body(messages=messages, **({} if system is None else {"system": system}))
    marked = with_breakpoints(body)
    if marked is None:
        return
    assert 1 <= count_cache_breakpoints(marked) <= MAX_CACHE_BREAKPOINTS
    assert marked["messages"][-1] == body["messages"][-1]
    assert count_cache_breakpoints(body) == 0  # the client's body itself is not changed
