"""Soak: ctx and brk HTTP under 50 concurrent keep-alive clients for 60 s each, and ``blz mcp`` in a
tight request loop for 60 s; prints one JSON object.

Each server is a real process on a free 127.0.0.1 port (stdio for blz) with real data: brk on the
bundled mainnet heights 0..589, ctx on llms.txt files of the repository's test data (tests/data/llms,
decompressed into a temporary directory; keyword search, two Lua tools), blz on three of those files. The load generator (asyncio, one keep-alive HTTP/1.1
connection per client) and the servers share the machine. Every request is valid, so any non-2xx
answer, JSON-RPC error or ``isError`` result counts as an error.

Per server: requests, errors, throughput (requests/s), p50/p99/max latency (ms), RSS every second
(KiB) and ``rss_growth_kb``: the largest RSS after the warm-up minus the RSS at the end of warm-up.
``flat`` is true when that growth is under 16 MiB. The script exits 1 when any server had errors or
a growing RSS.

Usage: .venv/bin/python benchmarks/soak.py [--clients 50] [--seconds 60] [--warmup 10] [--only ctx,brk,blz]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO)]

from tests._data import data_dir  # noqa: E402 (after the path set-up)
from tests.hardening import _servers as S  # noqa: E402

RSS_FLAT_KB = 16 * 1024


def soak_brk(base: Path, clients: int, seconds: float, warmup: float) -> dict[str, Any]:
    out = S.prepare_brk(base / "brk")
    server = S.spawn_brk_http(out, base / "brk-run")
    try:
        return S.http_load(server.port, server.pid, S.brk_requests(), clients=clients, seconds=seconds,
                           warmup=warmup, rss_every=1.0) | {"alive": server.alive()}
    finally:
        server.close()


def soak_ctx(base: Path, clients: int, seconds: float, warmup: float) -> dict[str, Any]:
    import httpx

    cfg = S.prepare_ctx(base / "ctx", data_dir() / "llms")
    server = S.spawn_ctx_http(cfg, base / "ctx-run")
    try:
        hits = httpx.post(server.url + "/tools/search", json={"query": "install", "limit": 10}).json()["results"]
        return S.http_load(server.port, server.pid, S.ctx_requests([h["id"] for h in hits]), clients=clients,
                           seconds=seconds, warmup=warmup, rss_every=1.0) | {"alive": server.alive()}
    finally:
        server.close()


def soak_blz(base: Path, seconds: float, warmup: float) -> dict[str, Any]:
    data = S.prepare_blz(base / "blz" / "data", data_dir() / "llms")
    server = S.spawn_blz_stdio(data, base / "blz-run")
    try:
        server.initialize()
        reply = server.request("tools/call", {"name": "list-sources", "arguments": {}})
        aliases = [s["alias"] for s in json.loads(reply["result"]["content"][0]["text"])["sources"]
                   if s["kind"] == "installed"]
        return S.stdio_loop(server, S.blz_calls(aliases), seconds=seconds, warmup=warmup,
                            rss_every=1.0) | {"alive": server.alive()}
    finally:
        server.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--only", default="ctx,brk,blz", help="comma-separated servers to soak")
    args = ap.parse_args()
    wanted = [s.strip() for s in args.only.split(",") if s.strip()]
    report: dict[str, Any] = {
        "benchmark": "soak", "date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
        "cpus": os.cpu_count(), "machine": platform.machine(), "clients": args.clients,
        "seconds": args.seconds, "warmup_seconds": args.warmup, "servers": {},
    }
    ok = True
    with tempfile.TemporaryDirectory(prefix="cairn-soak-") as tmp:
        base = Path(tmp)
        for name in wanted:
            if name == "brk":
                result = soak_brk(base, args.clients, args.seconds, args.warmup)
            elif name == "ctx":
                result = soak_ctx(base, args.clients, args.seconds, args.warmup)
            elif name == "blz":
                result = soak_blz(base, args.seconds, args.warmup)
            else:
                raise SystemExit(f"unknown server {name!r}: use ctx, brk or blz")
            result["flat"] = result["rss_growth_kb"] < RSS_FLAT_KB
            ok = ok and result["errors"] == 0 and result["flat"] and result["alive"]
            report["servers"][name] = result
    print(json.dumps(report, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
