"""What one token may see and drive: a :class:`Scope` of machines and project directories.

Pure (no Redis): the gateway applies :meth:`Scope.allows` to every session it would deliver,
the CLI builds scopes from flags, and the token store keeps them as JSON. ``None`` for
``hosts`` or ``projects`` means "every one"; an empty set means "none".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from relaybus.shared.wire.ids import valid_host_id

#: Hostile or careless input is bounded: at most this many hosts and projects per scope.
MAX_ENTRIES = 64
#: Longest project directory kept (bytes of UTF-8), like ``shared.wire.cwd``.
MAX_PROJECT_BYTES = 4096
#: A member name: what the CLI, the audit trail and the web card show.
NAME_RE = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")


class ScopeError(ValueError):
    """A scope that cannot be stored or applied (too many entries, a bad host or path)."""


def _project(path: str) -> str:
    text = path.strip()
    if not text.startswith("/") or len(text.encode()) > MAX_PROJECT_BYTES:
        raise ScopeError(f"project {text[:64]!r} is not an absolute directory")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        raise ScopeError("a project directory holds a control character")
    return text.rstrip("/") or "/"


def _host(host: str) -> str:
    if not valid_host_id(host):
        raise ScopeError(f"host {host[:64]!r} is not a machine id")
    return host


@dataclass(frozen=True, slots=True)
class Scope:
    """A token's reach: read-only or not, which machines (``hosts``) and which project
    directories (``projects``, each with everything under it)."""

    read_only: bool = False
    hosts: frozenset[str] | None = None
    projects: tuple[str, ...] | None = None

    @classmethod
    def build(
        cls,
        *,
        read_only: bool = False,
        hosts: Iterable[str] | None = None,
        projects: Iterable[str] | None = None,
    ) -> Scope:
        """A checked scope (:class:`ScopeError` for too many or malformed entries)."""
        host_set = None if hosts is None else frozenset(_host(h) for h in hosts)
        project_list = None if projects is None else tuple(sorted({_project(p) for p in projects}))
        for entries in (host_set, project_list):
            if entries is not None and len(entries) > MAX_ENTRIES:
                raise ScopeError(f"a scope holds at most {MAX_ENTRIES} hosts and projects")
        return cls(read_only, host_set, project_list)

    @property
    def unrestricted(self) -> bool:
        """Every machine and every directory (what a ``RELAYBUS_TOKENS`` token has)."""
        return self.hosts is None and self.projects is None

    def allows(self, host: str | None, cwd: str | None) -> bool:
        """True when a session on ``host`` running in ``cwd`` is inside this scope; a
        restricted scope never admits a session whose host or directory is unknown."""
        if self.hosts is not None and (host is None or host not in self.hosts):
            return False
        if self.projects is None:
            return True
        if not cwd:
            return False
        return any(cwd == p or cwd.startswith(p + "/") or p == "/" for p in self.projects)

    def to_json(self) -> dict[str, Any]:
        return {
            "readOnly": self.read_only,
            "hosts": None if self.hosts is None else sorted(self.hosts),
            "projects": None if self.projects is None else list(self.projects),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Scope:
        """The scope a store entry holds; :class:`ScopeError` when it is malformed."""
        hosts, projects = data.get("hosts"), data.get("projects")
        for entries in (hosts, projects):
            if entries is not None and not (
                isinstance(entries, list) and all(isinstance(e, str) for e in entries)
            ):
                raise ScopeError("hosts and projects are lists of strings")
        return cls.build(read_only=data.get("readOnly") is True, hosts=hosts, projects=projects)

    def describe(self) -> str:
        """One line for ``relaybus token list``."""
        mode = "read" if self.read_only else "full"
        hosts = "all machines" if self.hosts is None else ",".join(sorted(self.hosts)) or "none"
        if self.projects is None:
            return f"{mode} · {hosts}"
        return f"{mode} · {hosts} · {','.join(self.projects)}"


#: What a ``RELAYBUS_TOKENS`` token and anonymous access reach.
EVERYTHING = Scope()


@dataclass(frozen=True, slots=True)
class Member:
    """Who a connection acts for: a member ``name``, the ``token_id`` it came with (empty for a
    ``RELAYBUS_TOKENS`` bootstrap token) and its :class:`Scope`."""

    name: str
    token_id: str
    scope: Scope
