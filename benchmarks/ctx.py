"""ctx benchmarks; prints one JSON object.

* sync: 10,000 small files through the real CLI (`ctx sync`, keyword-only), then a re-sync with
  nothing changed (wall time of the whole process, startup included).
* documents: `ctx sync` of a folder of generated PDFs (10 pages each, hand-built by
  tests/ctx/_docs.py) and one of DOCX files (python-docx), keyword-only: files/s, pages/s, MB/s;
  then the wall time of a `ctx search` process on that knowledge base against `python -c pass`, and
  whether that process loaded any extraction library (it must not).
* embed: local (wordllama) throughput on real documentation chunks (react.dev pages), chunks/s.
* search: keyword / semantic / hybrid latency (p50, p95, in-process, warm) on a knowledge base of
  N chunks (default 100,000) of synthetic text drawn from the real corpus vocabulary, unfiltered
  and filtered (one source of four; a date window).

* transfer (``--only transfer``, issue 17 items 4-5): on a knowledge base of ``--chunks`` chunks with
  local vectors, ``ctx export --vectors`` and ``ctx import`` as real processes (wall, MB/s, peak RSS),
  the imported knowledge base's answers compared with the original's; the cost of ``--explain``
  (keyword and hybrid, in process, interleaved); and with ``--compare REF`` (a git ref of this
  repository, e.g. ``main``), the non-explain search latency and the CPU time of a whole ``ctx search``
  process under this tree and under REF's ``src``, run alternately.
* startup (``--only startup``, issue 17's "start-up time is unchanged"): a whole ``ctx search hooks
  --config ... --json`` process on a 40-page keyword-only knowledge base: its CPU time (user + sys) over
  ``--rounds`` runs (and ``python -c pass``'s), the modules it imports and, when valgrind is on PATH, the instructions it
  executes (``--tool=callgrind``, ``PYTHONHASHSEED=0``: the same count on every run, unlike the times). With
  ``--compare REF`` the same under REF's ``src``, the two trees run alternately, each searching a knowledge
  base it synced itself; bytecode caches are written for both first.

Text: react.dev's and Hono's llms files of the repository's test data (tests/data/llms, decompressed
into a temporary directory).

Usage: .venv/bin/python benchmarks/ctx.py [--chunks 100000] [--files 10000] [--queries 300] [--documents 200]
       [--only documents|transfer|startup|search|scale] [--compare REF] [--rounds 20] [--provider minilm|e5]
       [--kb DIR]

``--only scale --kb DIR --chunks N`` (the knowledge base at a million chunks): :func:`bench_scale`, over HTTP on a
knowledge base built once in DIR (outside the repository) and reused.

``--only search`` builds the knowledge base and measures search only (any provider). The query-vector cache
(``cairn_servers.ctx.retrieval.query_vector``) is emptied before every timed search, so each one embeds its query.

``--provider minilm`` (or ``e5``) measures search only, with that model's 384-dimension vectors: the
knowledge base gets synthetic unit vectors around 2,000 topics (:func:`clustered`) stored under the model's identity ("vectors already stored":
embedding 100k chunks with it takes hours here) and each query is embedded by the real model.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO)]
from tests._data import data_dir  # noqa: E402 (after the path set-up)

SHARED = data_dir() / "llms"  # the test data's llms.txt files (tests/data/llms), decompressed


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def ms(values: list[float]) -> dict[str, float]:
    return {"p50_ms": round(pct(values, 50) * 1000, 2), "p95_ms": round(pct(values, 95) * 1000, 2),
            "max_ms": round(max(values) * 1000, 2)}


def vocabulary() -> list[str]:
    text = (SHARED / "react-dev" / "llms-full.txt").read_text(encoding="utf-8")
    text += (SHARED / "hono" / "llms-small.txt").read_text(encoding="utf-8")
    return re.findall(r"[A-Za-z][A-Za-z]{2,}", text)


def bench_sync(base: Path, files: int) -> dict[str, object]:
    rng = random.Random(1)
    words = vocabulary()
    root = base / "files"
    for i in range(files):
        d = root / f"d{i // 500:03d}"
        d.mkdir(parents=True, exist_ok=True)
        body = " ".join(rng.choice(words) for _ in range(rng.randint(40, 200)))
        (d / f"f{i:05d}.md").write_text(f"# File {i}\n\n{body}\n", encoding="utf-8")
    cfg = base / "sync.toml"
    cfg.write_text(f'[db]\npath = "sync.sqlite"\n[connectors.filesystem.files]\nroot = "{root}"\n')
    cmd = [sys.executable, "-m", "cairn_servers.ctx.cli", "sync", "all", "--config", str(cfg), "--json"]
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    t = time.perf_counter()
    first = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout)
    first_s = time.perf_counter() - t
    resync = []
    for _ in range(3):
        t = time.perf_counter()
        again = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout)
        resync.append(time.perf_counter() - t)
    assert again["sources"][0]["unchanged"] == files, again
    return {"files": files, "chunks": first["sources"][0]["chunks"], "first_sync_s": round(first_s, 3),
            "resync_unchanged_s": round(min(resync), 3), "resync_unchanged_max_s": round(max(resync), 3)}


def bench_documents(base: Path, n: int) -> dict[str, object]:
    from tests.ctx._docs import pdf_bytes, write_docx

    rng = random.Random(2)
    words = vocabulary()
    out: dict[str, object] = {}
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))

    def line() -> str:
        return " ".join(rng.choice(words) for _ in range(10))

    for kind in ("pdf", "docx"):
        root = base / f"docs-{kind}"
        root.mkdir(parents=True)
        for i in range(n):
            if kind == "pdf":
                (root / f"r{i:04d}.pdf").write_bytes(pdf_bytes([[line() for _ in range(40)] for _ in range(10)]))
            else:
                blocks: list[tuple[str, str]] = []
                for h in range(10):
                    blocks.append(("h1" if h == 0 else "h2", f"Section {h} {line()[:40]}"))
                    blocks += [("p", " ".join(line() for _ in range(8))) for _ in range(5)]
                write_docx(root / f"d{i:04d}.docx", blocks)
        size = sum(p.stat().st_size for p in root.iterdir())
        cfg = base / f"{kind}.toml"
        cfg.write_text(f'[db]\npath = "{kind}.sqlite"\n[connectors.filesystem.docs]\nroot = "{root}"\n')
        cmd = [sys.executable, "-m", "cairn_servers.ctx.cli", "sync", "all", "--config", str(cfg), "--json"]
        t = time.perf_counter()
        report = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout)
        wall = time.perf_counter() - t
        src = report["sources"][0]
        assert src["added"] == n and not src["warnings"], src
        row: dict[str, object] = {"files": n, "mb": round(size / 1e6, 1), "chunks": src["chunks"],
                                  "sync_process_s": round(wall, 2), "sync_in_process_s": src["seconds"],
                                  "files_per_s": round(n / src["seconds"], 1),
                                  "mb_per_s": round(size / 1e6 / src["seconds"], 2)}
        if kind == "pdf":
            row["pages_per_s"] = round(10 * n / src["seconds"], 1)
        out[kind] = row

    # `ctx search` start-up on the PDF knowledge base: the extraction libraries must stay unloaded.
    probe = ("import sys\nfrom cairn_servers.ctx.cli import main\nsys.argv[1:] = sys.argv[2:]\nrc = main()\n"
             "heavy = [m for m in ('pypdfium2', 'python_calamine', 'cairn_servers.ctx.extract', 'html.parser') if m in sys.modules]\n"
             "sys.stderr.write('HEAVY ' + ','.join(heavy) + '\\n')\nsys.exit(rc)\n")
    search = [sys.executable, "-c", probe, "--", "search", rng.choice(words), "--config", str(base / "pdf.toml"), "--json"]
    heavy = subprocess.run(search, capture_output=True, text=True, check=True, env=env).stderr.split("HEAVY ")[1].strip()
    plain = [sys.executable, "-m", "cairn_servers.ctx.cli"] + search[4:]
    times, base_times = [], []
    for _ in range(9):
        t = time.perf_counter()
        subprocess.run(plain, capture_output=True, check=True, env=env)
        times.append(time.perf_counter() - t)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        base_times.append(time.perf_counter() - t)
    out["search_process"] = {"median_ms": round(statistics.median(times) * 1000, 1),
                             "python_pass_median_ms": round(statistics.median(base_times) * 1000, 1),
                             "extraction_modules_loaded": heavy or "none"}
    return out


def bench_embed() -> dict[str, object]:
    from cairn_servers.ctx.chunk import chunk_text
    from cairn_servers.search.embed import EmbeddingSettings, create

    text = (SHARED / "react-dev" / "llms-full.txt").read_text(encoding="utf-8")
    chunks = [c.text for c in chunk_text(text, 400, 40)]
    e = create(EmbeddingSettings(provider="local", batch_size=256))
    e.embed(["warm up"])
    t = time.perf_counter()
    e.embed(chunks)
    s = time.perf_counter() - t
    words = sum(len(c.split()) for c in chunks) / len(chunks)
    return {"model": e.identity, "chunks": len(chunks), "avg_words_per_chunk": round(words, 1),
            "seconds": round(s, 3), "chunks_per_s": round(len(chunks) / s, 1)}


CLUSTERS = 2000  # topics of the synthetic vectors


def cluster_centers(np_rng: Any, dims: int) -> Any:
    """Unit topic directions: embeddings of real text are not spread evenly over the sphere (their nearest
    neighbours share a topic), and an HNSW index is measured on data of that kind."""
    c = np_rng.standard_normal((CLUSTERS, dims)).astype("float32")
    return c / __import__("numpy").linalg.norm(c, axis=1, keepdims=True)


def clustered(np_rng: Any, centers: Any, n: int) -> Any:
    """``n`` unit vectors, each a topic plus noise of the same length (cosine ~0.5 within a topic, ~0 across)."""
    import numpy as np

    noise = np_rng.standard_normal((n, centers.shape[1])).astype("float32") / np.float32(np.sqrt(centers.shape[1]))
    vecs = centers[np_rng.integers(0, centers.shape[0], n)] + noise
    return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


def build_kb(base: Path, n_chunks: int, provider: str = "local") -> Path:
    from cairn_servers.ctx.chunk import chunk_hash, Chunk
    from cairn_servers.ctx.store import DocumentRecord, Store
    from cairn_servers.search.embed import EmbeddingSettings, create

    rng = random.Random(2)
    words = vocabulary()
    store = Store(base / "kb.sqlite", create=True)
    embedder = create(EmbeddingSettings(provider=provider, batch_size=512))
    np_rng = __import__("numpy").random.default_rng(4)
    per_doc = 10
    sources = [f"filesystem:s{i}" for i in range(4)]
    centers = None if provider == "local" else cluster_centers(np_rng, embedder.dims)
    for start in range(0, n_chunks, 5000):
        docs = []
        texts: dict[str, str] = {}
        for d in range(start // per_doc, min(n_chunks, start + 5000) // per_doc):
            chunks = []
            for k in range(per_doc):
                body = " ".join(rng.choice(words) for _ in range(rng.randint(40, 120)))
                heading = f"# Doc {d} > ## Part {k}"
                chunks.append(Chunk(k, heading, body, chunk_hash(heading, body)))
                texts[chunks[-1].hash] = body
            docs.append((DocumentRecord(
                source=sources[d % 4], source_id=f"doc{d}.md", title=f"Doc {d}", body="",
                updated_at=1_500_000_000 + rng.randint(0, 250_000_000), fingerprint="x", content_hash=str(d)), chunks))
        hashes = list(texts)
        if provider == "local":
            vecs = embedder.embed([texts[h] for h in hashes])
        else:  # stored vectors of the model's size; the queries are embedded by the real model
            vecs = clustered(np_rng, centers, len(hashes))
        with store.transaction():
            for doc, chunks in docs:
                store.upsert(doc, chunks)
            store.put_vectors(embedder.identity, hashes, [v.tobytes() for v in vecs])
            store.bump()
    store.db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('optimize')")
    from cairn_servers.ctx import keyword_index

    if n_chunks >= keyword_index.BUILD_MIN_CHUNKS:  # the keyword head index, as a server's first query would build it
        keyword_index.build(store.path)
    from cairn_servers.ctx.vectorfile import build

    build(store, embedder.identity, embedder.dims)  # the vector files and their index, as `ctx embed rebuild` writes them
    store.close()
    (base / "kb.toml").write_text(f'[db]\npath = "kb.sqlite"\n[embedding]\nprovider = "{provider}"\n' + "".join(
        f'[connectors.filesystem.s{i}]\nroot = "."\n' for i in range(4)))
    return base / "kb.toml"


def bench_search(cfg: Path, queries: int) -> dict[str, object]:
    from cairn_servers.ctx.retrieval import forget_query_vectors
    from cairn_servers.ctx.service import Service

    svc = Service.from_config(cfg)
    rng = random.Random(3)
    words = vocabulary()
    qs = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 4))) for _ in range(queries)]
    t = time.perf_counter()
    svc.search("warm up", "semantic")  # loads the model and the vector matrix once
    load_s = time.perf_counter() - t
    out: dict[str, object] = {"chunks": svc.stats().chunks, "first_semantic_query_s_incl_matrix_load": round(load_s, 3)}
    variants = {
        "": {},
        "_source_filter": {"source": "s1"},
        "_since_filter": {"since": "2020-01-01"},
    }
    for mode in ("keyword", "semantic", "hybrid"):
        for suffix, kwargs in variants.items():
            times = []
            for q in qs:
                forget_query_vectors()  # every mode and variant embeds its query: distinct queries
                t = time.perf_counter()
                svc.search(q, mode, **kwargs)  # type: ignore[arg-type]
                times.append(time.perf_counter() - t)
            out[mode + suffix] = ms(times)
    # The parts of a semantic search: the query embedding, and the scan of the vectors (top 80).
    from cairn_servers.ctx import retrieval
    from cairn_servers.search.embed import embed_queries

    embedder = svc.embedder()
    matrix = retrieval.matrix_for(svc.store, embedder)
    embed_s, scan_s = [], []
    for q in qs:
        t = time.perf_counter()
        vector = embed_queries(embedder, [q])[0]
        embed_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        matrix.search(vector, 80)
        scan_s.append(time.perf_counter() - t)
    out["query_embedding"] = ms(embed_s)
    out["vector_scan_top80"] = ms(scan_s)
    out["vector_ann"] = matrix.ann is not None
    return out


# One process's search latency (run under either tree's src): p50 of keyword and hybrid over the queries.
_LATENCY = """
import json, random, sys, time
from cairn_servers.ctx.service import Service
svc = Service.from_config(sys.argv[1])
qs = json.loads(sys.argv[2])
svc.search("warm up", "hybrid")
out = {}
for mode in ("keyword", "hybrid"):
    times = []
    for q in qs:
        t = time.perf_counter()
        svc.search(q, mode)
        times.append(time.perf_counter() - t)
    times.sort()
    out[mode] = times[len(times) // 2] * 1000
print(json.dumps(out))
"""

# A whole `ctx search` process: its CPU time (user + sys of the child) and its peak RSS.
_RUSAGE = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(r.ru_utime + r.ru_stime, r.ru_maxrss)
"""


def bench_transfer(base: Path, cfg: Path, queries: int, compare: str | None) -> dict[str, object]:
    from cairn_servers.ctx.service import Service

    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), CTX_OUTPUT_FORMAT="")
    ctx = [sys.executable, "-m", "cairn_servers.ctx.cli"]
    out: dict[str, object] = {}

    def run(argv: list[str], **kw: object) -> tuple[float, float, int, str]:
        """(wall s, CPU s, peak RSS KiB, stdout) of one ctx process."""
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", _RUSAGE, *argv], capture_output=True, text=True, check=True, **kw)  # type: ignore[call-overload]
        wall = time.perf_counter() - t
        cpu, rss = r.stdout.split()
        return wall, float(cpu), int(rss), r.stdout

    dump = base / "kb.jsonl"
    wall, cpu, rss, _ = run([*ctx, "export", "--vectors", "-o", str(dump), "--config", str(cfg)], env=env)
    mb = dump.stat().st_size / 1e6
    svc = Service.from_config(cfg)
    stats = svc.stats()
    out["export"] = {"chunks": stats.chunks, "documents": stats.documents, "vectors": stats.vectors,
                     "mb": round(mb, 1), "wall_s": round(wall, 2), "mb_per_s": round(mb / wall, 1),
                     "chunks_per_s": round(stats.chunks / wall), "peak_rss_mb": round(rss / 1024, 1)}
    fresh = base / "imported.toml"
    fresh.write_text(cfg.read_text().replace('path = "kb.sqlite"', 'path = "imported.sqlite"'))
    wall, cpu, rss, _ = run([*ctx, "import", str(dump), "--config", str(fresh)], env=env)
    out["import"] = {"wall_s": round(wall, 2), "mb_per_s": round(mb / wall, 1),
                     "chunks_per_s": round(stats.chunks / wall), "peak_rss_mb": round(rss / 1024, 1)}

    rng = random.Random(5)
    words = vocabulary()
    qs = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 4))) for _ in range(queries)]
    copy = Service.from_config(fresh)
    same = all(svc.search(q, m, limit=20) == copy.search(q, m, limit=20) for q in qs[:50]
               for m in ("keyword", "semantic", "hybrid"))
    out["import"]["same_answers_150_searches"] = same  # type: ignore[index]
    copy.close()

    # --explain: each query with and without, alternately first, in process.
    svc.search("warm up", "hybrid")
    for mode in ("keyword", "hybrid"):
        plain, explained = [], []
        for i, q in enumerate(qs):
            for explain in ((False, True) if i % 2 else (True, False)):
                t = time.perf_counter()
                svc.search(q, mode, explain=explain)
                (explained if explain else plain).append(time.perf_counter() - t)
        out[f"explain_{mode}"] = {"without": ms(plain), "with": ms(explained)}
    svc.close()

    if compare:
        ref = base / "ref"
        ref.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", compare, "src"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(ref)], input=archive.stdout, check=True)
        trees = {"this": str(REPO / "src"), compare: str(ref / "src")}
        latency: dict[str, list[dict[str, float]]] = {k: [] for k in trees}
        startup: dict[str, list[float]] = {k: [] for k in trees}
        search = ["-m", "cairn_servers.ctx.cli", "search", qs[0], "--config", str(cfg), "--json"]
        # Bytecode caches written for both trees first (as an installed package has them), else the tree
        # without them pays for compiling every module in each process.
        base_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        for name in trees:
            subprocess.run([sys.executable, *search], env=dict(base_env, PYTHONPATH=trees[name]),
                           capture_output=True, check=True)
        for round_ in range(3):
            for name in (list(trees) if round_ % 2 == 0 else list(reversed(trees))):
                e = dict(base_env, PYTHONPATH=trees[name])
                r = subprocess.run([sys.executable, "-c", _LATENCY, str(cfg), json.dumps(qs[:200])], env=e,
                                   capture_output=True, text=True, check=True)
                latency[name].append(json.loads(r.stdout))
        for round_ in range(20):
            for name in (list(trees) if round_ % 2 == 0 else list(reversed(trees))):
                e = dict(base_env, PYTHONPATH=trees[name], CTX_OUTPUT_FORMAT="")
                r = subprocess.run([sys.executable, "-c", _RUSAGE, sys.executable, *search], env=e,
                                   capture_output=True, text=True, check=True)
                startup[name].append(float(r.stdout.split()[0]))
        out["compare"] = {name: {
            "keyword_p50_ms": round(statistics.median(x["keyword"] for x in latency[name]), 2),
            "hybrid_p50_ms": round(statistics.median(x["hybrid"] for x in latency[name]), 2),
            "ctx_search_process_cpu_ms_median": round(statistics.median(startup[name]) * 1000, 1),
            "ctx_search_process_cpu_ms_min": round(min(startup[name]) * 1000, 1)} for name in trees}
    return out


