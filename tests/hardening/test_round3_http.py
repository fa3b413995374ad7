"""Hardening round 3 over real server processes: connections are bounded, and no request holds up the others.

* **Connections** (``cairn_servers.core.connections``, both ``ctx serve mcp`` and ``brk serve``): a silent
  connection is closed after the idle timeout, before its first request and between requests; a
  half-sent header or body gets ``408`` at the read timeout even when it drips a byte at a time; past
  the connection cap the longest idle connection makes room, so ``/health`` is answered with more idle
  connections open than the cap and the server's descriptors stay bounded; when every connection has
  a request in progress the next one gets ``503``. Settings are the ``*_HTTP_*`` environment variables.
* **Work off the event loop** (ctx): ``/health`` answers promptly while heavy keyword searches run on
  other connections; a query of more words than the cap is a clear 400 on REST and MCP at once (the
  audit's 100,000 words took 43 s), and a blz ``find`` of 40,000 words is refused as quickly.

* **brk runs nothing for another site**: its API is GET only; ``/mcp`` refuses a foreign ``Origin``.

Large counts (thousands of idle connections against the default cap) run under ``CAIRN_STRESS=1``.
"""

from __future__ import annotations

import json
import os
import random
import re
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import httpx
import pytest

from ._servers import STRESS, HttpServer, StdioServer, server_env, spawn_brk_http, spawn_ctx_http

IDLE, READ, CAP = 1.0, 1.5, 20


# A POST whose body never ends, on a route of each server that reads a body
HALF_BODY_PATH = {"ctx": "/tools/search", "brk": "/mcp"}


