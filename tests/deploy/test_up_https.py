"""`relaybus up` over HTTPS: Chromium trusting only the root `relaybus tls root` names loads
the app, registers its service worker and subscribes to push; nothing is checked less."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect, sync_playwright

from tests.support.deploy_up import UpProc
from tests.support.fake_gcm import TOKEN, FakeGcm
from tests.support.servers import free_port
from tests.support.web import CHROMIUM, CHROMIUM_ARGS

CERTUTIL = "/usr/bin/certutil"


@pytest.fixture
def up(tmp_path: Path, claude_dir: Path) -> Iterator[UpProc]:
    proc = UpProc(tmp_path, claude_dir, root_port=free_port()).start()
    yield proc
    proc.kill()


def _relaybus(up: UpProc, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "relaybus.cli", *args],
        env=up.env, cwd=up.tmp, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return out.stdout


def _nss_home(home: Path, root: Path | None) -> dict[str, str | float | bool]:
    """A HOME whose NSS database trusts ``root`` (or nothing) for TLS servers."""
    db = home / ".pki" / "nssdb"
    db.mkdir(parents=True)
    subprocess.run([CERTUTIL, "-d", f"sql:{db}", "-N", "--empty-password"], check=True)
    if root is not None:
        add = [CERTUTIL, "-d", f"sql:{db}", "-A", "-t", "C,,", "-n", "relaybus", "-i", str(root)]
        subprocess.run(add, check=True)
    return {**os.environ, "HOME": str(home)}


@pytest.mark.skipif(not Path(CERTUTIL).exists(), reason="certutil (libnss3-tools) is missing")
def test_chromium_trusting_only_the_root_loads_the_app_and_subscribes_to_push(
    up: UpProc, tmp_path: Path
) -> None:
    """https phone URL in the banner and from `relaybus url`; the root page offers the same
    root; `relaybus doctor` knows the port is up's gateway; Chromium (its NSS db trusting that root only, no certificate flag) gets a secure
    context, the service worker and, through the app's own Turn on, a push subscription the
    gateway stores. Without the root the same URL is refused."""
    banner = up.wait_banner()
    url = banner["Open on your phone"]
    assert url.startswith(f"https://127.0.0.1:{up.port}/#token=")
    root = Path(_relaybus(up, "tls", "root").strip())
    assert root == Path(banner["Root certificate"]) and root.is_file()
    assert _relaybus(up, "url", "--no-qr").strip() == url
    root_url = _relaybus(up, "url", "--root", "--no-qr").strip()
    page = httpx.get(root_url, timeout=10)
    assert "Android" in page.text and "iPhone" in page.text and "<svg" in page.text
    der = httpx.get(root_url + "relaybus-root.crt", timeout=10).content
    assert der == x509.load_pem_x509_certificate(root.read_bytes()).public_bytes(Encoding.DER)
    doctor = subprocess.run(
        [sys.executable, "-m", "relaybus.cli", "doctor", "--gateway-host", "127.0.0.1",
         "--gateway-port", str(up.port), "--collector-metrics-port", "0", "--approval-port", "0"],
        env=up.env, cwd=up.tmp, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert f"a relaybus gateway already serves 127.0.0.1:{up.port}" in doctor.stdout, doctor.stdout
    origin = url.split("#", 1)[0].rstrip("/")

    with sync_playwright() as pw, FakeGcm() as gcm:
        untrusted = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            env=_nss_home(tmp_path / "home-untrusting", None),
        )  # fmt: skip
        with pytest.raises(PlaywrightError, match="ERR_CERT_AUTHORITY_INVALID"):
            untrusted.new_page().goto(url)
        untrusted.close()

        # A persistent profile: push is off in the incognito-like contexts of browser.new_context().
        ctx = pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True,
            args=[*CHROMIUM_ARGS, *gcm.chromium_args], service_workers="allow",
            env=_nss_home(tmp_path / "home-trusting", root),
        )  # fmt: skip
        try:
            ctx.set_default_timeout(30_000)
            ctx.grant_permissions(["notifications"], origin=origin)
            tab = ctx.new_page()
            tab.goto(url)
            assert tab.evaluate("window.isSecureContext") is True
            sw = tab.evaluate("navigator.serviceWorker.ready.then(r => r.active.scriptURL)")
            assert sw == f"{origin}/sw.js"
            tab.click("#push-open")
            tab.click("#push-on")
            expect(tab.locator("#push-status")).to_have_text("On for this device.", timeout=45_000)
            endpoint = tab.evaluate(
                "navigator.serviceWorker.ready"
                ".then(r => r.pushManager.getSubscription()).then(s => s.endpoint)"
            )
            assert endpoint.endswith(f"/fcm/send/{TOKEN}")
            assert any(p.startswith("/register") for p in gcm.paths)
        finally:
            ctx.close()
