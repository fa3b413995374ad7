"""Keyword, semantic and hybrid retrieval over the store, grouped per document.

* keyword: the store ranks a :class:`~cairn_servers.ctx.store.Match` of the query's terms (OR-ed, common
  English stop words dropped when other terms remain): FTS5 BM25 on SQLite, IDF-weighted ``ts_rank``
  on PostgreSQL; filters are SQL conditions evaluated before the ``LIMIT``. Scores are relative to
  the best hit (best = 1.0).
* semantic: SQLite: the model's memory-mapped vector files (:mod:`cairn_servers.ctx.vectorfile`): an exact
  cosine scan, or from :data:`~cairn_servers.ctx.vectorfile.ANN_MIN_ROWS` rows a usearch HNSW index rescored in
  float32, filters as row masks; PostgreSQL: pgvector's HNSW index, filters in SQL. Scores are the cosine,
  clipped to [0, 1].
* hybrid: both candidate lists fused per chunk (:mod:`cairn_servers.search.fusion`), then grouped.

Every mode groups chunks per document (a document scores its best chunk), orders by score then id,
and shows the best chunk's snippet.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cairn_servers.ctx.store import KnowledgeStore as Store
from cairn_servers.ctx.store import Match
from cairn_servers.search import vectors as _vectors  # noqa: F401  (sets the BLAS thread policy before numpy loads)
from cairn_servers.search.query import terms

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from cairn_servers.search.embed import Embedder
    from cairn_servers.ctx.vectorfile import VectorFiles
    from cairn_servers.search.vectors import VectorIndex

STOP_WORDS = frozenset(
    "a an and are as at be by can do does for from how i in is it of on or that the this to was what when"
    " where which who why will with you your".split()
)


@dataclass(frozen=True)
class Filters:
    """Resolved filters: exact source labels, and an updated_at window in unix seconds."""

    sources: tuple[str, ...] | None = None
    since: int | None = None
    until: int | None = None


RANK_BUDGET = 8_000  # most chunks BM25 ranks per query (~1-3 us each): bounds keyword latency


def keyword_terms(text: str) -> list[str]:
    """The query's terms, common English stop words dropped unless nothing else is left."""
    found = terms(text)
    return [t for t in found if t.lower() not in STOP_WORDS] or found


def _or(terms_: list[str]) -> Match | None:
    return Match(tuple(dict.fromkeys(terms_)), "OR") if terms_ else None


def plan(store: Store, text: str, budget: int = RANK_BUDGET,
         counts: dict[str, int] | None = None) -> tuple[Match | None, int]:
    """(keyword query, lowest rowid to rank) keeping the ranking work under ``budget`` chunks.

    BM25 costs ~1-3 us per matching chunk, so a term found in most chunks would dominate latency
    while adding almost nothing to the ranking (its IDF is near zero). When the OR of all terms
    matches more than ``budget`` chunks, the most common terms are left out (rarest first, as long
    as they fit); if even the rarest term is over budget, the AND of all terms is used when it is
    non-empty and within budget; failing that, ranking covers the ``budget`` most recently indexed
    matching chunks. ``counts``: each term's chunk count (up to ``budget + 1``) when already known.
    """
    kept = list(dict.fromkeys(keyword_terms(text)))
    match = _or(kept)
    if match is None:
        return None, 0
    known = counts or {}
    ordered = sorted(((known[t] if t in known else store.fts_count(Match((t,)), budget), t) for t in kept),
                     key=lambda ct: ct[0])
    if sum(c for c, _ in ordered) <= budget:
        return match, 0
    chosen: list[str] = []
    total = 0
    for c, t in ordered:
        if chosen and total + c > budget:
            break
        chosen.append(t)
        total += c
    if total <= budget:
        return _or(chosen), 0
    if len(kept) > 1:
        conj = Match(tuple(dict.fromkeys(kept)), "AND")
        if 0 < store.fts_count(conj, budget) <= budget:
            return conj, 0
    rarest = _or([ordered[0][1]]) or match
    return rarest, store.fts_newest_rowid(rarest, budget - 1)


def keyword(store: Store, text: str, filters: Filters, k: int, *, budget: int | None = None) -> dict[int, float]:
    """Chunk rowid -> positive BM25 score, best ``k`` among chunks that pass the filters.

    SQLite with its keyword head index built (:mod:`cairn_servers.ctx.keyword_index`): the exact ranking, however
    common the terms. Otherwise the common case, the terms together within the budget (default
    :data:`RANK_BUDGET`), is one call (one statement on PostgreSQL); over it, :func:`plan` chooses from the
    counts that call returned."""
    budget = RANK_BUDGET if budget is None else budget
    filtered = filters.sources is not None or filters.since is not None or filters.until is not None
    # Filtered queries join every matching chunk to its document, so they get a smaller budget.
    budget = budget // 2 if filtered else budget
    kept = list(dict.fromkeys(keyword_terms(text)))
    if not kept:
        return {}
    sources, since, until = filters.sources, filters.since, filters.until
    exact = getattr(store, "fts_exact", None)  # SQLite: the head index ranks every query exactly, once built
    if exact is not None:
        found: dict[int, float] | None = exact(kept, k, sources=sources, since=since, until=until)
        if found is not None:
            return found
    counts, ranked = store.fts_try_rank(kept, k, budget, sources=sources, since=since, until=until)
    if ranked is not None:
        return ranked
    df = dict(zip(kept, counts))
    match, min_rowid = plan(store, text, budget, df)
    if match is None:
        return {}
    return store.fts_rank(match, k, sources=sources, since=since, until=until, min_rowid=min_rowid, df=df)


