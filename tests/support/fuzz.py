"""Hypothesis strategies shared by the property and live fuzz suites."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

#: Any JSON value orjson can encode (integers up to its 64-bit range), nested a little.
json_values: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda kids: (
        st.lists(kids, max_size=5) | st.dictionaries(st.text(max_size=12), kids, max_size=5)
    ),
    max_leaves=30,
)
