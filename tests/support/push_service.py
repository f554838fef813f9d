"""A local stand-in for a Web Push service (FCM, Mozilla autopush, Apple) and its devices.

It receives the HTTP request exactly as a push service would (RFC 8030), checks the VAPID
``Authorization: vapid t=<JWT>, k=<key>`` header (RFC 8292: ES256 signature, audience =
this origin, expiry within 24 h, a ``sub``) against the key the gateway publishes, decrypts
the ``aes128gcm`` body (RFC 8291) with the device's private key, and keeps what it accepted.
Devices whose path is in ``gone`` get 410; ``delay_s`` holds every answer (a gateway can be
killed while it waits). As an attacker's endpoint it can answer with a body of
``reply_bytes`` (generated as it is written, counted in ``reply_written``) or redirect every
request to ``redirect_to``.

It listens on 127.0.0.1, which a gateway sends to only when ``RELAYBUS_PUSH_ENDPOINT_ALLOW``
(:data:`ALLOW`) lists :attr:`PushServiceStandIn.host`.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import http_ece
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

ALLOW = "RELAYBUS_PUSH_ENDPOINT_ALLOW"
#: What a huge reply is written in.
_CHUNK = bytes(65536)


def b64d(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def b64e(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@dataclass
class Device:
    """A browser's push subscription: its private key stays here, like in the browser."""

    endpoint: str
    key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    auth: bytes = field(default_factory=lambda: os.urandom(16))

    def subscription(self) -> dict[str, Any]:
        point = self.key.public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
        return {"endpoint": self.endpoint, "keys": {"p256dh": b64e(point), "auth": b64e(self.auth)}}


@dataclass
class Accepted:
    path: str
    payload: dict[str, Any]
    headers: dict[str, str]
    claims: dict[str, Any]
    at: float


class PushServiceStandIn:
    def __init__(self) -> None:
        self.devices: dict[str, Device] = {}
        self.accepted: list[Accepted] = []
        self.rejected: list[tuple[str, str]] = []
        self.gone: set[str] = set()
        self.delay_s = 0.0
        self.reply_bytes = 0
        self.reply_written = 0
        #: Answers whose body ended (written whole, or the sender hung up).
        self.replies_done = 0
        self.redirect_to: str | None = None
        #: Requests received, accepted or not.
        self.requests = 0
        #: The VAPID public key (b64url point) the gateway publishes; set by the test.
        self.vapid_public: str | None = None
        self._lock = threading.Lock()
        self._server = _QuietServer(("127.0.0.1", 0), self._handler())
        self.host = "127.0.0.1"
        self.origin = f"http://{self.host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> PushServiceStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def device(self, name: str) -> Device:
        d = Device(f"{self.origin}/push/{name}")
        self.devices[f"/push/{name}"] = d
        return d

    def of(self, name: str) -> list[Accepted]:
        with self._lock:
            return [a for a in self.accepted if a.path == f"/push/{name}"]

    def wait(self, name: str, count: int = 1, timeout_s: float = 20.0) -> list[Accepted]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = self.of(name)
            if len(got) >= count:
                return got
            time.sleep(0.02)
        raise TimeoutError(
            f"{name}: {len(self.of(name))} pushes, wanted {count}; rejected {self.rejected}"
        )

    # --- checks as a push service makes them ----------------------------------------------

    def verify_vapid(self, header: str) -> dict[str, Any]:
        """The JWT's claims, after checking the signature, audience and expiry."""
        scheme, _, params = header.partition(" ")
        assert scheme.lower() == "vapid", f"not a vapid Authorization: {scheme}"
        parts = dict(p.strip().split("=", 1) for p in params.split(","))
        token, key = parts["t"], parts["k"]
        assert self.vapid_public is None or key == self.vapid_public, "signed with another key"
        head_b64, body_b64, sig_b64 = token.split(".")
        head = json.loads(b64d(head_b64))
        assert head["alg"] == "ES256", head
        sig = b64d(sig_b64)
        assert len(sig) == 64
        der = encode_dss_signature(int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big"))
        public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b64d(key))
        public.verify(der, f"{head_b64}.{body_b64}".encode(), ec.ECDSA(hashes.SHA256()))
        claims: dict[str, Any] = json.loads(b64d(body_b64))
        assert claims["aud"] == self.origin, claims
        now = time.time()
        assert now < claims["exp"] <= now + 24 * 3600, claims
        assert str(claims.get("sub", "")).startswith(("mailto:", "https:")), claims
        return claims

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with service._lock:
                    service.requests += 1
                if service.redirect_to is not None:
                    self.send_response(307)
                    self.send_header("Location", service.redirect_to)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                try:
                    device = service.devices[self.path]
                    claims = service.verify_vapid(self.headers["Authorization"])
                    assert self.headers["Content-Encoding"] == "aes128gcm"
                    assert int(self.headers["TTL"]) >= 0
                    plain = http_ece.decrypt(
                        body, private_key=device.key, auth_secret=device.auth, version="aes128gcm"
                    )
                except (AssertionError, KeyError, ValueError, InvalidSignature) as exc:
                    service.rejected.append((self.path, repr(exc)))
                    self.send_response(400 if not isinstance(exc, InvalidSignature) else 403)
                    self.end_headers()
                    return
                if self.path in service.gone:
                    self.send_response(410)
                    self.end_headers()
                    return
                with service._lock:  # accepted once received whole: the answer may be lost
                    service.accepted.append(
                        Accepted(
                            self.path,
                            json.loads(plain),
                            {k.lower(): v for k, v in self.headers.items()},
                            claims,
                            time.time(),
                        )
                    )
                if service.delay_s:
                    time.sleep(service.delay_s)
                self.send_response(201)
                self.send_header("Location", f"{service.origin}/m/{len(service.accepted)}")
                if service.reply_bytes:
                    self.send_header("Content-Length", str(service.reply_bytes))
                self.end_headers()
                if service.reply_bytes:
                    self._huge_reply()

            def _huge_reply(self) -> None:
                left = service.reply_bytes
                try:
                    while left > 0:
                        chunk = _CHUNK[: min(left, len(_CHUNK))]
                        self.wfile.write(chunk)
                        left -= len(chunk)
                        with service._lock:
                            service.reply_written += len(chunk)
                except OSError:  # the sender hung up: what it stopped reading is never made
                    self.close_connection = True
                with service._lock:
                    service.replies_done += 1

        return Handler


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A sender killed mid-request (the tests do that) is not an error here."""
