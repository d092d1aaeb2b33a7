"""The lean client against real loopback servers: the simulator, and small asyncio servers
written here for the edge cases (odd chunking, closes, silence, huge heads, TLS, proxies)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest

from hasten.errors import UpstreamConnectError, UpstreamError, UpstreamTimeout
from hasten.simulator import SimConfig, build_app
from hasten.upstream import lean as lean_module
from hasten.upstream.http1 import Http1Connection
from hasten.upstream.lean import LeanTransport, idle_expired
from hasten.upstream.transport import UpstreamRequest
from tests.support.servers import ServerThread, free_port

TEST_TIMEOUT_S = 10.0
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "Served"], Awaitable[None]]


@dataclass
class Served:
    """What a test server saw."""

    port: int = 0
    num_connections: int = 0
    num_requests: int = 0
    request_lines: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    closed_by_client: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


async def read_request(reader: asyncio.StreamReader, served: Served) -> bytes | None:
    """One request off the connection (its body returned); None once the client closed."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        served.closed_by_client.set()
        return None
    lines = head.decode().split("\r\n")
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    served.num_requests += 1
    served.request_lines.append(lines[0])
    served.headers.append(headers)
    return await reader.readexactly(int(headers.get("content-length", "0")))


@contextlib.asynccontextmanager
async def serving(handler: Handler, tls: ssl.SSLContext | None = None) -> AsyncIterator[Served]:
    served = Served()

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served.num_connections += 1
        try:
            await handler(reader, writer, served)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        except asyncio.CancelledError:
            pass  # the test is over: a server still serving ends quietly
        finally:
            writer.close()

    server = await asyncio.start_server(on_connection, "127.0.0.1", 0, ssl=tls)
    served.port = server.sockets[0].getsockname()[1]
    try:
        yield served
    finally:
        server.close()


def answer(body: bytes = b'{"ok":true}', extra: str = "") -> bytes:
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return (head + extra + "\r\n").encode() + body


async def keep_answering(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, served: Served
) -> None:
    while await read_request(reader, served) is not None:
        writer.write(answer())


def request(url: str, **changes: object) -> UpstreamRequest:
    fields: dict[str, object] = {
        "method": "POST",
        "url": url,
        "headers": {"content-type": "application/json"},
        "body": b'{"q":1}',
        "connect_timeout_s": 2.0,
        "first_byte_timeout_s": 5.0,
    }
    fields.update(changes)
    return UpstreamRequest(**fields)  # type: ignore[arg-type]


@pytest.fixture
async def lean() -> AsyncIterator[LeanTransport]:
    transport = LeanTransport(proxies={})
    yield transport
    await transport.aclose()


async def test_simulator_answer_and_stream_on_one_kept_connection(lean: LeanTransport) -> None:
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    stream_body = orjson.dumps(
        {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    )
    with ServerThread(build_app(SimConfig())) as sim:
        url = sim.url + "/v1/chat/completions"
        async with asyncio.timeout(TEST_TIMEOUT_S):
            response = await lean.send(request(url, body=body))
            assert response.status == 200
            assert "choices" in orjson.loads(await response.read(5.0))
            response.close()
            streamed = await lean.send(request(url, body=stream_body))
            assert streamed.headers["content-type"].startswith("text/event-stream")
            text = b"".join([chunk async for chunk in streamed.iter_chunks(5.0)])
            streamed.close()
            assert text.rstrip().endswith(b"data: [DONE]")
            assert len(lean._open) == 1  # the same keep-alive connection both times


async def test_chunks_are_handed_on_as_they_arrive(lean: LeanTransport) -> None:
    got_first = asyncio.Event()

    async def odd_chunks(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, served: Served
    ) -> None:
        await read_request(reader, served)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel")
        await writer.drain()
        await got_first.wait()  # the client must see bytes before the chunk is even whole
        for piece in (b"lo\r\n", b"1", b"\r\n,\r\n6\r\n world\r\n0\r", b"\n\r\n"):
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.01)
        await read_request(reader, served)

    async with serving(odd_chunks) as served, asyncio.timeout(TEST_TIMEOUT_S):
        response = await lean.send(request(served.url))
        chunks = []
        async for chunk in response.iter_chunks(5.0):
            chunks.append(chunk)
            got_first.set()
        response.close()
    assert chunks[0] == b"hel" and b"".join(chunks) == b"hello, world"
    assert len(lean._idle[next(iter(lean._idle))]) == 1  # complete: back in the pool


