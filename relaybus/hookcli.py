"""``relaybus hook permission-request`` and ``relaybus install-hook [--remove]``.

The hook is what Claude Code runs when it would ask the user for a permission: the
request (JSON on stdin) goes to this machine's collector over its approval socket (a Unix
socket in a directory only this user can enter, see ``relaybus.shared.approval_socket``), which
holds it while someone can answer from a phone. It prints Claude Code's answer
(``{"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {...}}}``)
or nothing — no decision, and Claude Code shows its own prompt. Nothing is sent to, and
no answer taken from, an endpoint that is not provably this user's collector. It always
exits 0, and never waits longer than the approval timeout plus a margin: a connect takes
at most a second, so a collector that is down costs nothing.

Only the standard library is used here, so the hook starts fast.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from relaybus.shared import approval_socket

DEFAULT_PORT = 9465
DEFAULT_TIMEOUT_S = 120.0
#: Allowed beyond the approval timeout before the hook gives up on the collector itself.
MARGIN_S = 10.0
CONNECT_TIMEOUT_S = 1.0
MAX_INPUT_BYTES = 16 * 1024 * 1024
MAX_RESPONSE_BYTES = 1024 * 1024
PATH = "/permission-request"

SUBCOMMANDS = {
    "hook": "hook commands Claude Code runs (hook permission-request)",
    "install-hook": "add relaybus's PermissionRequest hook to Claude Code's settings.json (--remove to take it out)",
}


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, "") or default)
    except ValueError:
        return default


def answer(
    behavior: str, message: str | None = None, reply: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Claude Code's PermissionRequest hook output for ``allow`` / ``deny``; from the
    collector's ``reply``: ``updatedInput`` (an object) and ``updatedPermissions`` (a list)
    on allow — a question's answers, an "always allow" rule —, ``interrupt: true`` on deny."""
    decision: dict[str, Any] = {"behavior": behavior}
    extra = reply or {}
    if behavior == "deny" and message:
        decision["message"] = message
    if behavior == "allow" and isinstance(extra.get("updatedInput"), dict):
        decision["updatedInput"] = extra["updatedInput"]
    if behavior == "allow" and isinstance(extra.get("updatedPermissions"), list):
        decision["updatedPermissions"] = extra["updatedPermissions"]
    if behavior == "deny" and extra.get("interrupt") is True:
        decision["interrupt"] = True
    return {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision}}


