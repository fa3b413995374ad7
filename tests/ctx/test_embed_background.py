"""Embedding off the critical path: a sync commits its documents (keyword search finds them) before any chunk is
embedded; semantic and hybrid search say how many chunks are not embedded yet, and hybrid ranks those by keyword;
``ctx serve`` embeds pending chunks in the background (over HTTP and over stdio, unless ``[embedding] background =
false``) and stops cleanly; ``ctx embed pending|rebuild`` take
``--limit``, ``--batch-size`` and ``--dry-run``; the minilm provider's parallel calls give the same vectors.

The provider is the real ``local`` one (wordllama); where a test must look in mid-embedding, a gate registered
through the provider registry holds its calls for documents (queries pass)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cairn_servers.ctx import cli
from cairn_servers.ctx.config import load
from cairn_servers.ctx.http import create_app
from cairn_servers.ctx.service import SearchResult, SearchResults, Service
from cairn_servers.search import embed

from .conftest import config_file, serving, write

PAGES = {
    "deploy.md": "# Deploying to Kubernetes\n\nBuild a Docker image of the bot, push it to a registry and "
                 "apply the Deployment manifest with kubectl. Pods restart on failure.\n",
    "billing.md": "# Invoices\n\nEvery month the finance team sends invoices by email; overdue payments are "
                  "reminded after thirty days.\n",
    "garden.md": "# Tomatoes\n\nWater the tomato plants every morning and tie the stems to a stake as they grow.\n",
}
# Added later: its one rare word (zephyrine) is its only link to the query, and its topic is far from it.
NEW = {"zephyr.md": "# Weather station\n\nThe zephyrine sensor logs wind speed at the roof every minute.\n"}


def _unembedded(results: list[SearchResult]) -> int | None:
    """What a search said about the chunks it could not rank by meaning (its results are SearchResults)."""
    assert isinstance(results, SearchResults)
    return results.unembedded


def _config(tmp_path: Path, provider: str = "local", name: str = "ctx.toml", background: bool = True) -> Path:
    return config_file(tmp_path, f"""
