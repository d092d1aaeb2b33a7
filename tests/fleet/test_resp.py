"""The lean pipelined Redis connection, against a real redis-server and a silent socket."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import hiredis
import pytest
import uvloop
from hypothesis import given
from hypothesis import strategies as st
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from hasten.fleet.resp import LuaScript, RespConnection, pack
from tests.support.servers import free_port, redis_server


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture
async def conn(redis_url: str) -> AsyncIterator[RespConnection]:
    connection = RespConnection(redis_url, connect_timeout_s=1.0, op_timeout_s=1.0)
    yield connection
    await connection.aclose()


@given(
    st.lists(
        st.lists(
            st.one_of(st.binary(max_size=40), st.text(max_size=20), st.integers(), st.floats()),
            min_size=1,
            max_size=5,
        ),
        min_size=1,
        max_size=4,
    )
)
def test_packed_commands_read_back_as_the_same_arguments(commands: list[list[object]]) -> None:
    reader = hiredis.Reader()
    reader.feed(pack(commands))  # type: ignore[arg-type]
    for command in commands:
        expected = []
        for arg in command:
            if isinstance(arg, bytes):
                expected.append(arg)
            elif isinstance(arg, str):
                expected.append(arg.encode())
            elif isinstance(arg, float):
                expected.append(repr(arg).encode())
            else:
                expected.append(str(arg).encode())
        assert reader.gets() == expected
    assert reader.gets() is False


async def test_concurrent_commands_each_get_their_own_reply(conn: RespConnection) -> None:
    async def one(i: int) -> object:
        return await conn.call("ECHO", f"reply {i}")

    replies = await asyncio.gather(*(one(i) for i in range(200)))
    assert replies == [f"reply {i}".encode() for i in range(200)]


async def test_a_batch_keeps_error_replies_in_place(conn: RespConnection) -> None:
    await conn.call("SET", "resp:str", "x")
    replies = await conn.batch([("GET", "resp:str"), ("LPUSH", "resp:str", "y"), ("PING",)])
    assert replies[0] == b"x"
    assert isinstance(replies[1], ResponseError) and "WRONGTYPE" in str(replies[1])
    assert replies[2] == b"PONG"
    with pytest.raises(ResponseError):
        await conn.call("LPUSH", "resp:str", "y")
    assert await conn.call("PING") == b"PONG"  # the connection is still good


async def test_a_script_redis_does_not_have_is_sent_with_its_source(
    conn: RespConnection,
) -> None:
    script = LuaScript("return {KEYS[1], ARGV[1], 'resp-test'}")
    await conn.call("SCRIPT", "FLUSH")
    (first,) = await conn.scripts([(script, ["k"], ["a"])])
    assert first == [b"k", b"a", b"resp-test"]
    assert await conn.call("SCRIPT", "EXISTS", script.sha) == [1]
    (second,) = await conn.scripts([(script, ["k2"], ["b"])])  # by SHA now
    assert second == [b"k2", b"b", b"resp-test"]


async def test_a_cancelled_command_leaves_the_others_replies_in_order(
    conn: RespConnection,
) -> None:
    slow = asyncio.ensure_future(conn.call("BLPOP", "resp:never", "0.3"))
    quick = asyncio.ensure_future(conn.call("ECHO", "after"))
    await asyncio.sleep(0.05)
    slow.cancel()
    assert await quick == b"after"  # answered after the BLPOP's reply, matched to it
    assert await conn.call("ECHO", "next") == b"next"


async def test_password_and_database_come_from_the_url(redis_url: str) -> None:
    admin = RespConnection(redis_url, connect_timeout_s=1.0, op_timeout_s=1.0)
    await admin.call("CONFIG", "SET", "requirepass", "s3cret")
    host_port = redis_url.removeprefix("redis://").split("/")[0]
    authed = RespConnection(
        f"redis://:s3cret@{host_port}/3", connect_timeout_s=1.0, op_timeout_s=1.0
    )
    wrong = RespConnection(f"redis://:wrong@{host_port}/0", connect_timeout_s=1.0, op_timeout_s=1.0)
    try:
        await authed.call("SET", "resp:db", "three")
        assert await authed.call("CLIENT", "INFO") is not None
        assert b"db=3" in await authed.call("CLIENT", "INFO")
        with pytest.raises(RedisConnectionError):
            await wrong.call("PING")
    finally:
        await admin.call("AUTH", "s3cret")
        await admin.call("CONFIG", "SET", "requirepass", "")
        for connection in (admin, authed, wrong):
            await connection.aclose()


async def test_a_silent_server_times_out_and_the_next_command_connects_again() -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def silent(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # reads nothing, answers nothing

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = RespConnection(f"redis://127.0.0.1:{port}", connect_timeout_s=1.0, op_timeout_s=0.1)
    try:
        with pytest.raises(RedisTimeoutError):
            await conn.call("PING")
        with pytest.raises(RedisTimeoutError):
            await conn.call("PING")
        # A timed-out connection is dropped: a late reply can never answer the next command.
        assert len(accepted) == 2
    finally:
        await conn.aclose()
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_redis_gone_then_back_fails_fast_then_reconnects() -> None:
    port = free_port()
    conn = RespConnection(f"redis://127.0.0.1:{port}", connect_timeout_s=0.5, op_timeout_s=0.5)
    try:
        with redis_server(port):
            assert await conn.call("PING") == b"PONG"
        with pytest.raises(RedisConnectionError):
            await conn.call("PING")
        with redis_server(port):
            assert await conn.call("PING") == b"PONG"
    finally:
        await conn.aclose()


def _count_writes(conn: RespConnection) -> list[bytes]:
    """Records every write of ``conn``'s current connection (after it connected)."""
    protocol = conn._protocol
    assert protocol is not None and protocol.transport is not None
    transport, writes = protocol.transport, []
    write = transport.write

    def recording(data: bytes | bytearray | memoryview) -> None:
        writes.append(bytes(data))
        write(data)

    transport.write = recording  # type: ignore[method-assign]
    return writes


