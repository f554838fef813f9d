"""``relaybus up``'s watch over its embedded server: a server that dies is started again (same
port, password and data, so the collector's and gateway's clients simply reconnect), at most
``RESTARTS`` times in ``WINDOW_S``; one more death and ``up`` stops with one line instead of
retrying forever against nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable

from relaybus.embedded import EmbeddedServer, EmbeddedServerError

log = logging.getLogger(__name__)

RESTARTS = 3
WINDOW_S = 600.0
POLL_S = 0.5


class ServerWatch:
    """Run :meth:`run` as a task beside the components; after it returns, :attr:`gave_up`
    holds the line to print when it stopped ``up`` (else None)."""

    def __init__(
        self,
        server: EmbeddedServer,
        stop: asyncio.Event,
        *,
        restarts: int = RESTARTS,
        window_s: float = WINDOW_S,
        poll_s: float = POLL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.server = server
        self.stop = stop
        self.restarts = restarts
        self.window_s = window_s
        self.poll_s = poll_s
        self.clock = clock
        self.gave_up: str | None = None
        self._restarted_at: deque[float] = deque()

    async def run(self) -> None:
        while not await self._stopped_within(self.poll_s):
            code = self.server.exit_code()
            if code is None:
                continue
            now = self.clock()
            while self._restarted_at and now - self._restarted_at[0] > self.window_s:
                self._restarted_at.popleft()
            if len(self._restarted_at) >= self.restarts:
                self.gave_up = (
                    f"the embedded server exited (code {code}) {self.restarts + 1} times within "
                    f"{self.window_s / 60:g} minutes; see {self.server.data_dir / 'server.log'}"
                )
                self.stop.set()
                return
            self._restarted_at.append(now)
            log.warning(
                "embedded server exited (code %s); restarting it (%d of at most %d in %g min)",
                code, len(self._restarted_at), self.restarts, self.window_s / 60,
            )  # fmt: skip
            try:
                self.server.relaunch()  # on the loop's (main) thread: see EmbeddedServer.start
            except (OSError, EmbeddedServerError) as exc:
                self.gave_up = f"the embedded server exited (code {code}) and cannot start: {exc}"
                self.stop.set()
                return
            await self._until_it_answers()

    async def _stopped_within(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)
        return self.stop.is_set()

    async def _until_it_answers(self) -> None:
        """Wait for the relaunched server to answer; one that exits meanwhile is seen (and
        counted) by the next round of :meth:`run`, one that hangs is killed after the start
        timeout and counted likewise."""
        deadline = self.clock() + self.server.start_timeout_s
        while self.server.exit_code() is None and self.clock() < deadline:
            if await asyncio.to_thread(self.server.answers):
                log.info("embedded server answers again on port %d", self.server.port)
                return
            if await self._stopped_within(0.05):
                return
        if self.server.exit_code() is None and not self.stop.is_set():
            log.warning("embedded server did not answer within %.0f s; killing it",
                        self.server.start_timeout_s)  # fmt: skip
            self.server.kill()
