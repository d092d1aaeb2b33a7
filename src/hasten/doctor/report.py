"""The doctor's findings as a text report (sections, aligned columns, a bar chart) or JSON."""

from __future__ import annotations

import textwrap
from typing import Any

from hasten.doctor.analysis import Diagnosis, Spread

BAR_WIDTH = 40
BAR = "█"
LABEL_WIDTH = 18
LINE_WIDTH = 100

METHOD = {
    "dns": "loop.getaddrinfo of the host, once (n/a for an IP literal)",
    "connect": "TCP handshake of fresh connections, one per try: about one network RTT",
    "tls": "TLS handshake after those connects (https only)",
    "round_trip": (
        "time to headers of a request the server answers without generating, on a warm "
        "connection: one RTT plus the server's handling of it (an upper bound on the RTT; "
        "TCP connect is the lower bound, and the gap is a proxy hop or server time)"
    ),
    "client_ttft": "request sent to first text event of a streamed completion, warm connection",
    "rtt": "the fastest of those round trips: queueing only ever adds to one",
    "server_ttft": "client TTFT median minus RTT",
    "decode": ("per try (last text event - first) / (tokens - 1), tokens from usage when reported"),
    "prompt_cache": (
        "a long prompt (~1,200 words) new to every cache, streamed with max_tokens 1, then "
        "sent again: the repeats' TTFT against the first's"
    ),
}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _spread_dict(spread: Spread | None) -> dict[str, float | int] | None:
    if spread is None:
        return None
    return {
        "median": round(spread.median, 3),
        "min": round(spread.min, 3),
        "max": round(spread.max, 3),
        "stdev": round(spread.stdev, 3),
        "num": spread.num,
    }


def to_dict(d: Diagnosis) -> dict[str, Any]:
    """The whole report as one JSON-ready object (times in ms, rounded to the microsecond)."""
    t = d.timings
    cache = d.prompt_cache
    return {
        "target": {
            "base_url": t.base_url,
            "host": t.host,
            "port": t.port,
            "is_tls": t.is_tls,
            "model": t.model,
            "num_tries": len(t.streams),
            "max_tokens": t.max_tokens,
        },
        "network": {
            "dns_ms": _round(t.dns_ms),
            "connect_ms": _spread_dict(d.connect),
            "tls_ms": _spread_dict(d.tls),
            "round_trip_ms": _spread_dict(d.round_trip),
            "round_trip_method": t.round_trip_method,
        },
        "latency": {
            "rtt_ms": _round(d.rtt_ms),
            "client_ttft_ms": _spread_dict(d.client_ttft),
            "server_ttft_ms": _round(d.server_ttft_ms),
            "decode_ms_per_token": _spread_dict(d.decode_ms_per_token),
            "tokens_per_s": _round(d.tokens_per_s),
            "stream_e2e_ms": _spread_dict(d.stream_e2e),
            "whole_e2e_ms": _spread_dict(d.whole_e2e),
            "num_tokens": d.num_tokens,
        },
        "streaming": {"is_streaming": d.streaming.is_streaming, "detail": d.streaming.detail},
        "prompt_cache": None
        if cache is None
        else {
            "cold_ttft_ms": round(cache.cold_ttft_ms, 3),
            "repeat_ttft_ms": round(cache.repeat_ttft_ms, 3),
            "saved_ms": round(cache.saved_ms, 3),
            "is_detected": cache.is_detected,
        },
        "budget": [{"phase": phase, "ms": _round(ms)} for phase, ms in d.budget],
        "levers": [
            {
                "name": lever.name,
                "saved_ms": _round(lever.saved_ms),
                "per": lever.per,
                "basis": lever.basis,
            }
            for lever in d.levers
        ],
        "notes": list(d.notes),
        "method": METHOD,
    }


def _ms(value: float) -> str:
    return f"{value:9.1f} ms"


def _spread_text(spread: Spread, *, is_min: bool = False) -> str:
    if spread.num < 2:
        return "1 try"
    if is_min:
        head = f"min of {spread.num} (median {spread.median:.1f}"
    else:
        head = f"median of {spread.num} (min {spread.min:.1f}"
    return f"{head}, max {spread.max:.1f}, sd {spread.stdev:.1f})"


def _row(label: str, value: str, detail: str = "") -> str:
    """One aligned row; a long detail wraps under itself."""
    head = f"  {label:<{LABEL_WIDTH}}{value}"
    if not detail:
        return head
    indent = " " * (len(head) + 3)
    return textwrap.fill(detail, LINE_WIDTH, initial_indent=head + "   ", subsequent_indent=indent)


