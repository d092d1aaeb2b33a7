"""A prompt's tokens, estimated from the request body before it is sent: what a key's
tokens-per-minute limit reserves up front (with the answer's most output tokens),
corrected from the answer's usage afterwards.

No tokenizer (it would cost more than the rest of the request path): English-like text
runs about 4 characters per token and CJK about one character per token, which in UTF-8
is 3 bytes. So ASCII bytes count a quarter token each and other bytes a third; a ``\\uXXXX``
escape (one character, often CJK, in a client that escapes non-ASCII) counts as one
token rather than its six ASCII bytes. The JSON around the messages adds a few tokens
more than the upstream counts: a reservation that errs high, refunded on settling.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

# Where a request says how long its answer may be (chat, completions, Responses, Messages).
_MAX_OUTPUT_FIELDS = ("max_completion_tokens", "max_tokens", "max_output_tokens")
_NON_ASCII = bytes(range(0x80, 0x100))
_ESCAPE = b"\\u"
_ESCAPE_BYTES = 6


def estimate_prompt_tokens(raw_body: bytes) -> int:
    """At least 1: every request reserves something."""
    return max(1, estimate_text_tokens(raw_body))


def estimate_text_tokens(text: bytes) -> int:
    """The tokens of ``text`` (JSON string contents, escapes and all) by the same rule."""
    num_ascii = len(text.translate(None, _NON_ASCII))
    num_other = len(text) - num_ascii
    num_escapes = text.count(_ESCAPE)
    num_plain = max(num_ascii - _ESCAPE_BYTES * num_escapes, 0)
    return math.ceil(num_plain / 4 + num_other / 3 + num_escapes)


def max_output_tokens(body: Mapping[str, Any]) -> int | None:
    """The most output tokens a request asks for (``max_completion_tokens``,
    ``max_tokens``, ``max_output_tokens``: the largest one given); None when it names none."""
    found = None
    for name in _MAX_OUTPUT_FIELDS:
        value = body.get(name)
        if type(value) is int and value > 0 and (found is None or value > found):
            found = value
    return found
