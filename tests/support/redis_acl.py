"""deploy/redis-acl.conf applied to a test server, and the per-role URLs to use it."""

from __future__ import annotations

import secrets
import shlex
from pathlib import Path

import redis

from tests.support.servers import RedisServer

ACL_FILE = Path(__file__).resolve().parents[2] / "deploy" / "redis-acl.conf"
ROLES = ("admin", "collector", "gateway")
#: Set to 1 to run tests/gateway with the gateway and the publisher logged in as their
#: ACL users (tests/deploy/test_redis_acl.py does, for the protocol test files).
ACL_ENV = "RELAYBUS_TEST_REDIS_ACL"


def load_acl(srv: RedisServer, namespace: str) -> dict[str, str]:
    """Apply deploy/redis-acl.conf to ``srv`` as its aclfile would (fresh passwords,
    ``namespace`` — a glob such as ``t*`` covers every test namespace); the default user
    stays on so fixtures can still manage the server. Returns role -> URL."""
    passwords = {role: secrets.token_hex(16) for role in ROLES}
    admin = srv.client()
    try:
        set_acl_users(admin, namespace, passwords)
    finally:
        admin.close()
    return {
        role: f"redis://relaybus-{role}:{pw}@127.0.0.1:{srv.port}/0"
        for role, pw in passwords.items()
    }


def set_acl_users(admin: redis.Redis, namespace: str, passwords: dict[str, str]) -> None:
    """The users of deploy/redis-acl.conf on the server of ``admin`` (role -> password)."""
    text = ACL_FILE.read_text().replace("{relaybus}", f"{{{namespace}}}")
    for role, password in passwords.items():
        text = text.replace(f"CHANGE-ME-{role}", password)
    for line in text.splitlines():
        words = shlex.split(line)
        assert words[0] == "user", line
        if words[1] == "default":
            continue
        admin.acl_setuser(words[1], reset=True)
        admin.execute_command("ACL", "SETUSER", *words[1:])  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
