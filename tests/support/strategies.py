"""Hypothesis strategies that more than one property test draws from."""

from __future__ import annotations

from hypothesis import strategies as st

# Integers of any size on purpose: some cannot be written by orjson, which must be a 400.
any_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)
