"""brk's Esplora address history over HTTP: `/api/address/:a/txs` on an address with many transactions.

Generates a regtest chain with ``brk sample --pay ADDR:SATS:N`` (N payments to one address, default
10,000, spread over the chain's blocks), indexes it with ``brk index`` and serves it with ``brk serve``
(each a subprocess, as a user runs them), then, with one keep-alive HTTP client, times warm requests
(each kind requested once before timing):

* ``first_page``: ``GET /api/address/:a/txs`` (the newest 25);
* ``second_page``: ``GET /api/address/:a/txs/chain/:last_txid`` after the first page's last txid;
* ``deep_page``: the same after a txid half-way down the history;
* ``tip_height``: ``GET /api/blocks/tip/height``, the smallest answer: the HTTP floor on this machine;
* ``walk``: every page from newest to oldest once (untimed per request; total seconds), which also checks
  that the pages hold each of the address's N transactions once.

Latencies are p50/p95 in ms over ``--requests`` requests each; the bar is ``first_page`` p50 ≤ 5 ms.
Prints one JSON document. Usage:
``python benchmarks/brk_explorer.py [--payments 10000] [--blocks B] [--requests 500] [--work DIR]``
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# A regtest P2WPKH address (BIP 173's test program, on regtest).
ADDRESS = "bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080"
BAR_P50_MS = 5.0


def brk(*args: str) -> tuple[dict[str, Any], float]:
    """Run ``brk ARGS --json``; (its JSON answer, wall seconds)."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "cairn_servers.brk.cli", *args, "--json"], capture_output=True,
                       text=True, cwd=REPO)
    if r.returncode:
        raise SystemExit(f"brk {args[0]} failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout), round(time.perf_counter() - t0, 2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)


def timed(client: Any, path: str, n: int) -> dict[str, Any]:
    """p50/p95 of ``n`` warm GETs of ``path`` (one untimed first)."""
    first = client.get(path)
    first.raise_for_status()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = client.get(path)
        samples.append(time.perf_counter() - t0)
        r.raise_for_status()
    body = first.json()
    return {"p50_ms": pct(samples, 0.5), "p95_ms": pct(samples, 0.95), "n": n,
            "txs": len(body) if isinstance(body, list) else None, "bytes": len(first.content)}


def main() -> None:
    import httpx

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--payments", type=int, default=10_000, help="transactions paying the address (default 10000)")
    ap.add_argument("--blocks", type=int, help="chain length (default: 150 + payments / 10)")
    ap.add_argument("--requests", type=int, default=500, help="timed requests of each kind (default 500)")
    ap.add_argument("--work", help="directory for the chain and its index (default: a temporary one, removed)")
    args = ap.parse_args()
    blocks_n = args.blocks or 150 + args.payments // 10
    with tempfile.TemporaryDirectory(prefix="brk_explorer_") as tmp:
        work = Path(args.work) if args.work else Path(tmp)
        blocks, out = work / "blocks", work / "out"
        result: dict[str, Any] = {"payments": args.payments, "blocks": blocks_n, "cpus": os.cpu_count(),
                                  "load_avg_1m_before": round(os.getloadavg()[0], 2)}
        summary, result["sample_s"] = brk("sample", "--blocks", str(blocks_n), "--out", str(blocks), "--pay",
                                          f"{ADDRESS}:10000:{args.payments}")
        result["transactions"] = summary["transactions"]
        _, result["index_s"] = brk("index", "--blocks-dir", str(blocks), "--out", str(out), "--progress", "none")
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "cairn_servers.brk.cli", "serve", "--out", str(out),
                                   "--bind", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, cwd=REPO)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise SystemExit("brk serve did not start") from None
                    time.sleep(0.05)
            base = f"/api/address/{ADDRESS}/txs"
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                t0 = time.perf_counter()
                seen: list[str] = []
                page = client.get(base).json()
                while page:
                    seen += [tx["txid"] for tx in page]
                    page = client.get(f"{base}/chain/{seen[-1]}").json()
                walk_s = time.perf_counter() - t0
                if len(seen) != args.payments or len(set(seen)) != len(seen):
                    raise SystemExit(f"the pages hold {len(seen)} transactions ({len(set(seen))} distinct), "
                                     f"not the {args.payments} paid")
                result["walk"] = {"pages": -(-len(seen) // 25), "txs": len(seen), "seconds": round(walk_s, 3)}
                result["tip_height"] = timed(client, "/api/blocks/tip/height", args.requests)
                result["first_page"] = timed(client, base, args.requests)
                result["second_page"] = timed(client, f"{base}/chain/{seen[24]}", args.requests)
                result["deep_page"] = timed(client, f"{base}/chain/{seen[len(seen) // 2]}", args.requests)
        finally:
            server.terminate()
            server.wait(timeout=15)
        result["bar_first_page_p50_ms"] = BAR_P50_MS
        result["bar_met"] = result["first_page"]["p50_ms"] <= BAR_P50_MS
        result["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
