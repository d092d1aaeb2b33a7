"""Unit tests for hasten.simulator.generation: how many tokens, and the choices generated."""

from __future__ import annotations

import orjson
import pytest

from hasten.errors import InvalidRequest
from hasten.simulator.generation import generate_choices, target_num_tokens
from hasten.simulator.inputs import parse_chat_request, parse_completion_request


def test_target_num_tokens_precedence() -> None:
    assert target_num_tokens(16, None, None) == (16, False)
    assert target_num_tokens(16, 5, None) == (5, True)
    assert target_num_tokens(16, None, 3) == (3, False)
    assert target_num_tokens(16, 5, 3) == (3, False)
    assert target_num_tokens(16, 5, 9) == (5, True)


def test_generation_honours_n_max_tokens_and_stop() -> None:
    request = parse_chat_request(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 3, "max_tokens": 4}
    )
    choices = generate_choices(request, 16, None)
    assert len(choices) == 3
    assert all(len(c.pieces) == 4 and c.finish_reason == "length" for c in choices)
    first_word = choices[0].pieces[1].strip()
    stopped = parse_chat_request(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stop": [first_word]}
    )
    assert generate_choices(stopped, 16, None)[0].finish_reason == "stop"


def _chat(**extra: object) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}


TOOLS = [{"type": "function", "function": {"name": n}} for n in ("a", "b", "c")]


def test_tools_are_called_with_arguments_made_of_the_generated_words() -> None:
    request = parse_chat_request(_chat(tools=TOOLS, n=2, max_tokens=7))
    choices = generate_choices(request, 16, None)
    for choice in choices:
        assert [call.name for call in choice.tool_calls] == ["a", "b", "c"]
        assert len(choice.pieces) == 7 and choice.finish_reason == "length"
        arguments = ["".join(pieces) for pieces in choice.call_pieces()]
        assert all(orjson.loads(text)["text"] for text in arguments)
    ids = [call.call_id for choice in choices for call in choice.tool_calls]
    assert len(set(ids)) == 6 and all(i.startswith("call_") and len(i) == 29 for i in ids)
    again = generate_choices(parse_chat_request(_chat(tools=TOOLS, n=2, max_tokens=7)), 16, None)
    assert again == choices  # the same request, the same calls


def test_tool_choice_picks_which_tools_are_called() -> None:
    named = {"type": "function", "function": {"name": "b"}}
    assert parse_chat_request(_chat(tools=TOOLS, tool_choice=named)).tool_names == ("b",)
    assert parse_chat_request(_chat(tools=TOOLS, tool_choice="none")).tool_names == ()
    single = parse_chat_request(_chat(tools=TOOLS, parallel_tool_calls=False))
    assert single.tool_names == ("a",)
    (choice,) = generate_choices(single, 16, None)
    assert choice.finish_reason == "tool_calls" and len(choice.tool_calls) == 1


@pytest.mark.parametrize(
    "extra",
    [
        {"tools": "a"},
        {"tools": [{"type": "function"}]},
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "z"}}},
        {"logprobs": True, "top_logprobs": 21},
    ],
)
def test_malformed_tools_and_logprobs_are_a_400(extra: dict[str, object]) -> None:
    with pytest.raises(InvalidRequest):
        parse_chat_request(_chat(**extra))


def test_logprobs_cover_every_token_with_the_asked_alternatives() -> None:
    request = parse_chat_request(_chat(logprobs=True, top_logprobs=4, max_tokens=6))
    (choice,) = generate_choices(request, 16, None)
    assert choice.logprobs is not None and len(choice.logprobs) == 6
    for piece, (logprob, top) in zip(choice.pieces, choice.logprobs, strict=True):
        assert logprob <= 0 and len(top) == 4 and top[0] == (piece, logprob)
    completion = parse_completion_request({"model": "m", "prompt": "hi", "logprobs": 0})
    assert completion.has_logprobs and completion.num_top_logprobs == 0
    assert generate_choices(parse_chat_request(_chat()), 16, None)[0].logprobs is None


