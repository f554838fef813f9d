"""What the gateway tells browsers, and which pages' scripts it lets open ``/ws``.

* Every HTTP response carries a Content-Security-Policy (scripts, styles and
  connections from this origin only; no framing), ``X-Content-Type-Options: nosniff``
  and ``Referrer-Policy: no-referrer`` (a token in a URL never leaves in a Referer).
* A browser opening ``/ws`` sends ``Origin``; it must be the gateway's own origin (its
  ``Host``) or one listed in ``RELAYBUS_ALLOWED_ORIGINS``. Otherwise any web page the
  user visits could open a connection with the user's network position (and, with
  anonymous access on, start conversations). Non-browser clients send no ``Origin`` and
  authenticate with a token.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

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
