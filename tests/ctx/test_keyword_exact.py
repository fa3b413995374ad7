"""Keyword search over very common terms is exact BM25: the head index (cairn_servers/ctx/keyword_index.py) against
FTS5's own ``bm25()`` over every match, on a real knowledge base synced from Markdown files.

The ranking budget is set low (a few dozen chunks) and the head index takes tokens from a few dozen chunks on, so
a small knowledge base has the shape of a large one: most queries hold terms far over the budget, the answer
must still be FTS5's ``ORDER BY -bm25(chunks_fts) DESC, rowid`` top 10, scores included.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cairn_servers.ctx import keyword_index, retrieval
from cairn_servers.ctx.retrieval import Filters
from cairn_servers.ctx.service import Service
from cairn_servers.ctx.store import Match, SqliteStore

from .conftest import config_file, serving, write

REPO = Path(__file__).resolve().parents[2]
WORDS = [f"w{i}" for i in range(300)] + ["kiwi", "apple", "banana", "cherry"]
WEIGHTS = [1 / (i + 1) for i in range(len(WORDS))]  # Zipf: w0 in most chunks, the tail in a few
HEAD_MIN_DF = 30
BUDGET = 40


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(WORDS, WEIGHTS, k=n))


def _files(rng: random.Random, names: range, tag: str = "") -> dict[str, str]:
    out = {}
    for i in names:
        parts = [f"# Note {i} {tag}\n"]
        for p in range(rng.randint(2, 5)):  # sections: several chunks per document
            parts.append(f"## Part {p} {_text(rng, 2)}\n\n{_text(rng, rng.randint(8, 60))}\n")
        out[f"n{i:03d}.md"] = "\n".join(parts)
    return out


def _service(root: Path) -> Service:
    return Service.from_config(config_file(root, """
