"""``relaybus collector`` / ``python -m collector``: run one collector until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import signal

from collector.service import serve
from shared.settings import Settings


async def _main(settings: Settings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await serve(settings, stop)


def run(settings: Settings) -> int:
    asyncio.run(_main(settings))
    return 0
