"""hasten.wire.exactjson: every integer read and written exactly, every duplicated key found."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.wire import exactjson
from tests.support.strategies import big_integers, json_texts_with_duplicates


def _reference_duplicate(raw: bytes) -> str | None:
    """The first duplicated key as the standard library's pairs show it (the oracle)."""
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen and not found:
                found.append(key)
            seen.add(key)
        return dict(items)

    json.loads(raw, object_pairs_hook=pairs)
    return found[0] if found else None


def _duplicate(raw: bytes) -> str | None:
    return exactjson.duplicate_key(raw, exactjson.shape(orjson.loads(raw)).num_keys)


def test_integers_beyond_64_bits_are_read_and_written_exactly() -> None:
    raw = b'{"x_big": 1180591620717411303424, "neg": -9223372036854775809, "ok": 7}'
    value = exactjson.loads(raw)
    assert value == {"x_big": 2**70, "neg": -(2**63) - 1, "ok": 7}
    assert exactjson.dumps(value) == (
        b'{"x_big":1180591620717411303424,"neg":-9223372036854775809,"ok":7}'
    )
    assert exactjson.loads(b"[1180591620717411303425]") != exactjson.loads(
        b"[1180591620717411303424]"
    )


def test_what_orjson_refuses_stays_refused() -> None:
    for raw in (b'{"a": NaN}', b'{"a": 1e400, "b": 1111111111111111111111}', b'"\\ud800"'):
        with pytest.raises(orjson.JSONDecodeError):
            exactjson.loads(raw)


def test_a_long_digit_run_in_a_string_reads_the_same() -> None:
    raw = '{"phone": "00441234567890123456789", "t": "é", "f": 0.1}'.encode()
    assert exactjson.loads(raw) == orjson.loads(raw)


_parsed_values = st.recursive(
    st.none()
    | st.booleans()
    | big_integers
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(value=_parsed_values)
def test_what_is_written_reads_back_the_same(value: Any) -> None:
    assert exactjson.loads(exactjson.dumps(value)) == value


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        (b'{"model": "expensive", "model": "cheap"}', "model"),
        (b'{"a": {"b": 1, "c": 2, "b": 3}}', "b"),
        (b'{"m": [{"role": "user", "role": "system"}]}', "role"),
        (b'{"a\\\\": 1, "a\\\\": 2, "s": "\\": x"}', "a\\"),
        (b'{"\\u006dodel": 1, "model": 2}', "model"),
        (b'{"": 1, "" : 2}', ""),
    ],
)
def test_a_key_written_twice_is_found(raw: bytes, key: str) -> None:
    assert _duplicate(raw) == key


@pytest.mark.parametrize(
    "raw",
    [
        b'{"content": "{\\"a\\": 1, \\"a\\": 2}"}',  # duplicates inside a string are text
        b'{"a": " :b", "c": "d"}',  # a string opening with a colon: counted, not a key
        b'{"a": {"a": {"a": 1}}}',
        b"[]",
        b'{"x": ":", "y": "\\" :"}',
    ],
)
def test_no_duplicate_is_found_where_there_is_none(raw: bytes) -> None:
    assert _duplicate(raw) is None


@settings(max_examples=500, deadline=None)
@given(raw=json_texts_with_duplicates())
def test_duplicates_are_found_exactly_as_the_standard_library_sees_them(raw: bytes) -> None:
    assert _duplicate(raw) == _reference_duplicate(raw)
