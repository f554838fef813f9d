"""tmux driver: type into the pane where an interactive ``claude`` runs.

The pane is the one the live-process file names (``tmux``, e.g. ``"main:@0.%0"``; Claude
Code 2.1.332 writes it), checked with ``display-message``; else it is found from the
process tree: the process's ``TMUX`` variable names the server socket, ``list-panes -a``
gives every pane's shell pid, and the pane whose pid is an ancestor of the Claude process
is the one. Prompts are typed with
``send-keys -l <text>`` then ``Enter`` (multi-line text is pasted); an interrupt is ``Escape``.
Prompt text never carries control characters (see :func:`terminal_text`).
The permission mode is switched with the CLI's own Shift+Tab (``BTab``), one press at a
time, reading the mode back from the footer the CLI draws (:meth:`TmuxDriver.switch_mode`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from dataclasses import dataclass

from relaybus.collector.drivers import DriverError
from relaybus.collector.drivers.live import ancestors, environ
from relaybus.shared.wire.errors import ErrorCode

log = logging.getLogger(__name__)

TMUX_TIMEOUT_S = 5.0


#: Bracketed-paste markers: inside a paste, the end marker would end it early.
PASTE_MARKERS = ("\x1b[200~", "\x1b[201~")
#: C0 controls but ``\n`` and ``\t`` (``\r`` submits, ``\x03`` interrupts, ESC starts
#: sequences), DEL, and the C1 controls some terminals read as 8-bit escapes.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_text(message: str) -> str:
    """``message`` safe to type into a terminal, or :class:`DriverError` ``invalid_message``.

    CRLF becomes LF and paste markers are removed; any other control character refuses
    the whole prompt (a ``\r`` would submit a second prompt, ``\x1b`` or ``\x03`` act as keys).
    """
    text = message.replace("\r\n", "\n")
    for marker in PASTE_MARKERS:
        text = text.replace(marker, "")
    bad = _CONTROLS.search(text)
    if bad is not None:
        raise DriverError(
            ErrorCode.INVALID_MESSAGE,
            f"the prompt contains a control character (U+{ord(bad.group()):04X})",
        )
    return text


#: The footer Claude Code 2.1.332 draws under its input for each permission mode. Shift+Tab
#: cycles default → acceptEdits → plan → auto → default; bypassPermissions only joins when
#: the CLI was started allowing it, dontAsk never (docs/claude-code-notes.md). The last two
#: footers were never seen (a guess): a footer not listed reads as none, so a press landing
#: there ends the switch with ``mode_unavailable``, never a wrong answer.
MODE_FOOTERS = {
    "default": "manual mode on",
    "acceptEdits": "accept edits on",
    "plan": "plan mode on",
    "auto": "auto mode on",
    "bypassPermissions": "bypass permissions on",
    "dontAsk": "don't ask mode on",
}
#: Bottom lines of the pane searched for the footer (a transcript above may quote one).
FOOTER_LINES = 4
#: Shift+Tab presses at most for one switch: a whole cycle and then some.
MAX_MODE_PRESSES = 6
#: How long one press may take to show its mode, and how often the pane is read meanwhile.
MODE_PRESS_WAIT_S = 2.0
MODE_POLL_S = 0.05


def mode_on_screen(screen: str) -> str | None:
    """The permission mode the CLI's footer shows in ``screen`` (``capture-pane``), or None."""
    lines = [ln for ln in screen.splitlines() if ln.strip()][-FOOTER_LINES:]
    for line in reversed(lines):
        for mode, footer in MODE_FOOTERS.items():
            if footer in line:
                return mode
    return None


@dataclass(frozen=True, slots=True)
class Pane:
    socket: str
    pane_id: str


class TmuxError(Exception):
    """A tmux command failed or timed out."""


