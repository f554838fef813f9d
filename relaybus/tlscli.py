"""``relaybus tls root``, ``relaybus tls make`` and ``relaybus url``: the certificates of
``relaybus up`` and the phone URL of the one running. They need no settings and no Redis
(each parses its own arguments, like relaybus.hookcli)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

SUBCOMMANDS = {
    "tls": "tls root: print the path of relaybus up's root certificate (made if missing); "
    "tls make --dir D --name N…: a root and a server certificate for compose's nginx",
    "url": "print the phone URL of the running relaybus up and its QR code (--root: the "
    "page that installs the root certificate)",
}


def _tls(argv: Sequence[str]) -> int:
    from relaybus import tls, upstate
    from relaybus.lan import lan_address

    parser = argparse.ArgumentParser(prog="relaybus tls", description=SUBCOMMANDS["tls"])
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("root", help="print the root certificate's path (relaybus up's state dir)")
    make = sub.add_parser("make", help="make a root (once) and a server certificate in DIR")
    make.add_argument("--dir", required=True, type=Path, help="where root.* and server.* go")
    make.add_argument(
        "--name",
        action="append",
        required=True,
        help="a DNS name or IP address phones open (repeat); localhost and 127.0.0.1 are added",
    )
    args = parser.parse_args(argv)
    try:
        if args.action == "root":
            names = tls.phone_names(lan_address())
            root = tls.ensure_root(tls.tls_dir(upstate.state_dir()), names)
            print(root.cert)
            return 0
        names = [*args.name, "localhost", "127.0.0.1"]
        root = tls.ensure_root(args.dir, names)
        domains, networks = tls.root_constraints(tls.load_cert(root.cert))
        left = [n for n in args.name if not tls.permitted(n, domains, networks)]
        if left:
            print(
                f"relaybus tls: the root in {args.dir} was made for other names and cannot "
                f"vouch for {', '.join(left)}; remove {root.cert.name} and {root.key.name} "
                "to make a new one",
                file=sys.stderr,
            )
            return 1
        root, server = tls.ensure_server(args.dir, names)
    except (tls.TlsError, OSError) as exc:
        print(f"relaybus tls: {exc}", file=sys.stderr)
        return 1
    print(f"root:   {root.cert} (install on phones; key {root.key}, keep it private)")
    print(f"server: {server.cert} {server.key}")
    return 0


def _url(argv: Sequence[str]) -> int:
    from relaybus import qr, upstate

    parser = argparse.ArgumentParser(prog="relaybus url", description=SUBCOMMANDS["url"])
    parser.add_argument("--root", action="store_true", help="the root certificate's page")
    parser.add_argument("--no-qr", action="store_true", help="the URL only")
    args = parser.parse_args(argv)
    state = upstate.read()
    if state is None or not upstate.alive(state):
        where = upstate.path()
        print(f"relaybus url: no relaybus up is running (no live {where})", file=sys.stderr)
        return 1
    url = state.root_url if args.root else state.url
    if not url:
        print("relaybus url: this relaybus up serves no root page", file=sys.stderr)
        return 1
    print(url)
    if not args.no_qr:
        print(qr.terminal(url))
    return 0


def main(argv: Sequence[str]) -> int:
    """``argv[0]`` is one of :data:`SUBCOMMANDS`."""
    return _tls(argv[1:]) if argv[0] == "tls" else _url(argv[1:])
