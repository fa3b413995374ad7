"""Hardening round 2 (issue 20, items 4, 7, 8, 9) against the real servers: `ctx serve mcp` and
`brk serve` processes on 127.0.0.1, `ctx serve mcp --stdio`, and the `ctx` CLI.

* 4: request bodies are streamed and refused at their limit (4 MiB on /mcp, 1 MiB on ctx /tools/*);
  the server stops reading there (the client cannot push the rest) and its RSS does not grow with the
  body. A GET with a body (brk /api) is answered and the connection closed instead of drained.
  CAIRN_STRESS=1 adds 600 MB bodies, eight at a time.
* 7: ctx dates out of range and 100,000-deep JSON are 400 / invalid input on HTTP, MCP and the CLI.
* 8: a client that drops a long batch stops its CPU use; a second initialize and a duplicate
  in-flight id are refused over stdio.
* 9: ctx's default CORS answers loopback pages only.

The ctx knowledge base is generated here (no shared data): two Markdown files and a CPU-bound Lua
tool ``spin``. brk uses the bundled mainnet sample.
"""

from __future__ import annotations

import json
import select
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from ._servers import SPIN_TOOL, STRESS, HttpServer, StdioServer, _cli, generated_kb, rss_kb, server_env, \
    spawn_brk_http, spawn_ctx_http, spawn_ctx_stdio, tree_cpu

MIB = 1 << 20


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generated_kb(tmp_path_factory.mktemp("round2-ctx"),
                        {"deploy.md": "# Deploy\n\nRotate the keys, then deploy the service.\n",
                         "hooks.md": "# Hooks\n\nHooks let components keep state.\n"},
                        {"spin": (SPIN_TOOL, 20)})


@pytest.fixture(scope="module")
def ctx(kb: Path, server_workdir: Path) -> Iterator[HttpServer]:
    server = spawn_ctx_http(kb, server_workdir / "ctx", CAIRN_RAISE_ERRORS="1")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def brk(brk_out: Path, server_workdir: Path) -> Iterator[HttpServer]:
    server = spawn_brk_http(brk_out, server_workdir / "brk", CAIRN_RAISE_ERRORS="1")
    try:
        yield server
    finally:
        server.close()


def alive(server: HttpServer) -> None:
    assert server.alive(), server.stderr_tail()
    r = httpx.post(server.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                   headers={"accept": "application/json"}, timeout=30)
    assert r.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert "Traceback" not in server.stderr_tail(), server.stderr_tail()


# -- 4: request bodies ------------------------------------------------------------------------------

def upload(server: HttpServer, path: str, offered: int, *, chunked: bool, method: str = "POST",
           piece: int = 256 * 1024, rss: list[int] | None = None) -> dict[str, Any]:
    """Send up to ``offered`` bytes of body, stopping as soon as the server answers (or closes); returns
    the status, the parsed JSON answer and the bytes sent by then. Samples the server's RSS into ``rss``."""
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.settimeout(15)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {offered}"
    sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nContent-Type: application/json\r\n"
                 f"Accept: application/json\r\n{framing}\r\n\r\n".encode())
    data = b"[" + b" " * (piece - 1)
    frame = f"{len(data):x}\r\n".encode() + data + b"\r\n" if chunked else data
    sent = 0
    while sent < offered and not select.select([sock], [], [], 0)[0]:
        try:
            sock.sendall(frame)
        except OSError:  # answered and closed: the answer is in our receive buffer
            break
        sent += len(data)
        if rss is not None and sent % MIB == 0:
            rss.append(rss_kb(server.pid))
    raw = b""
    try:
        while True:
            more = sock.recv(65536)
            if not more:
                break
            raw += more
    except OSError:
        pass
    sock.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    body = body[: int(headers.get("content-length", len(body)))]
    return {"status": int(lines[0].split()[1]) if raw else None, "headers": headers, "sent": sent,
            "json": json.loads(body) if body and headers.get("content-type", "").startswith("application/json") else None}