_lock = threading.Lock()


def matrix_for(store: Store, embedder: "Embedder") -> "VectorFiles":
    """The model's vector files of this SQLite database (:mod:`cairn_servers.ctx.vectorfile`), mapped and caught
    up with the store's last commit: a write costs its own rows, never a reload."""
    from cairn_servers.ctx.vectorfile import files_for

    return files_for(store, embedder.identity, embedder.dims)


def semantic(store: Store, embedder: "Embedder", text: str, filters: Filters, k: int) -> dict[int, float]:
    """Chunk rowid -> cosine similarity, best ``k`` among chunks that pass the filters."""
    if store.native_vectors:  # PostgreSQL: pgvector's HNSW index, filters in SQL
        query = query_vector(embedder, text)
        return store.vector_search(embedder.identity, query.astype("float32").tobytes(), k, sources=filters.sources,
                                   since=filters.since, until=filters.until)
    return semantic_in(matrix_for(store, embedder), embedder, text, filters, k)


def semantic_in(m: "VectorFiles", embedder: "Embedder", text: str, filters: Filters, k: int) -> dict[int, float]:
    """:func:`semantic` over already mapped vector files (no database access, so it can run in a thread)."""
    if m.size == 0:
        return {}
    hits = m.search(query_vector(embedder, text), k, filters.sources, filters.since, filters.until)
    return {chunk: max(0.0, min(1.0, score)) for chunk, score in hits}


QUERY_CACHE_SIZE = 256  # query vectors kept per embedder (384 floats each: ~0.4 MB in all)
_query_vectors: "weakref.WeakKeyDictionary[Any, OrderedDict[str, npt.NDArray[np.float32]]]" = weakref.WeakKeyDictionary()
_query_lock = threading.Lock()


def query_vector(embedder: "Embedder", text: str) -> "npt.NDArray[np.float32]":
    """``text``'s query vector, from a small per-embedder LRU of the last :data:`QUERY_CACHE_SIZE` queries: the
    same question asked again, or in another mode (semantic, then hybrid), skips the model (5-15 ms with
    minilm). Held by the embedder object, so a new embedder (another provider or model) starts empty."""
    from cairn_servers.search.embed import embed_queries

    with _query_lock:
        recent = _query_vectors.get(embedder)
        if recent is not None and text in recent:
            recent.move_to_end(text)
            return recent[text]
    vector: "npt.NDArray[np.float32]" = embed_queries(embedder, [text])[0]
    vector.setflags(write=False)  # shared by every later hit
    with _query_lock:
        recent = _query_vectors.setdefault(embedder, OrderedDict())
        recent[text] = vector
        while len(recent) > QUERY_CACHE_SIZE:
            recent.popitem(last=False)
    return vector


def forget_query_vectors() -> None:
    """Empty the query-vector cache (benchmarks time the model on every query)."""
    with _query_lock:
        _query_vectors.clear()


_pool: Any = None


def hybrid_candidates(store: Store, embedder: "Embedder", text: str, filters: Filters, k_keyword: int,
                      k_vector: int) -> tuple[dict[int, float], dict[int, float]]:
    """Keyword and vector candidates computed side by side: SQLite and numpy both release the GIL."""
    global _pool
    from concurrent.futures import ThreadPoolExecutor

    if store.native_vectors:  # both run in the database, on one connection
        return (keyword(store, text, filters, k_keyword, budget=RANK_BUDGET // 2),
                semantic(store, embedder, text, filters, k_vector))
    m = matrix_for(store, embedder)
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctx-vectors")
    future = _pool.submit(semantic_in, m, embedder, text, filters, k_vector)
    # Half the ranking budget: in hybrid mode the vectors already cover the very common terms.
    kw = keyword(store, text, filters, k_keyword, budget=RANK_BUDGET // 2)
    return kw, future.result()


def snippet_terms(query: str) -> list[str]:
    """The lower-cased terms :func:`snippet` looks for (stop words left out): computed once per search."""
    return [t for t in (t.lower() for t in terms(query)) if t not in STOP_WORDS]


def snippet(text: str, query: str, width: int = 240, *, needles: list[str] | None = None) -> str:
    """About ``width`` characters of ``text`` around the first query term, whitespace collapsed.
    ``needles``: :func:`snippet_terms` of ``query``, when the caller has it already."""
    flat = " ".join(text.split())  # the same as collapsing \s+ and stripping, several times faster
    if len(flat) <= width:
        return flat
    lowered = flat.lower()
    positions = [lowered.find(t) for t in (snippet_terms(query) if needles is None else needles)]
    positions = [p for p in positions if p >= 0]
    start = max(0, min(positions) - width // 4) if positions else 0
    start = min(start, len(flat) - width)
    if start > 0:
        space = flat.find(" ", start)
        start = space + 1 if 0 <= space < start + 20 else start
    piece = flat[start : start + width].strip()
    return ("…" if start > 0 else "") + piece + ("…" if start + width < len(flat) else "")
