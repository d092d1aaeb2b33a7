"""Property tests with arbitrary bytes: the body validator, the cache key and the SSE
parsers never fail with anything but the gateway's own errors."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.cache import cache_key
from hasten.errors import HastenError
from hasten.proxy.sse import SSEDecoder, UsageStripper
from hasten.proxy.validation import CHAT, COMPLETIONS, EMBEDDINGS, parse_body

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)
# JSON-shaped bytes (often valid bodies) and plain noise, so both paths are exercised.
_bodies = st.one_of(
    st.binary(max_size=2000),
    st.dictionaries(
        st.sampled_from(["model", "messages", "prompt", "input", "stream", "seed", "n", "x"]),
        _json_values,
        max_size=6,
    ).map(lambda body: json.dumps(body).encode()),  # stdlib: integers of any size
)


@settings(max_examples=400, deadline=None)
@given(raw=_bodies)
def test_the_validator_answers_any_bytes_with_a_gateway_error_or_a_body(raw: bytes) -> None:
    try:
        body = parse_body(raw)
    except HastenError as exc:
        assert exc.status_code == 400 and orjson.loads(exc.to_json())["error"]["message"]
        return
    for endpoint in (CHAT, COMPLETIONS, EMBEDDINGS):
        try:
            endpoint.check(body)
        except HastenError as exc:
            assert exc.status_code == 400
            assert orjson.loads(exc.to_json())["error"]["type"] == "invalid_request_error"


@settings(max_examples=300, deadline=None)
@given(body=st.dictionaries(st.text(), _json_values, max_size=8))
def test_the_cache_key_is_defined_for_any_json_body(body: dict[str, Any]) -> None:
    try:
        key = cache_key(body, endpoint="chat", model="m", tenant="t")
    except HastenError:
        return  # e.g. an integer orjson cannot write: a 400, never a 500
    assert key == cache_key(dict(body), endpoint="chat", model="m", tenant="t")
    assert key != cache_key(body, endpoint="chat", model="m", tenant="other")


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(st.binary(max_size=300), max_size=12))
def test_the_sse_parsers_take_any_bytes(chunks: list[bytes]) -> None:
    decoder, stripper = SSEDecoder(), UsageStripper()
    forwarded = b""
    for chunk in chunks:
        for payload in decoder.feed(chunk):
            assert isinstance(payload, bytes)
        forwarded += stripper.feed(chunk, 0)  # no usage event to drop: bytes pass as sent
    forwarded += stripper.finish()
    assert isinstance(decoder.has_pending, bool)
    assert forwarded == b"".join(chunks)
