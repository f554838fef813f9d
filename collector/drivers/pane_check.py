"""Whether keys typed into a tmux pane reach the Claude Code process of a session.

A live-process file only *claims* a pid and a pane. Before anything is typed (checked
again right before each prompt or Escape, since pids are reused) all of this must hold:

* the trusted live file of that pid, ``sessions/<pid>.json`` (owned by the collector's
  user, in a directory no one else can write: :mod:`relaybus.collector.procfiles`), names
  this session, and its ``procStart``, when it has one, is the process's start time;
* the process's command line is Claude Code's (:func:`is_cli_command`);
* the pane's own process (``#{pane_pid}``) is that process or one of its ancestors;
* the process's controlling terminal is the pane's (``#{pane_tty}``) and its process group
  is the terminal's foreground group: the keys go to Claude Code, not to a shell it was
  suspended from (Ctrl-Z) or a program it runs in front of it.

Anything else is refused with ``not_controllable`` and the reason; nothing is typed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from relaybus.collector.drivers import DriverError
from relaybus.collector.drivers.live import ancestors
from relaybus.collector.drivers.tmux import Pane, TmuxDriver
from relaybus.collector.procfiles import LiveProcess, read_live, stat_fields
from relaybus.shared.wire.errors import ErrorCode

#: Names the CLI runs under: the native binary (``claude``; the npm package's
#: ``bin/claude.exe``), however it was started (a ``claude`` symlink, a full path).
CLI_NAMES = frozenset({"claude", "claude.exe"})
#: Runtimes of the JavaScript package (``node …/claude`` or ``node …/claude-code/cli.js``).
JS_RUNTIMES = frozenset({"node", "nodejs", "bun"})
MAX_CMDLINE_BYTES = 64 * 1024


def is_cli_command(argv: list[str]) -> bool:
    """Whether a command line is Claude Code's: its program's name is ``claude`` (or
    ``claude.exe``), or it is a JavaScript runtime whose script (the first argument that
    is not an option) is ``claude`` or the package's ``claude-code/cli.js``."""
    if not argv:
        return False
    if os.path.basename(argv[0]) in CLI_NAMES:
        return True
    if os.path.basename(argv[0]) not in JS_RUNTIMES:
        return False
    script = next((a for a in argv[1:] if not a.startswith("-")), "")
    name = os.path.basename(script)
    return name in CLI_NAMES or (name == "cli.js" and "claude-code" in Path(script).parts[-2:-1])


def cmdline(pid: int) -> list[str]:
    """A process's command line (empty when gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(MAX_CMDLINE_BYTES)
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` the check needs."""

    pgrp: int
    tty_nr: int
    tpgid: int
    start: int


def proc_stat(pid: int) -> ProcStat | None:
    fields = stat_fields(pid)  # starttime is the 22nd field of the whole line
    try:
        return (
            ProcStat(int(fields[2]), int(fields[4]), int(fields[5]), int(fields[19]))
            if fields
            else None
        )
    except (IndexError, ValueError):
        return None


def _same_tty(tty_nr: int, tty_path: str) -> bool:
    """Whether ``tty_nr`` (the kernel's encoding in ``/proc/<pid>/stat``) is ``tty_path``."""
    try:
        rdev = os.stat(tty_path).st_rdev
    except OSError:
        return False
    major = (tty_nr >> 8) & 0xFFF
    minor = (tty_nr & 0xFF) | ((tty_nr >> 12) & 0xFFF00)
    return (os.major(rdev), os.minor(rdev)) == (major, minor)


def refusal(live: LiveProcess, sessions_dir: Path, pane_pid: int, pane_tty: str) -> str | None:
    """Why keys typed into the pane (``pane_pid`` on ``pane_tty``) might not reach the
    Claude Code process of ``live.session_id``; ``None`` when they do."""
    pid = live.pid
    current = read_live(sessions_dir, pid)
    if current is None or current.session_id != live.session_id:
        return f"no live-process file {pid}.json of this user names this session"
    st = proc_stat(pid)
    if st is None:
        return f"process {pid} is gone"
    if current.proc_start is not None and current.proc_start != st.start:
        return f"process {pid} is not the one its live-process file was written by"
    argv = cmdline(pid)
    if not is_cli_command(argv):
        shown = os.path.basename(argv[0]) if argv else "?"
        return f"process {pid} is {shown!r}, not Claude Code"
    if pane_pid not in ancestors(pid):
        return f"Claude Code (pid {pid}) does not run in that pane"
    if not _same_tty(st.tty_nr, pane_tty):
        return f"Claude Code (pid {pid}) is not on the pane's terminal"
    if st.tpgid <= 0 or st.tpgid != st.pgrp:
        return f"Claude Code (pid {pid}) is not in the foreground of its pane (suspended?)"
    return None


async def verify(tmux: TmuxDriver, pane: Pane, live: LiveProcess, sessions_dir: Path) -> None:
    """Raise ``not_controllable`` unless keys typed into ``pane`` reach ``live``'s Claude Code
    (see the module); call it right before typing."""
    proc = await tmux.pane_process(pane)
    why = "the pane is gone" if proc is None else refusal(live, sessions_dir, *proc)
    if why is not None:
        raise DriverError(
            ErrorCode.NOT_CONTROLLABLE,
            f"relaybus types only into Claude Code's own pane: {why}; nothing was typed",
        )
