"""The knowledge base's SQL, written once for both stores: the dialect differences and the shared statements.

:class:`Dialect` names everything that differs between SQLite and PostgreSQL for what the two stores share
(column types, placeholders, lists of ids, text PostgreSQL cannot hold, byte-order comparison, the vector codec,
the one statement each writes its own way, how a migration step runs); :data:`SQLITE` and :data:`POSTGRES` are
its two values, side by side. :func:`tables` is the schema's version 1 in a dialect. :class:`SqlStore` holds the
statements, each written once with ``?`` placeholders, and the one migration loop; :class:`cairn_servers.ctx.store.SqliteStore` and
:class:`cairn_servers.ctx.store_pg.PostgresStore` add what each backend does its own way (the connection and
its errors, keyword search, vector search, locks, size on disk).

The records the stores take and return (:class:`DocumentRecord`, :class:`Known`) live here too, so that this
module imports no store. Imported by the SQLite store on every ``ctx`` command: no driver and nothing heavy at module level.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from cairn_servers.core.errors import StorageError

if TYPE_CHECKING:
    from cairn_servers.ctx.chunk import Chunk

# Versioned schema migrations (each backend's steps: SqliteStore.migrations, PostgresStore.migrations), applied in
# order at open and by `ctx migrate`; ``meta.schema_version`` records the last one applied. Version N means the same
# schema on both backends; never edit a released step, add one to both.
SCHEMA_VERSION = 4


# The rows both stores return in one shape.
CHECKPOINT_COLUMNS = "source, status, started_at, finished_at, documents, error"
EXPORTED_COLUMNS = ("rowid, id, source, source_id, title, author, source_url, updated_at, fingerprint, content_hash,"
                    " body, metadata")


def document_id(source: str, source_id: str) -> str:
    """Stable document id: sha256 of ``source`` and ``source_id`` (32 hex digits)."""
    return hashlib.sha256(f"{source}\x00{source_id}".encode("utf-8")).hexdigest()[:32]


@dataclass
class DocumentRecord:
    """A document as the sync engine writes it."""

    source: str
    source_id: str
    title: str
    body: str
    updated_at: int
    fingerprint: str
    content_hash: str
    author: str | None = None
    source_url: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return document_id(self.source, self.source_id)


class Known:
    """What the store remembers about a document, for change detection. (A plain class, as :class:`Dialect`.)"""

    __slots__ = ("rowid", "fingerprint", "content_hash")

    def __init__(self, rowid: int, fingerprint: str, content_hash: str) -> None:
        self.rowid = rowid
        self.fingerprint = fingerprint
        self.content_hash = content_hash


def checkpoint_map(rows: Iterable[Sequence[Any]]) -> dict[str, dict[str, Any]]:
    """source -> its last sync (``status``, ``started_at``, ``finished_at``, ``documents``, ``error``), from
    rows of :data:`CHECKPOINT_COLUMNS`."""
    return {
        r[0]: {"status": r[1], "started_at": int(r[2]), "finished_at": None if r[3] is None else int(r[3]),
               "documents": int(r[4]), "error": r[5]}
        for r in rows
    }


def exported_row(r: Sequence[Any]) -> tuple[Any, ...]:
    """A row of :data:`EXPORTED_COLUMNS` with its rowid and updated_at as ints."""
    return (int(r[0]), *r[1:7], int(r[7]), *r[8:])


# ---- the dialects ------------------------------------------------------------------------------------------------


def _same(text: str | None) -> str | None:
    return text


def no_nul(text: str | None) -> str | None:
    """PostgreSQL text cannot hold NUL; SQLite can. NULs carry nothing searchable, so they go."""
    return text.replace("\x00", "") if text and "\x00" in text else text


def vector_text(blob: bytes) -> str:
    """A float32 vector blob as pgvector's text input, ``[x,y,...]``."""
    import numpy as np

    return "[" + ",".join(repr(x) for x in np.frombuffer(blob, dtype=np.float32).tolist()) + "]"


