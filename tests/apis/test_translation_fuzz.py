"""Every request translator, fed requests its API's check let through but shaped in ways
nobody planned for, answers with a translation or an ``InvalidRequest`` naming what it
could not translate: never another exception (a 500 and a traceback in the gateway).

The requests are valid ones (the round-trip strategies) with a few values swapped for
odd ones or taken out, so most still pass the check and reach the translator.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hasten.apis import messages, responses
from hasten.apis.messages_chat import (
    ChatToMessagesStream,
    MessagesToChatStream,
    chat_request_to_messages,
    messages_request_to_chat,
)
from hasten.apis.responses_chat import (
    ChatToResponsesStream,
    chat_request_to_responses,
    responses_request_to_chat,
)
from hasten.errors import InvalidRequest
from hasten.proxy.validation import check_chat
from tests.apis.test_messages_chat import messages_requests
from tests.apis.test_responses_chat import chat_requests, responses_requests

DELETE = object()
odd_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.just(1.5),
    st.sampled_from(["", "x", "{", "[1]", "data:image/png;base64,", "function", "text", "image"]),
    st.just([]),
    st.just({}),
    st.just([{}]),
    st.just({"type": "text"}),
    st.just([{"type": "image_url"}]),
    st.just(DELETE),
)


def positions(value: Any) -> list[tuple[Any, Any]]:
    """Every (container, key or index) inside ``value``."""
    found: list[tuple[Any, Any]] = []
    if isinstance(value, dict):
        for key, inner in value.items():
            found.append((value, key))
            found.extend(positions(inner))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found.append((value, index))
            found.extend(positions(inner))
    return found


@st.composite
def mutated(draw: st.DrawFn, valid: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    body = copy.deepcopy(draw(valid))
    for _ in range(draw(st.integers(1, 3))):
        spots = positions(body)
        if not spots:
            break
        container, key = spots[draw(st.integers(0, len(spots) - 1))]
        replacement = draw(odd_values)
        if replacement is DELETE:
            del container[key]
        else:
            container[key] = copy.deepcopy(replacement)
    return body


def translates_or_refuses(
    body: dict[str, Any],
    check: Callable[[dict[str, Any]], None],
    translations: tuple[Callable[[dict[str, Any]], Any], ...],
) -> None:
    try:
        check(body)
    except InvalidRequest:
        return
    for translate in translations:
        try:
            translate(copy.deepcopy(body))
        except InvalidRequest as error:
            assert error.param, error.message


def fuzz(num_examples: int) -> settings:
    return settings(
        max_examples=num_examples, deadline=None, suppress_health_check=list(HealthCheck)
    )


# A mutated request passes its API's check about 1 time in 8 (Responses), 25 (Messages)
# or 3 (chat): the example counts give each translator about a hundred odd requests.
@fuzz(800)
@given(mutated(responses_requests))
def test_responses_to_chat_raises_only_invalid_request(body: dict[str, Any]) -> None:
    translates_or_refuses(body, responses.check_request, (responses_request_to_chat,))


@fuzz(2000)
@given(mutated(messages_requests))
def test_messages_to_chat_raises_only_invalid_request(body: dict[str, Any]) -> None:
    translates_or_refuses(body, messages.check_request, (messages_request_to_chat,))


@fuzz(400)
@given(mutated(chat_requests))
def test_chat_to_others_raise_only_invalid_request(body: dict[str, Any]) -> None:
    translates_or_refuses(body, check_chat, (chat_request_to_responses, chat_request_to_messages))


# --- streams: an upstream's odd events are ValueErrors, never anything else ----------------

EVENT_KEYS = (
    "type", "index", "delta", "content", "tool_calls", "function", "name", "arguments",
    "id", "choices", "finish_reason", "usage", "message", "content_block", "text",
    "partial_json", "reasoning_content", "refusal", "logprobs", "thinking", "stop_reason",
    "model",
)  # fmt: skip
event_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 3) | st.sampled_from(["", "x", "text_delta"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(EVENT_KEYS), inner, max_size=5)
    ),
    max_leaves=20,
)


@fuzz(300)
@given(st.lists(event_values, min_size=1, max_size=6))
def test_stream_translators_refuse_odd_events_with_value_errors(events: list[Any]) -> None:
    translators: list[Any] = [
        ChatToResponsesStream({"model": "m"}, created_at=0),
        ChatToMessagesStream(model="m"),
        MessagesToChatStream(created=0),
    ]
    for translator in translators:
        for event in events:
            if not isinstance(event, dict):
                continue
            try:
                translator.feed(event)
            except ValueError:
                break
        translator.finish()
