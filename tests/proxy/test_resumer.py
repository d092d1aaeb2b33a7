"""Unit tests for hasten.proxy.resumer: StreamResume forwards whole events, notices every way a
stream breaks, and continues it (regenerated, prefilled) or ends it with the failure, with
scripted upstream calls (no sockets); and why the trailer is an SSE comment (the openai SDK)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx2
import openai
import orjson
import pytest

from hasten.apis.chat import CHAT_API
from hasten.config import ModelRoute, UpstreamConfig
from hasten.config.cache_policy import ModelCachePolicy
from hasten.errors import HastenError, UpstreamError, UpstreamTimeout
from hasten.proxy.assemble import assemble
from hasten.proxy.resumer import StreamResume, resume_header
from hasten.routing.models import build_route
from hasten.upstream.client import TOTAL_TIMEOUT_CODE, UpstreamCall
from tests.proxy.test_splice import chat_events

DONE = b"data: [DONE]\n\n"
CUT = UpstreamError("upstream connection failed mid-response: reset")


class _Response:
    """An upstream response that sends ``chunks`` and then, if given, raises ``error``."""

    def __init__(self, chunks: Sequence[bytes], error: HastenError | None = None) -> None:
        self.status = 200
        self.headers: Mapping[str, str] = {}
        self._chunks, self._error = chunks, error
        self.is_closed = False

    async def iter_chunks(self, idle_timeout_s: float) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk
        if self._error is not None:
            raise self._error

    async def read(self, timeout_s: float) -> bytes:
        return b"".join(self._chunks)

    def close(self) -> None:
        self.is_closed = True


def _call(name: str, chunks: Sequence[bytes], error: HastenError | None = None) -> UpstreamCall:
    upstream = UpstreamConfig(name=name, url=f"http://{name}.test/v1")
    return UpstreamCall(
        _Response(chunks, error),
        upstream,
        headers={},
        ttfb_ms=1.0,
        deadline_s=time.monotonic() + 30,
    )


def _route(prefill: Mapping[str, str] | None = None) -> Any:
    names = ("a", "b")
    upstreams = {
        n: UpstreamConfig(name=n, url=f"http://{n}.test/v1", prefill=(prefill or {}).get(n, "none"))
        for n in names
    }
    route = ModelRoute(name="m", upstream="a", fallbacks=("b",), is_resuming_streams=True)
    return build_route(route, upstreams, ModelCachePolicy())


class _Opener:
    """Hands out the scripted continuations in order; keeps what each was asked with."""

    def __init__(self, *calls: UpstreamCall) -> None:
        self._calls = list(calls)
        self.asked: list[tuple[dict[str, Any], frozenset[str]]] = []

    async def __call__(self, body: bytes, excluded: frozenset[str]) -> UpstreamCall:
        self.asked.append((orjson.loads(body), excluded))
        if not self._calls:
            raise UpstreamError("no deployment is left to send the request to")
        return self._calls.pop(0)


def _body(**extra: Any) -> bytes:
    messages = [{"role": "user", "content": "hi"}]
    return orjson.dumps({"model": "m", "messages": messages, "stream": True, **extra})


async def _run(resume: StreamResume, call: UpstreamCall) -> tuple[bytes, HastenError | None]:
    out: list[bytes] = []
    try:
        async for data in resume.chunks(call):
            out.append(data)
    except HastenError as exc:
        return b"".join(out), exc
    return b"".join(out), None


def _resume(opener: _Opener, route: Any = None, **extra: Any) -> StreamResume:
    body = _body(**extra)
    return StreamResume(opener, route or _route(), "chat", lambda: body)


def _content(stream: bytes) -> str:
    return str(orjson.loads(assemble(stream, CHAT_API))["choices"][0]["message"]["content"])


def test_an_unbroken_stream_passes_whole_and_nothing_is_reopened() -> None:
    events = chat_events(["Hello", " world"])
    stream = b"".join(events)
    # Split mid-event: the half event waits for its end, nothing is lost or reordered.
    call = _call("a", [stream[:7], stream[7:100], stream[100:]])
    opener = _Opener()
    resume = _resume(opener, temperature=0)
    out, error = asyncio.run(_run(resume, call))
    assert out == stream and error is None
    assert opener.asked == [] and resume.outcome == "" and resume.is_cacheable


def test_a_deterministic_cut_is_regenerated_elsewhere_and_spliced() -> None:
    events = chat_events(["The", " cat", " sat"])
    torn = events[2][:10]  # half of " cat": never reaches the client
    call = _call("a", [*events[:2], torn], CUT)
    opener = _Opener(_call("b", chat_events(["The", " cat", " sat"], "b")))
    resume = _resume(opener, temperature=0)
    out, error = asyncio.run(_run(resume, call))
    assert error is None
    assert _content(out) == "The cat sat"
    assert out.startswith(b"".join(events[:2]) + b'data: {"id":"b"')  # the half event went
    assert out.count(b'"role"') == 1
    assert opener.asked[0][0]["temperature"] == 0 and opener.asked[0][1] == {"a"}
    assert resume.outcome == "regenerated" and resume.deployment == "b" and resume.is_cacheable
    assert out.endswith(b'"after_bytes":%d}\n\n' % len(b"".join(events[:2])) + DONE)


def test_an_upstream_error_event_is_a_break_and_is_not_forwarded() -> None:
    events = chat_events(["one", " two"])
    error_event = b'data: {"error":{"message":"overloaded","type":"server_error"}}\n\n'
    call = _call("a", [events[0], events[1] + error_event])
    opener = _Opener(_call("b", chat_events(["one", " two"], "b")))
    out, error = asyncio.run(_run(_resume(opener, seed=7), call))
    assert error is None and b"overloaded" not in out
    assert _content(out) == "one two"


def test_a_stream_ending_without_done_is_a_break() -> None:
    events = chat_events(["one", " two"])
    opener = _Opener(_call("b", chat_events(["one", " two"], "b")))
    resume = _resume(opener, temperature=0)
    out, error = asyncio.run(_run(resume, _call("a", events[:3])))
    assert error is None and resume.outcome == "regenerated"
    assert _content(out) == "one two"


def test_a_mismatch_falls_back_to_prefill_with_the_delivered_text() -> None:
    events = chat_events(["The", " cat"])
    call = _call("a", events[:3], CUT)
    opener = _Opener(
        _call("b", chat_events(["A", " dog"], "b")),  # regenerated, differently
        _call("b", chat_events([" sat"], "c")),  # the continuation: only the rest
    )
    route = _route({"b": "continue_final_message"})
    resume = _resume(opener, route, temperature=0)
    out, error = asyncio.run(_run(resume, call))
    assert error is None
    assert _content(out) == "The cat sat"
    body, excluded = opener.asked[1]
    assert body["messages"][-1] == {"role": "assistant", "content": "The cat"}
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert excluded == {"a"}
    assert resume.outcome == "prefilled" and not resume.is_cacheable


def test_a_non_deterministic_cut_goes_straight_to_prefill() -> None:
    call = _call("a", chat_events(["Hi"])[:2], CUT)
    opener = _Opener(_call("b", chat_events([" there"], "b")))
    resume = _resume(opener, _route({"b": "assistant_prefix"}), temperature=0.9)
    out, error = asyncio.run(_run(resume, call))
    assert error is None and _content(out) == "Hi there"
    assert opener.asked[0][0]["messages"][-1] == {
        "role": "assistant",
        "content": "Hi",
        "prefix": True,
    }


def test_a_continuation_that_breaks_too_is_continued_again_elsewhere() -> None:
    pieces = ["a", "b", "c", "d"]
    call = _call("a", chat_events(pieces)[:2], CUT)
    opener = _Opener(
        _call("b", chat_events(pieces, "b")[:4], CUT),  # catches up, forwards b and c, breaks
        _call("a", chat_events(pieces, "c")),
    )
    resume = _resume(opener, temperature=0)
    out, error = asyncio.run(_run(resume, call))
    assert error is None and _content(out) == "abcd"
    assert [excluded for _, excluded in opener.asked] == [{"a"}, frozenset()]  # none left


def test_without_any_way_on_the_failure_ends_the_stream_after_the_trailer() -> None:
    call = _call("a", chat_events(["Hi"])[:2], CUT)
    opener = _Opener()
    resume = _resume(opener, temperature=0.9)  # no prefill anywhere
    out, error = asyncio.run(_run(resume, call))
    assert error is CUT and opener.asked == []
    sent = len(b"".join(chat_events(["Hi"])[:2]))
    assert out.endswith(
        b': hasten-resume {"outcome":"failed","deployment":"","after_bytes":%d}\n\n' % sent
    )
    assert resume.outcome == "failed" and not resume.is_cacheable


def test_resume_header_reads_the_trailer() -> None:
    note = b': hasten-resume {"outcome":"regenerated","deployment":"b","after_bytes":9}\n\n'
    assert resume_header(b"data: {}\n\n" + note + DONE) == (b"x-hasten-resume", b"regenerated")
    assert resume_header(b"data: {}\n\n" + DONE) is None


def _sdk_texts(stream: bytes) -> list[str | None]:
    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=stream)

    # The SDK's own HTTP client package (openai 3 ships on httpx2).
    http = httpx2.Client(transport=httpx2.MockTransport(answer))
    client = openai.OpenAI(base_url="http://gateway.test/v1", api_key="k", http_client=http)
    chunks = client.chat.completions.create(model="m", messages=[], stream=True)
    return [chunk.choices[0].delta.content for chunk in chunks]


def test_the_openai_sdk_ignores_the_comment_trailer_but_not_a_data_event_without_choices() -> None:
    events = chat_events(["Hi"])[1:3]  # content and finish: each has a choice
    note = b': hasten-resume {"outcome":"regenerated"}\n\n'
    assert _sdk_texts(b"".join(events) + note + DONE) == ["Hi", None]
    # The alternative, a data event of its own, breaks the usual `chunk.choices[0]` loop.
    as_data = b'data: {"hasten_resume":{"outcome":"regenerated"}}\n\n'
    with pytest.raises(TypeError):
        _sdk_texts(b"".join(events) + as_data + DONE)


def test_a_stream_out_of_its_total_time_is_not_continued() -> None:
    timeout = UpstreamTimeout("exceeded the total timeout", code=TOTAL_TIMEOUT_CODE)
    call = _call("a", chat_events(["Hi"])[:2], timeout)
    opener = _Opener(_call("b", chat_events(["Hi", "!"], "b")))
    resume = _resume(opener, temperature=0)
    out, error = asyncio.run(_run(resume, call))
    assert error is timeout and opener.asked == [] and resume.outcome == ""
    assert out == b"".join(chat_events(["Hi"])[:2])


def test_crlf_streams_end_and_resume_like_lf_ones() -> None:
    crlf = [event.replace(b"\n", b"\r\n") for event in chat_events(["one", " two"])]
    opener = _Opener()
    out, error = asyncio.run(_run(_resume(opener, temperature=0), _call("a", crlf)))
    assert error is None and out == b"".join(crlf) and opener.asked == []
    regenerated = [event.replace(b"\n", b"\r\n") for event in chat_events(["one", " two"], "b")]
    opener = _Opener(_call("b", regenerated))
    resume = _resume(opener, temperature=0)
    out, error = asyncio.run(_run(resume, _call("a", crlf[:2], CUT)))
    assert error is None and resume.outcome == "regenerated"
    assert _content(out) == "one two"
    assert out.endswith(b'"after_bytes":%d}\n\ndata: [DONE]\r\n\r\n' % len(b"".join(crlf[:2])))


def _capped_call(name: str, chunks: Sequence[bytes], max_bytes: int) -> UpstreamCall:
    upstream = UpstreamConfig(name=name, url=f"http://{name}.test/v1", max_answer_bytes=max_bytes)
    return UpstreamCall(
        _Response(chunks), upstream, headers={}, ttfb_ms=1.0, deadline_s=time.monotonic() + 30
    )


def test_an_answer_past_its_cap_is_not_continued() -> None:
    # Issue 41: a stream that failed for its size would be as large again elsewhere.
    events = chat_events(["x" * 200] * 40)
    call = _capped_call("a", events, max_bytes=2000)
    opener = _Opener(_call("b", events))
    out, error = asyncio.run(_run(_resume(opener, temperature=0), call))
    assert error is not None and error.code == "upstream_too_large"
    assert opener.asked == [] and len(out) <= 2000


def test_continuations_count_against_the_first_answers_cap() -> None:
    pieces = ["y" * 100] * 30
    events = chat_events(pieces)
    first = events[:10]  # about 1.6 KB, then cut
    call = UpstreamCall(
        _Response(first, CUT),
        UpstreamConfig(name="a", url="http://a.test/v1", max_answer_bytes=3000),
        headers={},
        ttfb_ms=1.0,
        deadline_s=time.monotonic() + 30,
    )
    opener = _Opener(_call("b", chat_events(pieces, "b")), _call("a", chat_events(pieces, "c")))
    out, error = asyncio.run(_run(_resume(opener, temperature=0), call))
    # The regenerated rest would make the answer ~5 KB: past the 3 000 bytes, it ends there,
    # and no third call is made for it.
    assert error is not None and error.code == "upstream_too_large"
    assert len(opener.asked) == 1
    assert len(out) <= 3000 + 200  # the cap, and the trailer that says what happened
