"""``relaybus doctor``: what a first run needs, one line per check with the fix.

Checks: Redis reachable and authenticated; the Claude directory exists and holds
transcripts (and how many are older than the backfill window); the ports free; the
permission hook installed and pointing at this install; prompts allowed or not; the
gateway reachable at the LAN address ``relaybus up`` prints for phones. Exit 1 when a
check fails, else 0 (warnings and notes do not fail).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from relaybus import claude_settings, hookcli
from relaybus.collector import procfiles
from relaybus.doctor_projects import projects_dir_problem
from relaybus.lan import lan_address
from relaybus.shared import approval_socket
from relaybus.shared.preflight import claude_dir_problem, port_problem
from relaybus.shared.settings import Settings
from relaybus.shared.store.connection import RedisRefused, probe, redis_address

OK, NOTE, WARN, FAIL = "ok", "note", "warn", "FAIL"
CONNECT_TIMEOUT_S = 2.0
MAX_BODY_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class Check:
    status: str
    name: str
    text: str

    def line(self) -> str:
        return f"{self.status:<4}  {self.name:<9} {self.text}"


def check_redis(settings: Settings) -> Check:
    if "redis_url" not in settings.model_fields_set:
        return Check(
            OK,
            "redis",
            "no RELAYBUS_REDIS_URL: `relaybus up` starts its own embedded "
            "server; `relaybus collector`/`gateway` need RELAYBUS_REDIS_URL",
        )
    where = redis_address(settings)
    try:
        reason = asyncio.run(probe(settings))
    except RedisRefused as exc:
        return Check(FAIL, "redis", f"{exc}")
    if reason is not None:
        return Check(
            FAIL,
            "redis",
            f"Redis at {where} is unreachable ({reason}) — fix: start it, "
            "or correct host and port in RELAYBUS_REDIS_URL",
        )
    return Check(OK, "redis", f"Redis at {where} answers and accepts these credentials")


def _transcripts(projects: Path) -> Iterator[Path]:
    for dirpath, _dirs, names in os.walk(projects):
        for name in names:
            if name.endswith(".jsonl"):
                yield Path(dirpath) / name


def check_claude_dir(settings: Settings) -> Check:
    problem = claude_dir_problem(settings)
    if problem is not None:
        return Check(FAIL, "claude", problem)
    root = settings.claude_dir
    if not root.exists():
        return Check(
            WARN,
            "claude",
            f"{root} does not exist yet — run Claude Code once on this "
            "machine, or set RELAYBUS_CLAUDE_DIR to its config directory",
        )
    misplaced = projects_dir_problem(root)
    if misplaced is not None:
        return Check(WARN, "claude", misplaced)
    cutoff = time.time() - settings.backfill_max_age_hours * 3600
    total = old = 0
    for path in _transcripts(root / "projects"):
        total += 1
        with contextlib.suppress(OSError):
            old += path.stat().st_mtime < cutoff
    if total == 0:
        return Check(
            WARN,
            "claude",
            f"{root} holds no transcripts (projects/**/*.jsonl) — start a "
            "Claude Code session, or check RELAYBUS_CLAUDE_DIR",
        )
    window = f"{settings.backfill_max_age_hours:g} h"
    return Check(
        OK,
        "claude",
        f"{root} holds {total} transcripts; {old} last changed more than "
        f"{window} ago are tracked but not replayed (RELAYBUS_BACKFILL_MAX_AGE_HOURS)",
    )


def check_live_files(settings: Settings) -> Check:
    """Claude Code's ``sessions/`` (live process files): the collector reads it only if no one
    else can write it, or phones see no working/waiting and prompts take a headless run."""
    sessions = settings.claude_dir / "sessions"
    if not sessions.is_dir():
        return Check(NOTE, "live", f"{sessions} does not exist yet (Claude Code writes it)")
    try:
        os.close(procfiles.open_trusted_dir(sessions))
    except procfiles.Untrusted as exc:
        return Check(
            WARN,
            "live",
            f"{exc} — until then the collector ignores it: phones see no working/waiting "
            "and a prompt starts a headless run beside the live CLI",
        )
    except OSError as exc:
        return Check(WARN, "live", f"cannot read {sessions} ({exc.strerror or exc})")
    return Check(OK, "live", f"{sessions}: live sessions readable, writable only by this user")


def _gateway_answers(host: str, port: int) -> bool:
    """A relaybus gateway (its ``/healthz``) answers on ``host:port``."""
    return _http_get(host, port, "/healthz", b'"gatewayId"')


def _http_get(host: str, port: int, path: str, marker: bytes) -> bool:
    """``GET path`` on ``host:port`` answers with ``marker`` in its first 1 MiB."""
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S) as s:
            s.settimeout(CONNECT_TIMEOUT_S)
            s.sendall(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
            body = b""
            while len(body) < MAX_BODY_BYTES and (chunk := s.recv(65536)):
                body += chunk
    except OSError:
        return False
    return marker in body


def _collector_metrics_answer(host: str, port: int) -> bool:
    """A relaybus collector's Prometheus endpoint (``relaybus up``'s own) answers on
    ``host:port``."""
    return _http_get(host, port, "/metrics", b"relaybus_collector_")


def _loopback(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host


def check_ports(settings: Settings) -> list[Check]:
    from relaybus.uptls import gateway_answers_tls  # relaybus up serves HTTPS by default

    loop_host, gw_port = _loopback(settings.gateway_host), settings.gateway_port
    gateway_running = _gateway_answers(loop_host, gw_port) or gateway_answers_tls(
        loop_host, gw_port
    )
    wanted = [
        ("gateway", settings.gateway_host, settings.gateway_port, "RELAYBUS_GATEWAY_PORT"),
        (
            "metrics",
            settings.collector_metrics_host,
            settings.collector_metrics_port,
            "RELAYBUS_COLLECTOR_METRICS_PORT",
        ),
    ]
    out = []
    for name, host, port, variable in wanted:
        if port == 0:
            out.append(Check(NOTE, "port", f"{name}: off ({variable}=0)"))
            continue
        problem = port_problem(host, port, variable)
        if problem is None:
            out.append(Check(OK, "port", f"{name}: {host}:{port} is free"))
        elif name == "gateway" and gateway_running:
            out.append(
                Check(OK, "port", f"{name}: a relaybus gateway already serves {host}:{port}")
            )
        elif name == "metrics" and _collector_metrics_answer(_loopback(host), port):
            out.append(
                Check(
                    OK, "port", f"{name}: in use by relaybus (its collector's /metrics on {port})"
                )
            )
        else:
            out.append(Check(FAIL, "port", f"{name}: {problem} (a relaybus already running?)"))
    out.append(check_approval_socket(settings))
    return out


def check_approval_socket(settings: Settings) -> Check:
    """The hook reaches the collector over a Unix socket whose directory must be private."""
    if settings.approval_port == 0:
        return Check(NOTE, "port", "approvals: off (RELAYBUS_APPROVAL_PORT=0)")
    path = approval_socket.socket_path(settings.approval_port, settings.approval_socket)
    try:
        approval_socket.check_path(path)
        if path.parent.exists():
            approval_socket.check_private_dir(path.parent, create=False)
    except approval_socket.UnsafeEndpoint as exc:
        return Check(
            FAIL,
            "port",
            f"approvals: {exc} — remove or fix that directory, or set "
            "RELAYBUS_APPROVAL_SOCKET to a path in a directory of yours (0700)",
        )
    return Check(OK, "port", f"approvals: socket {path} (directory private to this user)")


def check_hook(settings: Settings) -> Check:
    path = settings.claude_dir / "settings.json"
    try:
        commands = claude_settings.installed_commands(claude_settings.load(path))
    except (claude_settings.SettingsFileError, OSError) as exc:
        return Check(FAIL, "hook", f"{exc} — fix it by hand, then run `relaybus install-hook`")
    wanted = hookcli.wanted_command(
        settings.approval_port, settings.approval_timeout_seconds, socket=settings.approval_socket
    )
    if not commands:
        return Check(
            NOTE,
            "hook",
            f"not installed in {path}: phones cannot answer permission "
            "prompts — `relaybus install-hook` adds it",
        )
    if wanted not in commands:
        return Check(
            WARN,
            "hook",
            f"{path} runs {commands[0]!r}, not this install ({wanted!r}) "
            "— run `relaybus install-hook` again",
        )
    return Check(OK, "hook", f"installed in {path}, pointing at this install")


def check_prompts(settings: Settings) -> Check:
    if not settings.allow_prompts:
        return Check(
            NOTE,
            "prompts",
            "off on this machine (the default): phones can watch and "
            "approve; RELAYBUS_ALLOW_PROMPTS=true lets them send prompts",
        )
    found = shutil.which(settings.claude_bin)
    if found is None:
        return Check(
            FAIL,
            "prompts",
            f"allowed, but RELAYBUS_CLAUDE_BIN {settings.claude_bin!r} "
            "is not on PATH — install Claude Code or set RELAYBUS_CLAUDE_BIN to its path",
        )
    return Check(OK, "prompts", f"allowed on this machine, run with {found}")


def check_lan(settings: Settings) -> Check:
    """Phones use ``http(s)://<lan address>:<port>``: connect there, to the running gateway
    (plain or TLS) or to a listener bound the way the gateway binds."""
    from relaybus.uptls import gateway_answers_tls  # relaybus up serves HTTPS by default

    address, port = lan_address(), settings.gateway_port
    tls = gateway_answers_tls(_loopback(settings.gateway_host), port)
    url = f"{'https' if tls else 'http'}://{address}:{port}/"
    answers = gateway_answers_tls if tls else _gateway_answers
    if address.startswith("127."):
        return Check(
            WARN,
            "lan",
            "this machine has no LAN address (no default route): phones need it on their network",
        )
    if answers(_loopback(settings.gateway_host), port):
        if answers(address, port):
            return Check(
                OK, "lan", f"the gateway answers at {url} (a firewall may still block phones)"
            )
        return Check(
            FAIL,
            "lan",
            f"the gateway does not answer at {url} — set "
            "RELAYBUS_GATEWAY_HOST=0.0.0.0 (it listens on "
            f"{settings.gateway_host} only)",
        )
    try:
        listener = socket.create_server((settings.gateway_host, port))
    except OSError as exc:
        return Check(
            FAIL, "lan", f"cannot listen on {settings.gateway_host}:{port} ({exc.strerror})"
        )
    with listener:
        try:
            socket.create_connection(
                (address, listener.getsockname()[1]), CONNECT_TIMEOUT_S
            ).close()
        except OSError:
            return Check(
                FAIL,
                "lan",
                f"{url} would not reach a gateway listening on "
                f"{settings.gateway_host} — set RELAYBUS_GATEWAY_HOST=0.0.0.0",
            )
    return Check(
        OK,
        "lan",
        f"a gateway on {settings.gateway_host}:{port} is reachable at {url} "
        "(a firewall may still block phones)",
    )


def checks(settings: Settings) -> list[Check]:
    return [
        check_redis(settings),
        check_claude_dir(settings),
        check_live_files(settings),
        *check_ports(settings),
        check_hook(settings),
        check_prompts(settings),
        check_lan(settings),
    ]


def run(settings: Settings) -> int:
    """Entry of ``relaybus doctor``."""
    results = checks(settings)
    for result in results:
        print(result.line(), flush=True)
    failed = sum(r.status == FAIL for r in results)
    print(f"{failed} check(s) failed." if failed else "Ready for a first run.", file=sys.stdout)
    return 1 if failed else 0
