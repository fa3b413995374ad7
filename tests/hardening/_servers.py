"""Real Cairn servers for the hardening tests: prepared data, spawned processes, RSS from /proc.

Every server runs as its own process (``python -m cairn.<app>.cli ...``) so the tests see what a
user's editor sees, can read the server's resident memory from ``/proc/PID/status``, and can tell a
crash (the process is gone) from an error answer. HTTP servers listen on a free 127.0.0.1 port.

Outbound network access is cut for every spawned server: ``HTTP(S)_PROXY``/``ALL_PROXY`` point at a
closed loopback port and only loopback is exempt (httpx honours these variables), and
``BLZ_MCP_NETWORK=allowlist`` with no ``BLZ_MCP_ALLOW_HOSTS`` makes ``blz mcp`` refuse every host
before resolving it (its guarded fetches ignore proxy variables), so a fuzzed ``source-add`` can never
reach the internet.

Used by the fuzzing/load tests (tests/hardening/test_fuzz_*.py, test_load_*.py), the fault and
security tests, and ``benchmarks/soak.py``.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar

REPO = Path(__file__).resolve().parents[2]
STRESS = os.environ.get("CAIRN_STRESS", "") not in ("", "0")
DEAD_PROXY = "http://127.0.0.1:9"  # discard port: nothing listens there, connections fail at once
# Real llms.txt files for blz (small enough to index in well under a second).
BLZ_FILES = {"hono": "hono/llms-small.txt", "tresjs": "tresjs/llms-full.txt", "spec": "llmstxt-spec/llms-ctx-full.txt"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_kb(pid: int) -> int:
    """Resident set size of process ``pid`` in KiB (``VmRSS`` from /proc)."""
    from cairn_servers.core.heap import memory_kib

    kib = memory_kib(pid)
    if not kib:
        raise RuntimeError(f"no VmRSS for pid {pid}")
    return kib


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields from the 3rd (state) on: index = field number - 3."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def children(pid: int) -> list[int]:
    """Live child processes of ``pid`` (ctx's Lua workers)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(_stat(int(entry))[1]) == pid:
                    out.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass  # gone meanwhile
    return out


def own_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` alone."""
    return sum(int(x) for x in _stat(pid)[11:13]) / os.sysconf("SC_CLK_TCK")


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid``, its reaped children (cutime, cstime: a killed Lua worker's time moves
    there) and its live children (the Lua workers); it never goes back."""
    total = sum(int(x) for x in _stat(pid)[11:15]) / os.sysconf("SC_CLK_TCK")
    for child in children(pid):
        try:
            total += own_cpu(child)
        except (OSError, IndexError, ValueError):
            pass
    return total


def server_env(workdir: Path, **extra: str) -> dict[str, str]:
    """The environment of a spawned server: this one, without outbound network, with its XDG dirs
    under ``workdir`` (never the user's), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")}
    for var in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        env[var] = str(workdir / "xdg" / var.lower())
    env.update(HTTP_PROXY=DEAD_PROXY, HTTPS_PROXY=DEAD_PROXY, ALL_PROXY=DEAD_PROXY,
               http_proxy=DEAD_PROXY, https_proxy=DEAD_PROXY, all_proxy=DEAD_PROXY,
               NO_PROXY="127.0.0.1,localhost,::1", no_proxy="127.0.0.1,localhost,::1",
               PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1", BLZ_MCP_NETWORK="allowlist")
    src = str(REPO / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


# -- a raw socket server for fault cases ------------------------------------------------------------

class Handler(Protocol):
    """What :func:`socket_server` serves: ``handle(conn)`` answers one connection (and closes it)."""

    port: int
    stop: threading.Event

    def handle(self, conn: socket.socket) -> None: ...


H = TypeVar("H", bound=Handler)


@contextmanager
def socket_server(state: H, conn_timeout: float | None = 30) -> Iterator[H]:
    """``state`` listening on a free 127.0.0.1 port (``state.port``): each connection handled by
    ``state.handle`` on a thread of its own, until the block ends (``state.stop`` is set then)."""
    sock = socket.create_server(("127.0.0.1", 0))
    sock.settimeout(0.1)
    state.port = sock.getsockname()[1]

    def accept() -> None:
        while not state.stop.is_set():
            try:
                conn, _ = sock.accept()
            except (TimeoutError, OSError):
                continue
            if conn_timeout is not None:
                conn.settimeout(conn_timeout)
            threading.Thread(target=state.handle, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.stop.set()
        thread.join(5)
        sock.close()


# -- data ----------------------------------------------------------------------------------------

def prepare_blz(root: Path, llms: Path) -> Path:
    """A blz data root holding real llms.txt sources from ``llms`` (the test data's ``llms`` folder)."""
    from cairn_servers.blz import sources
    from cairn_servers.blz.store import Store

    root.mkdir(parents=True, exist_ok=True)
    store = Store(root)
    try:
        for alias, rel in BLZ_FILES.items():
            sources.add(store, alias, str(llms / rel), exact=True)
    finally:
        store.close()
    return root


def prepare_brk(base: Path) -> Path:
    """A brk output directory indexed and computed from the bundled mainnet heights 0..589."""
    from cairn_servers.brk.compute import compute
    from cairn_servers.brk.indexer import index
    from cairn_servers.brk.sample import write_mainnet_sample

    out = base / "out"
    if not (out / "computed").exists():
        write_mainnet_sample(base / "blocks")
        index(base / "blocks", out)
        compute(out, blocks_dir=base / "blocks")  # the address and block explorer passes read the blocks
    return out


CTX_FILES = ["hono/llms-small.txt", "tresjs/llms-full.txt", "llmstxt-spec/llms-ctx-full.txt", "fasthtml/llms.txt",
             "react-dev/llms.txt", "langchainjs/llms.txt", "copilotkit/llms.txt"]
ECHO_TOOL = """
tool = {name = "echo", description = "returns its input", parameters = {
  {name = "text", type = "string", required = true, description = "what to echo"},
  {name = "times", type = "integer", default = 1, description = "repeat count (1-5)"}}}
function tool.execute(params, context)
  local n = math.max(1, math.min(params.times or 1, 5))
  return {text = string.rep(params.text, n), n = n}
end
"""


def prepare_ctx(base: Path, llms: Path) -> Path:
    """A ctx config (keyword search) over real llms.txt files from ``llms`` (the test data's ``llms``
    folder), synced, with two Lua tools:
    ``find_mentions`` (the bundled example, which calls search) and ``echo``. Returns the config path."""
    import shutil

    docs = base / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    for rel in CTX_FILES:
        shutil.copy(llms / rel, docs / rel.replace("/", "-"))
    shutil.copy(REPO / "examples" / "ctx" / "tools" / "find_mentions.lua", base / "find_mentions.lua")
    (base / "echo.lua").write_text(ECHO_TOOL)
    cfg = base / "ctx.toml"
    cfg.write_text('[db]\npath = "kb.sqlite"\n[embedding]\nprovider = "disabled"\n'
                   '[connectors.filesystem.docs]\nroot = "docs"\ninclude_globs = ["**/*.txt", "**/*.md"]\n'
                   '[tools.script.find_mentions]\npath = "find_mentions.lua"\ntimeout = 5\n'
                   '[tools.script.echo]\npath = "echo.lua"\ntimeout = 5\n')
    subprocess.run(_cli("ctx", "sync", "all", "--config", str(cfg), "--json"), check=True,
                   env=server_env(base), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)
    return cfg


# A CPU-bound Lua tool: ``spin(n)`` loops n times (round 2's cancellation and body-limit tests).
SPIN_TOOL = """
tool = {name = "spin", description = "burns CPU", parameters = {{name = "n", type = "integer", required = true}}}
function tool.execute(params, context)
  local x = 0
  for i = 1, params.n do x = x + i end
  return {x = x}
end
"""


def generated_kb(base: Path, docs: dict[str, str], tools: dict[str, tuple[str, int]]) -> Path:
    """A small ctx knowledge base generated under ``base`` (no shared data): the Markdown ``docs``
    (file name -> text) under ``docs/``, the Lua ``tools`` (name -> (script, timeout in seconds)),
    keyword search only; synced with the real CLI. Returns the config path."""
    (base / "docs").mkdir(parents=True, exist_ok=True)
    for name, text in docs.items():
        (base / "docs" / name).write_text(text)
    config = '[db]\npath = "kb.sqlite"\n[embedding]\nprovider = "disabled"\n[connectors.filesystem.docs]\nroot = "docs"\n'
    for name, (script, timeout) in tools.items():
        (base / f"{name}.lua").write_text(script)
        config += f'[tools.script.{name}]\npath = "{name}.lua"\ntimeout = {timeout}\n'
    cfg = base / "ctx.toml"
    cfg.write_text(config)
    subprocess.run(_cli("ctx", "sync", "all", "--config", str(cfg)), check=True, env=server_env(base),
                   capture_output=True, timeout=120)
    return cfg


# -- processes -----------------------------------------------------------------------------------

class _Proc:
    proc: subprocess.Popen[bytes]
    stderr_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss_kb(self) -> int:
        return rss_kb(self.proc.pid)

    def stderr_tail(self, limit: int = 4000) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def close(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


class StdioServer(_Proc):
    """A stdio MCP server process; a reader thread queues every stdout line (parsed, or the raw bytes)."""

    def __init__(self, argv: list[str], env: dict[str, str], workdir: Path, cwd: Path | None = None) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.stderr_path = workdir / f"stderr-{time.monotonic_ns()}.log"
        self._stderr: IO[bytes] = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                     env=env, cwd=cwd)
        self.lines: queue.Queue[Any] = queue.Queue()
        self._next = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.lines.put(json.loads(line))
            except ValueError:
                self.lines.put(("unparseable", line))
        self.lines.put(("eof", b""))

    def send(self, raw: bytes | dict[str, Any]) -> None:
        data = json.dumps(raw).encode() if isinstance(raw, dict) else raw
        assert self.proc.stdin is not None
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def recv(self, timeout: float = 30.0) -> Any:
        """The next stdout message; raises AssertionError on EOF, unparseable output or timeout."""
        try:
            msg = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no reply within {timeout}s; stderr: {self.stderr_tail()}") from None
        if isinstance(msg, tuple):
            raise AssertionError(f"server stdout {msg[0]}: {msg[1][:300]!r}; stderr: {self.stderr_tail()}")
        return msg

    def new_id(self) -> str:
        self._next += 1
        return f"h{self._next}"

    def request(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30.0,
                seen: list[Any] | None = None) -> dict[str, Any]:
        """Send a request and return its response; other messages on the way go to ``seen``."""
        rid = self.new_id()
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return self.wait_for(rid, timeout, seen)

    def wait_for(self, rid: Any, timeout: float = 30.0, seen: list[Any] | None = None) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            msg = self.recv(max(0.01, deadline - time.monotonic()))
            if isinstance(msg, dict) and "method" not in msg and msg.get("id") == rid:
                return msg
            if isinstance(msg, dict) and msg.get("id", 0) is None and msg.get("error", {}).get("code") == -32700:
                # parse errors are answered at once, in order: this one is about our request
                raise AssertionError(f"the server could not parse request {rid!r}: {msg}")
            if seen is not None:
                seen.append(msg)

    def initialize(self, version: str = "2025-11-25") -> dict[str, Any]:
        reply = self.request("initialize", {"protocolVersion": version, "capabilities": {},
                                            "clientInfo": {"name": "cairn-hardening", "version": "0"}})
        assert "result" in reply, reply
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        result: dict[str, Any] = reply["result"]
        return result

    def close(self) -> int | None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()  # EOF: the documented clean shutdown
            except OSError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        code = super().close()
        self._stderr.close()
        return code


class HttpServer(_Proc):
    """An HTTP server process on 127.0.0.1:``port``; ready once ``ready_path`` answers."""

    def __init__(self, argv: list[str], env: dict[str, str], port: int, workdir: Path, ready_path: str,
                 cwd: Path | None = None, start_timeout: float = 60.0) -> None:
        import httpx

        workdir.mkdir(parents=True, exist_ok=True)
        self.stderr_path = workdir / f"stderr-{time.monotonic_ns()}.log"
        self._stderr = open(self.stderr_path, "wb")
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._stderr, stderr=self._stderr,
                                     env=env, cwd=cwd)
        deadline = time.monotonic() + start_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{argv} exited with {self.proc.returncode}: {self.stderr_tail()}")
            try:
                if httpx.get(self.url + ready_path, timeout=2).status_code < 500:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"{argv} did not answer {ready_path} within {start_timeout}s: {self.stderr_tail()}")
            time.sleep(0.05)

    def close(self) -> int | None:
        code = super().close()
        self._stderr.close()
        return code


def _cli(app: str, *args: str) -> list[str]:
    return [sys.executable, "-m", f"cairn_servers.{app}.cli", *args]


def spawn_blz_stdio(data_root: Path, workdir: Path, **env: str) -> StdioServer:
    return StdioServer(_cli("blz", "mcp"), server_env(workdir, BLZ_DATA_DIR=str(data_root), **env), workdir)


def spawn_brk_stdio(out: Path, workdir: Path, **env: str) -> StdioServer:
    return StdioServer(_cli("brk", "mcp", "--out", str(out)), server_env(workdir, **env), workdir)


def spawn_brk_http(out: Path, workdir: Path, **env: str) -> HttpServer:
    port = free_port()
    return HttpServer(_cli("brk", "serve", "--out", str(out), "--bind", f"127.0.0.1:{port}"), server_env(workdir, **env),
                      port, workdir, "/health")


def spawn_ctx_stdio(config: Path, workdir: Path, **env: str) -> StdioServer:
    return StdioServer(_cli("ctx", "serve", "mcp", "--stdio", "--config", str(config)), server_env(workdir, **env), workdir)


def spawn_ctx_http(config: Path, workdir: Path, **env: str) -> HttpServer:
    port = free_port()
    return HttpServer(_cli("ctx", "serve", "mcp", "--config", str(config), "--bind", f"127.0.0.1:{port}"),
                      server_env(workdir, **env), port, workdir, "/health")


# -- load ------------------------------------------------------------------------------------------

Request = tuple[str, str, bytes | None]  # method, path with query, JSON body


def _pct(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def _summary(latencies: list[float], errors: list[str], seconds: float, rss: list[tuple[float, int]],
             warmup: float) -> dict[str, Any]:
    """Throughput, latency percentiles (ms), errors and RSS over time; ``rss_growth_kb`` is the largest
    RSS seen after ``warmup`` seconds minus the RSS at ``warmup``."""
    after = [kb for t, kb in rss if t >= warmup]
    base = after[0] if after else (rss[-1][1] if rss else 0)
    return {
        "requests": len(latencies) + len(errors), "errors": len(errors), "error_samples": errors[:5],
        "seconds": round(seconds, 2), "throughput_rps": round(len(latencies) / seconds, 1) if seconds else 0.0,
        "p50_ms": round(_pct(latencies, 50) * 1000, 2), "p99_ms": round(_pct(latencies, 99) * 1000, 2),
        "max_ms": round(max(latencies, default=0.0) * 1000, 2),
        "rss_kb": [[round(t, 1), kb] for t, kb in rss], "rss_warm_kb": base,
        "rss_growth_kb": (max(after) - base) if after else 0,
    }


def _sample_rss(pid: int, stop: threading.Event, out: list[tuple[float, int]], every: float) -> None:
    start = time.monotonic()
    while True:
        try:
            out.append((time.monotonic() - start, rss_kb(pid)))
        except (OSError, RuntimeError):
            return
        if stop.wait(every):
            return


def http_load(port: int, pid: int, requests: list[Request], *, clients: int, seconds: float,
              warmup: float, rss_every: float = 0.5) -> dict[str, Any]:
    """``clients`` keep-alive HTTP/1.1 connections to 127.0.0.1:``port``, each sending the next
    request of ``requests`` (round robin, from its own offset) as soon as the previous is answered,
    for ``seconds``. A non-2xx status, a closed connection or a timeout is an error."""
    import asyncio

    latencies: list[float] = []
    errors: list[str] = []
    rss: list[tuple[float, int]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=_sample_rss, args=(pid, stop, rss, rss_every), daemon=True)

    def encode(req: Request) -> bytes:
        method, path, body = req
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: application/json\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        return head.encode() + b"\r\n" + (body or b"")

    wire = [encode(r) for r in requests]

    async def read_response(reader: asyncio.StreamReader) -> int:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                await reader.readexactly(size + 2)
                if size == 0:
                    break
        else:
            await reader.readexactly(int(headers.get("content-length", "0")))
        return status

    async def client(n: int, deadline: float) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        i = n * 7919
        try:
            while time.monotonic() < deadline:
                data = wire[i % len(wire)]
                i += 1
                t0 = time.perf_counter()
                try:
                    writer.write(data)
                    status = await asyncio.wait_for(read_response(reader), 30)
                except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError) as exc:
                    errors.append(f"{requests[(i - 1) % len(requests)][:2]}: {type(exc).__name__}: {exc}")
                    writer.close()
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    continue
                if 200 <= status < 300:
                    latencies.append(time.perf_counter() - t0)
                else:
                    errors.append(f"{requests[(i - 1) % len(requests)][:2]}: HTTP {status}")
        finally:
            writer.close()

    async def main() -> float:
        started = time.monotonic()
        await asyncio.gather(*(client(n, started + seconds) for n in range(clients)))
        return time.monotonic() - started

    sampler.start()
    try:
        elapsed = asyncio.run(main())
    finally:
        stop.set()
        sampler.join(5)
    return _summary(latencies, errors, elapsed, rss, warmup) | {"clients": clients}


def stdio_loop(server: StdioServer, calls: list[tuple[str, dict[str, Any]]], *, seconds: float, warmup: float,
               rss_every: float = 0.5) -> dict[str, Any]:
    """One client calling ``calls`` (tool name, arguments) round robin, back to back, for ``seconds``.
    A JSON-RPC error, an ``isError`` result or no answer within 30 s is an error."""
    latencies: list[float] = []
    errors: list[str] = []
    rss: list[tuple[float, int]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=_sample_rss, args=(server.pid, stop, rss, rss_every), daemon=True)
    sampler.start()
    started = time.monotonic()
    i = 0
    try:
        while time.monotonic() - started < seconds:
            name, args = calls[i % len(calls)]
            i += 1
            t0 = time.perf_counter()
            reply = server.request("tools/call", {"name": name, "arguments": args}, timeout=30)
            if "error" in reply or reply["result"].get("isError"):
                errors.append(f"{name}: {str(reply)[:200]}")
            else:
                latencies.append(time.perf_counter() - t0)
    finally:
        stop.set()
        sampler.join(5)
    return _summary(latencies, errors, time.monotonic() - started, rss, warmup) | {"clients": 1}


def brk_requests() -> list[Request]:
    """A mix of brk API reads and MCP tool calls over the mainnet sample (every one answers 200)."""
    reqs: list[Request] = []
    for index, ids in (("date", "block_count,supply_btc"), ("height", "hash_rate"), ("week", "tx_count"),
                       ("height", "supply_btc,fee_rate"), ("month", "block_count_sum"), ("txindex", "txid")):
        reqs.append(("GET", f"/api/vecs/query?index={index}&ids={ids}&from=-50", None))
    reqs += [("GET", "/api/vecs/height-to-supply-btc?from=-100&format=csv", None),
             ("GET", "/api/vecs/dateindex-to-block_count?count=20&format=md", None),
             ("GET", "/api/vecs/ids", None), ("GET", "/api/vecs/id-to-indexes?id=txid", None), ("GET", "/health", None)]
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "get_vecs", "arguments": {"index": "date", "ids": "block_count", "from": -10}}}
    reqs.append(("POST", "/mcp", json.dumps(call).encode()))
    return reqs


def ctx_requests(doc_ids: list[str]) -> list[Request]:
    """A mix of ctx keyword searches, gets, the sources list, a Lua tool and MCP calls (all 200)."""
    words = ["middleware", "install", "hooks state", "router", "deploy", "context", "streaming response",
             "component props", "agent", "cache"]
    reqs: list[Request] = [("POST", "/tools/search", json.dumps({"query": w, "limit": 10}).encode()) for w in words]
    reqs += [("POST", "/tools/get", json.dumps({"id": d}).encode()) for d in doc_ids[:5]]
    reqs += [("GET", "/tools/sources", None), ("POST", "/tools/echo", b'{"text": "hi", "times": 3}'),
             ("POST", "/tools/find_mentions", b'{"term": "hooks", "limit": 3}')]
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search", "arguments": {"query": "router"}}}
    reqs.append(("POST", "/mcp", json.dumps(call).encode()))
    return reqs


def blz_calls(aliases: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """A mix of blz searches, cited-line retrievals and list-sources (every one succeeds)."""
    calls: list[tuple[str, dict[str, Any]]] = [("find", {"query": q, "maxResults": 10}) for q in
                                               ("middleware", "install", "routing", "context", "fetch request")]
    calls += [("find", {"snippets": [f"{a}:1-20"], "contextMode": "symmetric", "linePadding": 3}) for a in aliases]
    calls += [("find", {"query": "app", "source": a}) for a in aliases]
    calls += [("list-sources", {}), ("learn-blz", {})]
    return calls
