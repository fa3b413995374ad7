"""Hardening round 3: a stdio message line is capped on all three servers.

A 100 MB line used to be read whole and parsed (2.6 GB on each server). Now a line past the limit
(``$CAIRN_MCP_MAX_LINE``, default 8 MiB) is read in bounded pieces and discarded, answered with
-32600 carrying the request's id, and the next line is served. ``make test`` sends 24 MB lines;
``CAIRN_STRESS=1`` the audit's 100 MB.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cairn_servers.mcp.stdio import MAX_LINE

from ._servers import STRESS, StdioServer, spawn_blz_stdio, spawn_brk_stdio, spawn_ctx_stdio

pytestmark = pytest.mark.timeout(600 if STRESS else 180)
MB = 1_000_000
BIG = (100 if STRESS else 24) * MB


def _spawn(name: str, request: pytest.FixtureRequest, workdir: Path, **env: str) -> StdioServer:
    if name == "blz":
        server = spawn_blz_stdio(request.getfixturevalue("blz_data"), workdir / "blz", **env)
    elif name == "brk":
        server = spawn_brk_stdio(request.getfixturevalue("brk_out"), workdir / "brk", **env)
    else:
        server = spawn_ctx_stdio(request.getfixturevalue("ctx_config"), workdir / "ctx", **env)
    server.initialize()
    return server


def _peak_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def _send_in_background(server: StdioServer, data: bytes) -> threading.Thread:
    def send() -> None:
        assert server.proc.stdin is not None
        server.proc.stdin.write(data)
        server.proc.stdin.flush()

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("name", ["blz", "brk", "ctx"])
def test_an_oversize_line_is_discarded_unread_and_answered(name: str, request: pytest.FixtureRequest,
                                                           server_workdir: Path) -> None:
    server = _spawn(name, request, server_workdir)
    try:
        assert "result" in server.request("ping")
        before = _peak_kb(server.proc.pid)
        head = b'{"jsonrpc": "2.0", "id": "big-1", "method": "tools/call", "params": {"name": "x", "arguments": {"q": "'
        line = head + b"a" * (BIG - len(head) - 4) + b'"}}}\n'
        t0 = time.monotonic()
        sender = _send_in_background(server, line)
        reply = server.wait_for("big-1", timeout=120)
        sender.join(120)
        assert reply["error"]["code"] == -32600, reply
        assert f"at most {MAX_LINE} bytes" in reply["error"]["message"], reply
        # The next line is served as usual, and a line without a readable id is answered with id null.
        assert server.request("ping")["result"] == {}
        _send_in_background(server, b"[" + b"1," * (MAX_LINE // 2 + 10) + b"1]\n").join(60)
        assert server.recv(60) == {"jsonrpc": "2.0", "id": None, "error": reply["error"]}
        assert server.request("tools/list")["result"]["tools"]
        grew_mb = (_peak_kb(server.proc.pid) - before) / 1024
        seconds = time.monotonic() - t0
        # The line is never held whole: peak RSS grows by about the limit, not by the line's size.
        assert grew_mb < 48, f"{name}: peak RSS grew {grew_mb:.0f} MiB for a {BIG / MB:.0f} MB line"
        print(f"{name}: {BIG / MB:.0f} MB line refused in {seconds:.1f} s, peak RSS +{grew_mb:.1f} MiB")
        assert "over the" in server.stderr_tail() and "Traceback" not in server.stderr_tail()
    finally:
        assert server.close() == 0


def test_the_limit_is_configurable(request: pytest.FixtureRequest, server_workdir: Path) -> None:
    server = _spawn("brk", request, server_workdir / "small", CAIRN_MCP_MAX_LINE="64K")
    try:
        fits = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "get_vecid_to_indexes", "arguments": {"id": "x" * 60_000}}}
        server.send(fits)
        reply: dict[str, Any] = server.wait_for(1, timeout=60)
        assert "result" in reply, reply  # 60 KB fits under 64 KiB
        server.send({**fits, "id": 2, "params": {"name": "x", "arguments": {"id": "x" * 70_000}}})
        reply = server.wait_for(2, timeout=60)
        assert reply["error"]["code"] == -32600 and "at most 65536 bytes" in reply["error"]["message"]
        assert server.request("ping")["result"] == {}
    finally:
        assert server.close() == 0


@pytest.mark.parametrize("value", ["abc", "12", "-5", "8X", "99999999999999G"])
def test_a_bad_limit_is_a_clear_error_at_start(value: str, blz_data: Path, server_workdir: Path) -> None:
    import subprocess
    import sys

    from ._servers import server_env

    env = {**server_env(server_workdir / "env"), "BLZ_DATA_DIR": str(blz_data), "CAIRN_MCP_MAX_LINE": value}
    proc = subprocess.run([sys.executable, "-m", "cairn_servers.blz.cli", "mcp"], input=b"", env=env,
                          capture_output=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.decode().strip() == (f"blz: error: $CAIRN_MCP_MAX_LINE must be a size in bytes of at least 1024 "
                                            f"(e.g. 8388608 or 8M), not {value!r}.")
    assert proc.stdout == b""
