"""Logging configuration, applied only by the CLI entry point: pretty on a TTY, JSON off it."""

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


_TOKEN_QUERY = re.compile(r"([?&]token=)[^&\s\"']+")


class RedactTokens(logging.Filter):
    """Blank ``?token=`` values: uvicorn logs each WebSocket path, query string included."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args:
            record.msg = record.getMessage()
            record.args = None
        if "token=" in str(record.msg):
            record.msg = _TOKEN_QUERY.sub(r"\1***", str(record.msg))
        return True


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if sys.stderr.isatty():
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-5s %(name)s: %(message)s"))
    else:
        handler.setFormatter(JsonFormatter())
    handler.addFilter(RedactTokens())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # uvicorn's access log is one line per HTTP request; we log connections ourselves.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
