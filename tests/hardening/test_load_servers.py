"""Bounded load: ctx and brk over HTTP with concurrent keep-alive clients, ``blz mcp`` in a tight loop.

The load is local (127.0.0.1) and every request is valid, so the properties are exact: zero errors
(every answer 2xx, or a JSON-RPC result without ``isError``), and the server's RSS stays flat after
warm-up (the largest RSS after ``WARMUP`` s minus the RSS at ``WARMUP`` s is under ``RSS_FLAT_KB``).
Latency is reported, never asserted (timing belongs to benchmarks/soak.py, which runs the full
50 clients x 60 s version of the same load). With CAIRN_STRESS=1 the runs are 50 clients x 30 s.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from ._servers import STRESS, HttpServer, StdioServer, blz_calls, brk_requests, ctx_requests, http_load, stdio_loop

pytestmark = pytest.mark.timeout(300 if STRESS else 90)

CLIENTS = 50 if STRESS else 10
SECONDS = 30.0 if STRESS else 5.0
WARMUP = 5.0 if STRESS else 1.5
RSS_FLAT_KB = 16 * 1024


def check(name: str, result: dict[str, Any]) -> None:
    shown = {k: v for k, v in result.items() if k != "rss_kb"}
    print(f"{name}: {json.dumps(shown)}")
    assert result["errors"] == 0, result["error_samples"]
    assert result["requests"] >= SECONDS * 10, shown  # the load really ran
    assert len(result["rss_kb"]) >= 3, result["rss_kb"]
    assert result["rss_growth_kb"] < RSS_FLAT_KB, f"RSS not flat after warm-up: {result['rss_kb']}"


def test_brk_http_under_concurrent_clients(brk_http: HttpServer) -> None:
    result = http_load(brk_http.port, brk_http.pid, brk_requests(), clients=CLIENTS, seconds=SECONDS, warmup=WARMUP)
    check("brk", result)
    assert brk_http.alive()


def test_ctx_http_under_concurrent_clients(ctx_http: HttpServer) -> None:
    hits = httpx.post(ctx_http.url + "/tools/search", json={"query": "install", "limit": 10}).json()["results"]
    result = http_load(ctx_http.port, ctx_http.pid, ctx_requests([h["id"] for h in hits]), clients=CLIENTS,
                       seconds=SECONDS, warmup=WARMUP)
    check("ctx", result)
    assert ctx_http.alive()


def test_blz_mcp_tight_loop(blz_stdio: StdioServer) -> None:
    reply = blz_stdio.request("tools/call", {"name": "list-sources", "arguments": {}})
    aliases = [s["alias"] for s in json.loads(reply["result"]["content"][0]["text"])["sources"] if s["kind"] == "installed"]
    result = stdio_loop(blz_stdio, blz_calls(aliases), seconds=SECONDS, warmup=WARMUP)
    check("blz", result)
    assert blz_stdio.alive()


def test_finished_lua_runs_are_freed_without_the_cyclic_gc(ctx_config: Any) -> None:
    """Regression (found by the soak: ctx RSS grew from 80 to 111 MB over 60 s of load): a Lua run's
    state and the sandbox's host callables formed a cycle, and ``ctx serve`` raises the GC thresholds,
    so every finished run's Lua heap stayed until a rare full collection. Now they go by refcount."""
    import gc

    from cairn_servers.ctx.config import load
    from cairn_servers.ctx.tools import Toolbox

    def runtimes() -> int:
        return sum(1 for o in gc.get_objects() if type(o).__name__ == "LuaRuntime")

    box = Toolbox(load(ctx_config))
    try:
        gc.collect()
        before = runtimes()
        gc.disable()
        try:
            for i in range(30):
                assert box.call("echo", {"text": str(i), "times": 2})["result"]["text"] == str(i) * 2
                box.call("find_mentions", {"term": "hooks", "limit": 2})
            left = runtimes() - before
        finally:
            gc.enable()
        assert left == 0, f"{left} Lua states outlived their runs"
    finally:
        box.close()
