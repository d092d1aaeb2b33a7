"""The HTTP/1.1 response parser behind the lean client, fed by hand (no sockets).

The fuzz tests hold its two promises: a valid response parses the same however the bytes
are split, and whatever bytes come, only hasten's errors come out.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hasten.errors import UpstreamConnectError, UpstreamError
from hasten.upstream.http1 import Http1Connection


@dataclass
class FakeTransport:
    written: list[bytes] = field(default_factory=list)
    is_closed: bool = False
    is_paused: bool = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return self.is_closed

    def abort(self) -> None:
        self.is_closed = True

    def pause_reading(self) -> None:
        self.is_paused = True

    def resume_reading(self) -> None:
        self.is_paused = False


@dataclass
class Parsed:
    status: int
    headers: dict[str, str]
    body: bytes
    is_complete: bool
    is_keep_alive: bool
    error: UpstreamError | None


def connection(**limits: int) -> tuple[Http1Connection, FakeTransport]:
    conn = Http1Connection(**limits)
    transport = FakeTransport()
    conn.transport = transport  # type: ignore[assignment]
    conn.start(b"GET / HTTP/1.1\r\n\r\n")
    return conn, transport


def feed(pieces: list[bytes], *, is_closed_after: bool = False, **limits: int) -> Parsed:
    conn, _ = connection(**limits)
    body: list[bytes] = []
    for piece in pieces:
        conn.data_received(piece)
        body.append(conn.take())
    if is_closed_after:
        conn.connection_lost(None)
        body.append(conn.take())
    return Parsed(
        conn.status, conn.headers, b"".join(body), conn.is_complete, conn.is_keep_alive, conn.error
    )


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(cut % (len(data) + 1) for cut in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


def test_content_length_body_split_anywhere_parses_whole() -> None:
    data = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{"a":1}'
    whole = feed([data])
    assert whole == feed([bytes([b]) for b in data])
    assert (whole.status, whole.body, whole.is_complete, whole.is_keep_alive) == (
        200,
        b'{"a":1}',
        True,
        True,
    )
    assert whole.headers == {"content-type": "application/json", "content-length": "7"}


def test_chunked_body_is_decoded_and_keeps_the_connection() -> None:
    data = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n1;x=y\r\nd\r\n0\r\n\r\n"
    )
    parsed = feed(split(data, [5, 40, 41, 50]))
    assert (parsed.body, parsed.is_complete, parsed.is_keep_alive) == (b"abcd", True, True)


def test_connection_close_response_is_not_kept() -> None:
    parsed = feed([b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"])
    assert (parsed.body, parsed.is_complete, parsed.is_keep_alive) == (b"ok", True, False)


def test_body_until_close_ends_with_the_connection() -> None:
    pieces = [b"HTTP/1.1 200 OK\r\n\r\npart one,", b" part two"]
    open_ended = feed(pieces)
    assert not open_ended.is_complete
    closed = feed(pieces, is_closed_after=True)
    assert (closed.body, closed.is_complete, closed.error) == (b"part one, part two", True, None)


def test_204_and_304_have_no_body_and_keep_the_connection() -> None:
    for status in (204, 304):
        parsed = feed([f"HTTP/1.1 {status} X\r\n\r\n".encode()])
        assert (parsed.status, parsed.is_complete, parsed.is_keep_alive) == (status, True, True)


def test_head_response_ends_at_its_head_despite_a_length() -> None:
    conn = Http1Connection()
    conn.transport = FakeTransport()  # type: ignore[assignment]
    conn.start(b"HEAD / HTTP/1.1\r\n\r\n", is_bodiless=True)
    conn.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n")
    assert (conn.is_complete, conn.is_keep_alive, conn.take()) == (True, True, b"")


def test_interim_100_continue_is_skipped() -> None:
    data = (
        b"HTTP/1.1 100 Continue\r\nA: 1\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nx"
    )
    parsed = feed([data])
    assert (parsed.status, parsed.headers, parsed.body) == (201, {"content-length": "1"}, b"x")


def test_repeated_headers_are_joined() -> None:
    parsed = feed([b"HTTP/1.1 200 OK\r\nVia: a\r\nvia: b\r\nContent-Length: 0\r\n\r\n"])
    assert parsed.headers["via"] == "a, b"


def test_lost_before_the_head_is_a_connect_error() -> None:
    conn, _ = connection()
    conn.data_received(b"HTTP/1.1 200")
    conn.connection_lost(None)
    assert isinstance(conn.error, UpstreamConnectError)


def test_lost_mid_body_is_an_upstream_error_not_a_connect_error() -> None:
    conn, _ = connection()
    conn.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
    conn.connection_lost(None)
    assert type(conn.error) is UpstreamError
    assert "mid-response" in str(conn.error)


def test_huge_head_is_refused_and_the_connection_dropped() -> None:
    conn, transport = connection(max_header_bytes=1024)
    conn.data_received(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 2000 + b"\r\n\r\n")
    assert type(conn.error) is UpstreamError and "over 1024 bytes" in str(conn.error)
    assert transport.is_closed


def test_head_that_never_ends_is_refused() -> None:
    conn, transport = connection(max_header_bytes=1024)
    for _ in range(20):
        conn.data_received(b"X-Header: " + b"b" * 90 + b"\r\n")
    assert conn.error is not None and transport.is_closed


def test_too_many_headers_are_refused() -> None:
    head = b"".join(f"X-{i}: v\r\n".encode() for i in range(10))
    parsed = feed([b"HTTP/1.1 200 OK\r\n" + head + b"\r\n"], max_num_headers=5)
    assert parsed.error is not None and "more than 5 headers" in str(parsed.error)


def test_garbage_status_line_is_an_upstream_error() -> None:
    parsed = feed([b"SMTP ready\r\n\r\n"])
    assert type(parsed.error) is UpstreamError


@pytest.mark.parametrize("status", [b"000", b"099"])
def test_a_status_below_100_is_an_error_not_an_interim_answer(status: bytes) -> None:
    parsed = feed([b"HTTP/1.1 " + status + b" Odd\r\nContent-Length: 0\r\n\r\n"])
    assert parsed.error is not None and "invalid status" in str(parsed.error)
    assert not parsed.is_keep_alive


def test_upgrade_is_refused() -> None:
    parsed = feed([b"HTTP/1.1 101 Switching\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n"])
    assert parsed.error is not None and "switched protocols" in str(parsed.error)


def test_unasked_bytes_between_responses_close_the_connection() -> None:
    conn, transport = connection()
    conn.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    assert conn.is_keep_alive
    conn.data_received(b"HTTP/1.1 200 OK\r\n")
    assert not conn.is_keep_alive and transport.is_closed


def test_second_response_in_one_read_is_not_trusted() -> None:
    one = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na"
    parsed = feed([one + one])
    assert (parsed.body, parsed.is_complete, parsed.is_keep_alive) == (b"a", True, False)


def test_reading_pauses_while_the_reader_lags() -> None:
    conn, transport = connection()
    conn.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 3000000\r\n\r\n")
    conn.data_received(b"x" * 1_100_000)
    assert transport.is_paused
    assert len(conn.take()) == 1_100_000
    assert not transport.is_paused


def test_start_on_a_closed_transport_is_a_connect_error() -> None:
    conn, transport = connection()
    transport.is_closed = True
    conn.start(b"GET / HTTP/1.1\r\n\r\n")
    assert isinstance(conn.error, UpstreamConnectError) and transport.written == [
        b"GET / HTTP/1.1\r\n\r\n"
    ]


# --- fuzz ---------------------------------------------------------------------------------

_TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-0123456789", min_size=1, max_size=12)
_VALUE = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30)
_FRAMING = st.sampled_from(["length", "chunked", "close", "empty"])


@st.composite
def responses(draw: st.DrawFn) -> tuple[bytes, int, dict[str, str], bytes, bool]:
    """A valid response: its bytes, status, headers as parsed, body, and whether it ends
    only when the connection closes."""
    framing = draw(_FRAMING)
    status = 204 if framing == "empty" else draw(st.sampled_from([200, 201, 400, 429, 500, 503]))
    names = draw(st.lists(_TOKEN, max_size=8, unique=True))
    names = [n for n in names if n not in ("content-length", "transfer-encoding", "connection")]
    headers = {name: draw(_VALUE).strip() for name in names}
    body = b"" if framing == "empty" else draw(st.binary(max_size=300))
    lines = [f"HTTP/1.1 {status} Some Reason"] + [f"{n}: {v}" for n, v in headers.items()]
    if framing == "length":
        lines.append(f"Content-Length: {len(body)}")
        headers["content-length"] = str(len(body))
        wire_body = body
    elif framing == "chunked":
        lines.append("Transfer-Encoding: chunked")
        headers["transfer-encoding"] = "chunked"
        sizes = draw(st.lists(st.integers(1, 64), max_size=10))
        wire_body, rest = b"", body
        for size in sizes:
            piece, rest = rest[:size], rest[size:]
            if piece:
                wire_body += f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
        if rest:
            wire_body += f"{len(rest):X}\r\n".encode() + rest + b"\r\n"
        wire_body += b"0\r\n\r\n"
    else:
        wire_body = body
    data = ("\r\n".join(lines) + "\r\n\r\n").encode() + wire_body
    return data, status, headers, body, framing == "close"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(responses(), st.lists(st.integers(0, 10_000), max_size=12))
def test_fuzz_valid_responses_parse_identically_however_split(
    response: tuple[bytes, int, dict[str, str], bytes, bool], cuts: list[int]
) -> None:
    data, status, headers, body, is_until_close = response
    parsed = feed(split(data, cuts), is_closed_after=is_until_close)
    assert parsed.error is None
    assert (parsed.status, parsed.headers, parsed.body, parsed.is_complete) == (
        status,
        headers,
        body,
        True,
    )
    assert parsed.is_keep_alive is not is_until_close
    assert parsed == feed([data], is_closed_after=is_until_close)


_PREFIXES = st.sampled_from(
    [b"", b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"]
)


@settings(max_examples=400, deadline=None)
@given(_PREFIXES, st.binary(max_size=400), st.lists(st.integers(0, 10_000), max_size=8))
def test_fuzz_random_bytes_yield_hasten_errors_only(
    prefix: bytes, noise: bytes, cuts: list[int]
) -> None:
    conn, _ = connection(max_header_bytes=256, max_num_headers=8)
    for piece in split(prefix + noise, cuts):
        conn.data_received(piece)  # must never raise
        conn.take()
    conn.connection_lost(None)
    assert conn.error is None or isinstance(conn.error, UpstreamError)
    # Lost before complete always leaves an error: a half response never passes as whole.
    assert conn.is_complete or conn.error is not None


@pytest.mark.parametrize("cut", range(1, 12))
def test_chunk_size_line_split_at_every_point(cut: int) -> None:
    data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n"
    at = data.index(b"A\r\n")
    assert feed([data[: at + cut % 4], data[at + cut % 4 :]]).body == b"0123456789"


def test_a_write_that_raises_is_a_connect_error() -> None:
    conn, transport = connection()

    def refuse(data: bytes) -> None:
        raise RuntimeError("closed")

    transport.write = refuse  # type: ignore[method-assign]
    conn.start(b"GET / HTTP/1.1\r\n\r\n")
    assert isinstance(conn.error, UpstreamConnectError)
