"""A stand-in for Google's GCM check-in and registration service, so that a real headless
Chromium (``--gcm-checkin-url``, ``--gcm-registration-url``) can complete
``pushManager.subscribe`` with no network: Chromium then names an FCM endpoint carrying the
token handed out here. Nothing is ever pushed through it (the MCS connection is not served)."""

from __future__ import annotations

import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support.servers import free_port

TOKEN = "relaybus-test-gcm-token"
#: AndroidCheckinResponse: stats_ok (1) = true, android_id (7) and security_token (8), fixed64.
CHECKIN_RESPONSE = (
    b"\x08\x01" + b"\x39" + struct.pack("<Q", 4_242_424_242) + b"\x41" + struct.pack("<Q", 77_777)
)


class _Handler(BaseHTTPRequestHandler):
    server: FakeGcm

    def do_POST(self) -> None:
        length = min(int(self.headers.get("Content-Length") or 0), 65536)
        self.rfile.read(length)
        checkin = self.path.startswith("/checkin")
        body = CHECKIN_RESPONSE if checkin else f"token={TOKEN}".encode()
        self.server.paths.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf" if checkin else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


class FakeGcm(ThreadingHTTPServer):
    """``with FakeGcm() as gcm: ... gcm.chromium_args`` on a free loopback port."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", free_port()), _Handler)
        self.paths: list[str] = []
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    @property
    def chromium_args(self) -> list[str]:
        return [
            f"--gcm-checkin-url={self.base}/checkin",
            f"--gcm-registration-url={self.base}/register",
            # nothing listens there: Chromium retries the push connection, which no test needs
            f"--gcm-mcs-endpoint=https://127.0.0.1:{free_port()}",
        ]

    def __enter__(self) -> FakeGcm:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
