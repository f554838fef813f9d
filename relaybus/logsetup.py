"""Logging configuration, applied only by the CLI entry point: text on a TTY, JSON off it
(``RELAYBUS_LOG_FORMAT`` text or json chooses either everywhere)."""

from __future__ import annotations

import logging
import re
import sys
import time

import orjson


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out).decode()


#: Where a token can appear in a log line: a ``?token=`` query (the ``/ws`` protocol logs
#: each upgrade's path at DEBUG), an ``Authorization`` header and a ``hello`` frame's
#: ``token`` field (every received message is logged at DEBUG).
_SECRETS = (
    (re.compile(r"([?&]token=)[^&\s\"']+"), r"\1***"),
    (re.compile(r"(\bbearer\s+)[^\s\"',;]+", re.IGNORECASE), r"\1***"),
    (re.compile(r"(\bauthorization:\s*)(?!bearer\b)[^\s\"',;]+", re.IGNORECASE), r"\1***"),
    (re.compile(r"(\\?[\"']token\\?[\"']\s*:\s*\\?[\"'])[^\"'\\]*"), r"\1***"),
)


def redact(text: str) -> str:
    """``text`` with every token value replaced by ``***``."""
    lowered = text.lower()
    if "token" not in lowered and "bearer" not in lowered and "authorization" not in lowered:
        return text
    for pattern, repl in _SECRETS:
        text = pattern.sub(repl, text)
    return text


class RedactTokens(logging.Filter):
    """Blank token values in every record (message, arguments and exception text)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args:
            record.msg = record.getMessage()
            record.args = None
        record.msg = redact(str(record.msg))
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def configure_logging(level: str, fmt: str = "auto") -> None:
    """Log to stderr at ``level``: ``fmt`` text, json, or auto (text on a terminal)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "text" or (fmt == "auto" and sys.stderr.isatty()):
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-5s %(name)s: %(message)s"))
    else:
        handler.setFormatter(JsonFormatter())
    handler.addFilter(RedactTokens())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # uvicorn's access log is one line per HTTP request; we log connections ourselves.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
