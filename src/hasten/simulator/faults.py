"""Which failure, if any, a request suffers: drawn from the configured rates or forced by header.

Pure: the decision uses only the `random.Random` it is given, so a fixed seed replays.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum

from hasten.simulator.config import SimConfig


class FaultKind(StrEnum):
    NONE = "none"
    SERVER_ERROR = "500"
    RATE_LIMIT = "429"
    DISCONNECT = "disconnect"
    SILENT = "silent"  # reads the request, never answers
    HANG = "hang"  # sends 200 and its headers, then nothing
    MALFORMED = "malformed"  # a data line that is not JSON mid-stream; a non-JSON 200 body
    TRUNCATE = "truncate"  # ends the body cleanly, cut mid-event or mid-JSON


# Faults that answer nothing more after a point, until the client gives up.
STALLS = frozenset({FaultKind.SILENT, FaultKind.HANG})
# Faults that strike after some SSE events (default: the role chunk and half the tokens).
_MID_STREAM = frozenset({FaultKind.DISCONNECT, FaultKind.MALFORMED, FaultKind.TRUNCATE})


@dataclass(frozen=True, slots=True)
class Fault:
    """A decided failure. `after_chunks` is how many SSE events go out before it strikes.

    For SERVER_ERROR, None means an up-front 500; a number means a mid-stream error event.
    For DISCONNECT, MALFORMED and TRUNCATE it is always set; non-stream responses are cut
    halfway through the body (DISCONNECT, TRUNCATE) or are not JSON at all (MALFORMED).
    ``status`` is the up-front error's (a burst may answer 502 or 503).
    """

    kind: FaultKind
    after_chunks: int | None = None
    retry_after_s: float = 0.0
    status: int = 500


NO_FAULT = Fault(FaultKind.NONE)


def default_disconnect_after_chunks(num_tokens: int) -> int:
    """The role chunk plus half the content: enough that a client has started consuming."""
    return 1 + num_tokens // 2


def draw_fault_kind(config: SimConfig, rng: random.Random) -> FaultKind:
    """One uniform draw split across the rates; no draw at all when every rate is 0."""
    if not config.has_faults:
        return FaultKind.NONE
    draw = rng.random()
    for kind, rate in fault_rates(config):
        if draw < rate:
            return kind
        draw -= rate
    return FaultKind.NONE


def fault_rates(config: SimConfig) -> tuple[tuple[FaultKind, float], ...]:
    """Each fault's configured share of requests, in the order one draw splits them."""
    return (
        (FaultKind.SERVER_ERROR, config.error_rate),
        (FaultKind.RATE_LIMIT, config.rate_limit_rate),
        (FaultKind.DISCONNECT, config.disconnect_rate),
        (FaultKind.SILENT, config.silent_rate),
        (FaultKind.HANG, config.hang_rate),
        (FaultKind.MALFORMED, config.malformed_rate),
        (FaultKind.TRUNCATE, config.truncate_rate),
    )


def decide_fault(
    config: SimConfig,
    rng: random.Random,
    *,
    num_tokens: int,
    forced_kind: FaultKind | None = None,
    forced_after_chunks: int | None = None,
    forced_retry_after_s: float | None = None,
) -> Fault:
    """The fault for one request; forced values (from headers) win over the random draw."""
    kind = forced_kind if forced_kind is not None else draw_fault_kind(config, rng)
    if kind is FaultKind.NONE:
        return NO_FAULT
    if kind is FaultKind.RATE_LIMIT:
        retry_after_s = (
            forced_retry_after_s if forced_retry_after_s is not None else config.retry_after_s
        )
        return Fault(kind, retry_after_s=retry_after_s)
    if kind in _MID_STREAM:
        after = forced_after_chunks
        if after is None:
            after = default_disconnect_after_chunks(num_tokens)
        return Fault(kind, after_chunks=after)
    return Fault(kind, after_chunks=forced_after_chunks)


def burst_fault(status: int) -> Fault:
    """An up-front error of a burst armed through ``POST /sim/burst``."""
    return Fault(FaultKind.SERVER_ERROR, status=status)
