"""One client API as the request path sees it: the one front a new API adds.

The pipeline (cache, coalescing, routing, limits, metrics) holds an ``Api`` for each
request and asks it, never branches on its name: how a request is checked and keyed, how
its answer's stream events read (the first token, an error, usage, a proper end), how an
answer is merged into one body or split back into events, how a replay gets fresh ids,
and how an error looks to its clients. Each API is one module (``chat``, ``embeddings``,
``responses``, ``messages``); its translation to and from chat, the pivot every API
meets at, is one more (``responses_chat``, ``messages_chat``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hasten.errors import HastenError, UpstreamError


@dataclass(frozen=True, slots=True)
class ParamFields:
    """Where an API's request names what a parameter policy caps or defaults
    (``hasten.policy``): its most output tokens (the first field is the one a default is
    written to), its stop sequences, its number of choices; none for an API that generates
    nothing (embeddings: no policy applies)."""

    max_tokens: tuple[str, ...] = ()
    stop: str | None = None
    n: str | None = None


class Merge(Protocol):
    """A stream's parsed events merged into the body a non-stream call returns."""

    def add(self, event: Any) -> None:
        """One parsed event; raises ``ValueError`` for one without the API's shape."""

    def body(self) -> bytes:
        """The merged body; raises ``ValueError`` when it has no body's shape."""


class Ending(Protocol):
    """Fed a stream's events as they come; says whether it ended properly (what the cache
    stores and a non-stream client is answered from)."""

    # Set once an event no whole answer has came (an error, one after the end...). Every
    # event the API's ``event_error`` reports sets it: a reader asks for the error only then.
    is_broken: bool

    def event(self, parsed: Any) -> None:
        """A data event other than ``[DONE]`` (any non-dict if it was not JSON)."""

    def done(self) -> None:
        """A ``[DONE]`` event."""

    @property
    def is_ended(self) -> bool:
        """The stream's end came (``[DONE]``, its last event) and nothing broke it."""

    @property
    def is_finished(self) -> bool:
        """What was seen so far makes a whole answer, the end marker aside."""

    def is_whole(self, has_pending: bool) -> bool:
        """Ended properly; ``has_pending``: bytes of an unfinished event were left over."""


class Api(Protocol):
    """A client API: its requests, its stream's events, its answers, its errors."""

    @property
    def name(self) -> str:
        """The label in metrics, logs and cache keys: chat, completions, embeddings,
        responses or messages."""

    @property
    def path(self) -> str:
        """Its path on an upstream that speaks it (after the base URL's ``/v1``)."""

    @property
    def is_streamable(self) -> bool:
        """Whether it answers in a stream when asked (embeddings never do)."""

    @property
    def is_generating(self) -> bool:
        """Whether it asks for generated text (output tokens a limit may reserve)."""

    @property
    def items_param(self) -> str | None:
        """The body's list a request may hold only so many of ([server] max_messages)."""

    @property
    def has_done(self) -> bool:
        """Whether its stream ends with ``data: [DONE]`` (OpenAI's chat and completions)."""

    @property
    def param_fields(self) -> ParamFields:
        """What a parameter policy rewrites in its requests."""

    # --- requests ---------------------------------------------------------------------

    def check(self, body: dict[str, Any]) -> None:
        """Raises ``InvalidRequest`` naming the parameter a request gets wrong."""

    def is_stream(self, body: Mapping[str, Any]) -> bool: ...

    def wants_usage(self, body: Mapping[str, Any]) -> bool:
        """Whether a stream client reads a usage event (chat asks; others always get one)."""

    def can_add_usage(self) -> bool:
        """Whether a stream asked of the upstream can ask for usage the client did not."""

    def as_stream(self, body: dict[str, Any], *, with_usage: bool) -> dict[str, Any]:
        """``body`` (a copy the caller owns) as a stream request, asking for usage."""

    def key_view(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """What of the body keys its answer: every field but those that change only how it
        is delivered or are per run (a stream flag, a session id in metadata...)."""

    def max_output_tokens(self, body: Mapping[str, Any]) -> int | None: ...

    def chat_view(self, body: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The request as chat messages (the semantic tier's question and hybrid routing
        read chat); None when it has no such view. A translation for Responses and
        Messages: asked for only where one of those needs it."""

    def affinity_view(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """What prefix affinity and the router's length hint read, without translating:
        ``tools``, ``messages`` (the shared part first: a system prompt, then the
        conversation, each item as the API writes it) or a legacy ``prompt``, and the
        output bound (``max_tokens``, ``max_completion_tokens`` or ``max_output_tokens``)."""

    # --- the stream's events (each a parsed JSON data payload) --------------------------

    def is_output(self, event: Any) -> bool:
        """The first token: the event carries output or ends the answer."""

    def event_error(self, event: Any) -> UpstreamError | None:
        """The error an event stands for; None for any other event."""

    def ending(self) -> Ending: ...

    def merge(self) -> Merge: ...

    # --- answers --------------------------------------------------------------------

    def split(self, body: bytes) -> list[bytes]:
        """A whole body as the event payloads a stream client gets (``ValueError`` when it
        has no such form)."""

    def frames(self, payloads: Sequence[bytes], *, include_usage: bool) -> list[bytes]:
        """Event payloads as SSE frames, with the API's end (``[DONE]`` for chat)."""

    def stream(self, payloads: Sequence[bytes], *, include_usage: bool) -> bytes:
        """``frames`` joined."""

    def fresh_payloads(self, payloads: Sequence[bytes]) -> Sequence[bytes]:
        """A stored stream as a replay sends it: fresh ids and timestamps where the API's
        clients keep them (a ``resp_`` id names stored state), else unchanged."""

    def fresh_body(self, body: bytes) -> bytes:
        """``fresh_payloads`` for a whole body."""

    def failure_event(self, error: HastenError, sent: bytes = b"") -> bytes:
        """The SSE frame a broken stream ends with (chat's ``error`` event,
        ``response.failed``, Anthropic's ``error``); ``sent``: the last bytes the client
        got (where a Responses stream's sequence number is)."""

    def render_error(self, error: HastenError) -> bytes:
        """An error answer's body in the shape its clients parse (OpenAI's or Anthropic's)."""
