"""Turns a request's generated token bytes into text deltas, honouring stop sequences.

Tokens can end mid UTF-8 character and a stop sequence can span several tokens, so text
that might still become part of a stop sequence is held back until it is known not to be.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str
    is_stopped: bool


class TextStream:
    """Feeds token bytes, returns the text that is safe to send (never a stop sequence)."""

    __slots__ = ("_decoder", "_held", "_is_stopped", "_stops")

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = tuple(stop for stop in stops if stop)
        self._held = ""
        self._is_stopped = False

    def feed(self, piece: bytes) -> TextDelta:
        if self._is_stopped:
            return TextDelta("", True)
        return self._advance(self._decoder.decode(piece))

    def finish(self) -> str:
        """Text still held back when generation ends for another reason than a stop."""
        if self._is_stopped:
            return ""
        delta = self._advance(self._decoder.decode(b"", final=True))
        if delta.is_stopped:
            return delta.text
        text, self._held = delta.text + self._held, ""
        return text

    def _advance(self, new_text: str) -> TextDelta:
        text = self._held + new_text
        stop_index = self._first_stop(text)
        if stop_index >= 0:
            self._held, self._is_stopped = "", True
            return TextDelta(text[:stop_index], True)
        num_held = self._num_partial_stop(text)
        self._held = text[len(text) - num_held :] if num_held else ""
        return TextDelta(text[: len(text) - num_held], False)

    def _first_stop(self, text: str) -> int:
        found = [index for stop in self._stops if (index := text.find(stop)) >= 0]
        return min(found, default=-1)

    def _num_partial_stop(self, text: str) -> int:
        """Length of the longest end of ``text`` that begins some stop sequence."""
        longest = 0
        for stop in self._stops:
            for length in range(min(len(stop) - 1, len(text)), longest, -1):
                if text.endswith(stop[:length]):
                    longest = length
                    break
        return longest
