from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from cairn.core.errors import InvalidInput, NotFound
from cairn.ctx.service import Service

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
    from cairn.ctx import retrieval
    from cairn.ctx.store import Match

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
    from cairn.ctx import retrieval

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

    from cairn.ctx import retrieval
    from cairn.ctx.retrieval import Filters
    from cairn.ctx.store import Match

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


def test_snippet_with_the_terms_computed_once_is_the_same_snippet() -> None:
    # _group computes the query's snippet terms once per search instead of once per result.
    from cairn.ctx.retrieval import snippet, snippet_terms

    text = ("Intro words. " * 30) + "The Kiwi bird, which cannot fly, lives in New Zealand. " + ("Tail text here. " * 30)
    for query in ("kiwi", "What is the KIWI", "the a of", "zealand kiwi", "nothing matches", "tail", "intro"):
        for width in (40, 240, 10_000):
            assert snippet(text, query, width, needles=snippet_terms(query)) == snippet(text, query, width)
    assert snippet_terms("What is the KIWI bird") == ["kiwi", "bird"]
