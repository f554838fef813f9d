"""``relaybus up``: a collector and a gateway in one process, for one machine, no Docker.

Without a configured ``RELAYBUS_REDIS_URL`` (flag, environment or ``.env``) a private
embedded server is started (``relaybus.embedded``) and stopped last. Without tokens (and
without ``RELAYBUS_ALLOW_ANONYMOUS``) one is generated on first run and kept. State lives
in ``$XDG_STATE_HOME/relaybus`` (default ``~/.local/state/relaybus``).

SIGTERM or SIGINT sets one stop event shared by both components; each stops its intake
and finishes its work in flight, then the embedded server is shut down. A second signal
cancels what is still running.

(About 350 lines: the whole start and stop order of ``up`` reads best in one place; HTTPS
is relaybus.uptls, the state file relaybus.upstate.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import quote

from pydantic import SecretStr

from relaybus import upstate, uptls
from relaybus.collector.service import serve as serve_collector
from relaybus.embedded import EmbeddedServer, EmbeddedServerError, write_private
from relaybus.gateway.auth import AuthConfigError, TokenTable, check_anonymous_bind
from relaybus.gateway.main import GatewayStartError
from relaybus.gateway.main import serve as serve_gateway
from relaybus.serverwatch import ServerWatch
from relaybus.shared import approval_socket
from relaybus.shared.preflight import StartupError, check_port, claude_dir_problem, usable_dir
from relaybus.shared.settings import Settings
from relaybus.shared.store.connection import RedisRefused, probe, redis_address, wait_for_redis

log = logging.getLogger(__name__)

SHUTDOWN_S = 30.0
READY_TIMEOUT_S = 60.0


state_dir = upstate.state_dir


def ensure_token(directory: Path) -> str:
    """The token stored in ``directory/token`` (mode 0600), generated on first use."""
    path = directory / "token"
    token = path.read_text().strip() if path.exists() else ""
    if not token:
        token = secrets.token_urlsafe(24)
        write_private(path, token + "\n")
        log.info("generated a client token in %s", path)
    return token


def phone_url(settings: Settings, token: str | None) -> str:
    """The URL to open on a phone: the LAN address unless the gateway listens on one host."""
    scheme = "https" if settings.tls_cert else "http"
    url = f"{scheme}://{uptls.public_host(settings)}:{settings.gateway_port}/"
    # In the fragment: never sent to a server, so never in an access log or a Referer.
    return f"{url}#token={quote(token, safe='')}" if token else url


def listening(settings: Settings) -> str:
    """The ports this process binds, with their addresses."""
    parts = [f"gateway {settings.gateway_host}:{settings.gateway_port}"]
    if settings.collector_metrics_port:
        parts.append(f"metrics {settings.collector_metrics_host}:{settings.collector_metrics_port}")
    if settings.approval_port:
        path = approval_socket.socket_path(settings.approval_port, settings.approval_socket)
        parts.append(f"approvals {path}")
    return ", ".join(parts)


def _banner(
    settings: Settings, token: str | None, server: EmbeddedServer | None, chosen: uptls.UpTls
) -> str:
    url = phone_url(settings, token)
    lines = ["", "relaybus is up.", f"  Open on your phone:  {url}"]
    lines += uptls.banner_lines(settings, chosen, url)
    if token:
        lines.append(f"  Token:               {token}")
    if server is not None:
        lines.append(f"  Redis:               embedded, data in {server.data_dir}")
    prompts = (
        "allowed" if settings.allow_prompts else "off (RELAYBUS_ALLOW_PROMPTS=true allows them)"
    )
    lines += [
        f"  Watching:            {settings.claude_dir} (transcripts changed in the last "
        f"{settings.backfill_max_age_hours:g} h are replayed)",
        f"  Prompts:             {prompts}",
        f"  Listening:           {listening(settings)}",
        "  Stop with Ctrl-C.",
        "",
    ]
    return "\n".join(lines)


async def _gateway_ready(settings: Settings, stop: asyncio.Event) -> bool:
    """Poll the gateway's ``/healthz`` until it answers with our gateway id (not merely
    anything listening on the port); False on stop or timeout."""
    host = settings.gateway_host
    host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    request = f"GET /healthz HTTP/1.0\r\nHost: {host}\r\n\r\n".encode()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READY_TIMEOUT_S
    while not stop.is_set() and loop.time() < deadline:
        try:
            reader, writer = await asyncio.open_connection(
                host, settings.gateway_port, ssl=uptls.probe_context(settings)
            )
            try:
                writer.write(request)
                body = await asyncio.wait_for(reader.read(65536), 5)
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
            if settings.gateway_id.encode() in body:
                return True
        except (OSError, TimeoutError):
            pass
        await asyncio.sleep(0.05)
    return False


async def _ready(settings: Settings, stop: asyncio.Event) -> bool:
    """Our gateway answers and Redis does (a refusal raises ``RedisRefused``)."""
    if not await _gateway_ready(settings, stop):
        return False
    return await wait_for_redis(settings, stop, lambda _reason: None)


async def serve_both(
    settings: Settings,
    on_ready: Callable[[], None],
    extra: dict[str, uptls.Component] | None = None,
    server: EmbeddedServer | None = None,
    early_signals: Sequence[int] = (),
) -> int:
    """Run collector and gateway (and the ``extra`` components) until a signal; 0 on a clean
    stop, 1 if one of them failed, Redis refused the settings or the embedded ``server`` kept
    dying (relaybus.serverwatch)."""
    stop = asyncio.Event()
    watch = ServerWatch(server, stop) if server is not None else None
    watching = asyncio.create_task(watch.run(), name="up-serverwatch") if watch else None
    loop = asyncio.get_running_loop()
    components: dict[str, Coroutine[Any, Any, None]] = {
        "gateway": serve_gateway(settings, stop),
        "collector": serve_collector(settings, stop),
        **{name: start(stop) for name, start in (extra or {}).items()},
    }
    tasks: dict[asyncio.Task[None], str] = {
        asyncio.create_task(c, name=f"up-{n}"): n for n, c in components.items()
    }

    def on_signal(signum: int) -> None:
        if stop.is_set():
            log.warning("second %s: cancelling", signal.Signals(signum).name)
            for task in tasks:
                task.cancel()
            return
        log.info("%s: stopping", signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    for signum in early_signals[:1]:  # arrived while asyncio.run set up: a stop, as any
        on_signal(signum)
    refused: list[RedisRefused] = []

    def ready_done(task: asyncio.Task[bool]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, RedisRefused):
            refused.append(exc)
            stop.set()
        elif exc is None and task.result():
            on_ready()

    ready = asyncio.create_task(_ready(settings, stop), name="up-ready")
    ready.add_done_callback(ready_done)
    failed = False
    try:
        done, _pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        if not stop.is_set():
            failed = True
            for task in done:
                exc = None if task.cancelled() else task.exception()
                if isinstance(exc, StartupError | GatewayStartError):
                    print(f"relaybus up: {exc}", file=sys.stderr, flush=True)
                else:
                    log.error("%s stopped unexpectedly", tasks[task], exc_info=exc)
            stop.set()
        _done, pending = await asyncio.wait(tasks, timeout=SHUTDOWN_S)
        for task in pending:
            log.warning("%s did not stop within %.0f s; cancelling", tasks[task], SHUTDOWN_S)
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for task, result in zip(tasks, results, strict=True):
            if isinstance(result, StartupError | GatewayStartError):
                failed = True  # printed above
            elif isinstance(result, BaseException) and not isinstance(
                result, asyncio.CancelledError
            ):
                failed = True
                log.error("%s failed", tasks[task], exc_info=result)
        if refused:
            print(f"relaybus up: {refused[0]}", file=sys.stderr, flush=True)
            failed = True
        if watch is not None and watch.gave_up is not None:
            print(f"relaybus up: {watch.gave_up}", file=sys.stderr, flush=True)
            failed = True
    finally:
        ready.cancel()
        if watching is not None:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
            # Shutdown is under way until the embedded server is stopped: further signals
            # must not cut it short (asyncio would restore the default, fatal handler).
            signal.signal(sig, signal.SIG_IGN)
    return 1 if failed else 0


class _Interrupted(Exception):
    """A signal arrived while the event loop was not running (start-up)."""


_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def _set_handlers(handler: _Handler) -> dict[signal.Signals, _Handler]:
    return {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}


class _StartSignals:
    """The handler of SIGINT/SIGTERM until ``serve_both`` installs the loop's own: raises
    ``_Interrupted`` where that unwinds start-up; inside an event loop (a raise there would be
    swallowed by the callback it hits, and the Ctrl-C lost) it only records the signal, which
    ``serve_both`` then acts on and ``check`` raises after a short ``asyncio.run``."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        self.seen.append(signum)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise _Interrupted(signal.Signals(signum).name) from None

    def check(self) -> None:
        if self.seen:
            raise _Interrupted(signal.Signals(self.seen[0]).name)


