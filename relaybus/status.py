"""``relaybus status``: is a ``relaybus up`` running here, and is it healthy?

Reads up's state file (:mod:`relaybus.upstate`) and asks the gateway it names for
``/readyz``. Exit 0: running and ready; 1: not running (no state file, or the process that
wrote it is gone); 3: running but unhealthy (the gateway does not answer, or answers that
Redis or one of its loops is down) — the codes of ``systemctl status``.
"""

from __future__ import annotations

import argparse
import socket
import ssl
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from relaybus import upstate

RUNNING, NOT_RUNNING, UNHEALTHY = 0, 1, 3
PROBE_TIMEOUT_S = 3.0
MAX_REPLY_BYTES = 64 * 1024


def readiness(url: str) -> str | None:
    """Why the gateway serving ``url`` is not ready (one phrase), or None when it is."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    request = f"GET /readyz HTTP/1.0\r\nHost: {parts.netloc}\r\n\r\n".encode()
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S) as raw:
            raw.settimeout(PROBE_TIMEOUT_S)
            sock: socket.socket = raw
            if parts.scheme == "https":
                # A liveness probe of our own process that sends nothing secret: which
                # certificate it shows is `relaybus url`'s and the phone's business.
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
                sock = context.wrap_socket(raw, server_hostname=host)
            sock.sendall(request)
            reply = b""
            while len(reply) < MAX_REPLY_BYTES and (chunk := sock.recv(65536)):
                reply += chunk
    except OSError as exc:  # ssl.SSLError included
        return f"its gateway does not answer at {host}:{port} ({exc.strerror or exc})"
    status = reply.split(b"\r\n", 1)[0]
    if b" 200 " in status + b" ":
        return None
    if b" 503" in status:
        return "its gateway is up but not ready (Redis unreachable, or a loop stalled)"
    return f"its gateway answered {status.decode(errors='replace')!r}"


def _since(started_ms: int) -> str:
    minutes = max(0, int(time.time() - started_ms / 1000) // 60)
    return f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"


def report(directory: Path | None = None) -> tuple[int, list[str]]:
    """The exit code and the lines ``relaybus status`` prints."""
    where = upstate.path(directory)
    state = upstate.read(directory)
    if state is None:
        return NOT_RUNNING, [f"relaybus up is not running (no state file {where})"]
    if not upstate.alive(state):
        return NOT_RUNNING, [
            f"relaybus up is not running (pid {state.pid} of {where} is gone: it was killed)"
        ]
    phone = state.url.split("#", 1)[0]  # the token stays out of a status line
    lines = [
        f"relaybus up is running: pid {state.pid}, for {_since(state.started_at)}",
        f"  phone URL: {phone} (`relaybus url` prints it with the token)",
    ]
    if state.redis:
        lines.append(f"  Redis:     {state.redis}")
    problem = readiness(state.url)
    if problem is not None:
        return UNHEALTHY, [*lines, f"  unhealthy: {problem}"]
    return RUNNING, [*lines, "  healthy:   its gateway is ready"]


def main(argv: Sequence[str]) -> int:
    """Entry of ``relaybus status``."""
    parser = argparse.ArgumentParser(
        prog="relaybus status",
        description="exit 0: running and healthy; 1: not running; 3: running but unhealthy",
    )
    parser.parse_args(argv)
    code, lines = report()
    for line in lines:
        print(line, flush=True)
    return code
