"""Log output: JSON off a TTY, tokens never written."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator

import orjson
import pytest

from relaybus.logsetup import JsonFormatter, RedactTokens, configure_logging


def test_query_tokens_are_redacted() -> None:
    """A WebSocket path logged with ?token=… (as uvicorn does) loses the secret."""
    record = logging.LogRecord(
        "uvicorn.error",
        logging.INFO,
        __file__,
        1,
        '%s - "WebSocket %s" [accepted]',
        ("127.0.0.1:5", "/ws?token=s3cret&x=1"),
        None,
    )
    assert RedactTokens().filter(record)
    line = JsonFormatter().format(record)
    assert "s3cret" not in line
    assert orjson.loads(line)["msg"] == '127.0.0.1:5 - "WebSocket /ws?token=***&x=1" [accepted]'


@pytest.fixture
def root_handlers() -> Iterator[None]:
    """Restore the root logger's handlers and level after the test."""
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    yield
    root.handlers[:] = saved
    root.setLevel(level)


@pytest.mark.parametrize(
    ("fmt", "tty", "json"),
    [("auto", False, True), ("auto", True, False), ("text", False, False), ("json", True, True)],
)
def test_log_format_chooses_text_or_json(
    fmt: str, tty: bool, json: bool, root_handlers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RELAYBUS_LOG_FORMAT auto is text on a terminal and JSON elsewhere; text/json force it."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: tty)
    configure_logging("INFO", fmt)
    (handler,) = logging.getLogger().handlers
    assert isinstance(handler.formatter, JsonFormatter) is json
