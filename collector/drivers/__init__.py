"""Drivers that act on a Claude Code session: ``headless`` (``claude -p``) and ``tmux``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

#: Given by the command consumer with a session command: lets the next command of the same
#: session start (a prompt calls it once its run exists, before it waits for the run to
#: take the prompt, so an interrupt is not held up by that wait).
Release = Callable[[], None]


def no_release() -> None:
    """The :data:`Release` of a command run outside the consumer: nothing waits on it."""


class DriverError(Exception):
    """A command could not be carried out; ``code`` is the protocol's error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class TurnHooks(Protocol):
    """What the collector's turn tracking learns from commands."""

    async def prompt_started(
        self, session_id: str, trace_id: str | None, at_ms: int, *, run: bool = False
    ) -> None:
        """A prompt sent through relaybus started a turn (``working``) at ``at_ms``.

        ``at_ms`` is taken before the prompt reached Claude Code, so transcript lines it
        causes are never older than it. ``run``: relaybus's own headless run carries it
        (until :meth:`prompt_ended`, the live file's ``idle`` does not end the turn).
        """

    async def prompt_ended(self, session_id: str) -> None:
        """The headless run of that prompt ended (``idle``)."""

    async def prompt_failed(self, session_id: str, code: str, message: str) -> None:
        """The headless run failed after its prompt was reported sent: tell the watchers."""
