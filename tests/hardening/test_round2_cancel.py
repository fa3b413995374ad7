"""Hardening round 2, issue 20 item 8 (last gap): a Lua tool call that is already running stops when
its caller gives up, instead of burning its worker's CPU until its own timeout.

Real servers: `ctx serve mcp` on 127.0.0.1 (stateless /mcp with JSON and SSE replies, REST
``POST /tools/{name}``) and `ctx serve mcp --stdio` (``notifications/cancelled``: ctx's HTTP /mcp is
stateless, so a cancellation sent in another POST has no session to reach). The tool ``spin`` loops
for far longer than the test (its timeout is 25 s); the client drops or cancels after ~1 s. CPU is
read from /proc for the server *and* its Lua worker processes (a killed worker's time moves to the
server's cutime/cstime, so the sum never goes back). The knowledge base is generated here.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest

from ._servers import SPIN_TOOL, HttpServer, StdioServer, _stat, children, generated_kb, own_cpu, spawn_ctx_http, \
    spawn_ctx_stdio, tree_cpu

# Spends its time in context.search callbacks answered by the server: cancelling abandons one in flight.
ASK = """
tool = {name = "ask", description = "searches over and over", parameters = {{name = "n", type = "integer", required = true}}}
function tool.execute(params, context)
  local found = 0
  for i = 1, params.n do found = found + #context.search("deploy", {limit = 5}) end
  return {found = found}
end
"""
# An agent (issue 17) whose resolve burns CPU: a prompt whose caller gave up stops as a tool call does.
SPINNER = """
agent = {}
function agent.resolve(args)
  local x = 0
  for i = 1, tonumber(args.n) do x = x + i end
  return {system = "sum " .. x}
