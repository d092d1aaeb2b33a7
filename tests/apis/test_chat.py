from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.apis.chat import (
    CHAT_API,
    MAX_CHOICES,
    MAX_EXTRA_FIELDS,
    MAX_TOOL_CALLS,
    BodyMerge,
    ChoicesEnding,
    body_to_chunks,
    chunks_to_body,
    sse_frames,
    sse_stream,
)
from hasten.cache.entry import CachedAnswer
from hasten.cache.replay import answer_body, answer_frames
from hasten.values.usage import is_usage_chunk
from hasten.wire.sse import SSEDecoder

texts = st.text(max_size=40)
usages = st.fixed_dictionaries(
    {
        "prompt_tokens": st.integers(0, 10_000),
        "completion_tokens": st.integers(0, 10_000),
        "total_tokens": st.integers(0, 20_000),
    }
)
tool_calls = st.lists(
    st.fixed_dictionaries(
        {
            "id": st.text(min_size=1, max_size=10),
            "type": st.just("function"),
            "function": st.fixed_dictionaries({"name": texts, "arguments": texts}),
        }
    ),
    min_size=1,
    max_size=3,
)
token_logprobs = st.lists(
    st.fixed_dictionaries(
        {
            "token": texts,
            "logprob": st.floats(-20, 0),
            "bytes": st.lists(st.integers(0, 255), max_size=4),
            "top_logprobs": st.just([]),
        }
    ),
    max_size=3,
)
finish_reasons = st.sampled_from(["stop", "length", "tool_calls", "content_filter"])


@st.composite
def chat_messages(draw: st.DrawFn) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": draw(st.none() | texts),
        "refusal": draw(st.none() | texts),
    }
    if draw(st.booleans()):
        message["tool_calls"] = draw(tool_calls)
    return message


@st.composite
def chat_bodies(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(0, 3))
    body: dict[str, Any] = {
        "id": draw(st.text(min_size=1, max_size=12)),
        "object": "chat.completion",
        "created": draw(st.integers(0, 2**32)),
        "model": draw(texts),
    }
    if draw(st.booleans()):
        body["system_fingerprint"] = draw(st.text(min_size=1, max_size=8))
    body["choices"] = [
        {
            "index": i,
            "message": draw(chat_messages()),
            "logprobs": draw(
                st.none() | st.builds(lambda c: {"content": c, "refusal": None}, token_logprobs)
            ),
            "finish_reason": draw(finish_reasons),
        }
        for i in range(n)
    ]
    if draw(st.booleans()):
        body["usage"] = draw(usages)
    return body


@st.composite
def completion_bodies(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(0, 3))
    body: dict[str, Any] = {
        "id": draw(st.text(min_size=1, max_size=12)),
        "object": "text_completion",
        "created": draw(st.integers(0, 2**32)),
        "model": draw(texts),
        "choices": [],
    }
    for i in range(n):
        logprobs = None
        if draw(st.booleans()):
            tokens = draw(st.lists(texts, max_size=3))
            logprobs = {
                "tokens": tokens,
                "token_logprobs": [-0.5] * len(tokens),
                "top_logprobs": [{} for _ in tokens],
                "text_offset": list(range(len(tokens))),
            }
        body["choices"].append(
            {
                "text": draw(texts),
                "index": i,
                "logprobs": logprobs,
                "finish_reason": draw(finish_reasons),
            }
        )
    if draw(st.booleans()):
        body["usage"] = draw(usages)
    return body


