"""The Responses API wire format: request checks, events, merge, replay, parsed by the SDK."""

from __future__ import annotations

from typing import Any

import openai
import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseFailedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseTextDeltaEvent,
)

from hasten.apis.responses import (
    Refresher,
    StreamMerge,
    _is_plain_item,
    body_to_events,
    check_input_item,
    check_request,
    error_body,
    event_error,
    failed_event,
    frame,
    is_complete,
    is_output_event,
    is_previous_not_found,
    is_terminal,
    last_user_text,
    max_output_tokens,
    new_response,
    usage_of,
)
from hasten.apis.usage import Usage
from hasten.errors import InvalidRequest
from tests.apis.sdk_transport import Canned, openai_client

RESPONSE_ID = "resp_" + "a" * 48


def message_item(text: str, item_id: str = "msg_" + "b" * 48) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def call_item(arguments: str, item_id: str = "fc_" + "c" * 48) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "status": "completed",
        "call_id": "call_abc",
        "name": "get_weather",
        "arguments": arguments,
    }


def completed_body(*items: dict[str, Any], status: str = "completed") -> dict[str, Any]:
    request = {"model": "gpt-test", "input": "hi", "temperature": 0}
    return new_response(
        request,
        response_id=RESPONSE_ID,
        created_at=1_700_000_000,
        status=status,
        output=list(items),
        usage=Usage(100, 12, 64),
        incomplete_reason="max_output_tokens" if status == "incomplete" else None,
    )


def sse(events: list[dict[str, Any]]) -> bytes:
    return b"".join(frame(event) for event in events)


# --- requests ---------------------------------------------------------------------------


def test_a_minimal_request_passes() -> None:
    check_request({"model": "m", "input": "hello"})
    check_request(
        {
            "model": "m",
            "input": [
                {"role": "user", "content": "hi"},
                {
                    "type": "message",
                    "role": "developer",
                    "content": [{"type": "input_text", "text": "x"}],
                },
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "ok"},
                {"type": "reasoning", "id": "rs_1", "summary": []},
            ],
            "instructions": "be brief",
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "f"},
            "text": {"format": {"type": "json_schema", "name": "x", "schema": {}}},
            "reasoning": {"effort": "low"},
            "metadata": {"session": "1"},
            "include": ["reasoning.encrypted_content"],
            "stream": True,
            "stream_options": {"include_obfuscation": False},
            "some_future_field": {"passes": True},
        }
    )


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x"}, "model"),
        ({"model": "", "input": "x"}, "model"),
        ({"model": "m"}, "input"),
        ({"model": "m", "input": 3}, "input"),
        ({"model": "m", "input": [3]}, "input[0]"),
        ({"model": "m", "input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"model": "m", "input": [{"role": "user", "content": 5}]}, "input[0].content"),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_text"}]}]},
            "input[0].content[0].text",
        ),
        ({"model": "m", "input": [{"type": "function_call", "name": "f"}]}, "input[0].call_id"),
        (
            {"model": "m", "input": [{"type": "function_call_output", "call_id": "c"}]},
            "input[0].output",
        ),
        (
            {"model": "m", "input": [{"type": "function_call_output", "output": "x"}]},
            "input[0].call_id",
        ),
        ({"model": "m", "input": "x", "temperature": 3}, "temperature"),
        ({"model": "m", "input": "x", "top_p": -1}, "top_p"),
        ({"model": "m", "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": "m", "input": "x", "max_output_tokens": True}, "max_output_tokens"),
        ({"model": "m", "input": "x", "stream": "yes"}, "stream"),
        ({"model": "m", "input": "x", "background": True, "store": False}, "background"),
        ({"model": "m", "input": "x", "tools": {}}, "tools"),
        ({"model": "m", "input": "x", "tools": [{"type": "function"}]}, "tools[0].name"),
        ({"model": "m", "input": "x", "tool_choice": "sometimes"}, "tool_choice"),
        ({"model": "m", "input": "x", "tool_choice": {"type": "function"}}, "tool_choice.name"),
        ({"model": "m", "input": "x", "text": {"format": {"type": "xml"}}}, "text.format.type"),
        (
            {"model": "m", "input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}},
            "text.format.schema",
        ),
        ({"model": "m", "input": "x", "metadata": {"k": 1}}, "metadata.k"),
        ({"model": "m", "input": "x", "metadata": {str(i): "v" for i in range(17)}}, "metadata"),
        ({"model": "m", "input": "x", "previous_response_id": ""}, "previous_response_id"),
        ({"model": "m", "input": "x", "include": [1]}, "include"),
        ({"model": "m", "input": "x", "truncation": "sometimes"}, "truncation"),
        ({"model": "m", "input": "x", "stream_options": {}}, "stream_options"),
        ({"model": "m", "input": "x", "reasoning": {"effort": 3}}, "reasoning.effort"),
    ],
)
def test_an_invalid_request_is_a_400_naming_the_param(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        check_request(body)
    assert caught.value.param == param
    assert caught.value.status_code == 400
    assert param.split("[")[0].split(".")[0] in caught.value.message


def test_a_named_tool_output_needs_no_call_id() -> None:
    """Codex 0.171 adds its own context as an output of a tool the model never called."""
    item = {
        "type": "function_call_output",
        "id": "fco_1",
        "name": "goal_objective",
        "namespace": "agent",
        "output": "ship it",
    }
    check_request({"model": "m", "input": [{"role": "user", "content": "hi"}, item]})
    with pytest.raises(InvalidRequest) as caught:
        check_request({"model": "m", "input": [{**item, "call_id": ""}]})
    assert caught.value.param == "input[0].call_id"


def test_input_may_be_left_out_with_a_previous_response() -> None:
    check_request({"model": "m", "previous_response_id": "resp_1"})


def test_last_user_text() -> None:
    assert last_user_text({"input": "  What is   the capital? "}) == "What is the capital?"
    body = {
        "input": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "answer"},
            {"role": "user", "content": [{"type": "input_text", "text": "second"}]},
        ]
    }
    assert last_user_text(body) == "second"
    # An agent turn ending with a tool's output, or an image: no plain question.
    tool_turn = {"input": [{"type": "function_call_output", "call_id": "c", "output": "5"}]}
    assert last_user_text(tool_turn) is None
    image = {
        "input": [
            {
                "role": "user",
                "content": [{"type": "input_image", "image_url": "http://x/a.png"}],
            }
        ]
    }
    assert last_user_text(image) is None
    assert last_user_text({"input": []}) is None