def _spread_row(label: str, spread: Spread | None, missing: str, detail: str = "") -> str:
    if spread is None:
        return _row(label, missing)
    text = _spread_text(spread)
    return _row(label, _ms(spread.median), f"{text}{': ' + detail if detail else ''}")


def _network(d: Diagnosis) -> list[str]:
    t = d.timings
    dns = _row("DNS", "      n/a", "IP literal") if t.dns_ms is None else _row("DNS", _ms(t.dns_ms))
    return [
        "network",
        dns,
        _spread_row("TCP connect", d.connect, "      n/a"),
        _spread_row("TLS", d.tls, "      n/a   http"),
        _rtt_row(d),
    ]


def _rtt_row(d: Diagnosis) -> str:
    if d.round_trip is None:
        return _row("round trip (RTT)", "      n/a")
    detail = f"{_spread_text(d.round_trip, is_min=True)}: {d.timings.round_trip_method}"
    return _row("round trip (RTT)", _ms(d.round_trip.min), detail)


def _model(d: Diagnosis) -> list[str]:
    lines = ["model", _spread_row("client TTFT", d.client_ttft, "      n/a", "RTT + server TTFT")]
    if d.server_ttft_ms is not None:
        lines.append(_row("server TTFT", _ms(d.server_ttft_ms), "client TTFT - RTT"))
    decode = d.decode_ms_per_token
    if decode is not None:
        rate = f"{d.tokens_per_s:.1f} tokens/s, " if d.tokens_per_s else ""
        lines.append(_row("decode", f"{decode.median:9.1f} ms/token", rate + _spread_text(decode)))
    if d.stream_e2e is not None:
        whole = f"; not streamed {d.whole_e2e.median:.1f} ms" if d.whole_e2e else ""
        detail = f"streamed, {d.num_tokens} tokens{whole}"
        lines.append(_row("end to end", _ms(d.stream_e2e.median), detail))
    lines.append(_row("streams", d.streaming.detail))
    cache = d.prompt_cache
    if cache is not None:
        verdict = "yes" if cache.is_detected else "not seen"
        lines.append(
            _row(
                "prompt caching",
                f"{verdict}: repeat TTFT {cache.repeat_ttft_ms:.1f} ms vs first "
                f"{cache.cold_ttft_ms:.1f} ms ({cache.saved_ms:+.1f} ms saved)",
            )
        )
    return lines


def _chart(d: Diagnosis) -> list[str]:
    known = [ms for _, ms in d.budget if ms is not None]
    total = sum(known)
    lines = [f"time budget of one cold streamed request ({d.num_tokens} tokens)"]
    for phase, ms in d.budget:
        if ms is None:
            lines.append(_row(phase, "      n/a"))
            continue
        width = round(BAR_WIDTH * ms / total) if total > 0 else 0
        bar = BAR * width if width else ("▏" if ms > 0 else "")
        lines.append(_row(phase, _ms(ms), bar))
    lines.append(_row("total", _ms(total)))
    return lines


def _levers(d: Diagnosis) -> list[str]:
    lines = ["what hasten would save"]
    for lever in d.levers:
        saved = f"{'?':>11}" if lever.saved_ms is None else f"{lever.saved_ms:8.0f} ms"
        per = "" if lever.saved_ms is None else f" per {lever.per}"
        lines.append(_row(lever.name, saved, f"{per.strip()}: {lever.basis}".lstrip(": ")))
    return lines


def _paragraph(text: str) -> str:
    return textwrap.fill(text, LINE_WIDTH, initial_indent="  ", subsequent_indent="    ")


def format_text(d: Diagnosis) -> str:
    """The readable report: sections, aligned columns and a bar chart of the time budget."""
    t = d.timings
    head = (
        f"hasten doctor: {t.base_url}, model {t.model}, {len(t.streams)} tries of "
        f"max_tokens {t.max_tokens}"
    )
    sections = [[head], _network(d), _model(d), _chart(d), _levers(d)]
    if d.notes:
        sections.append(["notes", *(_paragraph(note) for note in d.notes)])
    how = (
        f"RTT: {METHOD['round_trip']}; {METHOD['rtt']}.",
        f"server TTFT: {METHOD['server_ttft']}; decode: {METHOD['decode']}.",
    )
    sections.append(["how", *(_paragraph(text) for text in how)])
    return "\n\n".join("\n".join(section) for section in sections)
