"""The ctx service: one method per capability, plain data in, dataclasses out.

The operations (:mod:`cairn_servers.ctx.ops`: search, get, sources) call these methods for every surface (MCP,
HTTP, the CLI) after checking their parameters against one declaration; the CLI calls the others
(sync, embed, stats) directly, and Lua tools reach search/get/sources through ``context.*``. Adapters
render what these return. SQL stays in the store's named methods
(:class:`~cairn_servers.ctx.store.KnowledgeStore`: SQLite or PostgreSQL).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn_servers.core.errors import InvalidInput, NotFound
from cairn_servers.core.files import write_atomic
from cairn_servers.core.sanitize import scrub
from cairn_servers.ctx import config as cfg
from cairn_servers.ctx.times import iso, parse_time
from cairn_servers.ctx.retrieval import Filters
from cairn_servers.ctx.store import KnowledgeStore
from cairn_servers.ctx.stores import open_store
from cairn_servers.ctx.sync import EmbedReport, Progress, SyncReport

if TYPE_CHECKING:
    from collections.abc import Callable

    from cairn_servers.ctx.sync import BackgroundEmbedder
    from cairn_servers.search.embed import Embedder


@dataclass
class SearchResult:
    """One document hit; ``score`` is in [0, 1]."""

    id: str
    score: float
    title: str
    source: str
    source_id: str
    updated_at: str
    snippet: str
    source_url: str | None
    location: str = ""  # the best chunk's heading path, a citation: "Page 12", "Slide 3: Budget", "Guide > Install"


@dataclass
class ExplainedResult(SearchResult):
    """A search result with how it was scored (``search --explain``): ``explain`` holds, for the document's
    best chunk, ``keyword`` (``rank``, ``bm25``) and ``vector`` (``rank``, ``cosine``), each null when that
    list did not have the chunk among its candidates, and in hybrid mode ``fused`` (the score before
    rounding) with ``fusion`` (``method``, ``alpha``, and ``k`` for rrf)."""

    explain: dict[str, Any] = field(default_factory=dict)


class SearchResults(list[SearchResult]):
    """A search's results, with ``unembedded`` (semantic and hybrid search; None in keyword mode): how many
    chunks have no vector of the configured model yet, so semantic ranking could not see them (hybrid ranks
    them by keyword alone). The tools answer it beside ``results`` (:attr:`extra`)."""

    unembedded: int | None = None

    @property
    def extra(self) -> dict[str, Any]:
        """The fields a tool answers beside ``results``."""
        return {} if self.unembedded is None else {"unembedded": self.unembedded}


@dataclass
class ChunkView:
    ordinal: int
    hash: str
    heading: str
    text: str


@dataclass
class Document:
    """A full document with its chunks."""

    id: str
    source: str
    source_id: str
    title: str
    body: str
    source_url: str | None
    updated_at: str
    author: str | None
    metadata: dict[str, Any]
    chunks: list[ChunkView] = field(default_factory=list)


@dataclass
class SourceStatus:
    """A configured (or formerly configured) source and its health."""

    name: str
    type: str
    source: str
    configured: bool
    healthy: bool
    doc_count: int
    last_sync: str | None
    error: str | None


@dataclass
class Stats:
    db_path: str
    documents: int
    chunks: int
    distinct_chunks: int
    vectors: int
    pending_embeddings: int
    embedding_model: str | None
    db_bytes: int
    sources: dict[str, int]


@dataclass
class SyncSummary:
    sources: list[SyncReport]
    embedding: EmbedReport | None


@dataclass
class MigrateReport:
    database: str  # the path, or the URL with its password masked
    backend: str  # sqlite or postgres
    previous: int  # the schema version found (0: a new database)
    version: int  # the schema version now


@dataclass
class InitReport:
    config_path: str
    db_path: str
    created_config: bool


def init(config_path: str | os.PathLike[str] | None = None) -> InitReport:
    """Write a commented starter ``ctx.toml`` (unless one exists) and create its database."""
    path = cfg.resolve_path(config_path)
    created = False
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, cfg.STARTER.encode("utf-8"), mode=0o600)
        created = True
    config = cfg.load(path)
    open_store(config.db, create=True).close()
    return InitReport(config_path=str(path), db_path=config.db.label, created_config=created)


def background_embedder(config: cfg.Config) -> "BackgroundEmbedder | None":
    """The embedder ``ctx serve`` runs in the background for ``config`` (not started; the servers start it
    through :meth:`cairn_servers.ctx.tools.Toolbox.embed_in_background`), or None when embeddings are disabled,
    ``[embedding] background = false``, or the provider cannot be set up (said on stderr: search still answers
    by keyword)."""
    from cairn_servers.core import log
    from cairn_servers.ctx.sync import BackgroundEmbedder
    from cairn_servers.search import embed

    if config.embedding.provider == "disabled" or not config.embedding.background:
        return None
    try:
        embedder = embed.create(config.embedding)
    except Exception as exc:
        log.warn(f"no background embedding: {scrub(str(getattr(exc, 'message', exc)))}")
        return None
    if hasattr(embedder, "workers"):  # leave a core to the requests
        embedder.workers = max(1, embedder.workers - 1)
    return BackgroundEmbedder(lambda: open_store(config.db, create=True), embedder)


# (database label, model) -> (store generation, chunks without a vector): Service.unembedded on PostgreSQL
_unembedded: dict[tuple[str, str], tuple[int, int]] = {}
_unembedded_lock = threading.Lock()


class Service:
    """The knowledge base behind every adapter; cheap to create, opens the database on first use."""

    def __init__(self, config: cfg.Config) -> None:
        self.config = config
        self._store: KnowledgeStore | None = None
        self._embedder: Embedder | None = None

    @classmethod
    def from_config(cls, path: str | os.PathLike[str] | None = None) -> "Service":
        return cls(cfg.load(path))

    @property
    def store(self) -> KnowledgeStore:
        if self._store is None:
            self._store = open_store(self.config.db, create=True)
        return self._store

    def migrate(self) -> MigrateReport:
        """Open the database, applying any pending schema migrations (every open does), and report."""
        store = self.store
        return MigrateReport(scrub(store.label), "postgres" if self.config.db.url else "sqlite",
                             store.migrated_from, store.schema_version())

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def embedder(self) -> "Embedder":
        """The configured embedder; raises ``embeddings_disabled`` when there is none."""
        if self._embedder is None:
            from cairn_servers.search import embed

            self._embedder = embed.create(self.config.embedding)
        return self._embedder

    # ---- sources -----------------------------------------------------------------------------

    def _select(self, target: str) -> list[cfg.ConnectorConfig]:
        conns = self.config.connectors
        if target == "all":
            chosen = conns
        else:
            chosen = [c for c in conns if target in (c.source, c.type, c.name)]
        if not chosen:
            names = ", ".join(c.source for c in conns) or "none configured"
            raise NotFound(f"No connector matches {target!r}. Configured: {names}. Use a name, a type, or all.")
        return chosen

    def resolve_sources(self, source: str | list[str] | None) -> tuple[str, ...] | None:
        """Source filter values (``type:name``, a type, or a name) as exact source labels."""
        if source is None or source == "" or source == []:
            return None
        wanted = [source] if isinstance(source, str) else list(source)
        labels: list[str] = []
        stored = self.store.source_labels()
        for w in wanted:
            found = [c.source for c in self.config.connectors if w in (c.source, c.type, c.name)]
            if not found and w in stored:
                found = [w]
            if not found:
                known = sorted({c.source for c in self.config.connectors} | stored)
                raise NotFound(f"Unknown source {w!r}. Known sources: {', '.join(known) or 'none'}.")
            labels.extend(found)
        return tuple(sorted(set(labels)))

    def sources(self) -> list[SourceStatus]:
        """Configured sources with their health (last sync result) and document counts."""
        counts = self.store.document_counts()
        checkpoints = self.store.checkpoints()
        out: list[SourceStatus] = []
        for c in self.config.connectors:
            cp = checkpoints.get(c.source)
            healthy, error = self._health(c)
            if cp and cp["status"] == "error":
                healthy, error = False, cp["error"]
            out.append(SourceStatus(
                name=c.name, type=c.type, source=c.source, configured=True, healthy=healthy,
                doc_count=int(counts.get(c.source, 0)),
                last_sync=iso(cp["finished_at"]) if cp and cp["finished_at"] else None,
                error=scrub(error) if error else None,
            ))
        for label in sorted(set(counts) - {c.source for c in self.config.connectors}):
            ctype, _, name = label.partition(":")
            out.append(SourceStatus(name, ctype, label, False, False, int(counts[label]), None,
                                    "no longer configured; its documents stay until removed"))
        return out

    def _health(self, c: cfg.ConnectorConfig) -> tuple[bool, str | None]:
        if c.type == "filesystem":
            root = Path(c.options["root"])
            return (True, None) if root.is_dir() else (False, f"root {root} is not a directory")
        if c.type == "script":
            p = Path(c.options["path"])
            return (True, None) if p.is_file() else (False, f"script {p} does not exist")
        return True, None

    # ---- sync & embeddings -------------------------------------------------------------------

    def sync(self, target: str = "all", *, full: bool = False, dry_run: bool = False,
             progress: Progress | None = None, since: str | int | None = None, until: str | int | None = None,
             limit: str | int | None = None) -> SyncSummary:
        """Sync the connectors matching ``target`` (a name, a type, ``type:name`` or ``all``), then embed.

        :param since: write only new or changed documents updated at/after this date (YYYY-MM-DD, ISO 8601,
            unix seconds)
        :param until: ... and at/before this one (a bare YYYY-MM-DD takes the whole day)
        :param limit: write at most this many new or changed documents per source; the rest wait for a
            later sync
        """
        from cairn_servers.ctx.sync import sync_source, window

        only = window(since, until, limit)  # checked before any source is touched
        reports = [
            sync_source(self.store, c, self.config.chunking, full=full, dry_run=dry_run, progress=progress, only=only)
            for c in self._select(target)
        ]
        with self.store.transaction():
            if not dry_run and self.store.drop_orphan_vectors():
                self.store.bump()
        # The documents are committed, so keyword search finds them already; embedding comes after.
        embedding = None
        if not dry_run and self.config.embedding.provider != "disabled":
            embedding = self.embed_pending(progress=progress)
        return SyncSummary(reports, embedding)

    def embed_pending(self, *, progress: Progress | None = None, limit: str | int | None = None,
                      batch_size: str | int | None = None, dry_run: bool = False) -> EmbedReport:
        """Embed the chunks that have no vector for the configured model yet.

        :param limit: embed at most this many chunk texts (the rest stay pending for a later run)
        :param batch_size: texts per call of the provider (default: [embedding] batch_size)
        :param dry_run: count the pending chunks, embed nothing (the model is not loaded)
        """
        from cairn_servers.ctx.sync import count_arg, embed_pending

        most = count_arg(limit, "--limit", "chunks")
        batch = count_arg(batch_size, "--batch-size", "texts", 100_000) or self.config.embedding.batch_size
        try:
            embedder = self.embedder()
        except InvalidInput:
            raise
        except Exception as exc:  # the provider could not even start: chunks stay pending
            model = f"{self.config.embedding.provider}:{self.config.embedding.model}"
            return EmbedReport(model=model, pending=-1, error=scrub(str(getattr(exc, "message", exc))),
                               error_code=getattr(exc, "code", "internal"))
        if dry_run:
            pending = self.store.pending_count(embedder.identity)
            return EmbedReport(model=embedder.identity, pending=pending, dry_run=True,
                               would_embed=pending if most is None else min(pending, most))
        return embed_pending(self.store, embedder, batch, progress=progress, limit=most)

    def embed_rebuild(self, *, progress: Progress | None = None, limit: str | int | None = None,
                      batch_size: str | int | None = None, dry_run: bool = False) -> EmbedReport:
        """Drop every stored vector and embed all chunks again with the configured model (with ``limit``, that
        many now; the rest stay pending). ``dry_run``: count what would be embedded, drop nothing."""
        from cairn_servers.ctx.sync import count_arg

        count_arg(limit, "--limit", "chunks")
        count_arg(batch_size, "--batch-size", "texts", 100_000)
        embedder = self.embedder()
        if dry_run:
            total = self.store.counts()[2]  # distinct chunk texts: all of them would be embedded again
            return EmbedReport(model=embedder.identity, pending=total, dry_run=True,
                               would_embed=total if limit is None else min(total, int(str(limit).strip())))
        with self.store.transaction():
            self.store.clear_vectors()
            self.store.bump()
        report = self.embed_pending(progress=progress, limit=limit, batch_size=batch_size)
        if not self.store.native_vectors:  # SQLite: the vector files and their index, written again
            from cairn_servers.ctx.vectorfile import build

            build(self.store, embedder.identity, embedder.dims)
        return report

    def unembedded(self, embedder: "Embedder") -> int:
        """Chunks that semantic search cannot see yet (no vector for ``embedder``'s model): counted once per write
        to the store (its generation), per database and model, so a search pays for it only after a change."""
        if not self.store.native_vectors:  # SQLite: the vector files counted them as they caught up
            from cairn_servers.ctx.retrieval import matrix_for

            return matrix_for(self.store, embedder).unembedded
        key = (self.store.label, embedder.identity)
        generation = self.store.generation()
        with _unembedded_lock:
            cached = _unembedded.get(key)
        if cached is not None and cached[0] == generation:
            return cached[1]
        count = self.store.unembedded_chunks(embedder.identity)
        with _unembedded_lock:
            _unembedded[key] = (generation, count)
        return count

    # ---- search & get ------------------------------------------------------------------------

    def search(self, query: str, mode: str = "keyword", *, source: str | list[str] | None = None,
               since: str | int | None = None, until: str | int | None = None,
               limit: int | None = None, explain: bool = False) -> list[SearchResult]:
        """Search indexed documents by keyword, semantic, or hybrid query.

        The ``search`` operation (:mod:`cairn_servers.ctx.ops`) documents the parameters and checks them for
        every surface; this checks them again for callers that are not one (a Lua tool's ``context.search``).
        The query is never passed raw to the index. ``explain``: :class:`ExplainedResult` items, which
        say how each was scored.
        """
        from cairn_servers.core import deadline
        from cairn_servers.ctx import retrieval
        from cairn_servers.search.embed import hybrid_defaults
        from cairn_servers.search.fusion import fuse
        from cairn_servers.search.query import check_terms

        if not isinstance(query, str) or not query.strip():
            raise InvalidInput("The query is empty. Pass some words to search for.")
        check_terms(query)  # at most MAX_TERMS distinct words: bounded work on every surface
        if mode not in cfg.MODES:
            raise InvalidInput(f"Unknown search mode {mode!r}. Use one of: {', '.join(cfg.MODES)}.")
        r = self.config.retrieval
        limit = r.final_limit if limit is None else limit
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise InvalidInput(f"limit must be an integer from 1 to 1000, not {limit!r}.")
        embedder = self.embedder() if mode != "keyword" else None  # embeddings_disabled, before any work
        filters = Filters(self.resolve_sources(source), parse_time(since, "since"), parse_time(until, "until"))
        deadline.check()
        store = self.store
        kw: dict[int, float] = {}
        vec: dict[int, float] = {}
        k_kw, k_vec = max(r.candidate_k_keyword, limit), max(r.candidate_k_vector, limit)
        if mode == "keyword":
            kw = retrieval.keyword(store, query, filters, k_kw)
        elif mode == "semantic" and embedder is not None:
            vec = retrieval.semantic(store, embedder, query, filters, k_vec)
        elif embedder is not None:
            kw, vec = retrieval.hybrid_candidates(store, embedder, query, filters, k_kw, k_vec)
        deadline.check()  # a Lua tool's context.search: no grouping once its time is up
        unembedded = self.unembedded(embedder) if embedder is not None else None
        if mode == "keyword":
            top = max(kw.values(), default=0.0)
            scored = [(cid, s / top if top > 0 else 0.0) for cid, s in kw.items()]
        elif mode == "semantic":
            scored = list(vec.items())
        else:
            rrf_k = hybrid_defaults(self.config.embedding.provider)[1]
            scored = fuse(r.fusion, kw, vec, r.hybrid_alpha, rrf_k)
            if unembedded and embedder is not None:
                scored = self._keyword_for_unembedded(scored, kw, vec, embedder, rrf_k)
        results = SearchResults(self._group(scored, query, limit, self._explainer(mode, kw, vec) if explain else None))
        results.unembedded = unembedded
        return results

    def _keyword_for_unembedded(self, scored: list[tuple[int, float]], kw: dict[int, float], vec: dict[int, float],
                                embedder: "Embedder", rrf_k: int) -> list[tuple[int, float]]:
        """Hybrid scores where a keyword candidate without a vector (not embedded yet) scores as keyword search
        alone would score it: its keyword rank stands in for the vector rank it cannot have, so a document
        synced a moment ago ranks by its words until it is embedded."""
        from cairn_servers.search.fusion import fuse

        blind = [cid for cid in kw if cid not in vec]
        if not blind:
            return scored
        missing = set(blind) - self.store.embedded_chunks(embedder.identity, blind)
        if not missing:
            return scored
        alone = dict(fuse(self.config.retrieval.fusion, kw, {}, 0.0, rrf_k))
        out = [(cid, alone[cid] if cid in missing else score) for cid, score in scored]
        return sorted(out, key=lambda cs: (-cs[1], cs[0]))

    def _explainer(self, mode: str, kw: dict[int, float], vec: dict[int, float]) -> Callable[[int, float], dict[str, Any]]:
        """The ``explain`` of a result from its best chunk (rowid) and that chunk's score: its place and score in
        each candidate list, ranked as :func:`cairn_servers.search.fusion.rrf` ranks them (score desc, then rowid)."""
        from cairn_servers.search.embed import hybrid_defaults
        from cairn_servers.search.fusion import ranks

        r = self.config.retrieval
        kw_rank, vec_rank = ranks(kw), ranks(vec)
        fusion: dict[str, Any] | None = None
        if mode == "hybrid":
            k = hybrid_defaults(self.config.embedding.provider)[1]  # the RRF constant search used
            fusion = {"method": r.fusion, "alpha": r.hybrid_alpha, **({"k": k} if r.fusion == "rrf" else {})}

        def explain(cid: int, score: float) -> dict[str, Any]:
            return {
                "keyword": {"rank": kw_rank[cid], "bm25": kw[cid]} if cid in kw_rank else None,
                "vector": {"rank": vec_rank[cid], "cosine": vec[cid]} if cid in vec_rank else None,
                "fused": score if fusion is not None else None,
                "fusion": fusion,
            }

        return explain

    def _group(self, scored: list[tuple[int, float]], query: str, limit: int,
               explain: Callable[[int, float], dict[str, Any]] | None = None) -> list[SearchResult]:
        from cairn_servers.ctx.chunk import location
        from cairn_servers.ctx.retrieval import snippet, snippet_terms

        if not scored:
            return []
        doc_of = self.store.chunk_documents([cid for cid, _ in scored])
        best: dict[str, tuple[float, int]] = {}
        for cid, score in scored:
            doc = doc_of.get(cid)
            if doc is None:
                continue  # removed since the candidates were taken
            if doc not in best or score > best[doc][0] or (score == best[doc][0] and cid < best[doc][1]):
                best[doc] = (score, cid)
        ordered = sorted(best.items(), key=lambda kv: (-kv[1][0], kv[0]))[:limit]
        winners = [cid for _, (_, cid) in ordered]
        meta = self.store.chunk_hits(winners)
        results = []
        needles = snippet_terms(query)
        for doc_id, (score, cid) in ordered:
            if cid not in meta:
                continue
            text, title, source, source_id, updated_at, source_url, heading = meta[cid]
            result = SearchResult(
                id=doc_id, score=round(min(1.0, max(0.0, score)), 6), title=title, source=source,
                source_id=source_id, updated_at=iso(updated_at), snippet=snippet(text, query, needles=needles),
                source_url=scrub(source_url) if source_url else None, location=location(heading),
            )
            if explain is not None:
                result = ExplainedResult(**result.__dict__, explain=explain(cid, score))
            results.append(result)
        return results

    def get(self, id: str) -> Document:
        """A document by id, with its full body and its chunks in order."""
        if not isinstance(id, str) or not id.strip():
            raise InvalidInput("The document id is empty. Use an id from search results.")
        row = self.store.document(id.strip())
        if row is None:
            raise NotFound(f"No document with id {id!r}. Ids come from `ctx search`; run `ctx sync` if it was just added.")
        import json

        chunks = [ChunkView(o, h, hd, t) for o, h, hd, t in self.store.document_chunks(row[0])]
        return Document(
            id=row[1], source=row[2], source_id=row[3], title=row[4], body=row[5],
            source_url=scrub(row[6]) if row[6] else None, updated_at=iso(row[7]), author=row[8],
            metadata=json.loads(row[9] or "{}"), chunks=chunks,
        )

    def stats(self) -> Stats:
        """Counts of documents, chunks, vectors and pending embeddings, and the database size."""
        docs, chunks, distinct = self.store.counts()
        model = None
        vectors = pending = 0
        if self.config.embedding.provider != "disabled":
            try:
                model = self.embedder().identity
                vectors = self.store.vector_count(model)
                pending = self.store.pending_count(model)
            except Exception:
                model = None
        return Stats(scrub(self.store.label), docs, chunks, distinct, vectors, pending, model,
                     self.store.size_bytes(), self.store.document_counts())

