"""Start-up (issue 12): what the real `blz mcp`, `brk mcp` and `ctx serve mcp --stdio` have imported
when they answer `initialize`. Timing is measured by benchmarks/mcp_core.py (a ratio to `python -c pass`); this test
pins the cause, deterministically: the modules that made start-up slow stay off the path until the
first reply is written (dataclasses pulls in inspect/ast/dis/tokenize, argparse's help formatter
shutil/bz2/lzma, pathlib urllib.parse/ipaddress; numpy and the stores load after the reply)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# Runs the real CLI entry point, with the protocol writer wrapped to record sys.modules at the moment
# the initialize reply goes out (the spy itself imports nothing new).
SPY = """
import sys
import cairn_servers.mcp.stdio as stdio
seen = []
real = stdio._Writer.__call__
def spy(self, message):
    if not seen and isinstance(message, dict) and message.get("id") == 1:
        seen.append(1)
        sys.stderr.write("MODULES " + " ".join(sorted(sys.modules)) + "\\n")
    real(self, message)
stdio._Writer.__call__ = spy
from cairn_servers.{server}.cli import main
sys.argv[1:] = sys.argv[2:]
sys.exit(main())
"""

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}

# Never imported before the first reply (any of them costs milliseconds there).
SLOW = {"traceback", "base64", "ctypes", "importlib.metadata", "numpy", "sqlite3"}
LEAN_TYPING = {"typing"}  # blz and brk: no typing before the reply either
LEAN = {"dataclasses", "inspect", "ast", "argparse", "shutil", "bz2", "lzma"}  # blz and brk only
EXTRA = {"blz": {"pathlib", "urllib.parse", "cairn_servers.blz.store", "cairn_servers.blz.search"},
         # ctx must read its TOML config first (tomllib, dataclasses, pathlib and typing stay), but not
         # open the service: store, retrieval, SQLite, or the Lua sandbox when no Lua tool is declared.
         "ctx": {"cairn_servers.ctx.service", "cairn_servers.ctx.store", "cairn_servers.ctx.retrieval", "cairn_servers.ctx.sync",
                 "cairn_servers.ctx.scripts", "cairn_servers.ctx.lua", "lupa", "cairn_servers.ctx.stores", "cairn_servers.ctx.store_pg", "psycopg",
                 # `serve mcp --stdio` is parsed without argparse (the whole CLI's parser, derived from the
                 # operations, would cost its first reply more than any other step but the config)
                 "argparse", "shutil", "bz2", "lzma"},
         # the operations' tools are declared after the reply (Server.defer_tools)
         "brk": {"pathlib", "urllib.parse", "cairn_servers.brk.catalog", "cairn_servers.brk.compute", "cairn_servers.brk.reader",
                 "cairn_servers.core.ops", "cairn_servers.brk.ops", "cairn_servers.brk.interface"}}


def _modules_at_initialize(server: str, args: list[str], env: dict[str, str]) -> tuple[set[str], list[dict[str, Any]]]:
    code = SPY.replace("{server}", server)
    proc = subprocess.run([sys.executable, "-c", code, "--", *args], input=json.dumps(INIT) + "\n" + json.dumps(LIST)
                          + "\n", capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if x.startswith("MODULES "))
    return set(line.split()[1:]), [json.loads(x) for x in proc.stdout.splitlines()]


@pytest.fixture(scope="module")
def ctx_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("ctx_startup")
    subprocess.run([sys.executable, "-m", "cairn_servers.ctx.cli", "init", "--config", str(base / "ctx.toml")],
                   check=True, capture_output=True, cwd=base, timeout=60)
    return base / "ctx.toml"


@pytest.mark.parametrize("server", ["blz", "brk", "ctx"])
def test_initialize_is_answered_before_heavy_imports(server: str, brk_out: Path, ctx_config: Path,
                                                     tmp_path: Path) -> None:
    args = {"blz": ["mcp"], "brk": ["mcp", "--out", str(brk_out)],
            "ctx": ["serve", "mcp", "--stdio", "--config", str(ctx_config)]}[server]
    env = dict(os.environ, BLZ_DATA_DIR=str(tmp_path / "blz"))
    modules, replies = _modules_at_initialize(server, args, env)
    assert "cairn_servers.mcp.session" in modules  # the spy saw the real server
    lean = LEAN | LEAN_TYPING if server != "ctx" else set()
    assert sorted(modules & (SLOW | EXTRA[server] | lean)) == []
    # ...and the server still works once the deferred set-up ran: tools are listed.
    assert [r["id"] for r in replies] == [1, 2] and replies[1]["result"]["tools"]


def test_ctx_tools_are_its_operations() -> None:
    """ctx's MCP tools are its operations (cairn_servers/ctx/ops.py), declared without importing the service:
    the descriptions are the operations' docstrings, the schemas their declarations."""
    from cairn_servers.ctx.ops import OPS

    assert [op.mcp for op in OPS.on("mcp")] == ["search", "get", "sources"]
    # the agent operations are CLI and HTTP only: over MCP the agents are prompts
    assert [op.name for op in OPS if op.mcp is None] == ["agent_list", "agent_show"]
    assert OPS["search"].description == "Search indexed documents by keyword, semantic, or hybrid query."
    assert OPS["search"].input_schema()["required"] == ["query"]