def split(draw: st.DrawFn, text: str) -> list[str]:
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=4)))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@st.composite
def fragmented_streams(draw: st.DrawFn) -> tuple[dict[str, Any], list[bytes]]:
    """A chat.completion and an OpenAI-like stream of it with content and arguments in pieces."""
    body = draw(chat_bodies())
    head: dict[str, Any] = {
        k: body[k] for k in ("id", "created", "model", "system_fingerprint") if k in body
    }
    head["object"] = "chat.completion.chunk"
    has_usage = "usage" in body
    chunks: list[dict[str, Any]] = []
    for choice in body["choices"]:
        index, message = choice["index"], choice["message"]
        opening = {"role": "assistant", "content": "" if message["content"] is not None else None}
        chunks.append({"index": index, "delta": opening, "logprobs": None, "finish_reason": None})
        if message["content"] is not None:
            for piece in split(draw, message["content"]):
                chunks.append({"index": index, "delta": {"content": piece}})
        if message["refusal"] is not None:
            for piece in split(draw, message["refusal"]):
                chunks.append({"index": index, "delta": {"refusal": piece}})
        for call_index, call in enumerate(message.get("tool_calls", ())):
            first = {
                "index": call_index,
                "id": call["id"],
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""},
            }
            chunks.append({"index": index, "delta": {"tool_calls": [first]}})
            for piece in split(draw, call["function"]["arguments"]):
                more = {"index": call_index, "function": {"arguments": piece}}
                chunks.append({"index": index, "delta": {"tool_calls": [more]}})
        if choice["logprobs"] is not None:
            content = choice["logprobs"]["content"]
            cut = draw(st.integers(0, len(content)))
            for part in (content[:cut], content[cut:]):
                chunks.append({"index": index, "delta": {}, "logprobs": {"content": part}})
        chunks.append({"index": index, "delta": {}, "finish_reason": choice["finish_reason"]})
    # Interleave choices the way n > 1 streams do, keeping each choice's own order.
    order = draw(st.permutations(range(len(chunks))))
    by_choice: dict[int, list[dict[str, Any]]] = {}
    for chunk in chunks:
        by_choice.setdefault(chunk["index"], []).append(chunk)
    interleaved = []
    for position in order:
        owner = chunks[position]["index"]
        interleaved.append(by_choice[owner].pop(0))
    encoded = [
        orjson.dumps({**head, "choices": [c], **({"usage": None} if has_usage else {})})
        for c in interleaved
    ]
    if has_usage:
        encoded.append(orjson.dumps({**head, "choices": [], "usage": body["usage"]}))
    if not encoded:
        encoded.append(orjson.dumps({**head, "choices": []}))
    return body, encoded


def normalized_chat(body: dict[str, Any]) -> dict[str, Any]:
    for choice in body["choices"]:
        if choice["logprobs"] is not None:
            choice["logprobs"].setdefault("refusal", None)
    return body


@settings(deadline=None, max_examples=200)
@given(body=chat_bodies())
def test_chat_body_round_trips_through_chunks(body: dict[str, Any]) -> None:
    chunks = body_to_chunks(orjson.dumps(body), "chat")
    assert orjson.loads(chunks_to_body(chunks, "chat")) == body


@settings(deadline=None, max_examples=200)
@given(body=completion_bodies())
def test_completion_body_round_trips_through_chunks(body: dict[str, Any]) -> None:
    chunks = body_to_chunks(orjson.dumps(body), "completions")
    assert all(orjson.loads(c)["object"] == "text_completion" for c in chunks)
    assert orjson.loads(chunks_to_body(chunks, "completions")) == body


@settings(deadline=None, max_examples=200)
@given(stream=fragmented_streams())
def test_fragmented_stream_merges_into_body(stream: tuple[dict[str, Any], list[bytes]]) -> None:
    body, chunks = stream
    merged = orjson.loads(chunks_to_body(chunks, "chat"))
    assert normalized_chat(merged) == normalized_chat(body)


OPENAI_STREAM = [
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o",'
    b'"system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"role":"assistant","content":"",'
    b'"refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}',
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o",'
    b'"system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"Hello"},'
    b'"logprobs":null,"finish_reason":null}],"usage":null}',
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o",'
    b'"system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":", world"},'
    b'"logprobs":null,"finish_reason":null}],"usage":null}',
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o",'
    b'"system_fingerprint":"fp_1","choices":[{"index":0,"delta":{},"logprobs":null,'
    b'"finish_reason":"stop"}],"usage":null}',
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o",'
    b'"system_fingerprint":"fp_1","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,'
    b'"total_tokens":12}}',
]

