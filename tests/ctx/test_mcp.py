"""ctx over MCP: the official SDK client (mcp 2.3.0) at /mcp and over `ctx serve mcp --stdio`, and the
official conformance suite's generic scenarios against a real `ctx serve mcp` process.

MCP exposes exactly the tools of /tools/list (same names, descriptions and schemas) with the same
results, because both come from one declaration per tool.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import mcp_types as t
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from cairn_servers.ctx import config
from cairn_servers.ctx.http import create_app

from .conftest import free_port, serving
from .test_http import REPO, example_kb

NODE_BIN = REPO / ".tools" / "node" / "node_modules" / ".bin"
CONFORMANCE = NODE_BIN / "conformance"
pytestmark = pytest.mark.filterwarnings("ignore:.*(removed|deprecated) as of 2026")


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory, ctx_module_backend: str) -> Path:
    """The example knowledge base, on each storage backend in turn (``ctx_module_backend``)."""
    return example_kb(tmp_path_factory.mktemp("kb"))


@pytest.fixture(scope="module")
def base(kb: Path) -> Iterator[str]:
    with serving(create_app(config.load(kb))) as url:
        yield url


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO / "src"))


async def _exercise(server: Any, http_tools: list[dict[str, Any]], http_search: dict[str, Any]) -> None:
    async with Client(server, cache=None) as client:
        assert client.server_info is not None and client.server_info.name == "ctx"
        tools = (await client.list_tools()).tools
        assert [tool.name for tool in tools] == [x["name"] for x in http_tools]
        for tool, decl in zip(tools, http_tools):
            assert tool.description == decl["description"]
            assert tool.input_schema == decl["parameters"]
        by = {tool.name: tool for tool in tools}
        assert by["search"].annotations is not None and by["search"].annotations.read_only_hint is True

        res = await client.call_tool("search", {"query": "rotate signing keys", "limit": 3})
        assert not res.is_error and res.structured_content == http_search
        assert isinstance(res.content[0], t.TextContent) and json.loads(res.content[0].text) == http_search

        doc_id = http_search["results"][0]["id"]
        res = await client.call_tool("get", {"id": doc_id})
        assert res.structured_content is not None and res.structured_content["id"] == doc_id
        res = await client.call_tool("get", {"id": "0" * 32})
        assert res.is_error and "No document with id" in res.content[0].text  # type: ignore[union-attr]

        res = await client.call_tool("find_mentions", {"term": "deploy", "limit": 2})
        assert not res.is_error and res.structured_content is not None
        assert res.structured_content["result"]["count"] == 2

        with pytest.raises(MCPError) as exc:
            await client.call_tool("find_mentions", {"limit": 2})
        assert exc.value.error.code == -32602 and "term" in exc.value.error.message
        with pytest.raises(MCPError) as exc:
            await client.call_tool("search", {"query": "x", "mode": "fuzzy"})
        assert exc.value.error.code == -32602 and "mode" in exc.value.error.message

        started = time.monotonic()
        res = await client.call_tool("spin", {"seconds": 1})
        assert res.is_error and "exceeded its time limit" in res.content[0].text  # type: ignore[union-attr]
        assert time.monotonic() - started < 5  # a 0.3 s budget, with slack for a busy machine
        assert (await client.call_tool("sources", {})).structured_content is not None


def _http_views(base: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    tools = httpx.get(f"{base}/tools/list").json()["tools"]
    search = httpx.post(f"{base}/tools/search", json={"query": "rotate signing keys", "limit": 3}).json()
    return tools, search


def test_sdk_client_over_streamable_http(base: str) -> None:
    tools, search = _http_views(base)
    asyncio.run(asyncio.wait_for(_exercise(f"{base}/mcp", tools, search), 60))


def test_sdk_client_at_the_root_url(base: str) -> None:
    """The seed's Cursor configuration uses the server's root URL (``"url": "http://localhost:7331"``)."""
    assert base.count("/") == 2  # http://127.0.0.1:PORT, no path
    tools, search = _http_views(base)
    asyncio.run(asyncio.wait_for(_exercise(base, tools, search), 60))


RPC_PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


def test_root_url_is_the_same_mcp_endpoint(base: str) -> None:
    """Every answer of / is the answer of /mcp: guards, limits, methods (one app, mounted twice)."""
    for path in ("/", "/mcp"):
        ok = httpx.post(f"{base}{path}", json=RPC_PING, headers={"Accept": "application/json, text/event-stream"})
        assert ok.status_code == 200 and ok.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}
        # DNS-rebinding protection on loopback: a foreign Host or browser Origin is refused.
        bad_host = httpx.post(f"{base}{path}", json=RPC_PING, headers={"Host": "evil.example:7331"})
        assert bad_host.status_code == 403 and "Host 'evil.example:7331' is not allowed" in bad_host.text
        bad_origin = httpx.post(f"{base}{path}", json=RPC_PING, headers={"Origin": "https://evil.example"})
        assert bad_origin.status_code == 403 and "Origin 'https://evil.example' is not allowed" in bad_origin.text
        big = httpx.post(f"{base}{path}", content=b" " * (4 * 1024 * 1024 + 1),
                         headers={"Content-Type": "application/json"})
        assert big.status_code == 413 and big.json()["error"]["code"] == -32600
        # Stateless like /mcp: the SSE GET stream and DELETE are 405, POST only.
        for method in ("GET", "DELETE"):
            r = httpx.request(method, f"{base}{path}", headers={"Accept": "text/event-stream"})
            assert r.status_code == 405 and r.headers["allow"] == "POST", (path, method, r.text)
    # A browser opening the root URL (no Accept: text/event-stream) gets an index of the routes.
    page = httpx.get(f"{base}/", headers={"Accept": "text/html,*/*"})
    assert page.status_code == 200 and page.json()["openapi"] == "/openapi.json"
    assert httpx.get(f"{base}/mcp", headers={"Accept": "text/html,*/*"}).status_code == 405
    assert "/" in httpx.get(f"{base}/openapi.json").json()["paths"]


def test_root_url_needs_the_token(kb: Path) -> None:
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    with serving(create_app(config.load(kb), auth_token="s3cret-token")) as base:
        denied = httpx.post(f"{base}/", json=RPC_PING)
        assert denied.status_code == 401 and denied.json()["error"]["code"] == "unauthorized"
        assert httpx.get(f"{base}/").status_code == 401  # the browser index too
        wrong = httpx.post(f"{base}/", json=RPC_PING, headers={"Authorization": "Bearer wrong"})
        assert wrong.status_code == 401

        async def without_token() -> None:
            async with Client(base, cache=None):
                pass

        with pytest.raises(Exception) as failed:  # the SDK gives up at initialize
            asyncio.run(asyncio.wait_for(without_token(), 30))
        assert not isinstance(failed.value, TimeoutError) and "MCPError" in repr(failed.value)

        async def with_token() -> None:
            http = create_mcp_http_client(headers={"Authorization": "Bearer s3cret-token"})
            async with Client(streamable_http_client(base, http_client=http), cache=None) as client:
                assert "search" in [tool.name for tool in (await client.list_tools()).tools]
                res = await client.call_tool("search", {"query": "rotate signing keys", "limit": 1})
                assert not res.is_error and res.structured_content is not None
                assert len(res.structured_content["results"]) == 1

        asyncio.run(asyncio.wait_for(with_token(), 60))


def test_sdk_client_over_stdio(base: str, kb: Path) -> None:
    tools, search = _http_views(base)
    params = StdioServerParameters(command=sys.executable, args=["-m", "cairn_servers.ctx.cli", "serve", "mcp", "--stdio",
                                                                 "--config", str(kb)], env=_env())
    asyncio.run(asyncio.wait_for(_exercise(params, tools, search), 60))


def test_stdio_stdout_carries_only_json_rpc(kb: Path) -> None:
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "find_mentions",
                                                                      "arguments": {"term": "deploy"}}},
    ]
    proc = subprocess.run([sys.executable, "-m", "cairn_servers.ctx.cli", "serve", "mcp", "--stdio", "--config", str(kb)],
                          input="".join(json.dumps(m) + "\n" for m in lines), capture_output=True, text=True,
                          env=_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    replies = [json.loads(line) for line in proc.stdout.splitlines()]  # every stdout line is JSON-RPC
    assert [r["id"] for r in replies] == [1, 2]
    assert replies[1]["result"]["structuredContent"]["result"]["count"] == 2
    assert "find_mentions: 2 hit(s)" in proc.stderr  # the script's log went to stderr


# ---- conformance --------------------------------------------------------------------------------

GENERIC = ["server-initialize", "ping", "tools-list", "logging-set-level", "dns-rebinding-protection"]


@pytest.mark.node
@pytest.mark.timeout(180)
@pytest.mark.skipif(not CONFORMANCE.exists(), reason=f"project-local Node tools missing ({NODE_BIN})")
@pytest.mark.parametrize("path", ["/mcp", ""], ids=["mcp", "root"])
def test_conformance_generic_scenarios_against_ctx(kb: Path, tmp_path: Path, path: str) -> None:
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("wb") as fh:
        server = subprocess.Popen([sys.executable, "-m", "cairn_servers.ctx.cli", "serve", "mcp", "--config", str(kb),
                                   "--bind", f"127.0.0.1:{port}"], stdout=fh, stderr=subprocess.STDOUT, env=_env())
    env = dict(os.environ, PATH=f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/health")
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline and server.poll() is None, log.read_text()
                time.sleep(0.05)
        for scenario in GENERIC:
            out = tmp_path / scenario
            run = subprocess.run([str(CONFORMANCE), "server", "--url", f"http://127.0.0.1:{port}{path}",
                                  "--scenario", scenario, "-o", str(out)],
                                 capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
            files = list(out.glob("server-*/checks.json"))
            assert files, f"{scenario}: no results (exit {run.returncode})\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
            checks = json.loads(files[0].read_text())
            bad = [c for c in checks if c.get("status") in ("FAILURE", "WARNING")]
            assert checks and not bad, f"{scenario}: {bad}\n{log.read_text()[-2000:]}"
            assert any(c.get("status") == "SUCCESS" for c in checks), scenario
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
