"""Raw-socket attackers: a WebSocket client that never reads, and half-sent HTTP requests.

The websockets library reads its socket in the background; these clients control exactly
what reaches the gateway and what is (not) read back, as a hostile client would.
"""

from __future__ import annotations

import base64
import os
import socket
import struct

import orjson


def ws_frame(payload: bytes, opcode: int = 0x1) -> bytes:
    """One masked client frame (RFC 6455)."""
    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        header = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 1 << 16:
        header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return header + mask + masked


def upgrade_request(
    port: int,
    *,
    token: str | None = None,
    origin: str | None = None,
    lines: tuple[str, ...] | None = None,
) -> bytes:
    """A ``/ws`` upgrade request (a fresh key); ``lines`` replaces the standard head."""
    key = base64.b64encode(os.urandom(16)).decode()
    head = list(
        lines
        or (
            "GET /ws HTTP/1.1",
            f"Host: 127.0.0.1:{port}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
        )
    )
    if token is not None:
        head.append(f"Authorization: Bearer {token}")
    if origin is not None:
        head.append(f"Origin: {origin}")
    return ("\r\n".join(head) + "\r\n\r\n").encode()


class DeafClient:
    """Opens ``/ws``, sends what it is told, and never reads past the handshake."""

    def __init__(
        self, port: int, *, token: str | None = None, rcvbuf: int = 4096, origin: str | None = None
    ) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(10)
        self.sock.connect(("127.0.0.1", port))
        self.sock.sendall(upgrade_request(port, token=token, origin=origin))
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                break
            head += chunk
        self.status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0

    def send(self, frame: dict[str, object]) -> None:
        self.sock.sendall(ws_frame(orjson.dumps(frame)))

    def ping(self, payload: bytes = b"x" * 125) -> bool:
        """One ping; ``False`` once the gateway has dropped the connection."""
        try:
            self.sock.sendall(ws_frame(payload, opcode=0x9))
        except OSError:
            return False
        return True

    def dropped(self) -> bool:
        """True once the peer closed or reset the connection (reads what is pending)."""
        self.sock.setblocking(False)
        try:
            while True:
                data = self.sock.recv(1 << 20)
                if not data:
                    return True
        except BlockingIOError:
            return False
        except OSError:
            return True
        finally:
            self.sock.setblocking(True)

    def close(self) -> None:
        self.sock.close()


def slowloris(port: int, n: int) -> list[socket.socket]:
    """``n`` connections that each send half a request line and stop."""
    out = []
    for _ in range(n):
        s = socket.socket()
        s.settimeout(5)
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-a: ")
        out.append(s)
    return out


def closed_by_peer(sock: socket.socket) -> bool:
    """True when the peer has closed ``sock`` (EOF or reset), without blocking."""
    sock.setblocking(False)
    try:
        return sock.recv(65536) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)


def rss_bytes(pid: int) -> int:
    """Resident set size of process ``pid``."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def open_sockets(pid: int, port: int) -> int:
    """TCP connections on local ``port`` that process ``pid`` still holds a descriptor for
    (listening sockets excluded)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    held = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.readlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            local_port = int(cols[1].rsplit(":", 1)[1], 16)
            if local_port == port and cols[3] != "0A" and cols[9] in inodes:
                held += 1
    return held
