"""``relaybus token add|list|revoke`` and ``relaybus audit``: members, their tokens and the
audit trail, straight on Redis (``shared/store/members.py``, ``shared/store/audit.py``).

``token add`` prints the token once with the phone URL and its QR code (``relaybus.qr``);
``--json`` prints one object ``{name, id, token, url}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from datetime import UTC, datetime
from urllib.parse import quote

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from relaybus import qr
from relaybus.shared.settings import Settings
from relaybus.shared.store import audit, members
from relaybus.shared.store.connection import connect
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire.scope import Scope, ScopeError
from relaybus.up import phone_url

_SINCE_RE = re.compile(r"^(\d{1,9})([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def add_token_arguments(p: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The ``add``, ``list`` and ``revoke`` actions (returned: each takes the settings too)."""
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = sub.add_parser("add", help="make a token for a member (printed once)")
    add.add_argument("name", help="the member's name (1-64 of A-Z a-z 0-9 _ . @ -)")
    add.add_argument("--read", action="store_true", help="watch only: no prompts or approvals")
    add.add_argument(
        "--hosts",
        help="comma-separated machines (default: those whose collector has RELAYBUS_OWNER=NAME)",
    )
    add.add_argument("--all-hosts", action="store_true", help="every machine")
    add.add_argument("--projects", help="comma-separated project directories (default: all)")
    add.add_argument("--json", action="store_true", help="one JSON object {name, id, token, url}")
    lst = sub.add_parser("list", help="members' tokens: scope, created, last used, devices")
    lst.add_argument("--json", action="store_true", help="one JSON object a line")
    rev = sub.add_parser("revoke", help="revoke a member's tokens (NAME) or one token (ID)")
    rev.add_argument("target", metavar="NAME|ID")
    return [add, lst, rev]


def add_audit_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--since", help="30m, 2h, 7d, an ISO time or epoch ms (default: 1d)")
    p.add_argument("--member", help="only this member's actions")
    p.add_argument("--json", action="store_true", help="one JSON object a line")


def _csv(text: str | None) -> list[str] | None:
    return None if text is None else [x.strip() for x in text.split(",") if x.strip()]


def _when(ms: int | None) -> str:
    if not ms:
        return "never"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def since_ms(text: str | None, now_s: float) -> int:
    """Epoch ms of ``--since`` (``ValueError`` when it is none of the accepted forms)."""
    if text is None:
        return int((now_s - 86400) * 1000)
    if m := _SINCE_RE.match(text.strip()):
        return int((now_s - int(m[1]) * _UNIT_S[m[2]]) * 1000)
    if text.strip().isdigit():
        return int(text.strip())
    parsed = datetime.fromisoformat(text.strip())
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


async def _token(settings: Settings, args: argparse.Namespace) -> int:
    client = connect(settings)
    keys = Keys(settings.namespace)
    try:
        if args.action == "add":
            return await _add(client, keys, settings, args)
        if args.action == "list":
            for e in await members.list_tokens(client, keys):
                if args.json:
                    row = {
                        "name": e.name,
                        "id": e.id,
                        "scope": e.scope.to_json(),
                        "created": e.created_ms,
                        "lastUsed": e.last_used_ms,
                        "devices": list(e.devices),
                    }
                    print(json.dumps(row))
                else:
                    devices = ",".join(e.devices) or "-"
                    print(
                        f"{e.name}\t{e.id}\t{e.scope.describe()}\tcreated {_when(e.created_ms)}"
                        f"\tlast used {_when(e.last_used_ms)}\tdevices {devices}"
                    )
            return 0
        revoked = await members.revoke(client, keys, args.target)
        if not revoked:
            print(f"relaybus: no member or token {args.target[:64]!r}", file=sys.stderr)
            return 1
        print(f"revoked {len(revoked)} token(s): {', '.join(revoked)}")
        return 0
    finally:
        await client.aclose()


async def _add(
    client: aioredis.Redis, keys: Keys, settings: Settings, args: argparse.Namespace
) -> int:
    name = members.check_name(args.name)
    hosts = None if args.all_hosts else _csv(args.hosts)
    if hosts is None and not args.all_hosts:
        hosts = await members.owned_hosts(client, keys, name)
        if not hosts:
            print(
                f"relaybus: no collector registered with RELAYBUS_OWNER={name}: "
                "pass --hosts h1,h2 or --all-hosts",
                file=sys.stderr,
            )
            return 2
    scope = Scope.build(read_only=args.read, hosts=hosts, projects=_csv(args.projects))
    tid, token = await members.add_token(client, keys, name, scope)
    url = settings.push_public_url or phone_url(settings, None)
    link = f"{url.rstrip('/')}/#token={quote(token, safe='')}"
    if args.json:
        print(json.dumps({"name": name, "id": tid, "token": token, "url": link}))
        return 0
    print(f"token for {name} (id {tid}, {scope.describe()}), shown once:\n{token}")
    print(f"Open on the phone: {link}")
    print(qr.terminal(link))
    return 0


async def _audit(settings: Settings, args: argparse.Namespace) -> int:
    client = connect(settings)
    try:
        rows = await audit.read(
            client,
            Keys(settings.namespace),
            since_ms=since_ms(args.since, time.time()),
            member=args.member,
        )
    finally:
        await client.aclose()
    for row in rows:
        if args.json:
            out: dict[str, object] = dict(row)
            out["ts"] = int(row["ts"]) if row.get("ts", "").isdigit() else row.get("ts")
            print(json.dumps(out))
        else:
            ts = int(row["ts"]) if row.get("ts", "").isdigit() else None
            print(
                "\t".join(
                    [
                        _when(ts),
                        row.get("member", "-"),
                        row.get("action", "-"),
                        row.get("sessionId", "-"),
                        row.get("host", "-"),
                        row.get("device", "-"),
                        row.get("detail", ""),
                    ]
                )
            )
    return 0


def run_token(settings: Settings, args: argparse.Namespace) -> int:
    """``relaybus token …``: exit 2 for a bad name or scope, 1 for Redis or no such member."""
    try:
        return asyncio.run(_token(settings, args))
    except (members.MemberError, ScopeError) as exc:
        print(f"relaybus: {exc}", file=sys.stderr)
        return 2
    except (RedisError, OSError) as exc:
        print(f"relaybus: Redis unavailable: {exc}", file=sys.stderr)
        return 1


def run_audit(settings: Settings, args: argparse.Namespace) -> int:
    """``relaybus audit``: exit 2 for a bad ``--since``, 1 when Redis is unavailable."""
    try:
        since_ms(args.since, time.time())
    except ValueError:
        print(f"relaybus: --since {args.since[:64]!r}: use 30m, 2h, 7d, ISO or ms", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_audit(settings, args))
    except (RedisError, OSError) as exc:
        print(f"relaybus: Redis unavailable: {exc}", file=sys.stderr)
        return 1