async def test_connection_close_answer_is_not_reused(lean: LeanTransport) -> None:
    async def closing(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, served: Served
    ) -> None:
        await read_request(reader, served)
        writer.write(answer(extra="Connection: close\r\n"))
        await writer.drain()

    async with serving(closing) as served, asyncio.timeout(TEST_TIMEOUT_S):
        for _ in range(2):
            response = await lean.send(request(served.url))
            assert await response.read(5.0) == b'{"ok":true}'
    assert (served.num_connections, served.num_requests) == (2, 2)


async def test_body_read_until_close(lean: LeanTransport) -> None:
    async def until_close(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, served: Served
    ) -> None:
        await read_request(reader, served)
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nall of ")
        await writer.drain()
        writer.write(b"it")

    async with serving(until_close) as served, asyncio.timeout(TEST_TIMEOUT_S):
        response = await lean.send(request(served.url))
        assert await response.read(5.0) == b"all of it"
    assert not lean._open


async def test_keep_alive_reuses_one_connection_and_head_has_no_body(lean: LeanTransport) -> None:
    async def mixed(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, served: Served
    ) -> None:
        while await read_request(reader, served) is not None:
            if served.request_lines[-1].startswith("HEAD"):
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")

    async with serving(mixed) as served, asyncio.timeout(TEST_TIMEOUT_S):
        for method in ("HEAD", "POST", "HEAD", "GET"):
            body = b"x" if method == "POST" else None
            response = await lean.send(request(served.url + "/p?q=1", method=method, body=body))
            assert await response.read(5.0) == b""
    assert (served.num_connections, served.num_requests) == (1, 4)
    assert served.request_lines[0] == "HEAD /p?q=1 HTTP/1.1"
    assert served.headers[1]["content-length"] == "1" and served.headers[1]["host"].startswith(
        "127.0.0.1:"
    )


async def test_stale_pooled_connection_is_retried_once_on_a_fresh_one(lean: LeanTransport) -> None:
    async def closes_on_second(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, served: Served
    ) -> None:
        is_first_connection = served.num_connections == 1
        await read_request(reader, served)
        writer.write(answer())
        await writer.drain()
        if is_first_connection:
            await read_request(reader, served)  # read, then closed unanswered
            return
        await keep_answering(reader, writer, served)

    async with serving(closes_on_second) as served, asyncio.timeout(TEST_TIMEOUT_S):
        for _ in range(2):
            response = await lean.send(request(served.url))
            assert await response.read(5.0) == b'{"ok":true}'
    assert (served.num_connections, served.num_requests) == (2, 3)


async def test_fresh_connection_closed_unanswered_is_a_connect_error(lean: LeanTransport) -> None:
    async def hangs_up(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, served: Served
    ) -> None:
        await read_request(reader, served)

    async with serving(hangs_up) as served, asyncio.timeout(TEST_TIMEOUT_S):
        with pytest.raises(UpstreamConnectError, match="closed the connection before answering"):
            await lean.send(request(served.url))
    assert served.num_connections == 1  # no retry: nothing was pooled


async def test_connect_refused_is_a_connect_error(lean: LeanTransport) -> None:
    with pytest.raises(UpstreamConnectError, match="cannot connect"):
        await lean.send(request(f"http://127.0.0.1:{free_port()}/v1"))
    assert not lean._open


async def test_slow_first_byte_times_out_and_drops_the_connection(lean: LeanTransport) -> None:
    async def silent(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, served: Served
    ) -> None:
        await read_request(reader, served)
        await read_request(reader, served)  # until the client gives up

    async with serving(silent) as served, asyncio.timeout(TEST_TIMEOUT_S):
        with pytest.raises(UpstreamTimeout) as caught:
            await lean.send(request(served.url, first_byte_timeout_s=0.2))
        assert caught.value.code == "upstream_first_byte_timeout"
        await served.closed_by_client.wait()
    assert not lean._open


