"""What the gateway tells browsers, and which pages' scripts it lets open ``/ws``.

* Every HTTP response carries a Content-Security-Policy (scripts, styles and
  connections from this origin only; no framing), ``X-Content-Type-Options: nosniff``
  and ``Referrer-Policy: no-referrer`` (a token in a URL never leaves in a Referer).
* A browser opening ``/ws`` sends ``Origin``; it must be the gateway's own origin (its
  ``Host``) or one listed in ``RELAYBUS_ALLOWED_ORIGINS``. Otherwise any web page the
  user visits could open a connection with the user's network position (and, with
  anonymous access on, start conversations). Non-browser clients send no ``Origin`` and
  authenticate with a token.
* Every request (HTTP and ``/ws``) must name the gateway in ``Host``: an IP address,
  ``localhost`` (or ``*.localhost``), this machine's name, or one of
  ``RELAYBUS_PUBLIC_HOSTS``. A DNS-rebinding page (``rebind.evil.example`` resolved to the
  gateway's address) sends its own name in both ``Host`` and ``Origin``, so the Origin check
  alone lets it in; here it gets 403. An IP literal is always the address the browser
  really connected to, so a page served under it is the gateway's own.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from relaybus.shared.settings import Settings

log = logging.getLogger(__name__)

CSP = "default-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'"
HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
)


class SecurityHeaders:
    """Pure ASGI middleware: add :data:`HEADERS` to every HTTP response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [h for h in HEADERS if h[0] not in present]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _netloc(origin: str) -> str | None:
    parts = urlsplit(origin.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return parts.netloc.lower()


@dataclass(frozen=True, slots=True)
class OriginPolicy:
    """``/ws`` accepts no ``Origin`` (not a browser), its own origin, or a listed one."""

    allowed: frozenset[str]

    @classmethod
    def parse(cls, setting: str) -> OriginPolicy:
        """``RELAYBUS_ALLOWED_ORIGINS``: comma-separated ``scheme://host[:port]``."""
        items = [o.strip().rstrip("/").lower() for o in setting.split(",") if o.strip()]
        return cls(frozenset(items))

    def allows(self, headers: Mapping[str, str]) -> bool:
        origin = headers.get("origin")
        if origin is None:
            return True
        if origin.strip().rstrip("/").lower() in self.allowed:
            return True
        netloc = _netloc(origin)
        host = headers.get("host", "").strip().lower()
        return netloc is not None and netloc == host


def host_name(host: str) -> str:
    """The name part of a ``Host`` header value (no port, no brackets, lower case, no final dot)."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[1:end] if end > 0 else host
    if host.count(":") == 1:
        host = host.partition(":")[0]
    return host.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """Which ``Host`` names this gateway answers (see the module doc)."""

    names: frozenset[str]

    @classmethod
    def from_settings(cls, settings: Settings) -> HostPolicy:
        """``localhost``, the bound address, this machine's name, ``RELAYBUS_PUBLIC_HOSTS``."""
        names = {"localhost", host_name(settings.gateway_host), host_name(socket.gethostname())}
        names.update(host_name(h) for h in settings.public_hosts.split(",") if h.strip())
        names.discard("")
        return cls(frozenset(names))

    def allows(self, host: str | None) -> bool:
        """True for a name this gateway is served under (or no ``Host``: not a browser)."""
        if host is None:
            return True
        name = host_name(host)
        return name in self.names or name.endswith(".localhost") or _is_ip(name)


class HostCheck:
    """Pure ASGI middleware: HTTP requests whose ``Host`` is not one of :class:`HostPolicy`'s
    names get 403 before any route sees them (``/ws`` upgrades are checked the same way by
    :mod:`relaybus.gateway.web.wsserver`)."""

    def __init__(
        self, app: ASGIApp, *, policy: HostPolicy, refused: Callable[[], None] | None = None
    ) -> None:
        self.app = app
        self.policy = policy
        self.refused = refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        hosts = [v for k, v in scope.get("headers", []) if k == b"host"]
        host = hosts[0].decode("latin-1") if len(hosts) == 1 else None
        if len(hosts) <= 1 and self.policy.allows(host):
            await self.app(scope, receive, send)
            return
        if self.refused is not None:
            self.refused()
        log.debug("request refused: Host %r is not a name of this gateway", (host or "")[:256])
        body = b"this gateway is not served under that host name\n"
        await send(
            {
                "type": "http.response.start",
                "status": 403,
                "headers": [
                    (b"content-type", b"text/plain"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
