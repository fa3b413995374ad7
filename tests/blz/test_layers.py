"""Issue 14 for blz: the store is the only module that runs SQL, and the surfaces import no cycle."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

BLZ = Path(__file__).resolve().parents[2] / "src" / "cairn_servers" / "blz"


def _tree(name: str) -> ast.Module:
    return ast.parse((BLZ / f"{name}.py").read_text(), filename=f"{name}.py")


@pytest.mark.parametrize("module", ["service", "search", "sources", "ops", "render", "tools", "cli", "versions"])
def test_only_the_store_touches_the_connection(module: str) -> None:
    """No `.db`, `.execute` or `sqlite3` outside cairn_servers/blz/store.py: services call named store methods."""
    bad = [f"{module}.py:{node.lineno}: .{node.attr}" for node in ast.walk(_tree(module))
           if isinstance(node, ast.Attribute) and node.attr in ("db", "execute", "executemany", "executescript")]
    bad += [f"{module}.py:{node.lineno}: import sqlite3" for node in ast.walk(_tree(module))
            if isinstance(node, ast.Import) and any(a.name == "sqlite3" for a in node.names)]
    assert bad == []


def _imports(module: str) -> set[str]:
    """Every cairn_servers.blz module ``module`` imports, at module level or inside a function."""
    out = set()
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "cairn_servers.blz":
                out |= {a.name for a in node.names}
            elif node.module.startswith("cairn_servers.blz."):
                out.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[2] for a in node.names if a.name.startswith("cairn_servers.blz.")}
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


def test_mcp_handlers_are_plain_functions(tmp_path: Path, data_root: Path) -> None:
    """A tool's handler is called directly, no server or closure: the same answer and refusal as over MCP."""
    from cairn_servers.blz import sources, tools
    from cairn_servers.blz.ops import OPS
    from cairn_servers.blz.store import Store
    from cairn_servers.core.errors import InvalidInput, NotFound

    doc = tmp_path / "guide.txt"
    doc.write_text("# Guide\n\n## Hooks\n\nHooks text.\n")
    store = Store(data_root)
    try:
        sources.add(store, "guide", str(doc))
        docs = tools.Docs(str(data_root), store)
        answer = tools.call_op(docs, OPS["find"], {"query": "hooks", "maxResults": 1}, None)  # type: ignore[arg-type]
        found = answer.structured
        assert found is not None
        assert [h["lines"] for h in found["hits"]] == ["3-5"] and found["hits"][0]["sourceUrl"].startswith("file://<local>/")
        assert answer.content == [{"type": "text", "text": json.dumps(found, ensure_ascii=False)}]  # the same answer
        with pytest.raises(InvalidInput, match=r"^Invalid parameter for 'toc': maxDepth: 0 is less than the minimum of 1$"):
            tools.check_op(OPS["toc"], {"source": "guide", "maxDepth": 0})
        with pytest.raises(NotFound, match="No source named 'ghost'"):
            tools.call_op(docs, OPS["toc"], {"source": "ghost"}, None)  # type: ignore[arg-type]
        stats = tools.run_command(docs, {"command": "stats"}, None)  # type: ignore[arg-type]
        assert stats["exitCode"] == 0 and stats["stdout"].startswith("Total sources: 1\n")
    finally:
        store.close()
