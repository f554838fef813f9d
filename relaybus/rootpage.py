"""The plain-http page of ``relaybus up`` that offers its root certificate to phones.

``GET /`` explains the install steps for iOS and Android, shows a QR code of the https
URL (without the token: this page is plain http, readable by anyone on the network) and
links ``/relaybus-root.crt`` (DER, what iOS and Android install) and ``/relaybus-root.pem``.
Only a root certificate is served: it is public by nature; its key never leaves the state
directory. Everything else is 404. Bounded: 8 KB of headers, each connection done (request
read, response written) within 10 s whether or not its client reads, and at most 32
connections at once (more are closed at once), so a crowd of idle or never-reading clients
cannot take the `up` process's descriptors.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
from dataclasses import dataclass
from pathlib import Path

from relaybus import qr, tls

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 8192
#: Each connection's whole life: the request read and the response written.
DEADLINE_S = 10.0
MAX_CONNECTIONS = 32


@dataclass(frozen=True)
class RootPage:
    """The bodies served: rendered once at start."""

    index: bytes
    crt: bytes
    pem: bytes

    @classmethod
    def build(cls, https_url: str, root_cert: Path) -> RootPage:
        return cls(render(https_url), tls.der(root_cert), root_cert.read_bytes())

    def response(self, target: str) -> tuple[str, str, bytes]:
        """(status, content type, body) for a request target."""
        path = target.split("?", 1)[0]
        if path in ("/", "/index.html"):
            return "200 OK", "text/html; charset=utf-8", self.index
        if path == "/relaybus-root.crt":
            return "200 OK", "application/x-x509-ca-cert", self.crt
        if path == "/relaybus-root.pem":
            return "200 OK", "application/x-pem-file", self.pem
        return "404 Not Found", "text/plain; charset=utf-8", b"not found\n"


def render(https_url: str) -> bytes:
    """The install page for ``https_url`` (no token in it)."""
    url = html.escape(https_url)
    code = qr.svg(https_url)
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>relaybus: trust this machine</title>
<style>body{{font:16px/1.45 system-ui,sans-serif;max-width:40em;margin:1em auto;padding:0 1em}}
a.button{{display:inline-block;padding:.6em 1em;border:1px solid #888;border-radius:.4em;
margin:.2em 0;text-decoration:none}} code{{word-break:break-all}}</style></head>
<body>
<h1>Trust this relaybus machine</h1>
<p>relaybus serves the app over HTTPS with a certificate from a private root made on this
machine. Install that root once on your phone; afterwards <code>{url}</code> opens without a
warning, and notifications and "Add to Home Screen" work. The root can only vouch for
private and local addresses (name constraints), not for public sites.</p>
<p><a class="button" href="/relaybus-root.crt">Download the root certificate (.crt)</a>
<a class="button" href="/relaybus-root.pem">.pem</a></p>
<h2>iPhone, iPad (Safari)</h2>
<ol><li>Open this page in <b>Safari</b> and tap the .crt download; allow the profile download.</li>
<li>Settings → General → VPN &amp; Device Management → the relaybus profile → Install.</li>
<li>Settings → General → About → Certificate Trust Settings → turn on full trust for the
relaybus root.</li></ol>
<h2>Android (Chrome)</h2>
<ol><li>Tap the .crt download.</li>
<li>Settings → Security &amp; privacy → More security settings → Encryption &amp; credentials →
Install a certificate → <b>CA certificate</b> → Install anyway → pick the downloaded file.</li>
<li>Reopen Chrome.</li></ol>
<h2>Then open the app</h2>
<p>Scan the QR code the terminal shows (it carries your token), or open
<a href="{url}">{url}</a> and paste the token.</p>
<div>{code}</div>
</body></html>
"""
    return page.encode()


async def _handle(
    page: RootPage, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, deadline_s: float
) -> None:
    try:
        async with asyncio.timeout(deadline_s):
            head = await reader.readuntil(b"\r\n\r\n")
            method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
            target = rest.partition(" ")[0]
            if method not in ("GET", "HEAD"):
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"GET only\n"
            else:
                status, ctype, body = page.response(target)
            writer.write(
                (
                    f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                    f"Content-Length: {len(body)}\r\nX-Content-Type-Options: nosniff\r\n"
                    "Cache-Control: no-store\r\nConnection: close\r\n\r\n"
                ).encode()
                + (b"" if method == "HEAD" else body)
            )
            await writer.drain()
    except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
        writer.transport.abort()  # a client that never read: its unsent bytes are dropped
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def serve(
    page: RootPage,
    host: str,
    port: int,
    stop: asyncio.Event,
    *,
    max_connections: int = MAX_CONNECTIONS,
    deadline_s: float = DEADLINE_S,
) -> None:
    """Serve ``page`` on ``host:port`` until ``stop`` is set."""
    open_now = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal open_now
        if open_now >= max_connections:
            writer.transport.abort()
            return
        open_now += 1
        try:
            await _handle(page, reader, writer, deadline_s)
        finally:
            open_now -= 1

    server = await asyncio.start_server(handle, host, port, limit=MAX_HEAD_BYTES)
    log.info("root certificate page on http://%s:%d/", host, port)
    async with server:
        await stop.wait()
