"""Unit tests for hasten.simulator.inputs: the ``x-sim-*`` override headers."""

from __future__ import annotations

import pytest

from hasten.errors import InvalidRequest
from hasten.simulator.faults import FaultKind
from hasten.simulator.inputs import (
    MAX_COMPLETION_TOKENS,
    MAX_EMBEDDING_INPUTS,
    MAX_GENERATED_TOKENS,
    NO_OVERRIDES,
    parse_chat_request,
    parse_embedding_request,
    parse_overrides,
)


def test_override_headers_parse_and_reject_bad_values() -> None:
    assert parse_overrides([(b"authorization", b"x")]) is NO_OVERRIDES
    overrides = parse_overrides(
        [
            (b"x-sim-ttft-ms", b"12.5"),
            (b"x-sim-decode-ms", b"1"),
            (b"x-sim-fail", b"Disconnect"),
            (b"x-sim-fail-after-chunks", b"3"),
            (b"x-sim-retry-after", b"0.25"),
            (b"x-sim-tokens", b"7"),
        ]
    )
    assert overrides.first_token_ms == 12.5 and overrides.decode_ms == 1
    assert overrides.fail is FaultKind.DISCONNECT and overrides.fail_after_chunks == 3
    assert overrides.retry_after_s == 0.25 and overrides.num_tokens == 7
    for header in [
        (b"x-sim-fail", b"503"),
        (b"x-sim-tokens", b"-1"),
        (b"x-sim-ttft-ms", b"nan"),
        (b"x-sim-typo", b"1"),
    ]:
        with pytest.raises(InvalidRequest):
            parse_overrides([header])


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("name", ["max_tokens", "max_completion_tokens"])
def test_output_is_bounded_per_request(name: str) -> None:
    # 2**31 tokens once made the simulator allocate 34 GB and die (found by
    # bench/reliability/fuzz.py).
    assert parse_chat_request({**CHAT, name: MAX_COMPLETION_TOKENS}).max_tokens == (
        MAX_COMPLETION_TOKENS
    )
    for body in [
        {**CHAT, name: MAX_COMPLETION_TOKENS + 1},
        {**CHAT, name: 2**31},
        {
            **CHAT,
            name: MAX_COMPLETION_TOKENS,
            "n": MAX_GENERATED_TOKENS // MAX_COMPLETION_TOKENS + 1,
        },
    ]:
        with pytest.raises(InvalidRequest) as info:
            parse_chat_request(body)
        assert info.value.param == name
    with pytest.raises(InvalidRequest):
        parse_overrides([(b"x-sim-tokens", str(MAX_COMPLETION_TOKENS + 1).encode())])
    assert parse_overrides([(b"x-sim-tokens", b"32768")]).num_tokens == MAX_COMPLETION_TOKENS


def test_embedding_inputs_are_bounded() -> None:
    inputs = ["a"] * MAX_EMBEDDING_INPUTS
    assert len(parse_embedding_request({"model": "m", "input": inputs}).texts) == len(inputs)
    with pytest.raises(InvalidRequest) as info:
        parse_embedding_request({"model": "m", "input": [*inputs, "a"]})
    assert info.value.param == "input"


# --- traceparent (draw_by = "trace") -------------------------------------------------------

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


def test_a_traceparent_is_read_as_trace_id_and_parent() -> None:
    value = f"00-{TRACE_ID}-{PARENT_ID}-01".encode()
    overrides = parse_overrides([(b"traceparent", value)])
    assert overrides.trace == (TRACE_ID.encode(), PARENT_ID.encode())
    assert overrides.first_token_ms is None


@pytest.mark.parametrize(
    "value",
    [
        f"01-{TRACE_ID}-{PARENT_ID}-01",  # another version
        f"00-{TRACE_ID.upper()}-{PARENT_ID}-01",  # W3C ids are lower-case hex
        f"00-{'0' * 32}-{PARENT_ID}-01",  # all-zero trace id
        f"00-{TRACE_ID}-{'0' * 16}-01",  # all-zero parent id
        f"00-{TRACE_ID[:-1]}-{PARENT_ID}-011",
        f"00-{TRACE_ID}-{PARENT_ID}",
        "garbage",
    ],
)
def test_an_invalid_traceparent_is_ignored_as_w3c_says(value: str) -> None:
    assert parse_overrides([(b"traceparent", value.encode())]) is NO_OVERRIDES
