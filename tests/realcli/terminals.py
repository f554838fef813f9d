"""Terminals for the interactive CLI: a tmux server of its own, or a bare pseudo-terminal.

A person's keys are typed with ``send-keys -l`` (tmux) or written to the pty; the screen
is read back to wait for the CLI's prompt (``❯``) or its dialogs.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pty
import struct
import subprocess
import termios
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from tests.realcli.observe import running
from tests.support.netns_inside import assert_isolated

COLUMNS, ROWS = 200, 50


class Tmux:
    """``claude`` in pane ``main`` of a new tmux server (``-L`` socket under ``$TMUX_TMPDIR``)."""

    def __init__(self) -> None:
        self.name = f"rc{uuid.uuid4().hex[:8]}"
        self.pane_pid: int | None = None

    def run(self, *args: str) -> str:
        out = subprocess.run(
            ["tmux", "-L", self.name, *args], capture_output=True, text=True, timeout=10, check=True
        )
        return out.stdout

    def start(self, command: list[str], cwd: Path) -> Tmux:
        assert_isolated()
        self.run(
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "main",
            "-x",
            str(COLUMNS),
            "-y",
            str(ROWS),
            "-c",
            str(cwd),
            " ".join(command),
        )
        self.pane_pid = int(self.run("list-panes", "-t", "main", "-F", "#{pane_pid}").split()[0])
        return self

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "main")

    async def type_keys(self, text: str, *, enter: bool = True) -> None:
        """Type ``text`` as a person would (literal keys), then Enter."""
        if text:
            self.run("send-keys", "-t", "main", "-l", "--", text)
            await asyncio.sleep(0.3)  # a person's pause; Enter at once can land in the same paste
        if enter:
            self.run("send-keys", "-t", "main", "Enter")

    async def screen_until(
        self,
        pred: Callable[[str], bool],
        timeout_s: float = 30.0,
        what: str = "screen",
        interval_s: float = 0.1,
    ) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            text = self.screen()
            if pred(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; screen:\n{text}")
            await asyncio.sleep(interval_s)

    async def settled(
        self,
        pred: Callable[[str], bool],
        timeout_s: float = 30.0,
        what: str = "screen",
        still_s: float = 0.3,
    ) -> str:
        """Wait until the screen satisfies ``pred`` and then stays the same for ``still_s``
        (the CLI has finished drawing it: a dialog still being drawn can drop a key)."""
        deadline = time.monotonic() + timeout_s
        text = await self.screen_until(pred, timeout_s, what)
        while True:
            await asyncio.sleep(still_s)
            again = self.screen()
            if again == text and pred(again):
                return again
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what} to settle; screen:\n{again}")
            text = again

    async def wait_gone(self, timeout_s: float = 30.0) -> float:
        """Wait until the pane's process (the CLI) has exited; the time it was seen gone."""
        assert self.pane_pid is not None
        deadline = time.monotonic() + timeout_s
        while running(self.pane_pid):
            if time.monotonic() > deadline:
                raise AssertionError(f"the CLI still runs after {timeout_s}s:\n{self.screen()}")
            await asyncio.sleep(0.005)
        return time.time()

    def kill(self) -> None:
        subprocess.run(
            ["tmux", "-L", self.name, "kill-server"], capture_output=True, timeout=10, check=False
        )


class Pty:
    """``claude`` on a pseudo-terminal of its own, outside tmux; output kept in :attr:`output`."""

    def __init__(self) -> None:
        self.master: int | None = None
        self.proc: asyncio.subprocess.Process | None = None
        self.output = b""

    async def start(self, command: list[str], cwd: Path) -> Pty:
        assert_isolated()
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
        self.proc = await asyncio.create_subprocess_exec(
            *command, cwd=cwd, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
        )
        os.close(slave)
        self.master = master
        asyncio.get_running_loop().add_reader(master, self._drain)
        return self

    def _drain(self) -> None:
        assert self.master is not None
        try:
            self.output += os.read(self.master, 65536)
        except OSError:
            asyncio.get_running_loop().remove_reader(self.master)

    async def type_keys(self, text: str, *, enter: bool = True) -> None:
        assert self.master is not None
        if text:
            os.write(self.master, text.encode())
            await asyncio.sleep(0.3)
        if enter:
            os.write(self.master, b"\r")

    async def until(self, needle: bytes, since: int = 0, timeout_s: float = 30.0) -> None:
        """Wait until ``needle`` is in what the terminal showed after byte ``since``."""
        deadline = time.monotonic() + timeout_s
        while needle not in self.output[since:]:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"no {needle!r} on the terminal; tail:\n"
                    f"{self.output[-2000:].decode(errors='replace')}"
                )
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        if self.master is not None:
            with contextlib.suppress(ValueError, RuntimeError):
                asyncio.get_running_loop().remove_reader(self.master)
            os.close(self.master)
            self.master = None
