"""Unit tests for hasten.simulator.inputs: the ``x-sim-*`` override headers."""

from __future__ import annotations

import pytest

from hasten.errors import InvalidRequest
from hasten.simulator.faults import FaultKind
from hasten.simulator.inputs import NO_OVERRIDES, parse_overrides


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
