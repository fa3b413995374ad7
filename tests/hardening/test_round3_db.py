"""Hardening round 3: ctx's database connections and the Lua timeout over ``context.*`` callbacks.

Real parts throughout: `ctx serve mcp` and `ctx sync` processes on a knowledge base generated here, on
SQLite and on the suite's throwaway PostgreSQL + pgvector (``ctx_backend``), real MCP/REST clients on
127.0.0.1, and an OpenAI-compatible embedding endpoint on 127.0.0.1 that counts what it embeds (or
stalls). Connection and descriptor counts come from ``pg_stat_activity`` and ``/proc/PID/fd``.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from ._servers import HttpServer, _cli, free_port, server_env, socket_server, spawn_ctx_http

pytestmark = pytest.mark.timeout(240)
DIMS = 8
# The server's worker threads come from anyio, which replaces a thread idle for WorkerThread.MAX_IDLE_TIME
# (10 s) when the next call comes. The pool test starts its server with that time at 1 s, so its idle gap
# between bursts is 1.5 s instead of 10.5 s; it still checks that the second burst ran on new threads.
IDLE_THREAD_SECONDS = 1.0
IDLE = IDLE_THREAD_SECONDS + 0.5  # seconds between bursts: past the time after which idle threads are replaced


# ---- an OpenAI-compatible embedding endpoint on 127.0.0.1 ------------------------------------------------

@dataclass
class Endpoint:
    """Answers ``POST /embeddings`` with deterministic vectors; counts the texts it embedded. ``stall``:
    reads the request and never answers (until the client goes away, whose time it records)."""

    port: int = 0
    delay: float = 0.0
    stall: bool = False
    texts: int = 0
    hashes: list[str] = field(default_factory=list)
    client_gone: list[float] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def handle(self, conn: socket.socket) -> None:
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                got = conn.recv(65536)
                if not got:
                    return
                data += got
            head, body = data.split(b"\r\n\r\n", 1)
            length = int(next(ln.split(b":")[1] for ln in head.split(b"\r\n")
                              if ln.lower().startswith(b"content-length")))
            while len(body) < length:
                body += conn.recv(65536)
            texts = json.loads(body)["input"]
            if self.stall:
                conn.settimeout(None)
                while not self.stop.is_set() and conn.recv(1):  # b"": the client closed its end
                    pass
                self.client_gone.append(time.monotonic())
                return
            time.sleep(self.delay)
            with self.lock:
                self.texts += len(texts)
                self.hashes.extend(hashlib.sha256(t.encode()).hexdigest() for t in texts)
            rows = [{"index": i, "embedding": [b / 255 + 0.01 for b in hashlib.sha256(t.encode()).digest()[:DIMS]]}
                    for i, t in enumerate(texts)]
            reply = json.dumps({"data": rows}).encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(reply) + reply)
        except OSError:
            pass
        finally:
            conn.close()


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    with socket_server(Endpoint(), conn_timeout=None) as state:
        yield state


# ---- a knowledge base generated here -------------------------------------------------------------------

def make_kb(base: Path, docs: int, *, embedding: str = 'provider = "disabled"', tools: dict[str, tuple[str, int]]
            | None = None, sync: bool = True) -> Path:
    """``docs`` Markdown files under ``base/docs`` (distinct text each), a config with ``embedding`` and the
    Lua ``tools``; synced with the real CLI (on $CTX_DATABASE_URL's PostgreSQL when the backend sets it)."""
    root = base / "docs"
    root.mkdir(parents=True, exist_ok=True)
    for i in range(docs):
        (root / f"doc{i:04d}.md").write_text(f"# Deploy note {i}\n\nRotate key {i} then deploy service s{i % 7}; "
                                             f"see runbook r{i} and the incident log of week {i % 52}.\n")
    config = f'[db]\npath = "kb.sqlite"\n[embedding]\n{embedding}\n[connectors.filesystem.docs]\nroot = "docs"\n'
    for name, (script, timeout) in (tools or {}).items():
        (base / f"{name}.lua").write_text(script)
        config += f'[tools.script.{name}]\npath = "{name}.lua"\ntimeout = {timeout}\n'
    cfg = base / "ctx.toml"
    cfg.write_text(config)
    if sync:
        done = subprocess.run(_cli("ctx", "sync", "all", "--config", str(cfg)), env=server_env(base),
                              capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr
    return cfg


def mcp_search(url: str, query: str, client: httpx.Client | None = None) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "search", "arguments": {"query": query, "limit": 5}}}
    post = client.post if client is not None else httpx.post
    reply = post(url + "/mcp", json=body, headers={"accept": "application/json", "mcp-protocol-version": "2025-06-18"},
                 timeout=60)
    data = reply.json()
    assert "result" in data and not data["result"].get("isError"), reply.text
    return dict(data["result"])


