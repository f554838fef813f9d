"""json_object: a JSON object parsed, anything else refused with ``None``."""

from __future__ import annotations

import pytest

from relaybus.shared.wire.json_object import json_object


def test_an_object_is_parsed_from_bytes_or_text() -> None:
    """Bytes and text holding an object give the same dict."""
    assert json_object(b'{"a": 1}') == {"a": 1} == json_object('{"a": 1}')


@pytest.mark.parametrize("raw", [None, b"", b"{", b"[1, 2]", b'"text"', b"3", b"null", b"\xff"])
def test_anything_but_an_object_is_refused(raw: bytes | None) -> None:
    """Absent, malformed, non-UTF-8 or non-object JSON is ``None``, never an exception."""
    assert json_object(raw) is None
