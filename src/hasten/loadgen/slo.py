"""Per-request service-level objectives and goodput, as vLLM's benchmark defines them (pure).

``--goodput ttft:500 tpot:50 e2el:2000`` (milliseconds): a request is *good* when it meets
every objective given. Goodput is good requests per second of the run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

SLO_METRICS = ("ttft", "tpot", "e2el")


def parse_goodput(pairs: Sequence[str]) -> dict[str, float]:
    """``["ttft:500", "e2el:2000"]`` to ``{"ttft": 500.0, "e2el": 2000.0}`` (ms).

    Raises ValueError on a malformed pair, an unknown metric or a negative value.
    """
    objectives: dict[str, float] = {}
    for pair in pairs:
        name, separator, raw_value = pair.partition(":")
        name = name.strip().lower()
        if not separator or name not in SLO_METRICS:
            raise ValueError(
                f"goodput objective {pair!r} is not KEY:VALUE with KEY one of {SLO_METRICS}"
            )
        try:
            value_ms = float(raw_value)
        except ValueError:
            raise ValueError(f"goodput objective {pair!r}: {raw_value!r} is not a number") from None
        if not value_ms >= 0:
            raise ValueError(f"goodput objective {pair!r} must be non-negative milliseconds")
        objectives[name] = value_ms
    return objectives


def request_tpot_s(latency_s: float, ttft_s: float, num_output_tokens: int) -> float:
    """vLLM's TPOT: time per output token after the first, 0 for one token or fewer."""
    if num_output_tokens <= 1:
        return 0.0
    return (latency_s - ttft_s) / (num_output_tokens - 1)


def count_good(
    objectives_ms: Mapping[str, float],
    *,
    ttft_s: Sequence[float],
    latency_s: Sequence[float],
    output_tokens: Sequence[int],
) -> int:
    """How many requests meet every objective; with none given, every request is good.

    A NaN TTFT (a stream without content) meets no TTFT objective.
    """
    ttft_limit_s = _limit_s(objectives_ms, "ttft")
    tpot_limit_s = _limit_s(objectives_ms, "tpot")
    e2el_limit_s = _limit_s(objectives_ms, "e2el")
    num_good = 0
    for ttft, latency, tokens in zip(ttft_s, latency_s, output_tokens, strict=True):
        if ttft_limit_s is not None and not ttft <= ttft_limit_s:
            continue
        if tpot_limit_s is not None and not request_tpot_s(latency, ttft, tokens) <= tpot_limit_s:
            continue
        if e2el_limit_s is not None and not latency <= e2el_limit_s:
            continue
        num_good += 1
    return num_good


def _limit_s(objectives_ms: Mapping[str, float], name: str) -> float | None:
    value_ms = objectives_ms.get(name)
    return None if value_ms is None else value_ms / 1000.0
