"""ctx semantic and hybrid search at 100k chunks, this checkout against a baseline tree, interleaved (issue 19).

    .venv/bin/python benchmarks/ctx_semantic.py --baseline /tmp/sem2main/src [--chunks 100000] [--queries 200]
        [--rounds 3] [--provider minilm] [--kb DIR] [--concurrent 2]

Builds the knowledge base of ``benchmarks/ctx.py`` (the same words, documents, sources and dates; the model's
384-dimension random unit vectors stored, queries embedded by the real model) in ``--kb`` (kept and reused when
given), then starts one worker process per tree (``PYTHONPATH`` = that tree's ``src``; bytecode compiled first for
both) and times ``Service.search(q, mode)`` in each, alternately, in blocks of 20 queries, so both trees see the
same machine state. The query-vector cache is emptied before every timed search (each one embeds its query).
Reported per tree: the first semantic search (model and matrix load), semantic and hybrid p50/p95 per round,
and with ``--concurrent N`` the wall time of N threads searching at once (throughput, as the HTTP server does).
Every answer of both trees is compared, unrounded: the semantic and hybrid candidate scores
(``retrieval.semantic`` / ``retrieval.hybrid_candidates``) and the grouped results (``same_results``).
Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ctx  # noqa: E402  (benchmarks/ctx.py: build_kb, vocabulary, ms)

REPO = Path(__file__).resolve().parents[1]

# One tree's worker: JSON commands on stdin, one JSON reply per line on stdout.
_WORKER = r"""
import json, sys, threading, time
from cairn_servers.ctx import retrieval
from cairn_servers.ctx.service import Service

svc = Service.from_config(sys.argv[1])
t = time.perf_counter()
svc.search("warm up", "semantic")
print(json.dumps({"first_semantic_s": time.perf_counter() - t}), flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd["op"] == "time":
        times = []
        for q in cmd["queries"]:
            retrieval.forget_query_vectors()
            t = time.perf_counter()
            svc.search(q, cmd["mode"], **cmd["kwargs"])
            times.append(time.perf_counter() - t)
        print(json.dumps(times), flush=True)
    elif cmd["op"] == "concurrent":
        qs, n = cmd["queries"], cmd["threads"]
        def run(part):
            own = Service.from_config(sys.argv[1])  # a connection per thread, as the HTTP server has
            for q in part:
                retrieval.forget_query_vectors()
                own.search(q, cmd["mode"])
        threads = [threading.Thread(target=run, args=(qs[i::n],)) for i in range(n)]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        print(json.dumps(time.perf_counter() - t), flush=True)
    elif cmd["op"] == "answers":
        from cairn_servers.ctx.retrieval import Filters
        out = []
        emb = svc.embedder()
        r = svc.config.retrieval
        for q in cmd["queries"]:
            sem = retrieval.semantic(svc.store, emb, q, Filters(), r.candidate_k_vector)
            kw, vec = retrieval.hybrid_candidates(svc.store, emb, q, Filters(), r.candidate_k_keyword,
                                                  r.candidate_k_vector)
            res = [[x.__dict__ for x in svc.search(q, m, **kw_)] for m in ("semantic", "hybrid")
                   for kw_ in ({}, {"source": "s1"}, {"since": "2020-01-01"})]
            out.append([sorted(sem.items()), sorted(vec.items()), res])
        print(json.dumps(out), flush=True)
"""


class Worker:
    def __init__(self, src: str, cfg: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "CTX_CONFIG",
                                                                "CTX_DATABASE_URL", "CTX_OUTPUT_FORMAT")}
        subprocess.run([sys.executable, "-m", "compileall", "-q", src], check=True, capture_output=True)
        self.proc = subprocess.Popen([sys.executable, "-c", _WORKER, str(cfg)], env=dict(env, PYTHONPATH=src),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=str(cfg.parent))
        self.first = self.read()["first_semantic_s"]

    def read(self) -> Any:
        assert self.proc.stdout is not None
        return json.loads(self.proc.stdout.readline())

    def ask(self, **cmd: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", required=True, help="the other tree's src directory")
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--provider", default="minilm", choices=("minilm", "local", "e5"))
    ap.add_argument("--kb", help="keep the knowledge base here (built when missing, reused when present)")
    ap.add_argument("--concurrent", type=int, default=0, help="also: N threads searching at once")
    ap.add_argument("--modes", default="semantic,hybrid")
    args = ap.parse_args()
    out: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()]}}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(args.kb) if args.kb else Path(tmp)
        cfg = base / "kb.toml"
        if not cfg.exists():
            base.mkdir(parents=True, exist_ok=True)
            t = time.perf_counter()
            ctx.build_kb(base, args.chunks, args.provider)
            out["build_kb_s"] = round(time.perf_counter() - t, 1)
        rng = random.Random(3)
        words = ctx.vocabulary()
        qs = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 4))) for _ in range(args.queries)]
        trees = {"this": str(REPO / "src"), "baseline": str(Path(args.baseline).resolve())}
        workers: dict[str, Worker] = {}
        for name, src in trees.items():
            workers[name] = Worker(src, cfg)
            out.setdefault("first_semantic_s", {})[name] = round(workers[name].first, 3)
        modes = args.modes.split(",")
        for round_ in range(args.rounds):
            times: dict[str, dict[str, list[float]]] = {n: {m: [] for m in modes} for n in trees}
            for mode in modes:
                for b, start in enumerate(range(0, len(qs), 20)):
                    order = list(trees) if (b + round_) % 2 == 0 else list(reversed(trees))
                    for name in order:
                        times[name][mode] += workers[name].ask(op="time", mode=mode, queries=qs[start:start + 20],
                                                               kwargs={})
            row: dict[str, Any] = {"load_average": [round(x, 2) for x in os.getloadavg()]}
            for name in trees:
                row[name] = {m: ctx.ms(times[name][m]) for m in modes}
            out.setdefault("rounds", []).append(row)
        if args.concurrent:
            conc: dict[str, Any] = {}
            for mode in modes:
                for name in (list(trees) + list(reversed(trees))):
                    wall = workers[name].ask(op="concurrent", mode=mode, queries=qs, threads=args.concurrent)
                    conc.setdefault(mode, {}).setdefault(name, []).append(round(len(qs) / wall, 1))
            out["concurrent_searches_per_s"] = conc
        answers = {name: workers[name].ask(op="answers", queries=qs) for name in trees}
        out["same_results"] = answers["this"] == answers["baseline"]
        out["differing_queries"] = [qs[i] for i, (a, b) in enumerate(zip(answers["this"], answers["baseline"]))
                                    if a != b][:10]
        for w in workers.values():
            w.close()
    out["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
