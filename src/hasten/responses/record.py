"""One stored response, and its bytes with a checksum: a damaged row is refused, not trusted.

``rs1:<sha256 hex of the payload>:<payload>``, the payload being the record as JSON. The
checksum catches a truncated, bit-flipped or hand-edited row (a miss, never a crash); every
field is type-checked on the way back.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

import orjson

from hasten.errors import InvalidRequest, ResponseNotFound

MAGIC = b"rs1:"
_SUM_CHARS = 64


class DamagedRecord(ValueError):
    """Stored bytes that are not a whole, well-formed record."""


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A response as hasten keeps it, for the tenant that created it."""

    tenant: str
    response_id: str
    model: str
    # The request's own input items (a string input as one user message); what came before
    # it is in the ``previous_response_id`` record, expanded hop by hop.
    input_items: list[Any]
    previous_response_id: str | None
    response: dict[str, Any]  # the Response object the client got (its output included)
    created_s: float
    expires_s: float
    upstream: str | None = None  # the deployment that answered, as x-hasten-upstream named it

    @property
    def output_items(self) -> list[Any]:
        output = self.response.get("output")
        return output if isinstance(output, list) else []

    def is_fresh(self, now_s: float) -> bool:
        return now_s < self.expires_s


def input_items(value: Any) -> list[Any]:
    """A request's ``input`` as items (a string is one user message)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


def encode(record: StoredResponse) -> bytes:
    payload = orjson.dumps(
        {
            "tenant": record.tenant,
            "id": record.response_id,
            "model": record.model,
            "input": record.input_items,
            "previous_response_id": record.previous_response_id,
            "response": record.response,
            "created_s": record.created_s,
            "expires_s": record.expires_s,
            "upstream": record.upstream,
        }
    )
    return MAGIC + hashlib.sha256(payload).hexdigest().encode() + b":" + payload


def decode(raw: bytes) -> StoredResponse:
    """The record in ``raw``; raises DamagedRecord if anything about it is off."""
    cut = len(MAGIC) + _SUM_CHARS + 1
    head, payload = raw[:cut], raw[cut:]
    if not head.startswith(MAGIC) or head[-1:] != b":":
        raise DamagedRecord("not a response record")
    expected = hashlib.sha256(payload).hexdigest().encode()
    if not hmac.compare_digest(head[len(MAGIC) : -1], expected):
        raise DamagedRecord("checksum mismatch")
    try:
        data = orjson.loads(payload)
        if not isinstance(data, dict):
            raise TypeError("not an object")
        previous = data["previous_response_id"]
        upstream = data["upstream"]
        if not (previous is None or isinstance(previous, str)):
            raise TypeError("previous_response_id")
        if not (upstream is None or isinstance(upstream, str)):
            raise TypeError("upstream")
        return StoredResponse(
            tenant=_typed(data, "tenant", str),
            response_id=_typed(data, "id", str),
            model=_typed(data, "model", str),
            input_items=_typed(data, "input", list),
            previous_response_id=previous,
            response=_typed(data, "response", dict),
            created_s=float(_typed(data, "created_s", (int, float))),
            expires_s=float(_typed(data, "expires_s", (int, float))),
            upstream=upstream,
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise DamagedRecord(f"fields do not parse: {type(exc).__name__}") from None


def _typed(data: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = data[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise TypeError(name)
    return value


def not_found(response_id: str, param: str | None = None) -> InvalidRequest:
    """OpenAI's answer for an id it does not hold (or holds for another organisation)."""
    return ResponseNotFound(f"Response with id '{response_id}' not found.", param=param)