[db]
path = "kb.sqlite"
[embedding]
provider = "disabled"
[connectors.filesystem.notes]
root = "notes"
[connectors.filesystem.wiki]
root = "wiki"
"""))


@pytest.fixture(params=["blocks", "documents"])
def kb(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Service]:
    """The knowledge base, its head index in blocks of 8 rowids (many blocks, as at a million chunks), ranked
    block by block only ("blocks") or chunk by chunk once the essential terms are known ("documents")."""
    monkeypatch.setattr(retrieval, "RANK_BUDGET", BUDGET)
    monkeypatch.setattr(keyword_index, "HEAD_MIN_DF", HEAD_MIN_DF)
    monkeypatch.setattr(keyword_index, "BLOCK", 8)
    monkeypatch.setattr(keyword_index, "CHUNK_ROWS", 16)
    monkeypatch.setattr(keyword_index, "BY_DOCUMENTS_MAX", 0 if request.param == "blocks" else 10**9)
    rng = random.Random(7)
    write(tmp_path / "notes", _files(rng, range(0, 150)))
    write(tmp_path / "wiki", _files(rng, range(150, 220)))
    for i, f in enumerate(sorted((tmp_path / "notes").iterdir())):
        os.utime(f, (1_600_000_000 + 86_400 * i, 1_600_000_000 + 86_400 * i))
    svc = _service(tmp_path)
    svc.sync("all")
    keyword_index.build(svc.store.path, head_min_df=HEAD_MIN_DF)  # type: ignore[attr-defined]
    yield svc
    keyword_index.forget(svc.store)  # type: ignore[arg-type]
    svc.close()


def _reference(store: SqliteStore, query: str, filters: Filters = Filters(), k: int = 10) -> list[tuple[int, float]]:
    """FTS5's own ranking of every match of the OR of the query's terms."""
    match = Match(tuple(dict.fromkeys(retrieval.keyword_terms(query))), "OR").fts5()
    parts, params = store.dialect.filters(filters.sources, filters.since, filters.until)
    where = "".join(" AND " + p for p in parts)
    return [(int(r), float(s)) for r, s in store.sql(
        "SELECT f.rowid, -bm25(chunks_fts) AS s FROM chunks_fts f JOIN chunks c ON c.rowid = f.rowid"
        f" JOIN documents d ON d.rowid = c.doc WHERE chunks_fts MATCH ?{where} ORDER BY s DESC, f.rowid LIMIT ?",
        (match, *params, k))]


def _queries(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    qs = [" ".join(rng.choices(WORDS, WEIGHTS, k=rng.randint(1, 4))) for _ in range(n)]
    return qs + ["w0", "w0 w1", "w0 w1 w2 w3", "the w0 kiwi", '"w0 w1" w2', "w299 w0", "nothingmatches w0"]


def _assert_exact(store: SqliteStore, queries: list[str], filters: Filters = Filters()) -> int:
    """Every query's answer is the reference's (rowids in order, scores to the last bits); how many needed the head
    index (their terms together over the budget)."""
    over = 0
    for q in queries:
        got = retrieval.keyword(store, q, filters, 10)
        want = _reference(store, q, filters)
        assert [r for r, _ in want] == list(got), q
        for r, s in want:
            assert got[r] == pytest.approx(s, rel=1e-12, abs=1e-15), q
        counts = [store.fts_count(Match((t,)), BUDGET) for t in dict.fromkeys(retrieval.keyword_terms(q))]
        over += sum(counts) > BUDGET
    return over


def test_common_terms_are_ranked_exactly(kb: Service) -> None:
    store = kb.store
    assert isinstance(store, SqliteStore)
    with store.snapshot():
        hs = keyword_index.state(store)
    assert hs is not None and "w0" in hs.base.terms and "kiwi" not in hs.base.terms  # head and tail both queried
    (n,) = store.sql("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'w0'")[0]
    assert n > 5 * BUDGET  # the commonest term is far over the budget
    assert store.fts_exact(["w0", "w1"], 10) is not None  # answered by the head index, not the budgeted plan
    before = dict(keyword_index.STATS)
    over = _assert_exact(store, _queries(1, 150))
    assert over > 100
    assert keyword_index.STATS["blocks"] > before["blocks"]  # both ways were taken
    assert keyword_index.STATS["documents"] > before["documents"] or keyword_index.BY_DOCUMENTS_MAX == 0


def test_filters_are_exact_too(kb: Service) -> None:
    store = kb.store
    assert isinstance(store, SqliteStore)
    qs = _queries(2, 60)
    _assert_exact(store, qs, Filters(sources=("filesystem:wiki",)))
    _assert_exact(store, qs, Filters(since=1_600_000_000 + 86_400 * 100))
    _assert_exact(store, qs, Filters(sources=("filesystem:notes",), until=1_600_000_000 + 86_400 * 20))


def test_updates_and_deletes_are_caught_up_then_rebuilt(kb: Service, tmp_path: Path) -> None:
    store = kb.store
    assert isinstance(store, SqliteStore)
    qs = _queries(3, 80)
    _assert_exact(store, qs)  # the process's view is loaded before the changes
    rng = random.Random(9)
    write(tmp_path / "notes", _files(rng, range(0, 40), tag="again"))  # updated: old chunks deleted, new ones
    write(tmp_path / "wiki", _files(rng, range(220, 260)))  # new documents
    for i in range(150, 170):
        (tmp_path / "wiki" / f"n{i:03d}.md").unlink()  # deleted documents
    kb.sync("all")
    (pending,) = store.sql("SELECT count(*) FROM keyword_log")[0]
    assert pending > 100
    with store.snapshot():
        hs = keyword_index.state(store)
    assert hs is not None and len(hs.delta.new) > 0 and len(hs.delta.gone) > 0  # the files are older: the log counts
    _assert_exact(store, qs)
    _assert_exact(store, qs, Filters(sources=("filesystem:wiki",)))
    meta = keyword_index.build(store.path, head_min_df=HEAD_MIN_DF)
    assert store.sql("SELECT count(*) FROM keyword_log") == [(0,)]  # the build trimmed what it holds
    assert store.sql("SELECT value FROM meta WHERE key = 'keyword_index'") == [(meta["id"],)]
    with store.snapshot():
        hs = keyword_index.state(store)
    assert hs is not None and hs.base.id == meta["id"] and hs.delta.size == 0
    _assert_exact(store, qs)
    assert len(list(keyword_index.folder(store.path).glob("head-*.bin"))) == 1  # the old data file removed


def test_files_not_recorded_or_missing_are_not_used(kb: Service) -> None:
    store = kb.store
    assert isinstance(store, SqliteStore)
    where = keyword_index.folder(store.path)
    qs = _queries(4, 20)
    # A build killed after renaming its description but before recording it: the database names another id.
    store.sql("UPDATE meta SET value = 'other' WHERE key = 'keyword_index'")
    keyword_index.forget(store)
    with store.snapshot():
        assert keyword_index.state(store, build_min_chunks=10**9) is None
    assert store.fts_exact(["w0"], 10) is None  # the budgeted plan answers meanwhile
    for _ in range(200):  # ... and the process rebuilt the files in the background
        time.sleep(0.05)
        if store.sql("SELECT value FROM meta WHERE key = 'keyword_index'") != [("other",)]:
            break
    keyword_index.forget(store)
    _assert_exact(store, qs)
    # The description's data file gone: not used (and rebuilt).
    meta = json.loads((where / "head.json").read_text())
    (where / meta["data"]).unlink()
    keyword_index.forget(store)
    with store.snapshot():
        assert keyword_index.state(store) is None


def test_a_build_killed_at_any_moment_leaves_a_usable_index(kb: Service, tmp_path: Path) -> None:
    store = kb.store
    assert isinstance(store, SqliteStore)
    qs = _queries(5, 30)
    rng = random.Random(11)
    write(tmp_path / "wiki", _files(rng, range(300, 340)))
    kb.sync("all")
    code = (f"import sys; sys.path.insert(0, {str(REPO / 'src')!r});"
            "from pathlib import Path; from cairn_servers.ctx import keyword_index as k;"
            f"print('go', flush=True); k.build(Path({str(store.path)!r}), head_min_df={HEAD_MIN_DF})")
    for delay in (0.0, 0.05, 0.1, 0.2, 0.4):
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline() == b"go\n"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        keyword_index.forget(store)
        with store.snapshot():
            hs = keyword_index.state(store, build_min_chunks=10**9)
        assert hs is None or hs.base.id == store.sql("SELECT value FROM meta WHERE key = 'keyword_index'")[0][0]
        _assert_exact(store, qs)  # whichever answers: the files in place, or the plan while they are rebuilt
    # A reopened store, with leftovers of the killed builds beside the files: still exact.
    keyword_index.forget(store)
    again = SqliteStore(store.path)
    try:
        _assert_exact(again, qs)
    finally:
        again.close()


def test_http_and_mcp_answer_the_same_exact_ranking(kb: Service, tmp_path: Path) -> None:
    from mcp import Client

    from cairn_servers.ctx import config
    from cairn_servers.ctx.http import create_app

    queries = ["w0 w1", "w0 kiwi", "w2 w3 w5", "w1 w4"]
    expected = {}
    for q in queries:
        results = kb.search(q, mode="keyword", limit=5)
        expected[q] = [(r.id, r.score) for r in results]
        assert results
    with serving(create_app(config.load(tmp_path / "ctx.toml"))) as base:
        http = {q: httpx.post(f"{base}/tools/search", json={"query": q, "mode": "keyword", "limit": 5},
                              timeout=30).json()["results"] for q in queries}

        async def over_mcp() -> dict[str, list[dict[str, object]]]:
            out = {}
            async with Client(f"{base}/mcp", cache=None) as client:
                for q in queries:
                    res = await client.call_tool("search", {"query": q, "mode": "keyword", "limit": 5})
                    assert res.structured_content is not None
                    out[q] = res.structured_content["results"]
            return out

        mcp = asyncio.run(asyncio.wait_for(over_mcp(), 60))
    for q in queries:
        assert http[q] == mcp[q], q
        assert [(r["id"], r["score"]) for r in http[q]] == expected[q], q


def test_nothing_is_logged_before_a_first_build(tmp_path: Path) -> None:
    write(tmp_path / "notes", _files(random.Random(3), range(0, 20)))
    svc = _service(tmp_path)
    try:
        svc.sync("all")
        write(tmp_path / "notes", _files(random.Random(4), range(0, 10), tag="again"))
        svc.sync("all")
        assert svc.store.sql("SELECT count(*) FROM keyword_log") == [(0,)]  # a small base: no head index, no log
        assert not keyword_index.folder(svc.store.path).exists()  # type: ignore[attr-defined]
        assert retrieval.keyword(svc.store, "w0 w1", Filters(), 10)  # FTS5 alone answers
    finally:
        svc.close()
