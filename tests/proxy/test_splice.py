"""Unit tests for hasten.proxy.splice: the Splice puts a regenerated stream after what a
client already got, for chat and completions, n > 1, tool calls, however the stream is split,
and says so when the regeneration does not continue it."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.apis.known import api_named
from hasten.proxy.assemble import assemble
from hasten.proxy.splice import Splice

USAGE = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}


def _frame(event: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(event) + b"\n\n"


def _chat(choices: list[dict[str, Any]], completion_id: str = "a", **extra: Any) -> bytes:
    event = {"id": completion_id, "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return _frame({**event, "choices": choices, **extra})


def _delta(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}


def chat_events(pieces: list[str], completion_id: str = "a", n: int = 1) -> list[bytes]:
    """An OpenAI chat stream, one event per piece per choice (choice i prefixes ``i:``)."""
    events = [
        _chat([_delta(i, {"role": "assistant", "content": ""})], completion_id) for i in range(n)
    ]
    for piece in pieces:
        for i in range(n):
            text = f"{i}:{piece}" if n > 1 else piece
            events.append(_chat([_delta(i, {"content": text})], completion_id))
    events.extend(_chat([_delta(i, {}, "stop")], completion_id) for i in range(n))
    events.append(_chat([], completion_id, usage=USAGE))
    events.append(b"data: [DONE]\n\n")
    return events


def completion_events(pieces: list[str], completion_id: str = "a") -> list[bytes]:
    head = {"id": completion_id, "object": "text_completion", "created": 1, "model": "m"}
    events = [
        _frame({**head, "choices": [{"text": p, "index": 0, "logprobs": None}]}) for p in pieces
    ]
    finish = {"text": "", "index": 0, "logprobs": None, "finish_reason": "length"}
    events.append(_frame({**head, "choices": [finish]}))
    events.append(b"data: [DONE]\n\n")
    return events


def _splice(delivered: bytes, chunks: list[bytes], endpoint: str = "chat") -> tuple[Splice, bytes]:
    splice = Splice(delivered, endpoint)
    out = b"".join(splice.feed(chunk) for chunk in chunks)
    splice.finish()
    return splice, out


def _choices(stream: bytes, endpoint: str = "chat") -> Any:
    body = orjson.loads(assemble(stream, api_named(endpoint)))
    return body["choices"], body.get("usage")


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    chunks, start = [], 0
    for point in points:
        chunks.append(data[start:point])
        start = point
    chunks.append(data[start:])
    return chunks


def _resplit(text: str, cuts: list[int]) -> list[str]:
    points = sorted({0, *cuts, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(points) if b > a]


_WORDS = st.text(alphabet='ab cdé\n"\\{}', min_size=1, max_size=6)


@settings(max_examples=150, deadline=None)
@given(
    pieces=st.lists(_WORDS, min_size=1, max_size=10),
    data=st.data(),
)
def test_delivered_plus_spliced_continuation_is_the_uncut_answer(
    pieces: list[str], data: st.DataObject
) -> None:
    uncut = chat_events(pieces)
    cut = data.draw(st.integers(min_value=1, max_value=len(pieces) + 1), label="cut")
    delivered = b"".join(uncut[:cut])
    # The regeneration is the same text tokenised differently, so events straddle the cut.
    text = "".join(pieces)
    regen_cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=6), label="tokens")
    regenerated = b"".join(chat_events(_resplit(text, regen_cuts) or [text], "b"))
    byte_cuts = data.draw(st.lists(st.integers(0, len(regenerated)), max_size=8), label="bytes")
    splice, out = _splice(delivered, _split(regenerated, byte_cuts))
    assert splice.mismatch is None
    assert out.endswith(b"data: [DONE]\n\n")
    assert _choices(delivered + out) == _choices(b"".join(uncut))


@settings(max_examples=60, deadline=None)
@given(pieces=st.lists(_WORDS, min_size=1, max_size=8), data=st.data())
def test_completions_splice_for_any_cut(pieces: list[str], data: st.DataObject) -> None:
    uncut = completion_events(pieces)
    cut = data.draw(st.integers(min_value=0, max_value=len(pieces)), label="cut")
    delivered = b"".join(uncut[:cut])
    text = "".join(pieces)
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=5), label="tokens")
    regenerated = completion_events(_resplit(text, cuts) or [text], "b")
    splice, out = _splice(delivered, regenerated, "completions")
    assert splice.mismatch is None
    assert _choices(delivered + out, "completions") == _choices(b"".join(uncut), "completions")


def test_an_event_straddling_the_cut_goes_on_as_a_trimmed_delta() -> None:
    delivered = b"".join(chat_events(["Hel"])[:2])
    splice, out = _splice(delivered, chat_events(["Hello", " world"], "b"))
    first = orjson.loads(out.split(b"\n\n")[0][len(b"data: ") :])
    assert first["choices"][0]["delta"] == {"content": "lo"}
    assert b'"role"' not in out  # the client already has the role chunk
    assert splice.mismatch is None


def test_the_rest_passes_through_unchanged() -> None:
    delivered = b"".join(chat_events(["one", " two"])[:2])
    regenerated = chat_events(["one", " two", " three"], "b")
    _, out = _splice(delivered, regenerated)
    assert out == b"".join(regenerated[2:])


def test_different_text_is_a_mismatch_and_nothing_is_forwarded() -> None:
    delivered = b"".join(chat_events(["The cat", " sat"])[:3])
    splice, out = _splice(delivered, chat_events(["The dog", " sat", " down"], "b"))
    assert out == b""
    assert splice.mismatch is not None and "differs" in splice.mismatch


def test_a_shorter_regeneration_is_a_mismatch() -> None:
    delivered = b"".join(chat_events(["a", "b", "c", "d"])[:4])
    splice, out = _splice(delivered, chat_events(["a", "b"], "b"))
    assert out == b""
    assert splice.mismatch is not None and "shorter" in splice.mismatch


def test_a_regeneration_that_breaks_off_before_catching_up_is_a_mismatch() -> None:
    delivered = b"".join(chat_events(["a", "b", "c"])[:4])
    splice, out = _splice(delivered, chat_events(["a", "b", "c"], "b")[:2])
    assert out == b""
    assert splice.mismatch is not None


def test_an_error_event_while_catching_up_is_a_mismatch() -> None:
    delivered = b"".join(chat_events(["a", "b"])[:3])
    error = _frame({"error": {"message": "boom", "type": "server_error"}})
    splice, out = _splice(delivered, [chat_events(["a"], "b")[0], error])
    assert out == b"" and splice.mismatch is not None


def test_delivered_bytes_ending_inside_an_event_are_a_mismatch_at_once() -> None:
    delivered = b"".join(chat_events(["a", "b"])[:2]) + b'data: {"id":"a","cho'
    splice = Splice(delivered, "chat")
    assert splice.mismatch is not None
    assert splice.feed(b"".join(chat_events(["a", "b"], "b"))) == b""


def test_n_choices_are_matched_each_on_its_own_and_held_until_all_caught_up() -> None:
    uncut = chat_events(["x", "y", "z"], n=2)
    # Both roles, both "x", then choice 1's "y" got out before choice 0's (events interleave).
    delivered = b"".join([*uncut[:4], uncut[5]])
    regenerated = chat_events(["x", "y", "z"], "b", n=2)
    splice = Splice(delivered, "chat")
    outs = [splice.feed(chunk) for chunk in regenerated]
    # Choice 0's "y" is new but held until choice 1 has caught up, at its own "y".
    assert outs[:5] == [b""] * 5
    assert outs[5] == regenerated[4]
    splice.finish()
    assert splice.mismatch is None
    assert _choices(delivered + b"".join(outs)) == _choices(b"".join(uncut))


def test_n_choices_one_diverging_is_a_mismatch_before_any_byte() -> None:
    delivered = b"".join(chat_events(["x", "y"], n=2)[:6])
    regenerated = chat_events(["x", "Q"], "b", n=2)
    splice, out = _splice(delivered, regenerated)
    assert out == b"" and splice.mismatch is not None


def _tool_stream(arguments: list[str], call_id: str, completion_id: str) -> list[bytes]:
    opening = {"index": 0, "id": call_id, "type": "function", "function": {"name": "f"}}
    events = [
        _chat([_delta(0, {"role": "assistant", "content": None})], completion_id),
        _chat(
            [_delta(0, {"tool_calls": [{**opening, "function": {"name": "f", "arguments": ""}}]})]
        ),
    ]
    for piece in arguments:
        call = {"index": 0, "function": {"arguments": piece}}
        events.append(_chat([_delta(0, {"tool_calls": [call]})], completion_id))
    events.append(_chat([_delta(0, {}, "tool_calls")], completion_id))
    events.append(b"data: [DONE]\n\n")
    return events


def test_a_cut_inside_tool_call_arguments_resumes_with_the_client_s_call_id() -> None:
    uncut = _tool_stream(['{"ci', 'ty":', ' "Oslo"}'], "call_1", "a")
    delivered = b"".join(uncut[:3])
    regenerated = _tool_stream(['{"city', '": "Os', 'lo"}'], "call_2", "b")
    splice, out = _splice(delivered, regenerated)
    assert splice.mismatch is None
    assert b"call_2" not in out
    choices, _ = _choices(delivered + out)
    assert choices == _choices(b"".join(uncut))[0]
    assert choices[0]["message"]["tool_calls"][0]["id"] == "call_1"


def test_tool_arguments_that_differ_are_a_mismatch() -> None:
    delivered = b"".join(_tool_stream(['{"city": "Os', 'lo"}'], "c", "a")[:3])
    splice, _ = _splice(delivered, _tool_stream(['{"city": "Be', 'rn"}'], "c", "b"))
    assert splice.mismatch is not None


def test_logprobs_on_a_straddling_event_are_a_mismatch() -> None:
    delivered = b"".join(chat_events(["Hel"])[:2])
    straddling = {**_delta(0, {"content": "Hello"}), "logprobs": {"content": []}}
    chunks = [chat_events([], "b")[0], _chat([straddling], "b")]
    splice, out = _splice(delivered, chunks)
    assert out == b"" and splice.mismatch is not None


def test_a_continuation_drops_only_the_role_chunk() -> None:
    delivered = b"".join(chat_events(["Hello"])[:2])
    continuation = chat_events([" world", "!"], "b")
    splice = Splice(delivered, "chat", is_continuation=True)
    assert splice.delivered_text() == "Hello" and splice.has_only_text
    out = b"".join(splice.feed(chunk) for chunk in continuation)
    splice.finish()
    assert splice.mismatch is None
    assert out == b"".join(continuation[1:])
    assert _choices(delivered + out)[0][0]["message"]["content"] == "Hello world!"


def test_the_usage_event_and_done_pass_through() -> None:
    delivered = b"".join(chat_events(["a", "b"])[:3])
    _, out = _splice(delivered, chat_events(["a", "b"], "b"))
    assert b'"usage"' in out and out.endswith(b"data: [DONE]\n\n")
    assert _choices(delivered + out)[1] == USAGE


def test_a_finished_choice_is_caught_up_only_by_its_regenerated_finish() -> None:
    uncut = chat_events(["a"])
    delivered = b"".join(uncut[:3])  # role, "a", finish: only usage and [DONE] were missing
    splice, out = _splice(delivered, chat_events(["a"], "b"))
    assert splice.mismatch is None
    assert out == b"".join(chat_events(["a"], "b")[3:])


@settings(max_examples=80, deadline=None)
@given(pieces=st.lists(_WORDS, min_size=1, max_size=6), data=st.data())
def test_n_choices_splice_for_any_cut_of_the_interleaved_stream(
    pieces: list[str], data: st.DataObject
) -> None:
    uncut = chat_events(pieces, n=2)
    cut = data.draw(st.integers(min_value=2, max_value=2 + 2 * len(pieces) + 1), label="cut")
    delivered = b"".join(uncut[:cut])
    regenerated = b"".join(chat_events(pieces, "b", n=2))
    byte_cuts = data.draw(st.lists(st.integers(0, len(regenerated)), max_size=6), label="bytes")
    splice, out = _splice(delivered, _split(regenerated, byte_cuts))
    assert splice.mismatch is None
    assert _choices(delivered + out) == _choices(b"".join(uncut))


@settings(max_examples=80, deadline=None)
@given(arguments=st.lists(_WORDS, min_size=1, max_size=6), data=st.data())
def test_tool_call_arguments_splice_for_any_cut(arguments: list[str], data: st.DataObject) -> None:
    uncut = _tool_stream(arguments, "call_1", "a")
    cut = data.draw(st.integers(min_value=1, max_value=len(uncut) - 1), label="cut")
    text = "".join(arguments)
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=5), label="tokens")
    regenerated = _tool_stream(_resplit(text, cuts) or [text], "call_2", "b")
    delivered = b"".join(uncut[:cut])
    splice, out = _splice(delivered, regenerated)
    assert splice.mismatch is None
    got, expected = _choices(delivered + out)[0], _choices(b"".join(uncut))[0]
    # The client keeps the id it saw; a call it never saw comes with the regenerated id.
    call_id = got[0]["message"]["tool_calls"][0].pop("id")
    assert call_id == ("call_1" if cut >= 2 else "call_2")
    expected[0]["message"]["tool_calls"][0].pop("id")
    assert got == expected


def test_every_string_delta_field_is_matched_as_text() -> None:
    def event(delta: dict[str, Any], completion_id: str = "a") -> bytes:
        return _chat([_delta(0, delta)], completion_id)

    delivered = event({"role": "assistant", "content": ""}) + event({"reasoning_content": "Thi"})
    regenerated = [
        event({"role": "assistant", "content": ""}, "b"),
        event({"reasoning_content": "Think"}, "b"),
        event({"content": "42"}, "b"),
        event({}, "b").replace(b'"finish_reason":null', b'"finish_reason":"stop"'),
        b"data: [DONE]\n\n",
    ]
    splice, out = _splice(delivered, regenerated)
    assert splice.mismatch is None
    message = _choices(delivered + out)[0][0]["message"]
    assert message["reasoning_content"] == "Think" and message["content"] == "42"
