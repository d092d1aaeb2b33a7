"""OpenAI's Embeddings API: one JSON body in, one out; never a stream."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hasten.apis.api import ParamFields
from hasten.apis.chat import check_model_field, require
from hasten.errors import HastenError, UpstreamError
from hasten.wire.asgi import sse_event

EMBEDDINGS = "embeddings"
_UNKEYED_FIELDS = frozenset({"user"})


def check_embedding(body: dict[str, Any]) -> None:
    check_model_field(body)
    require(
        body,
        "input",
        lambda v: isinstance(v, str | list) and v != [],
        "a string or a non-empty array",
    )


class _NoEnding:
    """An embeddings answer is one body: nothing streams to end."""

    __slots__ = ()
    is_broken = False

    def event(self, parsed: Any) -> None:
        return None

    def done(self) -> None:
        return None

    @property
    def is_ended(self) -> bool:
        return True

    @property
    def is_finished(self) -> bool:
        return True

    def is_whole(self, has_pending: bool) -> bool:
        return not has_pending


class _NoMerge:
    __slots__ = ()

    def add(self, event: Any) -> None:
        raise ValueError("an embeddings answer has no stream to merge")

    def body(self) -> bytes:
        raise ValueError("an embeddings answer has no stream to merge")


class EmbeddingsApi:
    __slots__ = ()

    name = EMBEDDINGS
    path = "/embeddings"
    is_streamable = False
    is_generating = False
    has_done = False
    items_param = "input"
    param_fields = ParamFields()

    def check(self, body: dict[str, Any]) -> None:
        check_embedding(body)

    def is_stream(self, body: Mapping[str, Any]) -> bool:
        return False

    def wants_usage(self, body: Mapping[str, Any]) -> bool:
        return False

    def can_add_usage(self) -> bool:
        return False

    def as_stream(self, body: dict[str, Any], *, with_usage: bool) -> dict[str, Any]:
        return body  # never asked as a stream

    def key_view(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return {name: value for name, value in body.items() if name not in _UNKEYED_FIELDS}

    def max_output_tokens(self, body: Mapping[str, Any]) -> int | None:
        return None

    def chat_view(self, body: Mapping[str, Any]) -> Mapping[str, Any] | None:
        return None

    def affinity_view(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        return body  # no prompt to share: no affinity key

    def is_output(self, event: Any) -> bool:
        return True

    def event_error(self, event: Any) -> UpstreamError | None:
        return None

    def ending(self) -> _NoEnding:
        return _NoEnding()

    def merge(self) -> _NoMerge:
        return _NoMerge()

    def split(self, body: bytes) -> list[bytes]:
        raise ValueError("an embeddings answer has no stream form")

    def frames(self, payloads: Sequence[bytes], *, include_usage: bool) -> list[bytes]:
        raise ValueError("an embeddings answer has no stream form")

    def stream(self, payloads: Sequence[bytes], *, include_usage: bool) -> bytes:
        raise ValueError("an embeddings answer has no stream form")

    def fresh_payloads(self, payloads: Sequence[bytes]) -> Sequence[bytes]:
        return payloads

    def fresh_body(self, body: bytes) -> bytes:
        return body

    def failure_event(self, error: HastenError, sent: bytes = b"") -> bytes:
        return sse_event(error.to_json())

    def render_error(self, error: HastenError) -> bytes:
        return error.to_json()


EMBEDDINGS_API = EmbeddingsApi()
