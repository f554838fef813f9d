"""What an install adds: the ``relaybus`` namespace only (no top-level ``shared``,
``collector`` or ``gateway``, names PyPI already uses), with its data files."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_wheel_installs_only_the_relaybus_namespace(tmp_path: Path) -> None:
    # Built from a copy of the tree: an in-place build reuses build/lib, which keeps files
    # that were since deleted.
    src = tmp_path / "src"
    for name in ("relaybus", "collector", "gateway", "shared"):
        shutil.copytree(
            REPO / name, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
        )
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, src / name)
    out = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(out), str(src)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    (wheel,) = out.glob("relaybus-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {
        "relaybus",
        wheel.name.split("-py")[0] + ".dist-info",
    }
    for needed in (
        "relaybus/cli.py",
        "relaybus/collector/engine.py",
        "relaybus/gateway/static/index.html",
        "relaybus/shared/store/lua/append.lua",
        "relaybus/shared/transcript/projection.py",
        "relaybus/py.typed",
    ):
        assert needed in names, needed
    sources = {n for n in names if n.endswith(".py")}
    in_tree = {
        "/".join(
            ("relaybus", *([] if top == "relaybus" else [top]), *p.relative_to(REPO / top).parts)
        )
        for top in ("relaybus", "collector", "gateway", "shared")
        for p in (REPO / top).rglob("*.py")
    }
    assert sources == in_tree
