"""A local HTTP receiver standing in for an ntfy server and a JSON webhook (Apprise targets).

Every POST is kept (path, body) as soon as it arrived whole; ``delay_s`` then holds the
answer, so a sender can be killed while it waits for it.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class NotifyReceiver:
    def __init__(self) -> None:
        self.posts: list[tuple[str, bytes]] = []
        self.delay_s = 0.0
        self._lock = threading.Lock()
        self._server = _QuietServer(("127.0.0.1", 0), self._handler())
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> NotifyReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def bodies(self) -> list[bytes]:
        with self._lock:
            return [body for _path, body in self.posts]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._lock:
                    receiver.posts.append((self.path, body))
                if receiver.delay_s:
                    time.sleep(receiver.delay_s)
                payload = b'{"id":"m1","event":"message"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A sender killed mid-request (the tests do that) is not an error here."""
