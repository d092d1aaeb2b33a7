"""A prompt's tokens, estimated from the request body before it is sent: what a key's
tokens-per-minute limit reserves up front, corrected from the answer's usage afterwards.

No tokenizer (it would cost more than the rest of the request path): English-like text
runs about 4 characters per token and CJK about one character per token, which in UTF-8
is 3 bytes. So ASCII bytes count a quarter token each and other bytes a third; a ``\\uXXXX``
escape (one character, often CJK, in a client that escapes non-ASCII) counts as one
token rather than its six ASCII bytes. The JSON around the messages adds a few tokens
more than the upstream counts: a reservation that errs high, refunded on settling.
"""

from __future__ import annotations

import math

_NON_ASCII = bytes(range(0x80, 0x100))
_ESCAPE = b"\\u"
_ESCAPE_BYTES = 6


def estimate_prompt_tokens(raw_body: bytes) -> int:
    """At least 1: every request reserves something."""
    num_ascii = len(raw_body.translate(None, _NON_ASCII))
    num_other = len(raw_body) - num_ascii
    num_escapes = raw_body.count(_ESCAPE)
    num_plain = max(num_ascii - _ESCAPE_BYTES * num_escapes, 0)
    return max(1, math.ceil(num_plain / 4 + num_other / 3 + num_escapes))
