"""The output tokens an answer carried, counted from what was forwarded to the client: what
a limited key is charged when no usage ever comes (the client left, the upstream sent none).

No tokenizer and no JSON parse: the text fields of the forwarded bytes (a stream's deltas or
a whole body's message) are found by a regular expression over C, and each counts as
``hasten.limits.estimate`` counts text, but at least one token per piece, since an upstream
streams about one token per event.
"""

from __future__ import annotations

import re

from hasten.limits.estimate import estimate_text_tokens

# A JSON string field that carries generated text: content, a completion's text, a refusal,
# reasoning, tool-call arguments (and Anthropic's and the Responses API's equivalents).
_TEXT = re.compile(
    rb'"(?:content|text|refusal|reasoning_content|reasoning|arguments|partial_json|thinking'
    rb'|delta)"\s*:\s*"((?:[^"\\]|\\.)+)"'
)


class OutputCount:
    """Fed every body chunk sent to the client; ``num_tokens`` so far."""

    __slots__ = ("num_tokens",)

    def __init__(self) -> None:
        self.num_tokens = 0

    def feed(self, data: bytes) -> None:
        pieces = _TEXT.findall(data)
        if pieces:
            self.num_tokens += max(len(pieces), estimate_text_tokens(b"".join(pieces)))
