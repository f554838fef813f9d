"""The web client's static files: an installable shell that is complete and build-free."""

from __future__ import annotations

import json
import re
from pathlib import Path

STATIC = Path(__file__).resolve().parents[2] / "gateway" / "static"


def test_service_worker_caches_exactly_the_shell_files() -> None:
    """sw.js lists every static file (except itself) and nothing else, so offline start works."""
    text = (STATIC / "sw.js").read_text()
    block = re.search(r"const SHELL = \[(.*?)\];", text, re.S)
    assert block is not None
    listed = set(re.findall(r'"([^"]+)"', block.group(1)))
    files = {p.name for p in STATIC.iterdir() if p.is_file() and p.name != "sw.js"}
    assert listed == files | {"./"}


def test_index_preloads_every_module() -> None:
    """index.html preloads each ES module (all but the service worker's scripts) so one round
    trip fetches them."""
    html = (STATIC / "index.html").read_text()
    preloaded = set(re.findall(r'<link rel="modulepreload" href="([^"]+)">', html))
    assert preloaded == {p.name for p in STATIC.glob("*.js")} - {"sw.js", "push-sw.js"}


def test_every_module_import_resolves_to_a_shipped_file() -> None:
    """Plain ES modules, no build step: each relative import names a file in gateway/static."""
    for js in STATIC.glob("*.js"):
        for target in re.findall(r'from "\./([^"]+)"', js.read_text()):
            assert (STATIC / target).is_file(), f"{js.name} imports missing {target}"


def test_manifest_is_installable() -> None:
    """The manifest names the app, starts standalone and has 192 and 512 px icons that exist."""
    manifest = json.loads((STATIC / "manifest.webmanifest").read_text())
    assert manifest["display"] == "standalone" and manifest["start_url"]
    sizes = {icon["sizes"] for icon in manifest["icons"]}
    assert {"192x192", "512x512"} <= sizes
    for icon in manifest["icons"]:
        assert (STATIC / icon["src"]).stat().st_size < 16_384, "icons stay small"
