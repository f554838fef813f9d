"""The layering the tree shows: ``shared`` is the floor, the ``relaybus`` top modules the top;
no module imports a private name of another.

(``lint-imports`` checks the same and more in scripts/check; this test also sees
``importlib`` strings, which no import graph does.)"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


TOP = {
    "cli", "up", "doctor", "embedded", "hookcli", "claude_settings", "logsetup", "lan",
    "tls", "uptls", "rootpage", "qr", "upstate", "tlscli",
}  # fmt: skip


def _part(dotted: str) -> str:
    """The part of relaybus a module name belongs to (``relaybus.collector.x`` → ``collector``,
    ``relaybus.up`` → ``relaybus``), else its top-level package."""
    parts = dotted.split(".")
    if parts[0] != "relaybus" or len(parts) == 1:
        return parts[0]
    return "relaybus" if parts[1] in TOP else parts[1]


def imported_packages(package: str) -> dict[str, set[str]]:
    """Parts each module of ``package`` imports (see :func:`_part`), by module path; string
    arguments of ``importlib.import_module`` count too."""
    found: dict[str, set[str]] = {}
    for path in sorted((REPO / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(_part(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(_part(node.module))
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names.add(_part(node.args[0].value))
        found[str(path.relative_to(REPO))] = names
    return found


def test_shared_imports_neither_side_nor_the_top() -> None:
    """No module of shared/ imports collector, gateway or relaybus (statically or by name)."""
    bad = {
        path: names & {"collector", "gateway", "relaybus"}
        for path, names in imported_packages("shared").items()
    }
    assert {path: names for path, names in bad.items() if names} == {}


def test_collector_and_gateway_do_not_import_each_other_or_the_top() -> None:
    """collector/ and gateway/ are independent siblings under relaybus/."""
    for side, other in (("collector", "gateway"), ("gateway", "collector")):
        bad = {
            path: names & {other, "relaybus"}
            for path, names in imported_packages(side).items()
            if not path.endswith("__main__.py")
        }  # the shims call relaybus.cli
        assert {path: names for path, names in bad.items() if names} == {}, side


def test_no_module_imports_a_private_name_of_another() -> None:
    """``from relaybus.x import _name`` (bench included) ties a caller to what ``x`` may change
    freely: a name used elsewhere is public where it lives."""
    paths = [
        path
        for part in ("shared", "collector", "gateway", "bench")
        for path in (REPO / part).rglob("*.py")
    ]
    paths += (REPO / "relaybus").glob("*.py")  # the top modules; the rest are links
    bad = []
    for path in sorted(paths):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (
                node.level > 0 or (node.module or "").split(".")[0] == "relaybus"
            ):
                bad += [
                    f"{path.relative_to(REPO)}: {node.module}.{alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_") and not alias.name.startswith("__")
                ]
    assert bad == []
