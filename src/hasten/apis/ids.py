"""Ids as OpenAI and Anthropic write them: fresh ones for a response, derived ones for its items.

A response's items (``msg_``, ``fc_``, ``rs_``) get ids derived from the response id and
their position, so one fresh response id gives a whole answer fresh, consistent item ids
(the same item is named alike in every event of a stream) without tracking a mapping.
Tool call ids (``call_``, ``toolu_``) are never made fresh on a replay: a client answers
a call by its id, and the next turn of an agent must look the same on a second run for the
cache to serve it.
"""

from __future__ import annotations

import secrets
import string
from hashlib import blake2b

_BASE62 = string.digits + string.ascii_letters
RESPONSE_ID_PREFIX = "resp_"
MESSAGE_ID_PREFIX = "msg_"


def new_response_id() -> str:
    """``resp_`` and 48 hex digits, as OpenAI's look."""
    return RESPONSE_ID_PREFIX + secrets.token_hex(24)


def new_message_id() -> str:
    """``msg_01`` and 22 base-62 characters, as Anthropic's look."""
    return MESSAGE_ID_PREFIX + "01" + "".join(secrets.choice(_BASE62) for _ in range(22))


def item_id(prefix: str, response_id: str, output_index: int) -> str:
    """The id of output item ``output_index`` of ``response_id``: ``{prefix}_`` and 48 hex."""
    digest = blake2b(f"{response_id}\x00{output_index}".encode(), digest_size=24)
    return f"{prefix}_{digest.hexdigest()}"


def call_id(seed: str, index: int) -> str:
    """A tool call id for a call an upstream left without one (``call_`` and 24 hex)."""
    return "call_" + blake2b(f"{seed}\x00{index}".encode(), digest_size=12).hexdigest()
