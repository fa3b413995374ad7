"""``ctx search --explain`` (issue 17, item 4): each result says how it was scored, and the numbers are real.

The BM25 scores are recomputed here with SQLite's own ``bm25()`` (on PostgreSQL: its ``ts_rank``, the
keyword score that store reports in the ``bm25`` field) and the cosines with numpy from the stored
vectors and the embedder; the fused score is recomputed from the reported ranks with the
configured RRF k and alpha. The surfaces (CLI, ``ctx tool test``, MCP stdio and HTTP, ``POST
/tools/search``) are compared in tests/ctx/test_parity.py.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cairn_servers.ctx.service import ExplainedResult, SearchResult, Service
from cairn_servers.search.fusion import RRF_K

from .conftest import config_file, write

pytestmark = pytest.mark.usefixtures("ctx_backend")  # every test on SQLite and on PostgreSQL ($CTX_DATABASE_URL)

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _explained(results: list[SearchResult]) -> list[ExplainedResult]:
    """``search(..., explain=True)``'s results, each checked to carry its ``explain``."""
    assert all(isinstance(r, ExplainedResult) for r in results)
    return [r for r in results if isinstance(r, ExplainedResult)]


def make(tmp_path: Path, embedding: str = "", retrieval: str = "") -> Service:
    return Service.from_config(config_file(tmp_path, f"""
[db]
path = "kb.sqlite"
[embedding]
{embedding}
[retrieval]
{retrieval}
[connectors.filesystem.notes]
root = "notes"
[connectors.filesystem.wiki]
root = "wiki"
"""))


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    write(tmp_path / "notes", {f"n{i:02d}.md": f"# Note {i}\n\nThe kiwi harvest report number {i}, "
                                               + "with a long tail of orchard words " * (i % 7) + "\n"
                               for i in range(40)})
    write(tmp_path / "wiki", {
        "kiwi.md": "# Kiwi\n\nA kiwi is a flightless bird from New Zealand.\n",
        "penguin.md": "# Penguin\n\nPenguins are flightless seabirds that swim in cold oceans.\n",
        "ostrich.md": "# Ostrich\n\nThe ostrich is the largest flightless bird; it runs fast.\n",
        "moa.md": "# Moa\n\nThe moa was a giant bird of New Zealand that could not fly.\n",
        "long.md": "# Long\n\n" + "\n\n".join(f"## Part {i}\n\n" + "filler text " * 150 + ("kiwi" if i == 3 else "")
                                            for i in range(6)),
    })
    return tmp_path


def _plain(r: SearchResult) -> dict[str, Any]:
    """A result without its explanation."""
    return {k: v for k, v in vars(r).items() if k != "explain"}


def _doc_of(svc: Service) -> dict[int, str]:
    return {int(c): d for c, d in svc.store.sql("SELECT c.rowid, d.id FROM chunks c JOIN documents d ON d.rowid = c.doc")}


def _ranked(scores: dict[int, float]) -> list[int]:
    """Chunk rowids best first, ties by rowid as text (the order RRF ranks a list in)."""
    return [cid for cid, _ in sorted(scores.items(), key=lambda kv: (-kv[1], str(kv[0])))]


def _best_per_doc(scores: dict[int, float], doc_of: dict[int, str]) -> dict[str, int]:
    best: dict[str, int] = {}
    for cid, s in scores.items():
        d = doc_of[cid]
        if d not in best or s > scores[best[d]] or s == scores[best[d]] and cid < best[d]:
            best[d] = cid
    return best


def test_keyword_explain_reports_the_stores_bm25_and_its_order(corpus: Path) -> None:
    svc = make(corpus)
    svc.sync("all")
    plain = svc.search("orchard", limit=50)
    explained = _explained(svc.search("orchard", limit=50, explain=True))
    assert all(type(r) is SearchResult for r in plain) and all(isinstance(r, ExplainedResult) for r in explained)
    assert [_plain(r) for r in explained] == [vars(r) for r in plain]  # explain changes nothing else

    # BM25 as SQLite computes it for the same match, outside ctx's code; on PostgreSQL its ts_rank of the
    # term's phrase query (one term: its IDF weight is 1), the score that store reports as `bm25`.
    if svc.config.db.url:
        bm25 = {int(r): float(s) for r, s in svc.store.sql(
            "SELECT rowid, ts_rank(tsv, q, 1) FROM chunks, phraseto_tsquery('cairn', 'orchard') q WHERE tsv @@ q")}
    else:
        with sqlite3.connect(corpus / "kb.sqlite") as con:
            bm25 = {int(r): -float(s) for r, s in con.execute(
                "SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH '\"orchard\"'")}
    rel = 1e-6 if svc.config.db.url else 1e-12  # PostgreSQL's ts_rank is a float4 (real)
    doc_of = _doc_of(svc)
    order = _ranked(bm25)
    best = _best_per_doc(bm25, doc_of)
    assert len(explained) == len(best) > 5
    top = max(bm25.values())
    for r in explained:
        e = r.explain
        cid = best[r.id]
        assert e["keyword"] == {"rank": order.index(cid) + 1, "bm25": pytest.approx(bm25[cid], rel=rel)}
        assert (e["vector"], e["fused"], e["fusion"]) == (None, None, None)
        if svc.config.db.url:
            assert r.score == pytest.approx(bm25[cid] / top, abs=1e-6)  # keyword mode: relative to the best hit
        else:
            assert r.score == round(bm25[cid] / top, 6)
    # The keyword ranks follow the BM25 scores: higher score, better (smaller) rank.
    pairs = sorted((r.explain["keyword"]["rank"], r.explain["keyword"]["bm25"]) for r in explained)
    assert [b for _, b in pairs] == sorted((b for _, b in pairs), reverse=True)
    assert pairs[0][0] == 1 and len({rk for rk, _ in pairs}) == len(pairs)


