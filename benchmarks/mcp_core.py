"""Benchmark of the MCP protocol core (``cairn_servers.mcp``); prints one JSON document on stdout.

Measures, for a small stdio server on the core (one tool, one resource, one prompt):

* spawn-to-initialize-reply time (median of ``--runs`` fresh processes);
* bytes of the serialized initialize result;
* resident memory (VmRSS from /proc) when idle after initialize, and after ``--calls`` tools/call;
* per-call round trip p50/p95 over stdio, and over streamable HTTP (uvicorn on a free loopback port,
  stateless mode, one keep-alive httpx client);

and, in the same run, the same figures for the official ``mcp`` SDK's own server (``MCPServer``, the
former FastMCP, over stdio) as a baseline.

Start-up ratio (issue 12): ``python -c pass`` against spawn -> initialize reply of the three real
stdio servers as users start them (the console scripts ``blz mcp``, ``ctx serve mcp --stdio``,
``brk mcp``, each on a small store made here) and of the core bench server. The commands run
round-robin, ``--startup-runs`` times each, so machine load hits them alike; medians are reported with
the ratio to the bare interpreter, plus the CPU time each used until it answered (from
/proc/PID/task/*/schedstat; for ``python -c pass`` its whole run, from wait4), which load distorts less.

    .venv/bin/python benchmarks/mcp_core.py [--runs 20] [--calls 1000] [--skip-sdk] [--skip-http]
    .venv/bin/python benchmarks/mcp_core.py --startup-only [--startup-runs 40]

Interleaved with another checkout (issue 14: "start-up does not get worse"), e.g. the previous landing:

    git worktree add /tmp/base REV
    .venv/bin/python benchmarks/mcp_core.py --startup-only --startup-runs 30 --against /tmp/base
    git worktree remove /tmp/base

Both trees' modules are compiled to bytecode first (``compileall``), so a ``PYTHONDONTWRITEBYTECODE``
shell does not make every spawn recompile.

Each round times ``python -c pass`` and every server under both checkouts (order alternating), both as
``PYTHONPATH=<checkout>/src`` with this interpreter, each on stores its own code made; it reports per
server the wall and CPU ratios, the median of the paired per-round differences, and VmRSS after
``tools/list``: read at once (racing what a server sets up after its first reply, such as ``blz mcp``'s
warm-up thread) and once the server is idle.

Linux only (reads /proc). Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

PROTOCOL = "2025-11-25"
INSTRUCTIONS = "Search local llms.txt docs; cite lines as alias:start-end."

# The server under test, run with ``python -c``: what a Cairn stdio server imports and declares.
CORE_SERVER = f"""
from cairn_servers.mcp.server import Server
from cairn_servers.mcp.stdio import serve_stdio
server = Server(name="bench", version="0.1.0", instructions={INSTRUCTIONS!r})
@server.tool(name="echo", description="Echo the text back.",
             input_schema={{"type": "object", "properties": {{"text": {{"type": "string"}}}}, "required": ["text"]}},
             annotations={{"readOnlyHint": True}})
def echo(args, ctx):
    return args["text"]
@server.resource("bench://about", name="about", description="About this server", mime_type="text/plain")
def about(uri):
    return "bench"
@server.prompt("hello", description="Say hello", arguments=[{{"name": "who", "required": True}}])
def hello(args):
    return "Hello " + args["who"]
