"""blz benchmark: prints one JSON document of measured figures.

    .venv/bin/python benchmarks/blz.py [--searches 1000] [--cli-runs 30]

Figures:
* add_react_s: adding react-dev/llms-full.txt (92k lines, 2.9 MB) from a local file, in-process
  (parse + store + FTS5 index), median of 5 into fresh data dirs, with the CPU time of each add
  (``time.process_time``: steadier than wall-clock on a shared machine); also as a whole `blz add`
  process; and `--dry-run` (fetch + parse, nothing written), when the code has it.
* mcp_find_ms: warm `find` searches through the stdio MCP server (round trip over the pipe, JSON
  encode/decode included), p50/p95 over N queries on the react source.
* cli_search_ms: `blz search "hooks" -s react --json` as a whole new process (median, like hyperfine).
* spawn_to_initialize_ms: `blz mcp` from spawn to the initialize result (median of 15).
* handshake_bytes: the serialized initialize result.
* rss_mb: the server's resident memory after indexing every shared corpus through `source-add`
  and N searches (VmRSS from /proc).
Corpus: the llms.txt files of the repository's test data (tests/data/llms, decompressed into a temporary
directory). Byte-code caching is left on (as in a normal install).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests._data import data_dir  # noqa: E402 (after the path set-up)

LLMS = data_dir() / "llms"
REACT = LLMS / "react-dev" / "llms-full.txt"
BLZ = [sys.executable, "-m", "cairn_servers.blz.cli"]
QUERIES = ["hooks", "useState", "useEffect cleanup", "state variable", "render props", "context provider",
           "server components", "suspense", "memo", "ref", "\"state variable\"", "event handler", "forms",
           "reducer", "transition", "portal", "strict mode", "custom hook", "keys list", "hydration"]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def env_for(root: Path) -> dict[str, str]:
    # The benchmark indexes the shared corpora through MCP source-add, which reads local files only
    # inside BLZ_MCP_FILE_ROOTS.
    env = dict(os.environ, BLZ_DATA_DIR=str(root), BLZ_MCP_FILE_ROOTS=str(LLMS))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("BLZ_OUTPUT_FORMAT", None)
    return env


def bench_add(tmp: Path) -> dict[str, Any]:
    from cairn_servers.blz import sources
    from cairn_servers.blz.store import Store

    times, cpu = [], []
    for i in range(5):
        store = Store(tmp / f"add-{i}")
        t0, c0 = time.perf_counter(), time.process_time()
        sources.add(store, "react", str(REACT))
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        store.close()
    dry: list[float] = []
    if "dry_run" in sources.add.__code__.co_varnames:  # older code (main before issue 16 item 6) has none
        store = Store(tmp / "add-dry")
        for _ in range(5):
            t0 = time.perf_counter()
            sources.add(store, "react", str(REACT), dry_run=True)
            dry.append(time.perf_counter() - t0)
        store.close()
    procs = []
    for i in range(3):
        root = tmp / f"add-cli-{i}"
        t0 = time.perf_counter()
        subprocess.run([*BLZ, "add", "react", str(REACT)], env=env_for(root), check=True, capture_output=True)
        procs.append(time.perf_counter() - t0)
    out = {"median": round(statistics.median(times), 3), "min": round(min(times), 3),
           "cpu_median": round(statistics.median(cpu), 3), "cpu_min": round(min(cpu), 3),
           "cli_process_median": round(statistics.median(procs), 3)}
    if dry:
        out["dry_run_median"] = round(statistics.median(dry), 3)
    return {"add_react_s": out, "load_average": os.getloadavg()[0]}


class Rpc:
    """A minimal JSON-RPC client over the server's stdin/stdout pipes."""

    def __init__(self, root: Path) -> None:
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen([*BLZ, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env_for(root))
        self.next_id = 0

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        assert self.proc.stdin and self.proc.stdout
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}}
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()
        while True:
            reply = json.loads(self.proc.stdout.readline())
            if reply.get("id") == self.next_id:
                return reply

    def notify(self, method: str) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}).encode() + b"\n")
        self.proc.stdin.flush()

    def initialize(self) -> tuple[float, int]:
        reply = self.call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                         "clientInfo": {"name": "bench", "version": "0"}})
        elapsed = time.perf_counter() - self.t0
        self.notify("notifications/initialized")
        return elapsed, len(json.dumps(reply["result"], separators=(",", ":")).encode())

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def bench_mcp(tmp: Path, searches: int) -> dict[str, Any]:
    root = tmp / "mcp"
    spawn = []
    size = 0
    for _ in range(15):
        rpc = Rpc(root)
        elapsed, size = rpc.initialize()
        spawn.append(elapsed)
        rpc.close()
    rpc = Rpc(root)
    rpc.initialize()
    idle = rpc.rss_mb()
    files = sorted(LLMS.glob("*/*.txt"))
    t0 = time.perf_counter()
    for path in files:
        alias = (path.parent.name + "-" + path.stem).lower().replace(".", "-")
        reply = rpc.call("tools/call", {"name": "source-add", "arguments": {"alias": alias, "url": path.as_uri() if path != REACT else str(path)}})
        assert not reply["result"].get("isError"), reply
    index_all = time.perf_counter() - t0
    react_alias = "react-dev-llms-full"
    for q in QUERIES:  # warm-up
        rpc.call("tools/call", {"name": "find", "arguments": {"query": q, "source": react_alias}})
    lat = []
    for i in range(searches):
        q = QUERIES[i % len(QUERIES)]
        t1 = time.perf_counter()
        reply = rpc.call("tools/call", {"name": "find", "arguments": {"query": q, "source": react_alias}})
        lat.append((time.perf_counter() - t1) * 1000)
        assert not reply["result"].get("isError"), reply
    all_lat = []
    for i in range(200):
        q = QUERIES[i % len(QUERIES)]
        t1 = time.perf_counter()
        rpc.call("tools/call", {"name": "find", "arguments": {"query": q}})
        all_lat.append((time.perf_counter() - t1) * 1000)
    rss = rpc.rss_mb()
    rpc.close()
    return {
        "spawn_to_initialize_ms": {"median": round(statistics.median(spawn) * 1000, 1), "min": round(min(spawn) * 1000, 1)},
        "handshake_bytes": size,
        "index_all_corpora_s": round(index_all, 3), "corpora": len(files),
        "mcp_find_ms": {"n": searches, "source": "react-dev/llms-full.txt", "p50": round(pct(lat, 0.5), 3),
                        "p95": round(pct(lat, 0.95), 3), "max": round(max(lat), 3)},
        "mcp_find_all_sources_ms": {"n": len(all_lat), "p50": round(pct(all_lat, 0.5), 3),
                                    "p95": round(pct(all_lat, 0.95), 3)},
        "rss_mb": {"idle_after_initialize": round(idle, 1),
                   "after_indexing_all_and_searches": round(rss, 1)},
    }


