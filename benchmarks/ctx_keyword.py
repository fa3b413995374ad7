"""ctx keyword search at 100k chunks, this checkout's ranking against a baseline's, query by query (issue 19).

    .venv/bin/python benchmarks/ctx_keyword.py [--baseline /tmp/kmain/src] [--chunks 100000] [--queries 200]
        [--rounds 3] [--budgets 8000,6000,4000] [--one-statement] [--forget]

Builds the knowledge base of ``benchmarks/ctx.py`` (the same words, documents, sources and dates; 384-dimension
stored vectors that keyword search never reads), then, in one process, times ``Service.search(q, "keyword")``
over the same queries with this tree's ``SqliteStore.fts_rank`` and with ``--baseline``'s (that tree's
``cairn_servers/ctx/store.py`` loaded beside this one), alternating which goes first, unfiltered, with a source filter
and with a ``since`` filter. Both answers of every search are compared (``same_results``). ``--one-statement``: a
third variant, this tree with the split ranking (two halves on two connections) off, also compared. This tree keeps
counts and rankings until the data changes (``SqliteStore._fts_known``): with ``--rounds`` over 1 every later round
is answered from them, so compare with ``--rounds 1``, or ``--forget`` (nothing kept) to see the split alone (the
baseline's ranking still uses this tree's counts: only ``fts_rank`` is swapped). ``--budgets``: also the latency by
ranking budget and how many queries' top 10 documents differ from the first budget's (this tree only; the corpus
is random words, so a changed answer is a change, not a measured loss). Prints one JSON document.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ctx  # noqa: E402  (benchmarks/ctx.py: build_kb, vocabulary, ms)


def load_store(src: Path) -> Any:
    spec = importlib.util.spec_from_file_location("baseline_store", src / "cairn_servers" / "ctx" / "store.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["baseline_store"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", type=Path, help="another tree's src (e.g. main's, from git archive)")
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budgets", default="", help="comma-separated ranking budgets, the first the reference")
    ap.add_argument("--one-statement", action="store_true",
                    help="also time this tree with the split ranking off (SPLIT_MIN out of reach)")
    ap.add_argument("--forget", action="store_true",
                    help="this tree remembers no counts or rankings (FTS_KNOWN_MAX = 0): the split ranking alone")
    args = ap.parse_args()

    from cairn_servers.ctx import retrieval
    from cairn_servers.ctx import store as store_module
    from cairn_servers.ctx.service import Service
    from cairn_servers.ctx.store import SqliteStore

    out: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "load_before": [round(x, 2) for x in os.getloadavg()]}}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = ctx.build_kb(Path(tmp), args.chunks, "minilm")
        svc = Service.from_config(cfg)
        store = svc.store
        rng = random.Random(3)  # the queries of benchmarks/ctx.py
        words = ctx.vocabulary()
        qs = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 4))) for _ in range(args.queries)]
        if args.forget:
            store_module.FTS_KNOWN_MAX = 0  # type: ignore[attr-defined]
        impl = {"this": SqliteStore.fts_rank}
        if args.baseline:
            impl["baseline"] = load_store(args.baseline).SqliteStore.fts_rank
        if args.one_statement:  # this tree with the split ranking off: what the second core buys, paired
            def one_statement(self: Any, *a: Any, **kw: Any) -> Any:
                split_min, store_module.SPLIT_MIN = store_module.SPLIT_MIN, 1 << 62
                try:
                    return SqliteStore.fts_rank(self, *a, **kw)
                finally:
                    store_module.SPLIT_MIN = split_min

            impl["this_one_statement"] = one_statement
        variants: dict[str, dict[str, Any]] = {"": {}, "_source_filter": {"source": "s1"},
                                                "_since_filter": {"since": "2020-01-01"}}
        times: dict[str, list[float]] = {f"{n}{v}": [] for n in impl for v in variants}
        cpu: dict[str, float] = dict.fromkeys(times, 0.0)
        same = True
        svc.search("warm up", "keyword")
        for rnd in range(args.rounds):
            for i, q in enumerate(qs):
                names = list(impl) if (i + rnd) % 2 else list(reversed(impl))
                for v, kwargs in variants.items():
                    answers = {}
                    for n in names:
                        store.fts_rank = types.MethodType(impl[n], store)  # type: ignore[method-assign]
                        t, c = time.perf_counter(), time.process_time()
                        answers[n] = svc.search(q, "keyword", **kwargs)
                        times[f"{n}{v}"].append(time.perf_counter() - t)
                        cpu[f"{n}{v}"] += time.process_time() - c  # every thread's: the split's helper too
                    same = same and all(a == answers["this"] for a in answers.values())
        store.fts_rank = types.MethodType(SqliteStore.fts_rank, store)  # type: ignore[method-assign]
        out["keyword"] = {k: {**ctx.ms(v), "cpu_ms_per_search": round(cpu[k] / len(v) * 1000, 2)} for k, v in times.items()}
        out["same_results"] = same
        state = getattr(store_module, "_split_state", None)
        if state is not None:  # split rankings done, and how many of them found no free core (then 2 s of one statement)
            out["split_rankings"] = {"done": state["splits"], "backed_off": state["backoffs"]}
        out["baseline"] = str(args.baseline) if args.baseline else None
        if args.budgets:
            budgets = [int(b) for b in args.budgets.split(",")]
            keyword = retrieval.keyword
            by: dict[int, list[float]] = {b: [] for b in budgets}
            tops: dict[int, list[list[str]]] = {b: [] for b in budgets}
            try:
                for rnd in range(args.rounds):
                    for i, q in enumerate(qs):
                        for b in budgets if (i + rnd) % 2 else budgets[::-1]:
                            retrieval.keyword = (  # type: ignore[assignment]
                                lambda s, text, f, k, budget=b, **_: keyword(s, text, f, k, budget=budget))
                            t = time.perf_counter()
                            hits = svc.search(q, "keyword")
                            by[b].append(time.perf_counter() - t)
                            if rnd == 0:
                                tops[b].append([h.id for h in hits])
            finally:
                retrieval.keyword = keyword
            ref = tops[budgets[0]]
            out["budgets"] = {str(b): {**ctx.ms(by[b]), "top10_changed_queries": sum(a != r for a, r in zip(tops[b], ref)),
                                       "mean_overlap_at_10": round(sum(len(set(a) & set(r)) / max(1, len(r))
                                                                       for a, r in zip(tops[b], ref)) / len(ref), 3)}
                              for b in budgets}
    out["machine"]["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