def test_max_output_tokens() -> None:
    assert max_output_tokens({"max_output_tokens": 50}) == 50
    assert max_output_tokens({}) is None
    assert max_output_tokens({"max_output_tokens": True}) is None


# --- events -----------------------------------------------------------------------------


def test_event_kinds() -> None:
    events = body_to_events(orjson.dumps(completed_body(message_item("Paris."))))
    kinds = [event["type"] for event in events]
    first_output = next(i for i, event in enumerate(events) if is_output_event(event))
    assert kinds[first_output] == "response.output_text.delta"
    assert [is_terminal(event) for event in events] == [False] * (len(events) - 1) + [True]
    assert is_complete(events[-1])
    assert usage_of(events[-1]) == Usage(100, 12, 64)
    assert usage_of(events[0]) is None
    call = body_to_events(orjson.dumps(completed_body(call_item("{}"))))
    # A function call is output as soon as its item is added: the model chose to call.
    assert call[2]["type"] == "response.output_item.added" and is_output_event(call[2])


def test_event_error() -> None:
    failed = failed_event("boom", "server_error", response_id="resp_1", model="m")
    error = event_error(failed)
    assert error is not None and error.code == "server_error" and "boom" in error.message
    assert is_terminal(failed) and not is_complete(failed)
    error = event_error({"type": "error", "message": "bad", "code": None})
    assert error is not None and error.code == "upstream_stream_error"
    assert event_error({"type": "response.output_text.delta"}) is None


def test_frame() -> None:
    event = {"type": "response.created", "sequence_number": 0}
    expected = b'event: response.created\ndata: {"type":"response.created","sequence_number":0}\n\n'
    assert frame(event) == expected
    assert frame(orjson.dumps(event)) == expected
    with pytest.raises(ValueError):
        frame({"type": "a\nb"})
    with pytest.raises(ValueError):
        frame(b"[1]")


def test_error_body_is_openai_shaped() -> None:
    assert orjson.loads(error_body(400, "bad", "invalid_value", "input")) == {
        "error": {
            "message": "bad",
            "type": "invalid_request_error",
            "param": "input",
            "code": "invalid_value",
        }
    }
    assert orjson.loads(error_body(503, "down"))["error"]["type"] == "server_error"
    assert orjson.loads(error_body(429, "slow"))["error"]["type"] == "rate_limit_error"


# --- merge and replay -------------------------------------------------------------------