def bench_cli(tmp: Path, runs: int) -> dict[str, Any]:
    root = tmp / "cli"
    env = env_for(root)
    subprocess.run([*BLZ, "add", "react", str(REACT)], env=env, check=True, capture_output=True)
    cmd = [str(Path(sys.executable).parent / "blz"), "search", "hooks", "-s", "react", "--json"]
    if not Path(cmd[0]).exists():
        cmd = [*BLZ, "search", "hooks", "-s", "react", "--json"]
    for _ in range(3):  # warm-up (byte-code cache, page cache)
        subprocess.run(cmd, env=env, check=True, capture_output=True)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        times.append((time.perf_counter() - t0) * 1000)
    base = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
        base.append((time.perf_counter() - t0) * 1000)
    return {"cli_search_ms": {"runs": runs, "median": round(statistics.median(times), 1),
                              "min": round(min(times), 1), "python_startup_median": round(statistics.median(base), 1)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--searches", type=int, default=1000)
    parser.add_argument("--cli-runs", type=int, default=30)
    parser.add_argument("--only", choices=("add", "cli", "mcp"), help="run one group of figures")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="blz-bench-"))
    try:
        import cairn_servers

        out: dict[str, Any] = {"benchmark": "blz", "python": sys.version.split()[0],
                               "code": str(Path(cairn_servers.__file__).parents[1])}  # which src (PYTHONPATH runs main's)
        if args.only in (None, "add"):
            out.update(bench_add(tmp))
        if args.only in (None, "cli"):
            out.update(bench_cli(tmp, args.cli_runs))
        if args.only in (None, "mcp"):
            out.update(bench_mcp(tmp, args.searches))
        print(json.dumps(out, indent=2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