# A `ctx search` process that reports, on stderr after its answer, how many modules it imported.
_MODULES = """
import sys
from cairn_servers.ctx.cli import main
rc = main(sys.argv[1:])
sys.stderr.write(f"MODULES {len(sys.modules)}\\n")
sys.exit(rc)
"""


def bench_startup(base: Path, compare: str | None, rounds: int) -> dict[str, object]:
    """A whole `ctx search` process under this tree (and REF's src): CPU, wall, modules, instructions."""
    rng = random.Random(6)
    words = vocabulary()
    pages = base / "pages"
    pages.mkdir()
    for i in range(40):
        parts = "".join(f"## Part {k}\n\n" + " ".join(rng.choice(words) for _ in range(150)) + "\n\n" for k in range(4))
        (pages / f"p{i:02d}.md").write_text(f"# Page {i}\n\n{parts}React hooks, page {i}.\n", encoding="utf-8")
    trees = {"this": REPO / "src"}
    if compare:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", compare, "src"], capture_output=True, check=True)
        (base / "ref").mkdir()
        subprocess.run(["tar", "-x", "-C", str(base / "ref")], input=archive.stdout, check=True)
        trees[compare] = base / "ref" / "src"
    # Bytecode caches written (as an installed package has them), else a tree pays for compiling every module.
    base_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "CTX_CONFIG",
                                                                 "CTX_DATABASE_URL", "CTX_OUTPUT_FORMAT")}
    envs: dict[str, dict[str, str]] = {}
    searches: dict[str, list[str]] = {}
    for i, (name, src) in enumerate(trees.items()):
        kb = base / f"kb{i}"
        kb.mkdir()
        (kb / "ctx.toml").write_text(f'[db]\npath = "kb.sqlite"\n[embedding]\nprovider = "disabled"\n'
                                     f'[connectors.filesystem.pages]\nroot = "{pages}"\n')
        envs[name] = dict(base_env, PYTHONPATH=str(src), PYTHONHASHSEED="0")
        subprocess.run([sys.executable, "-m", "cairn_servers.ctx.cli", "sync", "--config", str(kb / "ctx.toml"), "--json"],
                       env=envs[name], capture_output=True, check=True)
        searches[name] = ["search", "hooks", "--config", str(kb / "ctx.toml"), "--json"]
        hits = json.loads(subprocess.run([sys.executable, "-m", "cairn_servers.ctx.cli", *searches[name]], env=envs[name],
                                         capture_output=True, text=True, check=True).stdout)
        assert len(hits) >= 10, hits  # it searched (and the caches are written)
    cpu: dict[str, list[float]] = {k: [] for k in trees}
    bare: list[float] = []
    for round_ in range(rounds):
        for name in (list(trees) if round_ % 2 == 0 else list(reversed(trees))):
            r = subprocess.run([sys.executable, "-c", _RUSAGE, sys.executable, "-m", "cairn_servers.ctx.cli", *searches[name]],
                               env=envs[name], capture_output=True, text=True, check=True)
            cpu[name].append(float(r.stdout.split()[0]))
        r = subprocess.run([sys.executable, "-c", _RUSAGE, sys.executable, "-c", "pass"], capture_output=True,
                           text=True, check=True)
        bare.append(float(r.stdout.split()[0]))
    out: dict[str, object] = {"pages": 40, "rounds": rounds, "python_pass_cpu_ms_median": round(statistics.median(bare) * 1000, 1)}
    valgrind = shutil.which("valgrind")
    for name in trees:
        probe = subprocess.run([sys.executable, "-c", _MODULES, *searches[name]], env=envs[name], capture_output=True,
                               text=True, check=True)
        row: dict[str, object] = {
            "cpu_ms_median": round(statistics.median(cpu[name]) * 1000, 1), "cpu_ms_min": round(min(cpu[name]) * 1000, 1),
            "modules": int(probe.stderr.rsplit("MODULES ", 1)[1]), "instructions": None}
        if valgrind:
            r = subprocess.run([valgrind, "--tool=callgrind", f"--callgrind-out-file={base / 'callgrind.out'}",
                                sys.executable, "-m", "cairn_servers.ctx.cli", *searches[name]], env=envs[name],
                               capture_output=True, text=True, check=True)
            row["instructions"] = int(re.findall(r"Collected : (\d+)", r.stderr)[-1])
        out[name] = row
    if compare and valgrind:
        ours, theirs = out["this"]["instructions"], out[compare]["instructions"]  # type: ignore[index]
        out["instructions_change_pct"] = round((ours / theirs - 1) * 100, 2)
    return out


