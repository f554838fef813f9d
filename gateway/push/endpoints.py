"""Where the gateway may send a Web Push (issue 22, items 1 and 2): a subscription's endpoint is
chosen by whoever holds a token, so it is checked like any hostile address.

* By URL, at ``PUT /push/subscription`` and again before every send: ``https://`` on the
  default port to a browser's push service (:data:`PUSH_SERVICES`), or any scheme and port to
  a host of ``RELAYBUS_PUSH_ENDPOINT_ALLOW`` (``host`` or ``host:port``; a local stand-in).
* By address, when connecting: :class:`PublicOnlyResolver` drops every private, loopback,
  link-local, multicast or reserved address a name resolves to (hosts of the allow setting
  excepted), so a name that rebinds to ``127.0.0.1`` after the check reaches nothing.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

ENDPOINT_MAX = 2048
#: The browsers' push services: Chrome, Edge, Opera, Samsung (FCM; ``android`` for subscriptions
#: made before FCM; current Chromium subscribes with ``jmt17.google.com/fcm/send/…``), Firefox
#: (autopush), Safari (APNs web push), Edge/Windows (WNS).
PUSH_SERVICES = (
    "fcm.googleapis.com",
    "jmt17.google.com",
    "android.googleapis.com",
    "updates.push.services.mozilla.com",
)
PUSH_SERVICE_SUFFIXES = (".push.apple.com", ".notify.windows.com")


class RefusedAddress(OSError):
    """A push endpoint's name resolved only to addresses the gateway does not send to."""


def _host_port(entry: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port`` → (lower-case host, port)."""
    parts = urlsplit(f"//{entry.strip()}")
    port = parts.port  # ValueError for a bad port
    if not parts.hostname:
        raise ValueError(f"{entry!r} names no host")
    return parts.hostname.lower().rstrip("."), port


def parse_allow(raw: str) -> frozenset[tuple[str, int | None]]:
    """``RELAYBUS_PUSH_ENDPOINT_ALLOW`` → {(host, port or None for any port)}."""
    return frozenset(_host_port(e) for e in raw.split(",") if e.strip())


def _public(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    return addr.is_global and not addr.is_multicast


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class EndpointPolicy:
    allow: frozenset[tuple[str, int | None]] = frozenset()

    @classmethod
    def from_setting(cls, raw: str) -> EndpointPolicy:
        return cls(parse_allow(raw))

    def allowed_host(self, host: str, port: int | None = None) -> bool:
        """Whether the allow setting lists ``host`` (for ``port``, or for any port)."""
        host = host.lower().rstrip(".")
        return (host, None) in self.allow or (port is not None and (host, port) in self.allow)

    def refusal(self, endpoint: object) -> str | None:
        """Why a push may not go to ``endpoint`` (a sentence for the client), or None."""
        if not isinstance(endpoint, str) or len(endpoint) > ENDPOINT_MAX:
            return f"the endpoint must be a URL of at most {ENDPOINT_MAX} characters"
        try:
            parts = urlsplit(endpoint)
            port = parts.port
        except ValueError:
            return "the endpoint is not a valid URL"
        host = (parts.hostname or "").rstrip(".")
        if parts.scheme not in ("https", "http") or not host or parts.username is not None:
            return "the endpoint must be an https:// URL without user info"
        scheme_port = 443 if parts.scheme == "https" else 80
        if self.allowed_host(host, port if port is not None else scheme_port):
            return None
        if parts.scheme != "https" or port not in (None, 443):
            return "the endpoint must be https:// on the default port"
        if _is_ip(host) or not (host in PUSH_SERVICES or host.endswith(PUSH_SERVICE_SUFFIXES)):
            return (
                f"{host} is not a browser push service (FCM, Mozilla, Apple, Windows); "
                "RELAYBUS_PUSH_ENDPOINT_ALLOW lists others"
            )
        return None


class PublicOnlyResolver(AbstractResolver):
    """The system resolver, keeping only public addresses (any for the allow setting's hosts).

    aiohttp connects to exactly what this returns, so the check holds at connect time;
    IP literals never reach a resolver, which is why :meth:`EndpointPolicy.refusal` admits
    them only from the allow setting.
    """

    def __init__(self, policy: EndpointPolicy) -> None:
        self._policy = policy
        self._inner = DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        if self._policy.allowed_host(host, port):
            return found
        public = [r for r in found if _public(r["host"])]
        if not public:
            raise RefusedAddress(f"{host} resolves to no public address")
        return public

    async def close(self) -> None:
        await self._inner.close()
