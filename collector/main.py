"""``relaybus collector`` / ``python -m relaybus.collector``: run one collector until SIGTERM/SIGINT.

Settings Redis refuses (password, database, host name) and an unusable Claude directory
or metrics port end it at start with one line and exit 1. An unreachable Redis does not:
the transcripts wait in their files and the collector catches up once Redis answers.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from relaybus.collector.service import serve
from relaybus.shared.gctune import tune_gc
from relaybus.shared.preflight import StartupError
from relaybus.shared.settings import Settings
from relaybus.shared.store.connection import RedisRefused, serve_unless_refused

log = logging.getLogger(__name__)


async def _main(settings: Settings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await serve_unless_refused(
        settings, stop, lambda: serve(settings, stop), log, "the transcripts wait in their files"
    )


#: Container allocations between young-generation collections (CPython's default is 700).
def run(settings: Settings) -> int:
    tune_gc()
    try:
        asyncio.run(_main(settings))
    except (StartupError, RedisRefused) as exc:
        print(f"relaybus collector: {exc}", file=sys.stderr)
        return 1
    return 0
