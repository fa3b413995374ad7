from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from cairn_servers.core.errors import InvalidInput, NotFound
from cairn_servers.ctx.service import Service

from .conftest import config_file, write

pytestmark = pytest.mark.usefixtures("ctx_backend")  # every test on SQLite and on PostgreSQL


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
    write(tmp_path / "notes", {f"n{i:02d}.md": f"# Note {i}\n\nThe kiwi harvest report number {i}.\n" for i in range(30)})
    write(tmp_path / "wiki", {
        "kiwi.md": "# Kiwi\n\nA kiwi is a flightless bird.\n",
        "long.md": "# Long\n\n" + "\n\n".join(f"## Part {i}\n\n" + "filler text " * 150 + ("kiwi" if i == 3 else "")
                                            for i in range(6)),
        "hyphen.md": "# Hooks\n\nuse-effect cleanup runs before the next effect.\n",
        "old.md": "# Old\n\nkiwi from long ago\n",
    })
    old = 946684800  # 2000-01-01
    os.utime(tmp_path / "wiki" / "old.md", (old, old))
    return tmp_path


def test_keyword_results_shape_scores_and_grouping(corpus: Path) -> None:
    svc = make(corpus)
    svc.sync("all")
    results = svc.search("kiwi", limit=50)
    ids = [r.id for r in results]
    assert len(ids) == len(set(ids)) == 33  # one result per document, every chunk grouped
    assert results[0].score == 1.0
    assert all(0.0 <= r.score <= 1.0 for r in results)
    assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)
    long = next(r for r in results if r.source_id == "long.md")
    assert "kiwi" in long.snippet  # the best chunk's snippet, not the document start
    assert set(vars(results[0])) == {"id", "score", "title", "source", "source_id", "updated_at", "snippet", "source_url",
                                       "location"}
    assert svc.search("kiwi", limit=50) == results  # deterministic


def test_filters_apply_before_the_candidate_cap(corpus: Path) -> None:
    svc = make(corpus, retrieval="candidate_k_keyword = 5\nfinal_limit = 5")
    svc.sync("all")
    # 30 notes outrank the wiki for "kiwi harvest"; the wiki filter must still fill its results.
    wiki = svc.search("kiwi", source="wiki")
    assert {r.source for r in wiki} == {"filesystem:wiki"} and len(wiki) == 3
    recent = svc.search("kiwi", source="wiki", since="2010-01-01")
    assert {r.source_id for r in recent} == {"kiwi.md", "long.md"}
    old = svc.search("kiwi", until="2001-01-01")
    assert [r.source_id for r in old] == ["old.md"]
    assert old[0].updated_at == "2000-01-01T00:00:00Z"


def test_hostile_queries_are_safe(corpus: Path) -> None:
    svc = make(corpus)
    svc.sync("all")
    assert svc.search("use-effect")[0].source_id == "hyphen.md"
    for q in ['"unbalanced', "AND OR NOT", "a:b", "(*)", "NEAR(", "-", "kiwi*"]:
        svc.search(q)  # never an FTS5 syntax error
    with pytest.raises(InvalidInput, match="The query is empty"):
        svc.search("   ")
    with pytest.raises(InvalidInput, match="Unknown search mode 'fuzzy'"):
        svc.search("kiwi", "fuzzy")
    with pytest.raises(InvalidInput, match="limit must be an integer from 1 to 1000"):
        svc.search("kiwi", limit=0)
    with pytest.raises(NotFound, match="Unknown source 'nope'. Known sources: filesystem:notes, filesystem:wiki"):
        svc.search("kiwi", source="nope")
    with pytest.raises(InvalidInput, match="since 'yesterday' is not a date"):
        svc.search("kiwi", since="yesterday")


def test_accents_are_folded_on_both_sides(tmp_path: Path) -> None:
    """SQLite's FTS5 folds accents (unicode61 remove_diacritics 2); PostgreSQL must find the same."""
    write(tmp_path / "notes", {
        "cafe.md": "# Café crème\n\nThe café in Zürich serves crème brûlée.\n",
        "plain.md": "# Plain\n\nA naive resume of the cafe scene.\n",
        "other.md": "# Other\n\nNothing to see here.\n",
    })
    write(tmp_path / "wiki", {})
    svc = make(tmp_path)
    svc.sync("all")

    def found(query: str) -> set[str]:
        return {r.source_id for r in svc.search(query, limit=10)}

    assert found("cafe") == found("café") == found("CAFÉ") == {"cafe.md", "plain.md"}
    assert found("cafe\u0301") == {"cafe.md", "plain.md"}  # a decomposed é (e + combining acute)
    assert found("zurich") == found("Zürich") == {"cafe.md"}
    assert found("brulee") == found('"creme brulee"') == {"cafe.md"}
    assert found("naïve") == found("résumé") == {"plain.md"}
    assert found("nothing") == {"other.md"}


