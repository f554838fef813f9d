"""HTTPS for ``relaybus up``: which certificate the phone port serves, and the root page.

* ``RELAYBUS_TLS_CERT``/``RELAYBUS_TLS_KEY`` set: that certificate (checked readable), no
  root of ours, no root page.
* else ``RELAYBUS_TLS_AUTO`` (default true): the private root and a server certificate for
  this machine's addresses (relaybus.tls, in ``<state dir>/tls``), and the plain-http root
  page on ``RELAYBUS_TLS_ROOT_PORT`` (relaybus.rootpage).
* else plain http, as before.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relaybus import qr, rootpage, tls
from relaybus.lan import lan_address
from relaybus.shared.aio import sleep_unless
from relaybus.shared.preflight import StartupError, check_port
from relaybus.shared.settings import Settings

Component = Callable[[asyncio.Event], Coroutine[Any, Any, None]]

log = logging.getLogger(__name__)

#: How often ``up`` asks whether its server certificate needs renewing.
RENEW_CHECK_S = 6 * 3600.0


@dataclass(frozen=True)
class UpTls:
    """What ``up`` serves: ``root_cert`` is set when the root is ours (auto)."""

    enabled: bool
    root_cert: Path | None = None
    root_port: int = 0
    #: Our certificates' directory and the names the server certificate is for (auto).
    directory: Path | None = None
    names: tuple[str, ...] = ()

    def root_url(self, settings: Settings) -> str:
        if self.root_cert is None or not self.root_port:
            return ""
        return f"http://{public_host(settings)}:{self.root_port}/"


def public_host(settings: Settings) -> str:
    """The address phones use: the LAN address unless the gateway listens on one host."""
    bound = settings.gateway_host
    return lan_address() if bound in ("0.0.0.0", "", "::") else bound


def check_root_port(settings: Settings) -> None:
    """The root page's port is free (when ``up`` will serve it)."""
    if settings.tls_auto and not settings.tls_cert and settings.tls_root_port:
        check_port(settings.gateway_host, settings.tls_root_port, "RELAYBUS_TLS_ROOT_PORT")


def prepare(settings: Settings, state_dir: Path) -> tuple[Settings, UpTls]:
    """The settings the gateway serves with (``tls_cert``/``tls_key`` filled in when the
    certificate is ours) and what was chosen; ``StartupError`` (one line) when a
    certificate cannot be used or made."""
    try:
        if settings.tls_cert:
            tls.check_pair(tls.CertPaths(Path(settings.tls_cert), Path(settings.tls_key)))
            return settings, UpTls(enabled=True)
        if not settings.tls_auto:
            return settings, UpTls(enabled=False)
        extra = [h.strip() for h in settings.public_hosts.split(",") if h.strip()]
        names = tls.phone_names(lan_address(), extra)
        root, server = tls.ensure_server(tls.tls_dir(state_dir), names)
    except (tls.TlsError, OSError) as exc:
        raise StartupError(str(exc)) from exc
    update = {"tls_cert": str(server.cert), "tls_key": str(server.key)}
    chosen = UpTls(True, root.cert, settings.tls_root_port, tls.tls_dir(state_dir), tuple(names))
    return settings.model_copy(update=update), chosen


def components(settings: Settings, chosen: UpTls, https_url: str) -> dict[str, Component]:
    """With our own certificates: their renewal, and the root page when ``up`` serves one."""
    out: dict[str, Component] = {}
    if chosen.directory is not None:
        directory, names = chosen.directory, chosen.names

        def renew(stop: asyncio.Event) -> Coroutine[Any, Any, None]:
            return keep_renewed(directory, names, stop)

        out["certificate renewal"] = renew
    root = chosen.root_cert
    if root is None or not chosen.root_port:
        return out
    page = rootpage.RootPage.build(https_url.split("#", 1)[0], root)

    def serve(stop: asyncio.Event) -> Coroutine[Any, Any, None]:
        return rootpage.serve(page, settings.gateway_host, chosen.root_port, stop)

    out["root page"] = serve
    return out


async def keep_renewed(
    directory: Path, names: Sequence[str], stop: asyncio.Event, every_s: float = RENEW_CHECK_S
) -> None:
    """Until ``stop``: every ``every_s``, remake the server certificate when
    :func:`relaybus.tls.needs_renewal` says so (within 30 days of expiry, or the root changed);
    the gateway loads the new files on its own (``relaybus.gateway.main._Server``)."""
    while not stop.is_set():
        await sleep_unless(stop, every_s)
        if stop.is_set():
            return
        try:
            await asyncio.to_thread(tls.ensure_server, directory, names)
        except (tls.TlsError, OSError) as exc:
            log.warning("server certificate not renewed (%s); trying again in %.0f s", exc, every_s)


def banner_lines(settings: Settings, chosen: UpTls, url: str) -> list[str]:
    """The banner's TLS lines and the QR code of ``url``."""
    lines: list[str] = []
    if chosen.root_cert is not None:
        root_url = chosen.root_url(settings)
        if root_url:
            lines.append(f"  First on each phone:  {root_url} (install the root once)")
        lines.append(f"  Root certificate:    {chosen.root_cert}")
    elif not chosen.enabled:
        lines.append("  HTTPS:               off (no push or install on phones over http)")
    return [*lines, "", qr.terminal(url), ""]


def probe_context(settings: Settings) -> ssl.SSLContext | None:
    """TLS for ``up``'s readiness probe of its own gateway on loopback: it only checks that
    our gateway answers (by its id), so the certificate is not verified here."""
    if not settings.tls_cert:
        return None
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def gateway_answers_tls(host: str, port: int, timeout_s: float = 2.0) -> bool:
    """A relaybus gateway answers ``/healthz`` over TLS on ``host:port`` (``relaybus doctor``
    next to an ``up`` serving HTTPS). Like :func:`probe_context`, whether *our* gateway
    answers is the question, so the certificate is not verified."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    body = b""
    try:
        with (
            socket.create_connection((host, port), timeout=timeout_s) as raw,
            context.wrap_socket(raw) as s,
        ):
            s.settimeout(timeout_s)
            s.sendall(f"GET /healthz HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
            while len(body) < 65536 and (chunk := s.recv(65536)):
                body += chunk
    except OSError:  # ssl.SSLError included: not TLS there
        return False
    return b'"gatewayId"' in body
