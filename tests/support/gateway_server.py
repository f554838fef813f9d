"""Gateways for tests: in-process uvicorn on a free port, or ``python -m relaybus.gateway`` processes."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from relaybus.gateway.app import create_app
from relaybus.gateway.main import _Server, uvicorn_config
from relaybus.gateway.runtime import Runtime
from relaybus.shared.settings import Settings
from tests.support.procs import ManagedProcess, http_ok
from tests.support.servers import free_port

REPO = Path(__file__).resolve().parents[2]


class _LoopbackUrls:
    """``http`` and ``ws`` URLs of a gateway on loopback ``port``."""

    port: int

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"


@dataclass
class RunningGateway(_LoopbackUrls):
    runtime: Runtime
    registry: CollectorRegistry
    port: int

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        return self.registry.get_sample_value(name, labels or {}) or 0.0


@asynccontextmanager
async def running_gateway(settings: Settings, **runtime_kw: Any) -> AsyncIterator[RunningGateway]:
    """An in-process gateway (real uvicorn, real sockets) on a free loopback port."""
    port = free_port()
    settings = settings.model_copy(update={"gateway_port": port, "gateway_host": "127.0.0.1"})
    registry = CollectorRegistry()
    runtime_kw.setdefault("reader_block_ms", 200)
    runtime_kw.setdefault("hello_grace_s", 0.3)
    runtime = Runtime(settings, registry, **runtime_kw)
    app = create_app(settings, registry, runtime=runtime)
    server = _Server(uvicorn_config(settings, app))
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(400):
            if server.started and runtime.reader.synced.is_set():
                break
            if task.done():
                task.result()
            await asyncio.sleep(0.025)
        else:
            raise RuntimeError("gateway did not start")
        yield RunningGateway(runtime, registry, port)
    finally:
        runtime.close_connections(1012)
        server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(task), 30)
        except TimeoutError:
            for t in asyncio.all_tasks():
                aw: Any = t.get_coro()
                while aw is not None:
                    frame = getattr(aw, "cr_frame", None) or getattr(aw, "gi_frame", None)
                    print(
                        "  ",
                        t.get_name(),
                        type(aw).__name__,
                        frame.f_code.co_filename if frame else "",
                        frame.f_lineno if frame else "",
                    )
                    aw = getattr(aw, "cr_await", None) or getattr(aw, "gi_yieldfrom", None)
            raise


class GatewayProc(ManagedProcess, _LoopbackUrls):
    """``python -m relaybus.gateway`` as a subprocess (for SIGKILL and multi-process tests)."""

    name = "gateway"

    def __init__(
        self,
        *,
        redis_url: str,
        namespace: str,
        tokens: str = "full-token,ro-token:read",
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        super().__init__(log_path)
        self.port = free_port()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYBUS_")}
        self.env.update(
            {
                "RELAYBUS_REDIS_URL": redis_url,
                "RELAYBUS_NAMESPACE": namespace,
                "RELAYBUS_TOKENS": tokens,
                "RELAYBUS_GATEWAY_HOST": "127.0.0.1",
                "RELAYBUS_GATEWAY_PORT": str(self.port),
                "RELAYBUS_REDIS_SOCKET_TIMEOUT_S": "2",
                "PYTHONUNBUFFERED": "1",
            }
        )
        self.env.update(env or {})

    def start(self, timeout_s: float = 30.0) -> GatewayProc:
        self.spawn([sys.executable, "-m", "relaybus.gateway"], cwd=REPO, env=self.env)
        try:
            self.wait_until(lambda: http_ok(f"{self.http}/readyz"), timeout_s)
        except TimeoutError:
            self.kill()
            raise RuntimeError("gateway did not become ready") from None
        return self

    def terminate(self, timeout_s: float = 20.0) -> int:
        return super().terminate(timeout_s)

    def __enter__(self) -> GatewayProc:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()
