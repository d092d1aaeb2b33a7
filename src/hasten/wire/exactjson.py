"""JSON read and written without changing a client's values: every integer exact, every key
seen.

orjson (the gateway's parser) reads an integer beyond 64 bits as a float and keeps the last
value of a key written twice, silently. Neither may reach an upstream as something other
than what the client sent: a re-serialised body would carry ``1.1805916207174113e+21`` for
``1180591620717411303424``, and a body whose duplicated ``model`` hasten read one way would
be forwarded byte for byte to an upstream that may read it the other way. So:

- ``loads`` is orjson's parser (its syntax, its refusals: invalid UTF-8, lone surrogates,
  NaN, numbers past a double) and, only for a document where orjson read an integral float
  at or past 2**63 (what it makes of a wider integer), the standard library's reading of
  the same document, whose integers are exact;
- ``dumps`` is orjson's writer, falling back to the standard library's for a value holding
  an integer past 64 bits;
- ``duplicate_key`` finds a key written twice in one object: it compares an upper bound of
  the keys in the bytes (counted in C) with the keys parsed, and only when they differ
  reads the document again to name the key.

The checks cost a walk of the parsed document and a few byte counts, no regular expression
over the whole body: a large body is parsed on a worker thread (``hasten.proxy.validation``)
and a long C call there would hold the GIL, stalling the event loop as much as parsing on
it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import orjson

# An integral float this wide may be an integer orjson could not keep (it has 64 bits).
_WIDE = float(2**63)
# Every key ends with a quote, maybe whitespace, then a colon: each key adds one to one of
# these counts (a key with whitespace before its colon to the one of that whitespace), and
# only text inside strings adds more. So their sum bounds the keys written from above.
_KEY_ENDS = (b'":', b" :", b"\t:", b"\n:", b"\r:")


@dataclass(frozen=True, slots=True)
class Shape:
    """What a walk of a parsed document found: its keys (a duplicated key counts once) and
    whether it holds an integral float at or past 2**63 (perhaps a wider integer)."""

    num_keys: int
    has_wide_number: bool


def shape(value: Any) -> Shape:
    """The ``Shape`` of a parsed document (recursion bounded by its depth, checked first)."""
    counts = [0, 0]
    _walk(value, counts)
    return Shape(counts[0], counts[1] > 0)


def _walk(value: Any, counts: list[int]) -> None:
    if type(value) is dict:
        counts[0] += len(value)
        items = value.values()
    else:
        items = value
    for item in items:
        kind = type(item)
        if kind is dict or kind is list:
            _walk(item, counts)
        elif kind is float and (item >= _WIDE or item <= -_WIDE) and item.is_integer():
            counts[1] += 1


def loads(raw: bytes) -> Any:
    """``raw`` parsed as orjson parses it, with integers of any size kept exact.

    Raises ``orjson.JSONDecodeError`` for what orjson refuses.
    """
    value = orjson.loads(raw)
    if type(value) is dict or type(value) is list:
        return exact_integers(raw, value, shape(value))
    return exact_integers(raw, value, Shape(0, isinstance(value, float) and _is_wide(value)))


def _is_wide(value: float) -> bool:
    return (value >= _WIDE or value <= -_WIDE) and value.is_integer()


def exact_integers(raw: bytes, value: Any, found: Shape) -> Any:
    """``value`` (what orjson parsed ``raw`` to, of ``found`` shape), read again with exact
    integers when it may hold one past 64 bits; ``value`` itself otherwise (nearly always)."""
    if not found.has_wide_number:
        return value
    # orjson accepted it, so it is valid UTF-8 JSON without NaN or infinities: the standard
    # library reads the same values, its integers exact. It recurses where orjson does not
    # (orjson goes to 1024 levels): too deep for it is a refusal too.
    try:
        return json.loads(raw)
    except RecursionError:
        raise orjson.JSONDecodeError("JSON nested too deeply", raw.decode(), 0) from None


def dumps(value: Any) -> bytes:
    """``value`` as orjson writes it, or, holding an integer past 64 bits, as compact JSON
    with that integer's digits."""
    try:
        return orjson.dumps(value)
    except TypeError as exc:
        if "64-bit" not in str(exc):
            raise
    # A parsed body holds no NaN or infinity (orjson refuses them): never written as such.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


class _Duplicate(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Duplicate(key)
            seen.add(key)
    return result


def duplicate_key(raw: bytes, num_keys: int) -> str | None:
    """The first key written twice in one object of ``raw`` (a document orjson accepted,
    with ``num_keys`` keys once parsed, which counts a duplicated key once); None if none is.
    """
    # Each key written has a colon of its own after it: with no colon in any text (the
    # common request), the colons alone bound the keys written, in one count.
    if raw.count(b":") == num_keys:
        return None
    a, b, c, d, e = _KEY_ENDS
    num_written = raw.count(a) + raw.count(b) + raw.count(c) + raw.count(d) + raw.count(e)
    if num_written == num_keys:
        return None  # the upper bound of keys written equals the keys kept: none collapsed
    # Colons in text (a URL, "Note:", JSON inside a message) make the bound loose: the
    # standard library, told every pair, decides (and names the key).
    try:
        json.loads(raw, object_pairs_hook=_refuse_duplicates)
    except _Duplicate as exc:
        return exc.key
    except RecursionError:
        return None  # the depth check refuses it
    return None
