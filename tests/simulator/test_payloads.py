"""Unit tests for hasten.simulator.payloads: the simulator's error payloads and headers."""

from __future__ import annotations

import pytest

from hasten.simulator.payloads import rate_limit_error
from hasten.wire.asgi import error_headers


@pytest.mark.parametrize(
    ("retry_after_s", "seconds", "millis"), [(3.0, "3", "3000"), (0.25, "0.25", "250")]
)
def test_simulated_429_keeps_openais_retry_headers(
    retry_after_s: float, seconds: str, millis: str
) -> None:
    error = rate_limit_error(retry_after_s)
    assert error.status_code == 429 and error.retry_after_s is None
    # Rendered as given: the toolkit adds no whole-second Retry-After of its own.
    assert error_headers(error) == [
        (b"retry-after", seconds.encode()),
        (b"retry-after-ms", millis.encode()),
    ]
