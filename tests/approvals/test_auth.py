"""Attacks on the approval endpoint by other local processes, against real hooks and collectors.

A squatter must never answer for the collector, another user must never reach it, and a
forged request must never make the preview read a file outside the session's cwd.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from relaybus.shared.store.keys import Keys
from tests.approvals.conftest import Machine, published
from tests.support.approvals import (
    HookStarter,
    hook_input,
    session_frames,
    session_with_tool,
    watch_from,
)
from tests.support.servers import free_port
from tests.support.wait import poll, wait_for

EDIT = {"old_string": "x = 1\n", "new_string": "x = 2\n"}
ALLOW = b'{"behavior": "allow"}'
SECRET = "relaybus-test-secret-7f3a"
NOBODY = 65534


class Squatter:
    """Answers ``allow`` to whatever connects (TCP port or Unix socket); counts requests."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.requests = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    data = conn.recv(65536)
                except OSError:
                    continue
                if data:
                    self.requests += 1
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(ALLOW)}\r\nConnection: close\r\n\r\n".encode()
                    + ALLOW
                )

    def close(self) -> None:
        self.sock.close()
        self._thread.join(5)


@pytest.fixture
def squat() -> Iterator[Callable[[socket.socket], Squatter]]:
    made: list[Squatter] = []

    def start(sock: socket.socket) -> Squatter:
        sock.listen(16)
        made.append(Squatter(sock))
        return made[-1]

    yield start
    for s in made:
        s.close()