class TmuxDriver:
    def __init__(self, tmux_bin: str = "tmux") -> None:
        self._bin = tmux_bin

    async def _tmux(self, socket: str | None, *args: str, stdin: bytes | None = None) -> str:
        argv = [self._bin, *(["-S", socket] if socket else []), *args]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            raise TmuxError(f"cannot run {self._bin}: {exc}") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin), TMUX_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise TmuxError(f"tmux {args[0]} timed out") from None
        if proc.returncode != 0:
            raise TmuxError(f"tmux {args[0]}: {err.decode(errors='replace').strip()}")
        return out.decode(errors="replace")

    async def pane_process(self, pane: Pane) -> tuple[int, str] | None:
        """The pid and terminal of the process tmux started in ``pane`` (``None``: no pane)."""
        try:
            out = await self._tmux(
                pane.socket, "display-message", "-p", "-t", pane.pane_id, "#{pane_pid} #{pane_tty}"
            )
        except TmuxError:
            return None
        pid, _, tty = out.strip().partition(" ")
        return (int(pid), tty) if pid.isdigit() and tty else None

    async def named_pane(self, pid: int, name: str) -> Pane | None:
        """The pane a live-process file names (``session:@window.%pane``), if it exists."""
        target = name.rsplit(".", 1)[-1] if "%" in name else name
        socket = environ(pid).get("TMUX", "").split(",", 1)[0] or None
        try:
            out = await self._tmux(
                socket, "display-message", "-p", "-t", target, "#{pane_id} #{socket_path}"
            )
        except TmuxError as exc:
            log.debug("pane %r of pid %d not found: %s", name, pid, exc)
            return None
        pane_id, _, socket_path = out.strip().partition(" ")
        return Pane(socket_path or socket or "", pane_id) if pane_id.startswith("%") else None

    async def find_pane(self, pid: int, name: str | None = None) -> Pane | None:
        """The tmux pane running ``pid`` (``name``: what its live file says), or ``None``."""
        if name:
            pane = await self.named_pane(pid, name)
            if pane is not None:
                return pane
        tmux_var = environ(pid).get("TMUX", "")
        socket = tmux_var.split(",", 1)[0] or None
        try:
            listing = await self._tmux(
                socket, "list-panes", "-a", "-F", "#{pane_pid} #{pane_id} #{socket_path}"
            )
        except TmuxError as exc:
            log.debug("no tmux pane for pid %d: %s", pid, exc)
            return None
        panes: dict[int, Pane] = {}
        for line in listing.splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3 and parts[0].isdigit():
                panes[int(parts[0])] = Pane(parts[2], parts[1])
        for ancestor in ancestors(pid):
            if ancestor in panes:
                return panes[ancestor]
        return None

    async def prompt(self, pane: Pane, message: str) -> None:
        """Type ``message`` literally, then Enter.

        A multi-line message is pasted (bracketed, when the program asked for it, as
        Claude Code does) so its newlines do not submit it line by line. The text is
        :func:`terminal_text` first: nothing in it can act as a key.
        """
        message = terminal_text(message)
        try:
            if "\n" in message:
                buffer = f"relaybus-{uuid.uuid4().hex[:12]}"
                await self._tmux(
                    pane.socket, "load-buffer", "-b", buffer, "-", stdin=message.encode()
                )
                await self._tmux(
                    pane.socket, "paste-buffer", "-p", "-r", "-d", "-b", buffer, "-t", pane.pane_id
                )
            else:
                await self._tmux(pane.socket, "send-keys", "-t", pane.pane_id, "-l", "--", message)
            await self._tmux(pane.socket, "send-keys", "-t", pane.pane_id, "Enter")
        except TmuxError as exc:
            raise DriverError(ErrorCode.BRIDGE_ERROR, str(exc)) from None

    async def interrupt(self, pane: Pane) -> None:
        try:
            await self._tmux(pane.socket, "send-keys", "-t", pane.pane_id, "Escape")
        except TmuxError as exc:
            raise DriverError(ErrorCode.BRIDGE_ERROR, str(exc)) from None

    async def shown_mode(self, pane: Pane) -> str | None:
        """The permission mode the pane's footer shows now (None: none is shown)."""
        try:
            return mode_on_screen(
                await self._tmux(pane.socket, "capture-pane", "-p", "-t", pane.pane_id)
            )
        except TmuxError as exc:
            raise DriverError(ErrorCode.BRIDGE_ERROR, str(exc)) from None

    async def switch_mode(self, pane: Pane, mode: str) -> list[str]:
        """Press Shift+Tab until the footer shows ``mode``; the modes seen, ending with it.

        One press at a time, each waited for until the footer changes (at most
        :data:`MODE_PRESS_WAIT_S`), at most :data:`MAX_MODE_PRESSES`; back at the mode it
        started from (``mode`` is not in the cycle) it stops there and raises
        ``mode_unavailable``. A pane showing no mode (a dialog is open) is ``busy``.
        """
        start = await self.shown_mode(pane)
        if start is None:
            raise DriverError(
                ErrorCode.BUSY, "the terminal shows no permission mode now (a dialog is open?)"
            )
        seen = [start]
        loop = asyncio.get_running_loop()
        while seen[-1] != mode:
            if len(seen) > MAX_MODE_PRESSES or (len(seen) > 1 and seen[-1] == start):
                raise DriverError(
                    ErrorCode.MODE_UNAVAILABLE,
                    f"{mode} is not in this Claude Code's Shift+Tab cycle "
                    f"({' → '.join(seen)}); start claude with --permission-mode {mode}",
                )
            before = seen[-1]
            try:
                await self._tmux(pane.socket, "send-keys", "-t", pane.pane_id, "BTab")
            except TmuxError as exc:
                raise DriverError(ErrorCode.BRIDGE_ERROR, str(exc)) from None
            deadline = loop.time() + MODE_PRESS_WAIT_S
            now: str | None = before
            while now in (before, None) and loop.time() < deadline:
                await asyncio.sleep(MODE_POLL_S)
                now = await self.shown_mode(pane)
            if now is None or now == before:
                raise DriverError(
                    ErrorCode.MODE_UNAVAILABLE,
                    f"the terminal did not show a new permission mode after Shift+Tab "
                    f"(it showed {' → '.join(seen)})",
                )
            seen.append(now)
        return seen