# The writer of the scale benchmark's sync: ``changed`` documents get new chunk texts and vectors, committed one
# document at a time as ``ctx sync`` commits them (argv: config, changed, seed).
_WRITER = """
import sys, random, numpy as np
sys.path[:0] = [sys.argv[4]]
from ctx import cluster_centers, clustered
from cairn_servers.ctx.chunk import Chunk, chunk_hash
from cairn_servers.ctx.service import Service
svc = Service.from_config(sys.argv[1])
store, embedder = svc.store, svc.embedder()
rng, np_rng = random.Random(int(sys.argv[3])), np.random.default_rng(int(sys.argv[3]))
centers = cluster_centers(np.random.default_rng(4), embedder.dims)
docs = store.sql("SELECT rowid, source, source_id, title, updated_at FROM documents ORDER BY random() LIMIT ?", [int(sys.argv[2])])
from cairn_servers.ctx.store import DocumentRecord
for rowid, source, source_id, title, updated in docs:
    chunks = [Chunk(k, f"# {title} > ## Part {k}", b, chunk_hash(f"# {title}", b)) for k, b in
              enumerate(f"changed {rng.random()} text of part {k}" for k in range(10))]
    vecs = clustered(np_rng, centers, len(chunks))
    with store.transaction():
        store.upsert(DocumentRecord(source=source, source_id=source_id, title=title, body="", updated_at=updated + 1,
                                    fingerprint="y", content_hash=str(rng.random())), chunks)
        store.put_vectors(embedder.identity, [c.hash for c in chunks], [v.tobytes() for v in vecs])
        store.bump()
print(len(docs))
"""


