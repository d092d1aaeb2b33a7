"""The startup heap frozen once the gateway is built, before anything it starts can run."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from hasten.app import HastenApp
from hasten.config import GatewayConfig
from hasten.server.heap import freeze_startup_heap


@pytest.fixture(autouse=True)
def _unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the rest of the suite runs with a collector that sees everything


def test_startup_garbage_is_collected_not_frozen() -> None:
    class Cycle:
        def __init__(self) -> None:
            self.me = self

    gc.disable()  # so that only the freeze's own collection can reclaim it
    try:
        garbage = weakref.ref(Cycle())
        assert garbage() is not None  # a cycle: reference counting alone never frees it
        assert freeze_startup_heap() > 0
        assert garbage() is None
    finally:
        gc.enable()


async def test_a_served_gateway_freezes_its_heap_once_built() -> None:
    app = HastenApp(GatewayConfig(), is_heap_frozen=True)
    await app.startup()
    try:
        assert gc.get_freeze_count() > 0
    finally:
        await app.shutdown()


async def test_an_app_not_asked_to_freeze_leaves_the_collector_alone() -> None:
    app = HastenApp(GatewayConfig())
    await app.startup()
    try:
        assert gc.get_freeze_count() == 0
    finally:
        await app.shutdown()
