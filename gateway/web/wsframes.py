"""RFC 6455 as the gateway speaks it: the opening handshake's checks and the frame codec.

No extension is ever negotiated, so a frame's RSV bits must be clear; client frames must
be masked; control frames carry at most 125 bytes and are never fragmented. A violation
is a :class:`WsError` carrying the close code the connection fails with.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from http import HTTPStatus

CONT, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
_OPCODES = frozenset((CONT, TEXT, BINARY, CLOSE, PING, PONG))
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#: Close codes a peer may send (RFC 6455 7.4; 1004-1006 and 1015 are never sent).
_CLOSE_OK = frozenset((1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014))


class WsError(Exception):
    """A protocol violation: the connection fails with ``code``."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class Frame:
    """One parsed client frame (payload unmasked)."""

    __slots__ = ("fin", "opcode", "payload")

    def __init__(self, fin: bool, opcode: int, payload: bytes) -> None:
        self.fin = fin
        self.opcode = opcode
        self.payload = payload


def handshake_refusal(method: str, headers: Mapping[str, str]) -> tuple[int, str] | None:
    """``(status, why)`` when the upgrade request is not one we accept, else ``None``."""
    if method != "GET":
        return 405, "a WebSocket upgrade is a GET\n"
    if "websocket" not in _tokens(headers.get("upgrade", "")):
        return 400, "Upgrade: websocket expected\n"
    if "upgrade" not in _tokens(headers.get("connection", "")):
        return 400, "Connection: Upgrade expected\n"
    if headers.get("sec-websocket-version", "").strip() != "13":
        return 426, "Sec-WebSocket-Version 13 expected\n"
    if accept_key(headers.get("sec-websocket-key", "")) is None:
        return 400, "Sec-WebSocket-Key must be 16 bytes in base64\n"
    return None


def _tokens(value: str) -> set[str]:
    return {t.strip().lower() for t in value.split(",")}


def accept_key(key: str) -> str | None:
    """``Sec-WebSocket-Accept`` for a valid ``Sec-WebSocket-Key``, else ``None``."""
    key = key.strip()
    try:
        raw = base64.b64decode(key.encode("ascii"), validate=True)
    except (ValueError, binascii.Error):
        return None
    if len(raw) != 16:
        return None
    return base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()


def switching(accept: str) -> bytes:
    """The ``101`` response: no subprotocol, no extension."""
    return (
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {accept}\r\n\r\n"
    ).encode()


def http_error(status: int, body: str) -> bytes:
    """A complete ``connection: close`` response refusing the upgrade."""
    data = body.encode()
    extra = "Sec-WebSocket-Version: 13\r\n" if status == 426 else ""
    return (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: text/plain\r\n"
        f"content-length: {len(data)}\r\n{extra}connection: close\r\n\r\n"
    ).encode() + data


def control(opcode: int, payload: bytes = b"") -> bytes:
    """A server control frame (``payload`` at most 125 bytes)."""
    return bytes((0x80 | opcode, len(payload))) + payload


def close_frame(code: int, reason: str = "") -> bytes:
    """A close frame; the reason is cut to fit 125 bytes."""
    return control(CLOSE, code.to_bytes(2, "big") + reason.encode()[:123])


def parse_close(payload: bytes) -> int | None:
    """The code of a client's close frame (``None``: it sent none); checks the payload."""
    if not payload:
        return None
    if len(payload) == 1:
        raise WsError(1002, "close frame of one byte")
    code = int.from_bytes(payload[:2], "big")
    if code not in _CLOSE_OK and not 3000 <= code <= 4999:
        raise WsError(1002, f"invalid close code {code}")
    try:
        payload[2:].decode()
    except UnicodeDecodeError:
        raise WsError(1007, "close reason is not UTF-8") from None
    return code


def unmask(data: bytes | bytearray, mask: bytes) -> bytes:
    n = len(data)
    if n == 0:
        return b""
    key = (mask * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(key, "little")).to_bytes(n, "little")


def next_frame(buf: bytearray, limit: int) -> tuple[Frame, int] | None:
    """The first complete frame in ``buf`` and the bytes it took, or ``None`` (incomplete).

    ``limit``: the largest data payload acceptable now (the message's remaining room); a
    larger one fails (1009) as soon as its header is in, before its payload is buffered.
    """
    n = len(buf)
    if n < 2:
        return None
    b0, b1 = buf[0], buf[1]
    if b0 & 0x70:
        raise WsError(1002, "reserved bits set (no extension was negotiated)")
    opcode = b0 & 0x0F
    if opcode not in _OPCODES:
        raise WsError(1002, f"unknown opcode {opcode}")
    if not b1 & 0x80:
        raise WsError(1002, "client frames must be masked")
    length, at = b1 & 0x7F, 2
    if length == 126:
        if n < 4:
            return None
        length, at = int.from_bytes(buf[2:4], "big"), 4
    elif length == 127:
        if n < 10:
            return None
        length, at = int.from_bytes(buf[2:10], "big"), 10
        if length >> 63:
            raise WsError(1002, "invalid payload length")
    fin = bool(b0 & 0x80)
    if opcode >= CLOSE and (length > 125 or not fin):
        raise WsError(1002, "control frames are at most 125 bytes and not fragmented")
    if length > limit and opcode < CLOSE:
        raise WsError(1009, "message too big")
    end = at + 4 + length
    if n < end:
        return None
    return Frame(fin, opcode, unmask(buf[at + 4 : end], bytes(buf[at : at + 4]))), end