OPENAI_TOOL_STREAM = [
    b'{"id":"c2","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
    b'"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a",'
    b'"type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]}',
    b'{"id":"c2","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
    b'"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"city\\":"}}]},'
    b'"finish_reason":null}]}',
    b'{"id":"c2","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
    b'"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":'
    b'{"name":"get_time","arguments":"{}"}}]},"finish_reason":null}]}',
    b'{"id":"c2","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
    b'"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\\"Paris\\"}"}}]},'
    b'"finish_reason":null}]}',
    b'{"id":"c2","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
    b'"delta":{},"finish_reason":"tool_calls"}]}',
]


def test_openai_stream_merges() -> None:
    body = orjson.loads(chunks_to_body(OPENAI_STREAM, "chat"))
    assert body == {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "gpt-4o",
        "system_fingerprint": "fp_1",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello, world", "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12},
    }


def test_tool_call_stream_merges_by_index() -> None:
    message = orjson.loads(chunks_to_body(OPENAI_TOOL_STREAM, "chat"))["choices"][0]["message"]
    assert message["content"] is None
    assert message["tool_calls"] == [
        {
            "id": "call_a",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
        },
        {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
    ]


def test_completion_stream_merges() -> None:
    chunks = [
        b'{"id":"cmpl-1","object":"text_completion","created":5,"model":"m","choices":'
        b'[{"text":"Once","index":0,"logprobs":null,"finish_reason":null}]}',
        b'{"id":"cmpl-1","object":"text_completion","created":5,"model":"m","choices":'
        b'[{"text":" upon","index":0,"logprobs":null,"finish_reason":"length"}]}',
    ]
    body = orjson.loads(chunks_to_body(chunks, "completions"))
    assert body["object"] == "text_completion"
    assert body["choices"] == [
        {"text": "Once upon", "index": 0, "logprobs": None, "finish_reason": "length"}
    ]


def test_body_to_chunks_shape() -> None:
    body = orjson.loads(chunks_to_body(OPENAI_TOOL_STREAM, "chat"))
    body["usage"] = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    chunks = [orjson.loads(c) for c in body_to_chunks(orjson.dumps(body), "chat")]
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == "c2" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    calls = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks[1:3]]
    assert [(c["index"], c["id"], c["type"]) for c in calls] == [
        (0, "call_a", "function"),
        (1, "call_b", "function"),
    ]
    assert chunks[3]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 3
    assert [is_usage_chunk(orjson.dumps(c)) for c in chunks] == [False] * 4 + [True]


def test_extra_message_fields_survive() -> None:
    body = {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "service_tier": "default",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "hi",
                    "refusal": None,
                    "annotations": [{"type": "url_citation"}],
                },
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
    }
    chunks = body_to_chunks(orjson.dumps(body), "chat")
    assert orjson.loads(chunks_to_body(chunks, "chat")) == body


def test_sse_frames() -> None:
    with_usage = sse_frames(OPENAI_STREAM, include_usage=True)
    assert with_usage == [b"data: " + c + b"\n\n" for c in OPENAI_STREAM] + [b"data: [DONE]\n\n"]
    without = sse_frames(OPENAI_STREAM, include_usage=False)
    assert without == [*with_usage[:-2], b"data: [DONE]\n\n"]
    assert sse_frames(OPENAI_TOOL_STREAM, include_usage=False)[-2].startswith(b"data: {")
    assert len(sse_frames(OPENAI_TOOL_STREAM, include_usage=False)) == 6
    assert sse_frames([], include_usage=False) == [b"data: [DONE]\n\n"]


