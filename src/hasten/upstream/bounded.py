"""What an upstream can make the gateway hold of one answer: at most its ``max_answer_bytes``.

A hostile or broken upstream can send a body or a stream that never ends. Unbounded, the
gateway held all of it until the total timeout (one endless embeddings body took it from
0.6 to 10 GB of memory in a minute). So every read of an upstream answer is bounded by the
upstream's ``max_answer_bytes``: whole bodies here (``read_bounded``), streams as they are
forwarded (``UpstreamCall.iter_chunks`` counts with an ``AnswerBytes``), error bodies read to
pass on with a smaller cap of their own; a stream's every event counts ``EVENT_COST_BYTES``
more. Past it the attempt fails with
``upstream_too_large``: a 502 (or, mid-stream, the stream's final error event), nothing
stored, and the deployment's pool counts the failure like any other broken answer.

The reader keeps nothing after it fails: the parts read so far are dropped before the error
leaves, so an error (and the frames its traceback holds) never carries them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from hasten.errors import UpstreamError, UpstreamTimeout

TOO_LARGE_CODE = "upstream_too_large"
# Each event of a stream counts this much more against the cap: checking, recording and
# forwarding one costs microseconds and objects whatever its size, so a stream of tiny
# events ("data:0", 8 bytes each) must not buy eight times the work of real ones (~200).
EVENT_COST_BYTES = 64
# An error body is read whole to be passed on (a retryable status whose retries all fail, a
# final 4xx): a few hundred bytes from a real upstream, an HTML page from a proxy.
MAX_ERROR_BODY_BYTES = 1024 * 1024


def too_large(max_bytes: int) -> UpstreamError:
    return UpstreamError(
        f"upstream answer exceeded the gateway's limit of {max_bytes} bytes "
        "(max_answer_bytes of the upstream)",
        code=TOO_LARGE_CODE,
    )


class AnswerBytes:
    """Counts the bytes of one answer read so far against its cap."""

    __slots__ = ("max_bytes", "num_bytes")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.num_bytes = 0

    def add(self, num_bytes: int) -> None:
        """Counts ``num_bytes`` more; raises ``too_large`` past the cap."""
        self.num_bytes += num_bytes
        if self.num_bytes > self.max_bytes:
            raise too_large(self.max_bytes)


async def read_bounded(chunks: AsyncIterator[bytes], *, timeout_s: float, max_bytes: int) -> bytes:
    """All of ``chunks`` (a response's body, ``UpstreamResponse.iter_chunks``) within
    ``timeout_s``; ``too_large`` past ``max_bytes``."""
    parts: list[bytes] = []
    count = AnswerBytes(max_bytes)
    try:
        async with asyncio.timeout(max(0.001, timeout_s)):
            async for chunk in chunks:
                count.add(len(chunk))
                parts.append(chunk)
    except TimeoutError:
        parts.clear()
        raise UpstreamTimeout(f"upstream response not complete within {timeout_s:g} s") from None
    except BaseException:
        parts.clear()  # a cycle holding this frame must not hold the body with it
        raise
    return parts[0] if len(parts) == 1 else b"".join(parts)