BODY_CASES = [("ctx", "/mcp", 4 * MIB), ("brk", "/mcp", 4 * MIB), ("ctx", "/tools/search", MIB),
              ("ctx", "/tools/spin", MIB)]


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "content-length"])
@pytest.mark.parametrize("which,path,limit", BODY_CASES, ids=[f"{w}{p}" for w, p, _ in BODY_CASES])
def test_oversized_bodies_are_refused_at_the_limit(request: pytest.FixtureRequest, which: str, path: str, limit: int,
                                                   chunked: bool) -> None:
    server: HttpServer = request.getfixturevalue(which)
    before = server.rss_kb()
    rss: list[int] = []
    got = upload(server, path, 256 * MIB, chunked=chunked, rss=rss)
    assert got["status"] == 413, got
    if path == "/mcp":
        assert got["json"]["error"]["code"] == -32600 and "too large" in got["json"]["error"]["message"]
    else:
        assert got["json"]["error"]["code"] == "too_large"
    assert got["headers"].get("connection") == "close"  # the rest is never read
    assert got["sent"] < limit + 32 * MIB, f"the client could send {got['sent'] / MIB:.0f} MiB"
    growth = (max([*rss, server.rss_kb()]) - before) / 1024
    assert growth < 24, f"RSS grew {growth:.0f} MiB for a body refused at {limit / MIB:.0f} MiB"
    alive(server)


def test_a_get_with_a_body_is_answered_and_not_drained(brk: HttpServer) -> None:
    got = upload(brk, "/api/vecs/ids", 256 * MIB, chunked=True, method="GET")
    assert got["status"] == 200 and got["headers"].get("connection") == "close", got
    assert got["sent"] < 48 * MIB, f"brk read {got['sent'] / MIB:.0f} MiB of a body /api never uses"
    alive(brk)


