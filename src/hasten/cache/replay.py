"""A cached answer in the form its client reads, whatever form it was stored in.

Answers are stored as their first client's form: a stream's event payloads, or one JSON
body. A client of the other form gets it merged or split by its API
(``hasten.apis.api.Api``); an API whose clients keep ids (a ``resp_`` id names stored
state) gets fresh ones on every replay. A form an answer does not have (a stream whose text
pieces are not strings merges into no body) raises ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from hasten.apis.api import Api
from hasten.cache.entry import CachedAnswer


def answer_body(answer: CachedAnswer, api: Api) -> bytes:
    """The answer as one body (as stored: no fresh ids)."""
    if answer.body is not None:
        return answer.body
    assert answer.chunks is not None
    merge = api.merge()
    for payload in answer.chunks:
        merge.add(_parsed(payload))
    return merge.body()


def answer_payloads(answer: CachedAnswer, api: Api) -> Sequence[bytes]:
    """The answer as its stream's event payloads (as stored: no fresh ids)."""
    if answer.chunks is not None:
        return answer.chunks
    assert answer.body is not None
    return api.split(answer.body)


def answer_frames(answer: CachedAnswer, api: Api, *, include_usage: bool) -> list[bytes]:
    """The answer as SSE frames to pace, with fresh ids where its API keeps them."""
    payloads = api.fresh_payloads(answer_payloads(answer, api))
    return api.frames(payloads, include_usage=include_usage)


def answer_stream(answer: CachedAnswer, api: Api, *, include_usage: bool) -> bytes:
    """``answer_frames`` as one byte string (an instant replay sends them as one)."""
    payloads = api.fresh_payloads(answer_payloads(answer, api))
    return api.stream(payloads, include_usage=include_usage)


def _parsed(payload: bytes) -> object:
    try:
        return orjson.loads(payload)
    except (orjson.JSONDecodeError, TypeError) as exc:
        raise ValueError("a stored event that is not JSON") from exc