async def test_a_deferred_command_rides_with_the_next_one_in_its_order(redis_url: str) -> None:
    conn = RespConnection(redis_url, connect_timeout_s=1.0, op_timeout_s=1.0, defer_s=5.0)
    try:
        await conn.call("DEL", "deferred:a")
        writes = _count_writes(conn)
        later = asyncio.create_task(conn.batch([("SET", "deferred:a", "1")], is_deferred=True))
        await asyncio.sleep(0.05)
        assert writes == [] and not later.done()
        # Asked later, written with it and after it: the GET sees the SET.
        assert await conn.call("GET", "deferred:a") == b"1"
        assert await later == [b"OK"]
        assert len(writes) == 1
    finally:
        await conn.aclose()


async def test_a_deferred_command_alone_is_written_after_the_delay(redis_url: str) -> None:
    conn = RespConnection(redis_url, connect_timeout_s=1.0, op_timeout_s=1.0, defer_s=0.01)
    try:
        await conn.call("PING")
        writes = _count_writes(conn)
        replies = await conn.batch([("PING",), ("ECHO", "x")], is_deferred=True)
        assert replies == [b"PONG", b"x"] and len(writes) == 1
    finally:
        await conn.aclose()


async def test_a_deferred_command_before_any_connection_goes_at_once(redis_url: str) -> None:
    conn = RespConnection(redis_url, connect_timeout_s=1.0, op_timeout_s=1.0, defer_s=60.0)
    try:
        reply = await asyncio.wait_for(conn.batch([("PING",)], is_deferred=True), 5.0)
        assert reply == [b"PONG"]
    finally:
        await conn.aclose()


async def test_deferred_commands_fail_with_their_dropped_connection(redis_url: str) -> None:
    conn = RespConnection(redis_url, connect_timeout_s=1.0, op_timeout_s=1.0, defer_s=60.0)
    await conn.call("PING")
    writes = _count_writes(conn)
    waiting = asyncio.create_task(conn.batch([("SET", "deferred:b", "1")], is_deferred=True))
    await asyncio.sleep(0)
    await conn.aclose()
    with pytest.raises(RedisConnectionError):
        await asyncio.wait_for(waiting, 5.0)
    assert writes == []
    # The next command connects again; nothing deferred earlier reaches it.
    assert await conn.call("EXISTS", "deferred:b") == 0
    await conn.aclose()


async def test_send_now_writes_before_it_returns(redis_url: str) -> None:
    conn = RespConnection(redis_url, connect_timeout_s=1.0, op_timeout_s=1.0)
    try:
        assert conn.send_now("PING") is None  # not connected yet: the caller uses call
        assert await conn.call("PING") == b"PONG"
        writes = _count_writes(conn)
        reply = conn.send_now("ECHO", "now")
        assert reply is not None
        assert len(writes) == 1  # on its way before the caller awaits anything
        assert await reply == b"now"
        refused = conn.send_now("NO-SUCH-COMMAND")
        assert refused is not None
        assert isinstance(await refused, hiredis.ReplyError)  # in place, as in a batch
        assert await conn.call("ECHO", "after") == b"after"  # the replies stay in step
    finally:
        await conn.aclose()


async def test_a_sent_command_past_its_timeout_fails_and_drops_the_connection(
    redis_url: str,
) -> None:
    conn = RespConnection(redis_url, connect_timeout_s=1.0, op_timeout_s=0.2)
    try:
        assert await conn.call("PING") == b"PONG"
        reply = conn.send_now("BLPOP", "send-now:never", "5")  # Redis holds the reply back
        assert reply is not None
        with pytest.raises(RedisTimeoutError):
            await asyncio.wait_for(reply, 5.0)
        assert conn.send_now("PING") is None  # dropped: nothing later is read as its reply
        assert await conn.call("PING") == b"PONG"  # and the next call connects again
    finally:
        await conn.aclose()


@pytest.mark.parametrize("is_uvloop", [False, True])
def test_a_reply_due_with_its_timeout_on_a_starved_loop_keeps_the_connection(
    redis_url: str, is_uvloop: bool
) -> None:
    async def starved() -> None:
        conn = RespConnection(redis_url, connect_timeout_s=1.0, op_timeout_s=0.05)
        try:
            await conn.call("PING")
            connection = conn._protocol
            asked = asyncio.create_task(conn.call("ECHO", "late"))
            await asyncio.sleep(0)  # written, its timer set
            time.sleep(0.3)  # the loop starved: the reply and the timer are both due now
            assert await asked == b"late"
            assert conn._protocol is connection and connection is not None
            assert connection.lost is None
        finally:
            await conn.aclose()

    if is_uvloop:
        uvloop.run(starved())
    else:
        asyncio.run(starved())
