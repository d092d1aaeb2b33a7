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
from hasten.config.routing import RoutingConfig
from hasten.upstream.client import request_traits

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


# --- what prefix affinity reads (Api.affinity_view) -------------------------------------


def _key(api: Any, body: dict[str, Any], max_chars: int = 32_768) -> int | None:
    traits = request_traits(
        api.affinity_view(body),
        RoutingConfig(affinity_min_prefix_chars=64, affinity_max_prefix_chars=max_chars),
        is_stream=True,
        is_idempotent=True,
    )
    return traits.affinity_key


def _next_turn(api: Any, body: dict[str, Any], said: str) -> dict[str, Any]:
    if api is RESPONSES_API:
        return {**body, "input": [*body["input"], {"role": "user", "content": said}]}
    turn = {"role": "user", "content": [{"type": "text", "text": said}]}
    return {**body, "messages": [*body["messages"], {"role": "assistant", "content": "ok"}, turn]}


@pytest.mark.parametrize("api", [RESPONSES_API, MESSAGES_API], ids=["responses", "messages"])
@given(said=st.text(max_size=40), later=st.text(max_size=40))
def test_a_conversation_keeps_its_affinity_key_once_its_head_is_long(
    api: Any, said: str, later: str
) -> None:
    # Read natively, without translating: the last item never counts, so two requests that
    # differ only in it share a key; past max_chars the head alone does.
    body = CODEX if api is RESPONSES_API else CLAUDE
    assert _key(api, body) is not None
    assert _key(api, _next_turn(api, body, said)) == _key(api, _next_turn(api, body, later))
    grown = _next_turn(api, _next_turn(api, body, said), later)
    assert _key(api, grown, max_chars=128) == _key(api, body, max_chars=128)


def test_the_system_prompt_and_tools_are_in_the_affinity_key() -> None:
    assert _key(RESPONSES_API, {**CODEX, "instructions": "Other."}) != _key(RESPONSES_API, CODEX)
    assert _key(MESSAGES_API, {**CLAUDE, "system": "Other."}) != _key(MESSAGES_API, CLAUDE)
    assert _key(MESSAGES_API, {**CLAUDE, "tools": []}) != _key(MESSAGES_API, CLAUDE)


def test_a_request_without_a_chat_form_still_has_an_affinity_key() -> None:
    # A built-in tool: no chat view, but the same prefix to share.
    body = {**CODEX, "tools": [{"type": "web_search"}]}
    assert RESPONSES_API.chat_view(body) is None
    assert _key(RESPONSES_API, body) is not None


def test_the_router_reads_each_apis_output_bound() -> None:
    def expected(api: Any, body: dict[str, Any]) -> int:
        view = api.affinity_view(body)
        return request_traits(
            view, RoutingConfig(), is_stream=False, is_idempotent=True
        ).expected_tokens

    assert expected(RESPONSES_API, {**CODEX, "max_output_tokens": 777}) == 777
    assert expected(RESPONSES_API, CODEX) == 0
    assert expected(MESSAGES_API, CLAUDE) == 32000


MARK = {"type": "ephemeral"}
# Where Anthropic reads a breakpoint: a tool, a system block, a message's content block, and
# a block inside a tool result.
MARKED_PATHS: tuple[tuple[Any, ...], ...] = (
    ("tools", 0, "cache_control"),
    ("system", 0, "cache_control"),
    ("messages", 0, "content", 0, "cache_control"),
    ("messages", 2, "content", 0, "cache_control"),
    ("messages", 2, "content", 0, "content", 0, "cache_control"),
)
AGENT_TURN: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 1024,
    "system": [{"type": "text", "text": "You are Claude Code."}],
    "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "run the tests"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"c": "ls"}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "ok"}],
                }
            ],
        },
    ],
}


@given(marked=st.sets(st.sampled_from(range(len(MARKED_PATHS)))))
def test_breakpoints_wherever_anthropic_reads_them_leave_the_key(marked: set[int]) -> None:
    body = AGENT_TURN
    for index in marked:
        body = _changed(body, MARKED_PATHS[index], MARK)
    assert MESSAGES_API.key_view(body) == MESSAGES_API.key_view(AGENT_TURN)


def test_a_cache_control_inside_a_tool_input_is_the_input_and_keyed() -> None:
    path = ("messages", 1, "content", 0, "input", "cache_control")
    changed = _changed(AGENT_TURN, path, MARK)
    assert MESSAGES_API.key_view(changed) != MESSAGES_API.key_view(AGENT_TURN)


def test_an_unmarked_history_is_keyed_without_a_copy() -> None:
    view = MESSAGES_API.key_view(AGENT_TURN)
    assert view["messages"] is AGENT_TURN["messages"]
    assert view["system"] is AGENT_TURN["system"] and view["tools"] is AGENT_TURN["tools"]


def test_stripping_a_marker_leaves_the_clients_body_as_it_was() -> None:
    body = _changed(AGENT_TURN, MARKED_PATHS[4], MARK)
    before = copy.deepcopy(body)
    MESSAGES_API.key_view(body)
    assert body == before