def test_semantic_and_hybrid_need_embeddings(corpus: Path) -> None:
    svc = make(corpus)
    svc.sync("all")
    for mode in ("semantic", "hybrid"):
        with pytest.raises(InvalidInput) as info:
            svc.search("kiwi", mode)
        assert info.value.code == "embeddings_disabled"


def test_semantic_and_hybrid_with_local_embeddings(corpus: Path) -> None:
    svc = make(corpus, 'provider = "local"')
    summary = svc.sync("all")
    assert summary.embedding is not None and summary.embedding.pending == 0 and summary.embedding.error is None
    sem = svc.search("a bird that cannot fly", "semantic", source="wiki")
    assert sem[0].source_id == "kiwi.md"
    assert all(0.0 <= r.score <= 1.0 for r in sem)
    hyb = svc.search("flightless bird", "hybrid", limit=3)
    assert hyb[0].source_id == "kiwi.md"
    filtered = svc.search("kiwi bird", "semantic", since="2010-01-01", source="wiki", limit=10)
    assert "old.md" not in {r.source_id for r in filtered}
    # Re-sync: unchanged chunks are not re-embedded; a changed file embeds only its new chunks.
    assert svc.sync("all").embedding.embedded == 0  # type: ignore[union-attr]
    write(corpus / "wiki", {"kiwi.md": "# Kiwi\n\nA kiwi is a small flightless bird from New Zealand.\n"})
    assert svc.sync("all").embedding.embedded == 1  # type: ignore[union-attr]
    assert svc.search("New Zealand bird", "semantic", source="wiki")[0].source_id == "kiwi.md"


def test_failed_embedding_never_fails_the_sync(corpus: Path) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    svc = make(corpus, f'provider = "openai"\nmodel = "m"\ndims = 8\nurl = "http://127.0.0.1:{port}/v1"\ntimeout = 2')
    summary = svc.sync("all")
    assert all(r.ok for r in summary.sources)
    assert summary.embedding is not None and summary.embedding.error and summary.embedding.embedded == 0
    assert summary.embedding.pending > 0
    assert svc.stats().pending_embeddings == summary.embedding.pending
    assert svc.search("kiwi")[0].score == 1.0  # keyword search works meanwhile

    # Switching to a working provider: `embed pending` finishes the job, `embed rebuild` redoes it.
    svc2 = make(corpus, 'provider = "local"')
    report = svc2.embed_pending()
    assert report.error is None and report.pending == 0 and report.embedded == svc2.stats().distinct_chunks
    rebuilt = svc2.embed_rebuild()
    assert rebuilt.embedded == report.embedded and rebuilt.pending == 0


def test_get_returns_document_and_chunks(corpus: Path) -> None:
    svc = make(corpus)
    svc.sync("all")
    hit = svc.search("flightless")[0]
    doc = svc.get(hit.id)
    assert (doc.id, doc.title, doc.source_id) == (hit.id, "Kiwi", "kiwi.md")
    assert doc.body == (corpus / "wiki" / "kiwi.md").read_text()
    assert [c.ordinal for c in doc.chunks] == [0]
    long = svc.get(svc.search("filler", source="wiki")[0].id)
    assert len(long.chunks) > 1 and [c.ordinal for c in long.chunks] == list(range(len(long.chunks)))
    with pytest.raises(NotFound, match="No document with id 'nope'"):
        svc.get("nope")


def test_stats(corpus: Path) -> None:
    svc = make(corpus)
    svc.sync("all")
    st = svc.stats()
    assert st.documents == 34 and st.chunks >= 34 and st.sources == {"filesystem:notes": 30, "filesystem:wiki": 4}
    assert st.embedding_model is None and st.db_bytes > 0


