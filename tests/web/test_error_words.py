"""Every protocol error code reads as plain words in the web client."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from relaybus.shared.wire.errors import ErrorCode

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "gateway" / "static"
#: What the client's errorText says for a code it has no words for.
FALLBACK = "Something went wrong"


def _words(module: Path, codes: list[str]) -> dict[str, str]:
    """``errorText(code)`` of ``module`` for each code, run under node."""
    node = shutil.which("node")
    assert node is not None, "node (20+) is required for the web client's tests"
    script = (
        f"const m = await import({json.dumps(module.as_uri())});"
        f"const codes = {json.dumps(codes)};"
        "console.log(JSON.stringify(Object.fromEntries(codes.map((c) => [c, m.errorText(c)]))));"
    )
    proc = subprocess.run(
        [node, "--input-type=module", "-e", script],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    words: dict[str, str] = json.loads(proc.stdout)
    return words


def test_every_error_code_has_words_in_the_web_client() -> None:
    """Each ErrorCode gets its own words from every static module that exports errorText."""
    modules = [
        path
        for path in sorted(STATIC.rglob("*.js"))
        if "export function errorText" in path.read_text(encoding="utf-8")
    ]
    assert modules, "no static JS module exports errorText"
    codes = [code.value for code in ErrorCode]
    for module in modules:
        words = _words(module, codes)
        missing = [code for code in codes if words[code].startswith(FALLBACK)]
        assert not missing, f"{module.name} has no words for {missing}"