def ask_collector(body: bytes, path: Path, bound_s: float) -> dict[str, Any]:
    """POST the request to the collector's socket and return its JSON answer (``{}`` on any failure).

    The socket's directory must be private to this user (and, on Linux, the peer must run
    as this user): otherwise the request is not sent and no answer is taken.
    """
    deadline = time.monotonic() + bound_s
    head = (
        f"POST {PATH} HTTP/1.1\r\nHost: relaybus\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    try:
        with approval_socket.connect(path, CONNECT_TIMEOUT_S) as sock:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            sock.sendall(head + body)
            chunks: list[bytes] = []
            size = 0
            while size <= MAX_RESPONSE_BYTES:
                left = deadline - time.monotonic()
                if left <= 0:
                    return {}
                sock.settimeout(left)
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
    except OSError:
        return {}
    raw = b"".join(chunks)
    status, _, rest = raw.partition(b"\r\n")
    if b" 200 " not in status + b" ":
        return {}
    _headers, _, payload = rest.partition(b"\r\n\r\n")
    try:
        reply = json.loads(payload)
    except ValueError:
        return {}
    return reply if isinstance(reply, dict) else {}


def permission_request(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="relaybus hook permission-request",
        description="Claude Code PermissionRequest hook: JSON on stdin, decision (or nothing) on stdout.",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help="number naming the collector's approval socket "
        f"[env RELAYBUS_APPROVAL_PORT, default {DEFAULT_PORT}; 0 = off]",
    )
    parser.add_argument(
        "--socket",
        default=None,
        help="the collector's approval socket [env RELAYBUS_APPROVAL_SOCKET, "
        "default <runtime dir>/approval-<port>.sock]",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help=f"approval timeout in seconds [env RELAYBUS_APPROVAL_TIMEOUT_SECONDS, default {DEFAULT_TIMEOUT_S:g}]",
    )
    args = parser.parse_args(argv)
    port = (
        args.port
        if args.port is not None
        else int(_env_float("RELAYBUS_APPROVAL_PORT", DEFAULT_PORT))
    )
    timeout_s = (
        args.timeout
        if args.timeout is not None
        else _env_float("RELAYBUS_APPROVAL_TIMEOUT_SECONDS", DEFAULT_TIMEOUT_S)
    )
    body = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
    if not 0 < port < 65536 or len(body) > MAX_INPUT_BYTES:
        return 0
    try:
        request = json.loads(body)
    except ValueError:
        return 0
    if not isinstance(request, dict):
        return 0
    path = approval_socket.socket_path(
        port, args.socket or os.environ.get("RELAYBUS_APPROVAL_SOCKET") or None
    )
    reply = ask_collector(body, path, max(1.0, timeout_s) + MARGIN_S)
    behavior = reply.get("behavior")
    if behavior in ("allow", "deny"):
        message = reply.get("message")
        out = answer(behavior, message if isinstance(message, str) else None, reply)
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    return 0


def hook(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="relaybus hook", description=SUBCOMMANDS["hook"])
    parser.add_argument("event", choices=["permission-request"])
    args, rest = parser.parse_known_args(argv[:1])
    del args
    return permission_request([*rest, *argv[1:]])


def default_command() -> str:
    """How Claude Code should start the hook: the ``relaybus`` script of this installation
    (next to its Python, even when that venv is not activated), else the one on PATH."""
    beside = Path(sys.executable).parent / "relaybus"
    if beside.is_file() and os.access(beside, os.X_OK):
        return f"{shlex.quote(str(beside.absolute()))} hook permission-request"
    found = shutil.which("relaybus")
    if found:
        return f"{shlex.quote(str(Path(found).resolve()))} hook permission-request"
    return f"{shlex.quote(sys.executable)} -m relaybus.cli hook permission-request"


def wanted_command(
    approval_port: int,
    approval_timeout_s: float,
    base: str | None = None,
    *,
    socket: Path | None = None,
) -> str:
    """The hook command ``install-hook`` writes for these settings."""
    command = base or default_command()
    if approval_port != DEFAULT_PORT:
        command += f" --port {approval_port}"
    if socket is not None:
        command += f" --socket {shlex.quote(str(socket))}"
    if approval_timeout_s != DEFAULT_TIMEOUT_S:
        command += f" --timeout {approval_timeout_s:g}"
    return command


def install_hook(argv: Sequence[str]) -> int:
    from relaybus import claude_settings  # json/file work only; kept off the hook's path
    from relaybus.shared.settings import SettingsError, load_settings

    parser = argparse.ArgumentParser(
        prog="relaybus install-hook", description=SUBCOMMANDS["install-hook"]
    )
    parser.add_argument("--remove", action="store_true", help="take relaybus's hook out again")
    parser.add_argument(
        "--settings",
        type=Path,
        default=None,
        help="settings file [default <claude dir>/settings.json]",
    )
    parser.add_argument("--command", default=None, help="hook command [default: this relaybus]")
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"relaybus: {exc}", file=sys.stderr)
        return 2
    path: Path = args.settings or settings.claude_dir / "settings.json"
    try:
        if args.remove:
            outcome = claude_settings.remove(path)
        else:
            command = wanted_command(
                settings.approval_port,
                settings.approval_timeout_seconds,
                args.command,
                socket=settings.approval_socket,
            )
            # Claude Code's own hook timeout must outlast the hold, or it cuts the wait short.
            timeout = int(settings.approval_timeout_seconds + 2 * MARGIN_S)
            outcome = claude_settings.install(path, command, timeout)
    except (claude_settings.SettingsFileError, OSError) as exc:
        print(f"relaybus: {exc}", file=sys.stderr)
        return 1
    what = "removed from" if args.remove else "installed in"
    if not outcome.changed:
        what = "not present in" if args.remove else "already installed in"
    print(f"relaybus PermissionRequest hook {what} {path}")
    if outcome.backup is not None:
        print(f"previous settings saved as {outcome.backup}")
    return 0


def main(argv: Sequence[str]) -> int:
    """``argv`` starts with the subcommand (``hook`` or ``install-hook``)."""
    name, rest = argv[0], list(argv[1:])
    if name == "hook":
        return hook(rest)
    return install_hook(rest)