def _real_array_bytes(value: Any) -> bytes:
    """A ``real[]`` (a list of floats) as a float32 vector blob."""
    import numpy as np

    return np.asarray(value, dtype=np.float32).tobytes()


@functools.lru_cache(maxsize=256)
def _percent(statement: str) -> bytes:
    """A statement written with ``?`` placeholders as psycopg takes it (``%s``; our statements hold no other ``?``)."""
    return statement.replace("?", "%s").encode("utf-8")


def _statements(script: str) -> list[str]:
    """Statements of a SQLite ``script``; trigger bodies (BEGIN ... END;) stay whole."""
    import sqlite3

    out: list[str] = []
    buf: list[str] = []
    for line in script.strip().splitlines():
        buf.append(line)
        joined = "\n".join(buf).strip()
        if joined.endswith(";") and sqlite3.complete_statement(joined):
            out.append(joined)
            buf = []
    return out


def _whole(script: str) -> list[str]:
    return [script] if script.strip() else []


class Dialect:
    """What differs between the backends for what they share. A shared statement is written with ``?``
    placeholders and these attributes; everything else in it is SQL both backends take. (A plain class, not a
    dataclass: this module is imported on every ``ctx`` command, and a frozen dataclass costs its start-up.)

    * ``rowid``, ``int64``, ``vector_type``: column types (SQLite's rowid, an identity column; a 64-bit integer;
      a vector: a float32 BLOB, pgvector's ``vector``); ``vectors_options``: the vectors table is keyed by
      (hash, model) only (SQLite: ``WITHOUT ROWID``).
    * ``statement``: a statement written with ``?`` as the driver takes it: SQLite's as it is (SqliteStore._run
      passes it straight on), psycopg's with ``%s``, as bytes.
    * ``id_arrays``: a list of ids is bound one by one (SQLite: ``IN (?,?,...)``, 500 a statement) or as one
      array (PostgreSQL: ``= ANY(?)``).
    * ``text``: text bound into a row as the backend can hold it (PostgreSQL's text cannot hold NUL).
    * ``bytewise``: the collation that compares hashes in byte order, as SQLite compares text.
    * ``pending``: one row per chunk hash of the chunks without a vector: SQLite groups; PostgreSQL keeps the
      first by rowid.
    * ``script``: a migration step as the statements to run (SQLite: one at a time; PostgreSQL: the whole).
    * vectors, written: ``vector_param`` (the parameter's SQL) and ``vector_in`` (a float32 blob as bound);
      read: ``vector_column`` (the column's SQL) and ``vector_out`` (its value as a float32 blob; None: it is one).
    """

    __slots__ = ("name", "rowid", "int64", "vector_type", "vectors_options", "statement", "id_arrays", "text",
                 "bytewise", "pending", "script", "vector_param", "vector_in", "vector_column", "vector_out")

    def __init__(self, *, name: str, rowid: str, int64: str, vector_type: str, vectors_options: str,
                 statement: Callable[[str], Any], id_arrays: bool, text: Callable[[str | None], str | None],
                 bytewise: str, pending: str, script: Callable[[str], list[str]], vector_param: str,
                 vector_in: Callable[[bytes], Any], vector_column: str,
                 vector_out: Callable[[Any], bytes] | None) -> None:
        self.name = name
        self.rowid = rowid
        self.int64 = int64
        self.vector_type = vector_type
        self.vectors_options = vectors_options
        self.statement = statement
        self.id_arrays = id_arrays
        self.text = text
        self.bytewise = bytewise
        self.pending = pending
        self.script = script
        self.vector_param = vector_param
        self.vector_in = vector_in
        self.vector_column = vector_column
        self.vector_out = vector_out

    def among(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """``column`` among ``values``: an SQL condition and its parameters."""
        if self.id_arrays:
            return f"{column} = ANY(?)", [list(values)]
        return f"{column} IN ({','.join('?' * len(values))})", list(values)

    def ids(self, column: str, ids: Sequence[int]) -> Iterator[tuple[str, list[Any]]]:
        """``column`` among ``ids``: (SQL condition, its parameters) per statement to run; none for no ids."""
        step = max(1, len(ids)) if self.id_arrays else 500  # PostgreSQL: one array
        for s in range(0, len(ids), step):
            yield self.among(column, ids[s : s + step])

    def filters(self, sources: Sequence[str] | None, since: int | None,
                until: int | None) -> tuple[list[str], list[Any]]:
        """SQL conditions on ``d`` (documents) for the source and time filters of a search, with their parameters."""
        parts: list[str] = []
        params: list[Any] = []
        if sources is not None:
            cond, values = self.among("d.source", sources)
            parts.append(cond)
            params.extend(values)
        if since is not None:
            parts.append("d.updated_at >= ?")
            params.append(since)
        if until is not None:
            parts.append("d.updated_at < ?")
            params.append(until)
        return parts, params


_PENDING = ("SELECT {distinct}c.hash, c.heading, c.text FROM chunks c WHERE NOT EXISTS"
            " (SELECT 1 FROM vectors v WHERE v.hash = c.hash AND v.model = ?){group} ORDER BY c.hash{then} LIMIT ?")

SQLITE = Dialect(
    name="sqlite", rowid="INTEGER PRIMARY KEY", int64="INTEGER", vector_type="BLOB", vectors_options=" WITHOUT ROWID",
    statement=str, id_arrays=False, text=_same, bytewise="",
    pending=_PENDING.format(distinct="", group=" GROUP BY c.hash", then=""), script=_statements,
    vector_param="?", vector_in=bytes, vector_column="vec", vector_out=None)

POSTGRES = Dialect(
    name="postgres", rowid="BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY", int64="BIGINT", vector_type="vector",
    vectors_options="", statement=_percent, id_arrays=True, text=no_nul, bytewise=' COLLATE "C"',
    pending=_PENDING.format(distinct="DISTINCT ON (c.hash) ", group="", then=", c.rowid"), script=_whole,
    vector_param="?::vector", vector_in=vector_text, vector_column="vec::real[]", vector_out=_real_array_bytes)


# ---- the schema --------------------------------------------------------------------------------------------------


def tables(dialect: Dialect, *, chunk_columns: str = "", keyword_index: str = "") -> str:
    """Version 1 of the schema: the tables both backends have, in the dialect's types, with the backend's own
    keyword index (SQLite: an FTS5 table and its triggers; PostgreSQL: a ``tsvector`` column and its index).
    ``meta`` is created by :meth:`SqlStore.migrate` before any step."""
    return f"""
CREATE TABLE IF NOT EXISTS documents(
    rowid {dialect.rowid},
    id TEXT NOT NULL UNIQUE,
    source TEXT NOT NULL,
    source_id TEXT NOT NULL,
    title TEXT NOT NULL,
    author TEXT,
    source_url TEXT,
    updated_at {dialect.int64} NOT NULL,
    fingerprint TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    body TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{{}}',
    indexed_at {dialect.int64} NOT NULL,
    UNIQUE(source, source_id)
);
CREATE INDEX IF NOT EXISTS documents_updated ON documents(updated_at);
CREATE TABLE IF NOT EXISTS chunks(
    rowid {dialect.rowid},
    doc {dialect.int64} NOT NULL REFERENCES documents(rowid) ON DELETE CASCADE,
    ordinal INTEGER NOT NULL,
    hash TEXT NOT NULL,
    heading TEXT NOT NULL,
    text TEXT NOT NULL{chunk_columns}
);
CREATE INDEX IF NOT EXISTS chunks_doc ON chunks(doc, ordinal);
CREATE INDEX IF NOT EXISTS chunks_hash ON chunks(hash);
{keyword_index.strip()}
CREATE TABLE IF NOT EXISTS vectors(
    hash TEXT NOT NULL,
    model TEXT NOT NULL,
    vec {dialect.vector_type} NOT NULL,
    PRIMARY KEY(hash, model)
){dialect.vectors_options};
CREATE TABLE IF NOT EXISTS checkpoints(
    source TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    started_at {dialect.int64} NOT NULL,
    finished_at {dialect.int64},
    documents INTEGER NOT NULL DEFAULT 0,
    error TEXT
);
"""


# Version 2: filters by source and time read one index.
SOURCE_UPDATED = """
CREATE INDEX IF NOT EXISTS documents_source_updated ON documents(source, updated_at);
"""


# ---- the shared statements -----------------------------------------------------------------------------------------


class SqlStore:
    """The statements both stores run, each written once, and the migration loop. A subclass sets
    :attr:`dialect` and :attr:`migrations` and runs statements through :meth:`_run` and :meth:`_run_many`."""

    dialect: ClassVar[Dialect]
    migrations: ClassVar[tuple[str, ...]]
    label: str

    def _run(self, statement: str, params: Sequence[Any] = ()) -> Any:
        """Execute one statement written with ``?`` placeholders; its cursor."""
        raise NotImplementedError

    def _run_many(self, statement: str, rows: Iterable[Sequence[Any]]) -> None:
        """Execute one statement written with ``?`` placeholders for each of ``rows``."""
        raise NotImplementedError

    # ---- schema ------------------------------------------------------------------------------

    def _version(self) -> int:
        raise NotImplementedError

    def _migrating(self) -> AbstractContextManager[Callable[[str, Sequence[Any]], Any]]:
        """The transaction a migration runs in (with its backend's lock and errors): yields how to execute."""
        raise NotImplementedError

    def schema_version(self) -> int:
        return self._version()

    def migrate(self, target: int = SCHEMA_VERSION) -> int:
        """Apply the migrations after the database's version up to ``target``, in one transaction;
        returns the version found (0 for a new database)."""
        if self._version() == target:
            return target  # the common case: no write transaction at all
        with self._migrating() as run:
            run("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)", ())
            found = self._version()
            if found > SCHEMA_VERSION:
                raise StorageError(
                    f"The knowledge base {self.label} has schema version {found}, newer than this ctx knows "
                    f"({SCHEMA_VERSION}). Upgrade cairn.")
            for step in self.migrations[found:target]:
                for statement in self.dialect.script(step):
                    run(statement, ())
            run("INSERT INTO meta(key, value) VALUES ('schema_version', ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value", (str(max(found, target)),))
            run("INSERT INTO meta(key, value) VALUES ('generation', '0') ON CONFLICT DO NOTHING", ())
        return found

    def bump(self) -> None:
        """Advance the generation counter (call inside the transaction that changed data)."""
        self._run("UPDATE meta SET value = CAST(CAST(value AS BIGINT) + 1 AS TEXT) WHERE key = 'generation'")

    def generation(self) -> int:
        row = self._run("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        return int(row[0]) if row else 0

    def sql(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of an ad-hoc statement (``?`` placeholders on both backends), for tests and diagnostics only."""
        cur = self._run(statement, tuple(params))
        return [tuple(r) for r in cur.fetchall()] if cur.description is not None else []

    # ---- documents ---------------------------------------------------------------------------

    def known(self, source: str) -> dict[str, Known]:
        rows = self._run("SELECT source_id, rowid, fingerprint, content_hash FROM documents WHERE source = ?",
                         (source,))
        return {sid: Known(int(rowid), fp, ch) for sid, rowid, fp, ch in rows}

    def upsert(self, doc: DocumentRecord, chunks: Sequence[Chunk]) -> None:
        """Replace the document and its chunks (inside the caller's transaction); an updated document keeps
        its rowid."""
        text = self.dialect.text
        rows = self._run(
            "INSERT INTO documents(id, source, source_id, title, author, source_url, updated_at, fingerprint,"
            " content_hash, body, metadata, indexed_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
            " ON CONFLICT (source, source_id) DO UPDATE SET title=excluded.title, author=excluded.author,"
            " source_url=excluded.source_url, updated_at=excluded.updated_at, fingerprint=excluded.fingerprint,"
            " content_hash=excluded.content_hash, body=excluded.body, metadata=excluded.metadata,"
            " indexed_at=excluded.indexed_at RETURNING rowid",
            (doc.id, doc.source, doc.source_id, text(doc.title), text(doc.author), text(doc.source_url),
             doc.updated_at, doc.fingerprint, doc.content_hash, text(doc.body),
             text(json.dumps(doc.metadata, sort_keys=True, default=str)), int(time.time())),
        ).fetchall()  # to the end: SQLite's statement is then done before the next one
        rowid = int(rows[0][0])
        self._run("DELETE FROM chunks WHERE doc = ?", (rowid,))
        if chunks:
            self._run_many("INSERT INTO chunks(doc, ordinal, hash, heading, text) VALUES (?,?,?,?,?)",
                           [(rowid, c.ordinal, c.hash, text(c.heading), text(c.text)) for c in chunks])

    def document(self, doc_id: str) -> tuple[Any, ...] | None:
        """(rowid, id, source, source_id, title, body, source_url, updated_at, author, metadata JSON) of
        the document ``doc_id``, or None."""
        row = self._run("SELECT rowid, id, source, source_id, title, body, source_url, updated_at, author, metadata"
                        " FROM documents WHERE id = ?", (doc_id,)).fetchone()
        return tuple(row) if row is not None else None

    def document_chunks(self, rowid: int) -> list[tuple[int, str, str, str]]:
        """(ordinal, hash, heading, text) of a document's chunks, in order."""
        rows = self._run("SELECT ordinal, hash, heading, text FROM chunks WHERE doc = ? ORDER BY ordinal", (rowid,))
        return [(o, h, hd, t) for o, h, hd, t in rows]

    def chunk_documents(self, chunk_rowids: Sequence[int]) -> dict[int, str]:
        """The document id of each chunk rowid still stored."""
        out: dict[int, str] = {}
        for cond, params in self.dialect.ids("c.rowid", chunk_rowids):
            for r, d in self._run(f"SELECT c.rowid, d.id FROM chunks c JOIN documents d ON d.rowid = c.doc"
                                  f" WHERE {cond}", params):
                out[int(r)] = d
        return out

    def chunk_hits(self, chunk_rowids: Sequence[int]) -> dict[int, tuple[str, str, str, str, int, str | None, str]]:
        """For search results: chunk rowid -> (chunk text, title, source, source_id, updated_at, source_url,
        the chunk's heading path)."""
        out: dict[int, tuple[str, str, str, str, int, str | None, str]] = {}
        for cond, params in self.dialect.ids("c.rowid", chunk_rowids):
            for r in self._run("SELECT c.rowid, c.text, d.title, d.source, d.source_id, d.updated_at, d.source_url,"
                               f" c.heading FROM chunks c JOIN documents d ON d.rowid = c.doc WHERE {cond}", params):
                out[int(r[0])] = (r[1], r[2], r[3], r[4], int(r[5]), r[6], r[7])
        return out

    def source_labels(self) -> set[str]:
        """Every source label that has documents."""
        return {r[0] for r in self._run("SELECT DISTINCT source FROM documents")}

    def document_counts(self) -> dict[str, int]:
        """Documents per source label."""
        return {s: int(n) for s, n in self._run("SELECT source, COUNT(*) FROM documents GROUP BY source")}

    def counts(self) -> tuple[int, int, int]:
        """(documents, chunks, distinct chunk texts)."""
        (docs,) = self._run("SELECT COUNT(*) FROM documents").fetchone()
        chunks, distinct = self._run("SELECT COUNT(*), COUNT(DISTINCT hash) FROM chunks").fetchone()
        return int(docs), int(chunks), int(distinct)

    def set_fingerprint(self, rowid: int, fingerprint: str, updated_at: int) -> None:
        self._run("UPDATE documents SET fingerprint = ?, updated_at = ? WHERE rowid = ?",
                  (fingerprint, updated_at, rowid))

    def delete(self, rowids: Sequence[int]) -> None:
        """Delete these documents and their chunks."""
        for cond, params in self.dialect.ids("doc", rowids):
            self._run(f"DELETE FROM chunks WHERE {cond}", params)
        for cond, params in self.dialect.ids("rowid", rowids):
            self._run(f"DELETE FROM documents WHERE {cond}", params)

    def drop_orphan_vectors(self) -> int:
        """Delete the vectors no chunk has any more; how many."""
        cur = self._run("DELETE FROM vectors WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.hash = vectors.hash)")
        return int(cur.rowcount)

    # ---- checkpoints -------------------------------------------------------------------------

    def checkpoint(self, source: str, status: str, *, documents: int = 0, error: str | None = None) -> None:
        now = int(time.time())
        if status == "running":
            self._run("INSERT INTO checkpoints(source, status, started_at) VALUES (?, 'running', ?)"
                      " ON CONFLICT(source) DO UPDATE SET status='running', started_at=excluded.started_at,"
                      " error=NULL", (source, now))
        else:
            self._run("UPDATE checkpoints SET status = ?, finished_at = ?, documents = ?, error = ? WHERE source = ?",
                      (status, now, documents, self.dialect.text(error), source))

    def checkpoints(self) -> dict[str, dict[str, Any]]:
        return checkpoint_map(self._run(f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints"))

    # ---- export / import (cairn_servers.ctx.transfer) ------------------------------------------------------

    def has_documents(self) -> bool:
        """Whether any document or vector is stored."""
        row = self._run("SELECT EXISTS (SELECT 1 FROM documents) OR EXISTS (SELECT 1 FROM vectors)").fetchone()
        return bool(row and row[0])

    def has_document(self, doc_id: str) -> bool:
        return self._run("SELECT 1 FROM documents WHERE id = ?", (doc_id,)).fetchone() is not None

    def chunks_after(self, rowid: int, limit: int) -> list[tuple[int, int, int, str, str, str]]:
        """Up to ``limit`` chunks whose rowid is above ``rowid``, by rowid: (rowid, document rowid, ordinal,
        hash, heading, text). A document's chunks are written together, so they come together."""
        rows = self._run("SELECT rowid, doc, ordinal, hash, heading, text FROM chunks WHERE rowid > ?"
                         " ORDER BY rowid LIMIT ?", (rowid, limit))
        return [(int(r), int(d), int(o), h, hd, t) for r, d, o, h, hd, t in rows]

    def documents_by_rowid(self, rowids: Sequence[int]) -> dict[int, tuple[Any, ...]]:
        """rowid -> (rowid, id, source, source_id, title, author, source_url, updated_at, fingerprint,
        content_hash, body, metadata JSON) of these documents."""
        out: dict[int, tuple[Any, ...]] = {}
        for cond, params in self.dialect.ids("rowid", rowids):
            for row in self._run(f"SELECT {EXPORTED_COLUMNS} FROM documents WHERE {cond}", params):
                out[int(row[0])] = exported_row(row)
        return out

    def chunkless_documents_after(self, rowid: int, limit: int) -> list[tuple[Any, ...]]:
        """Up to ``limit`` documents without chunks whose rowid is above ``rowid``, by rowid (the columns of
        :meth:`documents_by_rowid`)."""
        rows = self._run(f"SELECT {EXPORTED_COLUMNS} FROM documents d WHERE d.rowid > ? AND NOT EXISTS"
                         " (SELECT 1 FROM chunks c WHERE c.doc = d.rowid) ORDER BY d.rowid LIMIT ?", (rowid, limit))
        return [exported_row(r) for r in rows]

    # ---- vectors: written ----------------------------------------------------------------------------
    # A vector is a float32 blob to callers; the dialect's vector codec turns it into the column's type and back.

    def put_vectors(self, model: str, hashes: Sequence[str], blobs: Sequence[bytes]) -> None:
        if not hashes:
            return
        encode = self.dialect.vector_in
        self._run_many(f"INSERT INTO vectors(hash, model, vec) VALUES (?, ?, {self.dialect.vector_param})"
                       " ON CONFLICT (hash, model) DO UPDATE SET vec = excluded.vec",
                       [(h, model, encode(b)) for h, b in zip(hashes, blobs)])

    def clear_vectors(self) -> None:
        self._run("DELETE FROM vectors")

    # ---- vectors: read -----------------------------------------------------------------------------

    def pending(self, model: str, limit: int) -> list[tuple[str, str, str]]:
        """Up to ``limit`` distinct (hash, heading, text) chunks without a vector for ``model``, by hash."""
        return [(h, hd, t) for h, hd, t in self._run(self.dialect.pending, (model, limit))]

    def pending_count(self, model: str) -> int:
        row = self._run("SELECT COUNT(DISTINCT hash) FROM chunks c WHERE NOT EXISTS"
                        " (SELECT 1 FROM vectors v WHERE v.hash = c.hash AND v.model = ?)", (model,)).fetchone()
        return int(row[0]) if row else 0

    def vector_count(self, model: str) -> int:
        row = self._run("SELECT COUNT(*) FROM vectors WHERE model = ?", (model,)).fetchone()
        return int(row[0]) if row else 0

    def vector_rows(self, model: str) -> list[tuple[int, str, int, bytes]]:
        """(chunk rowid, source, updated_at, vector blob) of every chunk with a ``model`` vector, by rowid."""
        rows = self._run(f"SELECT c.rowid, d.source, d.updated_at, v.{self.dialect.vector_column} FROM chunks c"
                         " JOIN documents d ON d.rowid = c.doc JOIN vectors v ON v.hash = c.hash AND v.model = ?"
                         " ORDER BY c.rowid", (model,)).fetchall()
        decode = self.dialect.vector_out
        return rows if decode is None else [(r, s, u, decode(v)) for r, s, u, v in rows]

    def vector_chunks(self) -> list[tuple[int, str, str, int]]:
        """(chunk rowid, chunk hash, source, updated_at) of every chunk, by rowid: what the in-memory
        vector matrix (:class:`cairn_servers.ctx.vectorfile.VectorMatrix`) keeps per row, without the vectors."""
        rows: list[tuple[int, str, str, int]] = self._run(
            "SELECT c.rowid, c.hash, d.source, d.updated_at FROM chunks c JOIN documents d ON d.rowid = c.doc"
            " ORDER BY c.rowid").fetchall()
        return rows

    def vector_blobs(self, model: str) -> Iterator[tuple[str, bytes]]:
        """(hash, vector blob) of every ``model`` vector, in the table's own order: one sequential read
        (joined to the chunks in SQL, each vector was a B-tree lookup: ~4-9 s at 100k chunks, against ~0.6 s)."""
        cursor = self._run(f"SELECT hash, {self.dialect.vector_column} FROM vectors WHERE model = ?", (model,))
        decode = self.dialect.vector_out
        while rows := cursor.fetchmany(4096):
            if decode is None:
                yield from rows
            else:
                yield from ((h, decode(v)) for h, v in rows)

    def vectors_after(self, model: str, hash: str, limit: int) -> list[tuple[str, bytes]]:
        """Up to ``limit`` (hash, vector blob) of ``model`` whose hash sorts after ``hash``, by hash (byte order)."""
        order = "hash" + self.dialect.bytewise
        rows = self._run(f"SELECT hash, {self.dialect.vector_column} FROM vectors WHERE model = ? AND {order} > ?"
                         f" ORDER BY {order} LIMIT ?", (model, hash, limit))
        decode = self.dialect.vector_out or bytes
        return [(h, decode(v)) for h, v in rows]

    def unembedded_chunks(self, model: str) -> int:
        """How many chunks (not distinct texts) have no ``model`` vector yet."""
        rows = self._run("SELECT COUNT(*) FROM chunks c WHERE NOT EXISTS"
                         " (SELECT 1 FROM vectors v WHERE v.hash = c.hash AND v.model = ?)", (model,))
        return int(next(iter(rows))[0])

    def embedded_chunks(self, model: str, chunk_rowids: Sequence[int]) -> set[int]:
        """Those of ``chunk_rowids`` (at most a search's candidates) that have a ``model`` vector."""
        out: set[int] = set()
        for cond, params in self.dialect.ids("c.rowid", chunk_rowids):
            out.update(int(r) for (r,) in self._run(
                f"SELECT c.rowid FROM chunks c WHERE {cond} AND EXISTS"
                " (SELECT 1 FROM vectors v WHERE v.hash = c.hash AND v.model = ?)", (*params, model)))
        return out
