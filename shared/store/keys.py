"""Redis key layout, every key name in one place. Every key is ``{<ns>}:…`` so one namespace
is one cluster slot. The lengths and lifetimes of the command keys are here too."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Keys:
    """Key names for one namespace; the gateway and outside tools rely on these exactly."""

    ns: str

    @property
    def prefix(self) -> str:
        return f"{{{self.ns}}}:"

    @property
    def seq(self) -> str:
        return f"{self.prefix}seq"

    @property
    def log(self) -> str:
        return f"{self.prefix}log"

    @property
    def sessions(self) -> str:
        return f"{self.prefix}sessions"

    @property
    def epoch(self) -> str:
        return f"{self.prefix}epoch"

    @property
    def rewinds(self) -> str:
        """Hash of the log's rewinds (failovers that lost entries): ``gen`` → the last
        generation, ``<gen>`` → the first seq that rewind changed."""
        return f"{self.prefix}rewinds"

    def session(self, sid: str) -> str:
        return f"{self.prefix}session:{sid}"

    def session_events(self, sid: str) -> str:
        return f"{self.prefix}session:{sid}:events"

    def session_watchers(self, sid: str) -> str:
        return f"{self.prefix}session:{sid}:watchers"

    def offsets(self, host: str) -> str:
        return f"{self.prefix}offsets:{host}"

    def host(self, host: str) -> str:
        return f"{self.prefix}host:{host}"

    @property
    def hosts(self) -> str:
        """Sorted set host → heartbeat expiry (ms): live machines without a SCAN."""
        return f"{self.prefix}hosts"

    def cmd(self, host: str) -> str:
        return f"{self.prefix}cmd:{host}"

    def reply(self, gateway_id: str) -> str:
        return f"{self.prefix}reply:{gateway_id}"

    def command_done(self, command_id: str) -> str:
        """Idempotency record of one command: ``running`` then its reply body."""
        return f"{self.prefix}cmddone:{command_id}"

    def reservation(self, sid: str) -> str:
        """A new conversation reserved on a host before its transcript exists: hash host, cwd."""
        return f"{self.prefix}newconv:{sid}"

    def approvals(self, sid: str) -> str:
        """Hash requestKey -> JSON ``{host, name, expiresAt}``: the session's held requests."""
        return f"{self.prefix}session:{sid}:approvals"

    def approval(self, request_key: str) -> str:
        """One request's decision, claimed once with ``SET NX``."""
        return f"{self.prefix}approval:{request_key}"

    def approval_resolved(self, sid: str) -> str:
        """The session's last request to end: ``{requestKey, decision, resolvedAt}``."""
        return f"{self.prefix}session:{sid}:approval_resolved"

    @property
    def push_vapid(self) -> str:
        """The fleet's Web Push (VAPID) key pair, JSON ``{private, public}``."""
        return f"{self.prefix}push:vapid"

    @property
    def push_subs(self) -> str:
        """Hash subscription id -> JSON push subscription (with the device's preferences)."""
        return f"{self.prefix}push:subs"

    @property
    def push_turns(self) -> str:
        """Hash sid -> ms the session's turn started working (for the "Done" push)."""
        return f"{self.prefix}push:turns"

    def push_cap(self, digest: str) -> str:
        """A single-use capability (by its sha256) to decide one permission request."""
        return f"{self.prefix}push:cap:{digest}"

    def push_done(self, event: str, target: str) -> str:
        """Claim of one push (event, target), ``SET NX`` before sending."""
        return f"{self.prefix}push:done:{event}:{target}"

    @property
    def tokens(self) -> str:
        """Hash token id -> JSON ``{name, hash, scope, created}``: members' tokens (hashes only)."""
        return f"{self.prefix}tokens"

    def token_seen(self, token_id: str) -> str:
        """Hash device label -> ms a connection last authenticated with that token from it."""
        return f"{self.prefix}token_seen:{token_id}"

    @property
    def revocations(self) -> str:
        """Stream of revoked token ids (field ``id``) that every gateway reads."""
        return f"{self.prefix}revocations"

    @property
    def owners(self) -> str:
        """Hash host -> member name: collectors started with ``RELAYBUS_OWNER``."""
        return f"{self.prefix}owners"

    @property
    def audit(self) -> str:
        """Stream of actions (who drove what), trimmed by ``RELAYBUS_AUDIT_RETENTION_DAYS``."""
        return f"{self.prefix}audit"


#: The consumer group every collector reads its ``cmd:<host>`` stream with.
GROUP = "collectors"
CMD_MAXLEN = 10_000
REPLY_MAXLEN = 10_000
REPLY_TTL_S = 3600
#: How long a command id is remembered as executed (:meth:`Keys.command_done`).
DONE_TTL_S = 7 * 86400
#: How long a reserved new conversation waits for its first prompt (:meth:`Keys.reservation`).
RESERVATION_TTL_S = 86400
#: Revocations kept in the stream (gateways read it live; the hash is the truth).
REVOCATIONS_MAXLEN = 1000
