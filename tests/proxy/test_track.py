"""The client's view of a response, as the ASGI send wrapper records it."""

from __future__ import annotations

import asyncio

from hasten.proxy.track import ResponseTrack
from hasten.wire.asgi import Message


def _run(messages: list[Message]) -> tuple[ResponseTrack, list[Message]]:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def main() -> ResponseTrack:
        track = ResponseTrack(send)
        for message in messages:
            await track.send(message)
        return track

    return asyncio.run(main()), sent


def test_stream_chunks_give_first_byte_gaps_and_tail() -> None:
    track, sent = _run(
        [
            {"type": "http.response.start", "status": 200, "headers": []},
            {"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True},
            {"type": "http.response.body", "body": b"", "more_body": True},
            {"type": "http.response.body", "body": b"data: 2\n\n", "more_body": True},
            {"type": "http.response.body", "body": b"data: 3\n\n", "more_body": True},
            {"type": "http.response.body", "body": b"", "more_body": False},
        ]
    )
    assert len(sent) == 6  # everything is passed on
    assert track.status == 200 and track.start_s is not None and track.first_s is not None
    assert len(track.gaps_s) == 2 and all(g >= 0 for g in track.gaps_s)  # empty bodies skipped
    assert (track.prev, track.tail) == (b"data: 2\n\n", b"data: 3\n\n")
    assert track.end_s is not None and track.end_s >= track.first_s
    assert track.error_code is None


def test_an_error_event_ending_a_stream_gives_its_code() -> None:
    error = b'{"message":"m","type":"t","param":null,"code":"upstream_idle_timeout"}'
    event = b'data: {"error":' + error + b"}\n\n"
    track, _ = _run(
        [
            {"type": "http.response.start", "status": 200, "headers": []},
            {"type": "http.response.body", "body": event, "more_body": False},
        ]
    )
    assert track.error_code == "upstream_idle_timeout"
    broken, _ = _run([{"type": "http.response.body", "body": b'data: {"error" nope'}])
    assert broken.error_code == "stream_error" and broken.end_s is not None
