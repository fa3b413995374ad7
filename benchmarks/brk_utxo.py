"""brk on-chain analytics overhead: the UTXO-set and address passes against indexing, on a dense chain.

1. ``brk sample --blocks B --txs-per-block K`` (cached under ``--cache``, default a temporary directory);
2. ``brk index --no-compute``: the raw indexing (wall, CPU, peak RSS);
3. the computer alone (``cairn_servers.brk.compute._Computer``), then ``cairn_servers.brk.utxo.update`` (supply by type,
   coin age, age bands), then ``cairn_servers.brk.addresses.update`` (address index and counts), then, after
   importing a synthetic daily price for every day of the chain, ``cairn_servers.brk.utxo.update`` again: the
   realized pass alone (realized cap, value destroyed, supply in profit / loss / breakeven), each in its
   own process (wall, CPU, peak RSS);
4. ``brk index`` end to end into a fresh directory (indexing, computing and both analytics passes):
   its peak RSS.

The overhead is the analytics passes' CPU (and wall) time (UTXO, addresses, realized) over indexing +
computing. CPU time is the
steadier figure on a shared machine; load averages are printed before and after each step. Prints
one JSON document.

Usage: python benchmarks/brk_utxo.py [--blocks 300] [--txs-per-block 2500] [--cache DIR] [--keep]
                                    [--src DIR] [--no-end-to-end]

``--src DIR`` measures another tree's ``src`` (e.g. ``main``'s, from ``git archive main src | tar -x -C
/tmp/main``), so runs of a branch and of its base can be interleaved on the same cached chain.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PASSES = ("utxo", "addresses", "realized")  # the analytics passes, against indexing + computing


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


SRC = REPO / "src"


def run(args: list[str]) -> dict[str, Any]:
    """Run a Python child; wall and CPU seconds, peak RSS (MB) from ``wait4``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    load0 = _load()
    with tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.DEVNULL, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        err.seek(0)
        tail = err.read()[-1000:]
    code = os.waitstatus_to_exitcode(status)
    if code:
        raise SystemExit(f"{' '.join(args)} failed ({code}): {tail}")
    return {"wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "load": [load0, _load()]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=300)
    ap.add_argument("--txs-per-block", type=int, default=2500)
    ap.add_argument("--cache", type=Path)
    ap.add_argument("--keep", action="store_true", help="keep the output directories")
    ap.add_argument("--src", type=Path, help="the source tree to measure (default: this checkout's src)")
    ap.add_argument("--no-end-to-end", action="store_true", help="skip the end-to-end `brk index` step")
    args = ap.parse_args()
    global SRC
    if args.src is not None:
        SRC = args.src.resolve()
    work = Path(tempfile.mkdtemp(prefix="brk-utxo-"))
    cache = args.cache or work
    blocks = cache / f"dense-{args.blocks}x{args.txs_per_block}"
    if not (blocks / "blk00000.dat").exists():
        run(["-m", "cairn_servers.brk.cli", "sample", "--blocks", str(args.blocks), "--txs-per-block",
             str(args.txs_per_block), "--out", str(blocks)])
    out = work / "out"
    steps: dict[str, Any] = {}
    steps["index"] = run(["-m", "cairn_servers.brk.cli", "index", "--blocks-dir", str(blocks), "--out", str(out),
                          "--no-compute", "--progress", "none"])
    code = "import sys; from pathlib import Path; out = Path(sys.argv[1]); "
    steps["compute"] = run(["-c", code + "from cairn_servers.brk.compute import _Computer; _Computer(out, durable=True).run()",
                            str(out)])
    steps["utxo"] = run(["-c", code + "from cairn_servers.brk.utxo import update; update(out)", str(out)])
    steps["addresses"] = run(["-c", code + "from cairn_servers.brk.addresses import update; "
                              "update(out, blocks_dir=Path(sys.argv[2]))", str(out), str(blocks)])
    # A daily close for every day of the chain (a random walk), then the realized pass alone.
    steps["prices"] = run(["-c", code + (
        "import numpy as np; from cairn_servers.brk import prices; from cairn_servers.brk.reader import StoreReader; "
        "from cairn_servers.brk.layout import computed_dir; r = StoreReader(computed_dir(out)); r.refresh(); "
        "days = int(r.read('height_to_dateindex', 0, r.length('height_to_dateindex')).max()) + 1; "
        "walk = 30000 * np.exp(np.cumsum(np.random.default_rng(1).normal(0, 0.03, days))); "
        "prices.save(out, [(d, c, c, c, c) for d, c in enumerate(walk.tolist())])"), str(out)])
    steps["realized"] = run(["-c", code + "from cairn_servers.brk.utxo import update; update(out)", str(out)])
    full = work / "full"
    if not args.no_end_to_end:
        steps["index_end_to_end"] = run(["-m", "cairn_servers.brk.cli", "index", "--blocks-dir", str(blocks), "--out",
                                         str(full), "--progress", "none"])
    base_cpu = steps["index"]["cpu_s"] + steps["compute"]["cpu_s"]
    base_wall = steps["index"]["wall_s"] + steps["compute"]["wall_s"]
    manifest = json.loads((out / "manifest.json").read_text())
    result = {
        "src": str(SRC), "blocks": args.blocks, "txs_per_block": args.txs_per_block,
        "transactions": manifest["vecs"]["txindex_to_txid"]["length"],
        "outputs": manifest["vecs"]["outputindex_to_value"]["length"],
        "steps": steps,
        "overhead_cpu_pct": {
            "utxo": round(100 * steps["utxo"]["cpu_s"] / base_cpu, 1),
            "addresses": round(100 * steps["addresses"]["cpu_s"] / base_cpu, 1),
            "realized": round(100 * steps["realized"]["cpu_s"] / base_cpu, 1),
            "total": round(100 * sum(steps[k]["cpu_s"] for k in PASSES) / base_cpu, 1)},
        "overhead_wall_pct": round(100 * sum(steps[k]["wall_s"] for k in PASSES) / base_wall, 1),
        "cpus": os.cpu_count(),
    }
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
