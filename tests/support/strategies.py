"""Hypothesis strategies that more than one property test draws from."""

from __future__ import annotations

import json

from hypothesis import strategies as st

# Integers of any size on purpose: some cannot be written by orjson, which must be a 400.
any_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)

# Keys drawn from a small pool, so that one object often holds one twice, among them the
# shapes a key scanner could trip on: quotes, backslashes, colons, spaces, non-ASCII.
_TRICKY_KEYS = ("model", "messages", "a", "a\\", '":', " :", "", "é", "x\\\\", "role")
_WHITESPACE = st.sampled_from(("", " ", "\n", "\t ", "\r\n "))
# Integers past 64 bits (and at its edges) as often as small ones.
big_integers = st.one_of(
    st.integers(min_value=-(2**80), max_value=2**80),
    st.sampled_from((2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 2**70, 2**70 + 1)),
)


def _string(draw: st.DrawFn, text: str) -> str:
    """``text`` as a JSON string, its non-ASCII written as is or as \\u escapes."""
    return json.dumps(text, ensure_ascii=draw(st.booleans()))


@st.composite
def _scalar_text(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return draw(st.sampled_from(("null", "true", "false")))
    if kind == 1:
        return str(draw(big_integers))
    if kind == 2:
        return repr(draw(st.floats(allow_nan=False, allow_infinity=False)))
    if kind == 3:
        return _string(draw, draw(st.sampled_from(_TRICKY_KEYS)))
    return _string(draw, draw(st.text(max_size=12)))


def _object_text(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    @st.composite
    def build(draw: st.DrawFn) -> str:
        num = draw(st.integers(0, 5))
        members = []
        for _ in range(num):
            name = draw(st.sampled_from(_TRICKY_KEYS) | st.text(max_size=6))
            gap, space = draw(_WHITESPACE), draw(_WHITESPACE)
            members.append(f"{_string(draw, name)}{gap}:{space}{draw(children)}")
        return "{" + ",".join(members) + "}"

    return build()


def _array_text(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.lists(children, max_size=4).map(lambda items: "[" + ", ".join(items) + "]")


_json_texts = st.recursive(
    _scalar_text(), lambda inner: _object_text(inner) | _array_text(inner), max_leaves=20
)


def json_texts_with_duplicates() -> st.SearchStrategy[bytes]:
    """JSON objects written as text: keys often duplicated (in any object, at any depth, one
    written with \\u escapes and one without), integers of any size, odd whitespace."""
    return _object_text(_json_texts).map(str.encode)


# Model requests whose bodies are written as text: the fields of a valid request (so they
# reach the validators, the cache key, the upstream) and fields drawn from
# ``json_texts_with_duplicates`` (so a duplicated "model" or "messages", nested duplicates
# and integers past 64 bits appear at every level). (path, body bytes)
_FIELDS = {
    "/v1/chat/completions": (
        ('"model"', '"sim-model"'),
        ('"messages"', '[{"role": "user", "content": "fuzz"}]'),
    ),
    "/v1/completions": (('"model"', '"sim-model"'), ('"prompt"', '"fuzz"')),
    "/v1/embeddings": (('"model"', '"sim-model"'), ('"input"', '"fuzz"')),
    "/admin/cache/invalidate": (('"key"', '"k"'),),
}


@st.composite
def raw_requests(draw: st.DrawFn) -> tuple[str, bytes]:
    path = draw(st.sampled_from(sorted(_FIELDS)))
    members = [f"{name}: {value}" for name, value in _FIELDS[path]]
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.integers(0, 3))
        if kind == 0:  # a field of the request written twice
            name, value = draw(st.sampled_from(_FIELDS[path]))
            members.append(f"{name}: {value}")
        elif kind == 1:  # an integer of any size where the request takes one, or not
            name = draw(st.sampled_from(('"seed"', '"max_tokens"', '"n"', '"x_big"')))
            members.append(f"{name}: {draw(big_integers)}")
        else:  # anything, duplicates inside
            name = json.dumps(draw(st.sampled_from(("extra", "tools", "metadata", "x"))))
            members.append(f"{name}: {draw(_json_texts)}")
    order = draw(st.permutations(members))
    return path, ("{" + ", ".join(order) + "}").encode()