serve_stdio(server)
"""

CORE_HTTP_SERVER = CORE_SERVER.replace("serve_stdio(server)", """
import sys, uvicorn
from cairn_servers.mcp.http import mcp_app
uvicorn.run(mcp_app(server, stateless=True), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
""")

# The baseline: the official SDK's high-level server with the same tool, resource and prompt.
SDK_SERVER = f"""
from mcp.server.mcpserver import MCPServer
server = MCPServer("bench", instructions={INSTRUCTIONS!r})
@server.tool(description="Echo the text back.")
def echo(text: str) -> str:
    return text
@server.resource("bench://about", name="about", description="About this server", mime_type="text/plain")
def about() -> str:
    return "bench"
@server.prompt(description="Say hello")
def hello(who: str) -> str:
    return "Hello " + who
server.run("stdio")
"""


def _initialize(request_id: int = 0) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize",
            "params": {"protocolVersion": PROTOCOL, "capabilities": {},
                       "clientInfo": {"name": "cairn-bench", "version": "0.1.0"}}}


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def _call(request_id: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": f"ping {request_id}"}}}


def _line(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB, from /proc/PID/status."""
    from cairn_servers.core.heap import memory_kib

    kib = memory_kib(pid)
    if not kib:
        raise RuntimeError(f"no VmRSS in /proc/{pid}/status")
    return kib


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


class StdioServer:
    """A server process spoken to over pipes, one JSON-RPC line at a time."""

    def __init__(self, code: str) -> None:
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, cwd=os.path.dirname(os.path.abspath(__file__)))
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin: IO[bytes] = self.proc.stdin
        self.stdout: IO[bytes] = self.proc.stdout

    def send(self, msg: dict[str, Any]) -> None:
        self.stdin.write(_line(msg))
        self.stdin.flush()

    def reply(self, request_id: int) -> dict[str, Any]:
        """Read lines until the response to ``request_id`` (skipping notifications)."""
        while True:
            raw = self.stdout.readline()
            if not raw:
                raise RuntimeError(f"server exited (rc={self.proc.poll()}) before answering request {request_id}")
            msg: dict[str, Any] = json.loads(raw)
            if msg.get("id") == request_id and ("result" in msg or "error" in msg):
                return msg

    def initialize(self) -> tuple[float, dict[str, Any], bytes]:
        """Send initialize at once; return (seconds since spawn, response, raw result bytes)."""
        self.send(_initialize())
        raw = self.stdout.readline()
        elapsed = time.perf_counter() - self.t0
        msg = json.loads(raw)
        if "result" not in msg:
            raise RuntimeError(f"initialize failed: {raw!r}")
        self.send(INITIALIZED)
        return elapsed, msg, json.dumps(msg["result"], separators=(",", ":"), ensure_ascii=False).encode()

    def close(self) -> None:
        try:
            self.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stdout.close()


def spawn_to_initialize(code: str, runs: int) -> dict[str, Any]:
    times: list[float] = []
    result_bytes = 0
    for _ in range(runs):
        server = StdioServer(code)
        try:
            elapsed, _, raw = server.initialize()
        finally:
            server.close()
        times.append(elapsed * 1000)
        result_bytes = len(raw)
    return {"median_ms": round(statistics.median(times), 2), "min_ms": round(min(times), 2),
            "max_ms": round(max(times), 2), "runs": runs, "initialize_result_bytes": result_bytes}


