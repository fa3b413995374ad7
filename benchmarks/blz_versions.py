"""blz durable-citation benchmark: prints one JSON document of measured figures.

    .venv/bin/python benchmarks/blz_versions.py [--updates 10] [--seed 1]

On react-dev/llms-full.txt (92k lines, tests/data): add it, then apply ``--updates`` synthetic updates,
each inserting 3 new sections, deleting 3 sections, moving 2 sections elsewhere and editing 10 lines
(random positions, fixed seed), through `blz update` of a local file. Reports:

* map_bytes: the stored line maps and section changes of all updates (the ``versions`` table's
  ``map`` and ``changes`` columns), and their share of the index (blz.db and its WAL, after a checkpoint);
* update_s: the time of each update (fetch, diff, parse, index), median and max;
* diff_s: the line map alone (:func:`cairn_servers.blz.versions.line_map`), median;
* follow: 200 version-1 citations of random 20-line ranges followed to the last version: how many
  kept their whole text (unchanged or moved), and every part reported as the same text checked
  against the stored file, line for line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))
from tests._data import data_dir  # noqa: E402

REACT = data_dir() / "llms" / "react-dev" / "llms-full.txt"


def mutate(lines: list[str], rnd: random.Random, n: int) -> list[str]:
    """One synthetic update of ``lines``: sections inserted, deleted and moved, lines edited."""
    out = list(lines)
    heads = [i for i, ln in enumerate(out) if ln.startswith("## ")]

    def section(i: int) -> tuple[int, int]:
        k = heads.index(i)
        return i, heads[k + 1] if k + 1 < len(heads) else len(out)

    for k in range(3):  # insert
        at = rnd.choice(heads)
        out[at:at] = [f"## New section {n}.{k}", "", *[f"Fresh text {n}.{k}.{j} {rnd.random()}" for j in range(12)], ""]
        heads = [i for i, ln in enumerate(out) if ln.startswith("## ")]
    for _ in range(3):  # delete
        s, e = section(rnd.choice(heads[:-1]))
        del out[s:e]
        heads = [i for i, ln in enumerate(out) if ln.startswith("## ")]
    for _ in range(2):  # move
        s, e = section(rnd.choice(heads[:-1]))
        block = out[s:e]
        del out[s:e]
        heads = [i for i, ln in enumerate(out) if ln.startswith("## ")]
        at = rnd.choice(heads)
        out[at:at] = block
        heads = [i for i, ln in enumerate(out) if ln.startswith("## ")]
    for _ in range(10):  # edit
        i = rnd.randrange(len(out))
        out[i] = out[i] + f" (edited in update {n})"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    from cairn_servers.blz import service, sources
    from cairn_servers.blz.store import Store
    from cairn_servers.blz.versions import line_map

    rnd = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="blz-versions-bench-"))
    try:
        out: dict[str, object] = {"benchmark": "blz_versions", "python": sys.version.split()[0],
                                  "load_average_before": [round(x, 2) for x in os.getloadavg()]}
        doc = tmp / "react.txt"
        text = REACT.read_text()
        doc.write_text(text)
        store = Store(tmp / "data")
        sources.add(store, "react", str(doc))
        v1 = text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")
        probes = [(s, s + 19) for s in (rnd.randrange(1, len(v1) - 20) for _ in range(200))]
        current = v1
        updates, diffs = [], []
        for n in range(2, args.updates + 2):
            new = mutate(current, rnd, n)
            t0 = time.perf_counter()
            line_map(current, new)
            diffs.append(time.perf_counter() - t0)
            doc.write_text("\n".join(new) + "\n")
            t0 = time.perf_counter()
            assert sources.update(store, "react")["status"] == "updated"
            updates.append(time.perf_counter() - t0)
            current = new
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        maps, changes = store.db.execute(
            "SELECT COALESCE(SUM(length(map)), 0), COALESCE(SUM(length(changes)), 0) FROM versions").fetchone()
        index = store.index_bytes()
        same = exact = parts = 0
        row = store.source("react")
        assert row is not None
        for s, e in probes:
            got = service.get(store, [f"react:{s}-{e}@1"])
            report = got["citations"][0]
            same += report["status"] in ("unchanged", "moved")
            for part in report["parts"]:  # every part said to hold the same text holds it, where it says
                if part["text"] == "same":
                    parts += 1
                    (a, b), (c, d) = (map(int, part[k].split("-")) for k in ("was", "now"))
                    exact += store.read_lines(row, c, d) == v1[a - 1:b]
        out.update({
            "lines": len(v1), "updates": args.updates, "versions_kept": len(store.versions("react")),
            "map_bytes": int(maps), "changes_bytes": int(changes), "index_bytes": index,
            "maps_and_changes_share_of_index_pct": round(100 * (maps + changes) / index, 3),
            "update_s": {"median": round(statistics.median(updates), 3), "max": round(max(updates), 3)},
            "diff_s": {"median": round(statistics.median(diffs), 3), "max": round(max(diffs), 3)},
            "follow": {"citations": len(probes), "whole_text_kept": same, "same_parts": parts,
                       "same_parts_verified_identical": exact},
            "load_average_after": [round(x, 2) for x in os.getloadavg()]})
        store.close()
        print(json.dumps(out, indent=2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