def preflight(settings: Settings) -> None:
    """What would otherwise fail half-way through start-up, as one ``StartupError`` line."""
    problem = claude_dir_problem(settings)
    if problem is not None:
        raise StartupError(problem)
    check_port(settings.gateway_host, settings.gateway_port, "RELAYBUS_GATEWAY_PORT")
    check_port(
        settings.collector_metrics_host,
        settings.collector_metrics_port,
        "RELAYBUS_COLLECTOR_METRICS_PORT",
    )
    uptls.check_root_port(settings)


def _state(settings: Settings, token: str | None, chosen: uptls.UpTls) -> upstate.UpState:
    """What ``relaybus url``/``status`` read about this ``up`` (relaybus.upstate)."""
    ports = {"gateway": settings.gateway_port}
    if chosen.root_url(settings):
        ports["root"] = chosen.root_port
    if settings.collector_metrics_port:
        ports["metrics"] = settings.collector_metrics_port
    url = phone_url(settings, token)
    return upstate.UpState(
        pid=os.getpid(),
        pid_start=upstate.process_start(os.getpid()),
        url=url,
        http_url="" if chosen.enabled else url,
        root_url=chosen.root_url(settings),
        root_cert=str(chosen.root_cert or ""),
        tls=chosen.enabled,
        redis=redis_address(settings),
        ports=ports,
    )


