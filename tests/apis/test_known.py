"""What of a Responses or Messages request keys its cached answer (``Api.key_view``): the
per-run values coding agents send (found by diffing two runs of Codex CLI 0.171 and Claude
Code 2.1.332, bench/clients/agents_e2e.py) are left out; whatever can change the answer
stays in."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hasten.apis.known import MESSAGES_API, RESPONSES_API

# As Codex sends a turn (abridged): ids minted per run on its own items, its session in
# client_metadata and prompt_cache_key.
CODEX: dict[str, Any] = {
    "model": "gpt-5-codex",
    "stream": True,
    "store": False,
    "instructions": "You are a coding agent.",
    "input": [
        {"type": "message", "id": "msg_1", "role": "developer", "content": "be precise"},
        {"type": "message", "id": "msg_2", "role": "user", "content": "fix the test"},
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "exec_command",
            "arguments": '{"cmd":"pytest"}',
        },
        {"type": "function_call_output", "id": "fco_1", "call_id": "call_1", "output": "1 failed"},
    ],
    "tools": [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}],
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "reasoning": {"effort": "medium"},
    "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "thread-1",
    "client_metadata": {"session_id": "s-1", "thread_id": "t-1", "turn_id": "u-1"},
}
# As Claude Code sends a turn (abridged): its session in metadata.user_id, cache_control
# breakpoints.
CLAUDE: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 32000,
    "stream": True,
    "system": [
        {"type": "text", "text": "You are Claude Code."},
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
    ],
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "fix the test", "cache_control": {"type": "ephemeral"}}
            ],
        }
    ],
    "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
    "thinking": {"type": "adaptive"},
    "metadata": {"user_id": '{"device_id":"d","account_uuid":"","session_id":"s-1"}'},
}
ids = st.text(alphabet="abcdef0123456789-", min_size=1, max_size=36)


@given(
    session=ids,
    turn=ids,
    item_ids=st.lists(ids, min_size=4, max_size=4),
    is_stream=st.booleans(),
    is_stored=st.booleans(),
)
def test_codex_per_run_values_are_not_keyed(
    session: str, turn: str, item_ids: list[str], is_stream: bool, is_stored: bool
) -> None:
    other = copy.deepcopy(CODEX)
    other["client_metadata"] = {"session_id": session, "thread_id": session, "turn_id": turn}
    other["prompt_cache_key"] = session
    other["stream"], other["store"] = is_stream, is_stored
    for item, item_id in zip(other["input"], item_ids, strict=True):
        item["id"] = item_id
    assert RESPONSES_API.key_view(other) == RESPONSES_API.key_view(CODEX)


@given(session=ids, device=ids, is_stream=st.booleans(), is_marked=st.booleans())
def test_claude_code_per_run_values_are_not_keyed(
    session: str, device: str, is_stream: bool, is_marked: bool
) -> None:
    other = copy.deepcopy(CLAUDE)
    other["metadata"] = {"user_id": f'{{"device_id":"{device}","session_id":"{session}"}}'}
    other["stream"] = is_stream
    if not is_marked:
        del other["system"][1]["cache_control"]
        del other["messages"][0]["content"][0]["cache_control"]
    assert MESSAGES_API.key_view(other) == MESSAGES_API.key_view(CLAUDE)


def _changed(body: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(body)
    target = changed
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return changed


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("model",), "gpt-5"),
        (("instructions",), "You are terse."),
        (("input", 1, "content"), "fix the build"),
        (("input", 2, "arguments"), '{"cmd":"make"}'),
        (("input", 3, "output"), "all passed"),
        (("input", 3, "call_id"), "call_2"),
        (("tools", 0, "name"), "shell"),
        (("tool_choice",), "required"),
        (("reasoning", "effort"), "high"),
        (("temperature",), 0.2),
        (("max_output_tokens",), 100),
        (("text",), {"format": {"type": "json_object"}}),
    ],
)
def test_what_can_change_a_responses_answer_stays_keyed(path: tuple[Any, ...], value: Any) -> None:
    assert RESPONSES_API.key_view(_changed(CODEX, path, value)) != RESPONSES_API.key_view(CODEX)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("model",), "claude-haiku-4-5"),
        (("max_tokens",), 1024),
        (("system", 0, "text"), "You are terse."),
        (("messages", 0, "content", 0, "text"), "fix the build"),
        (("tools", 0, "name"), "Shell"),
        (("thinking",), {"type": "disabled"}),
        (("temperature",), 0.0),
        (("stop_sequences",), ["END"]),
        (("tool_choice",), {"type": "any"}),
        (("context_management",), {"edits": [{"type": "clear_tool_uses_20250919"}]}),
        (("output_config",), {"effort": "low"}),
    ],
)
def test_what_can_change_a_messages_answer_stays_keyed(path: tuple[Any, ...], value: Any) -> None:
    assert MESSAGES_API.key_view(_changed(CLAUDE, path, value)) != MESSAGES_API.key_view(CLAUDE)