def _clean_env(runtime: Path, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYBUS_")}
    env.update(XDG_RUNTIME_DIR=str(runtime), RELAYBUS_APPROVAL_PORT=str(port))
    return env


async def test_a_squatter_on_the_port_never_answers(
    hooks: HookStarter,
    squat: Callable[[socket.socket], Squatter],
    runtime_dir: Path,
    tmp_path: Path,
) -> None:
    """Someone listens on 127.0.0.1:<approval port> and answers allow: the hook sends nothing, prints nothing."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    squatter = squat(sock)
    payload = hook_input(
        "s1", tmp_path / "s1.jsonl", str(tmp_path), "Bash", {"command": "rm -rf ~"}
    )
    rc, out, _ = await (await hooks(payload, env=_clean_env(runtime_dir, port))).result()
    assert (rc, out) == (0, "")
    assert squatter.requests == 0


async def test_a_socket_in_a_shared_directory_is_not_trusted(
    hooks: HookStarter,
    squat: Callable[[socket.socket], Squatter],
    runtime_dir: Path,
    tmp_path: Path,
) -> None:
    """The runtime dir is open to others (0777) or a symlink: the hook neither sends nor takes an answer."""
    port = free_port()
    shared = runtime_dir / "relaybus"
    shared.mkdir()
    os.chmod(shared, 0o777)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(shared / f"approval-{port}.sock"))
    squatter = squat(sock)
    payload = hook_input("s1", tmp_path / "s1.jsonl", str(tmp_path), "Bash", {"command": "id"})
    rc, out, _ = await (await hooks(payload, env=_clean_env(runtime_dir, port))).result()
    assert (rc, out) == (0, "")
    linked = tmp_path / "rt"
    linked.mkdir(mode=0o700)
    (linked / "relaybus").symlink_to(shared)
    os.chmod(shared, 0o700)
    rc, out, _ = await (await hooks(payload, env=_clean_env(linked, port))).result()
    assert (rc, out) == (0, "")
    assert squatter.requests == 0


async def test_the_endpoint_is_private_to_its_user(
    machine: Callable[..., Machine], runtime_dir: Path
) -> None:
    """Socket 0600 in a 0700 dir; as root, a process of another uid cannot connect."""
    m = machine()
    assert stat.S_IMODE(os.lstat(m.socket.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(m.socket).st_mode) == 0o600
    if os.geteuid() != 0:
        return  # the modes above are what the kernel enforces against other users
    os.chmod(runtime_dir, 0o755)  # let the other user reach the relaybus dir's permission check
    probe = (
        "import socket,sys\n"
        "s=socket.socket(socket.AF_UNIX)\n"
        "try:\n s.connect(sys.argv[1])\nexcept PermissionError:\n print('refused')\n"
        "else:\n print('connected')\n"
    )
    result = await asyncio.to_thread(
        subprocess.run,
        ["/usr/bin/python3", "-c", probe, str(m.socket)],
        capture_output=True,
        text=True,
        timeout=30,
        user=NOBODY,
        group=NOBODY,
        cwd="/",
    )
    assert result.stdout.strip() == "refused", result
    # Even with the modes widened by mistake, the collector answers nobody but its user.
    os.chmod(m.socket.parent, 0o755)
    os.chmod(m.socket, 0o666)
    post = (
        "import socket,sys\n"
        "s=socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(sys.argv[1])\n"
        "try:\n"
        " s.sendall(b'POST /permission-request HTTP/1.1\\r\\nContent-Length: 2\\r\\n\\r\\n{}')\n"
        " print(repr(s.recv(100)) or 'closed')\n"
        "except OSError:\n print('closed')\n"
    )
    result = await asyncio.to_thread(
        subprocess.run,
        ["/usr/bin/python3", "-c", post, str(m.socket)],
        capture_output=True,
        text=True,
        timeout=30,
        user=NOBODY,
        group=NOBODY,
        cwd="/",
    )
    assert result.stdout.strip() in ("b''", "closed"), result
    assert f"refused a connection from uid {NOBODY}" in m.proc.log_path.read_text()


async def test_the_collector_refuses_a_directory_it_does_not_own_loudly(
    machine: Callable[..., Machine],
    runtime_dir: Path,
    hooks: HookStarter,
    tmp_path: Path,
) -> None:
    """The runtime dir is a symlink planted by someone: approvals off, said at ERROR, hook falls through."""
    planted = tmp_path / "planted"
    planted.mkdir(mode=0o700)
    (runtime_dir / "relaybus").symlink_to(planted)
    m = machine(listening=False)

    def refused() -> list[dict[str, object]]:
        lines = [
            json.loads(x) for x in m.proc.log_path.read_text().splitlines() if x.startswith("{")
        ]
        return [x for x in lines if "APPROVALS OFF" in str(x.get("msg", x.get("message", "")))]

    line = poll(refused, timeout_s=30)[0]
    assert line["level"] == "error"
    assert m.proc.alive()
    assert list(planted.iterdir()) == []
    payload = hook_input("s1", tmp_path / "s1.jsonl", str(tmp_path), "Bash", {"command": "id"})
    rc, out, _ = await (await hooks(payload, env=_clean_env(runtime_dir, 1))).result()
    assert (rc, out) == (0, "")


async def test_a_forged_request_previews_nothing_outside_the_cwd(
    hooks: HookStarter,
    machine: Callable[..., Machine],
    admin: aioredis.Redis,
    keys: Keys,
    tmp_path: Path,
) -> None:
    """Write requests for /proc/self/environ, a file outside the cwd, a symlink and a FIFO in it: no content leaks."""
    m = machine(timeout_s=3)
    secret = tmp_path / "id_ed25519"
    secret.write_text(f"-----BEGIN KEY-----\n{SECRET}\n-----END KEY-----\n")
    (m.workdir / "link.txt").symlink_to(secret)
    os.mkfifo(m.workdir / "pipe.txt")
    inside = m.workdir / "ok.txt"
    inside.write_text("keep\nold\n")
    sid, path, _tid = session_with_tool(
        m.claude_dir, m.workdir, "Write", {"file_path": str(inside)}
    )
    await published(admin, keys, sid)
    await watch_from(admin, keys, sid)
    targets = [
        "/proc/self/environ",
        str(secret),
        str(m.workdir / "link.txt"),
        str(m.workdir / "pipe.txt"),
        str(inside),
    ]
    runs = [
        await hooks(
            hook_input(sid, path, str(m.workdir), "Write", {"file_path": t, "content": "new\n"}),
            env=m.hook_env(),
        )
        for t in targets
    ]

    async def held() -> list[dict[str, Any]]:
        found = await session_frames(admin, keys, sid, "permission_request")
        return found if len(found) == len(targets) else []

    frames = await wait_for(held, what="every forged request published")
    for run in runs:
        assert (await run.result())[:2] == (0, "")
    by_target = {f["input"]["file_path"]: f["edit"] for f in frames}
    text = json.dumps(by_target)
    assert SECRET not in text and "RELAYBUS_" not in text and "REDIS" not in text
    for t in targets[:-1]:
        assert by_target[t] == {
            "added": 1,
            "removed": 0,
            "hunks": [{"oldStart": 0, "lines": ["+new"]}],
        }
    assert by_target[str(inside)]["removed"] == 2