end
"""
FOREVER = 10 ** 12  # loop iterations: far beyond the 25 s timeout


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cfg = generated_kb(tmp_path_factory.mktemp("round2-cancel"),
                       {"deploy.md": "# Deploy\n\nRotate the keys, then deploy the service.\n"},
                       {"spin": (SPIN_TOOL, 25), "ask": (ASK, 25)})
    (cfg.parent / "spinner.lua").write_text(SPINNER)
    with cfg.open("a") as config:  # agents are read at start, not synced
        config.write('[agents.script.spinner]\npath = "spinner.lua"\ntimeout = 25\n'
                     'arguments = [{ name = "n", required = true }]\n')
    return cfg


@pytest.fixture(scope="module")
def ctx(kb: Path, server_workdir: Path) -> Iterator[HttpServer]:
    server = spawn_ctx_http(kb, server_workdir / "ctx-cancel", CAIRN_RAISE_ERRORS="1")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def ctx_stdio(kb: Path, server_workdir: Path) -> Iterator[StdioServer]:
    server = spawn_ctx_stdio(kb, server_workdir / "ctx-cancel-stdio", CAIRN_RAISE_ERRORS="1")
    try:
        server.initialize("2025-06-18")
        yield server
    finally:
        server.close()


def cpu_rate(pid: int, seconds: float) -> float:
    start = tree_cpu(pid)
    time.sleep(seconds)
    return (tree_cpu(pid) - start) / seconds


def busiest_child(pid: int, seconds: float = 0.5) -> tuple[int, float]:
    """The child of ``pid`` using the most CPU over ``seconds``, and its CPU-s/s."""
    first = {c: own_cpu(c) for c in children(pid)}
    time.sleep(seconds)
    best, rate = 0, 0.0
    for c, before in first.items():
        try:
            used = (own_cpu(c) - before) / seconds
        except (OSError, IndexError, ValueError):
            continue
        if used > rate:
            best, rate = c, used
    return best, rate


def settles(pid: int, within: float = 2.0) -> float:
    """Seconds until the server and its workers are idle again (at most ``within``); then asserts it."""
    started = time.monotonic()
    rate = 1.0
    while time.monotonic() - started < within:
        rate = cpu_rate(pid, 0.25)
        if rate < 0.15:
            return time.monotonic() - started
    raise AssertionError(f"still {rate:.2f} CPU-s/s {within} s after the caller gave up")


def raw_post(server: HttpServer, path: str, body: dict[str, Any], accept: str) -> socket.socket:
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nContent-Type: application/json\r\n"
                 f"Accept: {accept}\r\nMCP-Protocol-Version: 2025-06-18\r\nContent-Length: {len(data)}\r\n\r\n"
                 .encode() + data)
    return sock


def mcp_call(server: HttpServer, name: str, args: dict[str, Any]) -> dict[str, Any]:
    reply = httpx.post(server.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                                  "params": {"name": name, "arguments": args}},
                       headers={"accept": "application/json", "mcp-protocol-version": "2025-06-18"}, timeout=30)
    body = reply.json()
    assert "result" in body and not body["result"].get("isError"), reply.text
    return dict(body["result"]["structuredContent"])


def dropped_while_running(pid: int, start: Callable[[], Any], stop: Callable[[Any], None]) -> None:
    """``start()`` a call that would run 25 s; ~1 s later ``stop`` it; the worker must be gone and the
    server idle within 2 s."""
    handle = start()
    time.sleep(0.5)
    before = tree_cpu(pid)
    worker, own = busiest_child(pid, 0.5)
    rate = (tree_cpu(pid) - before) / 0.5
    assert worker and own > 0.05 and rate > 0.25, \
        f"the Lua call did not run ({rate:.2f} CPU-s/s, {own:.2f} in its worker)"
    stop(handle)
    took = settles(pid)
    assert not os.path.exists(f"/proc/{worker}") or _stat(worker)[0] == "Z", \
        f"the Lua worker {worker} of the cancelled call is still alive"
    print(f"idle {took:.2f} s after the caller gave up (worker ran at {rate:.2f} CPU-s/s; "
          f"load {os.getloadavg()[0]:.2f})")


@pytest.mark.parametrize("accept", ["application/json", "application/json, text/event-stream"])
def test_mcp_client_disconnect_stops_a_running_lua_call(ctx: HttpServer, accept: str) -> None:
    assert mcp_call(ctx, "spin", {"n": 1000})["result"]["x"] == 500500  # a worker is up
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "spin", "arguments": {"n": FOREVER}}}
    dropped_while_running(ctx.pid, lambda: raw_post(ctx, "/mcp", call, accept), lambda s: s.close())
    assert mcp_call(ctx, "spin", {"n": 1000})["result"]["x"] == 500500  # the pool serves the next call


def test_rest_client_disconnect_stops_a_running_lua_call(ctx: HttpServer) -> None:
    dropped_while_running(ctx.pid, lambda: raw_post(ctx, "/tools/spin", {"n": FOREVER}, "application/json"),
                          lambda s: s.close())
    after = httpx.post(ctx.url + "/tools/spin", json={"n": 1000}, timeout=30)
    assert after.status_code == 200 and after.json()["result"]["x"] == 500500, after.text


def test_disconnect_abandons_context_callbacks_cleanly(ctx: HttpServer) -> None:
    """The worker spends its time asking the server to search; dropping the client kills it mid-way."""
    dropped_while_running(ctx.pid, lambda: raw_post(ctx, "/tools/ask", {"n": FOREVER}, "application/json"),
                          lambda s: s.close())
    after = httpx.post(ctx.url + "/tools/ask", json={"n": 3}, timeout=30)
    assert after.status_code == 200 and after.json()["result"]["found"] == 3, after.text
    hits = httpx.post(ctx.url + "/tools/search", json={"query": "deploy"}, timeout=30).json()["results"]
    assert len(hits) == 1


def test_notifications_cancelled_stops_a_running_lua_call(ctx_stdio: StdioServer) -> None:
    server = ctx_stdio
    warm = server.request("tools/call", {"name": "spin", "arguments": {"n": 1000}})
    assert warm["result"]["structuredContent"]["result"]["x"] == 500500, warm

    def start() -> str:
        server.send({"jsonrpc": "2.0", "id": "long", "method": "tools/call",
                     "params": {"name": "spin", "arguments": {"n": FOREVER}}})
        return "long"

    def cancel(rid: str) -> None:
        server.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                     "params": {"requestId": rid, "reason": "the user pressed stop"}})

    dropped_while_running(server.pid, start, cancel)
    seen: list[Any] = []
    after = server.request("tools/call", {"name": "spin", "arguments": {"n": 1000}}, seen=seen)
    assert after["result"]["structuredContent"]["result"]["x"] == 500500, after
    assert not [m for m in seen if isinstance(m, dict) and m.get("id") == "long"], \
        f"a cancelled request got a response: {seen}"


def test_cancelled_context_callback_over_stdio(ctx_stdio: StdioServer) -> None:
    server = ctx_stdio

    def start() -> str:
        server.send({"jsonrpc": "2.0", "id": "asking", "method": "tools/call",
                     "params": {"name": "ask", "arguments": {"n": FOREVER}}})
        return "asking"

    dropped_while_running(server.pid, start, lambda rid: server.send(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid}}))
    after = server.request("tools/call", {"name": "ask", "arguments": {"n": 2}})
    assert after["result"]["structuredContent"]["result"]["found"] == 2, after


# -- the pool itself (in-process) -------------------------------------------------------------------

def _job(source: str, params: dict[str, Any], timeout: float = 25) -> dict[str, Any]:
    return {"kind": "tool", "label": "Lua tool 't'", "source": source, "file": "t.lua", "timeout": timeout,
            "config": {}, "env": {}, "params": params}


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(fn())
        except BaseException as exc:  # noqa: BLE001 (recorded for the assertion)
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_pool_cancel_kills_the_worker_and_frees_its_slot() -> None:
    from cairn_servers.ctx.luaproc import Cancelled, LuaPool

    stop = threading.Event()
    with LuaPool(1) as pool:
        assert pool.run(_job(SPIN_TOOL, {"n": 10}), label="spin", timeout=5) == {"x": 55}
        (pid,) = pool.pids()
        running, out = _in_thread(lambda: pool.run(_job(SPIN_TOOL, {"n": FOREVER}), label="Lua tool 'spin'", timeout=25,
                                                   cancelled=stop.is_set))
        time.sleep(0.5)
        # the only slot is taken: a second call waits for it, and gives up when cancelled too
        other = threading.Event()
        waiting, out2 = _in_thread(lambda: pool.run(_job(SPIN_TOOL, {"n": 10}), label="Lua tool 'spin'", timeout=5,
                                                    cancelled=other.is_set))
        time.sleep(0.2)
        started = time.monotonic()
        other.set()
        waiting.join(2)
        assert not waiting.is_alive() and isinstance(out2[0], Cancelled) and "before it started" in out2[0].message
        stop.set()
        running.join(2)
        took = time.monotonic() - started
        assert not running.is_alive() and took < 1, f"cancel took {took:.2f} s"
        assert isinstance(out[0], Cancelled) and out[0].http_status == 499, out
        assert "cancelled by its caller" in out[0].message
        assert not os.path.exists(f"/proc/{pid}") and pool.pids() == []
        assert pool.run(_job(SPIN_TOOL, {"n": 10}), label="spin", timeout=5) == {"x": 55}  # a fresh worker
        assert pool.run(_job(SPIN_TOOL, {"n": 10}), label="spin", timeout=5, cancelled=lambda: False) == {"x": 55}


def test_pool_cancel_during_a_context_call_drops_its_answer() -> None:
    """The cancellation arrives while the server answers a ``context.search``: the answer is never
    sent, the worker is killed, and the pool goes on."""
    from cairn_servers.ctx.luaproc import Cancelled, LuaPool

    stop = threading.Event()
    calls: list[str] = []

    def call(name: str, args: list[Any]) -> Any:
        calls.append(name)
        if len(calls) == 3:
            stop.set()  # as if notifications/cancelled arrived during this callback
        return [{"id": "d1"}]

    with LuaPool(2) as pool:
        with pytest.raises(Cancelled):
            pool.run(_job(ASK, {"n": FOREVER}), label="Lua tool 'ask'", timeout=25, call=call, cancelled=stop.is_set)
        assert len(calls) == 3 and pool.pids() == []
        assert pool.run(_job(ASK, {"n": 4}), label="ask", timeout=5, call=lambda n, a: [{"id": "d"}]) == {"found": 4}


# ---- agents (issue 17): a Lua agent's resolve stops with its caller, over REST, /mcp and stdio ----

def test_rest_client_disconnect_stops_a_running_lua_agent(ctx: HttpServer) -> None:
    dropped_while_running(ctx.pid, lambda: raw_post(ctx, "/agents/spinner", {"n": str(FOREVER)}, "application/json"),
                          lambda s: s.close())
    after = httpx.post(ctx.url + "/agents/spinner", json={"n": "1000"}, timeout=30)
    assert after.status_code == 200 and after.json()["system"] == "sum 500500", after.text


@pytest.mark.parametrize("accept", ["application/json", "application/json, text/event-stream"])
def test_mcp_client_disconnect_stops_a_running_lua_agent(ctx: HttpServer, accept: str) -> None:
    get = {"jsonrpc": "2.0", "id": 8, "method": "prompts/get",
           "params": {"name": "spinner", "arguments": {"n": str(FOREVER)}}}
    dropped_while_running(ctx.pid, lambda: raw_post(ctx, "/mcp", get, accept), lambda s: s.close())


def test_notifications_cancelled_stops_a_running_lua_agent(ctx_stdio: StdioServer) -> None:
    server = ctx_stdio
    warm = server.request("prompts/get", {"name": "spinner", "arguments": {"n": "1000"}})
    assert warm["result"]["messages"][0]["content"]["text"] == "sum 500500", warm

    def start() -> str:
        server.send({"jsonrpc": "2.0", "id": "long-prompt", "method": "prompts/get",
                     "params": {"name": "spinner", "arguments": {"n": str(FOREVER)}}})
        return "long-prompt"

    def cancel(rid: str) -> None:
        server.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid}})

    dropped_while_running(server.pid, start, cancel)
    seen: list[Any] = []
    after = server.request("prompts/get", {"name": "spinner", "arguments": {"n": "10"}}, seen=seen)
    assert after["result"]["messages"][0]["content"]["text"] == "sum 55", after
    assert not [m for m in seen if isinstance(m, dict) and m.get("id") == "long-prompt"], \
        f"a cancelled request got a response: {seen}"
