"""The knowledge base on PostgreSQL + pgvector: the same behaviour as the SQLite store, shared by replicas.

Selected by ``[db] url = "postgresql://..."`` or ``$CTX_DATABASE_URL`` (:func:`cairn_servers.ctx.stores.open_store`);
this module, and the driver (psycopg 3), are imported only then. The statements both stores run are written
once in :mod:`cairn_servers.ctx.sql` (its ``POSTGRES`` dialect); this module adds what only PostgreSQL does.

* **Keyword search**: ``chunks.tsv`` is a generated ``tsvector`` column (GIN index) over the heading
  and the text with accents folded and punctuation turned into spaces (:func:`_folded`), in the
  ``cairn`` text search configuration (the English Snowball stemmer without a stop-word list: like
  SQLite's ``porter unicode61 remove_diacritics 2``, every word is searchable and "cafe" finds "café").
  Each query term becomes a ``phraseto_tsquery`` of the same folded text, so ``use-effect`` finds "use
  effect" and "use-effect" as FTS5 does. Ranking is ``ts_rank`` weighted per term by the BM25 inverse
  document frequency, which ``ts_rank`` lacks. A search is one statement (the terms' counts for the
  ranking budget, the weights and the ranking together; :meth:`PostgresStore.fts_try_rank`).
* **Vectors**: ``vectors.vec`` is a pgvector ``vector``; each model gets a partial HNSW index
  (cosine) on ``vec::vector(dims)``, created with its first vector (``[db] vector_index = "exact"``
  leaves it out: an exact scan, for small bases or while an index would be rebuilt too often). Filters are SQL conditions and
  ``hnsw.iterative_scan`` keeps scanning until ``k`` rows pass them.
* **Several writers**: every write is a transaction; a sync holds a session advisory lock on its
  source (:meth:`PostgresStore.source_lock`), so two syncs of one source run one after the other and
  a killed one releases it with its connection; schema migrations run under a transaction-level
  advisory lock, so replicas starting together apply them once.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from cairn_servers.core.errors import StorageError
from cairn_servers.core import deadline
from cairn_servers.ctx.config import mask_url
from cairn_servers.ctx.sql import POSTGRES, SCHEMA_VERSION, SOURCE_UPDATED, SqlStore, no_nul, tables, vector_text
from cairn_servers.ctx.store import Match

# The text search configuration: English Snowball stems, no stop words (created by migration 1).
TS_CONFIG = "cairn"
# The tsvector input: punctuation (hyphens, slashes, dots, underscores) becomes a space on both sides.
_PUNCT_SQL = "'[[:punct:]]+'"
# Accents: the combining marks U+0300-U+036F of a canonical decomposition (the characters themselves).
_MARKS_SQL = "'[\u0300-\u036f]+'"


def _folded(expr: str) -> str:
    """SQL for the text ``expr`` as it is indexed and queried (migration 3 on): accents folded as FTS5's
    ``remove_diacritics`` folds them (decompose, drop the combining marks, recompose: "café" -> "cafe"),
    then punctuation turned into spaces. Built-in immutable functions only, so a generated column can
    use it and no extension (``unaccent``) is needed. ASCII text (as many bytes as characters) skips
    the folding: it has nothing to fold, and the two normalisations cost more than the tsvector itself."""
    folded = f"normalize(regexp_replace(normalize({expr}, NFD), {_MARKS_SQL}, '', 'g'), NFC)"
    return (f"regexp_replace(CASE WHEN octet_length({expr}) = char_length({expr}) THEN {expr} ELSE {folded} END,"
            f" {_PUNCT_SQL}, ' ', 'g')")


def _q(j: int) -> str:
    """SQL: query term ``j`` (the parameter ``t<j>``) as a phrase query of its folded words."""
    return f"phraseto_tsquery('{TS_CONFIG}', {_folded(f'%(t{j})s::text')})"


def _joined(n: int, operator: str) -> str:
    """SQL: the phrase queries of terms 1..n joined with OR (``||``) or AND (``&&``); a term without a
    word drops out."""
    return "(" + (" || " if operator == "OR" else " && ").join(_q(j) for j in range(1, n + 1)) + ")"


def _term_params(terms: Sequence[str]) -> dict[str, Any]:
    return {f"t{j}": no_nul(t) or "" for j, t in enumerate(terms, 1)}


# Version 1: pgvector, the text search configuration, and the tables with a tsvector column and its GIN index.
_V1 = f"""
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TEXT SEARCH DICTIONARY cairn_stem (TEMPLATE = snowball, Language = english);
CREATE TEXT SEARCH CONFIGURATION {TS_CONFIG} (COPY = pg_catalog.english);
ALTER TEXT SEARCH CONFIGURATION {TS_CONFIG} ALTER MAPPING FOR asciiword, asciihword, hword_asciipart, word, hword,
    hword_part WITH cairn_stem;""" + tables(POSTGRES, chunk_columns=f""",
    tsv TSVECTOR GENERATED ALWAYS AS (
        to_tsvector('{TS_CONFIG}', regexp_replace(heading, {_PUNCT_SQL}, ' ', 'g'))
        || to_tsvector('{TS_CONFIG}', regexp_replace(text, {_PUNCT_SQL}, ' ', 'g'))
    ) STORED""", keyword_index="CREATE INDEX IF NOT EXISTS chunks_tsv ON chunks USING gin(tsv);")
_V2 = SOURCE_UPDATED
# Accents folded as SQLite's FTS5 folds them ("cafe" finds "café"): the tsvector is recomputed for every
# chunk (a table rewrite; run `ctx migrate` before rolling a new version out to the servers).
_V3 = f"""
ALTER TABLE chunks DROP COLUMN tsv;
ALTER TABLE chunks ADD COLUMN tsv TSVECTOR GENERATED ALWAYS AS (
    to_tsvector('{TS_CONFIG}', {_folded('heading')}) || to_tsvector('{TS_CONFIG}', {_folded('text')})
) STORED;
CREATE INDEX chunks_tsv ON chunks USING gin(tsv);
"""
# Version 4 logs chunk changes for SQLite's keyword head index; PostgreSQL ranks in the database: nothing to do.
_V4 = ""
# Same numbering as cairn_servers.ctx.store.MIGRATIONS: version N means the same schema on both backends.
MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4)
assert len(MIGRATIONS) == SCHEMA_VERSION

_MIGRATE_LOCK = 0x63616972_6E000001  # "cairn" + 1: the advisory lock migrations run under
_DF_CAP = 10_000
# Up to this many terms the matching pass has the query inline (the planner estimates its rows from the tsvector
# statistics: a rare term takes the GIN index); with more, the terms' OR is computed once in the ``q`` CTE: planning
# 200 inline phrase queries cost more than running them (200 terms, 20k chunks: 0.75 -> 0.63 s of backend CPU).
INLINE_TERMS = 8  # document frequencies for the IDF weights are counted up to this


def _lock_key(text: str) -> int:
    """A signed 64-bit advisory lock key for ``text``."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big", signed=True)


