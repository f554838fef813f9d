"""``set_permission_mode``: switch a session's Claude Code permission mode from a client.

A session whose interactive CLI runs in tmux gets the CLI's own Shift+Tab until its footer
shows the mode (:meth:`~relaybus.collector.drivers.tmux.TmuxDriver.switch_mode`); one run
outside tmux is refused (``not_controllable``); any other session's next headless runs get
``--permission-mode`` (:meth:`~relaybus.collector.drivers.headless.HeadlessDriver.set_mode`).
The mode reached goes into the session hash and a ``session_updated`` (through the engine's
inbox, :class:`ModeNotice`), also for a session without a process: a client chose it, and
the CLI writes it to the transcript only at its next prompt.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from relaybus.collector.drivers import DriverError, pane_check
from relaybus.collector.drivers.control import Controller
from relaybus.collector.drivers.live import find_live
from relaybus.collector.inbox import Inbox, SessionWriter
from relaybus.collector.session_state import updated_event
from relaybus.shared.settings import Settings
from relaybus.shared.store.command_streams import session_route
from relaybus.shared.store.keys import Keys
from relaybus.shared.store.session_row import Field
from relaybus.shared.wire.commands import PERMISSION_MODES, Command, Reply
from relaybus.shared.wire.errors import ErrorCode

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ModeNotice:
    """The mode a switch reached, for the engine's inbox: stored and announced."""

    sid: str
    mode: str
    host: str

    async def apply(self, writer: SessionWriter) -> None:
        state = (await writer.session(self.sid)).clone()
        if state.permission_mode == self.mode:
            return
        state.permission_mode = self.mode
        if not state.cwd:  # nothing published for it yet: never announced
            writer.keep(state)
            return
        event = updated_event(state, host=self.host, activity_ms=None)
        await writer.commit(state, [event], {Field.PERMISSION_MODE: self.mode})


class ModeSwitcher:
    """Executes ``set_permission_mode`` with the controller's drivers."""

    def __init__(
        self, settings: Settings, client: aioredis.Redis, controller: Controller, inbox: Inbox
    ) -> None:
        self._settings = settings
        self._client = client
        self._keys = Keys(settings.namespace)
        self._controller = controller
        self._inbox = inbox

    async def execute(self, cmd: Command) -> Reply:
        try:
            data = await self._switch(cmd)
        except DriverError as exc:
            return Reply.failure(cmd.id, exc.code, exc.message)
        self._inbox.put(ModeNotice(cmd.session_id, data["mode"], self._settings.host_id))
        return Reply(cmd.id, True, data=data)

    async def _switch(self, cmd: Command) -> dict[str, Any]:
        if not self._settings.allow_prompts:
            raise DriverError(
                ErrorCode.PROMPTS_DISABLED,
                "commands are disabled on this machine (RELAYBUS_ALLOW_PROMPTS)",
            )
        mode = cmd.payload.get("mode")
        if mode not in PERMISSION_MODES:
            raise DriverError(
                ErrorCode.INVALID_MESSAGE, f"mode must be one of {', '.join(PERMISSION_MODES)}"
            )
        sid = cmd.session_id
        route = await session_route(self._client, self._keys, sid)
        if route is None or route[0] != self._settings.host_id:
            raise DriverError(ErrorCode.UNKNOWN_SESSION, f"no session {sid} on this machine")
        live = find_live(self._settings.claude_dir, sid)
        if live is None:
            self._controller.headless.set_mode(sid, mode)
            return {"mode": mode, "driver": "headless", "appliesTo": "next_run"}
        tmux = self._controller.tmux
        pane = await tmux.find_pane(live.pid, live.tmux)
        if pane is None:
            raise DriverError(
                ErrorCode.NOT_CONTROLLABLE,
                f"Claude Code runs this session outside tmux (pid {live.pid}); "
                "relaybus cannot press Shift+Tab there: switch the mode at that terminal",
            )
        state = await self._client.hget(self._keys.session(sid), Field.STATE)
        if state in (b"waiting", "waiting"):
            raise DriverError(ErrorCode.BUSY, "Claude is waiting for an answer in this session")
        await pane_check.verify(tmux, pane, live, self._settings.claude_dir / "sessions")
        seen = await tmux.switch_mode(pane, mode)
        log.info("session %s: permission mode %s by Shift+Tab", sid, " → ".join(seen))
        return {"mode": mode, "driver": "tmux", "presses": len(seen) - 1}