def test_ranking_budget_prefers_rare_terms(tmp_path: Path) -> None:
    from cairn_servers.ctx import retrieval
    from cairn_servers.ctx.store import Match

    files = {f"c{i:03d}.md": f"# C{i}\n\ncommon word here {'rare' if i == 7 else ''} {'pair' if i % 50 == 0 else ''}"
             for i in range(200)}
    write(tmp_path / "notes", files)
    write(tmp_path / "wiki", {"w.md": "# W\n\nnothing"})
    svc = make(tmp_path)
    svc.sync("all")
    store = svc.store
    # Under budget: the plain OR of all terms.
    assert retrieval.plan(store, "common rare", budget=1000) == (Match(("common", "rare")), 0)
    # Over budget: the common term is left out, the rare one decides.
    assert retrieval.plan(store, "common rare", budget=50) == (Match(("rare",)), 0)
    # Every term over budget and their AND too: rank the most recently indexed matches only.
    match, min_rowid = retrieval.plan(store, "common word", budget=50)
    assert min_rowid > 0 and match == Match(("common",))  # AND is also over budget -> the newest 50 matches
    assert match is not None and len(store.fts_rank(match, 1000, min_rowid=min_rowid)) == 50
    # Ranked from min_rowid with no filter (SQLite: without the join to documents), exactly as with a
    # filter that keeps everything (the join): the same chunks, scores and order.
    newest = store.fts_rank(match, 1000, min_rowid=min_rowid)
    joined = store.fts_rank(match, 1000, since=0, min_rowid=min_rowid)
    assert list(newest.items()) == list(joined.items()) and min(newest) >= min_rowid
    assert list(store.fts_rank(match, 7, min_rowid=min_rowid).items()) == list(joined.items())[:7]
    assert retrieval.plan(store, "pair common", budget=10) == (Match(("pair",)), 0)
    # The first try counts and, within budget, ranks in one call; over it, it ranks nothing.
    counts, ranked = store.fts_try_rank(["common", "rare"], 10, 1000)
    assert counts == [200, 1] and ranked == store.fts_rank(Match(("common", "rare")), 10)
    assert store.fts_try_rank(["common", "rare"], 10, 50) == ([51, 1], None)  # counted up to budget + 1
    # A phrase counts the chunks with its words in order (ts_rank alone would count "here word" too).
    assert store.fts_try_rank(["word here", "here word", "rare"], 10, 1000)[0] == [200, 0, 1]
    rare = retrieval.keyword(store, "common rare", retrieval.Filters(), 10, budget=50)
    assert rare == store.fts_rank(Match(("rare",)), 10) and len(rare) == 1
    newest = retrieval.keyword(store, "common word", retrieval.Filters(), 1000, budget=50)
    assert len(newest) == 50 and min(newest) == min_rowid
    # The service still answers, best document first.
    assert svc.search("common rare")[0].source_id == "c007.md"


