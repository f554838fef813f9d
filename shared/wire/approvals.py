"""What collectors and gateways agree on for remote approvals: keys and records.

Key names are :class:`relaybus.shared.store.keys.Keys`; what they hold:

* ``{ns}:session:<sid>:watchers`` — hash gatewayId -> ``"<count>:<expiresAtMs>"``: clients
  with a full-access token watching the session through that gateway. A gateway rewrites
  its field when its count changes and refreshes it well before it expires, so the field
  of a dead gateway stops counting once its stamp passes (and the key expires with it).
* ``{ns}:session:<sid>:approvals`` — hash requestKey -> JSON ``{host, name, expiresAt}``:
  the requests a collector holds for the session (clients may omit the key when there
  is exactly one).
* ``{ns}:approval:<requestKey>`` — the decision, claimed once with ``SET NX``: JSON
  ``{decision, message?}``. Whoever sets it first decides (a client's allow/deny, or the
  collector's timeout/cancel); everyone later is told ``already_resolved``.
* ``{ns}:session:<sid>:approval_resolved`` — JSON ``{requestKey, decision, resolvedAt}`` of
  the session's last request to end, set by the collector as it drops the request from
  ``approvals``, expiring after the approval timeout: a decision without a ``requestKey``
  that finds nothing pending is ``already_resolved`` while it exists (the client was late),
  ``no_pending_request`` otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

#: Command type (gateway -> ``{ns}:cmd:<host>``) delivering a decision to the holding collector.
PERMISSION_DECISION = "permission_decision"

# Decisions: how a held request ended (``permission_resolved.decision``, an open union).
ALLOW = "allow"
DENY = "deny"
#: Nobody answered within the approval timeout (a decision, not ``ErrorCode.TIMEOUT``).
TIMED_OUT = "timeout"
CANCELLED = "cancelled"
#: The terminal answered first (the tool's result is in the transcript, or Claude Code's own
#: dialog closed): the request is over, relaybus decided nothing.
ANSWERED_ELSEWHERE = "answered_elsewhere"
CLIENT_DECISIONS = frozenset({ALLOW, DENY})

#: Watcher fields count for this long by default (``RELAYBUS_WATCHERS_TTL_S``) and are
#: refreshed every third of it.
WATCHERS_TTL_S = 15
#: A decision is remembered this long after the request expired (late answers: already_resolved).
DECISION_GRACE_S = 600


def resolved_record(request_key: str, decision: str, resolved_ms: int) -> bytes:
    return orjson.dumps(
        {"requestKey": request_key, "decision": decision, "resolvedAt": resolved_ms}
    )


def parse_resolved(raw: bytes | str | None) -> tuple[str, str] | None:
    """(requestKey, decision) of a :func:`resolved_record`, ``None`` if absent or malformed."""
    if raw is None:
        return None
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict):
        return None
    key, decision = body.get("requestKey"), body.get("decision")
    return (key, decision) if isinstance(key, str) and isinstance(decision, str) else None


def watcher_value(count: int, expires_ms: int) -> str:
    return f"{count}:{expires_ms}"


def live_watchers(fields: Mapping[Any, Any], now_ms: int) -> int:
    """Clients counted by gateways whose stamp has not passed."""
    total = 0
    for raw in fields.values():
        text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else str(raw)
        count, _, expires = text.partition(":")
        if count.isdigit() and expires.isdigit() and int(expires) > now_ms:
            total += int(count)
    return total


def decision_record(decision: str, message: str | None = None) -> bytes:
    body: dict[str, Any] = {"decision": decision}
    if message:
        body["message"] = message
    return orjson.dumps(body)


def parse_decision(raw: bytes | str | None) -> tuple[str, str | None] | None:
    if raw is None:
        return None
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("decision"), str):
        return None
    message = body.get("message")
    return body["decision"], message if isinstance(message, str) else None
