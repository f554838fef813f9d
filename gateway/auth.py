"""Tokens: ``secret`` grants full access, ``secret:read`` read-only access; any other
``:scope`` is a configuration error (a secret holds no ``:``).

Anonymous access (``RELAYBUS_ALLOW_ANONYMOUS``) is full access only when no token is
configured; next to tokens it is read-only, so it never grants more than a token would.

A token arrives as ``Authorization: Bearer <t>``, as ``?token=<t>`` (compatibility only: a
URL is logged by proxies; browsers send it in ``hello`` since they cannot set
headers on a WebSocket), or in ``hello.token``. The gateway refuses to start without a
token unless anonymous access is explicitly enabled.
"""

from __future__ import annotations

import enum
import hmac
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from relaybus.shared.settings import Settings


class AuthConfigError(Exception):
    """The token configuration cannot be served (no tokens and no anonymous access)."""


class Access(enum.Enum):
    READ = "read"
    FULL = "full"


@dataclass(frozen=True, slots=True)
class TokenTable:
    tokens: tuple[tuple[bytes, Access], ...]
    allow_anonymous: bool

    @classmethod
    def from_settings(cls, settings: Settings) -> TokenTable:
        entries: list[tuple[bytes, Access]] = []
        for raw in settings.tokens.get_secret_value().split(","):
            item = raw.strip()
            if not item:
                continue
            secret, sep, scope = item.rpartition(":")
            if not sep:
                secret, access = item, Access.FULL
            elif scope == "read":
                access = Access.READ
            else:  # never echo the entry: it holds a secret
                raise AuthConfigError(
                    f"RELAYBUS_TOKENS has an entry with unknown scope {scope[:16]!r}: "
                    "write 'secret' for full access or 'secret:read' for read-only"
                )
            if not secret:
                raise AuthConfigError("RELAYBUS_TOKENS has an entry with an empty secret")
            entries.append((secret.encode(), access))
        if not entries and not settings.allow_anonymous:
            raise AuthConfigError(
                "no RELAYBUS_TOKENS configured: set RELAYBUS_TOKENS=<secret>[,<secret>:read] "
                "or RELAYBUS_ALLOW_ANONYMOUS=true to serve without authentication"
            )
        return cls(tuple(entries), settings.allow_anonymous)

    def check(self, token: str | None) -> Access | None:
        """The access a token grants; ``None`` means refuse.

        No token at all is anonymous when allowed (full access without configured tokens,
        read-only next to them); a wrong token is always refused, even with anonymous
        access on.
        """
        if token is None:
            if not self.allow_anonymous:
                return None
            return Access.READ if self.tokens else Access.FULL
        given = token.encode()
        found: Access | None = None
        for secret, access in self.tokens:
            # Compare with every entry (constant time per entry), no early exit.
            if hmac.compare_digest(secret, given) and found is None:
                found = access
        return found


def token_from_request(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The token offered at connect time: Bearer header first, then ``?token=``."""
    auth = headers.get("authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    token = query.get("token")
    return token if token else None


def loopback_only(host: str) -> bool:
    """True when a listen address accepts connections from this machine only."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def check_anonymous_bind(settings: Settings) -> None:
    """Anonymous access without tokens is full control: refuse it unless only this machine
    can connect (``RELAYBUS_GATEWAY_HOST`` a loopback address)."""
    if (
        settings.allow_anonymous
        and not settings.tokens.get_secret_value().replace(",", "").strip()
        and not loopback_only(settings.gateway_host)
    ):
        raise AuthConfigError(
            "RELAYBUS_ALLOW_ANONYMOUS without RELAYBUS_TOKENS gives anyone who reaches "
            f"{settings.gateway_host} full control: set RELAYBUS_TOKENS, or "
            "RELAYBUS_GATEWAY_HOST=127.0.0.1 to serve this machine only"
        )
