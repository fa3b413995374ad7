"""brk's computed passes one by one on an indexed store: the cost of each block, and whether it grows.

Runs the passes of ``brk index`` after the raw index (``computed``, ``utxo`` with ``realized`` when
prices are imported, ``addresses``) in this process on ``OUT`` (indexed with ``brk index --no-compute``),
from scratch (``--fresh`` removes their directories first) or from where they stopped. After each
committed chunk it notes the wall time, this process's CPU time and resident size, then prints one JSON
document: per stage, blocks, block data, wall and CPU seconds, CPU ms per block and CPU s per GB over
the whole run and over each quarter of its blocks (all threads, so the engines' background compactions
count; and the main thread's alone) (first to last: a cost that grows with the chain
rises from quarter to quarter), the peak RSS (``VmHWM``) and the load averages before and after.

Usage: python benchmarks/brk_passes.py OUT [--blocks-dir DIR] [--fresh] [--stop-height H]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any


def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--blocks-dir", type=Path, default=None)
    parser.add_argument("--fresh", action="store_true", help="remove the passes' directories first")
    parser.add_argument("--stop-height", type=int, default=None,
                        help="stop each pass at its first commit at or past this height")
    args = parser.parse_args()
    from cairn_servers.brk import addresses, utxo
    from cairn_servers.brk.compute import _Computer, computed_dir
    from cairn_servers.core.heap import return_large_buffers, trim_heap

    if args.fresh:
        for d in (computed_dir(args.out), utxo.utxo_dir(args.out), addresses.addresses_dir(args.out)):
            shutil.rmtree(d, ignore_errors=True)
    marks: list[tuple[str, str, int, int, float, float, int, float]] = []
    stop_now = [False]

    def progress(event: str, **f: Any) -> None:
        if event in ("stage", "commit"):
            marks.append((event, f["stage"], int(f["height"]), int(f["bytes"]), time.perf_counter(),
                          time.process_time(), _rss_kb("VmRSS"), time.thread_time()))
            stop_now[0] = args.stop_height is not None and event == "commit" and f["height"] >= args.stop_height

    load0 = os.getloadavg()
    return_large_buffers()  # as compute() does
    trim_heap()
    _Computer(args.out, durable=True, progress=progress, stop=lambda: stop_now[0]).run()
    stop_now[0] = False
    utxo.update(args.out, durable=True, progress=progress, stop=lambda: stop_now[0])
    stop_now[0] = False
    addresses.update(args.out, durable=True, blocks_dir=args.blocks_dir, progress=progress,
                     stop=lambda: stop_now[0])
    report: dict[str, Any] = {"out": str(args.out), "load_before": load0, "load_after": os.getloadavg(),
                              "peak_rss_mb": round(_rss_kb("VmHWM") / 1024, 1), "stages": {}}
    for name in dict.fromkeys(m[1] for m in marks):
        rows = [m for m in marks if m[1] == name]
        if len(rows) < 2:
            continue
        first, last = rows[0], rows[-1]
        blocks = last[2] - first[2]
        quarters = []
        for q in range(4):  # by blocks: the commits closest to each quarter's end
            lo_h = first[2] + blocks * q // 4
            hi_h = first[2] + blocks * (q + 1) // 4
            lo = min(rows, key=lambda m: abs(m[2] - lo_h))
            hi = min(rows, key=lambda m: abs(m[2] - hi_h))
            if hi[2] > lo[2]:
                quarters.append({"heights": [lo[2] + 1, hi[2]],
                                 "cpu_ms_per_block": round(1000 * (hi[5] - lo[5]) / (hi[2] - lo[2]), 3),
                                 "main_thread_ms_per_block": round(1000 * (hi[7] - lo[7]) / (hi[2] - lo[2]), 3),
                                 "cpu_s_per_gb": round((hi[5] - lo[5]) / max(1, hi[3] - lo[3]) * 1e9, 2)})
        report["stages"][name] = {
            "heights": [first[2] + 1, last[2]], "blocks": blocks, "gb": round(last[3] / 1e9, 3),
            "wall_s": round(last[4] - first[4], 2), "cpu_s": round(last[5] - first[5], 2),
            "cpu_ms_per_block": round(1000 * (last[5] - first[5]) / max(1, blocks), 3),
            "main_thread_cpu_s": round(last[7] - first[7], 2),
            "cpu_s_per_gb": round((last[5] - first[5]) / max(1, last[3]) * 1e9, 2),
            "max_rss_mb_at_commits": round(max(m[6] for m in rows) / 1024, 1),
            "quarters": quarters}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