[db]
path = "kb.sqlite"
[embedding]
provider = "{provider}"
background = {str(background).lower()}
[connectors.filesystem.docs]
root = "{tmp_path / 'docs'}"
""", name)


class Gate:
    """Holds every document batch of the real ``local`` provider until :attr:`release` is set."""

    def __init__(self) -> None:
        self.inside, self.release = threading.Event(), threading.Event()
        self.calls = 0


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    g = Gate()
    real = embed._PROVIDERS["local"]

    class Gated:
        def __init__(self, settings: embed.EmbeddingSettings) -> None:
            self.inner = real(settings)
            self.identity, self.dims = self.inner.identity, self.inner.dims

        def embed(self, texts: list[str]) -> Any:
            g.calls += 1
            g.inside.set()
            assert g.release.wait(30)
            return self.inner.embed(texts)

        def embed_query(self, texts: list[str]) -> Any:
            return embed.embed_queries(self.inner, texts)

    monkeypatch.setitem(embed._PROVIDERS, "local", Gated)
    try:
        yield g
    finally:
        g.release.set()


@pytest.mark.usefixtures("ctx_backend")  # on SQLite and on PostgreSQL
def test_documents_are_searchable_before_they_are_embedded_and_hybrid_ranks_them_by_keyword(
        tmp_path: Path, gate: Gate) -> None:
    write(tmp_path / "docs", PAGES)
    path = _config(tmp_path)
    worker = Service.from_config(path)
    gate.release.set()
    assert worker.sync("all").embedding.pending == 0  # type: ignore[union-attr]
    gate.inside.clear()
    gate.release.clear()
    reader = Service.from_config(path)  # another connection, as a server beside `ctx sync`
    assert _unembedded(reader.search("kubectl", "semantic")) == 0

    write(tmp_path / "docs", NEW)
    done: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: done.setdefault("summary", worker.sync("all")))
    thread.start()
    try:
        assert gate.inside.wait(30), "the sync never reached its embedding stage"
        # The new document is committed and found by keyword while its chunk waits for its vector.
        keyword = reader.search("zephyrine", "keyword", limit=1)
        assert [r.title for r in keyword] == ["Weather station"] and _unembedded(keyword) is None
        semantic = reader.search("zephyrine wind", "semantic", limit=3)
        assert _unembedded(semantic) == 1 and "Weather station" not in [r.title for r in semantic]
        # Hybrid: the other documents have vectors, this one has only its keyword rank, which stands in for
        # the vector rank it cannot have yet: it comes first (without that, every vector hit outranked it).
        hybrid = reader.search("zephyrine", "hybrid", limit=3, explain=True)
        assert _unembedded(hybrid) == 1
        assert hybrid[0].title == "Weather station" and hybrid[0].score == 1.0
        assert hybrid[0].explain["vector"] is None and hybrid[0].explain["keyword"]["rank"] == 1  # type: ignore[attr-defined]
        assert len(hybrid) == 3  # the embedded documents still come from the vectors
    finally:
        gate.release.set()
        thread.join(60)
    assert done["summary"].embedding.pending == 0
    after = reader.search("zephyrine", "hybrid", limit=1)
    assert _unembedded(after) == 0 and after[0].title == "Weather station"
    reader.close()
    worker.close()


def _post(base: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(f"{base}/tools/search", json=body, timeout=30)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def test_serve_embeds_in_the_background_answers_meanwhile_and_stops_cleanly(tmp_path: Path, gate: Gate) -> None:
    write(tmp_path / "docs", PAGES)
    synced = Service.from_config(_config(tmp_path, "disabled", "off.toml"))
    synced.sync("all")  # keyword-only: every chunk is pending for the local model
    synced.close()
    path = _config(tmp_path)
    app = create_app(load(path))
    with serving(app) as base:
        assert gate.inside.wait(30), "the server did not start embedding"
        embedder = app.state.embedding
        assert embedder.running
        # Held mid-step: requests answer, by keyword and with the count of what is not embedded yet.
        t0 = time.monotonic()
        assert _post(base, {"query": "kubectl", "limit": 1})["results"][0]["title"] == "Deploying to Kubernetes"
        answer = _post(base, {"query": "water the plants", "mode": "hybrid", "limit": 1})
        assert time.monotonic() - t0 < 10
        assert answer["unembedded"] == 3 and answer["results"][0]["title"] == "Tomatoes"
        assert "unembedded" not in _post(base, {"query": "kubectl"})  # keyword mode: not a question
        gate.release.set()
        deadline = time.monotonic() + 30
        while _post(base, {"query": "water the plants", "mode": "semantic", "limit": 1})["unembedded"]:
            assert time.monotonic() < deadline, "the background embedder did not finish"
            time.sleep(0.05)
        assert _post(base, {"query": "water the plants", "mode": "semantic", "limit": 1}
                     )["results"][0]["title"] == "Tomatoes"
        # Idle: it looks at the store's generation only, and embeds what a later sync leaves pending.
        assert embedder.embedded == 3 and embedder.error is None
    assert not embedder.running
    assert not [t for t in threading.enumerate() if t.name == "ctx-embed"]


def test_shutdown_mid_step_stops_after_the_call_under_way_and_commits_its_vectors(
        tmp_path: Path, gate: Gate, monkeypatch: pytest.MonkeyPatch) -> None:
    from cairn_servers.ctx import sync

    monkeypatch.setattr(sync, "BACKGROUND_BATCH", 2)  # two calls for the three pages: the stop comes between
    write(tmp_path / "docs", PAGES)
    off = Service.from_config(_config(tmp_path, "disabled", "off.toml"))
    off.sync("all")
    off.close()
    app = create_app(load(_config(tmp_path)))
    with serving(app):
        assert gate.inside.wait(30)
        threading.Timer(0.3, gate.release.set).start()  # the call under way ends during the shutdown
    embedder = app.state.embedding
    assert not embedder.running and gate.calls == 1  # no second call after the stop
    check = Service.from_config(_config(tmp_path))
    assert check.stats().vectors == 2 and check.stats().pending_embeddings == 1  # the first call's two, committed
    check.close()


def test_background_step_leaves_the_work_to_another_process_embedding(tmp_path: Path) -> None:
    from cairn_servers.ctx.service import background_embedder
    from cairn_servers.ctx.sync import embedding_lock

    write(tmp_path / "docs", PAGES)
    off = Service.from_config(_config(tmp_path, "disabled", "off.toml"))
    off.sync("all")
    config = load(_config(tmp_path))
    bg = background_embedder(config)
    assert bg is not None
    svc = Service(config)
    store = svc.store
    with off.store.source_lock(embedding_lock(bg.embedder.identity)):  # as `ctx embed pending` elsewhere holds it
        assert bg.run_step(store) == 0
    assert svc.stats().pending_embeddings == 3
    assert bg.run_step(store) == 3 and bg.run_step(store) == 0  # then idle: nothing pending
    generation = store.generation()
    assert bg.run_step(store) == 0 and store.generation() == generation
    assert background_embedder(load(_config(tmp_path, "disabled", "off.toml"))) is None
    svc.close()
    off.close()


def _ctx(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_embed_pending_and_rebuild_take_limit_batch_size_and_dry_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "docs", {**PAGES, **NEW})
    off = _config(tmp_path, "disabled", "off.toml")
    assert _ctx(capsys, "sync", "--config", str(off), "--progress", "none")[0] == 0
    on = str(_config(tmp_path))

    code, out, _ = _ctx(capsys, "embed", "pending", "--dry-run", "--limit", "3", "--config", on, "--json")
    report = json.loads(out)
    assert code == 0 and (report["dry_run"], report["would_embed"], report["embedded"], report["pending"]) == \
        (True, 3, 0, 4)

    code, out, _ = _ctx(capsys, "embed", "pending", "--limit", "3", "--batch-size", "2", "--config", on, "--json",
                        "--progress", "none")
    report = json.loads(out)
    assert code == 0 and (report["embedded"], report["pending"], report["dry_run"]) == (3, 1, False)

    # Text output of a search says what semantic ranking cannot see yet; JSON keeps its shape, with a note.
    code, out, _ = _ctx(capsys, "search", "tomato", "--mode", "hybrid", "--config", on, "--text")
    assert code == 0 and out.rstrip().endswith(
        "1 chunk is not embedded yet: semantic ranking does not see it (hybrid ranks it by keyword). "
        "`ctx embed pending` embeds them; `ctx serve` does it in the background.")
    code, out, err = _ctx(capsys, "search", "tomato", "--mode", "semantic", "--config", on, "--json")
    assert code == 0 and isinstance(json.loads(out), list) and "ctx: note: 1 chunk is not embedded yet" in err

    code, out, _ = _ctx(capsys, "embed", "rebuild", "--dry-run", "--config", on, "--json")
    report = json.loads(out)
    assert code == 0 and (report["would_embed"], report["pending"]) == (4, 4)
    check = Service.from_config(on)
    assert check.stats().vectors == 3  # a dry run drops nothing

    code, out, _ = _ctx(capsys, "embed", "rebuild", "--limit", "1", "--config", on, "--json", "--progress", "none")
    assert code == 0 and (json.loads(out)["embedded"], json.loads(out)["pending"]) == (1, 3)
    assert check.stats().vectors == 1
    code, out, _ = _ctx(capsys, "embed", "pending", "--config", on, "--json", "--progress", "none")
    assert code == 0 and (json.loads(out)["embedded"], json.loads(out)["pending"]) == (3, 0)
    check.close()

    for flag, value, message in (
            ("--limit", "0", "--limit must be a whole number of chunks from 1 to 1000000000000, not '0'."),
            ("--limit", "many", "--limit must be a whole number of chunks from 1 to 1000000000000, not 'many'."),
            ("--batch-size", "-3", "--batch-size must be a whole number of texts from 1 to 100000, not '-3'.")):
        code, out, err = _ctx(capsys, "embed", "pending", flag, value, "--config", on)
        assert code == 2 and out == "" and err.strip().endswith(message), err


def test_minilm_parallel_calls_give_the_vectors_of_one_call_at_a_time() -> None:
    import numpy as np

    texts = [("word " * n).strip() + f" text {n}" for n in (3, 40, 7, 90, 15, 200, 1, 60)]
    settings = embed.EmbeddingSettings(provider="minilm")
    one = embed.create(settings)
    many = embed.create(settings)
    one.workers, many.workers = 1, 4  # type: ignore[attr-defined]
    a, b = one.embed(texts), many.embed(texts)
    assert a.shape == (8, 384) and np.allclose(a, b, atol=1e-6)


def test_a_failing_provider_is_logged_once_retried_and_stopped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    from cairn_servers.core.errors import NetworkError
    from cairn_servers.ctx.sync import BackgroundEmbedder

    write(tmp_path / "docs", PAGES)
    off = Service.from_config(_config(tmp_path, "disabled", "off.toml"))
    off.sync("all")
    calls: list[int] = []

    class Down:
        identity, dims = "down:m:4", 4

        def embed(self, texts: list[str]) -> Any:
            calls.append(len(texts))
            raise NetworkError("The embedding endpoint http://127.0.0.1:9/v1 could not be reached: refused.")

    config = load(_config(tmp_path))
    bg = BackgroundEmbedder(lambda: Service(config).store, Down(), idle=0.01, backoff=0.01)
    bg.start()
    deadline = time.monotonic() + 10
    while len(calls) < 3:  # retried, after a wait that doubles
        assert time.monotonic() < deadline and bg.running
        time.sleep(0.01)
    bg.stop()
    assert not bg.running
    assert bg.error == "The embedding endpoint http://127.0.0.1:9/v1 could not be reached: refused."
    err = capfd.readouterr().err
    assert err.count("background embedding stopped for") == 1 and "could not be reached" in err
    assert off.stats().vectors == 0
    off.close()


def _pending_kb(tmp_path: Path) -> None:
    """The three pages synced with embeddings off: every chunk is pending for the local model."""
    write(tmp_path / "docs", PAGES)
    off = Service.from_config(_config(tmp_path, "disabled", "off.toml"))
    off.sync("all")
    assert off.stats().pending_embeddings == 0 and off.stats().chunks == 3
    off.close()


def _vectors(path: Path) -> tuple[int, int]:
    """(vectors, pending embeddings) of the knowledge base of ``path``, the local model's."""
    check = Service.from_config(path)
    try:
        stats = check.stats()
        return stats.vectors, stats.pending_embeddings
    finally:
        check.close()


