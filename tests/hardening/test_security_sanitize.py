"""Nothing a client or a log sees shows the user's home directory or a credential: ctx and brk CLI
output (JSON and errors), HTTP responses, MCP results and server logs, with every file under $HOME
and credentials in a git remote URL, a bitcoind RPC URL and the server token.

(blz's CLI and MCP outputs are covered in test_security_blz.py.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from ._servers import HttpServer, StdioServer, free_port, server_env

pytestmark = pytest.mark.timeout(180)

GIT_SECRET = "ghp_SeCrEtToKeN123"
RPC_SECRET = "rpcPa55word"
TOKEN = "srv-token-0123456789"
FAILING_TOOL = """
tool = {name = "boom", description = "fails", parameters = {}}
function tool.execute(params, context)
  error("cannot open " .. context.config.where)
end
"""


def _leaks(text: str, home: Path) -> list[str]:
    return [s for s in (str(home), GIT_SECRET, RPC_SECRET, TOKEN) if s in text]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home directory holding a ctx knowledge base (with a failing git remote that carries a token
    and a failing Lua tool) and a brk output directory."""
    from cairn_servers.brk.sample import write_sample

    home = tmp_path_factory.mktemp("home")
    kb = home / "kb"
    (kb / "docs").mkdir(parents=True)
    (kb / "docs" / "deploy.md").write_text("# Deploy\n\nThe deploy procedure uses blue green releases.\n")
    (kb / "boom.lua").write_text(FAILING_TOOL)
    (kb / "ctx.toml").write_text(
        '[db]\npath = "kb.sqlite"\n[embedding]\nprovider = "disabled"\n'
        '[connectors.filesystem.docs]\nroot = "docs"\n'
        f'[connectors.git.priv]\nurl = "https://alice:{GIT_SECRET}@127.0.0.1:9/org/repo.git"\n'
        f'[tools.script.boom]\npath = "boom.lua"\nwhere = "{home}/kb/private/notes.txt"\n')
    write_sample(home / "blocks", 120, seed=4)
    return home


def _env(home: Path, **extra: str) -> dict[str, str]:
    return dict(server_env(home / "work", HOME=str(home), **extra))


def _run(home: Path, argv: list[str], **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], env=_env(home, **extra), capture_output=True, text=True,
                          timeout=120, cwd=home)


def test_ctx_cli_output_and_errors(home: Path) -> None:
    cfg = str(home / "kb" / "ctx.toml")
    runs = [_run(home, ["cairn_servers.ctx.cli", "sync", "all", "--config", cfg, "--json"]),
            _run(home, ["cairn_servers.ctx.cli", "sources", "--config", cfg, "--json"]),
            _run(home, ["cairn_servers.ctx.cli", "stats", "--config", cfg, "--json"]),
            _run(home, ["cairn_servers.ctx.cli", "search", "deploy", "--config", cfg, "--json"]),
            _run(home, ["cairn_servers.ctx.cli", "get", "0" * 32, "--config", cfg, "--json"]),
            _run(home, ["cairn_servers.ctx.cli", "tool", "test", "boom", "--config", cfg, "--json"]),
            _run(home, ["cairn_servers.ctx.cli", "sources", "--config", str(home / "kb" / "missing.toml")]),
            _run(home, ["cairn_servers.ctx.cli", "sources", "--config", cfg, "--text"])]
    assert [r.returncode for r in runs] == [5, 0, 0, 0, 3, 8, 3, 0], [r.stderr for r in runs]
    assert "https://***@127.0.0.1:9" in runs[0].stdout  # the failing remote is reported, masked
    assert "~/kb/private/notes.txt" in runs[5].stderr
    for r in runs:
        assert not _leaks(r.stdout + r.stderr, home), (r.args, r.stdout[-500:], r.stderr[-500:])


