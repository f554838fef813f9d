"""The ``relaybus`` console script.

Every option is generated from :class:`relaybus.shared.settings.Settings`, so ``--help`` always
documents every variable: ``--redis-url`` is ``RELAYBUS_REDIS_URL``. A flag given on the
command line wins over the environment and ``.env``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from relaybus import hookcli, tlscli
from relaybus.helpgroups import fields_of, group_of, group_rank
from relaybus.shared import __version__

if TYPE_CHECKING:
    from relaybus.shared.settings import Settings

# relaybus.shared.settings (pydantic) is imported inside the functions that need it: the hook
# subcommands (relaybus.hookcli), which Claude Code runs on every permission prompt, start
# without it.

SHARED_FIELDS = fields_of("Redis", "this process")
COLLECTOR_FIELDS = fields_of("collector:")
GATEWAY_FIELDS = fields_of("gateway:")
#: ``relaybus up`` only: its own root CA and the page that offers it (relaybus.tls).
UP_TLS_FIELDS = fields_of("up:")
#: Settings read from the environment only, never a flag: name -> why (checked by
#: tests/shared/test_cli.py: every other setting is a flag of some subcommand).
ENV_ONLY: dict[str, str] = {}


@contextlib.contextmanager
def _imports_uninterrupted() -> Iterator[None]:
    """A Ctrl-C while the block imports waits for the imports to end, then raises
    ``KeyboardInterrupt`` (one line, exit 130 in :func:`main`). Raised inside the import of
    a Rust extension (pydantic-core, cryptography) it becomes a panic and a traceback."""
    seen: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: seen.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if seen:
        raise KeyboardInterrupt


def _run_collector(settings: Settings) -> int:
    with _imports_uninterrupted():
        from relaybus.collector.main import run

    return run(settings)


def _run_gateway(settings: Settings) -> int:
    with _imports_uninterrupted():
        from relaybus.gateway.main import run

    return run(settings)


def _run_up(settings: Settings) -> int:
    with _imports_uninterrupted():
        from relaybus.up import run

    return run(settings)


def _run_doctor(settings: Settings) -> int:
    from relaybus.doctor import run

    return run(settings)


def _run_push(settings: Settings, *, rotate: bool = False) -> int:
    from relaybus.gateway.push.keys_cli import run

    return run(settings, rotate=rotate)


STATUS_SUMMARY = (
    "is a `relaybus up` running here and healthy? (exit 0 yes, 1 not running, 3 unhealthy)"
)


def _run_status(argv: Sequence[str]) -> int:
    from relaybus.status import main

    return main(argv)


def _run_token(settings: Settings, args: argparse.Namespace | None = None) -> int:
    from relaybus.members_cli import run_token

    assert args is not None
    return run_token(settings, args)


def _run_audit(settings: Settings, args: argparse.Namespace | None = None) -> int:
    from relaybus.members_cli import run_audit

    assert args is not None
    return run_audit(settings, args)


def _token_arguments(p: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    from relaybus.members_cli import add_token_arguments

    return add_token_arguments(p)


def _audit_arguments(p: argparse.ArgumentParser) -> None:
    from relaybus.members_cli import add_audit_arguments

    add_audit_arguments(p)


# name → (run, its settings, summary). Each run imports its module when called: a command
# loads only its own side (and the hook subcommands none of them).
COMMANDS: dict[str, tuple[Callable[[Settings], int], list[str], str]] = {
    "collector": (
        _run_collector,
        SHARED_FIELDS + COLLECTOR_FIELDS,
        "tail this machine's Claude Code transcripts into the Redis log",
    ),
    "gateway": (
        _run_gateway,
        SHARED_FIELDS + GATEWAY_FIELDS,
        "serve the WebSocket protocol, the web client and /metrics",
    ),
    "up": (
        _run_up,
        SHARED_FIELDS + COLLECTOR_FIELDS + GATEWAY_FIELDS + UP_TLS_FIELDS,
        "collector + gateway in one process (embedded server when no Redis URL is given)",
    ),
    "push": (
        _run_push,
        SHARED_FIELDS,
        "push keys [--rotate]: print the fleet's Web Push (VAPID) public key; --rotate makes a new pair",
    ),
    "token": (
        _run_token,
        [*SHARED_FIELDS, "gateway_host", "gateway_port", "push_public_url"],
        "token add NAME [--read] [--hosts …] [--projects …] | list | revoke NAME|ID: members' tokens",
    ),
    "audit": (
        _run_audit,
        SHARED_FIELDS,
        "audit [--since 2h] [--member NAME] [--json]: who drove what, from the audit trail",
    ),
    "doctor": (
        _run_doctor,
        # up's own flags too: doctor checks a machine for the `relaybus up` of the same flags
        SHARED_FIELDS + COLLECTOR_FIELDS + GATEWAY_FIELDS + UP_TLS_FIELDS,
        "check what a first run needs (Redis, Claude dir, ports, hook, prompts, LAN) and say how to fix it",
    ),
}


def _add_setting_options(
    parser: argparse.ArgumentParser, fields: Sequence[str], *, inner: bool = False
) -> None:
    """One ``--flag`` per setting; ``inner`` (an action's subparser) leaves the value its
    parent parsed unless the flag is given after the action."""
    from relaybus.shared.settings import Settings

    groups: dict[str, argparse._ArgumentGroup] = {}
    for name in sorted(fields, key=group_rank):
        title = group_of(name)
        if title not in groups:
            groups[title] = parser.add_argument_group(title)
        info = Settings.model_fields[name]
        env = f"RELAYBUS_{name.upper()}"
        default = info.get_default(call_default_factory=False)
        shown = "(computed)" if info.default_factory else default
        if name in ("redis_url", "tokens", "redis_sentinel_password"):
            shown = "(required)" if name == "redis_url" else "(secret)"
        groups[title].add_argument(
            f"--{name.replace('_', '-')}",
            dest=name,
            default=argparse.SUPPRESS if inner else None,
            metavar=env,
            help=f"{info.description or ''} [env {env}, default {shown}]".strip(),
        )


def _usage(command: str) -> str:
    """One usage line: the options are listed, grouped, below it."""
    action = " keys [--rotate]" if command == "push" else ""
    return f"%(prog)s{action} [--SETTING VALUE ...]"


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="relaybus",
        description="relaybus: a Redis-backed event bus for Claude Code sessions on many machines.",
    )
    parser.add_argument("--version", action="version", version=f"relaybus {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_module, fields, summary) in COMMANDS.items():
        if only is not None and name != only:
            continue
        p = sub.add_parser(name, help=summary, description=summary, usage=_usage(name))
        if name == "push":
            p.add_argument("action", choices=["keys"], help="what to manage")
            p.add_argument(
                "--rotate",
                action="store_true",
                help="replace the key pair (every device must turn push on again)",
            )
        if name == "token":  # before or after the action: `token add dana --namespace x`
            for action in _token_arguments(p):
                _add_setting_options(action, fields, inner=True)
        if name == "audit":
            _audit_arguments(p)
        _add_setting_options(p, fields)
    if only is None:  # listed for --help; they parse their own arguments (relaybus.hookcli)
        for name, summary in {**hookcli.SUBCOMMANDS, **tlscli.SUBCOMMANDS}.items():
            sub.add_parser(name, help=summary, add_help=False)
        sub.add_parser("status", help=STATUS_SUMMARY, add_help=False)
    return parser


def settings_from_args(args: argparse.Namespace) -> Settings:
    from relaybus.shared.settings import Settings, load_settings

    overrides: dict[str, Any] = {
        k: v for k, v in vars(args).items() if k in Settings.model_fields and v is not None
    }
    return load_settings(**overrides)


def run_command(command: str, argv: Sequence[str]) -> int:
    """Entry for ``python -m relaybus.collector`` / ``python -m relaybus.gateway``: one subcommand's options."""
    try:
        with _imports_uninterrupted():
            parser = build_parser(only=command)
        parser.prog = f"python -m relaybus.{command}"
        return _dispatch(parser, [command, *argv])
    except KeyboardInterrupt:
        return interrupted()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in hookcli.SUBCOMMANDS:
        return hookcli.main(args)
    if args and args[0] in tlscli.SUBCOMMANDS:
        return tlscli.main(args)
    if args and args[0] == "status":
        return _run_status(args[1:])
    try:
        with _imports_uninterrupted():
            parser = build_parser()  # imports the settings (pydantic-core)
        return _dispatch(parser, args)
    except KeyboardInterrupt:
        return interrupted()


def interrupted() -> int:
    """Ctrl-C before a command took over its signals (imports, settings, start-up): one line
    instead of a traceback, and the shell's exit code for SIGINT."""
    print("relaybus: interrupted during start-up", file=sys.stderr, flush=True)
    return 130


def _warn_unknown_names() -> None:
    """One stderr line per unknown ``RELAYBUS_*`` name in the environment or ``.env``."""
    from dotenv import dotenv_values

    from relaybus.envnames import known_names, unknown_warnings
    from relaybus.shared.settings import Settings

    names = set(os.environ)
    if os.path.isfile(".env"):
        names |= set(dotenv_values(".env"))
    for line in unknown_warnings(names, known_names(Settings.model_fields)):
        print(line, file=sys.stderr, flush=True)


def _dispatch(parser: argparse.ArgumentParser, argv: list[str]) -> int:
    from relaybus.logsetup import configure_logging
    from relaybus.shared.settings import SettingsError

    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    _warn_unknown_names()
    try:
        settings = settings_from_args(args)
        if args.command in ("collector", "gateway", "push", "token", "audit"):
            settings.require_redis_url()
    except SettingsError as exc:
        print(f"relaybus: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    if args.command == "push":
        return _run_push(settings, rotate=args.rotate)
    if args.command == "token":
        return _run_token(settings, args)
    if args.command == "audit":
        return _run_audit(settings, args)
    return COMMANDS[args.command][0](settings)


if __name__ == "__main__":
    sys.exit(main())
