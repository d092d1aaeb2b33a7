"""A Responses follow-up's ``previous_response_id``, once hasten has expanded it.

The stored conversation is expanded into the request before anything reads the body (the
cache key, coalescing, every translated attempt see it whole). The one upstream that can
do without it is the deployment that answered the previous response natively: it holds
that id itself, so its attempt may carry the request as the client sent it, the id and the
client's own input, and spare the upstream the resent history (and keep its prompt cache
on the conversation it already holds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class PreviousResponse:
    """What the request path keeps of a follow-up's ``previous_response_id``."""

    response_id: str
    # The request's own ``input`` as the client sent it (what follows the stored
    # conversation); ``is_input_sent`` False when the client sent none.
    own_input: Any
    is_input_sent: bool
    # The deployment that answered ``response_id`` natively and so holds it upstream; None
    # when the id is hasten's own (a cache hit's fresh id, a translated answer).
    holder: str | None