def _stdio_searches(path: Path, out: Path, until_embedded: bool, seconds: float) -> list[dict[str, Any]]:
    """Semantic searches through the official MCP SDK client over ``ctx serve mcp --stdio`` (its stdout also
    copied to ``out`` by ``tee``), every 0.1 s: until one answers ``unembedded: 0`` (``until_embedded``, at
    most ``seconds``), else for ``seconds``. Returns their structured answers."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    repo = Path(__file__).resolve().parents[2]
    params = StdioServerParameters(
        command="sh", args=["-c", '"$0" -m cairn_servers.ctx.cli serve mcp --stdio --config "$1" | tee "$2"',
                            sys.executable, str(path), str(out)],
        env=dict(os.environ, PYTHONPATH=str(repo / "src")))
    answers: list[dict[str, Any]] = []

    async def run() -> None:
        async with Client(params, cache=None) as client:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                res = await client.call_tool("search", {"query": "water the plants", "mode": "semantic",
                                                        "limit": 1})
                assert not res.is_error and res.structured_content is not None
                answers.append(res.structured_content)
                if until_embedded and res.structured_content["unembedded"] == 0:
                    return
                await asyncio.sleep(0.1)

    asyncio.run(asyncio.wait_for(run(), seconds + 60))
    return answers


def test_stdio_server_embeds_in_the_background_and_stdout_stays_json_rpc(tmp_path: Path) -> None:
    _pending_kb(tmp_path)
    path = _config(tmp_path)
    assert _vectors(path) == (0, 3)
    out = tmp_path / "stdout.jsonl"
    answers = _stdio_searches(path, out, until_embedded=True, seconds=60)
    assert answers[-1]["unembedded"] == 0, answers[-1]
    assert answers[-1]["results"][0]["title"] == "Tomatoes"  # found by meaning: no word in common
    assert all(a["unembedded"] in (0, 1, 2, 3) for a in answers)
    assert _vectors(path) == (3, 0)
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines and all(json.loads(line)["jsonrpc"] == "2.0" for line in lines)  # nothing else on stdout


def test_background_false_leaves_the_chunks_pending_on_both_servers(tmp_path: Path) -> None:
    _pending_kb(tmp_path)
    path = _config(tmp_path, background=False)
    answers = _stdio_searches(path, tmp_path / "stdout.jsonl", until_embedded=False, seconds=3)
    assert len(answers) >= 3 and all(a["unembedded"] == 3 for a in answers)
    assert _vectors(path) == (0, 3)

    app = create_app(load(path))
    with serving(app) as base:
        assert app.state.embedding is None and app.state.toolbox.embedding is None
        for _ in range(10):
            assert _post(base, {"query": "water the plants", "mode": "semantic", "limit": 1})["unembedded"] == 3
            time.sleep(0.1)
        assert not [t for t in threading.enumerate() if t.name.startswith("ctx-embed")]
    assert _vectors(path) == (0, 3)
    # The same configuration with background = true embeds them (the HTTP server; stdio: the test above).
    app = create_app(load(_config(tmp_path)))
    with serving(app) as base:
        deadline = time.monotonic() + 60
        while _post(base, {"query": "water the plants", "mode": "semantic", "limit": 1})["unembedded"]:
            assert time.monotonic() < deadline, "the background embedder did not finish"
            time.sleep(0.05)
    assert _vectors(_config(tmp_path)) == (3, 0)