def pg_connections(url: str) -> int:
    """Sessions of ctx (application_name ``ctx``) on the database of ``url``."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                           " AND application_name = 'ctx'").fetchone()
    assert row is not None
    return int(row[0])


def fds(pid: int) -> list[str]:
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass  # closed meanwhile
    return out


# ---- the pool: bursts with idle gaps -------------------------------------------------------------------

def test_connections_and_descriptors_stay_flat_across_bursts(ctx_backend: str, tmp_path: Path) -> None:
    """Two bursts of 40 MCP searches from 20 clients, 1.5 s apart (the server, its idle-thread time cut
    from 10 s to 1 s, replaces its idle worker threads in between): the database connections stay within ``[db] pool_size`` and the server's file
    descriptors do not grow. Before: every new worker thread opened a connection and kept it (PostgreSQL
    20 -> 86 connections over six bursts; SQLite 135 -> 271 descriptors over four)."""
    cfg = make_kb(tmp_path / "kb", 60)
    port = free_port()
    launcher = ("import runpy, sys; import anyio._backends._asyncio as a; "
                "a.WorkerThread.MAX_IDLE_TIME = float(sys.argv[1]); sys.argv = ['ctx', *sys.argv[2:]]; "
                "runpy.run_module('cairn_servers.ctx.cli', run_name='__main__')")
    server = HttpServer([sys.executable, "-c", launcher, str(IDLE_THREAD_SECONDS), "serve", "mcp", "--config",
                         str(cfg), "--bind", f"127.0.0.1:{port}"],
                        server_env(tmp_path / "srv", CTX_DB_POOL_SIZE="4"), port, tmp_path / "srv", "/health")
    url = os.environ.get("CTX_DATABASE_URL", "")
    try:
        seen: list[dict[str, Any]] = []
        threads_seen: list[set[str]] = []
        for burst in range(2):
            if burst:
                time.sleep(IDLE)
            errors: list[str] = []

            def client(n: int) -> None:
                try:
                    with httpx.Client() as http:
                        for i in range(2):
                            mcp_search(server.url, f"deploy key {n * 2 + i} runbook", http)
                except Exception as exc:  # noqa: BLE001 (reported below)
                    errors.append(repr(exc))

            workers = [threading.Thread(target=client, args=(n,)) for n in range(20)]
            for w in workers:
                w.start()
            tasks: set[str] = set()
            while any(w.is_alive() for w in workers):
                tasks |= set(os.listdir(f"/proc/{server.pid}/task"))
                time.sleep(0.02)
            for w in workers:
                w.join()
            assert not errors, errors[:3]
            time.sleep(0.5)  # the clients' sockets are closed by now
            open_fds = fds(server.pid)
            seen.append({"fds": len(open_fds), "db_files": sum(1 for t in open_fds if t.endswith("kb.sqlite")),
                         "connections": pg_connections(url) if ctx_backend == "postgres" else None,
                         "threads": len(os.listdir(f"/proc/{server.pid}/task"))})
            threads_seen.append(tasks)
        print(f"{ctx_backend}: {seen} (load {os.getloadavg()[0]:.2f})")
        # The bursts did run on new threads (the idle ones were replaced): the case that leaked.
        assert threads_seen[1] - threads_seen[0], "no new worker thread in the last burst: the test proves nothing"
        for s in seen:
            if ctx_backend == "postgres":
                assert s["connections"] is not None and 1 <= s["connections"] <= 4, seen
            else:
                assert 1 <= s["db_files"] <= 4, seen
        # beyond the database files (at most pool_size, checked above; the pool may fill up only in the second
        # burst), the descriptors do not grow
        assert seen[1]["fds"] - seen[1]["db_files"] <= seen[0]["fds"] - seen[0]["db_files"] + 2, f"descriptors grew: {seen}"
        if ctx_backend == "postgres":
            assert seen[1]["connections"] <= seen[0]["connections"], seen
    finally:
        server.close()


def test_a_full_pool_waits_then_names_the_setting(ctx_backend: str, tmp_path: Path) -> None:
    """Leases beyond ``pool_size`` wait for a free one, and past the wait fail with a storage error that names
    ``[db] pool_size``; the pool never opens more services (connections) than its size."""
    from cairn_servers.core.errors import StorageError
    from cairn_servers.ctx import config as cfg
    from cairn_servers.ctx.pool import ServicePool

    conf = cfg.load(make_kb(tmp_path, 3))
    pool = ServicePool(conf, 2, wait=0.4)
    try:
        held = threading.Event()
        release = threading.Event()

        def hold() -> None:
            with pool.lease() as svc:
                svc.sources()
                held.set()
                release.wait(10)

        holders = [threading.Thread(target=hold) for _ in range(2)]
        for h in holders:
            h.start()
        assert held.wait(10)
        time.sleep(0.1)
        started = time.monotonic()
        with pytest.raises(StorageError, match=r"All 2 connections to the knowledge base .* stayed busy for 0.4 s\. "
                                               r"Raise \[db\] pool_size \(or \$CTX_DB_POOL_SIZE\)"):
            with pool.lease():
                pass
        assert 0.35 < time.monotonic() - started < 2.0
        threading.Timer(0.2, release.set).start()
        with pool.lease() as svc:  # waits for a holder to give one back
            assert [s.name for s in svc.sources()] == ["docs"]
        for h in holders:
            h.join()
        assert pool.open_count() == 2
    finally:
        pool.close()


def test_pool_size_is_validated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cairn_servers.core.errors import InvalidInput
    from cairn_servers.ctx import config as cfg

    path = tmp_path / "ctx.toml"
    path.write_text('[db]\npath = "kb.sqlite"\npool_size = 3\n')
    assert cfg.load(path).db.pool_size == 3
    monkeypatch.setenv("CTX_DB_POOL_SIZE", "12")
    assert cfg.load(path).db.pool_size == 12
    for bad in ("0", "x", "1001", "9" * 5000, "²"):
        monkeypatch.setenv("CTX_DB_POOL_SIZE", bad)
        with pytest.raises(InvalidInput, match=r"\$CTX_DB_POOL_SIZE must be an integer from 1 to 1000"):
            cfg.load(path)
    monkeypatch.delenv("CTX_DB_POOL_SIZE")
    path.write_text('[db]\npath = "kb.sqlite"\npool_size = 0\n')
    with pytest.raises(InvalidInput, match=r"pool_size.*must be between 1 and 1000, not 0"):
        cfg.load(path)


# ---- the Lua timeout over context.* callbacks --------------------------------------------------------

SLOW_SEARCH = """
tool = {name = "slow", description = "one semantic search (the embedding endpoint stalls)", parameters = {}}
function tool.execute(params, context)
  return {hits = #context.search("deploy", {mode = "semantic", limit = 3})}
end
"""
SEARCH_LOOP = """
tool = {name = "loop", description = "searches until stopped", parameters = {}}
function tool.execute(params, context)
  local n = 0
  while true do n = n + #context.search("deploy key runbook", {limit = 5}) end
end
"""


def test_the_tool_timeout_covers_a_stalled_context_search(endpoint: Endpoint, tmp_path: Path) -> None:
    """A tool with ``timeout = 3`` whose ``context.search`` never returns (the embedding endpoint reads the
    query and stalls): the tool answers a timeout error within its timeout plus a margin, the server's
    request to the endpoint is abandoned by then, and with a pool of one connection the next search is
    answered at once (the callback gave its connection back). Before: the answer came after 44 s."""
    emb = f'provider = "openai"\nmodel = "m"\ndims = {DIMS}\nurl = "{endpoint.url}"\nbatch_size = 16'
    cfg = make_kb(tmp_path / "kb", 5, embedding=emb, tools={"slow": (SLOW_SEARCH, 3), "loop": (SEARCH_LOOP, 3)})
    server = spawn_ctx_http(cfg, tmp_path / "srv", CTX_DB_POOL_SIZE="1")
    try:
        endpoint.stall = True
        for surface in ("rest", "mcp"):
            started = time.monotonic()
            if surface == "rest":
                reply = httpx.post(server.url + "/tools/slow", json={}, timeout=60)
                took = time.monotonic() - started
                assert reply.status_code == 408, reply.text
                err = reply.json()["error"]
                assert err["code"] == "timeout", err
                message = err["message"]
            else:
                body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "slow", "arguments": {}}}
                data = httpx.post(server.url + "/mcp", json=body, timeout=60, headers={
                    "accept": "application/json", "mcp-protocol-version": "2025-06-18"}).json()
                took = time.monotonic() - started
                assert data["result"]["isError"] is True, data
                message = data["result"]["content"][0]["text"]
            assert "Lua tool 'slow': exceeded its time limit of 3 s in a context.search call" in message, message
            assert took < 3 + 1.5, f"{surface}: answered after {took:.2f} s"
            assert endpoint.client_gone and endpoint.client_gone[-1] - started < 3 + 1.5, \
                "the server was still waiting for the embedding endpoint"
            quick = time.monotonic()
            assert mcp_search(server.url, "deploy")["structuredContent"]["results"]
            assert time.monotonic() - quick < 2.0
            print(f"{surface}: timeout answered after {took:.2f} s (load {os.getloadavg()[0]:.2f})")
        # Many quick callbacks: the budget still ends the call on time.
        started = time.monotonic()
        reply = httpx.post(server.url + "/tools/loop", json={}, timeout=60)
        assert reply.json()["error"]["code"] == "timeout" and time.monotonic() - started < 3 + 1.5, reply.text
    finally:
        endpoint.stop.set()
        server.close()


def test_a_statement_past_the_deadline_is_interrupted(ctx_backend: str, tmp_path: Path) -> None:
    """Under a deadline (what a Lua tool's callback runs under), a statement that would run for minutes stops
    at the deadline: SQLite's progress handler, PostgreSQL's ``statement_timeout``; the connection is
    usable afterwards, and on PostgreSQL the session's timeout is back to the role's."""
    from cairn_servers.core import deadline
    from cairn_servers.core.errors import Timeout
    from cairn_servers.ctx import config as cfg
    from cairn_servers.ctx.service import Service

    svc = Service(cfg.load(make_kb(tmp_path, 2)))
    slow = ("SELECT pg_sleep(60)" if ctx_backend == "postgres" else
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5000000000) SELECT max(x) FROM c")
    try:
        for _ in range(2):
            started = time.monotonic()
            with pytest.raises(Timeout, match=r"^Lua tool 't': exceeded its time limit\.$"):
                with deadline.bounded(time.monotonic() + 0.5, "Lua tool 't': exceeded its time limit"):
                    svc.store.sql(slow)
            assert time.monotonic() - started < 1.5
        assert svc.store.sql("SELECT 1") == [(1,)]
        if ctx_backend == "postgres":
            assert svc.store.sql("SHOW statement_timeout") == [("0",)]
        assert [r.title for r in svc.search("deploy", limit=1)]
    finally:
        svc.close()


# ---- driver errors -------------------------------------------------------------------------------------

def test_sync_against_a_read_only_database_is_a_storage_error(pg_server: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A database set ``default_transaction_read_only = on`` (what a standby enforces): ``ctx sync`` and
    ``ctx embed pending`` exit 7 with a message naming the cause and the fix, never a driver traceback;
    searches still work. Before: a ``psycopg.errors.ReadOnlySqlTransaction`` traceback, exit 1."""
    import psycopg

    from .._pg import drop_database, pg_database

    name, url = pg_database(pg_server)
    monkeypatch.setenv("CTX_DATABASE_URL", url)
    try:
        cfg = make_kb(tmp_path, 4)
        export = tmp_path / "kb.jsonl"
        subprocess.run(_cli("ctx", "export", "--out", str(export), "--config", str(cfg)), env=server_env(tmp_path),
                       check=True, capture_output=True, timeout=60)
        with psycopg.connect(pg_server, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
        (tmp_path / "docs" / "new.md").write_text("# New\n\nA new page.\n")
        for argv in (["sync", "all"], ["sync", "all", "--full"], ["import", str(export), "--merge"]):
            done = subprocess.run(_cli("ctx", *argv, "--config", str(cfg)), env=server_env(tmp_path),
                                  capture_output=True, text=True, timeout=120)
            assert "Traceback" not in done.stderr and "psycopg" not in done.stderr, done.stderr
            assert done.returncode == 7, (argv, done.returncode, done.stderr)
            assert "is read-only" in done.stderr and "run `ctx sync`, `ctx embed` and `ctx import` against " \
                   "the primary" in done.stderr, done.stderr
        found = subprocess.run(_cli("ctx", "search", "deploy", "--config", str(cfg), "--json"), env=server_env(tmp_path),
                               capture_output=True, text=True, timeout=60)
        assert found.returncode == 0 and json.loads(found.stdout), found.stderr
    finally:
        drop_database(pg_server, name)


def test_a_role_without_privileges_is_a_storage_error(pg_server: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A role that may connect but not read the ctx tables: `ctx search` exits 7 with what to grant, not a
    driver traceback."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    from .._pg import _url, drop_database, pg_database

    name, url = pg_database(pg_server)
    monkeypatch.setenv("CTX_DATABASE_URL", url)
    role = f"ctx_noaccess_{os.getpid()}"
    try:
        cfg = make_kb(tmp_path, 3)
        with psycopg.connect(pg_server, autocommit=True) as conn:
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')
            conn.execute(f'CREATE ROLE "{role}" LOGIN')
        params = conninfo_to_dict(url)
        params["user"] = role
        from psycopg.conninfo import make_conninfo

        env = server_env(tmp_path, CTX_DATABASE_URL=_url(make_conninfo("", **params)))
        done = subprocess.run(_cli("ctx", "search", "deploy", "--config", str(cfg)), env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 7 and "Traceback" not in done.stderr, (done.returncode, done.stderr)
        assert "refused this: permission denied" in done.stderr and "Grant the role the privileges" in done.stderr, \
            done.stderr
    finally:
        drop_database(pg_server, name)
        with psycopg.connect(pg_server, autocommit=True) as conn:
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')


def test_a_sqlite_write_lock_held_past_the_busy_timeout_is_a_storage_error(tmp_path: Path) -> None:
    """Another process holds the SQLite write lock past the busy timeout: the write fails with a storage
    error (exit 7) that says what to check, not a driver exception escaping ``BEGIN IMMEDIATE``."""
    import sqlite3

    from cairn_servers.core.errors import StorageError
    from cairn_servers.ctx.store import SqliteStore

    store = SqliteStore(tmp_path / "kb.sqlite", create=True)
    other = sqlite3.connect(tmp_path / "kb.sqlite", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        store.db.execute("PRAGMA busy_timeout = 100")
        with pytest.raises(StorageError, match=r"Cannot write the knowledge base .*kb\.sqlite: database is locked\. "
                                               r"Check that no other process holds it for long"):
            with store.transaction():
                store.bump()
        other.execute("ROLLBACK")
        with store.transaction():
            store.bump()
        assert store.generation() == 1
    finally:
        other.close()
        store.close()


# ---- embedding under a lock ----------------------------------------------------------------------------

def test_overlapping_syncs_embed_each_chunk_once(ctx_backend: str, endpoint: Endpoint, tmp_path: Path) -> None:
    """Two `ctx sync all` processes started together, with an embedding endpoint slow enough that their
    embedding overlaps: the endpoint embeds each chunk exactly once, and every chunk has its vector.
    Before: the source lock covered indexing only, and both syncs embedded everything."""
    endpoint.delay = 0.15
    emb = f'provider = "openai"\nmodel = "m"\ndims = {DIMS}\nurl = "{endpoint.url}"\nbatch_size = 8'
    cfg = make_kb(tmp_path, 120, embedding=emb, sync=False)
    procs = [subprocess.Popen(_cli("ctx", "sync", "all", "--config", str(cfg), "--json"), env=server_env(tmp_path),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    peak = 0  # each sync holds one connection (PostgreSQL: sampled while they run)
    while ctx_backend == "postgres" and any(p.poll() is None for p in procs):
        peak = max(peak, pg_connections(os.environ["CTX_DATABASE_URL"]))
        time.sleep(0.05)
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert ctx_backend == "sqlite" or 1 <= peak <= 2, peak
    embedded = [json.loads(out)["embedding"]["embedded"] for out, _ in outs]
    from cairn_servers.ctx import config as config_mod
    from cairn_servers.ctx.service import Service

    svc = Service(config_mod.load(cfg))
    try:
        stats = svc.stats()
    finally:
        svc.close()
    print(f"{ctx_backend}: endpoint embedded {endpoint.texts} texts for {stats.distinct_chunks} chunks; "
          f"the syncs reported {embedded}; peak sessions {peak}")
    assert stats.distinct_chunks == 120 and stats.vectors == 120 and stats.pending_embeddings == 0
    assert sorted(embedded) == [0, 120], embedded
    assert endpoint.texts == 120 and len(set(endpoint.hashes)) == 120


# ---- a long keyword query on PostgreSQL ----------------------------------------------------------------

def test_many_term_keyword_queries_rank_as_the_inline_statement(pg_server: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``INLINE_TERMS`` terms the keyword statement ORs the terms once instead of planning them inline
    (200 terms over 20,000 chunks: 3.26 s -> 0.58 s of backend CPU, with each chunk's tsvector read once):
    the same chunks and scores as the inline statement, under the budget and over it (the plan's second
    statement), with filters and without."""
    from .._pg import drop_database, pg_database
    from cairn_servers.ctx import config as cfg
    from cairn_servers.ctx import retrieval, store_pg
    from cairn_servers.ctx.service import Service

    name, url = pg_database(pg_server)
    monkeypatch.setenv("CTX_DATABASE_URL", url)
    try:
        svc = Service(cfg.load(make_kb(tmp_path, 300)))
        words = [f"runbook r{i}" for i in range(0, 300, 7)] + ["deploy", "rotate", "incident", "week", "s3", "key"]
        try:
            for query, budget, sources in ((" ".join(words[:12]), 8000, None), (" ".join(words), 8000, None),
                                           (" ".join(words), 40, None), (" ".join(words), 8000, ("filesystem:docs",))):
                answers = []
                for inline in (1000, store_pg.INLINE_TERMS):
                    monkeypatch.setattr(store_pg, "INLINE_TERMS", inline)
                    answers.append(retrieval.keyword(svc.store, query, retrieval.Filters(sources=sources), 20,
                                                     budget=budget))
                assert answers[0] and answers[0].keys() == answers[1].keys(), (query[:40], budget)
                assert all(abs(answers[0][r] - answers[1][r]) < 1e-9 for r in answers[0])
        finally:
            svc.close()
    finally:
        drop_database(pg_server, name)


def test_two_processes_opening_a_new_sqlite_knowledge_base_together_both_open(tmp_path: Path) -> None:
    """SQLite answers "database is locked" at once, not after its busy timeout, to a process switching a
    new database to WAL while another opens it: two syncs started together on a new knowledge base lost
    one of them about once in 40 tries. Both must open it, every time."""
    import sys

    code = ("import sys; from pathlib import Path; from cairn_servers.ctx.store import SqliteStore; "
            "SqliteStore(Path(sys.argv[1]), create=True)")
    for i in range(40):
        path = tmp_path / f"kb{i}.sqlite"
        procs = [subprocess.Popen([sys.executable, "-c", code, str(path)], stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        errors = [p.communicate(timeout=60)[1] for p in procs]
        assert [p.returncode for p in procs] == [0, 0], errors
