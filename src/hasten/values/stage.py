"""A stage of one request's trace, as the request path sees it: a span, or nothing at all.

The request path holds a ``Stage`` and calls it unconditionally; with tracing off that is
``NO_STAGE``, whose methods do nothing and whose children are itself, so the path creates
no span objects and allocates nothing. This module never imports OpenTelemetry: the real
stage lives in ``hasten.telemetry.otel``, imported only when tracing is configured.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import TracebackType

from hasten.errors import ClientGone, HastenError

AttributeValue = str | bool | int | float


class Stage:
    """The no-op stage (tracing off). ``hasten.telemetry.otel.SpanStage`` is the real one.

    Used as a context manager it ends itself, marking the span failed when the block raised
    (a client leaving or a cancellation is noted, not counted as a failure).
    """

    __slots__ = ()

    @property
    def is_recording(self) -> bool:
        """True when attributes set on this stage are kept: worth computing them."""
        return False

    def child(self, name: str, *, is_client: bool = False) -> Stage:
        """A stage nested in this one (``is_client``: a call to another service)."""
        return self

    def rename(self, name: str) -> None:
        return None

    def set(self, key: str, value: AttributeValue) -> None:
        return None

    def fail(self, error: BaseException | str, *, error_type: str = "") -> None:
        """Marks the stage failed; ``error_type`` defaults to the error's code or class."""
        return None

    def end(self) -> None:
        return None

    def inject(self, headers: Mapping[str, str]) -> Mapping[str, str]:
        """``headers`` plus this stage's W3C ``traceparent`` (a copy; unchanged when off)."""
        return headers

    def __enter__(self) -> Stage:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None:
            if isinstance(exc, ClientGone):
                self.set("hasten.client_gone", True)
            elif isinstance(exc, asyncio.CancelledError):
                self.set("hasten.cancelled", True)
            elif isinstance(exc, HastenError):
                self.set("http.response.status_code", exc.status_code)
                if exc.status_code >= 500:  # a refused request is the client's error
                    self.fail(exc)
                else:
                    self.set("error.type", exc.code or type(exc).__name__)
            else:
                self.fail(exc)
        self.end()


NO_STAGE = Stage()
