"""Hardening round 3: a built-in search whose caller gives up stops, on both backends.

Real `ctx serve mcp` on 127.0.0.1 and `ctx serve mcp --stdio` over a knowledge base generated here
(8,000 chunks of one repeated word). The slow search is a quoted phrase of that word repeated 4,000
times: one distinct word (under the term cap), but every chunk is a candidate and checking the phrase
against each costs its length times the word's positions, so the search runs for many seconds (about 8
CPU-seconds on SQLite). On PostgreSQL, whose phrase check is quicker (1.5 s), the search is held for as long as
the test likes by another session's lock on the chunks (what a long migration or ``ALTER`` does). The client drops the connection (REST ``POST /tools/search``, MCP ``/mcp``) or
sends ``notifications/cancelled`` (stdio) about a second in; the work must stop within a few seconds:
on SQLite the server process goes idle (its CPU time, read from /proc), on PostgreSQL the server's
statement is no longer active (``pg_stat_activity``). With a pool of one connection, the next search is
answered afterwards (the cancelled connection was given back usable, or replaced).
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from ._servers import HttpServer, StdioServer, _cli, own_cpu, server_env, spawn_ctx_http, spawn_ctx_stdio

pytestmark = [pytest.mark.timeout(400), pytest.mark.usefixtures("ctx_module_backend")]

WORD = "zz"
PHRASE = '"' + " ".join([WORD] * 4000) + '"'
STOP_WITHIN = 4.0  # seconds from the caller giving up to the work having stopped (a loaded 2-core machine)


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory, ctx_module_backend: str) -> Path:
    import subprocess

    base = tmp_path_factory.mktemp(f"round3-cancel-{ctx_module_backend}")
    docs = base / "docs"
    docs.mkdir()
    for f in range(200):
        (docs / f"d{f:04d}.md").write_text("".join(
            f"# Section {f} {c}\n\n{' '.join([WORD] * 350)} u{f}x{c}\n\n" for c in range(40)))
    cfg = base / "ctx.toml"
    cfg.write_text('[db]\npath = "kb.sqlite"\n[embedding]\nprovider = "disabled"\n'
                   '[connectors.filesystem.docs]\nroot = "docs"\n')
    done = subprocess.run(_cli("ctx", "sync", "all", "--config", str(cfg), "--json"), env=server_env(base),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["sources"][0]["chunks"] == 8000, done.stdout[:2000]
    return cfg


@pytest.fixture(scope="module")
def server(kb: Path, ctx_module_backend: str) -> Iterator[HttpServer]:
    srv = spawn_ctx_http(kb, kb.parent / "srv", CTX_DB_POOL_SIZE="1")
    try:
        yield srv
    finally:
        srv.close()


def active_statements() -> int:
    """PostgreSQL: statements of ctx servers running now in this test's database."""
    import psycopg

    with psycopg.connect(os.environ["CTX_DATABASE_URL"], autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND application_name = 'ctx' AND state = 'active' AND pid <> pg_backend_pid()").fetchone()
    return int(row[0]) if row else 0


def cpu_rate(pid: int, seconds: float) -> float:
    start = own_cpu(pid)
    time.sleep(seconds)
    return (own_cpu(pid) - start) / seconds


def working(backend: str, pid: int) -> bool:
    """Whether the slow search is running: the server's CPU (SQLite), its statement (PostgreSQL)."""
    if backend == "postgres":
        time.sleep(0.25)
        return active_statements() > 0
    return cpu_rate(pid, 0.5) > 0.2


def idle(backend: str, pid: int) -> bool:
    if backend == "postgres":
        time.sleep(0.1)
        return active_statements() == 0
    return cpu_rate(pid, 0.25) < 0.1


@contextmanager
def held(backend: str) -> Iterator[None]:
    """PostgreSQL: another session holds the chunks locked, so a search waits on the server until released."""
    if backend != "postgres":
        yield
        return
    import psycopg

    with psycopg.connect(os.environ["CTX_DATABASE_URL"]) as conn:
        conn.execute("LOCK TABLE chunks IN ACCESS EXCLUSIVE MODE")
        try:
            yield
        finally:
            conn.rollback()


def stops_after_giving_up(backend: str, pid: int, start: Callable[[], Any], give_up: Callable[[Any], None]) -> float:
    """``start()`` the slow search; once it is seen running, ``give_up``; returns the seconds until it stopped
    (asserting that it did within STOP_WITHIN)."""
    with held(backend):
        return _stops(backend, pid, start, give_up)


def _stops(backend: str, pid: int, start: Callable[[], Any], give_up: Callable[[Any], None]) -> float:
    handle = start()
    seen = time.monotonic() + 20
    while not working(backend, pid):
        assert time.monotonic() < seen, "the slow search did not start"
    time.sleep(0.5)
    assert working(backend, pid), "the slow search ended by itself: it is not slow enough to test cancelling it"
    started = time.monotonic()
    give_up(handle)
    while not idle(backend, pid):
        took = time.monotonic() - started
        assert took < STOP_WITHIN, f"the search still ran {took:.2f} s after its caller gave up"
    took = time.monotonic() - started
    print(f"{backend}: stopped {took:.2f} s after the caller gave up (load {os.getloadavg()[0]:.2f})")
    return took


def raw_post(server: HttpServer, path: str, body: dict[str, Any]) -> socket.socket:
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nContent-Type: application/json\r\n"
                 f"Accept: application/json\r\nMCP-Protocol-Version: 2025-06-18\r\nContent-Length: {len(data)}\r\n\r\n"
                 .encode() + data)
    return sock


