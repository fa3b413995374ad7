"""Who may talk to the HTTP servers (ctx serve mcp, brk serve): DNS rebinding on loopback binds, the
bearer token beyond loopback, non-loopback binds refused without --allow-remote.

Uses the shared server fixtures of tests/hardening/conftest.py (real processes on 127.0.0.1).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from ._servers import HttpServer, free_port, server_env

pytestmark = pytest.mark.timeout(120)

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
# Host headers a rebinding page (or a confused proxy) could send; none names this machine.
EVIL_HOSTS = ["evil.example", "evil.example:{port}", "127.0.0.1.evil.example:{port}", "localhost.evil.example",
              "127.0.0.1@evil.example", "0.0.0.0:{port}", "[::ffff:7f00:1]:{port}", "192.168.1.10:{port}", ""]
GOOD_HOSTS = ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}", "127.0.0.1", "[::1]:{port}"]


def _requests(app: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    if app == "brk":
        return [("GET", "/health", None), ("GET", "/api/vecs/indexes", None), ("GET", "/", None),
                ("GET", "/api/vecs/query?index=height&ids=difficulty&count=2", None), ("POST", "/mcp", INIT)]
    return [("GET", "/health", None), ("GET", "/tools/list", None), ("POST", "/tools/search", {"query": "hono"}),
            ("GET", "/tools/sources", None), ("POST", "/mcp", INIT)]


_CLIENT = httpx.Client(timeout=30)


def _send(server: HttpServer, method: str, path: str, body: dict[str, Any] | None,
          headers: dict[str, str]) -> httpx.Response:
    hdrs = {**(MCP_HEADERS if path == "/mcp" else {}), **headers}
    return _CLIENT.request(method, server.url + path, json=body, headers=hdrs)


@pytest.mark.parametrize("app", ["brk", "ctx"])
def test_dns_rebinding_host_refused_on_loopback(app: str, request: pytest.FixtureRequest) -> None:
    server: HttpServer = request.getfixturevalue(f"{app}_http")
    refused = 0
    for method, path, body in _requests(app):
        for host in EVIL_HOSTS:
            r = _send(server, method, path, body, {"Host": host.format(port=server.port)})
            assert r.status_code in (400, 403), (path, host, r.status_code, r.text[:200])
            assert "hono" not in r.text.lower() and "difficulty" not in r.text and "protocolVersion" not in r.text
            refused += 1
        for host in GOOD_HOSTS:
            r = _send(server, method, path, body, {"Host": host.format(port=server.port)})
            assert r.status_code == 200, (path, host, r.status_code, r.text[:300])
    assert refused == len(_requests(app)) * len(EVIL_HOSTS)
    assert server.alive()


@pytest.mark.parametrize("app", ["brk", "ctx"])
def test_foreign_origin_refused_on_mcp(app: str, request: pytest.FixtureRequest) -> None:
    server: HttpServer = request.getfixturevalue(f"{app}_http")
    for origin in ["http://evil.example", "https://127.0.0.1.evil.example", "null", "http://localhost.evil.example:80"]:
        r = _send(server, "POST", "/mcp", INIT, {"Origin": origin})
        assert r.status_code == 403, (origin, r.status_code, r.text[:200])
    ok = _send(server, "POST", "/mcp", INIT, {"Origin": f"http://localhost:{server.port}"})
    assert ok.status_code == 200, ok.text[:300]


def _start(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a server command that must refuse to start (exit at once)."""
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, cwd=cwd)


def test_non_loopback_binds_need_allow_remote(ctx_config: Path, brk_out: Path, tmp_path: Path) -> None:
    env = server_env(tmp_path)
    env.pop("CTX_AUTH_TOKEN", None)
    for argv in ([sys.executable, "-m", "cairn_servers.brk.cli", "serve", "--out", str(brk_out), "--bind", "0.0.0.0:0"],
                 [sys.executable, "-m", "cairn_servers.ctx.cli", "serve", "mcp", "--config", str(ctx_config), "--bind", "0.0.0.0:0"],
                 [sys.executable, "-m", "cairn_servers.ctx.cli", "serve", "mcp", "--config", str(ctx_config), "--bind", "[::]:0"]):
        res = _start(argv, env)
        assert res.returncode == 2, (argv, res.returncode, res.stderr)
        assert "not a loopback address" in res.stderr and "--allow-remote" in res.stderr, res.stderr
    # --allow-remote without a token: ctx refuses (its knowledge base is private).
    res = _start([sys.executable, "-m", "cairn_servers.ctx.cli", "serve", "mcp", "--config", str(ctx_config),
                  "--bind", "0.0.0.0:0", "--allow-remote"], env)
    assert res.returncode == 2 and "without an auth token" in res.stderr, res.stderr


def test_ctx_beyond_loopback_requires_the_bearer_token(ctx_config: Path, tmp_path: Path) -> None:
    token = "tok-" + os.urandom(12).hex()
    port = free_port()
    env = server_env(tmp_path, CTX_AUTH_TOKEN=token, CAIRN_RAISE_ERRORS="1")
    argv = [sys.executable, "-m", "cairn_servers.ctx.cli", "serve", "mcp", "--config", str(ctx_config),
            "--bind", f"0.0.0.0:{port}", "--allow-remote"]
    server = HttpServer(argv, env, port, tmp_path / "ctx-remote", "/health")
    try:
        def call(method: str, path: str, body: Any = None, auth: str | None = None) -> httpx.Response:
            headers = {**(MCP_HEADERS if path == "/mcp" else {})}
            if auth is not None:
                headers["Authorization"] = auth
            return _CLIENT.request(method, server.url + path, json=body, headers=headers)

        protected = [("GET", "/tools/list", None), ("POST", "/tools/search", {"query": "hono"}),
                     ("GET", "/tools/sources", None), ("POST", "/tools/get", {"id": "0" * 32}),
                     ("POST", "/tools/echo", {"text": "x"}), ("GET", "/openapi.json", None), ("POST", "/mcp", INIT)]
        wrong = [None, "", "Bearer", f"Bearer {token[:-1]}", f"Bearer {token}x", f"Basic {token}",
                 f"bearer{token}", token, f"Bearer {token.upper()}", f"Bearer  {token} extra"]
        denied = 0
        for method, path, body in protected:
            for auth in wrong:
                r = call(method, path, body, auth)
                assert r.status_code == 401, (path, auth, r.status_code, r.text[:200])
                assert token not in r.text and "hono" not in r.text.lower()
                denied += 1
            r = call(method, path, body, f"Bearer {token}")
            assert r.status_code in (200, 404), (path, r.status_code, r.text[:300])  # 404: the unknown id
        assert denied == len(protected) * len(wrong)
        assert call("GET", "/health").status_code == 200  # liveness stays open
    finally:
        server.close()
    assert token not in server.stderr_tail(100_000)  # never logged
