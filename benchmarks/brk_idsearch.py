"""brk id search latency, over the catalogue of a real store with prices (the bundled mainnet 0..589 and a
price for each of its days: 1,602 ids).

Measures:

* ``first_call_ms``: the first ``search_vecids`` of a process (it builds the index of the catalogue);
* ``inprocess``: ``search_vecids`` (the declared operation) for each phrasing of
  ``tests/brk/id_questions.json``, ``--rounds`` times, p50/p95/max in ms;
* ``http``: the same through ``brk serve`` (a separate process) with one keep-alive client;
* ``llms_txt``: ``GET /llms.txt``, p50 in ms and its size.

Prints one JSON document. Usage: ``python benchmarks/brk_idsearch.py [--rounds N]``.
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
QUESTIONS = REPO / "tests" / "brk" / "id_questions.json"
CSV = "date,price\n" + "".join(f"2009-01-{d:02d},{0.5 + d / 100:.2f}\n" for d in range(1, 21))


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)


def summary(samples: list[float]) -> dict[str, Any]:
    return {"n": len(samples), "p50_ms": pct(samples, 0.5), "p95_ms": pct(samples, 0.95),
            "max_ms": round(max(samples) * 1000, 3)}


def build(base: Path) -> Path:
    from cairn_servers.brk import prices
    from cairn_servers.brk.compute import compute
    from cairn_servers.brk.indexer import index
    from cairn_servers.brk.sample import write_mainnet_sample

    write_mainnet_sample(base / "blocks")
    index(base / "blocks", base / "out")
    (base / "prices.csv").write_text(CSV)
    prices.import_csv(base / "out", base / "prices.csv")
    compute(base / "out", blocks_dir=base / "blocks")
    return base / "out"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="times each phrasing is asked (default 10)")
    args = parser.parse_args()
    questions = [q["question"] for q in json.loads(QUESTIONS.read_text())]
    with tempfile.TemporaryDirectory() as tmp:
        out = build(Path(tmp))
        from cairn_servers.brk.interface import Interface
        from cairn_servers.brk.ops import OPS

        iface = Interface(out)
        op = OPS["search_vecids"]
        t0 = time.perf_counter()
        op.call(iface, {"q": questions[0]})
        first = (time.perf_counter() - t0) * 1000
        local = []
        for _ in range(args.rounds):
            for q in questions:
                t0 = time.perf_counter()
                op.call(iface, {"q": q})
                local.append(time.perf_counter() - t0)
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "cairn_servers.brk.cli", "serve", "--out", str(out),
                                   "--bind", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, env={**os.environ, "BRK_PRICES": "off"})
        try:
            import httpx

            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                deadline = time.monotonic() + 30
                while True:
                    try:
                        client.get("/health")
                        break
                    except httpx.TransportError:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.05)
                client.get("/api/vecs/search", params={"q": questions[0]})  # the server's index is built
                remote = []
                for _ in range(args.rounds):
                    for q in questions:
                        t0 = time.perf_counter()
                        r = client.get("/api/vecs/search", params={"q": q})
                        remote.append(time.perf_counter() - t0)
                        assert r.status_code == 200, r.text
                llms = []
                for _ in range(args.rounds):
                    t0 = time.perf_counter()
                    r = client.get("/llms.txt")
                    llms.append(time.perf_counter() - t0)
                size = len(r.content)
        finally:
            server.terminate()
            server.wait(10)
        print(json.dumps({"ids": len(iface.id_indexes()), "first_call_ms": round(first, 1),
                          "inprocess": summary(local), "http": summary(remote),
                          "llms_txt": {"p50_ms": pct(llms, 0.5), "bytes": size},
                          "load_average": os.getloadavg()}, indent=1))


if __name__ == "__main__":
    main()