class PostgresStore(SqlStore):
    """One connection to a PostgreSQL knowledge base (autocommit outside :meth:`transaction`)."""

    native_vectors = True
    dialect = POSTGRES
    migrations = MIGRATIONS

    def __init__(self, url: str, *, migrate: bool = True, vector_index: str = "hnsw") -> None:
        import psycopg

        self.url = url
        self.vector_index = vector_index
        self.label = mask_url(url)
        self._indexed: set[str] = set()  # models whose HNSW index exists
        self._ef = 0
        self._total: tuple[int, float] = (-1, 0.0)  # (generation, chunk count) of the last keyword search
        self._mutex = threading.RLock()
        self._closed = False
        self._statement_ms = 0  # the statement_timeout this store SET on its session (0: the role's own; -1: unsure)
        self._conn = self._connect()
        self.migrated_from = self.migrate() if migrate else self._version()

    def _connect(self) -> Any:
        import psycopg

        try:
            conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10, application_name="ctx")
        except psycopg.Error as exc:
            raise StorageError(
                f"Cannot connect to the knowledge base {self.label}: {self._reason(exc)}. Check [db] url "
                "(or $CTX_DATABASE_URL) and that the server is running.") from None
        try:
            conn.execute("SET hnsw.iterative_scan = relaxed_order")  # pgvector >= 0.8: filters keep k rows
        except psycopg.Error:
            pass
        self._ef = 0
        self._statement_ms = 0
        return conn

    @property
    def db(self) -> "_Guarded":
        """The connection; a lost one (server restart, failover) is replaced on the next use, so a
        long-running server recovers after one failed request (which fails with a StorageError)."""
        if self._conn.closed and not self._closed:
            self._conn = self._connect()
        return _Guarded(self._conn, self)

    def _bound_statement(self, conn: Any) -> None:
        """Before a statement: under a deadline (:mod:`cairn_servers.core.deadline`, a Lua tool's context.search)
        the session's ``statement_timeout`` is the time left, so PostgreSQL cancels the statement there;
        outside one it is back to the role's own (``RESET``)."""
        left = deadline.remaining()
        if left is None:
            if self._statement_ms:
                conn.execute("RESET statement_timeout")
                self._statement_ms = 0
            return
        if left <= 0:
            raise deadline.expired()
        self._statement_ms = max(1, math.ceil(left * 1000))
        conn.execute(f"SET statement_timeout = {self._statement_ms}")

    def _error(self, exc: BaseException) -> StorageError:
        """A driver error as a storage error (exit 7, HTTP 500 with the ``storage`` code) whose message says
        what happened and what to do; never the driver's exception and traceback."""
        import psycopg
        from psycopg import errors

        reason = self._reason(exc)
        if isinstance(exc, errors.ReadOnlySqlTransaction):
            return StorageError(
                f"The knowledge base {self.label} is read-only ({reason}): it is a standby, or the role or database "
                "has default_transaction_read_only = on. Searches work there; run `ctx sync`, `ctx embed` and "
                "`ctx import` against the primary (a [db] url whose role may write).")
        if isinstance(exc, errors.InsufficientPrivilege):
            return StorageError(f"The knowledge base {self.label} refused this: {reason}. Grant the role the "
                                "privileges it needs on the ctx tables, or use the role that created them.")
        if isinstance(exc, errors.QueryCanceled):
            return StorageError(f"The knowledge base {self.label} cancelled a statement: {reason}. Raise the role's "
                                "statement_timeout, or ask for less (fewer terms, a smaller limit).")
        if isinstance(exc, (errors.DiskFull, errors.OutOfMemory, errors.TooManyConnections,
                            errors.ConfigurationLimitExceeded)):
            return StorageError(f"The knowledge base {self.label} is out of a resource: {reason}. Nothing committed "
                                "was lost; free it (disk space, max_connections) and run the command again.")
        if isinstance(exc, psycopg.OperationalError):
            return StorageError(
                f"The knowledge base {self.label} did not answer: {reason}. Check that the database server is "
                "running; the next request connects again.")
        return StorageError(f"The knowledge base {self.label} refused a statement: {reason}. Nothing was changed "
                            "by it; check the database's state with `ctx migrate` and its server log.")

    def _reason(self, exc: BaseException) -> str:
        from cairn_servers.core.sanitize import scrub

        return scrub(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)

    def close(self) -> None:
        self._closed = True
        self._conn.close()

    # ---- schema ------------------------------------------------------------------------------

    def _version(self) -> int:
        row = self.db.execute("SELECT to_regclass('meta') IS NOT NULL").fetchone()
        if not row or not row[0]:
            return 0
        row = self.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row[0]) if row else 0

    @contextmanager
    def _migrating(self) -> Iterator[Callable[[str, Sequence[Any]], Any]]:
        """A transaction under an advisory lock (replicas starting together apply the migrations once); its
        statements run on the bare connection, so the driver's error is judged here."""
        import psycopg

        def run(statement: str, params: Sequence[Any]) -> Any:  # a step without parameters runs as written
            return conn.execute(self.dialect.statement(statement) if params else statement.encode("utf-8"),
                                params or None)

        try:
            with self.db.transaction():
                conn = self._conn
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATE_LOCK,))
                yield run
        except psycopg.Error as exc:
            if isinstance(exc, (psycopg.errors.ReadOnlySqlTransaction, psycopg.OperationalError)):
                raise self._error(exc) from None
            raise StorageError(
                f"Cannot prepare the knowledge base {self.label}: {self._reason(exc)}. The role needs to create "
                "tables and the pgvector extension (CREATE EXTENSION vector) in this database.") from None

    # ---- transactions and locks ------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """BEGIN ... COMMIT, or ROLLBACK on any exception; a lost server is a StorageError."""
        import psycopg

        try:
            with self._mutex, self.db.transaction():
                yield self._conn
        except psycopg.OperationalError as exc:
            self._statement_ms = -1  # a SET inside the transaction was rolled back with it
            raise StorageError(
                f"Cannot write the knowledge base {self.label}: {self._reason(exc)}. Nothing committed was lost; "
                "run the command again.") from None
        except psycopg.Error as exc:  # e.g. a read-only standby, a missing privilege (executemany is not guarded)
            self._statement_ms = -1
            raise self._error(exc) from None
        except BaseException:
            self._statement_ms = -1
            raise

    @contextmanager
    def source_lock(self, source: str) -> Iterator[None]:
        """A session advisory lock on ``source`` for a sync: a second sync of it waits; a killed one
        releases it when its connection ends."""
        key = _lock_key("cairn_servers.ctx.sync\x00" + source)
        self.db.execute("SELECT pg_advisory_lock(%s)", (key,))
        try:
            yield
        finally:
            import psycopg

            try:
                if not self._conn.closed:  # a lost connection took the lock with it
                    self._conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
            except psycopg.Error:  # the connection broke meanwhile: the lock went with it
                pass

    def _run(self, statement: str, params: Sequence[Any] = ()) -> Any:
        return self.db.execute(self.dialect.statement(statement), params or None)

    def _run_many(self, statement: str, rows: Iterable[Sequence[Any]]) -> None:
        with self.db.cursor() as cur:  # (not guarded: only inside transaction(), which judges its errors)
            cur.executemany(self.dialect.statement(statement), rows)

    def size_bytes(self) -> int:
        """The knowledge base's tables with their indexes and TOAST data."""
        row = self.db.execute(
            "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
            " WHERE c.oid IN (to_regclass('meta'), to_regclass('documents'), to_regclass('chunks'),"
            " to_regclass('vectors'), to_regclass('checkpoints'))").fetchone()
        return int(row[0]) if row else 0

    # ---- vectors -----------------------------------------------------------------------------

    def put_vectors(self, model: str, hashes: Sequence[str], blobs: Sequence[bytes]) -> None:
        """Store the vectors (:meth:`SqlStore.put_vectors`), the model's HNSW index created with its first."""
        if hashes:
            self._ensure_index(model, len(blobs[0]) // 4)
        super().put_vectors(model, hashes, blobs)

    def _index_name(self, model: str) -> str:
        return "vectors_hnsw_" + hashlib.sha256(model.encode("utf-8")).hexdigest()[:16]

    def _ensure_index(self, model: str, dims: int) -> None:
        """The partial HNSW index (cosine) over ``model``'s vectors, created with its first vector."""
        from psycopg import sql

        if model in self._indexed or self.vector_index != "hnsw":
            return
        self.db.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATE_LOCK,))
        self.db.execute(sql.SQL(
            "CREATE INDEX IF NOT EXISTS {} ON vectors USING hnsw ((vec::vector({})) vector_cosine_ops)"
            " WHERE model = {}").format(sql.Identifier(self._index_name(model)), sql.Literal(dims),
                                        sql.Literal(model)))
        self._indexed.add(model)

    def vector_search(self, model: str, query: bytes, k: int, *, sources: Sequence[str] | None = None,
                      since: int | None = None, until: int | None = None) -> dict[int, float]:
        """Chunk rowid -> cosine similarity (clipped to [0, 1]) of the ``k`` chunks nearest ``query``
        among those passing the filters, through the model's HNSW index."""
        from psycopg import sql

        dims = len(query) // 4
        if k <= 0 or dims == 0:
            return {}
        ef = min(1000, max(40, k))
        if ef != self._ef:
            self.db.execute("SELECT set_config('hnsw.ef_search', %s, false)", (str(ef),))
            self._ef = ef
        parts, params = self.dialect.filters(sources, since, until)
        vec = vector_text(query)
        cast = sql.SQL("vector({})").format(sql.Literal(dims))
        stmt = sql.SQL(
            "SELECT c.rowid, 1 - ((v.vec::{cast}) <=> %s::{cast}) FROM vectors v JOIN chunks c ON c.hash = v.hash"
            " JOIN documents d ON d.rowid = c.doc WHERE v.model = {model}{filters}"
            " ORDER BY (v.vec::{cast}) <=> %s::{cast} LIMIT %s").format(
                cast=cast, model=sql.Literal(model),
                filters=sql.SQL("".join(" AND " + p.replace("?", "%s") for p in parts)))  # (our text: no other ?)
        rows = self.db.execute(stmt, (vec, *params, vec, k))
        return {int(r): max(0.0, min(1.0, float(s))) for r, s in rows}

    # ---- full-text search ----------------------------------------------------------------------
    # A keyword statement takes the query's terms as parameters and turns each into a phrase query of its
    # folded words in SQL, as the index folded the chunks: one round trip per search, with the terms'
    # counts, the IDF weights and the ranking in it.

    def _keyword(self, terms: Sequence[str], operator: str, k: int, *, budget: int | None = None,
                 counts: Sequence[int | None] = (), sources: Sequence[str] | None = None, since: int | None = None,
                 until: int | None = None, min_rowid: int = 0) -> tuple[list[int], dict[int, float]]:
        """(each term's chunk count, chunk rowid -> score of the best ``k`` chunks the terms joined with
        ``operator`` find among those passing the filters), in one statement and one pass over the
        matching chunks.

        With ``budget`` (the first try of a search), that pass stops after ``budget + 1`` chunks and ranks
        nothing when the terms' counts add up to more than ``budget``; a term's count then comes from its
        own scan, up to ``budget + 1``. Without it, counts come from ``counts`` where given, else from
        the term's own scan up to 10,000 (the IDF weights need no more).

        The terms are parameters the SQL folds and parses inline, so the planner sees the query as a
        constant and estimates its rows from the ``tsvector`` statistics (a rare term: the GIN index);
        the statement is therefore never prepared (a generic plan would not know the query). Past
        :data:`INLINE_TERMS` terms the OR is computed once instead (planning it cost more than running it).

        Cost: each matching chunk's ``tsvector`` is read once (not once per term, which decompressed it
        again for every ``ts_rank``), and a first try over its budget ranks nothing. A 200-term query over
        20,000 chunks went from 3.26 s to 0.58 s of backend CPU (benchmarks/ctx_pg_keyword.py); what is
        left grows with chunks x terms (a ``ts_rank`` per pair), so the number of terms is what bounds it."""
        n = len(terms)
        if n == 0:
            return [], {}
        js = range(1, n + 1)
        params: dict[str, Any] = {**_term_params(terms), "k": k, "budget": budget, "gen": self._total[0],
                                  "total": self._total[1], "cap": _DF_CAP if budget is None else budget + 1}
        for j, c in zip(js, list(counts) or [None] * n):
            params[f"n{j}"] = c
        conds = []
        if sources is not None:
            conds.append("d.source = ANY(%(sources)s)")
            params["sources"] = list(sources)
        if since is not None:
            conds.append("d.updated_at >= %(since)s")
            params["since"] = since
        if until is not None:
            conds.append("d.updated_at < %(until)s")
            params["until"] = until
        if min_rowid:
            params["min_rowid"] = min_rowid
        join = " JOIN documents d ON d.rowid = m.doc" if conds else ""
        query = _joined(n, operator)
        inline = n <= INLINE_TERMS
        own_count = "(SELECT count(*) FROM (SELECT 1 FROM chunks WHERE tsv @@ q.q{j} LIMIT %(cap)s) AS x)"
        if budget is not None:  # complete pass: its counts; cut short: each term's own (over budget anyway)
            conds.append(f"(SELECT {' + '.join(f'n{j}' for j in js)} FROM df) <= %(budget)s")
            df = ("tally AS MATERIALIZED (SELECT (SELECT count(*) FROM found) AS n, " + ", ".join(
                f"count(*) FILTER (WHERE m{j}) AS c{j}" for j in js) + " FROM m), df AS MATERIALIZED (SELECT " + ", ".join(
                f"CASE WHEN q.q{j} IS NULL THEN 0 WHEN tally.n <= %(budget)s THEN tally.c{j} ELSE "
                + own_count.format(j=j) + f" END AS n{j}" for j in js) + " FROM tally, q)")
        else:
            df = "df AS MATERIALIZED (SELECT " + ", ".join(
                f"CASE WHEN q.q{j} IS NULL THEN 0 ELSE COALESCE(%(n{j})s::bigint, " + own_count.format(j=j)
                + f") END AS n{j}" for j in js) + " FROM q)"
        single = "(" + " + ".join(f"(q.q{j} IS NOT NULL)::int" for j in js) + ") = 1"
        stmt = (
            # Each term's phrase query, NULL for a term without a word (it then matches and weighs nothing).
            "WITH q AS MATERIALIZED (SELECT " + ", ".join(
                f"CASE WHEN numnode({_q(j)}) > 0 THEN {_q(j)} END AS q{j}" for j in js)
            + ("" if inline else f", {query} AS qq") + "), "
            # The one pass: every matching chunk (up to the budget), its tsvector read once: ``|| ''`` makes an
            # in-memory copy, where each ts_rank call below would otherwise fetch and decompress a TOASTed
            # value again (200 terms: 4.3 s -> 0.5 s for 8,000 chunks).
            f"found AS MATERIALIZED (SELECT c.rowid, c.doc, c.tsv || ''::tsvector AS tsv FROM chunks c"
            + (f" WHERE numnode({query}) > 0 AND c.tsv @@ {query}" if inline
               else " WHERE numnode((SELECT qq FROM q)) > 0 AND c.tsv @@ (SELECT qq FROM q)")
            + (" AND c.rowid >= %(min_rowid)s" if min_rowid else "")
            + (" LIMIT %(cap)s" if budget is not None else " OFFSET 0") + "), "
            # Each term's ts_rank and which terms a chunk has (a one-word term: its rank is positive; a phrase
            # needs its own match, as ts_rank ignores word order); none when the pass is over the budget.
            "m AS MATERIALIZED (SELECT rowid, doc, " + ", ".join(
                f"CASE WHEN numnode(q{j}) = 1 THEN r{j} > 0 ELSE tsv @@ q{j} END AS m{j}" for j in js) + ", "
            + ", ".join(f"r{j}" for j in js) + " FROM (SELECT f.rowid, f.doc, f.tsv, "
            + ", ".join(f"q.q{j}, ts_rank(f.tsv, q.q{j}, 1) AS r{j}" for j in js) + " FROM found f, q"
            + (" WHERE (SELECT count(*) FROM found) <= %(budget)s" if budget is not None else "")
            + f" OFFSET 0) AS ranked), {df}, "
            # The chunk count for the IDF weights: this process's copy while the generation has not moved.
            "total AS MATERIALIZED (SELECT g.gen, CASE WHEN g.gen = %(gen)s THEN %(total)s::float8 ELSE (SELECT CASE"
            " WHEN reltuples >= 100000 THEN reltuples::float8 ELSE (SELECT count(*) FROM chunks)::float8 END"
            " FROM pg_class WHERE oid = to_regclass('chunks')) END AS n"
            " FROM (SELECT value::bigint AS gen FROM meta WHERE key = 'generation') AS g), "
            # BM25's inverse document frequency per term (ts_rank has none); one term: 1.0, the weight is moot.
            "w AS MATERIALIZED (SELECT " + ", ".join(
                f"CASE WHEN {single} THEN 1.0::float8 ELSE ln((total.n - df.n{j} + 0.5) / (df.n{j} + 0.5) + 1.0) END"
                f" AS w{j}" for j in js) + " FROM df, total, q), "
            "hits AS (SELECT m.rowid, (" + " + ".join(f"COALESCE(w.w{j} * m.r{j}, 0)" for j in js)
            + f") AS s FROM m CROSS JOIN w{join}" + (" WHERE " + " AND ".join(conds) if conds else "")
            + " ORDER BY s DESC, m.rowid LIMIT %(k)s) "
            f"SELECT 0, NULL::bigint, NULL::float8, ARRAY[{', '.join(f'df.n{j}' for j in js)}]::bigint[], total.gen,"
            " total.n FROM df, total UNION ALL SELECT 1, rowid, s, NULL, NULL, NULL FROM hits ORDER BY 1, 3 DESC, 2")
        rows = self.db.execute(stmt.encode("utf-8"), params, prepare=False).fetchall()
        if not rows or rows[0][0] != 0:  # no generation row: a database migrate() has not finished
            return [0] * n, {}
        head = rows[0]
        self._total = (int(head[4]), float(head[5]))
        return [int(c) for c in head[3]], {int(r[1]): float(r[2]) for r in rows[1:]}

    def fts_try_rank(self, terms: Sequence[str], k: int, budget: int, *, sources: Sequence[str] | None = None,
                     since: int | None = None, until: int | None = None) -> tuple[list[int], dict[int, float] | None]:
        """Each term's chunk count (up to ``budget + 1``) and, when they add up to at most ``budget``, what
        :meth:`fts_rank` answers for the OR of the terms (else None): one statement."""
        counts, scores = self._keyword(terms, "OR", k, budget=budget, sources=sources, since=since, until=until)
        return counts, scores if sum(counts) <= budget else None

    def fts_count(self, match: Match, cap: int) -> int:
        terms = list(dict.fromkeys(match.terms))
        stmt = (f"SELECT count(*) FROM (SELECT 1 FROM chunks c WHERE c.tsv @@ {_joined(len(terms), match.operator)}"
                " LIMIT %(cap)s) AS m")
        row = self.db.execute(stmt.encode("utf-8"), {**_term_params(terms), "cap": cap + 1}, prepare=False).fetchone()
        return int(row[0]) if row else 0

    def fts_newest_rowid(self, match: Match, offset: int) -> int:
        terms = list(dict.fromkeys(match.terms))
        stmt = (f"SELECT c.rowid FROM chunks c WHERE c.tsv @@ {_joined(len(terms), match.operator)}"
                " ORDER BY c.rowid DESC LIMIT 1 OFFSET %(offset)s")
        row = self.db.execute(stmt.encode("utf-8"), {**_term_params(terms), "offset": offset},
                              prepare=False).fetchone()
        return int(row[0]) if row else 0

    def fts_rank(self, match: Match, k: int, *, sources: Sequence[str] | None = None, since: int | None = None,
                 until: int | None = None, min_rowid: int = 0, df: Mapping[str, int] | None = None) -> dict[int, float]:
        """Chunk rowid -> positive score, the best ``k`` chunks ``match`` finds among those whose document
        is in ``sources`` and was updated in [since, until), from ``min_rowid`` on: ``ts_rank`` weighted per
        term by BM25's IDF, from the terms' chunk counts in ``df`` (counted here, up to 10,000, when absent)."""
        terms = list(dict.fromkeys(match.terms))
        return self._keyword(terms, match.operator, k, counts=[(df or {}).get(t) for t in terms],
                             sources=sources, since=since, until=until, min_rowid=min_rowid)[1]

    # ---- export / import (cairn_servers.ctx.transfer) ------------------------------------------------------

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """A read-only REPEATABLE READ transaction: every query inside sees the same committed state
        (writers are not blocked), as SQLite's read transaction does; a lost server is a StorageError."""
        import psycopg

        try:
            with self._mutex, self.db.transaction():
                self.db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                yield
        except psycopg.Error as exc:
            if not isinstance(exc, psycopg.OperationalError):
                raise self._error(exc) from None
            raise StorageError(
                f"Cannot read the knowledge base {self.label}: {self._reason(exc)}. Check that the database server "
                "is running, and run the command again.") from None

    @contextmanager
    def try_source_lock(self, source: str) -> Iterator[bool]:
        """:meth:`source_lock` without waiting: yields whether it was taken (False: another session holds it)."""
        key = _lock_key("cairn_servers.ctx.sync\x00" + source)
        row = self.db.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
        if not (row and row[0]):
            yield False
            return
        try:
            yield True
        finally:
            import psycopg

            try:
                if not self._conn.closed:
                    self._conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
            except psycopg.Error:  # the connection broke meanwhile: the lock went with it
                pass

class _Guarded:
    """A connection whose ``execute`` reports a lost server as a :class:`StorageError` (exit 7, HTTP 500
    with the ``storage`` code and a fix) instead of a driver exception."""

    __slots__ = ("conn", "store")

    def __init__(self, conn: Any, store: PostgresStore) -> None:
        self.conn = conn
        self.store = store

    def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None) -> Any:
        import psycopg

        try:
            self.store._bound_statement(self.conn)
            # A caller that gives up (its client disconnected) cancels the statement on the server.
            with deadline.on_cancel(self._cancel):
                return self.conn.execute(query, params, prepare=prepare)
        except psycopg.Error as exc:
            raise self.store._error(exc) from None

    def _cancel(self) -> None:
        """Ask the server to cancel this connection's running statement (from the watcher thread)."""
        try:
            self.conn.cancel_safe(timeout=5.0)
        except Exception:
            pass  # the statement ends on its own; its connection is not reused (see ServicePool.lease)

    def cursor(self) -> Any:
        return self.conn.cursor()

    def transaction(self) -> Any:
        return self.conn.transaction()