def bench_scale(kb: Path, chunks: int, queries: int) -> dict[str, object]:
    """Over HTTP, a ``ctx serve`` process on the knowledge base ``kb`` (built there once, with minilm-sized vectors
    around topics; kept for later runs): its first semantic query, p50 / p95 of each mode over ``queries``
    distinct queries one at a time, semantic p95 while another process changes 100 documents (the files caught up,
    not reloaded), and the server's peak RSS; then in this process, the HNSW index's recall@10 against the exact
    scan (100 real query embeddings and 100 vectors of the stored kind) and keyword search's top-10 against an
    exact BM25 ranking of all matches (100 queries)."""
    import threading

    import httpx
    import numpy as np

    sys.path[:0] = [str(REPO / "benchmarks")]
    from ctx_server import free_port

    out: dict[str, object] = {}
    cfg = kb / "kb.toml"
    if not cfg.exists():
        t = time.perf_counter()
        build_kb(kb, chunks, "minilm")
        out["build_kb_s"] = round(time.perf_counter() - t, 1)
    from cairn_servers.ctx import keyword_index
    from cairn_servers.ctx.store import Store

    if keyword_index.read_meta(keyword_index.folder(kb / "kb.sqlite")) is None:  # a knowledge base of an earlier tree
        Store(kb / "kb.sqlite").close()  # (its schema brought up to date)
        t, cpu = time.perf_counter(), time.process_time()
        keyword_index.build(kb / "kb.sqlite")
        out["keyword_index_build_s"] = round(time.perf_counter() - t, 1)
        out["keyword_index_build_cpu_s"] = round(time.process_time() - cpu, 1)
    out["keyword_index_mb"] = round(sum(p.stat().st_size for p in keyword_index.folder(kb / "kb.sqlite").iterdir()) / 2**20, 1)
    rng = random.Random(3)
    words = vocabulary()
    qs = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 4))) for _ in range(queries + 300)]
    port = free_port()
    started = time.perf_counter()
    log = open(kb / "serve.log", "wb")  # (a pipe nobody reads would stall the server once full)
    proc = subprocess.Popen([sys.executable, "-m", "cairn_servers.ctx.cli", "serve", "mcp", "--config", str(cfg),
                             "--bind", f"127.0.0.1:{port}"], env=dict(os.environ, PYTHONPATH=str(REPO / "src")),
                            stdout=subprocess.DEVNULL, stderr=log)
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if time.perf_counter() - started > 60 or proc.poll() is not None:
                raise SystemExit(f"ctx serve did not start: see {kb / 'serve.log'}")
            time.sleep(0.02)
    url = f"http://127.0.0.1:{port}/tools/search"
    try:
        with httpx.Client(timeout=120) as c:
            out["server_listening_s"] = round(time.perf_counter() - started, 3)
            t = time.perf_counter()
            r = c.post(url, json={"query": "how do hooks update state", "mode": "semantic", "limit": 10})
            out["first_semantic_query_s"] = round(time.perf_counter() - t, 3)
            assert r.status_code == 200 and r.json()["results"], r.text
            for q in qs[-20:]:  # the model warmed up
                c.post(url, json={"query": q, "mode": "hybrid", "limit": 10})
            for mode in ("keyword", "semantic", "hybrid"):
                times = []
                for q in qs[:queries]:
                    t = time.perf_counter()
                    r = c.post(url, json={"query": q, "mode": mode, "limit": 10})
                    times.append(time.perf_counter() - t)
                    assert r.status_code == 200, r.text
                out[mode] = ms(times)
            writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(cfg), "100", "9", str(REPO / "benchmarks")],
                                      env=dict(os.environ, PYTHONPATH=str(REPO / "src")), stdout=subprocess.PIPE)
            during, i = [], 0
            while writer.poll() is None:
                t = time.perf_counter()
                r = c.post(url, json={"query": qs[queries + i % 250], "mode": "semantic", "limit": 10})
                during.append(time.perf_counter() - t)
                i += 1
            assert writer.returncode == 0
            for _ in range(20):  # after the sync: the files caught up once
                t = time.perf_counter()
                c.post(url, json={"query": qs[queries + i % 250], "mode": "semantic", "limit": 10})
                during.append(time.perf_counter() - t)
                i += 1
            out["semantic_during_sync_of_100_documents"] = dict(ms(during), queries=len(during))
        with open(f"/proc/{proc.pid}/status") as f:
            status = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        out["server_peak_rss_mb"] = round(int(status["VmHWM"].split()[0]) / 1024, 1)
        out["server_rss_mb"] = round(int(status["VmRSS"].split()[0]) / 1024, 1)
    finally:
        proc.terminate()
        proc.wait(60)
        log.close()
    from cairn_servers.ctx import retrieval
    from cairn_servers.ctx.service import Service
    from cairn_servers.ctx.store import Match
    from cairn_servers.ctx.vectorfile import files_for
    from cairn_servers.search.embed import embed_queries

    svc = Service.from_config(cfg)
    embedder = svc.embedder()
    files = files_for(svc.store, embedder.identity, embedder.dims)
    out["rows"], out["ann_rows"] = files.size, files.ann_rows
    np_rng = np.random.default_rng(11)
    real = embed_queries(embedder, qs[:100])
    near = clustered(np_rng, cluster_centers(np.random.default_rng(4), embedder.dims), 100)
    for name, vecs in (("real_queries", real), ("stored_kind", near)):
        found = 0
        for q in vecs:
            found += len({c for c, _ in files.search(q, 10)} & {c for c, _ in files.search(q, 10, exact=True)})
        out[f"ann_recall_at_10_{name}"] = round(found / (10 * len(vecs)), 4)
    overlap, slow = 0.0, []
    store = svc.store
    for q in qs[:100]:
        kept = retrieval.keyword_terms(q)
        t = time.perf_counter()
        got = retrieval.keyword(store, q, retrieval.Filters(), 10)
        slow.append(time.perf_counter() - t)
        match = Match(tuple(dict.fromkeys(kept)), "OR").fts5()
        exact = [r for r, in store.sql("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?"
                                       " ORDER BY -bm25(chunks_fts) DESC, rowid LIMIT 10", (match,))]
        overlap += len(set(got) & set(exact)) / max(1, min(10, len(exact)))
    out["keyword_top10_overlap_with_exact_bm25"] = round(overlap / 100, 4)
    out["keyword_in_process"] = ms(slow)
    svc.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--documents", type=int, default=200, help="PDFs and DOCX files for the document sync")
    ap.add_argument("--only", choices=["documents", "transfer", "startup", "search", "scale"], help="run only this part")
    ap.add_argument("--kb", type=Path, help="scale: the knowledge base's folder (built there when empty, then reused)")
    ap.add_argument("--compare", metavar="REF",
                    help="transfer, startup: also measure search under REF's src (a git ref)")
    ap.add_argument("--rounds", type=int, default=20, help="startup: runs of each tree")
    ap.add_argument("--provider", default="local", choices=("local", "minilm", "e5"))
    args = ap.parse_args()
    result: dict[str, object] = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                                             "load_average": [round(x, 2) for x in os.getloadavg()]}}
    if args.only == "scale":
        if args.kb is None:
            raise SystemExit("--only scale needs --kb DIR (a folder outside the repository, kept between runs)")
        args.kb.mkdir(parents=True, exist_ok=True)
        result["scale"] = bench_scale(args.kb, args.chunks, args.queries)
        result["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]  # type: ignore[index]
        print(json.dumps(result, indent=2))
        return
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        if args.only == "startup":
            result["startup"] = bench_startup(base, args.compare, args.rounds)
            result["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]  # type: ignore[index]
            print(json.dumps(result, indent=2))
            return
        if args.only == "transfer":
            t = time.perf_counter()
            cfg = build_kb(base, args.chunks)
            result["build_kb_s"] = round(time.perf_counter() - t, 1)
            result["transfer"] = bench_transfer(base, cfg, args.queries, args.compare)
            result["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]  # type: ignore[index]
            print(json.dumps(result, indent=2))
            return
        if args.provider == "local" and args.only != "search":
            result["documents"] = bench_documents(base, args.documents)
            if args.only:
                print(json.dumps(result, indent=2))
                return
            result["sync"] = bench_sync(base, args.files)
            result["embed_local"] = bench_embed()
        t = time.perf_counter()
        cfg = build_kb(base, args.chunks, args.provider)
        result["build_kb_s"] = round(time.perf_counter() - t, 1)
        result["search"] = bench_search(cfg, args.queries)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