@pytest.mark.parametrize("how", ["read", "iter_chunks"])
async def test_silence_after_the_head_times_out(lean: LeanTransport, how: str) -> None:
    async def stalls(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, served: Served
    ) -> None:
        await read_request(reader, served)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        await read_request(reader, served)

    async with serving(stalls) as served, asyncio.timeout(TEST_TIMEOUT_S):
        response = await lean.send(request(served.url))
        with pytest.raises(UpstreamTimeout) as caught:
            if how == "read":
                await response.read(0.2)
            else:
                assert [c async for c in response.iter_chunks(0.2)] == [b"abc"]
        assert caught.value.code == (
            "upstream_timeout" if how == "read" else "upstream_idle_timeout"
        )
        await served.closed_by_client.wait()


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n", "response head over"),
        (b"garbage\r\n\r\n", "unparseable"),
    ],
)
async def test_hostile_heads_are_upstream_errors(
    lean: LeanTransport, reply: bytes, message: str
) -> None:
    async def hostile(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, served: Served
    ) -> None:
        await read_request(reader, served)
        writer.write(reply)
        await writer.drain()
        await read_request(reader, served)

    async with serving(hostile) as served, asyncio.timeout(TEST_TIMEOUT_S):
        with pytest.raises(UpstreamError, match=message) as caught:
            await lean.send(request(served.url))
        assert type(caught.value) is UpstreamError
        await served.closed_by_client.wait()


async def test_cut_mid_body_is_an_upstream_error(lean: LeanTransport) -> None:
    async def cuts(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, served: Served
    ) -> None:
        await read_request(reader, served)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        await writer.drain()

    async with serving(cuts) as served, asyncio.timeout(TEST_TIMEOUT_S):
        response = await lean.send(request(served.url))
        with pytest.raises(UpstreamError, match="mid-response"):
            await response.read(5.0)


async def test_a_header_that_would_inject_lines_is_refused(lean: LeanTransport) -> None:
    with pytest.raises(UpstreamError, match="would break the request"):
        await lean.send(request("http://127.0.0.1:1/", headers={"x": "a\r\nInjected: 1"}))


async def test_closing_mid_stream_cancels_upstream(lean: LeanTransport) -> None:
    async def endless(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, served: Served
    ) -> None:
        await read_request(reader, served)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        until_closed = asyncio.create_task(read_request(reader, served))
        while not until_closed.done():
            writer.write(b"5\r\ntoken\r\n")
            await writer.drain()
            await asyncio.sleep(0.01)

    async with serving(endless) as served, asyncio.timeout(TEST_TIMEOUT_S):
        response = await lean.send(request(served.url))
        async for _ in response.iter_chunks(5.0):
            break
        response.close()
        await served.closed_by_client.wait()
    assert not lean._open


async def test_cancelled_caller_drops_the_connection(lean: LeanTransport) -> None:
    async def silent(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, served: Served
    ) -> None:
        await read_request(reader, served)
        await read_request(reader, served)

    async with serving(silent) as served, asyncio.timeout(TEST_TIMEOUT_S):
        task = asyncio.create_task(lean.send(request(served.url)))
        while served.num_requests == 0:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await served.closed_by_client.wait()
    assert not lean._open


async def test_connection_cap_makes_callers_wait_then_times_out() -> None:
    release = asyncio.Event()

    async def held(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, served: Served
    ) -> None:
        while await read_request(reader, served) is not None:
            await release.wait()
            writer.write(answer())

    transport = LeanTransport(max_connections=2, proxies={})
    try:
        async with serving(held) as served, asyncio.timeout(TEST_TIMEOUT_S):
            tasks = [asyncio.create_task(transport.send(request(served.url))) for _ in range(3)]
            while served.num_requests < 2:
                await asyncio.sleep(0.01)
            with pytest.raises(UpstreamConnectError, match=r"timed out after 0\.2 s"):
                await transport.send(request(served.url, connect_timeout_s=0.2))
            assert served.num_connections == 2 and not tasks[2].done()
            release.set()
            for task in tasks:
                response = await task
                assert await response.read(5.0) == b'{"ok":true}'
        assert served.num_connections == 2 and served.num_requests == 3
    finally:
        await transport.aclose()


