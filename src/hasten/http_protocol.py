"""uvicorn's httptools protocol, answering requests it cannot parse in the OpenAI error shape.

A malformed ``Content-Length`` or a forbidden byte in a header fails in the HTTP parser,
before any ASGI app runs; uvicorn then writes a plain-text 400 itself. This subclass keeps
uvicorn's handling (log line, connection closed) and changes only the body it sends.
"""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from hasten.errors import InvalidRequest

# Bytes, not an exception instance: nothing mutable is shared between connections.
_BODY = InvalidRequest(
    "Invalid HTTP request: its request line or headers could not be parsed (for example a "
    "malformed Content-Length or a forbidden byte in a header).",
    code="invalid_http_request",
).to_json()


class GatewayHttpProtocol(HttpToolsProtocol):
    def send_400_response(self, msg: str) -> None:
        content = [b"HTTP/1.1 400 Bad Request\r\n"]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend(
            [
                b"content-type: application/json\r\n",
                b"content-length: " + str(len(_BODY)).encode("ascii") + b"\r\n",
                b"x-hasten-cache: bypass\r\n",
                b"connection: close\r\n",
                b"\r\n",
                _BODY,
            ]
        )
        self.transport.write(b"".join(content))
        self.transport.close()
