"""From raw probe timings to estimates and what each hasten lever would save. Pure.

The split a client can see, per streamed request on a warm connection:
    client TTFT = round trip + server TTFT,   e2e = client TTFT + decode x (tokens - 1)
The round trip (RTT) is the fastest time to headers of a request the server answers without
generating (``ProbeTimings.round_trip_method``): queueing and scheduling only ever add to
it, so the minimum is the closest to the path itself (as ping and TCP's min-RTT take it),
while the TTFT is a median, the typical wait. Decode is the time between the first and
the last text event over the token intervals between them, so several tokens per network
read do not shrink it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from hasten.doctor.timings import ProbeTimings, StreamTiming

# hasten's exact-cache hit over HTTP on loopback, p50 (docs/benchmarks.md): a reference
# figure, not measured by the doctor.
CACHE_HIT_REFERENCE_MS = 0.164
# A stream "streams" when its text arrives spread over at least this share of its body time.
MIN_STREAMED_SPREAD_SHARE = 0.25
# A repeated prompt counts as cached when its TTFT drops by more than this share of the cold
# TTFT and by more than twice the TTFT's own spread across tries.
MIN_CACHE_SPEEDUP_SHARE = 0.10
# A round trip this many times the TCP connect (and MIN_BEYOND_TCP_MS more) is mostly spent
# past the TCP endpoint: worth a note, since a nearer deployment may not shorten that part.
BEYOND_TCP_FACTOR = 3.0
MIN_BEYOND_TCP_MS = 5.0
# The TTFT tail is "steady" when the slowest try is within this share of the median.
STEADY_TAIL_SHARE = 0.05
CAP_EXAMPLE_TOKENS = (1000, 256)  # the max_tokens lever's example: a 1000-token answer at 256
TOKENS_CUT_UNIT = 100
LOCAL_REFERENCE = (
    "reference, not measured here (docs/benchmarks.md, SmolLM2-135M on 2 cores): TTFT "
    "45-82 ms warm, ~140 tok/s for one stream; a far smaller model than a cloud one. "
    "Measure it: `hasten local --port 8091` then `hasten doctor http://127.0.0.1:8091/v1`"
)


@dataclass(frozen=True, slots=True)
class Spread:
    """Median, extremes and sample standard deviation of a few measurements."""

    median: float
    min: float
    max: float
    stdev: float
    num: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread | None:
        if not values:
            return None
        stdev = statistics.stdev(values) if len(values) >= 2 else 0.0
        return cls(statistics.median(values), min(values), max(values), stdev, len(values))


@dataclass(frozen=True, slots=True)
class Lever:
    """One way hasten could save time here: how much, per what, and on what basis."""

    name: str
    saved_ms: float | None  # None: not measurable from these probes
    per: str
    basis: str


@dataclass(frozen=True, slots=True)
class StreamingVerdict:
    is_streaming: bool
    detail: str


@dataclass(frozen=True, slots=True)
class CacheVerdict:
    """Whether a repeated long prompt got a faster first token (provider prompt caching)."""

    cold_ttft_ms: float
    repeat_ttft_ms: float
    saved_ms: float
    is_detected: bool


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """Where the time goes on one endpoint, and what hasten would do about it."""

    timings: ProbeTimings
    connect: Spread | None
    tls: Spread | None
    round_trip: Spread | None
    rtt_ms: float | None  # round_trip.min
    client_ttft: Spread | None
    server_ttft_ms: float | None
    decode_ms_per_token: Spread | None
    tokens_per_s: float | None
    stream_e2e: Spread | None
    whole_e2e: Spread | None
    num_tokens: int
    streaming: StreamingVerdict
    prompt_cache: CacheVerdict | None
    levers: tuple[Lever, ...]
    budget: tuple[tuple[str, float | None], ...]
    notes: tuple[str, ...]


def decode_ms_per_token(stream: StreamTiming) -> float | None:
    """Time per token after the first, from the first and last text events; None under 2."""
    arrivals = stream.content_arrivals_ms
    if stream.num_tokens < 2 or len(arrivals) < 1:
        return None
    return (arrivals[-1] - arrivals[0]) / (stream.num_tokens - 1)


def judge_streaming(streams: Sequence[StreamTiming]) -> StreamingVerdict:
    """Streams if the text of most tries arrived spread over time, not in one blob."""
    if not streams:
        return StreamingVerdict(False, "no streamed answer to judge")
    if not any(stream.is_event_stream for stream in streams):
        return StreamingVerdict(False, "`stream: true` answered without text/event-stream")
    num_spread = 0
    for stream in streams:
        arrivals = stream.content_arrivals_ms
        body_ms = stream.end_ms - stream.headers_ms
        if len(arrivals) >= 2 and body_ms > 0:
            num_spread += (arrivals[-1] - arrivals[0]) >= MIN_STREAMED_SPREAD_SHARE * body_ms
    num_events = statistics.median(len(stream.content_arrivals_ms) for stream in streams)
    if num_spread * 2 > len(streams):
        return StreamingVerdict(True, f"yes: text arrives over time (~{num_events:g} events)")
    return StreamingVerdict(False, "buffered: SSE, but the text arrives all at once")


def judge_prompt_cache(
    cold: StreamTiming | None, repeats: Sequence[StreamTiming], ttft: Spread | None
) -> CacheVerdict | None:
    repeat_ttfts = [t for stream in repeats if (t := stream.ttft_ms) is not None]
    if cold is None or cold.ttft_ms is None or not repeat_ttfts:
        return None
    cold_ms = cold.ttft_ms
    repeat_ms = statistics.median(repeat_ttfts)
    saved_ms = cold_ms - repeat_ms
    noise_ms = 2 * ttft.stdev if ttft is not None else 0.0
    is_detected = saved_ms > max(MIN_CACHE_SPEEDUP_SHARE * cold_ms, noise_ms)
    return CacheVerdict(cold_ms, repeat_ms, saved_ms, is_detected)


def diagnose(timings: ProbeTimings) -> Diagnosis:
    """All estimates, the time budget of one cold request, and the levers."""
    streams = timings.streams
    round_trip = Spread.of(timings.round_trip_ms)
    client_ttft = Spread.of([t for s in streams if (t := s.ttft_ms) is not None])
    decode = Spread.of([d for s in streams if (d := decode_ms_per_token(s)) is not None])
    notes: list[str] = []
    rtt_ms = round_trip.min if round_trip is not None else None
    server_ttft_ms = None
    if client_ttft is not None:
        server_ttft_ms = max(0.0, client_ttft.median - (rtt_ms or 0.0))
        if rtt_ms is not None and rtt_ms > client_ttft.median:
            notes.append(
                f"the round trip ({rtt_ms:.1f} ms) exceeds the TTFT: {timings.round_trip_method}"
                " is slow on this server, so the RTT is over-estimated"
            )
    connect = Spread.of(timings.connect_ms)
    if rtt_ms is not None and connect is not None:
        beyond_ms = rtt_ms - connect.median
        if rtt_ms > BEYOND_TCP_FACTOR * connect.median and beyond_ms > MIN_BEYOND_TCP_MS:
            notes.append(
                f"the round trip ({rtt_ms:.1f} ms) is far above the TCP connect "
                f"({connect.median:.1f} ms): {beyond_ms:.0f} ms of it is past the TCP endpoint "
                "(a proxy hop to the model server, or server time), not the network path"
            )
    tokens = [s.num_tokens for s in streams]
    num_tokens = int(statistics.median(tokens)) if tokens else 0
    diagnosis = Diagnosis(
        timings=timings,
        connect=connect,
        tls=Spread.of(timings.tls_ms),
        round_trip=round_trip,
        rtt_ms=rtt_ms,
        client_ttft=client_ttft,
        server_ttft_ms=server_ttft_ms,
        decode_ms_per_token=decode,
        tokens_per_s=1000.0 / decode.median if decode is not None and decode.median > 0 else None,
        stream_e2e=Spread.of([s.end_ms for s in streams]),
        whole_e2e=Spread.of([w.end_ms for w in timings.wholes]),
        num_tokens=num_tokens,
        streaming=judge_streaming(streams),
        prompt_cache=judge_prompt_cache(timings.cache_cold, timings.cache_repeats, client_ttft),
        levers=(),
        budget=(),
        notes=tuple(notes),
    )
    return _with_levers(diagnosis)


def _with_levers(diagnosis: Diagnosis) -> Diagnosis:
    return replace(diagnosis, levers=tuple(levers(diagnosis)), budget=time_budget(diagnosis))


def time_budget(d: Diagnosis) -> tuple[tuple[str, float | None], ...]:
    """One cold streamed request, phase by phase (None: does not apply here)."""
    num_gaps = max(0, d.num_tokens - 1)
    decode_ms = d.decode_ms_per_token.median * num_gaps if d.decode_ms_per_token else None
    return (
        ("DNS", d.timings.dns_ms),
        ("TCP connect", d.connect.median if d.connect else None),
        ("TLS", d.tls.median if d.tls else None),
        ("round trip", d.rtt_ms),
        ("server TTFT", d.server_ttft_ms),
        (f"decode x{num_gaps}", decode_ms),
    )


def levers(d: Diagnosis) -> list[Lever]:
    """One line per hasten lever, each with the measurement it rests on."""
    return [
        _streaming_lever(d),
        _caching_lever(d),
        _hedging_lever(d),
        _nearer_lever(d),
        _warm_connection_lever(d),
        _cap_lever(d),
        Lever("local model", None, "request", LOCAL_REFERENCE),
    ]


def _streaming_lever(d: Diagnosis) -> Lever:
    if d.whole_e2e is None or d.client_ttft is None:
        return Lever("streaming", None, "request", "not measured (no complete answer)")
    if not d.streaming.is_streaming:
        return Lever(
            "streaming", None, "request", "the endpoint does not stream: nothing to pass on"
        )
    saved = d.whole_e2e.median - d.client_ttft.median
    return Lever(
        "streaming",
        saved,
        "request (perceived wait)",
        f"first text after {d.client_ttft.median:.0f} ms streamed vs the whole answer after "
        f"{d.whole_e2e.median:.0f} ms without stream ({d.num_tokens} tokens)",
    )


def _caching_lever(d: Diagnosis) -> Lever:
    e2e = d.whole_e2e or d.stream_e2e
    if e2e is None:
        return Lever("caching", None, "repeated request", "not measured (no complete answer)")
    return Lever(
        "caching",
        max(0.0, e2e.median - CACHE_HIT_REFERENCE_MS),
        "repeated request",
        f"an exact hit is served locally in ~{CACHE_HIT_REFERENCE_MS} ms (p50, "
        f"docs/benchmarks.md) instead of {e2e.median:.0f} ms end to end",
    )


def _hedging_lever(d: Diagnosis) -> Lever:
    ttft = d.client_ttft
    if ttft is None or ttft.num < 2:
        return Lever("hedging", None, "slow request", "needs at least 2 tries to see the spread")
    tail = ttft.max - ttft.median
    rough = f"rough: {ttft.num} tries"
    if tail <= STEADY_TAIL_SHARE * ttft.median:
        return Lever(
            "hedging",
            tail,
            "slow request",
            f"TTFT is steady (max {ttft.max:.0f} vs median {ttft.median:.0f} ms): little "
            f"to gain ({rough})",
        )
    return Lever(
        "hedging",
        tail,
        "slow request",
        f"the slowest TTFT was {tail:.0f} ms above the median ({ttft.median:.0f} ms); a "
        f"hedge to a second deployment cuts such tails ({rough})",
    )


def _nearer_lever(d: Diagnosis) -> Lever:
    if d.rtt_ms is None or d.client_ttft is None:
        return Lever("nearer deployment", None, "request", "not measured (no round trip)")
    rtt = d.rtt_ms
    share = rtt / d.client_ttft.median if d.client_ttft.median > 0 else 0.0
    return Lever(
        "nearer deployment",
        rtt,
        "request",
        f"the round trip is {rtt:.0f} ms of the {d.client_ttft.median:.0f} ms TTFT "
        f"({share:.0%}); the router prefers the deployment with the lowest latency",
    )


def _warm_connection_lever(d: Diagnosis) -> Lever:
    phases = [d.timings.dns_ms, d.connect.median if d.connect else None]
    phases.append(d.tls.median if d.tls else None)
    saved = sum(phase for phase in phases if phase is not None)
    return Lever(
        "warm connections",
        saved,
        "cold connection",
        "DNS + TCP connect + TLS, paid once per new connection; hasten keeps upstream "
        "connections alive",
    )


def _cap_lever(d: Diagnosis) -> Lever:
    decode = d.decode_ms_per_token
    if decode is None:
        return Lever("max_tokens cap", None, "100 tokens cut", "not measured (under 2 tokens)")
    total, cap = CAP_EXAMPLE_TOKENS
    return Lever(
        "max_tokens cap",
        decode.median * TOKENS_CUT_UNIT,
        f"{TOKENS_CUT_UNIT} tokens cut",
        f"each output token costs {decode.median:.1f} ms: capping a {total}-token answer at "
        f"{cap} saves {decode.median * (total - cap) / 1000:.1f} s",
    )
