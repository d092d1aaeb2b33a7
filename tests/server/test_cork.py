"""HeadCork (hasten.server.cork): a response head goes out with its first body bytes."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import httpx

from hasten.server.cork import HeadCork
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import chat_body, make_config, running_gateway
from tests.support.servers import ServerThread


class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.is_closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.is_closed = True

    def is_closing(self) -> bool:
        return self.is_closed

    def get_extra_info(self, name: str) -> Any:
        return f"info:{name}"


class _Cycle:
    response_started = False


def _cork(loop: asyncio.AbstractEventLoop) -> tuple[HeadCork, _Transport, _Cycle]:
    transport, cycle = _Transport(), _Cycle()
    return HeadCork(cast(asyncio.Transport, transport), cycle, loop), transport, cycle


async def test_the_head_goes_out_with_the_first_body_write() -> None:
    cork, transport, cycle = _cork(asyncio.get_running_loop())
    cork.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # before the response: straight through
    cycle.response_started = True
    cork.write(b"HEAD")
    assert transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    cork.write(b"body")
    cork.write(b"more")
    await asyncio.sleep(0)  # the flush scheduled for the head finds nothing left
    assert transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n", b"HEADbody", b"more"]


async def test_a_head_without_a_body_in_the_same_turn_goes_out_on_the_next() -> None:
    cork, transport, cycle = _cork(asyncio.get_running_loop())
    cycle.response_started = True
    cork.write(b"HEAD")
    assert transport.writes == []
    await asyncio.sleep(0)
    assert transport.writes == [b"HEAD"]
    cork.write(b"chunk")
    assert transport.writes == [b"HEAD", b"chunk"]


async def test_close_writes_a_held_head_first_and_other_calls_reach_the_transport() -> None:
    cork, transport, cycle = _cork(asyncio.get_running_loop())
    cycle.response_started = True
    cork.write(b"HEAD")
    cork.close()
    assert transport.writes == [b"HEAD"] and transport.is_closed and cork.is_closing()
    await asyncio.sleep(0)
    assert transport.writes == [b"HEAD"]  # nothing written twice, nothing after the close
    assert cork.get_extra_info("peername") == "info:peername"


def test_whole_and_streamed_answers_arrive_intact_over_one_connection() -> None:
    with (
        ServerThread(build_app(SimConfig(output_tokens=8))) as sim,
        running_gateway(make_config({"sim": sim.url + "/v1"})) as gateway,
        httpx.Client(timeout=30) as client,
    ):
        url = f"{gateway.url}/v1/chat/completions"
        for i in range(3):  # kept alive: each head and its body, in order
            assert client.get(f"{gateway.url}/healthz").json() == {"status": "ok"}
            whole = client.post(url, json=chat_body(f"question {i}"))
            assert whole.status_code == 200 and whole.json()["choices"][0]["message"]["content"]
            with client.stream("POST", url, json=chat_body(f"question {i}", stream=True)) as sse:
                assert sse.headers["content-type"].startswith("text/event-stream")
                assert b"".join(sse.iter_bytes()).endswith(b"data: [DONE]\n\n")
