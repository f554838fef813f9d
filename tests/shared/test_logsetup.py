"""Log output: JSON off a TTY, tokens never written."""

from __future__ import annotations

import logging

import orjson

from relaybus.logsetup import JsonFormatter, RedactTokens


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