@pytest.mark.parametrize("status", ["completed", "incomplete"])
def test_body_to_events_and_back(status: str) -> None:
    body = completed_body(
        message_item("It is sunny."), call_item('{"city":"Paris"}'), status=status
    )
    events = body_to_events(orjson.dumps(body))
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    merge = StreamMerge()
    for event in events:
        merge.add(event)
    assert merge.is_whole
    assert orjson.loads(merge.body()) == body


def test_merge_builds_the_output_from_items_when_the_final_event_has_none() -> None:
    body = completed_body(message_item("abc"))
    events = body_to_events(orjson.dumps(body))
    events[-1] = {**events[-1], "response": {**events[-1]["response"], "output": []}}
    merge = StreamMerge()
    for event in events:
        merge.add(event)
    assert orjson.loads(merge.body())["output"] == body["output"]


def test_merge_refuses_a_stream_that_is_not_whole() -> None:
    events = body_to_events(orjson.dumps(completed_body(message_item("abc"))))
    merge = StreamMerge()
    for event in events[:-1]:
        merge.add(event)
    with pytest.raises(ValueError):
        merge.body()
    snapshot = merge.snapshot()
    assert snapshot is not None and snapshot["output"][0]["content"][0]["text"] == "abc"
    merge.add(failed_event("cut", response=snapshot, sequence_number=99))
    with pytest.raises(ValueError):
        merge.body()
    with pytest.raises(ValueError):
        StreamMerge().add({"type": "response.output_text.delta", "output_index": 0})
    with pytest.raises(ValueError):
        StreamMerge().add({"no": "type"})


def test_body_to_events_refuses_what_is_not_a_whole_response() -> None:
    for body in (b"[]", b'{"object": "chat.completion"}'):
        with pytest.raises(ValueError):
            body_to_events(body)
    with pytest.raises(ValueError):
        body_to_events(orjson.dumps(completed_body(status="in_progress")))


def test_refresher_gives_fresh_ids_and_numbers_and_keeps_call_ids() -> None:
    body = completed_body(message_item("hi"), call_item("{}"))
    events = body_to_events(orjson.dumps(body))[3:]  # as if stored with other numbers
    refresher = Refresher(created_at=1_800_000_000)
    fresh_body = orjson.loads(refresher.body(orjson.dumps(body)))
    fresh_events = refresher.events(events)
    assert fresh_body["id"].startswith("resp_") and fresh_body["id"] != RESPONSE_ID
    assert fresh_body["created_at"] == 1_800_000_000
    assert [event["sequence_number"] for event in fresh_events] == list(range(len(events)))
    message_id, call_id = (item["id"] for item in fresh_body["output"])
    assert message_id.startswith("msg_") and message_id != body["output"][0]["id"]
    assert call_id.startswith("fc_") and call_id != body["output"][1]["id"]
    assert fresh_body["output"][1]["call_id"] == "call_abc"
    # Events name the same fresh ids as the body.
    named = {event.get("item_id") for event in fresh_events} | {
        event["item"]["id"] for event in fresh_events if "item" in event
    }
    assert named - {None} == {message_id, call_id}
    assert fresh_events[-1]["response"]["id"] == fresh_body["id"]
    # The stored copies are untouched, and two replays differ.
    assert body["output"][0]["id"] == "msg_" + "b" * 48
    assert Refresher(1).response_id != Refresher(1).response_id


# --- the openai SDK parses what these build ---------------------------------------------


def test_sdk_streams_every_event() -> None:
    body = completed_body(message_item("Paris is the capital."))
    canned = Canned(sse(body_to_events(orjson.dumps(body))), is_stream=True)
    client = openai_client(canned)
    stream = client.responses.create(model="gpt-test", input="capital?", stream=True)
    events = list(stream)
    assert isinstance(events[0], ResponseCreatedEvent)
    deltas = [event.delta for event in events if isinstance(event, ResponseTextDeltaEvent)]
    assert "".join(deltas) == "Paris is the capital."
    assert isinstance(events[-1], ResponseCompletedEvent)
    assert events[-1].response.output_text == "Paris is the capital."
    assert events[-1].response.usage is not None
    assert events[-1].response.usage.input_tokens_details.cached_tokens == 64