async def test_idle_connection_closed_by_the_server_leaves_the_pool(lean: LeanTransport) -> None:
    async def once(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, served: Served
    ) -> None:
        await read_request(reader, served)
        writer.write(answer())
        await writer.drain()

    async with serving(once) as served, asyncio.timeout(TEST_TIMEOUT_S):
        response = await lean.send(request(served.url))
        await response.read(5.0)
        while lean._open:  # the server's close reaches the pool without any request
            await asyncio.sleep(0.01)
        response = await lean.send(request(served.url))
        assert await response.read(5.0) == b'{"ok":true}'
    assert served.num_connections == 2


# --- TLS and proxies ------------------------------------------------------------------------


@dataclass(frozen=True)
class Certificate:
    cert_path: Path
    key_path: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert_path, self.key_path)
        return context

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cert_path))


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Certificate]:
    openssl = shutil.which("openssl")
    assert openssl is not None, "the TLS tests need the openssl command"
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,DNS:upstream.test,IP:127.0.0.1"],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    yield Certificate(cert, key)


async def test_https_verifies_and_uses_sni(certificate: Certificate) -> None:
    transport = LeanTransport(ssl_context=certificate.client_context(), proxies={})
    untrusting = LeanTransport(proxies={})
    try:
        async with (
            serving(keep_answering, tls=certificate.server_context()) as served,
            asyncio.timeout(TEST_TIMEOUT_S),
        ):
            url = f"https://localhost:{served.port}/v1/x"
            for _ in range(2):
                response = await transport.send(request(url))
                assert await response.read(5.0) == b'{"ok":true}'
            with pytest.raises(UpstreamConnectError, match="certificate not trusted"):
                await untrusting.send(request(url))
        # One connection served both requests; the refused handshake never reached a handler.
        assert (served.num_connections, served.num_requests) == (1, 2)
        assert served.headers[0]["host"] == f"localhost:{served.port}"
    finally:
        await transport.aclose()
        await untrusting.aclose()


async def proxy_handler(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, served: Served
) -> None:
    """Answers absolute-form requests itself; tunnels CONNECT to 127.0.0.1:<port>."""
    await read_request(reader, served)
    line = served.request_lines[-1]
    if not line.startswith("CONNECT "):
        writer.write(answer(orjson.dumps({"proxied": line})))
        await keep_answering(reader, writer, served)
        return
    port = int(line.split()[1].rsplit(":", 1)[1])
    up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

    async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
        sink.close()

    await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


def _basic(credentials: bytes) -> str:
    return "Basic " + base64.b64encode(credentials).decode()


async def test_http_through_the_environment_proxy_with_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with serving(proxy_handler) as proxy, asyncio.timeout(TEST_TIMEOUT_S):
        monkeypatch.setenv("HTTP_PROXY", f"http://bob:s%3Acret@127.0.0.1:{proxy.port}")
        monkeypatch.delenv("http_proxy", raising=False)
        transport = LeanTransport()
        try:
            response = await transport.send(request("http://upstream.invalid:8000/v1/chat?x=1"))
            body = orjson.loads(await response.read(5.0))
        finally:
            await transport.aclose()
    assert body == {"proxied": "POST http://upstream.invalid:8000/v1/chat?x=1 HTTP/1.1"}
    assert proxy.headers[0]["proxy-authorization"] == _basic(b"bob:s:cret")
    assert proxy.headers[0]["host"] == "upstream.invalid:8000"