def test_query_vectors_are_reused_across_modes_and_bounded(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same question in semantic then hybrid mode (or asked again) embeds once; the cache is the
    embedder's own, holds at most QUERY_CACHE_SIZE queries, and answers stay the same."""
    from cairn_servers.ctx import retrieval

    svc = make(corpus, 'provider = "local"')
    svc.sync("all")
    embedder = svc.embedder()
    calls: list[list[str]] = []
    real = embedder.embed

    def counting(texts: list[str]) -> object:
        calls.append(list(texts))
        return real(texts)

    monkeypatch.setattr(embedder, "embed", counting)
    first = svc.search("a bird that cannot fly", "semantic")
    assert svc.search("a bird that cannot fly", "hybrid")[0].source_id == first[0].source_id == "kiwi.md"
    assert svc.search("a bird that cannot fly", "semantic") == first
    assert calls == [["a bird that cannot fly"]]
    monkeypatch.setattr(retrieval, "QUERY_CACHE_SIZE", 3)
    for q in ("one", "two", "three", "four"):
        svc.search(q, "semantic")
    assert list(retrieval._query_vectors[embedder]) == ["two", "three", "four"]
    svc.search("a bird that cannot fly", "semantic")  # pushed out: embedded again
    assert calls[-1] == ["a bird that cannot fly"] and len(calls) == 6
    other = make(corpus, 'provider = "local"').embedder()  # a new embedder starts with nothing
    assert other not in retrieval._query_vectors
    retrieval.forget_query_vectors()
    assert embedder not in retrieval._query_vectors


# The statements keyword search ranked with before h-kw (issue 19): ``ORDER BY rank`` with no filter, the join
# to documents with one. The answers must stay exactly these: the same chunks, scores and order (score, then rowid).
_PREVIOUS_PLAIN = "SELECT rowid, -rank FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rank LIMIT ?"
_PREVIOUS_JOINED = ("SELECT f.rowid, -bm25(chunks_fts) AS s FROM chunks_fts f JOIN chunks c ON c.rowid = f.rowid"
                    " JOIN documents d ON d.rowid = c.doc WHERE chunks_fts MATCH ?{where} ORDER BY s DESC, f.rowid LIMIT ?")


def test_keyword_ranking_matches_the_previous_statements(tmp_path: Path, ctx_backend: str) -> None:
    import random

    from cairn_servers.ctx import retrieval
    from cairn_servers.ctx.retrieval import Filters
    from cairn_servers.ctx.store import Match

    rng = random.Random(19)
    vocab = ["harvest", "harvesting", "kiwi", "orchard", "use-effect", "cleanup", "bird", "report", "season", "rain"]
    # Every chunk a different length, so no two chunks tie on a score and "the same order" is well defined.
    notes = {f"n{i:03d}.md": f"# Note {i}\n\n" + " ".join(rng.choice(vocab) for _ in range(5 + i)) + "\n" for i in range(90)}
    write(tmp_path / "notes", notes)
    write(tmp_path / "wiki", {f"w{i}.md": f"# Wiki {i}\n\nkiwi orchard harvest {'report ' * i}season\n" for i in range(1, 12)})
    os.utime(tmp_path / "wiki" / "w1.md", (946684800, 946684800))  # 2000-01-01: out of the `since` window
    svc = make(tmp_path)
    svc.sync("all")
    store = svc.store
    queries = [("kiwi",), ("harvest",), ("harvesting", "rain"), ("use-effect",), ("use-effect", "cleanup", "bird"),
               ("orchard", "season", "report"), ("kiwi orchard",)]  # a hyphenated phrase, stems, a quoted phrase
    matches = [Match(q) for q in queries] + [Match(("kiwi", "orchard"), "AND"), Match(("report", "rain", "bird"), "AND")]
    since = 1_000_000_000
    for match in matches:
        full = store.fts_rank(match, 10_000)
        assert full and list(full.values()) == sorted(full.values(), reverse=True), match
        for k in (1, 5, 40):  # each top k is the first k of the whole ranking
            assert list(store.fts_rank(match, k).items()) == list(full.items())[:k], (match, k)
        if ctx_backend != "sqlite":
            continue
        previous = store.sql(_PREVIOUS_PLAIN, (match.fts5(), 10_000))
        assert list(full.items()) == [(int(r), float(s)) for r, s in previous], match
        for k in (1, 5, 40):
            assert list(store.fts_rank(match, k).items()) == [(int(r), float(s)) for r, s in
                                                              store.sql(_PREVIOUS_PLAIN, (match.fts5(), k))], (match, k)
        for sources, where, params in (((["filesystem:wiki"]), " AND d.source IN (?)", ["filesystem:wiki"]),
                                       (None, " AND d.updated_at >= ?", [since])):
            joined = store.sql(_PREVIOUS_JOINED.format(where=where), (match.fts5(), *params, 40))
            got = store.fts_rank(match, 40, sources=sources, since=since if sources is None else None)
            assert list(got.items()) == [(int(r), float(s)) for r, s in joined], (match, where)
    # Through keyword search (the try/plan path, large and small budgets): the same top k as the statements.
    if ctx_backend == "sqlite":
        for words in ("kiwi", "harvest rain", "use-effect cleanup", '"kiwi orchard" season'):
            for budget in (10_000, 30):
                ranked = retrieval.keyword(store, words, Filters(), 10, budget=budget)
                planned, min_rowid = retrieval.plan(store, words, budget)
                assert planned is not None
                where = " AND f.rowid >= ?" if min_rowid else ""
                expected = store.sql(_PREVIOUS_JOINED.format(where=where),
                                     (planned.fts5(), *([min_rowid] if min_rowid else []), 10))
                assert list(ranked.items()) == [(int(r), float(s)) for r, s in expected], (words, budget)


def test_split_ranking_gives_the_one_statement_answer(tmp_path: Path, ctx_backend: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite ranks a large keyword match as two halves (even and odd rowids) on two connections side by side
    (issue 19): the answer must be the one statement's, the same chunks, scores and order, ties included."""
    if ctx_backend != "sqlite":
        pytest.skip("the split ranking is SQLite's: two connections to one database file")
    import random
    import sqlite3

    from cairn_servers.ctx import retrieval
    from cairn_servers.ctx import store as store_mod
    from cairn_servers.ctx.retrieval import Filters
    from cairn_servers.ctx.store import Match

    rng = random.Random(7)
    vocab = ["harvest", "harvesting", "kiwi", "orchard", "use-effect", "cleanup", "bird", "report", "season", "rain"]
    notes = {f"n{i:03d}.md": f"# Note {i}\n\n" + " ".join(rng.choice(vocab) for _ in range(3 + i % 40)) + "\n"
             for i in range(240)}
    notes.update({f"t{i}.md": "# Twin\n\nkiwi orchard kiwi\n" for i in range(6)})  # equal scores: ties by rowid
    write(tmp_path / "notes", notes)
    write(tmp_path / "wiki", {f"w{i}.md": f"# Wiki {i}\n\nkiwi orchard harvest {'report ' * i}season\n" for i in range(1, 12)})
    os.utime(tmp_path / "wiki" / "w1.md", (946684800, 946684800))
    svc = make(tmp_path)
    svc.sync("all")
    store = svc.store
    assert isinstance(store, store_mod.SqliteStore)
    fetched: list[sqlite3.Connection] = []
    timed = store_mod._timed_fetch

    def recording(db: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> tuple[list[object], float, float]:
        fetched.append(db)
        return timed(db, sql, params)

    monkeypatch.setattr(store_mod, "_timed_fetch", recording)
    monkeypatch.setitem(store_mod._split_state, "idle_until", 0.0)
    monkeypatch.setattr(store_mod, "_starved", lambda wall, cpu: False)  # this test's VM may be busy
    monkeypatch.setattr(store_mod, "FTS_KNOWN_MAX", 0)  # nothing remembered: every call ranks

    def both(match: Match, k: int, **kwargs: object) -> tuple[dict[int, float], dict[int, float]]:
        df = {t: 10**6 for t in match.terms}
        monkeypatch.setattr(store_mod, "SPLIT_MIN", 10**9)
        one = store.fts_rank(match, k, df=df, **kwargs)  # type: ignore[arg-type]
        monkeypatch.setattr(store_mod, "SPLIT_MIN", 1)
        before = len(fetched)
        split = store.fts_rank(match, k, df=df, **kwargs)  # type: ignore[arg-type]
        assert len(fetched) == before + 2 and store._helper in fetched[-2:] and store.db in fetched[-2:]
        return one, split

    matches = [Match(("kiwi",)), Match(("harvesting", "rain")), Match(("use-effect", "cleanup", "bird")),
               Match(("kiwi orchard",)), Match(("kiwi", "orchard"), "AND")]
    newest = store.fts_newest_rowid(Match(("kiwi",)), 30)
    for match in matches:
        full = store.fts_rank(match, 10_000)
        # bm25() of a row does not depend on which rows the statement reads: a rowid filter keeps the scores.
        odd = store.sql("SELECT rowid, -bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid % 2 = 1",
                        (match.fts5(),))
        assert odd and all(full[int(r)] == float(s) for r, s in odd), match
        for k in (1, 5, 40, 10_000):
            for kwargs in ({}, {"min_rowid": newest}, {"sources": ["filesystem:notes"]}, {"since": 1_000_000_000},
                           {"sources": ["filesystem:wiki"], "min_rowid": newest}):
                one, split = both(match, k, **kwargs)
                assert list(split.items()) == list(one.items()), (match, k, kwargs)
        assert list(both(match, 10_000)[1].items()) == list(full.items())
    # Through keyword search and the service: the try path, the budget's plan, filters.
    for words in ("kiwi", "harvest rain", "use-effect cleanup bird", '"kiwi orchard" season'):
        for budget in (10_000, 30):
            monkeypatch.setattr(store_mod, "SPLIT_MIN", 10**9)
            one_kw = retrieval.keyword(store, words, Filters(), 10, budget=budget)
            found = svc.search(words, limit=20)
            monkeypatch.setattr(store_mod, "SPLIT_MIN", 1)
            assert retrieval.keyword(store, words, Filters(), 10, budget=budget) == one_kw
            assert list(retrieval.keyword(store, words, Filters(), 10, budget=budget).items()) == list(one_kw.items())
            assert svc.search(words, limit=20) == found and found, words
    # Inside a transaction of the store's connection: one statement (the helper could not see its writes).
    before = len(fetched)
    with store.snapshot():
        assert store.fts_rank(Match(("kiwi",)), 10, df={"kiwi": 10**6}) == store.fts_rank(Match(("kiwi",)), 10)
    assert len(fetched) == before
    # Another connection commits while the halves run: they are dropped, the answer is the new state's.
    import threading

    writer = sqlite3.connect(str(store.path), isolation_level=None, check_same_thread=False)
    committed = threading.Event()

    def committing(db: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> tuple[list[object], float, float]:
        if db is store.db:  # this half reads after the commit, the helper's before it
            assert committed.wait(10)
            return timed(db, sql, params)
        try:
            return timed(db, sql, params)
        finally:
            writer.execute("INSERT INTO chunks(doc, ordinal, hash, heading, text)"
                           " SELECT doc, 99, 'h', 'x', 'kiwi kiwi kiwi' FROM chunks LIMIT 1")
            committed.set()

    monkeypatch.setattr(store_mod, "_timed_fetch", committing)
    after = store.fts_rank(Match(("kiwi",)), 10_000, df={"kiwi": 10**6})
    monkeypatch.setattr(store_mod, "_timed_fetch", recording)
    monkeypatch.setattr(store_mod, "SPLIT_MIN", 10**9)
    assert committed.is_set() and list(after.items()) == list(store.fts_rank(Match(("kiwi",)), 10_000).items())
    assert max(after) == store.sql("SELECT max(rowid) FROM chunks")[0][0]  # the new, shortest chunk ranks first
    writer.close()
    # The helper cannot read (busy, an I/O error): the store's connection answers alone.
    def failing(db: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> tuple[list[object], float, float]:
        fetched.append(db)
        if db is not store.db:
            raise sqlite3.OperationalError("database is locked")
        return timed(db, sql, params)

    monkeypatch.setattr(store_mod, "_timed_fetch", failing)
    monkeypatch.setattr(store_mod, "SPLIT_MIN", 1)
    before = len(fetched)
    assert list(store.fts_rank(Match(("kiwi",)), 10_000, df={"kiwi": 10**6}).items()) == list(
        store.fts_rank(Match(("kiwi",)), 10_000).items())
    assert len(fetched) == before + 2
    monkeypatch.setattr(store_mod, "_timed_fetch", recording)
    # A split whose threads waited for a core: the next rankings are one statement for SPLIT_BACKOFF_S.
    monkeypatch.setattr(store_mod, "SPLIT_MIN", 1)
    monkeypatch.setattr(store_mod, "_starved", lambda wall, cpu: True)
    before = len(fetched)
    first = store.fts_rank(Match(("kiwi",)), 10, df={"kiwi": 10**6})
    assert len(fetched) == before + 2
    assert store.fts_rank(Match(("kiwi",)), 10, df={"kiwi": 10**6}) == first and len(fetched) == before + 2
    store.close()
    assert store._helper is None


def test_keyword_counts_are_remembered_until_the_data_changes(tmp_path: Path, ctx_backend: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite keeps the plan's term counts and newest rowids (~0.5 ms each) while nothing changed: a write of
    its own connection or a commit of another one (another process's sync) makes them counted again."""
    if ctx_backend != "sqlite":
        pytest.skip("PostgreSQL counts inside its one ranking statement")
    import sqlite3

    from cairn_servers.ctx import store as store_mod
    from cairn_servers.ctx.store import Match

    write(tmp_path / "notes", {f"c{i:03d}.md": f"# C{i}\n\ncommon word {'rare' if i % 10 == 0 else ''}" for i in range(60)})
    write(tmp_path / "wiki", {"w.md": "# W\n\nnothing"})
    svc = make(tmp_path)
    svc.sync("all")
    store = svc.store
    assert isinstance(store, store_mod.SqliteStore)
    statements: list[str] = []
    store.db.set_trace_callback(statements.append)

    def counted(match: Match, cap: int) -> tuple[int, int]:
        before = sum("count(*)" in s for s in statements)
        return store.fts_count(match, cap), sum("count(*)" in s for s in statements) - before

    assert counted(Match(("common",)), 100) == (60, 1)
    assert counted(Match(("common",)), 100) == (60, 0)  # remembered
    assert counted(Match(("common",)), 10) == (11, 0)  # an exact count answers a lower cap
    assert counted(Match(("rare",)), 3) == (4, 1)
    assert counted(Match(("rare",)), 2) == (3, 0)  # past a lower cap too
    assert counted(Match(("rare",)), 100) == (6, 1)  # a higher cap than counted: counted again
    newest = store.fts_newest_rowid(Match(("common",)), 5)
    assert store.fts_newest_rowid(Match(("common",)), 5) == newest and sum("OFFSET" in s for s in statements) == 1
    # Another connection commits (another process's sync): counted again, the new chunk seen.
    other = sqlite3.connect(str(store.path), isolation_level=None)
    other.execute("INSERT INTO chunks(doc, ordinal, hash, heading, text) SELECT doc, 9, 'h', 'x', 'rare common' FROM chunks LIMIT 1")
    other.close()
    assert counted(Match(("rare",)), 100) == (7, 1) and counted(Match(("common",)), 100) == (61, 1)
    assert store.fts_newest_rowid(Match(("common",)), 0) == store.sql("SELECT max(rowid) FROM chunks")[0][0]
    # This connection's own write, committed or not.
    with store.transaction():
        store.db.execute("DELETE FROM chunks WHERE rowid = (SELECT max(rowid) FROM chunks)")
        assert counted(Match(("rare",)), 100) == (6, 1)
    assert counted(Match(("rare",)), 100) == (6, 0)
    # Rankings too: the same statement with the same parameters, until the data changes.
    def ranked(match: Match, k: int, **kwargs: object) -> tuple[list[tuple[int, float]], int]:
        before = sum("bm25" in s for s in statements)
        got = store.fts_rank(match, k, **kwargs)  # type: ignore[arg-type]
        return list(got.items()), sum("bm25" in s for s in statements) - before

    first, n = ranked(Match(("common", "rare")), 10)
    assert n == 1 and len(first) == 10
    assert ranked(Match(("common", "rare")), 10) == (first, 0)
    assert ranked(Match(("common", "rare")), 5) == (first[:5], 1)  # another k: another statement
    assert ranked(Match(("common", "rare")), 10, sources=["filesystem:notes"])[1] == 1
    assert ranked(Match(("common", "rare")), 10, sources=["filesystem:notes"])[1] == 0
    assert ranked(Match(("common", "rare")), 10, sources=["filesystem:wiki"]) == ([], 1)
    store.fts_rank(Match(("common",)), 3).clear()  # a caller changing its answer changes nothing remembered
    assert ranked(Match(("common",)), 3)[0] and ranked(Match(("common",)), 3)[1] == 0
    with store.transaction():
        store.db.execute("INSERT INTO chunks(doc, ordinal, hash, heading, text)"
                         " SELECT doc, 8, 'h', 'x', 'rare common rare' FROM chunks LIMIT 1")
    again, n = ranked(Match(("common", "rare")), 10)
    assert n == 1 and again != first and again[0][0] == store.sql("SELECT max(rowid) FROM chunks")[0][0]
    # Bounded: past FTS_KNOWN_MAX entries or FTS_KNOWN_ROWS ranked rows it starts again.
    monkeypatch.setattr(store_mod, "FTS_KNOWN_MAX", 2)
    store.fts_count(Match(("word",)), 100)
    store.fts_count(Match(("rare",)), 100)
    assert len(store._fts_found) <= 2
    monkeypatch.setattr(store_mod, "FTS_KNOWN_MAX", 4096)
    monkeypatch.setattr(store_mod, "FTS_KNOWN_ROWS", 15)
    assert ranked(Match(("common",)), 10)[1] == 1 and ranked(Match(("common",)), 10)[1] == 0
    assert ranked(Match(("word",)), 10)[1] == 1 and ranked(Match(("common",)), 10)[1] == 1  # 20 rows: started again
    store.db.set_trace_callback(None)


def test_snippet_with_the_terms_computed_once_is_the_same_snippet() -> None:
    # _group computes the query's snippet terms once per search instead of once per result.
    from cairn_servers.ctx.retrieval import snippet, snippet_terms

    text = ("Intro words. " * 30) + "The Kiwi bird, which cannot fly, lives in New Zealand. " + ("Tail text here. " * 30)
    for query in ("kiwi", "What is the KIWI", "the a of", "zealand kiwi", "nothing matches", "tail", "intro"):
        for width in (40, 240, 10_000):
            assert snippet(text, query, width, needles=snippet_terms(query)) == snippet(text, query, width)
    assert snippet_terms("What is the KIWI bird") == ["kiwi", "bird"]
