"""`--log-level` / `BLZ_LOG` / `CTX_LOG` / `BRK_LOG` (issue 12): diagnostics on stderr, never on stdout,
from the real `blz mcp`, `ctx serve mcp --stdio`, `brk mcp` processes and the real `brk serve` and
`ctx serve mcp` HTTP servers on 127.0.0.1. At debug every request is logged with its method, tool name
and duration; at info start-up and shutdown only; a bad level is a clear error (exit 2)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from ._http import free_port

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (ERROR|WARN|INFO|DEBUG) (blz|ctx|brk): .+$")


@pytest.fixture(scope="module")
def ctx_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("ctx_log")
    (base / "docs").mkdir()
    (base / "docs" / "a.md").write_text("# Deploy\n\nBlue-green releases.\n")
    subprocess.run([sys.executable, "-m", "cairn_servers.ctx.cli", "init", "--config", str(base / "ctx.toml")],
                   check=True, capture_output=True, cwd=base, timeout=60)
    return base / "ctx.toml"


def _servers(brk_out: Path, ctx_config: Path, tmp_path: Path) -> dict[str, tuple[list[str], str, str]]:
    """server -> (command, env variable, a read-only tool to call)."""
    py = [sys.executable, "-m"]
    return {
        "blz": ([*py, "cairn_servers.blz.cli", "mcp"], "BLZ_LOG", "list-sources"),
        "ctx": ([*py, "cairn_servers.ctx.cli", "serve", "mcp", "--stdio", "--config", str(ctx_config)], "CTX_LOG", "sources"),
        "brk": ([*py, "cairn_servers.brk.cli", "mcp", "--out", str(brk_out)], "BRK_LOG", "get_index_count"),
    }


def _session(cmd: list[str], tool: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    lines = [INIT, INITIALIZED, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                 "params": {"name": tool, "arguments": {}}}]
    return subprocess.run(cmd, input="".join(json.dumps(m) + "\n" for m in lines), capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.parametrize("server", ["blz", "ctx", "brk"])
def test_stdio_log_levels(server: str, brk_out: Path, ctx_config: Path, tmp_path: Path) -> None:
    cmd, var, tool = _servers(brk_out, ctx_config, tmp_path)[server]
    env = dict(os.environ, BLZ_DATA_DIR=str(tmp_path / "blz"))
    env.pop(var, None)

    # --log-level debug: start-up, each request with its duration, shutdown; stdout stays JSON-RPC only.
    proc = _session([*cmd, "--log-level", "debug"], tool, env)
    assert proc.returncode == 0, proc.stderr
    replies = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["id"] for r in replies] == [1, 2] and not replies[1]["result"].get("isError")
    ours = [line for line in proc.stderr.splitlines() if LINE.match(line)]
    assert any(f"INFO {server}: serving MCP on stdio" in line for line in ours), proc.stderr
    assert any(f"INFO {server}: stdin closed" in line for line in ours), proc.stderr
    assert re.search(rf"DEBUG {server}: initialize \(id 1\) ok \d+\.\d\d ms", proc.stderr), proc.stderr
    assert re.search(rf"DEBUG {server}: tools/call {re.escape(tool)} \(id 2\) ok \d+\.\d\d ms", proc.stderr)

    # The variable, at info: start-up and shutdown, no per-request lines.
    proc = _session(cmd, tool, {**env, var: "INFO"})
    assert proc.returncode == 0, proc.stderr
    assert f"INFO {server}: serving MCP on stdio" in proc.stderr and "DEBUG" not in proc.stderr
    assert len(proc.stdout.splitlines()) == 2

    # Default (warn): nothing of ours.
    proc = _session(cmd, tool, env)
    assert proc.returncode == 0 and not any(LINE.match(line) for line in proc.stderr.splitlines()), proc.stderr

    # A bad level, from the flag or the variable: a clear error, exit 2, nothing on stdout.
    for args, extra in (([*cmd, "--log-level", "loud"], {}), (cmd, {var: "verbose"})):
        proc = _session(args, tool, {**env, **extra})
        assert proc.returncode == 2 and proc.stdout == ""
        assert "Unknown log level" in proc.stderr and "error, warn, info, debug" in proc.stderr
        assert "Traceback" not in proc.stderr


def _wait(port: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError("server did not start")


def _mcp_post(url: str, msg: dict[str, Any], session: str | None = None) -> httpx.Response:
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    if session:
        headers["Mcp-Session-Id"] = session
    return httpx.post(url, json=msg, headers=headers, timeout=30)


@pytest.mark.parametrize("server", ["brk", "ctx"])
def test_http_servers_log_requests_at_debug(server: str, brk_out: Path, ctx_config: Path) -> None:
    port = free_port()
    if server == "brk":
        cmd = [sys.executable, "-m", "cairn_servers.brk.cli", "serve", "--out", str(brk_out), "--bind", f"127.0.0.1:{port}",
               "--log-level", "debug"]
        tool = "get_index_count"
    else:
        cmd = [sys.executable, "-m", "cairn_servers.ctx.cli", "serve", "mcp", "--config", str(ctx_config), "--bind",
               f"127.0.0.1:{port}"]
        tool = "sources"
    env = dict(os.environ, CTX_LOG="debug")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        _wait(port, proc)
        url = f"http://127.0.0.1:{port}/mcp"
        init = _mcp_post(url, INIT)
        assert init.status_code == 200
        session = init.headers.get("mcp-session-id")
        _mcp_post(url, INITIALIZED, session)
        r = _mcp_post(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                            "params": {"name": tool, "arguments": {}}}, session)
        assert r.status_code == 200
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out == ""
    assert re.search(rf"INFO {server}: serving HTTP on 127\.0\.0\.1:{port}", err), err
    assert re.search(rf"DEBUG {server}: POST /mcp \[tools/call {tool} \(id 2\)\] 200 \d+\.\d\d ms", err), err
    assert f"INFO {server}: HTTP server stopped" in err


def test_http_server_bad_level_is_a_clear_error(brk_out: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "cairn_servers.brk.cli", "serve", "--out", str(brk_out), "--bind",
                           f"127.0.0.1:{free_port()}", "--log-level", "chatty"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "Unknown log level 'chatty'" in proc.stderr and "Traceback" not in proc.stderr
