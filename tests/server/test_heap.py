"""The startup heap frozen once every server listens, never before, never for a failed start."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from hasten.server.heap import freeze_after_startup, frozen_after_startup


@dataclass
class _Server:
    started: bool = False


@pytest.fixture(autouse=True)
def _unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the rest of the suite runs with a collector that sees everything


async def test_freezes_only_once_every_server_has_started() -> None:
    servers = [_Server(), _Server()]
    freezing = asyncio.ensure_future(freeze_after_startup(servers, poll_s=0.001))
    servers[0].started = True
    await asyncio.sleep(0.02)
    assert not freezing.done() and gc.get_freeze_count() == 0  # one is still starting
    servers[1].started = True
    frozen = await asyncio.wait_for(freezing, 5)
    assert frozen > 0 and gc.get_freeze_count() > 0


async def test_startup_garbage_is_collected_not_frozen() -> None:
    class Cycle:
        def __init__(self) -> None:
            self.me = self

    gc.disable()  # so that only the freeze's own collection can reclaim it
    try:
        garbage = weakref.ref(Cycle())
        assert garbage() is not None  # a cycle: reference counting alone never frees it
        await freeze_after_startup([_Server(started=True)])
        assert garbage() is None
    finally:
        gc.enable()


async def test_a_server_that_never_starts_leaves_nothing_frozen_or_pending() -> None:
    server = _Server()
    async with frozen_after_startup([server]):
        await asyncio.sleep(0.03)  # its startup failed: serve() returned without starting
    await asyncio.sleep(0)
    assert gc.get_freeze_count() == 0
    pending = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    assert pending == []