@pytest.fixture(scope="module", params=["ctx", "brk"])
def server(request: pytest.FixtureRequest, ctx_config: Path, brk_out: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    """A server with short timeouts and a small cap (the ``*_HTTP_*`` settings); ``.url`` is its base URL
    and ``HALF_BODY_PATH[request.param]`` a route that reads a body."""
    name = request.param
    prefix = name.upper()
    env = {f"{prefix}_HTTP_IDLE_TIMEOUT": str(IDLE), f"{prefix}_HTTP_READ_TIMEOUT": str(READ),
           f"{prefix}_HTTP_MAX_CONNECTIONS": str(CAP)}
    work = tmp_path_factory.mktemp(f"{name}-limits")
    spawned = spawn_ctx_http(ctx_config, work, **env) if name == "ctx" else spawn_brk_http(brk_out, work, **env)
    try:
        yield spawned
    finally:
        spawned.close()


def _connect(server: HttpServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    return sock


def _closed_after(sock: socket.socket, limit: float = 15.0) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long that took."""
    t0 = time.monotonic()
    sock.settimeout(limit)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data, time.monotonic() - t0
        data += chunk


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _half_body(server: HttpServer) -> bytes:
    path = HALF_BODY_PATH["ctx" if "cairn_servers.ctx.cli" in server.proc.args else "brk"]  # type: ignore[operator]
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nContent-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{\"q").encode()


def test_a_silent_connection_is_closed_after_the_idle_timeout(server: HttpServer) -> None:
    sock = _connect(server)
    data, took = _closed_after(sock)
    assert data == b"" and IDLE - 0.2 <= took < IDLE + 2.5, took
    # Between requests too: a keep-alive connection that goes quiet after its answer.
    sock = _connect(server)
    sock.sendall(f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n\r\n".encode())
    data, took = _closed_after(sock)
    assert data.startswith(b"HTTP/1.1 200 ") and IDLE - 0.2 <= took < IDLE + 2.5, (data[:200], took)


@pytest.mark.parametrize("part", ["header", "body"])
def test_a_half_sent_request_gets_408_at_the_read_timeout(server: HttpServer, part: str) -> None:
    """Dripping a byte every 0.3 s does not extend the deadline."""
    sock = _connect(server)
    if part == "header":
        head = f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nX-Slow: ".encode()
        sock.sendall(head)
    else:
        sock.sendall(_half_body(server))
    t0 = time.monotonic()
    got = b""
    sock.settimeout(0.3)
    while time.monotonic() - t0 < 15:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            try:
                sock.sendall(b"a")
            except OSError:
                break
            continue
        if not chunk:
            break
        got += chunk
    took = time.monotonic() - t0
    assert got.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), got[:300]
    body = json.loads(got.split(b"\r\n\r\n", 1)[1])
    assert body == {"error": {"code": "timeout",
                              "message": f"The request did not arrive in full within {READ:g} seconds."}}
    assert READ - 0.2 <= took < READ + 3, took
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200


def _idle_flood(server: HttpServer, count: int, cap: int, fd_margin: int) -> None:
    """``count`` idle connections (more than ``cap``): /health is answered at once, again and again,
    and the server never holds more than ``cap`` of them (plus ``fd_margin`` other descriptors)."""
    base = _fds(server.pid)
    socks = []
    try:
        for _ in range(count):
            socks.append(_connect(server))
        time.sleep(0.5)
        for _ in range(5):
            t0 = time.monotonic()
            r = httpx.get(server.url + "/health", timeout=10)
            assert r.status_code == 200 and time.monotonic() - t0 < 3, (r.status_code, time.monotonic() - t0)
        held = _fds(server.pid)
        assert held <= base + cap + fd_margin, (base, held, cap)
        # The oldest were closed to make room: they read EOF at once
        socks[0].settimeout(5)
        assert socks[0].recv(10) == b""
    finally:
        for s in socks:
            s.close()


def test_a_client_still_sending_after_the_408_reads_it(server: HttpServer) -> None:
    """A client keeps sending a header past the read timeout, before, while and after the 408 comes: it
    reads the 408. The server stops sending and drops what still arrives for a while before it closes.
    Closing at once with the client's latest bytes unread makes the kernel reset the connection and drop
    whatever part of the answer it had not sent yet: rare on loopback (one CI run lost its 408 that way,
    in test_a_half_sent_request_gets_408_at_the_read_timeout), so this is a check, not a reproduction."""
    sock = _connect(server)
    sock.sendall(f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nX-Slow: ".encode())
    time.sleep(READ - 0.2)
    answered = None
    while answered is None or time.monotonic() - answered < 0.1:  # bytes before, at and after the answer
        try:
            sock.sendall(b"a" * 64)
        except OSError:
            break
        if answered is None and select.select([sock], [], [], 0.005)[0]:
            answered = time.monotonic()
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    sock.close()
    assert data.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), data[:200]


def test_more_idle_connections_than_the_cap_leave_room_for_health(server: HttpServer) -> None:
    _idle_flood(server, 3 * CAP, CAP, fd_margin=8)


def test_503_once_every_connection_has_a_request_in_progress(server: HttpServer) -> None:
    busy = []
    try:
        for _ in range(CAP):
            sock = _connect(server)
            sock.sendall(_half_body(server))
            busy.append(sock)
        time.sleep(0.3)
        r = httpx.get(server.url + "/health", timeout=10)
        assert r.status_code == 503 and r.headers["connection"] == "close", r.text
        assert r.json() == {"error": {"code": "unavailable", "message": f"The server has {CAP} connections open, "
                                      "each with a request in progress. Try again shortly."}}
        for sock in busy:  # their read timeout ends them, and the server is free again
            data, _took = _closed_after(sock)
            assert data.startswith(b"HTTP/1.1 408 "), data[:100]
        assert httpx.get(server.url + "/health", timeout=10).status_code == 200
    finally:
        for sock in busy:
            sock.close()


@pytest.mark.parametrize("name", ["ctx", "brk"])
def test_bad_settings_are_refused_at_start(name: str, ctx_config: Path, brk_out: Path, tmp_path: Path) -> None:
    where = ["--config", str(ctx_config)] if name == "ctx" else ["--out", str(brk_out)]
    argv = [sys.executable, "-m", f"cairn_servers.{name}.cli", "serve", *(["mcp"] if name == "ctx" else []),
            *where, "--bind", "127.0.0.1:0"]
    for var, value, kind in ((f"{name.upper()}_HTTP_IDLE_TIMEOUT", "soon", "a number of seconds"),
                             (f"{name.upper()}_HTTP_READ_TIMEOUT", "-1", "a number of seconds"),
                             (f"{name.upper()}_HTTP_MAX_CONNECTIONS", "2.5", "a whole number of connections")):
        proc = subprocess.run(argv, env=server_env(tmp_path, **{var: value}), capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert f"{var}={value!r} is not valid: give {kind} greater than 0" in proc.stderr, proc.stderr


@pytest.mark.skipif(not STRESS, reason="thousands of connections: CAIRN_STRESS=1")
@pytest.mark.parametrize("name", ["ctx", "brk"])
def test_thousands_of_idle_connections_against_the_default_cap(name: str, ctx_config: Path, brk_out: Path,
                                                                tmp_path: Path) -> None:
    """The audit's attack at scale: 3,000 idle connections, the default cap of 1,000."""
    server = spawn_ctx_http(ctx_config, tmp_path) if name == "ctx" else spawn_brk_http(brk_out, tmp_path)
    try:
        _idle_flood(server, 3000, 1000, fd_margin=64)
    finally:
        server.close()


# ---- work off the event loop, and bounded (ctx REST) ----------------------------------------------

@pytest.fixture(scope="module")
def ctx(ctx_config: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    server = spawn_ctx_http(ctx_config, tmp_path_factory.mktemp("ctx-loop"))
    try:
        yield server
    finally:
        server.close()


def _vocabulary(config: Path) -> list[str]:
    words: dict[str, None] = {}
    for doc in sorted((config.parent / "docs").iterdir()):
        words.update(dict.fromkeys(w.lower() for w in re.findall(r"[A-Za-z]{4,}", doc.read_text(errors="replace"))))
    return list(words)


def _timed(call: Callable[[], httpx.Response]) -> float:
    t0 = time.monotonic()
    r = call()
    assert r.status_code == 200, r.text[:300]
    return time.monotonic() - t0


def test_health_answers_while_heavy_searches_run(ctx: HttpServer, ctx_config: Path) -> None:
    """Two clients run keyword searches of 256 distinct indexed words (a new set each time: nothing
    cached) back to back; /health, asked meanwhile, waits for none of them."""
    vocab = _vocabulary(ctx_config)
    assert len(vocab) > 2000
    rng = random.Random(27)
    searches: list[float] = []
    stop = threading.Event()

    def search_loop(seed: int) -> None:
        pick = random.Random(seed)
        with httpx.Client(timeout=60) as client:
            while not stop.is_set():
                query = " ".join(pick.sample(vocab, 256))
                searches.append(_timed(lambda: client.post(ctx.url + "/tools/search", json={"query": query})))

    threads = [threading.Thread(target=search_loop, args=(rng.random(),)) for _ in range(2)]
    for t in threads:
        t.start()
    health: list[float] = []
    try:
        time.sleep(0.5)
        with httpx.Client(timeout=30) as client:
            while len(health) < 30:
                health.append(_timed(lambda: client.get(ctx.url + "/health")))
                time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    health.sort()
    searches.sort()
    median_search = searches[len(searches) // 2]
    print(f"search median {median_search * 1000:.0f} ms over {len(searches)}; /health median "
          f"{health[15] * 1000:.1f} ms, p90 {health[27] * 1000:.1f} ms; load {os.getloadavg()[0]:.2f}")
    assert len(searches) >= 4 and median_search > 0.01, searches  # heavy enough to matter (20-130 ms measured)
    # On the event loop, /health waited for the search in progress: measured, a median of 0.65 of a
    # search (72 of 112 ms, load 10); in the thread pool 0.15 (19 of 128 ms)
    assert health[15] < median_search / 3, (health, median_search)


def test_costly_searches_leave_the_loop_for_a_thread_with_the_same_answer(ctx_config: Path) -> None:
    """Built-in tools on SQLite are tried on the event loop under a budget of a few ms: a cheap search is
    answered there; a costly one (256 indexed words) is stopped and done again on a tool thread, and its
    answer is the one the service gives."""
    from cairn_servers.ctx import config as ctx_conf
    from cairn_servers.ctx.http import create_app
    from cairn_servers.ctx.tools import Toolbox

    from ..mcp._http import serving

    conf = ctx_conf.load(ctx_config)
    app = create_app(conf)
    budget = app.state.loop_budget
    vocab = _vocabulary(ctx_config)
    pick = random.Random(5)
    costly = [" ".join(pick.sample(vocab, 256)) for _ in range(6)]
    with serving(app, path="") as base, httpx.Client(timeout=60) as client:
        for _ in range(20):
            assert client.post(base + "/tools/search", json={"query": "install", "limit": 5}).status_code == 200
        assert client.get(base + "/tools/sources").status_code == 200
        cheap_tries, cheap_stopped = budget.tries, budget.stopped
        answers = [client.post(base + "/tools/search", json={"query": q, "limit": 5}).json() for q in costly]
    assert cheap_tries == 21 and cheap_stopped < cheap_tries // 2, (cheap_tries, cheap_stopped)
    # each costly one (20-130 ms) is stopped, until the stopped tries use up the second's waste cap
    assert 0 < budget.stopped - cheap_stopped <= budget.tries - cheap_tries <= len(costly), (budget.tries, budget.stopped)
    box = Toolbox(conf)
    try:
        assert answers == [box.call("search", {"query": q, "limit": 5}) for q in costly]
    finally:
        box.close()


def test_the_loop_budget_caps_its_waste_and_skips_what_it_cannot_stop() -> None:
    from cairn_servers.ctx import http as ctx_http
    from cairn_servers.core import deadline

    budget = ctx_http.LoopBudget(sqlite=True)
    assert budget.allows("search", {"query": "x"}) and budget.allows("get", {"id": "1"})
    assert not budget.allows("search", {"query": "x", "mode": "hybrid"})  # an embedding: not stoppable
    assert not budget.allows("find_mentions", {})  # a Lua tool waits on its worker
    assert not ctx_http.LoopBudget(sqlite=False).allows("search", {"query": "x"})  # PostgreSQL: the network

    def spin() -> bytes:
        while True:
            deadline.check()  # what a statement's progress handler does

    stopped = 0
    while budget.allows("search", {"query": "x"}):
        assert budget.run(spin) is None
        stopped += 1
        assert stopped <= 2 * (ctx_http.LOOP_WASTE / ctx_http.LOOP_TRY + 1)  # (a new second may begin)
    assert budget.wasted >= ctx_http.LOOP_WASTE  # the rest of this second goes to the threads

    def late() -> bytes:  # past the budget, but never stopped (no statement ran): its answer is kept
        time.sleep(2 * ctx_http.LOOP_TRY)
        return b"late but kept"

    assert budget.run(late) == b"late but kept"


def test_a_large_knowledge_base_sends_its_keyword_searches_to_the_threads(tmp_path: Path) -> None:
    """With a keyword head index (a large knowledge base: milliseconds of numpy per query), keyword searches are
    not tried on the loop; get and sources still are."""
    from cairn_servers.ctx import http as ctx_http

    files = tmp_path / "kb.sqlite.keyword"
    budget = ctx_http.LoopBudget(sqlite=True, keyword_files=files)
    assert budget.allows("search", {"query": "x"})
    files.mkdir()
    budget.second = 0  # as if a new second began: the folder is looked at again
    assert not budget.allows("search", {"query": "x"}) and budget.allows("get", {"id": "1"})


def test_a_query_past_the_term_cap_is_refused_at_once(ctx: HttpServer) -> None:
    """The audit's 100,000 distinct words (689 KB): 400 over REST and an error over MCP, in well under a
    second of work, and the server answers /health meanwhile."""
    query = " ".join(f"t{i:05d}x" for i in range(100_000))
    message = "The query has 100,000 distinct words; the limit is 256. Keep the words that matter."
    t0 = time.monotonic()
    r = httpx.post(ctx.url + "/tools/search", json={"query": query}, timeout=60)
    took = time.monotonic() - t0
    assert r.status_code == 400 and r.json()["error"]["message"] == message, r.text[:300]
    assert took < 5, took
    reply = httpx.post(ctx.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                               "params": {"name": "search", "arguments": {"query": query}}},
                       headers={"accept": "application/json", "mcp-protocol-version": "2025-06-18"}, timeout=60).json()
    text = json.dumps(reply)
    assert message in text, text[:300]
    assert httpx.get(ctx.url + "/health", timeout=5).status_code == 200


def test_blz_find_past_the_term_cap_is_refused_at_once(blz_stdio: StdioServer, blz_data: Path,
                                                       tmp_path: Path) -> None:
    """The audit's blz ``find`` of 40,000 words (4.7 s) over MCP, and ``blz find`` on the command line (an
    argument holds at most 128 KiB: 15,000 words there): the message, at once."""
    t0 = time.monotonic()
    reply = blz_stdio.request("tools/call", {"name": "find", "arguments": {
        "query": " ".join(f"t{i:05d}x" for i in range(40_000))}}, timeout=60)
    took = time.monotonic() - t0
    assert "The query has 40,000 distinct words; the limit is 256. Keep the words that matter." in json.dumps(reply)
    assert took < 5, took
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "cairn_servers.blz.cli", "find",
                           " ".join(f"t{i:05d}" for i in range(15_000))],
                          env=server_env(tmp_path, BLZ_DATA_DIR=str(blz_data)), capture_output=True, text=True,
                          timeout=60)
    took = time.monotonic() - t0
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-500:])
    assert "The query has 15,000 distinct words; the limit is 256. Keep the words that matter." in proc.stderr
    assert took < 10, took


def test_brk_runs_nothing_for_another_site(brk_http: HttpServer) -> None:
    """brk's API is read-only (GET only, CORS open); its /mcp, the one route that takes a POST, refuses a
    page of another site and serves this machine's pages and clients without an Origin."""
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_indexes", "arguments": {}}}
    headers = {"accept": "application/json", "mcp-protocol-version": "2025-06-18"}
    for origin in ("https://evil.example", "http://localhost.evil.example", "null"):
        r = httpx.post(brk_http.url + "/mcp", json=call, headers={**headers, "origin": origin}, timeout=30)
        assert r.status_code == 403 and "Origin" in r.json()["error"]["message"], (origin, r.text)
    for extra in ({}, {"origin": "http://127.0.0.1:8080"}):
        r = httpx.post(brk_http.url + "/mcp", json=call, headers={**headers, **extra}, timeout=30)
        assert r.status_code == 200 and not r.json()["result"].get("isError"), (extra, r.text)
    for path in ("/api/vecs/query?index=height&ids=close", "/health", "/"):
        r = httpx.post(brk_http.url + path, headers={"origin": "https://evil.example"}, timeout=30)
        assert r.status_code == 405, (path, r.status_code)
