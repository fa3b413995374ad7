"""Issue 14 for blz: the store is the only module that runs SQL, and the surfaces import no cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BLZ = Path(__file__).resolve().parents[2] / "src" / "cairn" / "blz"


def _tree(name: str) -> ast.Module:
    return ast.parse((BLZ / f"{name}.py").read_text(), filename=f"{name}.py")


@pytest.mark.parametrize("module", ["service", "search", "sources", "ops", "render", "tools", "cli"])
def test_only_the_store_touches_the_connection(module: str) -> None:
    """No `.db`, `.execute` or `sqlite3` outside cairn/blz/store.py: services call named store methods."""
    bad = [f"{module}.py:{node.lineno}: .{node.attr}" for node in ast.walk(_tree(module))
           if isinstance(node, ast.Attribute) and node.attr in ("db", "execute", "executemany", "executescript")]
    bad += [f"{module}.py:{node.lineno}: import sqlite3" for node in ast.walk(_tree(module))
            if isinstance(node, ast.Import) and any(a.name == "sqlite3" for a in node.names)]
    assert bad == []


def _imports(module: str) -> set[str]:
    """Every cairn.blz module ``module`` imports, at module level or inside a function."""
    out = set()
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "cairn.blz":
                out |= {a.name for a in node.names}
            elif node.module.startswith("cairn.blz."):
                out.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[2] for a in node.names if a.name.startswith("cairn.blz.")}
    return out


def test_no_import_cycle_between_blz_modules() -> None:
    modules = [p.stem for p in BLZ.glob("*.py") if p.stem != "__init__"]
    graph = {m: _imports(m) & set(modules) for m in modules}
    assert "cli" not in graph["tools"] and "cli" not in graph["render"] and "tools" not in graph["render"]

    def visit(node: str, path: list[str]) -> None:
        for nxt in graph[node]:
            assert nxt not in path, " -> ".join([*path, nxt])
            visit(nxt, [*path, nxt])

    for m in modules:
        visit(m, [m])
