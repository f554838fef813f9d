"""Only stream_state.py changes a StreamState: every other gateway module asks its methods.

Checked on the source with ``ast``, by field name (so an alias such as ``st = conn.state``
is caught too): an assignment, augmented or annotated assignment, item assignment or
deletion of a field, or a mutating call on a field's container (``.add``, ``.pop`` ...).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GATEWAY = REPO / "gateway"
OWNER = GATEWAY / "delivery" / "stream_state.py"
MUTATORS = frozenset(
    {
        "add", "append", "clear", "discard", "extend", "insert", "pop", "popitem", "remove",
        "reverse", "setdefault", "sort", "update",
    }
)  # fmt: skip


def state_fields() -> frozenset[str]:
    """The names in ``StreamState.__slots__``."""
    for node in ast.walk(ast.parse(OWNER.read_text())):
        if isinstance(node, ast.ClassDef) and node.name == "StreamState":
            for stmt in node.body:
                if (
                    isinstance(stmt, ast.Assign)
                    and isinstance(stmt.targets[0], ast.Name)
                    and stmt.targets[0].id == "__slots__"
                ):
                    value = ast.literal_eval(stmt.value)
                    return frozenset(value)
    raise AssertionError("StreamState.__slots__ not found")


def _field(node: ast.expr, fields: frozenset[str]) -> str | None:
    """The field ``node`` names or indexes into (``x.f``, ``x.f[k]``, ``x.f[a:b]``)."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute) and node.attr in fields:
        return node.attr
    return None


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        found: list[ast.expr] = []
        for t in node.targets:
            found.extend(t.elts if isinstance(t, ast.Tuple | ast.List) else [t])
        return found
    if isinstance(node, ast.AugAssign | ast.AnnAssign):
        return [node.target]
    if isinstance(node, ast.Delete):
        return list(node.targets)
    return []


def writes(source: str, fields: frozenset[str]) -> list[tuple[int, str]]:
    """(line, field) of every write to a state field in ``source``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        for target in _targets(node):
            name = _field(target, fields)
            if name is not None:
                found.append((target.lineno, name))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATORS
        ):
            name = _field(node.func.value, fields)
            if name is not None:
                found.append((node.lineno, f"{name}.{node.func.attr}()"))
    return found


def test_the_check_catches_each_kind_of_write() -> None:
    """A module that writes the state in every way it could is caught on every line."""
    source = """
conn.state.global_mark = 3
st = conn.state
st.session_marks["s"] += 1
st.held_gaps[:] = []
conn.state.welcomed: bool = True
a, conn.state.observe = 1, True
del st.watch_buffers["s"]
conn.state.watched.add("s")
conn.state.global_buffer.clear()
x = conn.state.session_marks.get("s")
"""
    got = writes(source, state_fields())
    assert [line for line, _ in got] == [2, 4, 5, 6, 7, 8, 9, 10]
    assert [name for _, name in got][-2:] == ["watched.add()", "global_buffer.clear()"]


def test_no_module_but_stream_state_writes_a_stream_state() -> None:
    """Every gateway module other than stream_state.py leaves StreamState's fields alone."""
    fields = state_fields()
    assert {"global_mark", "session_marks", "watch_buffers", "held_gaps"} <= fields
    modules = [p for p in sorted(GATEWAY.rglob("*.py")) if p != OWNER]
    assert len(modules) > 40
    offenders = [
        f"{path.relative_to(REPO)}:{line}: {name}"
        for path in modules
        for line, name in writes(path.read_text(), fields)
    ]
    assert offenders == []
