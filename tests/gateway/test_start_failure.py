"""A gateway that cannot bind its port says so in one line and exits non-zero."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from tests.support.servers import RedisServer


def test_port_taken_exits_1_with_clear_message(server: RedisServer, namespace: str) -> None:
    """With its port already taken, `python -m relaybus.gateway` exits 1 with one line naming the
    address and the variable."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = dict(
            os.environ,
            RELAYBUS_REDIS_URL=server.url,
            RELAYBUS_NAMESPACE=namespace,
            RELAYBUS_TOKENS="t",
            RELAYBUS_GATEWAY_HOST="127.0.0.1",
            RELAYBUS_GATEWAY_PORT=str(port),
        )
        out = subprocess.run(
            [sys.executable, "-m", "relaybus.gateway"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"relaybus gateway: port {port} on 127.0.0.1 (RELAYBUS_GATEWAY_PORT) is already in use "
        "by another program: free it or set RELAYBUS_GATEWAY_PORT to another port"
    ]
    assert "Traceback" not in out.stderr
    assert "never retrieved" not in out.stderr