async def test_https_through_a_connect_tunnel(
    monkeypatch: pytest.MonkeyPatch, certificate: Certificate
) -> None:
    async with (
        serving(keep_answering, tls=certificate.server_context()) as upstream,
        serving(proxy_handler) as proxy,
        asyncio.timeout(TEST_TIMEOUT_S),
    ):
        for name in ("HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("https_proxy", f"http://alice:pw@127.0.0.1:{proxy.port}")
        transport = LeanTransport(ssl_context=certificate.client_context())
        try:
            # A name only the proxy reaches (loopback hosts are never proxied): it tunnels
            # to 127.0.0.1, and the certificate carries the name.
            url = f"https://upstream.test:{upstream.port}/v1"
            for _ in range(2):
                response = await transport.send(request(url))
                assert await response.read(5.0) == b'{"ok":true}'
        finally:
            await transport.aclose()
    assert proxy.request_lines == [f"CONNECT upstream.test:{upstream.port} HTTP/1.1"]
    assert proxy.headers[0]["proxy-authorization"] == _basic(b"alice:pw")
    assert "proxy-authorization" not in upstream.headers[0]
    assert (upstream.num_connections, upstream.num_requests) == (1, 2)


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
async def test_a_loopback_upstream_goes_direct_past_the_environment_proxy(
    monkeypatch: pytest.MonkeyPatch, host: str
) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")  # nothing listens
    for name in ("http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    async with serving(keep_answering) as served, asyncio.timeout(TEST_TIMEOUT_S):
        transport = LeanTransport()
        try:
            response = await transport.send(request(f"http://{host}:{served.port}/v1"))
            assert await response.read(5.0) == b'{"ok":true}'
        finally:
            await transport.aclose()
    assert served.request_lines == ["POST /v1 HTTP/1.1"]


def test_idle_expired_picks_connections_idle_for_the_timeout() -> None:
    old, fresh = Http1Connection(), Http1Connection()
    assert idle_expired({old: 10.0, fresh: 39.0}, now_s=40.0, timeout_s=30.0) == [old]


async def test_idle_connections_are_closed_after_the_keepalive_timeout(
    monkeypatch: pytest.MonkeyPatch, lean: LeanTransport
) -> None:
    monkeypatch.setattr(lean_module, "KEEPALIVE_TIMEOUT_S", 0.1)
    async with serving(keep_answering) as served, asyncio.timeout(TEST_TIMEOUT_S):
        first = await lean.send(request(served.url))
        second = await lean.send(request(served.url))  # the first is busy: a second connection
        await first.read(5.0)
        await asyncio.sleep(0.05)
        await second.read(5.0)  # idle 50 ms after the first: the sweeper comes back for it
        while lean._open:
            await asyncio.sleep(0.01)
        await served.closed_by_client.wait()
    assert served.num_connections == 2


@pytest.mark.parametrize(
    ("url", "error", "message"),
    [
        ("http://" + "a" * 300 + "/v1", UpstreamConnectError, "UnicodeError"),
        ("http://h:99999/v1", UpstreamError, "URL is invalid"),
        ("ftp://h/v1", UpstreamError, "only http:// and https://"),
        ("http://u:pw@h/v1", UpstreamError, "carries credentials"),
    ],
)
async def test_unsendable_urls_are_hasten_errors(
    lean: LeanTransport, url: str, error: type[UpstreamError], message: str
) -> None:
    with pytest.raises(error, match=message) as caught:
        await lean.send(request(url))
    assert "pw" not in str(caught.value)
    assert not lean._open


async def test_ssl_cert_file_from_the_environment_is_trusted(
    monkeypatch: pytest.MonkeyPatch, certificate: Certificate
) -> None:
    # OpenSSL's own variable: the way to trust a private CA without a config key.
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate.cert_path))
    transport = LeanTransport(proxies={})
    try:
        async with (
            serving(keep_answering, tls=certificate.server_context()) as served,
            asyncio.timeout(TEST_TIMEOUT_S),
        ):
            response = await transport.send(request(f"https://127.0.0.1:{served.port}/v1"))
            assert await response.read(5.0) == b'{"ok":true}'
    finally:
        await transport.aclose()


async def test_a_big_body_arrives_whole(lean: LeanTransport) -> None:
    received: list[bytes] = []

    async def echo_length(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, served: Served
    ) -> None:
        while (body := await read_request(reader, served)) is not None:
            received.append(body)
            writer.write(answer(str(len(body)).encode()))

    big = bytes(range(256)) * 1000  # 256,000 bytes: written apart from the head
    async with serving(echo_length) as served, asyncio.timeout(TEST_TIMEOUT_S):
        for body in (big, b"small"):
            response = await lean.send(request(served.url, body=body))
            assert await response.read(5.0) == str(len(body)).encode()
    assert received == [big, b"small"] and served.num_connections == 1