@pytest.mark.parametrize("argv", [
    ["serve", "mcp", "--stdio"],
    ["serve", "mcp", "--stdio", "--config", "x/ctx.toml"],
    ["serve", "mcp", "--config=x/ctx.toml", "--stdio", "--log-level", "debug"],
    ["serve", "mcp", "--log-level=info", "--stdio"],
])
def test_ctx_stdio_fast_path_parses_as_argparse_does(argv: list[str]) -> None:
    """`ctx serve mcp --stdio` skips argparse; what it hands the command is what the parser would."""
    from cairn_servers.ctx.cli import _fast_stdio, _parser

    fast, slow = _fast_stdio(argv), _parser().parse_args(argv)
    assert fast is not None
    assert vars(fast) == {k: v for k, v in vars(slow).items() if k != "op"}


@pytest.mark.parametrize("argv", [
    ["serve", "mcp"],  # HTTP
    ["serve", "mcp", "--stdio", "--help"],
    ["serve", "mcp", "--stdio", "--stdio"],
    ["serve", "mcp", "--stdio", "--config"],
    ["serve", "mcp", "--stdio", "--config", "a", "--config", "b"],
    ["serve", "mcp", "--stdio", "--conf", "a"],  # argparse's abbreviations: left to argparse
    ["serve", "mcp", "--stdio", "--json"],
    ["--config", "a", "serve", "mcp", "--stdio"],
    ["serve", "mcp", "--stdio", "--bind", "127.0.0.1:1"],
    ["search", "q"],
])
def test_ctx_anything_else_goes_to_argparse(argv: list[str]) -> None:
    from cairn_servers.ctx.cli import _fast_stdio

    assert _fast_stdio(argv) is None


def test_blz_mcp_search_path_stays_lean(tmp_path: Path) -> None:
    """Issue 14 (RSS of `blz mcp`): once its warm-up has run and a find is answered, the server holds
    the search path only: not the parser (cairn_servers.blz.llmstxt, whose dataclasses import inspect/ast/dis:
    ~1.5 MiB), the registry, or the ctypes / queue modules the malloc helpers and the worker pool
    used to load (~0.45 MiB)."""
    code = SPY.replace("{server}", "blz").replace('message.get("id") == 1', 'message.get("id") == 3')
    find = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "find", "arguments": {"query": "hooks"}}}
    env = dict(os.environ, BLZ_DATA_DIR=str(tmp_path / "blz"))
    proc = subprocess.run([sys.executable, "-c", code, "--", "mcp"], capture_output=True, text=True, env=env,
                          timeout=120, input="\n".join(json.dumps(m) for m in (INIT, LIST, find)) + "\n")
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if x.startswith("MODULES "))
    modules = set(line.split()[1:])
    assert {"cairn_servers.blz.search", "cairn_servers.blz.service", "cairn_servers.blz.store", "sqlite3"} <= modules
    heavy = {"cairn_servers.blz.llmstxt", "cairn_servers.blz.registry", "cairn_servers.blz.lang", "dataclasses", "inspect", "ast",
             "ctypes", "struct", "queue"}  # (heapq: difflib, which the typo fallback of this empty store loads)
    assert sorted(modules & heavy) == []
    answer = json.loads(proc.stdout.splitlines()[-1])
    assert answer["id"] == 3 and answer["result"]["structuredContent"]["hits"] == []