def test_ctx_http_mcp_and_logs(home: Path) -> None:
    cfg = str(home / "kb" / "ctx.toml")
    port = free_port()
    server = HttpServer([sys.executable, "-m", "cairn_servers.ctx.cli", "serve", "mcp", "--config", cfg, "--bind",
                         f"127.0.0.1:{port}"], _env(home, CTX_AUTH_TOKEN=TOKEN), port, home / "work" / "ctx-http",
                        "/health", cwd=home)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    seen: list[str] = []
    try:
        with httpx.Client(base_url=server.url, headers=auth, timeout=30) as c:
            for method, path, body in [("GET", "/tools/sources", None), ("POST", "/tools/search", {"query": "deploy"}),
                                       ("POST", "/tools/get", {"id": "0" * 32}), ("POST", "/tools/boom", {}),
                                       ("GET", "/tools/list", None), ("GET", "/openapi.json", None),
                                       ("POST", "/tools/nope", {}), ("POST", "/tools/search", {"query": 5}),
                                       ("GET", "/tools/sources", None)]:
                r = c.request(method, path, json=body)
                seen.append(f"{path} {r.status_code} {r.text}")
            unauth = httpx.get(server.url + "/tools/sources", headers={"Authorization": "Bearer wrong"})
            seen.append(unauth.text)
    finally:
        server.close()
    seen.append(server.stderr_tail(1_000_000))
    assert any("/tools/boom 500" in s or "/tools/boom 4" in s for s in seen), seen
    for text in seen:
        assert not _leaks(text, home), text[-800:]

    stdio = StdioServer([sys.executable, "-m", "cairn_servers.ctx.cli", "serve", "mcp", "--stdio", "--config", cfg],
                        _env(home), home / "work" / "ctx-stdio", cwd=home)
    try:
        stdio.initialize()
        replies = [stdio.request("tools/call", {"name": name, "arguments": args}) for name, args in
                   [("sources", {}), ("search", {"query": "deploy"}), ("get", {"id": "0" * 32}), ("boom", {})]]
        replies.append(stdio.request("resources/list"))
    finally:
        stdio.close()
    text = json.dumps(replies) + stdio.stderr_tail(1_000_000)
    assert "filesystem:docs" in text and not _leaks(text, home), text[-800:]


def test_brk_cli_http_mcp_and_logs(home: Path) -> None:
    out = home / "brk-out"
    blocks = home / "blocks"
    runs = [_run(home, ["cairn_servers.brk.cli", "index", "--blocks-dir", str(blocks), "--out", str(out), "--format", "json"]),
            _run(home, ["cairn_servers.brk.cli", "status", "--out", str(out), "--format", "json"]),
            _run(home, ["cairn_servers.brk.cli", "index", "--blocks-dir", str(home / "nope"), "--out", str(out)]),
            _run(home, ["cairn_servers.brk.cli", "index", "--blocks-dir", str(blocks), "--out", str(home / "kb" / "ctx.toml")]),
            _run(home, ["cairn_servers.brk.cli", "fetch", "--rpc-url", f"http://bob:{RPC_SECRET}@127.0.0.1:9/",
                        "--blocks-dir", str(home / "fetched"), "--timeout", "2"]),
            _run(home, ["cairn_servers.brk.cli", "status", "--out", str(home / "empty")])]
    assert runs[0].returncode == 0 and runs[1].returncode == 0, [r.stderr for r in runs]
    assert all(r.returncode != 0 for r in runs[2:]), [(r.returncode, r.stderr) for r in runs]
    assert '"~/brk-out"' in runs[1].stdout
    for r in runs:
        assert "Traceback" not in r.stderr and not _leaks(r.stdout + r.stderr, home), (r.args, r.stdout[-300:], r.stderr)

    port = free_port()
    server = HttpServer([sys.executable, "-m", "cairn_servers.brk.cli", "serve", "--out", str(out), "--bind",
                         f"127.0.0.1:{port}"], _env(home), port, home / "work" / "brk-http", "/health", cwd=home)
    seen: list[str] = []
    try:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            for path in ["/health", "/version", "/api/vecs/indexes", "/api/vecs/query?index=nope&ids=x",
                         "/api/vecs/query?index=height&ids=difficulty&count=3&format=csv", "/openapi.json",
                         "/api/vecs/query?index=height&ids=difficulty&from=abc"]:
                got = c.get(path)
                seen.append(f"{path} {got.status_code} {got.text}")
            mcp = c.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                         headers={"Accept": "application/json, text/event-stream"})
            seen.append(mcp.text)
    finally:
        server.close()
    seen.append(server.stderr_tail(1_000_000))
    for text in seen:
        assert not _leaks(text, home), text[-800:]

    stdio = StdioServer([sys.executable, "-m", "cairn_servers.brk.cli", "mcp", "--out", str(out)], _env(home),
                        home / "work" / "brk-stdio", cwd=home)
    try:
        stdio.initialize()
        tools = [t["name"] for t in stdio.request("tools/list")["result"]["tools"]]
        replies = [stdio.request("tools/call", {"name": name, "arguments": {}}) for name in tools]
    finally:
        stdio.close()
    text = json.dumps(replies) + stdio.stderr_tail(1_000_000)
    assert not _leaks(text, home), text[-800:]