def _announce(banner: str, state: upstate.UpState) -> None:
    print(banner, flush=True)
    try:
        upstate.write(state, state_dir())
    except OSError as exc:  # relaybus url/status cannot answer; serving goes on
        log.warning("cannot write %s: %s", upstate.path(state_dir()), exc)


def _wait_for_external_redis(settings: Settings) -> None:
    """Refused settings raise ``RedisRefused``; an unreachable server is said on stdout."""
    unreachable = asyncio.run(probe(settings))
    if unreachable is not None:
        print(
            f"Waiting for Redis at {redis_address(settings)} ({unreachable}); "
            "the phone URL follows once it answers.",
            flush=True,
        )


def run(settings: Settings) -> int:
    """Entry of ``relaybus up``: 0 after a clean stop; 1 (one line) when something it needs
    is unusable or Redis refuses the settings; 2 for a token configuration it cannot serve."""
    if "collector_metrics_host" not in settings.model_fields_set:  # one machine: keep it local
        settings = settings.model_copy(update={"collector_metrics_host": "127.0.0.1"})
    try:
        directory = usable_dir(state_dir(), "state directory")
        preflight(settings)
        # the entries only: without any, a token is generated below
        TokenTable.from_settings(settings.model_copy(update={"allow_anonymous": True}))
        check_anonymous_bind(settings)
    except StartupError as exc:
        print(f"relaybus up: {exc}", file=sys.stderr)
        return 1
    except AuthConfigError as exc:
        print(f"relaybus up: {exc}", file=sys.stderr)
        return 2
    server: EmbeddedServer | None = None
    token: str | None = None
    code = 0
    # Until the event loop takes over, a signal raises so that the ``finally`` still runs.
    early = _StartSignals()
    previous = _set_handlers(early)
    try:
        external = settings.redis_sentinels or settings.redis_cluster
        if "redis_url" not in settings.model_fields_set and not external:
            server = EmbeddedServer(directory / "server")
            settings = settings.model_copy(update={"redis_url": SecretStr(server.start())})
        if not settings.gateway_id:  # known, so readiness is checked on our own gateway
            settings = settings.model_copy(update={"gateway_id": f"up-{secrets.token_hex(5)}"})
        if server is None:
            _wait_for_external_redis(settings)
            early.check()
        if not settings.tokens.get_secret_value() and not settings.allow_anonymous:
            token = ensure_token(directory)
            settings = settings.model_copy(update={"tokens": SecretStr(token)})
        settings, chosen = uptls.prepare(settings, directory)
        banner = _banner(settings, token, server, chosen)
        state = _state(settings, token, chosen)
        extra = uptls.components(settings, chosen, state.url)
        code = asyncio.run(
            serve_both(settings, lambda: _announce(banner, state), extra, server, early.seen)
        )
    except EmbeddedServerError as exc:
        print(f"relaybus: {exc}", file=sys.stderr)
        code = 1
    except (RedisRefused, StartupError) as exc:
        print(f"relaybus up: {exc}", file=sys.stderr)
        code = 1
    except _Interrupted as exc:
        print(f"relaybus up: {exc} during start-up: stopped", file=sys.stderr, flush=True)
        code = 128 + signal.Signals[str(exc)].value
    finally:
        _set_handlers(signal.SIG_IGN)  # the server stops last and is not cut short
        upstate.remove(directory)
        if server is not None:
            server.stop()
        for sig, old in previous.items():
            signal.signal(sig, old)
    return code