def test_is_usage_chunk() -> None:
    assert is_usage_chunk(OPENAI_STREAM[-1])
    assert not any(is_usage_chunk(c) for c in OPENAI_STREAM[:-1])
    assert not is_usage_chunk(b'{"choices":[{"delta":{"content":"\\"usage\\""}}]}')
    assert not is_usage_chunk(b'not json with "usage"')


def test_answer_serves_either_form() -> None:
    stream = CachedAnswer.from_chunks(OPENAI_STREAM, endpoint="chat", ttl_s=60.0)
    body = chunks_to_body(OPENAI_STREAM, "chat")
    json_answer = CachedAnswer.from_body(body, endpoint="chat", ttl_s=60.0)
    assert answer_body(stream, CHAT_API) == body
    assert answer_body(json_answer, CHAT_API) is body
    assert answer_frames(stream, CHAT_API, include_usage=True) == sse_frames(OPENAI_STREAM, True)
    replayed = answer_frames(json_answer, CHAT_API, include_usage=False)
    assert replayed[-1] == b"data: [DONE]\n\n"
    payloads = [frame[len(b"data: ") : -2] for frame in replayed[:-1]]
    merged = orjson.loads(chunks_to_body(payloads, "chat"))
    assert merged["choices"] == orjson.loads(body)["choices"]
    assert "usage" not in merged
    with_usage = answer_frames(json_answer, CHAT_API, include_usage=True)
    assert is_usage_chunk(with_usage[-2][len(b"data: ") : -2])


def test_openai_sdk_accepts_replayed_shapes() -> None:
    chat_types = pytest.importorskip("openai.types.chat")
    body = chunks_to_body(OPENAI_TOOL_STREAM + OPENAI_STREAM[-1:], "chat")
    completion = chat_types.ChatCompletion.model_validate_json(body)
    assert completion.choices[0].message.tool_calls[0].function.arguments == '{"city":"Paris"}'
    for chunk in body_to_chunks(body, "chat"):
        chat_types.ChatCompletionChunk.model_validate_json(chunk)


@pytest.mark.parametrize(
    "chunks",
    [
        [b"not json"],
        [b"[1,2]"],
        [b'{"choices":[1]}'],
        [b'{"choices":[{"delta":{"tool_calls":5}}]}'],
        # Shapes that merge piece by piece but make no body: text that is not a string,
        # choice indexes that do not sort together.
        [b'{"choices":[{"index":0,"delta":{"content":5}}]}'],
        [
            b'{"choices":[{"index":0,"delta":{"content":"a"}}]}',
            b'{"choices":[{"index":0,"delta":{"content":[1]}}]}',
        ],
        [b'{"choices":[{"index":0,"delta":{"refusal":{"a":1}}}]}'],
        [
            b'{"choices":[{"index":0,"delta":{"role":"assistant","content":"a"}}]}',
            b'{"choices":[{"index":"1","delta":{"content":"b"}}]}',
        ],
    ],
)
def test_malformed_chunks_raise_value_error(chunks: list[bytes]) -> None:
    with pytest.raises(ValueError):
        chunks_to_body(chunks, "chat")


@pytest.mark.parametrize("body", [b"", b"[]", b'{"choices":[1]}', b'{"choices":[{"message":3}]}'])
def test_malformed_body_raises_value_error(body: bytes) -> None:
    with pytest.raises(ValueError):
        body_to_chunks(body, "chat")


@pytest.mark.parametrize("text", [b"5", b"[1]", b'{"a":1}'])
def test_completion_text_that_is_not_a_string_raises_value_error(text: bytes) -> None:
    chunk = b'{"choices":[{"index":0,"text":' + text + b"}]}"
    with pytest.raises(ValueError):
        chunks_to_body([chunk, b'{"choices":[{"index":0,"text":"a"}]}'], "completions")


def test_unknown_endpoint() -> None:
    with pytest.raises(ValueError):
        chunks_to_body([], "embeddings")