def stdio_calls(code: str, calls: int, warmup: int = 50) -> dict[str, Any]:
    server = StdioServer(code)
    try:
        server.initialize()
        # Let start-up work settle, then take idle RSS.
        server.send({"jsonrpc": "2.0", "id": -1, "method": "ping"})
        server.reply(-1)
        time.sleep(0.3)
        idle = rss_kib(server.proc.pid)
        for i in range(1, warmup + 1):
            server.send(_call(-1 - i))
            server.reply(-1 - i)
        rtts: list[float] = []
        for i in range(1, calls + 1):
            t = time.perf_counter()
            server.send(_call(i))
            msg = server.reply(i)
            rtts.append((time.perf_counter() - t) * 1000)
            if "result" not in msg or msg["result"].get("isError"):
                raise RuntimeError(f"tools/call failed: {msg}")
        after = rss_kib(server.proc.pid)
    finally:
        server.close()
    return {"idle_rss_mib": round(idle / 1024, 2), "rss_after_calls_mib": round(after / 1024, 2),
            "calls": calls, "rtt_p50_ms": round(percentile(rtts, 50), 4), "rtt_p95_ms": round(percentile(rtts, 95), 4),
            "rtt_mean_ms": round(statistics.fmean(rtts), 4)}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """Readiness by TCP connect (a GET /mcp could open an SSE stream that never ends)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"HTTP server exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"HTTP server did not listen on 127.0.0.1:{port} within {timeout} s")


def _http_result(response: Any) -> dict[str, Any]:
    """The JSON-RPC message of a streamable-HTTP POST reply, JSON or a one-message SSE stream."""
    response.raise_for_status()
    ctype = response.headers.get("content-type", "")
    if ctype.startswith("application/json"):
        msg: dict[str, Any] = response.json()
        return msg
    for line in response.text.splitlines():
        if line.startswith("data:") and line[5:].strip():
            candidate: dict[str, Any] = json.loads(line[5:])
            if "result" in candidate or "error" in candidate:
                return candidate
    raise RuntimeError(f"no JSON-RPC response in {ctype} body: {response.text[:200]!r}")


def http_calls(calls: int, warmup: int = 50) -> dict[str, Any]:
    import httpx

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", CORE_HTTP_SERVER, str(port)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_port(port, proc)
        url = f"http://127.0.0.1:{port}/mcp"
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
                   "MCP-Protocol-Version": PROTOCOL}
        with httpx.Client(headers=headers, timeout=10.0) as client:
            init = _http_result(client.post(url, content=_line(_initialize())))
            if "result" not in init:
                raise RuntimeError(f"initialize over HTTP failed: {init}")
            session = client.post(url, content=_line(INITIALIZED))
            if session.status_code not in (200, 202, 204):
                raise RuntimeError(f"initialized notification got HTTP {session.status_code}")
            for i in range(warmup):
                _http_result(client.post(url, content=_line(_call(-1 - i))))
            rtts: list[float] = []
            for i in range(1, calls + 1):
                body = _line(_call(i))
                t = time.perf_counter()
                msg = _http_result(client.post(url, content=body))
                rtts.append((time.perf_counter() - t) * 1000)
                if "result" not in msg or msg["result"].get("isError"):
                    raise RuntimeError(f"tools/call over HTTP failed: {msg}")
        server_rss = rss_kib(proc.pid)
    finally:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        if err:
            sys.stderr.write(err.decode(errors="replace")[-2000:])
    return {"calls": calls, "rtt_p50_ms": round(percentile(rtts, 50), 4), "rtt_p95_ms": round(percentile(rtts, 95), 4),
            "rtt_mean_ms": round(statistics.fmean(rtts), 4), "server_rss_after_calls_mib": round(server_rss / 1024, 2),
            "mode": "stateless", "client": "httpx.Client keep-alive"}


def _task_cpu_ms(pid: int) -> float:
    """CPU time used so far by every thread of ``pid`` (ms), from /proc/PID/task/*/schedstat."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat", encoding="ascii") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e6


def _bare(python: str) -> tuple[float, float]:
    """(wall ms, CPU ms) of ``python -c pass``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([python, "-c", "pass"])
    _, status, usage = os.wait4(proc.pid, 0)
    wall = (time.perf_counter() - t0) * 1000
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, (usage.ru_utime + usage.ru_stime) * 1000


def _settled_rss_mib(pid: int, limit_s: float = 1.5) -> float:
    """VmRSS of ``pid`` in MiB once it has stopped using CPU (no change over three 20 ms polls: its warm-up
    threads are done), or after ``limit_s``."""
    deadline = time.monotonic() + limit_s
    last, still = _task_cpu_ms(pid), 0
    while still < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
        now = _task_cpu_ms(pid)
        still = still + 1 if now - last < 0.05 else 0
        last = now
    return rss_kib(pid) / 1024


def _first_reply(cmd: list[str], env: dict[str, str], rss: bool = False
                 ) -> tuple[float, float, tuple[float, float] | None]:
    """(wall ms from spawn to the initialize reply, CPU ms the server used until then, and with ``rss`` its
    VmRSS in MiB once it has also answered ``tools/list``, read at once and once it is idle).

    The first figure races the set-up a server defers past its first reply (``blz mcp``'s warm-up thread
    imports the search path while ``tools/list`` is answered: 11.4 or 12.1 MiB for the same code,
    depending on how far it got); the second is read after that set-up (:func:`_settled_rss_mib`)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    rss_mib = None
    try:
        proc.stdin.write(_line(_initialize()))
        proc.stdin.flush()
        raw = proc.stdout.readline()
        wall = (time.perf_counter() - t0) * 1000
        cpu = _task_cpu_ms(proc.pid)
        if b'"result"' not in raw:
            raise RuntimeError(f"{' '.join(cmd[:3])}: no initialize result: {raw[:200]!r}")
        if rss:
            proc.stdin.write(_line(INITIALIZED) + _line({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
            proc.stdin.flush()
            listed = proc.stdout.readline()
            if b'"tools"' not in listed:
                raise RuntimeError(f"{' '.join(cmd[:3])}: no tools/list result: {listed[:200]!r}")
            rss_mib = (rss_kib(proc.pid) / 1024, _settled_rss_mib(proc.pid))
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    return wall, cpu, rss_mib


def _script(name: str) -> list[str]:
    """The console script beside this interpreter (how users start it), else ``python -m``."""
    path = Path(sys.executable).parent / name
    return [str(path)] if path.exists() else [sys.executable, "-m", f"cairn_servers.{name}.cli"]


def _make_stores(tmp: Path) -> None:
    """The small real stores the servers open: 100 regtest blocks for brk, a ``ctx init`` config (with
    the ``ctx`` of the ``cairn`` this process imports)."""
    from cairn_servers.brk.compute import compute
    from cairn_servers.brk.indexer import index
    from cairn_servers.brk.sample import write_sample

    write_sample(tmp / "blocks", 100)
    index(tmp / "blocks", tmp / "brk")
    compute(tmp / "brk")
    (tmp / "docs").mkdir()
    (tmp / "docs" / "a.md").write_text("# Hello\n\nA document.\n")
    subprocess.run([sys.executable, "-m", "cairn_servers.ctx.cli", "init", "--config", str(tmp / "ctx.toml")], cwd=tmp,
                   check=True, capture_output=True)


def _startup_servers(tmp: Path, src: Path | None = None) -> tuple[dict[str, list[str]], dict[str, str]]:
    """The stdio servers to time, each with a small real store made under ``tmp``; with ``src`` (a
    checkout's ``src`` directory) the ``cairn`` found there, run as ``PYTHONPATH=src``, which also makes
    the stores (an older checkout may not read a newer one's)."""
    env = dict(os.environ, BLZ_DATA_DIR=str(tmp / "blz"))
    for var in ("BLZ_LOG", "CTX_LOG", "BRK_LOG"):
        env.pop(var, None)
    if src is None:
        _make_stores(tmp)
    else:
        env["PYTHONPATH"] = str(src)
        subprocess.run([sys.executable, __file__, "--make-stores", str(tmp)], env=env, check=True)
    servers = {
        "blz mcp": [*_script("blz"), "mcp"],
        "ctx serve mcp --stdio": [*_script("ctx"), "serve", "mcp", "--stdio", "--config", str(tmp / "ctx.toml")],
        "brk mcp": [*_script("brk"), "mcp", "--out", str(tmp / "brk")],
        "core bench server": [sys.executable, "-c", CORE_SERVER],
    }
    return servers, env


Setups = dict[str, tuple[dict[str, list[str]], dict[str, str]]]
Samples = dict[tuple[str, str], dict[str, list[float]]]


def _rounds(setups: Setups, runs: int, rss: bool) -> tuple[dict[str, list[float]], Samples]:
    """``python -c pass`` once a round, then every server of every setup (checkout), the setups' order
    alternating from round to round; after one warm-up each (page cache, .pyc files). Returns the bare
    interpreter's wall and CPU samples, and per (setup, server) wall, CPU and (with ``rss``) RSS samples."""
    sides = list(setups)
    names = list(setups[sides[0]][0])
    samples: Samples = {(side, name): {"wall": [], "cpu": [], "rss": [], "rss_idle": []}
                        for side in sides for name in names}
    bare: dict[str, list[float]] = {"wall": [], "cpu": []}
    for servers, env in setups.values():
        for cmd in servers.values():
            _first_reply(cmd, env)
    for i in range(runs):
        print(f"start-up round {i + 1}/{runs}", file=sys.stderr, end="\r")
        wall, cpu = _bare(sys.executable)
        bare["wall"].append(wall)
        bare["cpu"].append(cpu)
        for name in names:
            for side in (sides if i % 2 == 0 else sides[::-1]):
                servers, env = setups[side]
                wall, cpu, rss_mib = _first_reply(servers[name], env, rss=rss)
                got = samples[(side, name)]
                got["wall"].append(wall)
                got["cpu"].append(cpu)
                if rss_mib is not None:
                    got["rss"].append(rss_mib[0])
                    got["rss_idle"].append(rss_mib[1])
    print(file=sys.stderr)
    return bare, samples


def startup(runs: int) -> dict[str, Any]:
    """``python -c pass`` and each server's spawn -> initialize, round-robin; medians and ratios."""
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="cairn-startup-") as tmp:
        setup = _startup_servers(Path(tmp))
        bare, samples = _rounds({"this": setup}, runs, rss=False)
    walls = {"python -c pass": bare["wall"], **{name: samples[("this", name)]["wall"] for name in setup[0]}}
    cpus = {"python -c pass": bare["cpu"], **{name: samples[("this", name)]["cpu"] for name in setup[0]}}
    base_wall = statistics.median(walls["python -c pass"])
    base_cpu = statistics.median(cpus["python -c pass"])
    table = {}
    for name in walls:
        wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
        table[name] = {"median_ms": round(wall, 1), "min_ms": round(min(walls[name]), 1),
                       "ratio": round(wall / base_wall, 2), "cpu_median_ms": round(cpu, 1),
                       "cpu_ratio": round(cpu / base_cpu, 2)}
    return {"runs": runs, "python": sys.executable, "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()], "commands": table}


# Run a server as ``python -c`` and exit the moment its initialize reply is written: what valgrind counts
# is exactly the work before the first reply (``STOP`` then the server's own code, or ``run(app)``).
STOP = """
import os, sys
import cairn_servers.mcp.stdio as _stdio
_write = _stdio._Writer.__call__
def _stop_after_reply(self, message):
    _write(self, message)
    if isinstance(message, dict) and message.get("id") == 0:
        os._exit(0)
_stdio._Writer.__call__ = _stop_after_reply
def run(app):
    from importlib import import_module
    sys.exit(import_module(f"cairn_servers.{app}.cli").main())
"""


def _until_reply(cmd: list[str]) -> list[str]:
    """``cmd`` (a console script, ``python -m cairn.APP.cli`` or ``python -c CODE``) as a ``python -c``
    that stops right after the initialize reply."""
    if cmd[0] == sys.executable and cmd[1] == "-c":
        return [sys.executable, "-c", STOP + cmd[2], *cmd[3:]]
    if cmd[0] == sys.executable and cmd[1] == "-m":
        app, args = cmd[2].split(".")[1], cmd[3:]
    else:
        app, args = Path(cmd[0]).name, cmd[1:]
    return [sys.executable, "-c", STOP + f"run({app!r})", *args]


def _instructions(cmd: list[str], env: dict[str, str], stdin: bytes | None) -> int:
    """User-space instructions ``cmd`` executes (valgrind cachegrind's ``I refs``): deterministic where
    wall and CPU time are not, on a loaded machine too (``PYTHONHASHSEED=0``)."""
    env = dict(env, PYTHONHASHSEED="0")
    subprocess.run(cmd, input=stdin, capture_output=True, env=env, timeout=120)  # .pyc files written first
    proc = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                           *cmd], input=stdin, capture_output=True, env=env, timeout=600)
    for line in proc.stderr.decode(errors="replace").splitlines():
        if "I   refs:" in line or "I refs:" in line:
            return int(line.split(":")[1].replace(",", "").strip())
    raise RuntimeError(f"no instruction count from valgrind: {proc.stderr[-500:]!r}")


def instructions_against(setups: Setups) -> dict[str, Any]:
    """Instructions until the initialize reply, per server and setup, and for ``python -c pass``."""
    init = _line(_initialize())
    out: dict[str, Any] = {}
    for side, (servers, env) in setups.items():
        bare = _instructions([sys.executable, "-c", "pass"], env, None)
        out.setdefault("python -c pass", {})[side] = bare
        for name, cmd in servers.items():
            print(f"instructions: {side} {name}", file=sys.stderr)
            out.setdefault(name, {})[side] = _instructions(_until_reply(cmd), env, init)
    for name, row in out.items():
        sides = list(setups)
        if len(sides) == 2 and row[sides[1]]:
            row["change_percent"] = round((row[sides[0]] / row[sides[1]] - 1) * 100, 2)
    return out


def _src_dir(checkout: str) -> Path:
    """The directory holding the ``cairn`` package of a checkout (its root or its ``src``)."""
    path = Path(checkout).expanduser().resolve()
    for candidate in (path / "src", path):
        if (candidate / "cairn_servers" / "__init__.py").exists():
            return candidate
    raise SystemExit(f"--against {checkout}: no cairn package in it or in its src/")


def startup_against(runs: int, against: str, instructions: bool = False) -> dict[str, Any]:
    """Start-up of this checkout against another one (``git worktree add /tmp/base REV``), interleaved:
    every round times ``python -c pass`` once and each server under both checkouts, in alternating order.
    Both run as ``PYTHONPATH=<checkout>/src`` with this interpreter (the same ``sys.path`` shape); each
    has its own stores. Per server and checkout: median wall and CPU, their ratios to ``python -c pass``,
    the median of the per-round differences (this - other, paired, so load drifts cancel), and the
    median VmRSS once ``tools/list`` is answered (at once, and once the server is idle). With ``instructions``, also the instructions each server
    executes until its reply (:func:`instructions_against`; needs valgrind)."""
    load_before = os.getloadavg()
    sides = {"this": _src_dir(str(Path(__file__).resolve().parents[1])), "other": _src_dir(against)}
    for src in sides.values():  # bytecode for both trees: a spawn without it recompiles every module it imports
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(src / "cairn_servers")], check=True,
                       env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
                       stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory(prefix="cairn-startup-") as tmp:
        setups: Setups = {}
        for side, src in sides.items():
            (Path(tmp) / side).mkdir()
            setups[side] = _startup_servers(Path(tmp) / side, src)
        bare, samples = _rounds(setups, runs, rss=True) if runs else ({"wall": [1.0], "cpu": [1.0]}, {})
        counted = instructions_against(setups) if instructions else None
    names = list(setups["this"][0]) if runs else []
    base_wall, base_cpu = statistics.median(bare["wall"]), statistics.median(bare["cpu"])
    table: dict[str, Any] = {}
    for name in names:
        row: dict[str, Any] = {}
        for side in sides:
            got = samples[(side, name)]
            wall, cpu = statistics.median(got["wall"]), statistics.median(got["cpu"])
            row[side] = {"median_ms": round(wall, 1), "ratio": round(wall / base_wall, 2),
                         "cpu_median_ms": round(cpu, 1), "cpu_ratio": round(cpu / base_cpu, 2),
                         "rss_after_tools_list_mib": round(statistics.median(got["rss"]), 1),
                         "rss_idle_after_tools_list_mib": round(statistics.median(got["rss_idle"]), 1)}
        this, other = samples[("this", name)], samples[("other", name)]
        row["paired_diff_ms"] = {"wall": round(statistics.median(a - b for a, b in zip(this["wall"], other["wall"])), 2),
                                 "cpu": round(statistics.median(a - b for a, b in zip(this["cpu"], other["cpu"])), 2)}
        table[name] = row
    return {"runs": runs, "python": sys.executable, "this": str(sides["this"]), "other": str(sides["other"]),
            "python -c pass": {"median_ms": round(base_wall, 1), "cpu_median_ms": round(base_cpu, 1)},
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()], "commands": table,
            **({"instructions_until_reply": counted} if counted else {})}


GOALS = {"blz_startup_ratio": 3.0, "spawn_to_initialize_median_ms": 60, "initialize_result_bytes": 512, "idle_rss_mib": 20,
         "stdio_rtt_p50_ms": 0.3, "http_rtt_p50_ms": 2}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="fresh processes for spawn-to-initialize (median)")
    parser.add_argument("--calls", type=int, default=1000, help="tools/call round trips per transport")
    parser.add_argument("--skip-sdk", action="store_true", help="skip the official SDK baseline")
    parser.add_argument("--skip-http", action="store_true", help="skip the HTTP round trips")
    parser.add_argument("--startup-runs", type=int, default=40, help="rounds of the start-up ratio (median)")
    parser.add_argument("--startup-only", action="store_true", help="only the start-up ratio")
    parser.add_argument("--against", metavar="CHECKOUT",
                        help="with --startup-only: interleave with another checkout (a `git worktree add` of an "
                             "earlier revision), both as PYTHONPATH=<checkout>/src")
    parser.add_argument("--instructions", action="store_true",
                        help="with --against: also count the instructions each server runs until its reply "
                             "(valgrind; deterministic, so it holds on a busy machine; --startup-runs 0 for "
                             "this alone)")
    parser.add_argument("--make-stores", metavar="DIR", help=argparse.SUPPRESS)  # used by --against
    opts = parser.parse_args(argv)
    if opts.make_stores:
        _make_stores(Path(opts.make_stores))
        return 0
    if opts.against:
        result = startup_against(opts.startup_runs, opts.against, opts.instructions)
        for name, row in result["commands"].items():
            this, other = row["this"], row["other"]
            print(f"{name:24} this x{this['ratio']:<5} (cpu x{this['cpu_ratio']:<5} rss {this['rss_after_tools_list_mib']}"
                  f" / idle {this['rss_idle_after_tools_list_mib']} MiB)"
                  f"  other x{other['ratio']:<5} (cpu x{other['cpu_ratio']:<5} rss {other['rss_after_tools_list_mib']}"
                  f" / idle {other['rss_idle_after_tools_list_mib']} MiB)"
                  f"  paired diff {row['paired_diff_ms']['wall']:+.2f} ms (cpu {row['paired_diff_ms']['cpu']:+.2f})",
                  file=sys.stderr)
        for name, row in result.get("instructions_until_reply", {}).items():
            print(f"{name:24} instructions this {row['this']:,}  other {row['other']:,}  "
                  f"({row.get('change_percent', 0):+.2f} %)", file=sys.stderr)
        json.dump({"benchmark": "mcp_core startup --against", "python": platform.python_version(),
                   "platform": platform.platform(), "cpus": os.cpu_count(), "startup": result}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0

    out: dict[str, Any] = {
        "benchmark": "mcp_core",
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "goals": GOALS,
    }
    print("start-up ratio: python -c pass vs spawn -> initialize ...", file=sys.stderr)
    out["startup"] = startup(opts.startup_runs)
    for name, row in out["startup"]["commands"].items():
        print(f"{name:24} {row['median_ms']:7.1f} ms  x{row['ratio']:<5}  cpu {row['cpu_median_ms']:6.1f} ms  "
              f"x{row['cpu_ratio']}", file=sys.stderr)
    if opts.startup_only:
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print("cairn stdio: spawn-to-initialize ...", file=sys.stderr)
    spawn = spawn_to_initialize(CORE_SERVER, opts.runs)
    print("cairn stdio: round trips ...", file=sys.stderr)
    stdio = stdio_calls(CORE_SERVER, opts.calls)
    out["cairn"] = {"spawn_to_initialize": spawn, "stdio": stdio}
    measured = {"spawn_to_initialize_median_ms": spawn["median_ms"],
                "initialize_result_bytes": spawn["initialize_result_bytes"],
                "idle_rss_mib": stdio["idle_rss_mib"], "stdio_rtt_p50_ms": stdio["rtt_p50_ms"]}
    if not opts.skip_http:
        print("cairn http: round trips ...", file=sys.stderr)
        http = http_calls(opts.calls)
        out["cairn"]["http"] = http
        measured["http_rtt_p50_ms"] = http["rtt_p50_ms"]
    measured["blz_startup_ratio"] = out["startup"]["commands"]["blz mcp"]["ratio"]
    out["measured"] = measured
    out["meets_goals"] = {k: v <= GOALS[k] for k, v in measured.items()}
    if not opts.skip_sdk:
        print("mcp SDK (MCPServer) stdio baseline ...", file=sys.stderr)
        from importlib.metadata import version

        sdk_spawn = spawn_to_initialize(SDK_SERVER, opts.runs)
        sdk_stdio = stdio_calls(SDK_SERVER, opts.calls)
        out["sdk_baseline"] = {"package": f"mcp {version('mcp')}", "server": "mcp.server.mcpserver.MCPServer",
                               "spawn_to_initialize": sdk_spawn, "stdio": sdk_stdio}
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
