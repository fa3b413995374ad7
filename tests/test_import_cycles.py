"""No import cycles in src/cairn_servers: the import graph, read from the source's AST, has no cycle.

Every ``import``/``from ... import`` of a cairn module is an edge, of one of three kinds, kept apart:

* ``module``: run when the module is imported (at module level, including inside ``try``/``if``);
* ``function``: inside a function or method, run when it is called (the start-up discipline moves
  heavy imports there, so they still count: a cycle through them is a cycle in the design);
* ``typing``: under ``if TYPE_CHECKING:``, read by mypy only.

``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``; the package
a module lives in is not an edge of its own. Names built at run time (``importlib.import_module``,
the Lua worker's job runner) are not read. Every module of the package is a node, not only those the
command-line entry points reach.

Run it as the tests (``.venv/bin/python -m pytest -q tests/test_import_cycles.py``), or as a script for a
report of the graph: modules, edges of each kind, and the cycles found counting each kind in turn
(``.venv/bin/python tests/test_import_cycles.py``).
"""

from __future__ import annotations

import ast
import functools
import pkgutil
from pathlib import Path

import cairn_servers

SRC = Path(cairn_servers.__file__).resolve().parent
KINDS = ("module", "function", "typing")
Graph = dict[str, set[str]]

# No cycle is tolerated, of any kind: the last ones (blz cli<->tools and brk cli<->cli_serve, removed by
# the operations refactor, and the type-only Session <-> Server one in the MCP core, removed by
# cairn_servers/mcp/protocols.py) were listed as strict expected failures until they were gone.


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in SRC.rglob("*.py")}


def _target(name: str) -> str | None:
    """The cairn module ``name`` loads (the longest prefix that is a module), or None."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


@functools.cache
def _imports(module: str, path: Path) -> dict[str, frozenset[str]]:
    """kind -> the cairn modules ``module`` imports that way."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: dict[str, set[str]] = {kind: set() for kind in KINDS}

    def names(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        base = node.module or ""
        if node.level:
            parent = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*parent, base] if base else parent)
        return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]

    def visit(node: ast.AST, kind: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = kind
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and kind == "module":
                inner = "function"
            elif isinstance(child, ast.If) and _is_type_checking(child):
                for stmt in child.body:
                    visit(ast.Module(body=[stmt], type_ignores=[]), "typing")
                for stmt in child.orelse:
                    visit(ast.Module(body=[stmt], type_ignores=[]), kind)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for name in names(child):
                    target = _target(name) if name.startswith("cairn_servers") else None
                    if target and target != module:
                        found[inner].add(target)
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), "module")
    return {kind: frozenset(targets) for kind, targets in found.items()}


def _graph(*kinds: str) -> Graph:
    graph: Graph = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        found = _imports(module, path)
        for kind in kinds:
            graph[module] |= found[kind]
    return graph


def _cycles(graph: Graph) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def _describe(cycle: frozenset[str], graph: Graph) -> str:
    edges = [f"{a} -> {b}" for a in sorted(cycle) for b in sorted(graph[a] & cycle)]
    return "{" + ", ".join(sorted(cycle)) + "}: " + "; ".join(edges)


def test_the_graph_is_read_from_the_source() -> None:
    found = _imports("cairn_servers.ctx.service", MODULES["cairn_servers.ctx.service"])
    assert "cairn_servers.ctx.sync" in found["module"] and "cairn_servers.core.errors" in found["module"]
    assert "cairn_servers.search.embed" in found["function"]
    assert "cairn_servers.ctx.luaproc" in _imports("cairn_servers.ctx.scripts", MODULES["cairn_servers.ctx.scripts"])["typing"]
    # a relative import inside a package, and a package importing its own submodule
    assert "cairn_servers.ctx.connectors.filesystem" in _imports(
        "cairn_servers.ctx.connectors", MODULES["cairn_servers.ctx.connectors"])["function"]
    assert len(MODULES) > 60


def test_every_module_of_the_package_is_a_node() -> None:
    """The nodes are every module ``pkgutil`` finds in the package (the entry points' reach is not
    enough: a cycle among modules only a test or a server imports is still a cycle)."""
    walked = {"cairn_servers"} | {info.name for info in pkgutil.walk_packages(cairn_servers.__path__, "cairn_servers.")}
    assert walked == set(MODULES)
    assert {"cairn_servers.brk.addresses", "cairn_servers.ctx.connectors.git", "cairn_servers.mcp.http", "cairn_servers.search.embed",
            "cairn_servers.demo"} <= set(MODULES)


def test_module_level_imports_have_no_cycle() -> None:
    graph = _graph("module")
    assert [_describe(c, graph) for c in _cycles(graph)] == []


def test_no_cycle_counting_function_level_imports() -> None:
    graph = _graph("module", "function")
    assert [_describe(c, graph) for c in _cycles(graph)] == []


def test_no_cycle_counting_type_only_imports() -> None:
    """Not even among imports that never run: an import-graph tool that reads ``TYPE_CHECKING`` blocks
    reports those too."""
    graph = _graph(*KINDS)
    assert [_describe(c, graph) for c in _cycles(graph)] == []


def test_type_only_imports_are_read() -> None:
    """The type-only edges are in the graph, including the ``TYPE_CHECKING = False`` idiom of the
    stdio start-up path: the MCP core's types point one way, session -> protocols -> context."""
    typing_of = {m: _imports(m, MODULES[m])["typing"] for m in (
        "cairn_servers.mcp.methods", "cairn_servers.mcp.session", "cairn_servers.mcp.server", "cairn_servers.mcp.context")}
    assert "cairn_servers.mcp.protocols" in typing_of["cairn_servers.mcp.methods"]
    assert "cairn_servers.mcp.protocols" in typing_of["cairn_servers.mcp.session"]
    assert {"cairn_servers.mcp.protocols", "cairn_servers.mcp.session"} <= typing_of["cairn_servers.mcp.server"]
    assert not typing_of["cairn_servers.mcp.context"]  # its session is a Protocol of its own (Channel)
    assert "cairn_servers.mcp.context" in _imports("cairn_servers.mcp.protocols", MODULES["cairn_servers.mcp.protocols"])["module"]


def test_mcp_protocols_is_type_only() -> None:
    """``cairn_servers.mcp.protocols`` imports ``typing``: no module may import it where it runs (it would put
    typing on the stdio servers' start-up path, tests/mcp/test_startup.py)."""
    runtime = sorted(m for m, p in MODULES.items() if "cairn_servers.mcp.protocols" in
                     _imports(m, p)["module"] | _imports(m, p)["function"])
    typed = sorted(m for m, p in MODULES.items() if "cairn_servers.mcp.protocols" in _imports(m, p)["typing"])
    assert runtime == []
    assert {"cairn_servers.mcp.methods", "cairn_servers.mcp.server", "cairn_servers.mcp.session"} <= set(typed)


def _report() -> str:
    lines = [f"{len(MODULES)} modules under {SRC}"]
    for kind in KINDS:
        edges = sum(len(_imports(m, p)[kind]) for m, p in MODULES.items())
        lines.append(f"{edges} {kind} edges")
    for kinds in (("module",), ("module", "function"), KINDS):
        graph = _graph(*kinds)
        cycles = _cycles(graph)
        lines.append(f"cycles counting {' + '.join(kinds)} imports: {len(cycles)}")
        lines.extend(f"  {_describe(c, graph)}" for c in cycles)
    return "\n".join(lines)


if __name__ == "__main__":
    print(_report())
