"""The simulator's cap on tool calls (``SimConfig.max_tool_calls``), on every API."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from hasten.errors import ConfigError
from hasten.simulator import SimConfig, build_app
from tests.support.servers import ServerThread

NAMES = ("a", "b", "c")
CHAT_TOOLS: Any = [{"type": "function", "function": {"name": n}} for n in NAMES]
RESPONSES_TOOLS: Any = [{"type": "function", "name": n, "parameters": {}} for n in NAMES]
MESSAGES_TOOLS: Any = [{"name": n, "input_schema": {"type": "object"}} for n in NAMES]


@pytest.mark.parametrize("max_tool_calls", [0, 1, 8])
def test_every_api_calls_at_most_the_configured_tools(max_tool_calls: int) -> None:
    expected = list(NAMES[:max_tool_calls])
    app = build_app(SimConfig(max_tool_calls=max_tool_calls))
    with ServerThread(app) as server:
        oai = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
        chat = oai.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], tools=CHAT_TOOLS
        )
        message = chat.choices[0].message
        assert [c.function.name for c in message.tool_calls or ()] == expected  # type: ignore[union-attr]
        assert bool(message.content) == (not expected)
        response = oai.responses.create(model="m", input="hi", tools=RESPONSES_TOOLS)
        assert [i.name for i in response.output if i.type == "function_call"] == expected
        claude = anthropic.Anthropic(base_url=server.url, api_key="k", max_retries=0)
        reply = claude.messages.create(
            model="m",
            max_tokens=50,
            messages=[{"role": "user", "content": "hi"}],
            tools=MESSAGES_TOOLS,
        )
        assert [b.name for b in reply.content if b.type == "tool_use"] == expected
        assert reply.stop_reason == ("tool_use" if expected else "end_turn")


def test_a_negative_cap_is_refused() -> None:
    with pytest.raises(ConfigError, match="max_tool_calls"):
        SimConfig(max_tool_calls=-1)
    assert SimConfig().updated({"max_tool_calls": 0}).max_tool_calls == 0


@pytest.mark.parametrize("runs_to_max_tokens", [True, False])
def test_chat_runs_to_max_tokens_or_only_caps_with_it(runs_to_max_tokens: bool) -> None:
    config = SimConfig(output_tokens=5, runs_to_max_tokens=runs_to_max_tokens)
    with ServerThread(build_app(config)) as server:
        oai = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
        ask: Any = [{"role": "user", "content": "hi"}]
        long = oai.chat.completions.create(model="m", messages=ask, max_tokens=40)
        short = oai.chat.completions.create(model="m", messages=ask, max_tokens=3)
    assert long.usage is not None and short.usage is not None
    if runs_to_max_tokens:
        assert (long.usage.completion_tokens, long.choices[0].finish_reason) == (40, "length")
    else:
        assert (long.usage.completion_tokens, long.choices[0].finish_reason) == (5, "stop")
    assert (short.usage.completion_tokens, short.choices[0].finish_reason) == (3, "length")
    assert SimConfig().updated({"runs_to_max_tokens": False}).runs_to_max_tokens is False
