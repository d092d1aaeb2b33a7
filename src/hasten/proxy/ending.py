"""When an upstream stream ended properly (pure): the rule for storing it and assembling it.

A stream can end with ``data: [DONE]`` and still be cut short: an upstream that stops
mid-answer and closes politely, or one that sends ``[DONE]`` and then more events. So a
stream is whole only when ``[DONE]`` came once, after every other event, no event was an
error or anything but a JSON object, and, for chat and completions, every choice it opened
got a ``finish_reason``. The recorder stores only such a stream (``hasten.proxy.recorder``);
a non-stream client is answered from one only (``hasten.proxy.assemble``), else with a 502.
"""

from __future__ import annotations

from typing import Any

# Past this many choices the stream is not whole (the merge refuses it too), and the record
# of which choices finished stays bounded whatever an upstream sends.
from hasten.cache.replay import MAX_CHOICES

# The APIs whose streams carry choices with a finish_reason each.
_WITH_CHOICES = frozenset({"chat", "completions"})


class StreamEnd:
    """Fed a stream's events as they come; says whether it ended properly."""

    __slots__ = ("_finished", "_is_broken", "_is_done", "_opened", "_with_choices")

    def __init__(self, endpoint: str) -> None:
        self._with_choices = endpoint in _WITH_CHOICES
        self._opened: set[Any] = set()  # choice indexes seen
        self._finished: set[Any] = set()  # those that had a finish_reason
        self._is_done = False
        self._is_broken = False  # something no whole answer has

    def event(self, parsed: Any) -> None:
        """A data event other than ``[DONE]``, parsed (any non-dict if it was not JSON)."""
        if self._is_done or not isinstance(parsed, dict) or "error" in parsed:
            self._is_broken = True  # after [DONE], not a JSON object, or an error
            return
        choices = parsed.get("choices")
        if not self._with_choices or not choices:
            return
        if not isinstance(choices, list):
            self._is_broken = True
            return
        opened, finished = self._opened, self._finished
        for choice in choices:
            try:
                index = choice.get("index", 0)
                opened.add(index)
                if choice.get("finish_reason") is not None:
                    finished.add(index)
            except (AttributeError, TypeError):  # not an object, an unhashable index
                self._is_broken = True
                return
        if len(opened) > MAX_CHOICES:
            self._is_broken = True
            opened.clear()
            finished.clear()

    def done(self) -> None:
        """A ``[DONE]`` event (a second one breaks the stream)."""
        if self._is_done:
            self._is_broken = True
        self._is_done = True

    @property
    def is_finished(self) -> bool:
        """Every choice opened got its finish_reason (vacuous for APIs without choices)."""
        if not self._with_choices:
            return True
        return bool(self._opened) and self._opened <= self._finished

    def is_whole(self, has_pending: bool) -> bool:
        """Ended properly, ``has_pending``: bytes of an unfinished event were left over."""
        return not has_pending and not self._is_broken and self._is_done and self.is_finished