#: Claude Code 2.1.332's "Exit plan mode?" dialog: the key of each option, and what it shows.
PLAN_APPROVE_KEY = "1"  # "1. Yes, and switch to default (ask each time) for this session"
PLAN_REJECT_KEY = "2"  # "2. No": the plan is rejected and the turn stops
PLAN_DIALOG_MARK = "Exit plan mode?"
#: How long a key waits for the dialog to be drawn, and a note for it to close.
PLAN_SHOWN_WAIT_S = 5.0
PLAN_CLOSE_WAIT_S = 30.0
PLAN_CLOSE_POLL_S = 0.05
#: The dialog ignores keys for a moment after it is drawn (a key typed ahead must not answer
#: it): a key waits until the dialog has stood this long.
PLAN_SETTLE_S = 1.0


async def _plan_shown(driver: TmuxDriver, pane: Pane) -> bool:
    screen = await driver._tmux(pane.socket, "capture-pane", "-p", "-t", pane.pane_id)
    return PLAN_DIALOG_MARK in screen


async def press_plan_key(driver: TmuxDriver, pane: Pane, approve: bool, held_at: float) -> None:
    """Answer the plan dialog in ``pane`` with its option's key, once the dialog is drawn and
    has stood :data:`PLAN_SETTLE_S` (since ``held_at``, the loop time the hook asked, or since
    it was first seen drawn here). Raises :class:`DriverError` (``bridge_error``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PLAN_SHOWN_WAIT_S + PLAN_SETTLE_S
    not_before = held_at + PLAN_SETTLE_S
    try:
        while True:
            now = loop.time()
            if not await _plan_shown(driver, pane):
                not_before = max(not_before, now + PLAN_SETTLE_S)
            elif now >= not_before:
                break
            if now > deadline:
                raise TmuxError("the plan dialog is not shown")
            await asyncio.sleep(PLAN_CLOSE_POLL_S)
        key = PLAN_APPROVE_KEY if approve else PLAN_REJECT_KEY
        await driver._tmux(pane.socket, "send-keys", "-t", pane.pane_id, key)
    except TmuxError as exc:
        raise DriverError(ErrorCode.BRIDGE_ERROR, str(exc)) from None


async def plan_closed(driver: TmuxDriver, pane: Pane) -> None:
    """Wait until the plan dialog in ``pane`` has closed (the CLI closes it only after the hook
    has answered). Raises :class:`DriverError` (``bridge_error``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PLAN_CLOSE_WAIT_S
    try:
        while await _plan_shown(driver, pane):
            if loop.time() > deadline:
                raise TmuxError("the plan dialog did not close")
            await asyncio.sleep(PLAN_CLOSE_POLL_S)
    except TmuxError as exc:
        raise DriverError(ErrorCode.BRIDGE_ERROR, str(exc)) from None
