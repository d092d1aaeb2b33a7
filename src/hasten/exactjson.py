"""JSON read and written without changing a client's values: every integer exact, every key
seen.

orjson (the gateway's parser) reads an integer beyond 64 bits as a float and keeps the last
value of a key written twice, silently. Neither may reach an upstream as something other
than what the client sent: a re-serialised body would carry ``1.1805916207174113e+21`` for
``1180591620717411303424``, and a body whose duplicated ``model`` hasten read one way would
be forwarded byte for byte to an upstream that may read it the other way. So:

- ``loads`` is orjson's parser (its syntax, its refusals: invalid UTF-8, lone surrogates,
  NaN, numbers past a double) and, only for a document with a run of 19 digits or more (an
  integer that might not fit 64 bits), the standard library's reading of the same document
  for exact integers;
- ``dumps`` is orjson's writer, falling back to the standard library's for a value holding
  an integer past 64 bits;
- ``duplicate_key`` finds a key written twice in one object: it compares the keys in the
  bytes (a regular expression over C) with the keys parsed, and only when they differ reads
  the document again to name the key.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

# An integer orjson may have read as a float has at least 19 digits (2**63 has 19).
_LONG_DIGITS = re.compile(rb"\d{19}")
# The end of a key: a closing quote (after an even run of backslashes, so not an escaped
# one inside a string), optional whitespace, a colon. Every key of a valid document ends so
# exactly once; a string *starting* with whitespace and a colon adds a match, never removes
# one: the count is an upper bound of the keys written, equal to them in practice.
_KEY_END = re.compile(rb'(?<!\\)(?:\\\\)*"[ \t\n\r]*:')


def loads(raw: bytes) -> Any:
    """``raw`` parsed as orjson parses it, with integers of any size kept exact.

    Raises ``orjson.JSONDecodeError`` for what orjson refuses.
    """
    return exact_integers(raw, orjson.loads(raw))


def exact_integers(raw: bytes, value: Any) -> Any:
    """``value`` (what orjson parsed ``raw`` to), read again with exact integers when
    ``raw`` may hold one past 64 bits; ``value`` itself otherwise (the common case)."""
    if _LONG_DIGITS.search(raw) is None:
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
    """The first key written twice in one object of ``raw`` (a document ``loads`` accepted,
    with ``num_keys`` keys once parsed, which counts a duplicated key once); None if none is.
    """
    num_written = _KEY_END.subn(b"", raw)[1] if b'"' in raw else 0
    if num_written == num_keys:
        return None  # the upper bound of keys written equals the keys kept: none collapsed
    try:
        json.loads(raw, object_pairs_hook=_refuse_duplicates)
    except _Duplicate as exc:
        return exc.key
    except RecursionError:
        return None  # the depth check refuses it
    return None


def count_keys(value: Any) -> int:
    """The keys of every object in ``value`` (a parsed document)."""
    kind = type(value)
    if kind is dict:
        num = len(value)
        for item in value.values():
            if type(item) is dict or type(item) is list:
                num += count_keys(item)
        return num
    if kind is list:
        num = 0
        for item in value:
            if type(item) is dict or type(item) is list:
                num += count_keys(item)
        return num
    return 0
