"""blz stdio round trip, this checkout against a baseline, call by call: prints one JSON document.

    .venv/bin/python benchmarks/blz_stdio.py [--baseline /tmp/smain/src] [--calls 1000]

Baseline: e.g. ``git -C MAIN archive main src | tar -x -C /tmp/smain``.

Two `blz mcp` servers (this checkout's ``src`` and ``--baseline``'s), each with react-dev/llms-full.txt
added, get the same calls alternately (which server goes first alternates too), so both columns share
one run's load. Per kind of call, p10/p50 of the round trip in ms as the client sees it (write the
request, read the reply line, decode it; the same minimal client as benchmarks/blz.py):
* ping: answered on the server's reader thread (the transport's floor);
* unknown-tool: a tools/call that fails at once (adds the hand-off to a worker thread);
* find: the warm `find` of benchmarks/blz.py (adds the tool and its ~9 KB reply).
Also the servers' CPU per call (utime + stime from /proc over the measured calls, all kinds), the
load average before and after, and `python -c pass` wall time.
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
sys.path.insert(0, str(REPO / "benchmarks"))
from blz import LLMS, QUERIES, REACT, Rpc, env_for  # type: ignore[import-not-found]  # noqa: E402


class Server(Rpc):  # type: ignore[misc]
    def __init__(self, root: Path, src: Path) -> None:
        self.t0 = time.perf_counter()
        env = dict(env_for(root), PYTHONPATH=str(src))
        self.proc = subprocess.Popen([sys.executable, "-m", "cairn_servers.blz.cli", "mcp"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        self.next_id = 0

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def kinds(i: int) -> dict[str, tuple[str, dict[str, Any]]]:
    return {"ping": ("ping", {}),
            "unknown-tool": ("tools/call", {"name": "no-such-tool", "arguments": {}}),
            "find": ("tools/call", {"name": "find", "arguments": {"query": QUERIES[i % len(QUERIES)], "source": "react"}})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, default=REPO / "src",
                        help="another checkout's src, e.g. main's (default: this one's, an A/A run)")
    parser.add_argument("--calls", type=int, default=1000, help="calls of each kind per server")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="blz-stdio-"))
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    python_pass_ms = (time.perf_counter() - t0) * 1000
    servers: dict[str, Server] = {}
    try:
        for name, src in (("this", REPO / "src"), ("baseline", args.baseline)):
            server = Server(tmp / name, src)
            server.initialize()
            reply = server.call("tools/call", {"name": "source-add", "arguments": {"alias": "react", "url": str(REACT)}})
            assert not reply["result"].get("isError"), reply
            servers[name] = server
        lat: dict[tuple[str, str], list[float]] = {}
        cpu0: dict[str, float] = {}
        warm = 20
        for i in range(warm + args.calls):
            if i == warm:
                cpu0 = {name: server.cpu_s() for name, server in servers.items()}
            order = ("this", "baseline") if i % 2 else ("baseline", "this")
            for kind, (method, params) in kinds(i).items():
                for name in order:
                    t1 = time.perf_counter()
                    reply = servers[name].call(method, params)
                    elapsed = (time.perf_counter() - t1) * 1000
                    assert ("error" in reply) == (kind == "unknown-tool"), reply
                    if i >= warm:
                        lat.setdefault((name, kind), []).append(elapsed)
        cpu = {name: (server.cpu_s() - cpu0[name]) * 1000 / (args.calls * 3) for name, server in servers.items()}
    finally:
        for server in servers.values():
            server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    out: dict[str, Any] = {"benchmark": "blz_stdio", "python": sys.version.split()[0], "calls": args.calls,
                           "baseline": str(args.baseline), "load_before": [round(x, 2) for x in load0],
                           "load_after": [round(x, 2) for x in os.getloadavg()],
                           "python_pass_ms": round(python_pass_ms, 1)}
    for (name, kind), values in sorted(lat.items()):
        ordered = sorted(values)
        out.setdefault(kind, {})[name] = {"p10": round(ordered[len(ordered) // 10], 3),
                                          "p50": round(statistics.median(ordered), 3)}
    out["server_cpu_ms_per_call"] = {name: round(v, 3) for name, v in cpu.items()}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