@pytest.mark.parametrize(
    "continued",
    [
        {"continue_final_message": True, "add_generation_prompt": False},
        {"prefix": True},
    ],
)
def test_a_continued_assistant_message_gets_the_rest_of_its_answer(
    continued: dict[str, object],
) -> None:
    whole = generate_choices(parse_chat_request(_chat()), 16, None)[0]
    cut = len(whole.pieces[0]) + 2  # inside the second word
    prefix: dict[str, object] = {"role": "assistant", "content": whole.text[:cut]}
    extra = {k: v for k, v in continued.items() if k != "prefix"}
    if "prefix" in continued:
        prefix["prefix"] = True
    messages = [{"role": "user", "content": "hi"}, prefix]
    request = parse_chat_request({"model": "m", "messages": messages, **extra})
    rest = generate_choices(request, 16, None)[0]
    assert whole.text[:cut] + rest.text == whole.text
    assert rest.finish_reason == whole.finish_reason


def test_a_prefix_the_answer_does_not_begin_with_gets_a_fresh_continuation() -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Zebra", "prefix": True},
    ]
    rest = generate_choices(parse_chat_request({"model": "m", "messages": messages}), 16, None)
    whole = generate_choices(parse_chat_request(_chat()), 16, None)
    assert rest[0].text and rest[0].text != whole[0].text
    # Without a continuation flag, the assistant message is just history.
    history = {"role": "assistant", "content": "Zebra"}
    assert parse_chat_request({"model": "m", "messages": [*messages[:1], history]}).prefix == ""


def test_arguments_fill_the_schema_the_tool_declares() -> None:
    parameters = {
        "type": "object",
        "properties": {
            "unit": {"type": "string", "enum": ["c", "f"]},
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "note": {"type": "string"},
            "exact": {"type": ["boolean", "null"]},
        },
        "required": ["unit", "city", "days", "exact"],
        "additionalProperties": False,
    }
    tools = [{"type": "function", "function": {"name": "weather", "parameters": parameters}}]
    (choice,) = generate_choices(parse_chat_request(_chat(tools=tools)), 6, None)
    arguments = orjson.loads(choice.text)
    assert set(arguments) == {"unit", "city", "days", "exact"}
    assert arguments["city"].strip() and arguments["unit"] == "c"
    assert arguments["days"] == 0 and arguments["exact"] is False
    assert len(choice.pieces) == 6  # the words are still streamed one token at a time


def test_a_schema_without_a_free_string_gets_fixed_arguments_in_one_piece() -> None:
    parameters = {"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"]}
    tools = [{"type": "function", "function": {"name": "count", "parameters": parameters}}]
    (choice,) = generate_choices(parse_chat_request(_chat(tools=tools)), 6, None)
    assert choice.pieces == ['{"n":0}'] and choice.finish_reason == "tool_calls"


def _after_tool(**extra: object) -> dict[str, object]:
    call = {"id": "call_1", "type": "function", "function": {"name": "a", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        *extra.pop("then", []),  # type: ignore[misc]
    ]
    return {"model": "m", "messages": messages, "tools": TOOLS, **extra}


@pytest.mark.parametrize(
    "extra",
    [{}, {"tool_choice": "auto"}, {"then": [{"role": "user", "content": "<reminder>"}]}],
    ids=["default", "auto", "tool-result-then-user-text"],
)
def test_after_a_tool_result_the_model_answers_in_text(extra: dict[str, object]) -> None:
    request = parse_chat_request(_after_tool(**extra))
    assert request.tool_names == ()
    (choice,) = generate_choices(request, 5, None)
    assert choice.finish_reason == "stop" and not choice.tool_calls and choice.text


def test_a_required_or_named_tool_is_called_even_after_a_tool_result() -> None:
    assert parse_chat_request(_after_tool(tool_choice="required")).tool_names == ("a", "b", "c")
    named = {"type": "function", "function": {"name": "b"}}
    assert parse_chat_request(_after_tool(tool_choice=named)).tool_names == ("b",)
    follow_up = _after_tool(then=[{"role": "assistant", "content": "done"}])
    follow_up["messages"].append({"role": "user", "content": "again"})  # type: ignore[attr-defined]
    assert parse_chat_request(follow_up).tool_names == ("a", "b", "c")  # a new user turn
