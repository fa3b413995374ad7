"""The knowledge base's storage: the :class:`KnowledgeStore` interface and its SQLite implementation.

Two implementations with the same behaviour, chosen at start by :func:`cairn_servers.ctx.stores.open_store`: this module's
:class:`SqliteStore` (one SQLite file, WAL, FTS5; the embedded default) and
:class:`cairn_servers.ctx.store_pg.PostgresStore` (PostgreSQL + pgvector, ``[db] url``, imported only when
configured). They are the only places that run SQL; everything else calls their named methods. The statements
both run are written once, with their dialect differences named, in :mod:`cairn_servers.ctx.sql`; this module
adds what only SQLite does (the file and its connection, FTS5 keyword search, the schema's SQLite steps).

SQLite: one database (WAL) with documents, chunks, FTS5, vectors, checkpoints.

Every change happens inside a transaction, so a process killed at any moment leaves the last
committed state intact and searchable. Chunks are stored with their content hash; vectors are keyed
by (hash, model), so a chunk whose text did not change keeps its vector across syncs, and two
identical chunks share one vector. The ``generation`` counter in ``meta`` moves on every commit that
changes chunks or vectors, which tells in-memory caches (the vector matrix) to reload.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ContextManager, Protocol

from cairn_servers.core import deadline
from cairn_servers.core.errors import Cancelled, StorageError, Timeout
from cairn_servers.ctx.chunk import Chunk
from cairn_servers.ctx.sql import SOURCE_UPDATED, SQLITE, SqlStore, tables
# (re-exported: the names callers import from here, an earlier tree's store_pg.py among them, which
# benchmarks/ctx_pg_keyword.py --baseline loads beside this one)
from cairn_servers.ctx.sql import SCHEMA_VERSION as SCHEMA_VERSION, DocumentRecord as DocumentRecord, Known as Known
from cairn_servers.ctx.sql import document_id as document_id
from cairn_servers.ctx.sql import CHECKPOINT_COLUMNS as CHECKPOINT_COLUMNS, EXPORTED_COLUMNS as EXPORTED_COLUMNS
from cairn_servers.ctx.sql import checkpoint_map as checkpoint_map, exported_row as exported_row

# SQLite's schema migrations (see cairn_servers.ctx.sql.SCHEMA_VERSION). Version 1: the tables, with FTS5 as the
# keyword index, kept in step with the chunks by triggers.
_V1 = tables(SQLITE, keyword_index="""
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    heading, text, content='chunks', content_rowid='rowid', tokenize='porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS chunks_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts(rowid, heading, text) VALUES (new.rowid, new.heading, new.text);
END;
CREATE TRIGGER IF NOT EXISTS chunks_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, heading, text) VALUES ('delete', old.rowid, old.heading, old.text);
END;
""")
_V2 = SOURCE_UPDATED
# Version 3 folds accents in PostgreSQL's keyword index; FTS5 (remove_diacritics 2) always did: nothing to do.
_V3 = ""
# Version 4: every inserted and deleted chunk rowid logged, in the writing transaction, once a keyword head index
# (cairn_servers.ctx.keyword_index) was first built (``meta.keyword_log``): it catches up from the log, and its
# builds trim it.
_V4 = """
CREATE TABLE IF NOT EXISTS keyword_log(seq INTEGER PRIMARY KEY AUTOINCREMENT, chunk INTEGER NOT NULL, op INTEGER NOT NULL);
CREATE TRIGGER IF NOT EXISTS chunks_log_ai AFTER INSERT ON chunks
WHEN EXISTS (SELECT 1 FROM meta WHERE key = 'keyword_log') BEGIN
    INSERT INTO keyword_log(chunk, op) VALUES (new.rowid, 1);
END;
CREATE TRIGGER IF NOT EXISTS chunks_log_ad AFTER DELETE ON chunks
WHEN EXISTS (SELECT 1 FROM meta WHERE key = 'keyword_log') BEGIN
    INSERT INTO keyword_log(chunk, op) VALUES (old.rowid, 0);
