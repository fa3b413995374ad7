"""brk query latency: in process, over HTTP, a wide CSV, and concurrent clients while the indexer appends.

Builds a regtest sample chain (default 20,000 blocks, so a height vec has more than 10,000 rows),
indexes and computes it, then measures:

* ``inprocess_last1000``: ``get_vecs`` (the declared operation, rendered as the surfaces do) of the last
  1,000 values of one height vec (and of a dateindex aggregate), p50/p99 in ms;
* ``http_last1000``: the same through ``brk serve`` (a separate process) with one keep-alive client;
* ``csv_10x10000``: 10 vecs x 10,000 rows as CSV, in process and over HTTP;
* ``concurrent``: N clients (asyncio, one keep-alive connection each) for S seconds against
  ``brk serve`` while another process indexes and computes the rest of the chain in small steps:
  requests, errors, p50/p99 in ms, and the tip before/after.

Prints one JSON document. Usage: ``python benchmarks/brk_query.py [--blocks N] [--clients N] [--seconds S]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
LAST1000 = {"index": "height", "ids": "supply_btc", "from": "-1000"}
AGG1000 = {"index": "dateindex", "ids": "fee_rate_median", "from": "-1000"}
WIDE = {"index": "height", "ids": "timestamp,difficulty,block_size,block_weight,tx_count,input_count,"
                                  "output_count,fee,supply_btc,hash_rate", "from": "-10000", "format": "csv"}


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)


def timed(fn: Any, n: int) -> dict[str, float]:
    fn()  # warm caches
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return {"p50_ms": pct(samples, 0.5), "p99_ms": pct(samples, 0.99), "n": n}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(out: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "cairn_servers.brk.cli", "serve", "--out", str(out), "--bind",
                             f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("brk serve did not start")


async def concurrent(base: str, clients: int, seconds: float) -> dict[str, Any]:
    import httpx

    queries = [LAST1000, {"index": "height", "ids": "tx_count,fee_rate,supply", "from": "-100"},
               {"index": "dateindex", "ids": "block_count,hash_rate_median,date", "from": "-30"},
               {"index": "txindex", "ids": "fee,txid", "from": "-100"}]
    latencies: list[float] = []
    errors: list[str] = []

    async def one(n: int) -> None:
        async with httpx.AsyncClient(base_url=base, timeout=30) as c:
            end = time.monotonic() + seconds
            i = n
            while time.monotonic() < end:
                t0 = time.perf_counter()
                try:
                    r = await c.get("/api/vecs/query", params=queries[i % len(queries)])
                    if r.status_code != 200:
                        errors.append(f"{r.status_code} {r.text[:200]}")
                except Exception as exc:  # noqa: BLE001 - counted, reported
                    errors.append(repr(exc))
                latencies.append(time.perf_counter() - t0)
                i += 1

    await asyncio.gather(*(one(n) for n in range(clients)))
    return {"clients": clients, "seconds": seconds, "requests": len(latencies), "errors": len(errors),
            "first_errors": errors[:3], "p50_ms": pct(latencies, 0.5), "p99_ms": pct(latencies, 0.99),
            "requests_per_s": round(len(latencies) / seconds, 1)}


APPEND = """
import sys, time
from pathlib import Path
from cairn_servers.brk.indexer import Indexer
from cairn_servers.brk.compute import compute
blocks, out, step = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
ix = Indexer(blocks, out)
while ix.run(max_blocks=step).indexed_blocks:
    compute(out)
    time.sleep(0.2)
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=20_000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    import httpx

    from cairn_servers.brk.compute import compute
    from cairn_servers.brk.indexer import Indexer
    from cairn_servers.brk.interface import Interface
    from cairn_servers.brk.ops import OPS, answer
    from cairn_servers.brk.sample import write_sample

    result: dict[str, Any] = {"blocks": args.blocks, "cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        blocks, out = Path(tmp) / "blocks", Path(tmp) / "out"
        t0 = time.perf_counter()
        write_sample(blocks, args.blocks)
        result["sample_s"] = round(time.perf_counter() - t0, 2)
        held_back = 2000  # appended during the concurrent run
        t0 = time.perf_counter()
        Indexer(blocks, out).run(max_blocks=args.blocks - held_back)
        result["index_s"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        compute(out)
        result["compute_s"] = round(time.perf_counter() - t0, 3)

        q = Interface(out)
        op = OPS["get_vecs"]  # as every surface runs it: arguments checked, columns read, then rendered
        result["inprocess_last1000"] = timed(lambda: answer(op, op.call(q, LAST1000)), 2000)
        result["inprocess_dateindex_agg_last1000"] = timed(lambda: answer(op, op.call(q, AGG1000)), 500)
        result["inprocess_csv_10x10000"] = timed(lambda: answer(op, op.call(q, WIDE)), 30)

        proc, base = start_server(out)
        try:
            with httpx.Client(base_url=base) as c:
                result["http_last1000"] = timed(lambda: c.get("/api/vecs/query", params=LAST1000).raise_for_status(),
                                                1000)
                result["http_csv_10x10000"] = timed(
                    lambda: c.get("/api/vecs/query", params=WIDE).raise_for_status(), 30)
                tip_before = c.get("/health").json()["height"]
                appender = subprocess.Popen([sys.executable, "-c", APPEND, str(blocks), str(out), "20"], cwd=REPO)
                try:
                    result["concurrent"] = asyncio.run(concurrent(base, args.clients, args.seconds))
                finally:
                    appender.terminate()
                    appender.wait(30)
                result["concurrent"]["tip_before"] = tip_before
                result["concurrent"]["tip_after"] = c.get("/health").json()["height"]
        finally:
            proc.terminate()
            proc.wait(10)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