def _cosines(svc: Service, query: str) -> dict[int, float]:
    """Chunk rowid -> cosine with the query, from the stored vectors (the semantic list's scores)."""
    embedder = svc.embedder()
    q = embedder.embed([query])[0].astype(np.float64)
    return {cid: max(0.0, min(1.0, float(np.frombuffer(blob, np.float32).astype(np.float64) @ q)))
            for cid, _, _, blob in svc.store.vector_rows(embedder.identity)}


def test_semantic_explain_reports_the_cosine_of_the_stored_vectors(corpus: Path) -> None:
    svc = make(corpus, 'provider = "local"')
    svc.sync("all")
    query = "a bird that cannot fly"
    explained = _explained(svc.search(query, "semantic", limit=8, explain=True))
    assert [_plain(r) for r in explained] == [vars(r) for r in svc.search(query, "semantic", limit=8)]
    cos = _cosines(svc, query)
    order = _ranked(cos)
    best = _best_per_doc(cos, _doc_of(svc))
    for r in explained:
        cid = best[r.id]
        assert r.explain["vector"] == {"rank": order.index(cid) + 1, "cosine": pytest.approx(cos[cid], abs=2e-6)}
        assert r.score == pytest.approx(cos[cid], abs=2e-6)
        assert (r.explain["keyword"], r.explain["fused"], r.explain["fusion"]) == (None, None, None)
    assert explained[0].source_id in ("kiwi.md", "moa.md", "ostrich.md", "penguin.md")


def test_hybrid_explain_fused_score_is_rrf_of_the_reported_ranks(corpus: Path) -> None:
    kinds: dict[str, int] = defaultdict(int)
    for alpha in (0.4, 0.6):  # keyword-only results rank higher with the one, vector-only with the other
        svc = make(corpus, 'provider = "local"',
                   f"hybrid_alpha = {alpha}\ncandidate_k_keyword = 12\ncandidate_k_vector = 12\nfusion = \"rrf\"")
        svc.sync("all")
        explained = _explained(svc.search("kiwi flightless", "hybrid", limit=12, explain=True))
        assert [_plain(r) for r in explained] == [vars(r) for r in svc.search("kiwi flightless", "hybrid", limit=12)]
        w_kw, w_vec = 2 * (1 - alpha), 2 * alpha
        for r in explained:
            e = r.explain
            assert e["fusion"] == {"method": "rrf", "alpha": alpha, "k": RRF_K}
            kw, vec = e["keyword"], e["vector"]
            assert kw or vec
            kinds["both" if kw and vec else "keyword only" if kw else "vector only"] += 1
            expected = (w_kw / (RRF_K + kw["rank"]) if kw else 0.0) + (w_vec / (RRF_K + vec["rank"]) if vec else 0.0)
            expected /= (w_kw + w_vec) / (RRF_K + 1)
            assert e["fused"] == pytest.approx(expected, rel=1e-12)
            assert r.score == round(e["fused"], 6)
        assert [r.score for r in explained] == sorted((r.score for r in explained), reverse=True)
        svc.close()
    assert set(kinds) == {"both", "keyword only", "vector only"}, dict(kinds)  # absent parts are null

    # The reported ranks are the candidate lists' own: keyword ranks by SQLite's BM25 order.
    kw_ranked = sorted((r.explain["keyword"]["rank"], r.explain["keyword"]["bm25"]) for r in explained
                       if r.explain["keyword"])
    assert [b for _, b in kw_ranked] == sorted((b for _, b in kw_ranked), reverse=True)
    vec_ranked = sorted((r.explain["vector"]["rank"], r.explain["vector"]["cosine"]) for r in explained
                        if r.explain["vector"])
    assert [c for _, c in vec_ranked] == sorted((c for _, c in vec_ranked), reverse=True)


def test_hybrid_explain_with_minmax_fusion(corpus: Path) -> None:
    svc = make(corpus, 'provider = "local"', 'fusion = "minmax"\nhybrid_alpha = 0.5')
    svc.sync("all")
    explained = _explained(svc.search("kiwi flightless", "hybrid", limit=5, explain=True))
    for r in explained:
        assert r.explain["fusion"] == {"method": "minmax", "alpha": 0.5}
        assert r.score == round(r.explain["fused"], 6)


def test_cli_explain_text_and_json(corpus: Path) -> None:
    svc = make(corpus)
    svc.sync("all")
    argv = [sys.executable, "-m", "cairn_servers.ctx.cli", "search", "largest flightless", "--explain", "--limit", "2",
            "--config", str(corpus / "ctx.toml")]
    env = {"PYTHONPATH": SRC, "CTX_OUTPUT_FORMAT": "", "PATH": "/usr/bin:/bin",
           **{k: v for k, v in os.environ.items() if k == "CTX_DATABASE_URL"}}
    text = subprocess.run([*argv, "--text"], capture_output=True, text=True, env=env, check=True).stdout
    assert re.search(r"^   why: keyword #1 bm25 [0-9.]+$", text, re.M) and "vector" not in text
    data = json.loads(subprocess.run([*argv, "--json"], capture_output=True, text=True, env=env, check=True).stdout)
    assert data[0]["explain"]["keyword"]["rank"] == 1 and data[0]["explain"]["vector"] is None
    plain = json.loads(subprocess.run([*argv[:5], *argv[6:], "--json"], capture_output=True, text=True, env=env,
                                      check=True).stdout)
    assert "explain" not in plain[0] and [{k: v for k, v in d.items() if k != "explain"} for d in data] == plain
