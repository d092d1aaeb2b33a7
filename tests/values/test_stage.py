"""The no-op stage: what the request path holds when tracing is off."""

from __future__ import annotations

import pytest

from hasten.errors import InvalidRequest
from hasten.values.stage import NO_STAGE


def test_the_off_stage_is_its_own_child_and_leaves_headers_alone() -> None:
    headers = {"accept": "application/json"}
    assert NO_STAGE.child("cache.lookup") is NO_STAGE
    assert NO_STAGE.child("upstream", is_client=True) is NO_STAGE
    assert NO_STAGE.inject(headers) is headers
    assert not NO_STAGE.is_recording
    with NO_STAGE as stage:
        stage.set("hasten.cache", "hit")
        stage.rename("chat m")
        stage.fail("anything")
    assert headers == {"accept": "application/json"}


def test_the_off_stage_never_swallows_an_error() -> None:
    with pytest.raises(InvalidRequest), NO_STAGE:
        raise InvalidRequest("bad")
