"""Two HNSW libraries for ctx's SQLite vectors, side by side; prints one JSON object.

usearch (int8 and float16 vectors, cosine) and hnswlib (float32, inner product on unit vectors), with the same
graph settings (M / connectivity 16, ef_construction / expansion_add 128, ef / expansion_search 256), on ``--rows``
synthetic unit vectors of minilm's 384 dimensions drawn around topics (benchmarks/ctx.py's ``clustered``): build
time (all cores), index size, query p50 / p95 (one thread), recall@10 of the index's top 128 rescored in float32
against the exact scan, over ``--queries`` queries (vectors of the same kind, not stored).

Usage: .venv/bin/python benchmarks/ctx_ann.py [--rows 100000] [--queries 200]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path[:0] = [str(Path(__file__).resolve().parent)]
from ctx import cluster_centers, clustered, pct  # noqa: E402

M, EF_ADD, EF_SEARCH, CANDIDATES, K = 16, 128, 256, 128, 10


def measure(name: str, search: Callable[[Any], Any], matrix: Any, queries: Any, exact: list[set[int]],
            build_s: float, size: int) -> dict[str, object]:
    import numpy as np

    times, found = [], 0
    for q, truth in zip(queries, exact):
        t = time.perf_counter()
        keys = np.asarray(search(q), dtype=np.intp)
        scores = matrix[keys] @ q
        top = keys[np.argsort(-scores)[:K]]
        times.append(time.perf_counter() - t)
        found += len(truth & set(top.tolist()))
    return {"library": name, "build_s": round(build_s, 1), "index_mb": round(size / 1e6, 1),
            "query_p50_ms": round(pct(times, 50) * 1000, 3), "query_p95_ms": round(pct(times, 95) * 1000, 3),
            "recall_at_10": round(found / (K * len(queries)), 4)}


def main() -> None:
    import numpy as np

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    rng = np.random.default_rng(4)
    centers = cluster_centers(rng, 384)
    matrix = clustered(rng, centers, args.rows).astype(np.float32)
    queries = clustered(rng, centers, args.queries).astype(np.float32)
    exact = [set(np.argsort(-(matrix @ q))[:K].tolist()) for q in queries]
    out: dict[str, object] = {"rows": args.rows, "dims": 384, "queries": args.queries,
                              "load_average": [round(x, 2) for x in os.getloadavg()], "results": []}
    threads = os.cpu_count() or 1
    keys = np.arange(args.rows, dtype=np.uint64)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            import onnxruntime  # noqa: F401  (before usearch: see cairn_servers.ctx.vectorfile._usearch)
        except ImportError:
            pass
        from usearch.index import Index

        for dtype in ("i8", "f16"):
            t = time.perf_counter()
            index = Index(ndim=384, metric="cos", dtype=dtype, connectivity=M, expansion_add=EF_ADD,
                          expansion_search=EF_SEARCH)
            index.add(keys, matrix, threads=threads)
            build_s = time.perf_counter() - t
            path = Path(tmp) / f"u-{dtype}.usearch"
            index.save(str(path))
            view = Index.restore(str(path), view=True)
            view.expansion_search = EF_SEARCH
            out["results"].append(measure(f"usearch {dtype}", lambda q: view.search(q, CANDIDATES).keys,  # type: ignore[union-attr]
                                          matrix, queries, exact, build_s, path.stat().st_size))
            del index, view
        import hnswlib

        t = time.perf_counter()
        h = hnswlib.Index(space="ip", dim=384)
        h.init_index(max_elements=args.rows, M=M, ef_construction=EF_ADD)
        h.set_num_threads(threads)
        h.add_items(matrix, np.arange(args.rows))
        build_s = time.perf_counter() - t
        h.set_ef(max(EF_SEARCH, CANDIDATES))
        h.set_num_threads(1)
        path = Path(tmp) / "h.bin"
        h.save_index(str(path))
        out["results"].append(measure("hnswlib f32", lambda q: h.knn_query(q, k=CANDIDATES)[0][0], matrix, queries,  # type: ignore[union-attr]
                                      exact, build_s, path.stat().st_size))
    out["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