def quick_search(server: HttpServer) -> None:
    """An ordinary search is answered at once: the server and its one pooled connection still work."""
    started = time.monotonic()
    reply = httpx.post(server.url + "/tools/search", json={"query": "u3x7", "limit": 3}, timeout=60)
    assert reply.status_code == 200, reply.text
    assert [r["location"] for r in reply.json()["results"]][:1] == ["Section 3 7"], reply.text
    assert time.monotonic() - started < 10


def test_rest_search_stops_when_the_client_disconnects(server: HttpServer, ctx_module_backend: str) -> None:
    quick_search(server)
    stops_after_giving_up(ctx_module_backend, server.pid,
                          lambda: raw_post(server, "/tools/search", {"query": PHRASE, "limit": 5}),
                          lambda sock: sock.close())
    assert server.alive()
    quick_search(server)


def test_mcp_search_stops_when_the_client_disconnects(server: HttpServer, ctx_module_backend: str) -> None:
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "search", "arguments": {"query": PHRASE, "limit": 5}}}
    stops_after_giving_up(ctx_module_backend, server.pid, lambda: raw_post(server, "/mcp", call),
                          lambda sock: sock.close())
    quick_search(server)


def test_mcp_notifications_cancelled_stops_a_search(kb: Path, ctx_module_backend: str) -> None:
    stdio = spawn_ctx_stdio(kb, kb.parent / "stdio", CTX_DB_POOL_SIZE="1")
    try:
        stdio.initialize("2025-06-18")

        def start() -> str:
            stdio.send({"jsonrpc": "2.0", "id": "slow", "method": "tools/call",
                        "params": {"name": "search", "arguments": {"query": PHRASE, "limit": 5}}})
            return "slow"

        stops_after_giving_up(ctx_module_backend, stdio.pid, start, lambda rid: stdio.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid, "reason": "stop"}}))
        seen: list[Any] = []
        after = stdio.request("tools/call", {"name": "search", "arguments": {"query": "u3x7", "limit": 3}}, seen=seen)
        assert after["result"]["structuredContent"]["results"][0]["location"] == "Section 3 7", after
        assert not [m for m in seen if isinstance(m, dict) and m.get("id") == "slow"], \
            f"a cancelled request got a response: {seen}"
    finally:
        stdio.close()


def test_a_cancelled_statement_stops_and_its_connection_serves_again(kb: Path) -> None:
    """In-process: a statement that would run for minutes, under a cancel check that turns true after 0.5 s,
    ends as ``Cancelled`` within a second; the pool then leases a working service (a new connection)."""
    import threading

    from cairn_servers.core import deadline
    from cairn_servers.core.errors import Cancelled
    from cairn_servers.ctx import config as cfg
    from cairn_servers.ctx.pool import ServicePool

    pool = ServicePool(cfg.load(kb), 1)
    slow = ("SELECT pg_sleep(60)" if os.environ.get("CTX_DATABASE_URL") else
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5000000000) SELECT max(x) FROM c")
    try:
        for _ in range(2):
            gone = threading.Event()
            timer = threading.Timer(0.5, gone.set)
            timer.start()
            started = time.monotonic()
            with pytest.raises(Cancelled, match="cancelled"):
                with deadline.cancellable(gone.is_set), pool.lease() as svc:
                    svc.store.sql(slow)
            took = time.monotonic() - started
            assert 0.4 < took < 2.5, f"the statement stopped after {took:.2f} s"
            with pool.lease() as svc:
                assert svc.store.sql("SELECT 1") == [(1,)]
                assert [r.location for r in svc.search("u3x7", limit=1)] == ["Section 3 7"]
        assert pool.open_count() == 1  # the cancelled one was closed, not kept
        if os.environ.get("CTX_DATABASE_URL"):
            assert active_statements() == 0
        # Outside a cancellable block, nothing changes: a check that is never consulted cannot stop anything.
        with deadline.cancellable(None), pool.lease() as svc:
            assert svc.store.sql("SELECT 2") == [(2,)]
    finally:
        pool.close()


@pytest.mark.parametrize("app", ["ctx", "brk"])
def test_serve_help_names_the_connection_settings(app: str, tmp_path: Path) -> None:
    import subprocess

    done = subprocess.run(_cli(app, "serve", "--help"), env=server_env(tmp_path), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    for suffix, default in (("IDLE_TIMEOUT", "5"), ("READ_TIMEOUT", "30"), ("MAX_CONNECTIONS", "1000")):
        assert f"{app.upper()}_HTTP_{suffix}" in done.stdout and f"default {default}" in done.stdout, done.stdout
