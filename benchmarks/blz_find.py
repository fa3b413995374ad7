"""blz search-controls benchmark (issue 16 item 4): prints one JSON document of measured figures.

    .venv/bin/python benchmarks/blz_find.py [--searches 300] [--baseline SRC]

Figures, on react-dev/llms-full.txt (92k lines) with hono's llms-small.txt as a second source:
* find_ms: warm `find` through the stdio MCP server (round trip over the pipe, JSON included),
  p50/p95 per kind of call: plain (`source: "react"`, what benchmarks/blz.py measures), every
  source, two sources as a list, `headingsOnly`, `headingLevel` on one source and on every source,
  and retrieval with `maxLines` and `linesAfter`.
* find_cpu_ms: the same calls in-process (`OPS["find"].call`: validation and the service, no pipe),
  CPU time per call (`time.process_time`), p50 over N rounds; steadier than wall clock on a loaded
  machine. With a baseline, the two alternate four times (one process each time).
* add_react_s: adding the react file in-process (parse + store + FTS5 index), median of 5.
* migrate_react_s: opening a schema-2 store holding react and hono (the one-time migration to
  schema 3), median of 3.
With ``--baseline SRC`` (another checkout's ``src``, e.g. main's), a second server runs that code on
its own copy of the data and the calls alternate between the two servers (same queries, same
load), so both columns come from one run; calls the baseline does not know are measured on this
checkout only. The load average is reported with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from blz import LLMS, QUERIES, REACT, Rpc, pct  # type: ignore[import-not-found]  # noqa: E402

HONO = LLMS / "hono" / "llms-small.txt"
SRC = REPO / "src"

# name -> arguments for one query q; None: the call is made on every server (the baseline knows it)
CALLS: dict[str, Any] = {
    "plain": lambda q: {"query": q, "source": "react"},
    "all_sources": lambda q: {"query": q},
    "two_sources_list": lambda q: {"query": q, "source": ["react", "hono"]},
    "headings_only": lambda q: {"query": q, "source": "react", "headingsOnly": True},
    "heading_level_1_2": lambda q: {"query": q, "source": "react", "headingLevel": "1-2"},
    "heading_level_2_all_sources": lambda q: {"query": q, "headingLevel": 2},
    "snippet_padding": lambda q: {"snippets": ["react:40000-40060"], "linePadding": 5},
    "snippet_max_lines": lambda q: {"snippets": ["react:40000-40400"], "maxLines": 60, "linesAfter": 5},
}
BASELINE_KNOWS = ("plain", "all_sources", "snippet_padding")


class Server(Rpc):  # type: ignore[misc]
    """`blz mcp` run from the checkout ``src`` on data root ``root``."""

    def __init__(self, root: Path, src: Path) -> None:  # noqa: D107 (replaces Rpc's environment)
        self.t0 = time.perf_counter()
        env = dict(os.environ, BLZ_DATA_DIR=str(root), PYTHONPATH=str(src))
        env.pop("BLZ_OUTPUT_FORMAT", None)
        self.proc = subprocess.Popen([sys.executable, "-m", "cairn_servers.blz.cli", "mcp"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        self.next_id = 0

    def find(self, args: dict[str, Any]) -> float:
        t0 = time.perf_counter()
        reply = self.call("tools/call", {"name": "find", "arguments": args})
        elapsed = (time.perf_counter() - t0) * 1000
        assert "result" in reply and not reply["result"].get("isError"), reply
        return elapsed


def add_sources(root: Path, src: Path) -> None:
    env = dict(os.environ, BLZ_DATA_DIR=str(root), PYTHONPATH=str(src))
    for alias, path in (("react", REACT), ("hono", HONO)):
        subprocess.run([sys.executable, "-m", "cairn_servers.blz.cli", "add", alias, str(path), "--json"], env=env,
                       check=True, capture_output=True)


def in_process(src: Path, code: str) -> float:
    """Seconds printed by ``code`` run with the checkout ``src`` first on the path."""
    done = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(src)), check=True,
                          capture_output=True, text=True)
    return float(done.stdout.strip().splitlines()[-1])


ADD = """
import sys, tempfile, time
from pathlib import Path
from cairn_servers.blz import sources
from cairn_servers.blz.store import Store
store = Store(Path(tempfile.mkdtemp()) / "d")
t0 = time.perf_counter(); sources.add(store, "react", sys.argv[1] if len(sys.argv) > 1 else {react!r})
print(time.perf_counter() - t0)
"""


def bench_add(srcs: dict[str, Path]) -> dict[str, Any]:
    times: dict[str, list[float]] = {name: [] for name in srcs}
    for _ in range(5):
        for name, src in srcs.items():  # alternating: the same load for both
            times[name].append(in_process(src, ADD.format(react=str(REACT))))
    return {name: {"median": round(statistics.median(t), 3), "min": round(min(t), 3)} for name, t in times.items()}


def downgrade_to_schema_2(db_path: Path) -> None:
    """Rewrite a schema-3 store as schema 2 wrote it (section rowids without the level bits)."""
    from cairn_servers.blz.store import _SECTIONS

    db = sqlite3.connect(db_path, isolation_level=None)
    try:
        db.execute("BEGIN")
        db.execute(_SECTIONS.format(name="old"))
        db.execute("INSERT INTO old(rowid, heading, path, body, first_line, last_line, hpath) "
                   "SELECT rowid & ~(15 << 28), heading, path, body, first_line, last_line, hpath FROM sections")
        db.execute("DROP TABLE sections_vocab")
        db.execute("DROP TABLE sections")
        db.execute("ALTER TABLE old RENAME TO sections")
        db.execute("CREATE VIRTUAL TABLE sections_vocab USING fts5vocab(sections, 'row')")
        db.execute("PRAGMA user_version=2")
        db.execute("COMMIT")
    finally:
        db.close()


def bench_migrate(tmp: Path) -> dict[str, Any]:
    from cairn_servers.blz.store import Store

    base = tmp / "migrate-base"
    add_sources(base, SRC)
    downgrade_to_schema_2(base / "blz.db")
    times = []
    for i in range(3):
        root = tmp / f"migrate-{i}"
        shutil.copytree(base, root)
        store = Store(root)
        t0 = time.perf_counter()
        store.db  # noqa: B018 (opening migrates)
        times.append(time.perf_counter() - t0)
        assert store.db.execute("PRAGMA user_version").fetchone()[0] >= 3
        store.close()
    return {"median": round(statistics.median(times), 3), "min": round(min(times), 3)}


CPU = """
import json, sys, time
from pathlib import Path
from cairn_servers.blz.ops import OPS
from cairn_servers.blz.store import Store
calls, rounds = json.loads(sys.argv[2]), int(sys.argv[3])
store, op, out = Store(Path(sys.argv[1])), OPS["find"], {}
for name, arglist in calls.items():
    for args in arglist:
        op.call(store, args)
    lat = []
    for _ in range(rounds):
        for args in arglist:
            t0 = time.process_time()
            op.call(store, args)
            lat.append(time.process_time() - t0)
    lat.sort()
    out[name] = lat[len(lat) // 2] * 1000
print(json.dumps(out))
"""


def bench_cpu(roots: dict[str, Path], srcs: dict[str, Path], rounds: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in srcs}
    for _ in range(4):
        for name, src in srcs.items():
            calls = {call: [make(q) for q in QUERIES] for call, make in CALLS.items()
                     if name == "this" or call in BASELINE_KNOWS}
            done = subprocess.run([sys.executable, "-c", CPU, str(roots[name]), json.dumps(calls), str(rounds)],
                                  env=dict(os.environ, PYTHONPATH=str(src)), check=True, capture_output=True,
                                  text=True)
            runs[name].append(json.loads(done.stdout))
    return {name: {call: [round(r[call], 3) for r in rs] for call in rs[0]} for name, rs in runs.items()}


def bench_find(roots: dict[str, Path], srcs: dict[str, Path], searches: int) -> dict[str, Any]:
    servers: dict[str, Server] = {}
    for name, src in srcs.items():
        servers[name] = Server(roots[name], src)
        servers[name].initialize()
    lat: dict[str, dict[str, list[float]]] = {name: {call: [] for call in CALLS} for name in servers}
    try:
        for q in QUERIES:  # warm-up
            for name, server in servers.items():
                for call, make in CALLS.items():
                    if name == "this" or call in BASELINE_KNOWS:
                        server.find(make(q))
        order = list(servers)
        for i in range(searches):
            q = QUERIES[i % len(QUERIES)]
            for call, make in CALLS.items():
                for name in order if i % 2 == 0 else order[::-1]:  # alternate who goes first
                    if name == "this" or call in BASELINE_KNOWS:
                        lat[name][call].append(servers[name].find(make(q)))
    finally:
        for server in servers.values():
            server.close()
    return {name: {call: {"n": len(v), "p50": round(pct(v, 0.5), 3), "p95": round(pct(v, 0.95), 3)}
                   for call, v in calls.items() if v} for name, calls in lat.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--searches", type=int, default=300, help="rounds of queries (each makes every call)")
    parser.add_argument("--baseline", type=Path, help="another checkout's src folder, measured alongside")
    args = parser.parse_args()
    srcs = {"this": SRC}
    if args.baseline is not None:
        srcs["baseline"] = args.baseline.resolve()
    tmp = Path(tempfile.mkdtemp(prefix="blz-find-bench-"))
    try:
        out: dict[str, Any] = {"benchmark": "blz_find", "python": sys.version.split()[0],
                               "load_average_before": [round(x, 2) for x in os.getloadavg()],
                               "cpus": os.cpu_count()}
        roots = {name: tmp / f"find-{name}" for name in srcs}
        for name, src in srcs.items():
            add_sources(roots[name], src)
        out["find_ms"] = bench_find(roots, srcs, args.searches)
        out["find_cpu_ms"] = bench_cpu(roots, srcs, max(1, args.searches // 30))
        out["add_react_s"] = bench_add(srcs)
        out["migrate_react_and_hono_s"] = bench_migrate(tmp)
        out["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
        print(json.dumps(out, indent=2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
