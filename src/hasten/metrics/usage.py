"""Token counts from an answer's ``usage`` object, read without parsing the whole answer."""

from __future__ import annotations

import re

_USAGE = b'"usage"'
# OpenAI writes prompt_tokens first: one search finds both; the others are the fallback.
# A count is an integer of at most 15 digits (a float up to it is exact); anything else
# (1e3, 10.0, a thousand digits) is no count this reads: int() of a long digit run raises,
# and a huge one overflows the float sums it feeds.
_COUNT = rb"(\d{1,15})(?![\d.eE])"
_BOTH = re.compile(
    rb'"prompt_tokens"\s*:\s*' + _COUNT + rb'\s*,\s*"completion_tokens"\s*:\s*' + _COUNT
)
_PROMPT = re.compile(rb'"prompt_tokens"\s*:\s*' + _COUNT)
_COMPLETION = re.compile(rb'"completion_tokens"\s*:\s*' + _COUNT)


def usage_tokens(data: bytes) -> tuple[int | None, int | None]:
    """(input, output) tokens of the last ``usage`` object in ``data``; None where absent.

    ``data`` is a JSON body or the tail of a stream (usage is in its last event but
    ``[DONE]``); the search starts at the last ``"usage"``, so it costs a scan of the tail.
    """
    at = data.rfind(_USAGE)
    if at < 0:
        return None, None
    both = _BOTH.search(data, at)
    if both is not None:
        return int(both.group(1)), int(both.group(2))
    prompt = _PROMPT.search(data, at)
    completion = _COMPLETION.search(data, at)
    return (
        None if prompt is None else int(prompt.group(1)),
        None if completion is None else int(completion.group(1)),
    )
