"""The connection phases on loopback: URL parsing, and TLS handshakes against a TLS server
with a certificate made by the openssl command."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from hasten.doctor.connection import parse_target, time_connections
from hasten.errors import DoctorError

NUM_TRIES = 3


@pytest.mark.parametrize("url", ["ftp://example.com/v1", "api.openai.com/v1", "http://:80/v1"])
def test_urls_that_are_not_http_are_refused(url: str) -> None:
    with pytest.raises(DoctorError, match="not an http"):
        parse_target(url)


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made by the openssl command."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl command to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    command = [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    command += ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    subprocess.run(
        [*command, "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


async def test_tls_handshakes_are_timed_and_failures_explained(
    self_signed: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = self_signed
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    target = parse_target(f"https://127.0.0.1:{port}/v1")
    try:
        with pytest.raises(DoctorError, match=r"TLS handshake with 127\.0\.0\.1"):
            await time_connections(target, ("127.0.0.1",), NUM_TRIES, 10.0)
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # OpenSSL's default trust, read per call
        connect_ms, tls_ms = await time_connections(target, ("127.0.0.1",), NUM_TRIES, 10.0)
    finally:
        server.close()
        await server.wait_closed()
    assert len(connect_ms) == len(tls_ms) == NUM_TRIES
    assert all(ms > 0 for ms in tls_ms)