END;
"""
MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4)
assert len(MIGRATIONS) == SCHEMA_VERSION


_FULL_FIX = "The disk is full: free some space and run the command again; nothing indexed was lost."


def _disk_full(path: Path, exc: BaseException) -> bool:
    """Whether a SQLite error comes from a full disk (which SQLite may report as a disk I/O error)."""
    if "full" in str(exc):
        return True
    import shutil

    try:
        return shutil.disk_usage(path.parent).free < (1 << 20)
    except OSError:
        return False


@dataclass(frozen=True)
class Match:
    """A keyword query as the stores take it: the user's terms (quoted phrases kept whole) joined
    with ``AND`` or ``OR``. Each store builds its own syntax from it (FTS5 ``MATCH``, a ``tsquery``),
    so raw user text never reaches the index."""

    terms: tuple[str, ...]
    operator: str = "OR"

    def fts5(self) -> str:
        """The FTS5 ``MATCH`` expression: every term an FTS5 string literal (its tokenizer splits
        ``use-effect`` into the phrase ``use effect``)."""
        from cairn_servers.search.query import literal

        return f" {self.operator} ".join(literal(t) for t in dict.fromkeys(self.terms))


class KnowledgeStore(Protocol):
    """What the service, sync, retrieval and tools need from the knowledge base's storage.

    Writes happen inside :meth:`transaction`; ``rowid``s of documents and chunks are stable integers
    (a chunk's rowid orders chunks by indexing time). Both implementations pass one test suite
    (tests/ctx, parametrised over ``sqlite`` and ``postgres``).
    """

    label: str  # where the data lives, safe to print (a path, or a URL with its password masked)
    native_vectors: bool  # True: :meth:`vector_search` ranks in the database; False: retrieval's in-memory matrix
    migrated_from: int  # the schema version found at open (0: new); migrations up to SCHEMA_VERSION then ran

    def close(self) -> None: ...
    def transaction(self) -> ContextManager[object]: ...
    def source_lock(self, source: str) -> ContextManager[None]: ...
    def bump(self) -> None: ...
    def generation(self) -> int: ...
    def schema_version(self) -> int: ...
    def known(self, source: str) -> dict[str, Known]: ...
    def upsert(self, doc: DocumentRecord, chunks: Sequence[Chunk]) -> None: ...
    def document(self, doc_id: str) -> tuple[Any, ...] | None: ...
    def document_chunks(self, rowid: int) -> list[tuple[int, str, str, str]]: ...
    def chunk_documents(self, chunk_rowids: Sequence[int]) -> dict[int, str]: ...
    def chunk_hits(self, chunk_rowids: Sequence[int]) -> dict[int, tuple[str, str, str, str, int, str | None, str]]: ...
    def source_labels(self) -> set[str]: ...
    def document_counts(self) -> dict[str, int]: ...
    def counts(self) -> tuple[int, int, int]: ...
    def size_bytes(self) -> int: ...
    def set_fingerprint(self, rowid: int, fingerprint: str, updated_at: int) -> None: ...
    def delete(self, rowids: Sequence[int]) -> None: ...
    def drop_orphan_vectors(self) -> int: ...
    def pending(self, model: str, limit: int) -> list[tuple[str, str, str]]: ...
    def pending_count(self, model: str) -> int: ...
    def put_vectors(self, model: str, hashes: Sequence[str], blobs: Sequence[bytes]) -> None: ...
    def vector_count(self, model: str) -> int: ...
    def clear_vectors(self) -> None: ...
    def vector_rows(self, model: str) -> list[tuple[int, str, int, bytes]]: ...
    def vector_chunks(self) -> list[tuple[int, str, str, int]]: ...
    def vector_blobs(self, model: str) -> Iterator[tuple[str, bytes]]: ...
    def vector_search(self, model: str, query: bytes, k: int, *, sources: Sequence[str] | None = None,
                      since: int | None = None, until: int | None = None) -> dict[int, float]: ...
    def fts_try_rank(self, terms: Sequence[str], k: int, budget: int, *, sources: Sequence[str] | None = None,
                     since: int | None = None, until: int | None = None) -> tuple[list[int], dict[int, float] | None]: ...
    def fts_count(self, match: Match, cap: int) -> int: ...
    def fts_newest_rowid(self, match: Match, offset: int) -> int: ...
    def fts_rank(self, match: Match, k: int, *, sources: Sequence[str] | None = None, since: int | None = None,
                 until: int | None = None, min_rowid: int = 0,
                 df: Mapping[str, int] | None = None) -> dict[int, float]: ...
    def checkpoint(self, source: str, status: str, *, documents: int = 0, error: str | None = None) -> None: ...
    def checkpoints(self) -> dict[str, dict[str, Any]]: ...
    def sql(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...
    # export / import (cairn_servers.ctx.transfer): a consistent read, and batches in rowid (hash) order
    def snapshot(self) -> ContextManager[None]: ...
    def has_documents(self) -> bool: ...
    def has_document(self, doc_id: str) -> bool: ...
    def chunks_after(self, rowid: int, limit: int) -> list[tuple[int, int, int, str, str, str]]: ...
    def documents_by_rowid(self, rowids: Sequence[int]) -> dict[int, tuple[Any, ...]]: ...
    def chunkless_documents_after(self, rowid: int, limit: int) -> list[tuple[Any, ...]]: ...
    def vectors_after(self, model: str, hash: str, limit: int) -> list[tuple[str, bytes]]: ...
    # background embedding, and the count of chunks semantic search cannot see yet
    def try_source_lock(self, source: str) -> ContextManager[bool]: ...
    def unembedded_chunks(self, model: str) -> int: ...
    def embedded_chunks(self, model: str, chunk_rowids: Sequence[int]) -> set[int]: ...


class SqliteStore(SqlStore):
    """One connection to the knowledge base's SQLite database."""

    native_vectors = False
    dialect = SQLITE
    migrations = MIGRATIONS

    def __init__(self, path: Path, *, create: bool = False, migrate: bool = True) -> None:
        self.path = Path(path)
        self._helper: sqlite3.Connection | None = None  # the second connection of a split ranking
        self._fts_found: dict[tuple[Any, ...], Any] = {}  # see _fts_known
        self._fts_rows = 0
        self._fts_state: tuple[int, int] | None = None
        self.label = str(self.path)
        if not create and not self.path.exists():
            from cairn_servers.core.errors import NotFound

            raise NotFound(f"No knowledge base at {self.path}. Run `ctx init` (or `ctx sync all`) first.")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA busy_timeout = 10000")
            self._wal()
            self.db.execute("PRAGMA synchronous = NORMAL")
            self.db.execute("PRAGMA foreign_keys = ON")
            self.db.execute("PRAGMA cache_size = -65536")
            # A statement past its thread's deadline (a Lua tool's context.search) or whose caller gave up
            # (its client disconnected) stops: "interrupted".
            self.db.set_progress_handler(deadline.passed, PROGRESS_EVERY)
            self.migrated_from = self.migrate() if migrate else self._version()
        except sqlite3.DatabaseError as exc:
            if _disk_full(self.path, exc):
                raise StorageError(f"Cannot open the knowledge base {self.path}: {exc}. {_FULL_FIX}") from exc
            raise StorageError(f"Cannot open the knowledge base {self.path}: {exc}. Move it aside and run `ctx sync all --full`.") from exc

    def _wal(self) -> None:
        """``PRAGMA journal_mode = WAL``. SQLite answers "database is locked" at once, without its busy
        handler, while another process opens the same new database (two syncs started together): so
        this waits as the busy timeout would, 10 s at most."""
        import time

        give_up = time.monotonic() + 10
        while True:
            try:
                self.db.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > give_up:
                    raise
                time.sleep(0.02)

    def _run(self, statement: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self.db.execute(statement, params)

    def _run_many(self, statement: str, rows: Iterable[Sequence[Any]]) -> None:
        self.db.executemany(statement, rows)

    @contextmanager
    def _migrating(self) -> Iterator[Callable[[str, Sequence[Any]], Any]]:
        with self.transaction():
            yield self.db.execute

    def _version(self) -> int:
        try:
            row = self.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.OperationalError:  # no meta table: a new database
            return 0
        return int(row[0]) if row else 0

    @contextmanager
    def source_lock(self, source: str) -> Iterator[None]:
        """Held while one process syncs ``source``: a second sync of it waits. SQLite serialises
        writers itself (BEGIN IMMEDIATE) and upserts by (source, source_id), so this only saves the
        second sync from repeating the first one's work: an advisory lock on a file beside the database."""
        import fcntl

        lock = self.path.parent / f".{self.path.name}.sync-{hashlib.sha256(source.encode()).hexdigest()[:16]}.lock"
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def vector_search(self, model: str, query: bytes, k: int, *, sources: Sequence[str] | None = None,
                      since: int | None = None, until: int | None = None) -> dict[int, float]:
        raise NotImplementedError("SQLite vectors are searched in memory (cairn_servers.ctx.vectorfile.VectorMatrix)")

    def close(self) -> None:
        helper, self._helper = self._helper, None
        if helper is not None:
            helper.close()
        self.db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception."""
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:  # locked past busy_timeout, read-only file, full disk
            raise StorageError(f"Cannot write the knowledge base {self.path}: {exc}. Check that no other process "
                               "holds it for long and that the file is writable, then run the command again; "
                               "nothing indexed was lost.") from exc
        try:
            yield self.db
            self.db.execute("COMMIT")
        except BaseException as exc:
            if self.db.in_transaction:  # SQLite has already rolled back after SQLITE_FULL / IOERR
                self.db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError):  # full disk, I/O error, locked too long
                fix = _FULL_FIX if _disk_full(self.path, exc) else (
                    "Check free space and the file's permissions, then run the command again; nothing "
                    "indexed was lost.")
                raise StorageError(f"Cannot write the knowledge base {self.path}: {exc}. {fix}") from exc
            raise

    def size_bytes(self) -> int:
        """The database's size on disk, its WAL and shared-memory files included."""
        return sum(p.stat().st_size for p in self.path.parent.glob(self.path.name + "*") if p.is_file())

    # ---- full-text search ----------------------------------------------------------------------

    def fts_try_rank(self, terms: Sequence[str], k: int, budget: int, *, sources: Sequence[str] | None = None,
                     since: int | None = None, until: int | None = None) -> tuple[list[int], dict[int, float] | None]:
        """Each term's chunk count (up to ``budget + 1``) and, when they add up to at most ``budget``, what
        :meth:`fts_rank` answers for the OR of the terms (else None, nothing ranked)."""
        counts = [self.fts_count(Match((t,)), budget) for t in terms]
        if sum(counts) > budget:
            return counts, None
        return counts, self.fts_rank(Match(tuple(terms)), k, sources=sources, since=since, until=until,
                                     df=dict(zip(terms, counts)))

    def fts_exact(self, terms: Sequence[str], k: int, *, sources: Sequence[str] | None = None,
                  since: int | None = None, until: int | None = None) -> dict[int, float] | None:
        """What :meth:`fts_rank` answers for the OR of ``terms``, ranked exactly however common they are, by the
        keyword head index (:mod:`cairn_servers.ctx.keyword_index`); None when this database has none usable yet
        (one is then built in the background)."""
        from cairn_servers.ctx import keyword_index

        if self.db.in_transaction:  # (a caller's write transaction: its uncommitted rows are not in the log's view)
            return None
        known = self._fts_known()
        key = ("exact", tuple(terms), k, tuple(sources) if sources is not None else None, since, until)
        ranked = known.get(key)
        if ranked is not None:
            return dict(ranked)
        parts, params = self.dialect.filters(sources, since, until)

        def admit(rowids: list[int]) -> set[int]:
            found: set[int] = set()
            for cond, ids in self.dialect.ids("c.rowid", rowids):
                found.update(int(r) for r, in self.db.execute(
                    f"SELECT c.rowid FROM chunks c JOIN documents d ON d.rowid = c.doc WHERE {cond}"
                    + "".join(" AND " + p for p in parts), (*ids, *params)))
            return found

        try:
            with self.snapshot():
                hs = keyword_index.state(self)
                if hs is None:
                    return None
                out = keyword_index.rank(self, list(dict.fromkeys(terms)), k, admit if parts else None, hs)
        except sqlite3.OperationalError as exc:
            if "interrupt" in str(exc):  # a deadline or a client gone: the caller's error
                raise
            return None  # no log table (a database opened without its migrations): FTS5 ranks within its budget
        if out is not None and len(out) <= FTS_KNOWN_ROWS:
            known[key] = tuple(out.items())
            self._fts_rows += len(out)
        return out

    def fts_count(self, match: Match, cap: int) -> int:
        """How many chunks the FTS5 query ``match`` finds, counting no further than ``cap + 1``."""
        known = self._fts_known()
        expr = match.fts5()
        counted = known.get(("count", expr))
        if counted is not None:
            count, upto = counted
            if count <= upto or cap <= upto:  # exact, or already past this cap
                return min(int(count), cap + 1)
        row = self.db.execute(
            "SELECT count(*) FROM (SELECT 1 FROM chunks_fts WHERE chunks_fts MATCH ? LIMIT ?)", (expr, cap + 1)
        ).fetchone()
        known[("count", expr)] = (int(row[0]), cap)
        return int(row[0])

    def fts_newest_rowid(self, match: Match, offset: int) -> int:
        """The rowid of the ``offset``-th most recently indexed chunk ``match`` finds (0 when fewer)."""
        known = self._fts_known()
        expr = match.fts5()
        found = known.get(("newest", expr, offset))
        if found is not None:
            return int(found[0])
        row = self.db.execute(
            "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rowid DESC LIMIT 1 OFFSET ?",
            (expr, offset),
        ).fetchone()
        known[("newest", expr, offset)] = (int(row[0]) if row else 0, offset)
        return int(row[0]) if row else 0

    def _fts_known(self) -> dict[tuple[Any, ...], Any]:
        """What keyword search found since the data last changed: term counts and newest rowids (~0.5 ms each) and
        rankings (up to tens of ms; queries over the budget share the plan of their rarest common term, so the
        slowest rankings are the ones asked again). Kept while ``PRAGMA data_version`` (another connection's
        commits) and this connection's ``total_changes`` (its own writes) stay the same, so an answer is always
        the current data's; at most FTS_KNOWN_MAX entries and FTS_KNOWN_ROWS ranked rows, then it starts again."""
        state = (self.db.execute("PRAGMA data_version").fetchone()[0], self.db.total_changes)
        if (state != self._fts_state or len(self._fts_found) >= FTS_KNOWN_MAX
                or self._fts_rows >= FTS_KNOWN_ROWS):
            self._fts_found = {}
            self._fts_rows = 0
            self._fts_state = state
        return self._fts_found

    def fts_rank(self, match: Match, k: int, *, sources: Sequence[str] | None = None, since: int | None = None,
                 until: int | None = None, min_rowid: int = 0, df: Mapping[str, int] | None = None) -> dict[int, float]:
        """Chunk rowid -> positive BM25 score, the best ``k`` chunks ``match`` finds among those whose
        document is in ``sources`` and was updated in [since, until), from ``min_rowid`` on.

        ``df``: the terms' chunk counts when the caller has them (FTS5 weighs the terms itself). They say how
        much there is to rank: from :data:`SPLIT_MIN` matching chunks on, the ranking runs as two halves side by
        side (:meth:`_split_rank`), with the same scores and order."""
        parts, params = self.dialect.filters(sources, since, until)
        if parts:
            rowid = "f.rowid"
            head = ("SELECT f.rowid, -bm25(chunks_fts) AS s FROM chunks_fts f JOIN chunks c ON c.rowid = f.rowid"
                    " JOIN documents d ON d.rowid = c.doc WHERE chunks_fts MATCH ?")
        else:
            # Not ``ORDER BY rank``: FTS5 answers that from a nested statement that sorts every match before the
            # LIMIT applies (~25% slower at 100k chunks); this is the same scores with SQLite's top-k sort, ties by
            # rowid. No join when only ``min_rowid`` filters: it filters nothing here and cost up to 2x (100k chunks).
            rowid = "rowid"
            head = "SELECT rowid, -bm25(chunks_fts) AS s FROM chunks_fts WHERE chunks_fts MATCH ?"
        if min_rowid:
            parts.append(f"{rowid} >= ?")
            params.append(min_rowid)
        where = head + "".join(" AND " + p for p in parts)
        tail = f" ORDER BY s DESC, {rowid} LIMIT ?"
        args = (match.fts5(), *params)
        known = self._fts_known()
        key = ("rank", where, args, k)
        ranked = known.get(key)
        if ranked is not None:
            return dict(ranked)
        split = None
        if df is not None and sum(df.get(t, 0) for t in dict.fromkeys(match.terms)) >= SPLIT_MIN:
            split = self._split_rank(f"{where} AND {rowid} % 2 = ?{tail}", args, k)
        out = split if split is not None else {int(r): float(s) for r, s in self.db.execute(where + tail, (*args, k))}
        if len(out) <= FTS_KNOWN_ROWS:  # (had the data changed meanwhile, the next call finds a new state: cleared)
            known[key] = tuple(out.items())
            self._fts_rows += len(out)
        return out

    def _split_rank(self, sql: str, args: tuple[Any, ...], k: int) -> dict[int, float] | None:
        """The ranking ``sql`` (its last two parameters: a rowid's parity, the limit) as two halves, the even
        rowids on this connection and the odd ones on a second connection in a helper thread (sqlite3 releases
        the GIL), merged by score then rowid; None when it is not done (the caller ranks in one statement).

        Exact: ``bm25()`` scores a row from the row and table-wide figures (each term's document count, the
        row count, the average length), never from which rows the statement reads, so a row scores the same in
        either half and the best ``k`` of the union are the best ``k`` of the whole. Both halves must read the
        same committed state: ``PRAGMA data_version``, which moves when another connection commits, is read
        before and after, and the halves are dropped if it moved. Not done inside a transaction of this
        connection (its uncommitted state is not the other connection's), when the helper thread is busy with
        another search of this process (one helper: no more busy threads than the 2 cores), nor for a while
        after a split found no free core (see :func:`_starved`): then the halves cost more than the whole."""
        if self.db.in_transaction or time.monotonic() < _split_state["idle_until"]:
            return None
        if not _split_slot.acquire(blocking=False):
            return None
        try:
            from concurrent.futures import wait

            helper = self._helper
            if helper is None:
                if not self.path.is_file():
                    return None
                try:
                    helper = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
                    helper.execute("PRAGMA query_only = ON")
                    helper.execute("PRAGMA busy_timeout = 10000")
                    helper.execute("PRAGMA cache_size = -16384")  # 16 MiB: a few terms' FTS pages (the main one: 64)
                    helper.set_progress_handler(deadline.passed, PROGRESS_EVERY)
                except sqlite3.Error:
                    return None  # one statement on the store's connection answers
                self._helper = helper
            version = self.db.execute("PRAGMA data_version").fetchone()
            theirs = _split_pool().submit(_under, deadline.at(), deadline.cancel_check(), _timed_fetch, helper, sql,
                                            (*args, 1, k))
            try:
                mine = _timed_fetch(self.db, sql, (*args, 0, k))
            finally:
                wait([theirs])
            try:
                other = theirs.result()
            except Timeout:  # the helper's half passed this thread's deadline: this thread's own error
                raise deadline.expired() from None
            except Cancelled:  # its caller gave up: this thread's too
                raise Cancelled("The search was cancelled: its client went away or cancelled it.") from None
            except sqlite3.Error:
                return None  # the helper could not read (busy, I/O): one statement answers, or fails as before
            _split_state["splits"] += 1
            if _starved(mine[1], mine[2]) or _starved(other[1], other[2]):
                _split_state["idle_until"] = time.monotonic() + SPLIT_BACKOFF_S
                _split_state["backoffs"] += 1
            if self.db.execute("PRAGMA data_version").fetchone() != version:
                return None  # another connection committed meanwhile: the halves may have read different states
        finally:
            _split_slot.release()
        rows = mine[0] + other[0]
        rows.sort(key=lambda r: (-r[1], r[0]))
        return {int(r): float(s) for r, s in rows[:k]}

    # ---- export / import (cairn_servers.ctx.transfer) ------------------------------------------------------

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """A read transaction: every query inside sees the same committed state (writers are not blocked).
        Inside a transaction already open on this connection, that transaction is the snapshot."""
        if self.db.in_transaction:
            yield
            return
        self.db.execute("BEGIN")
        try:
            yield
        finally:
            self.db.execute("COMMIT")

    @contextmanager
    def try_source_lock(self, source: str) -> Iterator[bool]:
        """:meth:`source_lock` without waiting: yields whether it was taken (False: another process holds it)."""
        import fcntl

        lock = self.path.parent / f".{self.path.name}.sync-{hashlib.sha256(source.encode()).hexdigest()[:16]}.lock"
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)


Store = SqliteStore  # the name callers used before the PostgreSQL backend (benchmarks/ctx.py)


PROGRESS_EVERY = 10_000  # SQLite VM steps between deadline checks (~0.1 ms of work; a Python call each)
FTS_KNOWN_MAX = 4096  # counts, newest rowids and rankings kept per store (SqliteStore._fts_known)
FTS_KNOWN_ROWS = 50_000  # ranked rows kept per store, ~100 bytes each

# From this many matching chunks (the terms' counts) on, a ranking is split over two connections (two cores): below
# it the thread hop (~0.1 ms) and the second pass over each term's matches (its IDF) outweigh half the BM25 work.
SPLIT_MIN = 2_000
_split_slot = threading.BoundedSemaphore(1)  # one split ranking at a time in a process: one helper thread
_split_executor: Any = None


def _split_pool() -> Any:
    """The helper thread of split rankings, started on first use."""
    global _split_executor
    if _split_executor is None:
        from concurrent.futures import ThreadPoolExecutor

        _split_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctx-rank")
    return _split_executor


# After a split ranking whose threads waited for a core (other work on the machine), rank in one statement for this
# long: two halves sharing one core cost more than the whole (the IDF pass runs in both), 20-40 % on a busy VM.
SPLIT_BACKOFF_S = 2.0
_split_state = {"idle_until": 0.0, "splits": 0, "backoffs": 0}  # (the counts for benchmarks/ctx_keyword.py)


def _timed_fetch(db: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> tuple[list[Any], float, float]:
    """The statement's rows, its wall time and this thread's CPU time for it."""
    wall, cpu = time.perf_counter(), time.thread_time()
    rows = db.execute(sql, params).fetchall()
    return rows, time.perf_counter() - wall, time.thread_time() - cpu


def _under(until: float | None, cancel: deadline.CancelCheck | None, fn: Any, *args: Any) -> Any:
    """``fn(*args)`` in the helper thread under ``until``, the deadline of the thread that asked (or none),
    and its cancel check (its caller gave up: the helper's statement stops too)."""
    with deadline.cancellable(cancel):
        if until is None:
            return fn(*args)
        with deadline.bounded(until, "The search"):
            return fn(*args)


def _starved(wall: float, cpu: float) -> bool:
    """Whether a thread spent a quarter of its time (and over a millisecond) waiting, not computing: no free core."""
    return wall - cpu > max(0.001, 0.25 * wall)