def test_sdk_stream_helper_gets_the_final_response_with_a_function_call() -> None:
    body = completed_body(call_item('{"city": "Paris"}'))
    canned = Canned(sse(body_to_events(orjson.dumps(body))), is_stream=True)
    client = openai_client(canned)
    tools: Any = [{"type": "function", "name": "get_weather", "parameters": {}, "strict": False}]
    with client.responses.stream(model="gpt-test", input="weather?", tools=tools) as stream:
        argument_deltas = [
            event for event in stream if isinstance(event, ResponseFunctionCallArgumentsDeltaEvent)
        ]
        final = stream.get_final_response()
    assert argument_deltas and argument_deltas[-1].snapshot == '{"city": "Paris"}'
    call = final.output[0]
    assert call.type == "function_call" and call.call_id == "call_abc"
    assert call.arguments == '{"city": "Paris"}'


def test_sdk_sees_a_failed_stream_as_failed() -> None:
    body = completed_body(message_item("Paris"))
    events = body_to_events(orjson.dumps(body))[:-2]
    merge = StreamMerge()
    for event in events:
        merge.add(event)
    events.append(
        failed_event("upstream broke", response=merge.snapshot(), sequence_number=len(events))
    )
    client = openai_client(Canned(sse(events), is_stream=True))
    parsed = list(client.responses.create(model="gpt-test", input="x", stream=True))
    assert isinstance(parsed[-1], ResponseFailedEvent)
    assert parsed[-1].response.error is not None
    assert parsed[-1].response.error.message == "upstream broke"
    with client.responses.stream(model="gpt-test", input="x") as stream:
        for _ in stream:
            pass
        with pytest.raises(RuntimeError):
            stream.get_final_response()


def test_sdk_parses_a_whole_response_and_an_error() -> None:
    body = completed_body(message_item("Paris."))
    client = openai_client(Canned(orjson.dumps(body)))
    response = client.responses.create(model="gpt-test", input="capital?")
    assert response.output_text == "Paris." and response.id == RESPONSE_ID
    assert response.usage is not None and response.usage.total_tokens == 112
    error = Canned(error_body(400, "Invalid 'input'.", "invalid_value", "input"), status=400)
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client(error).responses.create(model="gpt-test", input="x")
    assert caught.value.code == "invalid_value" and caught.value.param == "input"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            b'{"error": {"message": "Previous response with id \'resp_1\' not found.", '
            b'"type": "invalid_request_error", "param": "previous_response_id", '
            b'"code": "previous_response_not_found"}}',
            True,
        ),
        # A terser backend's words: no param, no code of its own.
        (
            b'{"error": {"message": "Invalid `previous_response_id`.", '
            b'"type": "invalid_request_error", "code": "invalid_request_error"}}',
            True,
        ),
        (b'{"error": {"message": "bad", "param": "temperature", "code": null}}', False),
        (b'{"error": "previous_response_id"}', False),
        (b"previous_response_id: not JSON", False),
        (b"[1, 2]", False),
    ],
)
def test_an_unknown_previous_response_is_recognised(body: bytes, expected: bool) -> None:
    assert is_previous_not_found(body) is expected


# --- the plain-history fast path of the request check -----------------------------------

_item_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-1, 2),
    st.sampled_from(["", "x", "call_1", "shell", "{}"]),
    st.just({}),
    st.just([]),
)
_parts = st.one_of(
    _item_values,
    st.fixed_dictionaries(
        {"type": st.sampled_from(["input_text", "output_text", "refusal", "input_image", 1])},
        optional={"text": _item_values, "refusal": _item_values},
    ),
)
_items = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(
            ["message", "function_call", "function_call_output", "reasoning", None, 2]
        ),
        "role": st.sampled_from(["user", "assistant", "developer", "system", "tool", None]),
        "content": st.one_of(_item_values, st.lists(_parts, max_size=3)),
        "call_id": _item_values,
        "name": _item_values,
        "arguments": _item_values,
        "output": _item_values,
    },
)
_TEXT = {"type": "input_text", "text": "hi"}


@settings(max_examples=400)
@given(item=_items)
@example({"type": "function_call", "call_id": "c", "name": "", "arguments": "{}"})
@example({"type": "function_call_output", "call_id": "", "output": "ok"})
@example({"role": "user", "content": [_TEXT, {"type": "input_text", "text": None}]})
@example({"type": "message", "role": "tool", "content": "hi"})
def test_the_fast_path_passes_only_items_the_full_check_passes(item: dict[str, Any]) -> None:
    """``_is_plain_item`` lets an item skip ``check_input_item``: it must never let through
    one the full check refuses."""
    if _is_plain_item(item):
        check_input_item(item, "input[0]")
