"""Redis key layout. Every key is ``{<ns>}:…`` so one namespace is one cluster slot."""

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