@given(st.lists(st.binary(max_size=40), max_size=8), st.booleans())
def test_the_joined_stream_is_the_frames_joined(chunks: list[bytes], include_usage: bool) -> None:
    for stream in (chunks, [*chunks, OPENAI_STREAM[-1]]):  # ending in a usage chunk, too
        joined = b"".join(sse_frames(stream, include_usage))
        assert sse_stream(stream, include_usage) == joined


def test_a_payload_of_several_lines_is_framed_one_data_line_each() -> None:
    # SSE joins an event's data lines with \\n; the decoder hands such a payload over as is.
    payload = b'{"id":"c",\n"choices":[]}'
    chunks = [b'{"id":"c","choices":[]}', payload]
    for frames in (b"".join(sse_frames(chunks, True)), sse_stream(chunks, True)):
        assert b'data: {"id":"c",\ndata: "choices":[]}\n\n' in frames
        assert SSEDecoder().feed(frames) == [*chunks, b"[DONE]"]


def _chunk(choice: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [choice],
    }


def test_an_ending_past_the_most_choices_is_broken_and_holds_none() -> None:
    # Each choice finished, then [DONE]: whole up to MAX_CHOICES; one more breaks it, and
    # what it recorded of the choices is dropped (bounded whatever an upstream sends).
    whole, over = ChoicesEnding(), ChoicesEnding()
    for index in range(MAX_CHOICES):
        for ending in (whole, over):
            ending.event(_chunk({"index": index, "delta": {}, "finish_reason": "stop"}))
    over.event(_chunk({"index": MAX_CHOICES, "delta": {}, "finish_reason": "stop"}))
    for ending in (whole, over):
        ending.done()
    assert whole.is_whole(False)
    assert not over.is_whole(False) and not over.is_ended
    assert not over.is_finished  # nothing kept of what it opened


def test_what_a_merge_opens_is_bounded() -> None:
    """Issue 41: a hostile stream must not make the merge of a non-stream answer hold more
    per byte than the stream itself: choices, tool calls and fields are bounded."""
    merge = BodyMerge("chat")
    for index in range(MAX_CHOICES):
        merge.add(_chunk({"index": index, "delta": {"content": "x"}}))
    with pytest.raises(ValueError):
        merge.add(_chunk({"index": MAX_CHOICES, "delta": {"content": "x"}}))
    calls = BodyMerge("chat")
    for index in range(MAX_TOOL_CALLS):
        calls.add(_chunk({"index": 0, "delta": {"tool_calls": [{"index": index}]}}))
    with pytest.raises(ValueError):
        calls.add(_chunk({"index": 0, "delta": {"tool_calls": [{"index": MAX_TOOL_CALLS}]}}))
    fields = BodyMerge("chat")
    for index in range(MAX_EXTRA_FIELDS):
        fields.add(_chunk({"index": 0, "delta": {f"f{index}": 1}}))
    with pytest.raises(ValueError):
        fields.add(_chunk({"index": 0, "delta": {"one_more": 1}}))


def test_pieces_are_joined_once_and_logprobs_kept_as_their_json() -> None:
    merge = BodyMerge("chat")
    entry = {"token": "a", "logprob": -0.5, "bytes": [97], "top_logprobs": []}
    for i in range(2000):
        merge.add(
            _chunk(
                {
                    "index": 0,
                    "delta": {
                        "reasoning_content": "r",
                        "tool_calls": [{"index": 0, "function": {"arguments": str(i % 10)}}],
                    },
                    "logprobs": {"content": [entry], "refusal": None},
                }
            )
        )
    merge.add(_chunk({"index": 0, "delta": {}, "finish_reason": "stop"}))
    choice = orjson.loads(merge.body())["choices"][0]
    assert choice["message"]["reasoning_content"] == "r" * 2000
    arguments = choice["message"]["tool_calls"][0]["function"]["arguments"]
    assert arguments == "".join(str(i % 10) for i in range(2000))
    assert choice["logprobs"] == {"content": [entry] * 2000, "refusal": None}
    assert merge.body() == merge.body()  # building the body changes nothing