@pytest.mark.skipif(not STRESS, reason="CAIRN_STRESS=1: 600 MB bodies, eight at a time")
@pytest.mark.parametrize("which", ["ctx", "brk"])
def test_stress_600mb_bodies_eight_at_a_time(request: pytest.FixtureRequest, which: str) -> None:
    server: HttpServer = request.getfixturevalue(which)
    before = server.rss_kb()
    rss: list[int] = []
    results: list[dict[str, Any]] = []

    def one(chunked: bool) -> None:
        results.append(upload(server, "/mcp", 600 * 1000 * 1000, chunked=chunked, rss=rss))

    threads = [threading.Thread(target=one, args=(i % 2 == 0,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [r["status"] for r in results] == [413] * 8, results
    assert max(r["sent"] for r in results) < 64 * MIB
    growth = (max([*rss, server.rss_kb()]) - before) / 1024
    assert growth < 8 * 4 * 2 + 16, f"RSS grew {growth:.0f} MiB"  # at most 4 MiB held per upload (x2 slack)
    alive(server)


# -- 7: out-of-range dates and deep JSON ----------------------------------------------------------------

DEEP = b"[" * 100_000 + b"]" * 100_000
BAD_DATES = [{"since": "99999999999999999999"}, {"since": 99999999999999999999}, {"until": "9" * 5000},
             {"since": "0001-01-01T00:00:00+05:00"}, {"until": "9999-12-31T23:59:59-05:00"}, {"since": -(10**15)}]


def test_bad_dates_and_deep_json_are_400_over_http(ctx: HttpServer) -> None:
    for filters in BAD_DATES:
        r = httpx.post(ctx.url + "/tools/search", json={"query": "deploy", "filters": filters}, timeout=30)
        assert r.status_code == 400, (filters, r.text)
        assert r.json()["error"]["code"] == "bad_request" and "out of range" in r.json()["error"]["message"]
    for path, body in (("/tools/search", DEEP), ("/tools/search", b'{"query": "x", "filters": ' + DEEP + b"}"),
                       ("/tools/spin", DEEP), ("/tools/get", DEEP)):
        r = httpx.post(ctx.url + path, content=body, headers={"content-type": "application/json"}, timeout=30)
        assert r.status_code == 400 and "nested too deeply" in r.json()["error"]["message"], (path, r.text)
    # deep but parseable (900 levels) is refused by the schema, not a RecursionError
    r = httpx.post(ctx.url + "/tools/search", content=b'{"query": "x", "filters": {"source": ' + b"[" * 900 + b"]" * 900
                   + b"}}", headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 400, r.text
    for server in (ctx,):
        r = httpx.post(server.url + "/mcp", content=DEEP, headers={"content-type": "application/json",
                                                                   "accept": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["code"] == -32700
        assert "nested too deeply" in r.json()["error"]["message"]
    alive(ctx)


def test_bad_dates_are_invalid_input_over_mcp(ctx: HttpServer, kb: Path, server_workdir: Path) -> None:
    def check(reply: dict[str, Any]) -> None:
        # CAIRN_RAISE_ERRORS=1: an unexpected exception (the old OverflowError) would be a -32603 error
        assert "error" not in reply, reply
        assert reply["result"]["isError"] is True and "out of range" in reply["result"]["content"][0]["text"], reply

    for filters in BAD_DATES:
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "search", "arguments": {"query": "deploy", "filters": filters}}}
        check(httpx.post(ctx.url + "/mcp", json=call, headers={"accept": "application/json"}, timeout=30).json())
    stdio = spawn_ctx_stdio(kb, server_workdir / "ctx-stdio-dates", CAIRN_RAISE_ERRORS="1")
    try:
        stdio.initialize()
        for filters in BAD_DATES:
            check(stdio.request("tools/call", {"name": "search", "arguments": {"query": "deploy", "filters": filters}}))
        stdio.send(DEEP)
        reply = stdio.recv()
        assert reply["error"]["code"] == -32700 and "nested too deeply" in reply["error"]["message"]
        assert stdio.request("ping")["result"] == {}
    finally:
        stdio.close()


def test_bad_dates_and_deep_params_are_clean_cli_errors(kb: Path, tmp_path: Path) -> None:
    env = server_env(tmp_path)
    for args in (["search", "deploy", "--since", "99999999999999999999"], ["search", "deploy", "--until", "9" * 5000],
                 ["search", "deploy", "--since", "0001-01-01T00:00:00+05:00"],
                 ["tool", "test", "spin", "--param", "n=" + "[" * 50_000 + "]" * 50_000]):
        p = subprocess.run(_cli("ctx", *args, "--config", str(kb)), env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 2, (args[:3], p.returncode, p.stderr[-500:])
        assert "Traceback" not in p.stderr and ("out of range" in p.stderr or "nested too deeply" in p.stderr), p.stderr


# -- 8: disconnects and session lifecycle ---------------------------------------------------------------------

def test_a_dropped_batch_stops_burning_cpu(ctx: HttpServer) -> None:
    """The attack run's case: a long batch whose client went away kept the server busy (22 s of CPU)."""
    n = 400_000
    for _ in range(2):  # the second call is timed: the first one also loads the Lua runtime
        started = time.monotonic()
        one = httpx.post(ctx.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                                 "params": {"name": "spin", "arguments": {"n": n}}},
                         headers={"accept": "application/json"}, timeout=60)
        assert "result" in one.json() and not one.json()["result"].get("isError"), one.text
    per_call = max(time.monotonic() - started, 0.01)
    count = min(3000, int(30 / per_call) + 1)  # about 30 s of work
    batch = json.dumps([{"jsonrpc": "2.0", "id": i, "method": "tools/call",
                         "params": {"name": "spin", "arguments": {"n": n}}} for i in range(count)]).encode()
    sock = socket.create_connection(("127.0.0.1", ctx.port))
    sock.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{ctx.port}\r\nContent-Type: application/json\r\n"
                 f"Accept: application/json\r\nMCP-Protocol-Version: 2025-03-26\r\nContent-Length: {len(batch)}\r\n\r\n"
                 .encode() + batch)
    time.sleep(0.5)
    start = tree_cpu(ctx.pid)
    time.sleep(1.0)
    busy = tree_cpu(ctx.pid) - start  # CPU per second while the batch runs (the machine may be loaded)
    sock.close()
    time.sleep(max(0.5, 2 * per_call))  # the item running at the disconnect finishes
    before = tree_cpu(ctx.pid)
    time.sleep(3.0)
    used = tree_cpu(ctx.pid) - before
    assert busy > 0.05, f"the batch did not run ({busy:.2f} s of CPU in 1 s)"
    assert used < max(0.15, 0.25 * busy * 3), \
        f"the server used {used:.2f} s of CPU in the 3 s after its batch client left ({busy:.2f} s/s while it ran)"
    alive(ctx)


@pytest.fixture
def ctx_stdio_fresh(kb: Path, server_workdir: Path) -> Iterator[StdioServer]:
    server = spawn_ctx_stdio(kb, server_workdir / f"ctx-stdio-{time.monotonic_ns()}", CAIRN_RAISE_ERRORS="1")
    try:
        yield server
    finally:
        server.close()


def test_stdio_refuses_a_second_initialize(ctx_stdio_fresh: StdioServer) -> None:
    server = ctx_stdio_fresh
    assert server.initialize("2025-03-26")["protocolVersion"] == "2025-03-26"
    reply = server.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                          "clientInfo": {"name": "again", "version": "0"}})
    assert reply["error"]["code"] == -32600 and "already initialized" in reply["error"]["message"], reply
    # the protocol did not switch: 2025-03-26 still serves batches (2025-11-25 would refuse them)
    server.send(b'[{"jsonrpc": "2.0", "id": "b1", "method": "ping"}]')
    assert server.recv() == [{"jsonrpc": "2.0", "id": "b1", "result": {}}]
    assert server.proc.poll() is None


def test_stdio_refuses_an_id_already_in_flight(ctx_stdio_fresh: StdioServer) -> None:
    server = ctx_stdio_fresh
    server.initialize()
    slow = {"jsonrpc": "2.0", "id": "dup", "method": "tools/call", "params": {"name": "spin", "arguments": {"n": 3_000_000}}}
    fast = {"jsonrpc": "2.0", "id": "dup", "method": "tools/call", "params": {"name": "search",
                                                                              "arguments": {"query": "deploy"}}}
    server.send(slow)
    server.send(fast)
    server.send({"jsonrpc": "2.0", "id": "dup", "method": "ping"})
    replies = [server.recv(60) for _ in range(3)]
    errors = [r for r in replies if "error" in r]
    results = [r for r in replies if "result" in r]
    assert len(errors) == 2 and all(e["id"] == "dup" and e["error"]["code"] == -32600
                                    and "already used" in e["error"]["message"] for e in errors), replies
    assert len(results) == 1 and results[0]["result"]["structuredContent"]["result"]["x"] == 3_000_000 * 3_000_001 // 2
    # answered: the id is free again
    server.send(fast)
    assert "results" in server.recv(30)["result"]["structuredContent"]


# -- 9: CORS ------------------------------------------------------------------------------------------------------

def test_default_cors_answers_loopback_pages_only(ctx: HttpServer) -> None:
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
    for origin in ("http://localhost:5173", "http://127.0.0.1", "http://[::1]:8080"):
        r = httpx.options(ctx.url + "/tools/spin", headers={"Origin": origin, **preflight})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin
    for origin in ("https://evil.example", "http://localhost.evil.example", "null"):
        r = httpx.options(ctx.url + "/tools/spin", headers={"Origin": origin, **preflight})
        assert r.status_code == 400 and "access-control-allow-origin" not in r.headers
        r = httpx.post(ctx.url + "/tools/search", json={"query": "deploy"}, headers={"Origin": origin})
        assert "access-control-allow-origin" not in r.headers  # the browser hides the answer from the page
