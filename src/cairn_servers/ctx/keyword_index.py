"""Exact BM25 keyword ranking over very common terms: the SQLite store's head index.

FTS5 ranks a query by reading every match of every term, and its ``bm25()`` walks each term's whole match list
once more for the term's IDF: a term found in half of a million chunks costs tens of milliseconds. This module
keeps, beside the database, the postings of the vocabulary's head (every token found in at least
:data:`HEAD_MIN_DF` chunks when the index was built): per token its chunk rowids (sorted) and term frequencies,
the chunks' token counts, and per block of :data:`BLOCK` rowids the token's best BM25 term weight (block-max).
A query whose terms match more chunks than the ranking budget is then ranked exactly, with FTS5's own formula
(``fts5_aux.c``: IDF ``ln((N - n + 0.5) / (n + 0.5))`` floored at 1e-6, k1 = 1.2, b = 0.75, a row's length
counted over all its columns):

* the query's other terms (rare ones, phrases) are ranked by FTS5 itself, ``bm25()`` over a ``MATCH`` of only
  them: each row gets their summed contributions, as the whole query would give them;
* the head terms' contributions come from the postings, block by block, best bound first: a block whose bound
  (the sum of its terms' block maxima and its best rare score) is below the k-th best score found so far cannot
  hold a better chunk, and the search stops there. The answer is the exact top ``k``, ties by rowid.

The files hold the database as of one commit, named by the ``keyword_log`` sequence (triggers append every
inserted and deleted chunk rowid to that table, in the writing transaction, from the first build on). A process catches up by reading the
log after that sequence: deleted rows are masked, inserted rows (bounded, :data:`DELTA_MAX`) are tokenised by an
in-memory FTS5 table with the same tokenizer and scored apart. Past that bound, or when no files exist yet for a
database of :data:`BUILD_MIN_CHUNKS` chunks or more, the process rebuilds the files in a background thread (one
builder per database, under a file lock) and meanwhile the store's budgeted plan answers. A build writes new
files and renames their description into place last, then records its id in ``meta`` and trims the log: a kill
at any moment leaves the previous files, or none, and a description whose id the database does not hold is not
used.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn_servers.core.files import replace_file, write_atomic

if TYPE_CHECKING:
    from typing import Protocol

    import numpy as np
    import numpy.typing as npt

    class SqliteStore(Protocol):
        """What this module uses of :class:`cairn_servers.ctx.store.SqliteStore` (named here, not imported: the
        store imports this module)."""

        db: sqlite3.Connection
        path: Path

K1 = 1.2
B = 0.75
TOKENIZE = "porter unicode61 remove_diacritics 2"  # the chunks_fts table's tokenizer (store.py, schema version 1)
BLOCK = 256  # rowids per block of the block-max bounds
HEAD_MIN_DF = 1_000  # a token in this many chunks or more is in the head index
BUILD_MIN_CHUNKS = 50_000  # below this, FTS5 alone ranks fast enough: no files
DELTA_MAX = 20_000  # rows inserted or deleted since the files were built, before they are rebuilt
ROUND_UP = 1.0 + 1e-9
# Once the essential terms (see rank) hold at most this many postings, the rest is ranked chunk by chunk: each
# chunk's exact essential part plus its block's bounds of the other terms; more, and blocks are scored whole.
BY_DOCUMENTS_MAX = 400_000
CHUNK_ROWS = 4096  # chunks scored at a time in that case
FIRST_BLOCKS = 16  # blocks scored first (best bounds): their k-th best score starts the pruning
RELEASE_BYTES = 64 << 20  # postings read before a process drops the index's pages it mapped  # bounds are compared with float sums: a margin over rounding

# The log's last sequence number: AUTOINCREMENT keeps it in sqlite_sequence after the rows are trimmed.
_LAST_SEQ = "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'keyword_log'), 0)"

_lock = threading.Lock()
_states: dict[str, "HeadState"] = {}
_building: set[str] = set()
_failed: dict[str, float] = {}  # database -> when a failed build may be tried again (a read-only folder, a full disk)
RETRY_AFTER_S = 600.0
_tokens_db: sqlite3.Connection | None = None
_tokens_lock = threading.Lock()
_tokens_cache: "OrderedDict[str, tuple[str, ...]]" = OrderedDict()
TOKENS_CACHE = 4096
STATS = {"blocks": 0, "batches": 0, "documents": 0}  # blocks scored since start (benchmarks)


def folder(db_path: Path) -> Path:
    return db_path.parent / f"{db_path.name}.keyword"


def _scratch() -> sqlite3.Connection:
    """A private in-memory database with an FTS5 table of the store's tokenizer (tokenising queries and new rows)."""
    global _tokens_db
    if _tokens_db is None:
        db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        db.execute(f"CREATE VIRTUAL TABLE t USING fts5(heading, text, tokenize='{TOKENIZE}')")
        db.execute("CREATE VIRTUAL TABLE ti USING fts5vocab(t, 'instance')")
        _tokens_db = db
    return _tokens_db


def tokens(term: str) -> tuple[str, ...]:
    """The FTS5 tokens of a query term, in order (a term of several tokens is a phrase)."""
    with _tokens_lock:
        found = _tokens_cache.get(term)
        if found is not None:
            _tokens_cache.move_to_end(term)
            return found
        db = _scratch()
        db.execute("BEGIN")
        try:
            db.execute("INSERT INTO t(rowid, heading, text) VALUES (1, '', ?)", (term,))
            out = tuple(t for t, in db.execute("SELECT term FROM ti ORDER BY offset"))
        finally:
            db.execute("ROLLBACK")
        _tokens_cache[term] = out
        while len(_tokens_cache) > TOKENS_CACHE:
            _tokens_cache.popitem(last=False)
        return out


def _varints(blob: bytes) -> list[int]:
    out, value, shift = [], 0, 0
    for byte in blob:
        if shift == 56:  # SQLite's 9th byte carries 8 bits
            out.append((value << 8) | byte)
            value, shift = 0, 0
            continue
        value = (value << 7) | (byte & 0x7F)
        shift += 7
        if not byte & 0x80:
            out.append(value)
            value, shift = 0, 0
    return out


def averages(db: sqlite3.Connection) -> tuple[int, int]:
    """(rows, tokens over all columns) of chunks_fts: the N and avgdl·N of its bm25()."""
    row = db.execute("SELECT block FROM chunks_fts_data WHERE id = 1").fetchone()
    if row is None or not row[0]:
        return 0, 0
    values = _varints(bytes(row[0]))
    return values[0], sum(values[1:])


def _doc_lengths(db: sqlite3.Connection, rowids: Sequence[int] | None = None) -> tuple["npt.NDArray[Any]", "npt.NDArray[Any]"]:
    """(rowids, token counts over all columns) from chunks_fts_docsize, of every row or of ``rowids``."""
    import numpy as np

    ids: list[int] = []
    sizes: list[int] = []
    if rowids is None:
        cur: Any = db.execute("SELECT id, sz FROM chunks_fts_docsize ORDER BY id")
        rows: Any = cur
    else:
        rows = []
        for s in range(0, len(rowids), 500):
            part = list(rowids[s:s + 500])
            rows.extend(db.execute(f"SELECT id, sz FROM chunks_fts_docsize WHERE id IN ({','.join('?' * len(part))})",
                                   part).fetchall())
        rows.sort()
    for rid, sz in rows:
        ids.append(rid)
        sizes.append(sum(_varints(bytes(sz))))
    return np.array(ids, dtype=np.int64), np.array(sizes, dtype=np.int64)


def _impact(tf: "npt.NDArray[Any]", dl: "npt.NDArray[Any]", avgdl: float) -> "npt.NDArray[np.float64]":
    """FTS5's per-phrase term weight without its IDF: f·(k1 + 1) / (f + k1·(1 − b + b·D/avgdl))."""
    f = tf.astype("float64")
    return (f * (K1 + 1.0)) / (f + K1 * (1 - B + B * dl.astype("float64") / avgdl))


# ---- the files ------------------------------------------------------------------------------------------------------


class Base:
    """One built head index, memory-mapped: its description (``head.json``) and its data file."""

    def __init__(self, where: Path, meta: dict[str, Any]) -> None:
        import mmap

        import numpy as np

        self.meta = meta
        self.id: str = meta["id"]
        self.seq: int = meta["seq"]
        self.max_rowid: int = meta["max_rowid"]
        self.avgdl: float = meta["avgdl"]
        self.nblocks: int = meta["nblocks"]
        self.block: int = meta["block"]
        self.touched = 0  # bytes read since the pages were last dropped
        self.terms: dict[str, list[int]] = meta["terms"]  # token -> [postings, rowids offset, tf offset, bmax offset]
        with open(where / meta["data"], "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.doclen = np.frombuffer(self._map, dtype=np.uint32, count=self.max_rowid + 1, offset=0)

    def postings(self, token: str) -> tuple["npt.NDArray[np.uint32]", "npt.NDArray[np.uint16]", "npt.NDArray[np.float32]"]:
        import numpy as np

        n, ro, to, bo = self.terms[token]
        return (np.frombuffer(self._map, dtype=np.uint32, count=n, offset=ro),
                np.frombuffer(self._map, dtype=np.uint16, count=n, offset=to),
                np.frombuffer(self._map, dtype=np.float32, count=self.nblocks, offset=bo))

    def release(self, touched: int) -> None:
        """Count ``touched`` bytes read; past :data:`RELEASE_BYTES` since the last time, drop the pages this process
        mapped (the page cache keeps them): its RSS does not grow with the index, by at most that much."""
        import mmap

        self.touched += touched
        if self.touched < RELEASE_BYTES:
            return
        self.touched = 0
        try:
            self._map.madvise(mmap.MADV_DONTNEED)
        except (AttributeError, OSError, ValueError):
            pass


def read_meta(where: Path) -> dict[str, Any] | None:
    try:
        meta: dict[str, Any] = json.loads((where / "head.json").read_text())
        return meta
    except (OSError, ValueError):
        return None


def build(db_path: Path, *, head_min_df: int | None = None) -> dict[str, Any]:
    """Write a new head index of the database at ``db_path`` (its own read connection, one snapshot) and put it
    in place; returns its description. Safe to kill at any moment (see the module's notes)."""
    import numpy as np

    head_min_df = HEAD_MIN_DF if head_min_df is None else head_min_df
    where = folder(db_path)
    where.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(str(db_path), isolation_level=None, check_same_thread=False)
    try:
        db.execute("PRAGMA busy_timeout = 10000")
        db.execute("PRAGMA cache_size = -65536")
        db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.kw_row USING fts5vocab(main, chunks_fts, 'row')")
        db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.kw_inst USING fts5vocab(main, chunks_fts, 'instance')")
        bid = uuid.uuid4().hex
        data_name = f"head-{bid}.bin"
        tmp = where / (data_name + ".tmp")
        # The log starts with the first build (before its snapshot: every change after the snapshot is logged).
        db.execute("INSERT INTO meta(key, value) VALUES ('keyword_log', '1') ON CONFLICT(key) DO NOTHING")
        db.execute("BEGIN")
        try:
            seq = int(db.execute(_LAST_SEQ).fetchone()[0])
            n_rows, n_tokens = averages(db)
            ids, sizes = _doc_lengths(db)
            max_rowid = int(ids[-1]) if len(ids) else 0
            if max_rowid >= 2**32:
                raise ValueError("chunk rowids past 2**32: the head index stores them in 32 bits")
            avgdl = n_tokens / n_rows if n_rows else 1.0
            nblocks = max_rowid // BLOCK + 1
            doclen = np.zeros(max_rowid + 1, dtype=np.uint32)
            doclen[ids] = sizes
            head = [t for t, in db.execute("SELECT term FROM temp.kw_row WHERE doc >= ?", (head_min_df,))]
            terms: dict[str, list[int]] = {}
            with open(tmp, "wb") as out:
                out.write(doclen.tobytes())
                for token in head:
                    (text,) = db.execute("SELECT group_concat(doc) FROM temp.kw_inst WHERE term = ?",
                                         (token,)).fetchone()
                    docs = np.array(text.split(","), dtype=np.int64) if text else np.zeros(0, dtype=np.int64)
                    docs.sort(kind="stable")
                    starts = np.flatnonzero(np.r_[True, docs[1:] != docs[:-1]])
                    rowids = docs[starts]
                    tf = np.diff(np.r_[starts, len(docs)])
                    imp = _impact(tf, doclen[rowids], avgdl)
                    bmax = np.zeros(nblocks, dtype=np.float32)
                    np.maximum.at(bmax, rowids // BLOCK, imp.astype(np.float32))
                    bmax = np.nextafter(bmax, np.float32(np.inf))  # rounded up: a bound
                    pos = out.tell()
                    out.write(rowids.astype(np.uint32).tobytes())
                    out.write(np.minimum(tf, 65535).astype(np.uint16).tobytes())
                    pad = (-out.tell()) % 4
                    out.write(b"\0" * pad)
                    bpos = out.tell()
                    out.write(bmax.tobytes())
                    terms[token] = [len(rowids), pos, pos + 4 * len(rowids), bpos]
        finally:
            db.execute("COMMIT")
        replace_file(tmp, where / data_name)  # its data synced, then renamed in
        meta = {"id": bid, "seq": seq, "max_rowid": max_rowid, "avgdl": avgdl, "nblocks": nblocks, "block": BLOCK,
                "data": data_name, "head_min_df": head_min_df, "built_at": int(time.time()), "terms": terms}
        write_atomic(where / "head.json", json.dumps(meta).encode())  # the description last
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("INSERT INTO meta(key, value) VALUES ('keyword_index', ?)"
                       " ON CONFLICT(key) DO UPDATE SET value = excluded.value", (bid,))
            db.execute("DELETE FROM keyword_log WHERE seq <= ?", (seq,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        for old in where.glob("head-*.bin*"):
            if old.name != data_name:
                old.unlink(missing_ok=True)  # a process still mapping it keeps reading it
        return meta
    finally:
        db.close()


def build_locked(db_path: Path, *, head_min_df: int | None = None) -> dict[str, Any] | None:
    """:func:`build` under the database's builder lock; None when another process is building."""
    import fcntl

    where = folder(db_path)
    where.mkdir(parents=True, exist_ok=True)
    fd = os.open(where / "build.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        return build(db_path, head_min_df=head_min_df)
    finally:
        os.close(fd)


# ---- a process's view: the files plus what changed since ------------------------------------------------------------


class Delta:
    """What the log says changed after the files' sequence, up to ``seq``: deleted rowids (``gone``, sorted) and
    the inserted rows still present (``new``, sorted, with their lengths and their head tokens' postings)."""

    def __init__(self, seq: int, gone: "npt.NDArray[np.int64]", new: "npt.NDArray[np.int64]",
                 new_len: "npt.NDArray[np.int64]", postings: dict[str, tuple["npt.NDArray[np.int64]", "npt.NDArray[np.int64]"]]) -> None:
        self.seq = seq
        self.gone = gone
        self.new = new
        self.new_len = new_len
        self.postings = postings  # token -> (rowids among ``new``, term frequencies)

    @property
    def size(self) -> int:
        return len(self.gone) + len(self.new)


class HeadState:
    def __init__(self, base: Base, delta: Delta, stamp: tuple[int, int]) -> None:
        self.base = base
        self.delta = delta
        self.stamp = stamp  # head.json's (inode, mtime_ns)


def _stamp(where: Path) -> tuple[int, int] | None:
    try:
        st = (where / "head.json").stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def _catch_up(db: sqlite3.Connection, base: Base, old: Delta | None, seq: int) -> Delta:
    """The delta of ``base`` up to log sequence ``seq``, from ``old`` (a delta up to an earlier sequence) on."""
    import numpy as np

    start = old.seq if old is not None else base.seq
    gone = set(old.gone.tolist()) if old is not None else set()
    new = set(old.new.tolist()) if old is not None else set()
    added: set[int] = set()
    for rowid, op in db.execute("SELECT chunk, op FROM keyword_log WHERE seq > ? AND seq <= ? ORDER BY seq",
                                (start, seq)):
        if op:
            new.add(rowid)
            added.add(rowid)
        else:
            gone.add(rowid)
            new.discard(rowid)
            added.discard(rowid)
    new_arr = np.array(sorted(new), dtype=np.int64)
    postings: dict[str, tuple[Any, Any]] = {}
    if old is not None:  # keep the rows still present
        for token, (r, f) in old.postings.items():
            keep = np.isin(r, new_arr)
            postings[token] = (r[keep], f[keep])
    lengths: dict[int, int] = {}
    if old is not None:
        for r, n in zip(old.new.tolist(), old.new_len.tolist()):
            if r in new:
                lengths[r] = n
    if added:
        rows = sorted(added)
        ids, sizes = _doc_lengths(db, rows)
        lengths.update(zip(ids.tolist(), sizes.tolist()))
        found: dict[str, list[tuple[int, int]]] = {}
        with _tokens_lock:
            sc = _scratch()
            sc.execute("BEGIN")
            try:
                for s in range(0, len(rows), 500):
                    part = rows[s:s + 500]
                    sc.executemany("INSERT INTO t(rowid, heading, text) VALUES (?, ?, ?)", db.execute(
                        f"SELECT rowid, heading, text FROM chunks WHERE rowid IN ({','.join('?' * len(part))})", part))
                for token, doc, count in sc.execute("SELECT term, doc, count(*) FROM ti GROUP BY term, doc"):
                    if token in base.terms:
                        found.setdefault(token, []).append((doc, count))
            finally:
                sc.execute("ROLLBACK")
        for token, pairs in found.items():
            r0, f0 = postings.get(token, (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)))
            r1 = np.array([p[0] for p in pairs], dtype=np.int64)
            f1 = np.array([p[1] for p in pairs], dtype=np.int64)
            r2, f2 = np.r_[r0, r1], np.r_[f0, f1]
            order = np.argsort(r2, kind="stable")
            postings[token] = (r2[order], f2[order])
    new_len = np.array([lengths.get(r, 0) for r in new_arr.tolist()], dtype=np.int64)
    return Delta(seq, np.array(sorted(gone), dtype=np.int64), new_arr, new_len, postings)


def _rebuild_later(db_path: Path, head_min_df: int | None) -> None:
    key = str(db_path)
    with _lock:
        if key in _building or time.monotonic() < _failed.get(key, 0.0):
            return
        _building.add(key)

    def work() -> None:
        try:
            build_locked(db_path, head_min_df=head_min_df)
        except Exception as exc:  # noqa: BLE001 (a background job: the budgeted plan keeps answering)
            import sys

            with _lock:
                _failed[key] = time.monotonic() + RETRY_AFTER_S
            print(f"ctx: the keyword head index of {db_path} was not built (tried again in {RETRY_AFTER_S:.0f} s;"
                  f" keyword search meanwhile ranks within its budget): {exc}", file=sys.stderr)
        finally:
            with _lock:
                _building.discard(key)

    threading.Thread(target=work, name="ctx-keyword-index", daemon=True).start()


def state(store: "SqliteStore", chunks: int | None = None, *, build_min_chunks: int | None = None,
          head_min_df: int | None = None) -> HeadState | None:
    """This database's head index caught up with the store's snapshot (call inside ``store.snapshot()``), or None
    when it has none usable yet (a rebuild is then started in the background when worth it)."""
    db = store.db
    key = str(store.path)
    where = folder(store.path)
    seq = int(db.execute(_LAST_SEQ).fetchone()[0])
    stamp = _stamp(where)
    with _lock:
        cached = _states.get(key)
    if stamp is None:
        if chunks is None:
            chunks = averages(db)[0]
        if chunks >= (BUILD_MIN_CHUNKS if build_min_chunks is None else build_min_chunks):
            _rebuild_later(store.path, head_min_df)
        return None
    row = db.execute("SELECT value FROM meta WHERE key = 'keyword_index'").fetchone()
    if cached is None or cached.stamp != stamp:
        meta = read_meta(where)
        if meta is None:
            return None
        if row is None or row[0] != meta["id"]:  # written but not recorded (killed, or being recorded): rebuild
            _rebuild_later(store.path, head_min_df)
            return None
        try:
            base = Base(where, meta)
        except (OSError, ValueError):
            _rebuild_later(store.path, head_min_df)
            return None
        cached = None
    else:
        base = cached.base
        if row is None or row[0] != base.id:
            return None
    if base.seq > seq:  # this snapshot is older than the files
        return None
    old = cached.delta if cached is not None else None
    if old is not None and old.seq > seq:
        old = None  # another thread caught up past this snapshot: start from the files
    delta = old if old is not None and old.seq == seq else _catch_up(db, base, old, seq)
    fresh = HeadState(base, delta, stamp)
    with _lock:
        current = _states.get(key)
        if current is None or current.stamp != stamp or current.delta.seq <= seq:
            _states[key] = fresh
    if delta.size > DELTA_MAX:
        _rebuild_later(store.path, head_min_df)
    return fresh


def forget(store: "SqliteStore") -> None:
    with _lock:
        _states.pop(str(store.path), None)


# ---- ranking --------------------------------------------------------------------------------------------------------


def rank(store: "SqliteStore", phrases: Sequence[str], k: int, admit: Callable[[list[int]], set[int]] | None,
         hs: HeadState) -> dict[int, float] | None:
    """Rowid -> BM25 score (FTS5's ``-bm25()``) of the best ``k`` chunks matching any of ``phrases`` (distinct
    query terms, in order), among those ``admit`` keeps (None: all). Call inside ``store.snapshot()``. None when a
    matching row is neither in the files nor in the log (the files do not describe this database)."""
    import numpy as np

    from cairn_servers.core import deadline
    from cairn_servers.search.query import literal

    db = store.db
    base, delta = hs.base, hs.delta
    block = base.block
    n_rows, n_tokens = averages(db)
    if n_rows == 0:
        return {}
    avgdl = n_tokens / n_rows
    head: list[str] = []
    rare: list[str] = []
    for p in phrases:
        toks = tokens(p)
        if len(toks) == 1 and toks[0] in base.terms:
            head.append(toks[0])
        elif toks:
            rare.append(p)
    # The rare terms' summed contributions per row, by FTS5 itself.
    rr = np.zeros(0, dtype=np.int64)
    rs = np.zeros(0, dtype=np.float64)
    if rare:
        expr = " OR ".join(literal(t) for t in rare)
        rows = db.execute("SELECT rowid, -bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?", (expr,)).fetchall()
        if rows:
            arr = np.array(rows, dtype=np.float64)
            rr, rs = arr[:, 0].astype(np.int64), arr[:, 1]
    deadline.check()
    gone = delta.gone
    gone32 = gone[gone < 2**32].astype(np.uint32)  # (the postings' type: no conversion of a whole list)
    # Each head token: its postings, IDF from its current document count.
    terms: list[tuple[Any, Any, Any, float, Any, Any]] = []
    for t in head:
        r, f, bmax = base.postings(t)
        n_gone = 0
        if len(gone32):
            at = np.searchsorted(r, gone32)
            ok = at < len(r)
            n_gone = int(np.count_nonzero(r[at[ok]] == gone32[ok]))
        dr, df_ = delta.postings.get(t, (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)))
        n = len(r) - n_gone + len(dr)
        idf = math.log((n_rows - n + 0.5) / (n + 0.5))
        idf = idf if idf > 0.0 else 1e-6
        terms.append((r, f, bmax, idf, dr, df_))
    best_r = np.zeros(0, dtype=np.int64)
    best_s = np.zeros(0, dtype=np.float64)
    theta = -math.inf

    def offer(cand_r: "npt.NDArray[np.int64]", cand_s: "npt.NDArray[np.float64]") -> None:
        nonlocal best_r, best_s, theta
        keep = cand_s >= theta
        cand_r, cand_s = cand_r[keep], cand_s[keep]
        if not len(cand_r):
            return
        order = np.lexsort((cand_r, -cand_s))
        cand_r, cand_s = cand_r[order], cand_s[order]
        if admit is not None:  # check the best first, a few at a time, until k pass
            kept_r: list[Any] = []
            kept_s: list[Any] = []
            step = max(2 * k, 64)
            for s in range(0, len(cand_r), step):
                part = cand_r[s:s + step]
                ok = admit([int(x) for x in part])
                m = np.array([int(x) in ok for x in part], dtype=bool)
                kept_r.append(part[m])
                kept_s.append(cand_s[s:s + step][m])
                if sum(len(x) for x in kept_r) >= k:
                    break
            cand_r = np.concatenate(kept_r) if kept_r else cand_r[:0]
            cand_s = np.concatenate(kept_s) if kept_s else cand_s[:0]
        all_r, all_s = np.r_[best_r, cand_r], np.r_[best_s, cand_s]
        order = np.lexsort((all_r, -all_s))[:k]
        best_r, best_s = all_r[order], all_s[order]
        if len(best_r) >= k:
            theta = float(best_s[-1])

    def contribution(idf: float, f: Any, dl: Any) -> Any:
        return idf * _impact(f, dl, avgdl)

    # Rows inserted since the files: scored apart, all of them.
    new = delta.new
    is_new = np.isin(rr, new) if len(new) else np.zeros(len(rr), dtype=bool)
    if len(new):
        acc = np.zeros(len(new), dtype=np.float64)
        hit = np.zeros(len(new), dtype=bool)
        for (_, _, _, idf, dr, df_) in terms:
            if len(dr):
                at = np.searchsorted(new, dr)
                acc[at] += contribution(idf, df_, delta.new_len[at])
                hit[at] = True
        at = np.searchsorted(new, rr[is_new])
        acc[at] += rs[is_new]
        hit[at] = True
        offer(new[hit], acc[hit])
    # The files' rows, best block bound first.
    rb_r, rb_s = rr[~is_new], rs[~is_new]
    live = rb_r <= base.max_rowid
    if not live.all():  # a row past the files that the log does not name
        return None
    rb_r, rb_s = rb_r[live], rb_s[live]
    if len(rb_r):
        by_row = np.argsort(rb_r, kind="stable")
        rb_r, rb_s = rb_r[by_row], rb_s[by_row]
    nb = base.nblocks
    bound = np.zeros(nb, dtype=np.float64)
    scale = max(1.0, avgdl / base.avgdl) * ROUND_UP
    for (_, _, bmax, idf, _, _) in terms:
        bound += bmax.astype(np.float64) * (idf * scale)
    rblock = rb_r // block
    if len(rb_r):
        rare_max = np.zeros(nb, dtype=np.float64)
        np.maximum.at(rare_max, rblock, rb_s * ROUND_UP)
        bound += rare_max
    order = np.argsort(-bound, kind="stable")
    order = order[bound[order] > 0]
    # MaxScore: the terms whose bounds together stay under the k-th best score cannot bring a chunk in by
    # themselves, so only the others' postings (the essential terms) and the rare rows propose candidates; the
    # non-essential terms are looked up for those candidates. Blocks come best bound first.
    ub = [float(bmax.max()) * idf * scale if len(bmax) else 0.0 for (_, _, bmax, idf, _, _) in terms]
    by_ub = sorted(range(len(terms)), key=lambda i: ub[i])
    gone_old = gone[gone <= base.max_rowid]
    processed = np.zeros(nb, dtype=bool)

    def essential_terms() -> set[int]:
        out = set(range(len(terms)))
        total_ub = 0.0
        for i in by_ub:
            total_ub += ub[i]
            if total_ub * ROUND_UP >= theta:
                break
            out.discard(i)
        return out

    def full_scores(rows: "npt.NDArray[np.int64]") -> "npt.NDArray[np.float64]":
        """Exact scores of these rows (sorted; in the files, not deleted), the terms summed in the query's order."""
        dl = base.doclen[rows]
        key = rows.astype(np.uint32)
        score = np.zeros(len(rows), dtype=np.float64)
        for (r, f, _, idf, _, _) in terms:
            c = np.zeros(len(rows), dtype=np.float64)
            if len(r):
                at = np.searchsorted(r, key)
                ok = at < len(r)
                ok[ok] = r[at[ok]] == key[ok]
                c[ok] = contribution(idf, f[at[ok]], dl[ok])
            score = score + c
        if len(rb_r):
            at = np.searchsorted(rb_r, rows)
            ok = at < len(rb_r)
            ok[ok] = rb_r[at[ok]] == rows[ok]
            score[ok] += rb_s[at[ok]]
        return score

    def by_documents(ess: set[int]) -> None:
        """The rest, chunk by chunk: every chunk holding an essential term (or a rare one) gets its essential
        part exactly plus the other terms' block maxima; those whose bound reaches the k-th best are scored."""
        rows_in: list[Any] = []
        contrib_in: list[Any] = []
        for i in ess:
            r, f, _, idf, _, _ = terms[i]
            r64 = r.astype(np.int64)
            rows_in.append(r64)
            contrib_in.append(contribution(idf, f, base.doclen[r64]))
        if len(rb_r):
            rows_in.append(rb_r)
            contrib_in.append(rb_s)
        if not rows_in:
            return
        rows_all = np.concatenate(rows_in)
        contrib_all = np.concatenate(contrib_in)
        if len(rows_in) > 1:  # (sorted runs, merged by the stable sort)
            by_row = np.argsort(rows_all, kind="stable")
            rows_all, contrib_all = rows_all[by_row], contrib_all[by_row]
        starts = np.flatnonzero(np.r_[True, rows_all[1:] != rows_all[:-1]])
        cand = rows_all[starts]
        partial = np.add.reduceat(contrib_all, starts) if len(starts) else contrib_all[:0]
        keep = ~processed[cand // block]
        if len(gone_old):
            keep &= ~np.isin(cand, gone_old)
        cand, partial = cand[keep], partial[keep]
        if not len(cand):
            return
        rest = np.zeros(nb, dtype=np.float64)
        for i, (_, _, bmax, idf, _, _) in enumerate(terms):
            if i not in ess:
                rest += bmax.astype(np.float64) * (idf * scale)
        top = partial * ROUND_UP + rest[cand // block]
        while True:  # the best bounds first, a few thousand at a time, while they can beat the k-th best
            deadline.check()
            keep = top >= theta
            cand, top = cand[keep], top[keep]
            if not len(cand):
                break
            if len(cand) > CHUNK_ROWS:
                pick = np.argpartition(-top, CHUNK_ROWS - 1)[:CHUNK_ROWS]
                taken = np.zeros(len(cand), dtype=bool)
                taken[pick] = True
            else:
                taken = np.ones(len(cand), dtype=bool)
            rows = cand[taken]  # (sorted: cand is)
            offer(rows, full_scores(rows))
            STATS["documents"] += len(rows)
            cand, top = cand[~taken], top[~taken]

    done, step = 0, FIRST_BLOCKS
    try:
        while done < len(order):
            deadline.check()  # a caller's time limit (an event loop's few ms, a Lua tool's), or its client gone
            batch = order[done:done + step]
            batch = batch[bound[batch] >= theta]
            if not len(batch):
                break
            done += step
            step = min(step * 2, 512)
            essential = set(range(len(terms)))
            total_ub = 0.0
            for i in by_ub:
                total_ub += ub[i]
                if total_ub * ROUND_UP >= theta:
                    break
                essential.discard(i)
            batch.sort()
            lo, hi = (batch * block).astype(np.uint32), ((batch + 1) * block).astype(np.uint32)  # (the postings' type)
            gathered: dict[int, tuple[Any, Any]] = {}
            parts = []
            for i in essential:
                r, f = terms[i][0], terms[i][1]
                s0, s1 = np.searchsorted(r, lo), np.searchsorted(r, hi)
                lens = s1 - s0
                total = int(lens.sum())
                if not total:
                    continue
                idx = np.repeat(s0 - np.cumsum(np.r_[0, lens[:-1]]), lens) + np.arange(total)
                gathered[i] = (r[idx].astype(np.int64), f[idx])
                parts.append(gathered[i][0])
            in_batch = np.zeros(0, dtype=bool)
            if len(rb_r):
                in_batch = np.isin(rblock, batch)
                parts.append(rb_r[in_batch])
            if not parts:
                continue
            cand = np.unique(np.concatenate(parts))
            if len(gone_old):
                cand = cand[~np.isin(cand, gone_old)]
            if not len(cand):
                continue
            dl = base.doclen[cand]
            score = np.zeros(len(cand), dtype=np.float64)
            for i, (r, f, _, idf, _, _) in enumerate(terms):  # summed in the query's order, as FTS5 does
                c = np.zeros(len(cand), dtype=np.float64)
                if i in gathered:
                    rows_, tf = gathered[i]
                    at = np.searchsorted(cand, rows_)
                    ok = (at < len(cand))
                    ok[ok] = cand[at[ok]] == rows_[ok]
                    c[at[ok]] = contribution(idf, tf[ok], dl[at[ok]])
                elif i not in essential and len(r):
                    at = np.searchsorted(r, cand.astype(np.uint32))
                    ok = at < len(r)
                    ok[ok] = r[at[ok]] == cand[ok]
                    c[ok] = contribution(idf, f[at[ok]], dl[ok])
                score = score + c
            if len(rb_r):
                sel_r, sel_s = rb_r[in_batch], rb_s[in_batch]
                at = np.searchsorted(cand, sel_r)
                ok = at < len(cand)
                ok[ok] = cand[at[ok]] == sel_r[ok]
                score[at[ok]] += sel_s[ok]
            offer(cand, score)
            STATS["blocks"] += len(batch)
            STATS["batches"] += 1
            processed[batch] = True
            ess = essential_terms()
            # (one list alone: its block maxima are its bounds, blocks stay best; several: their sum is loose)
            if (len(terms) + bool(len(rb_r)) > 1
                    and sum(len(terms[i][0]) for i in ess) + len(rb_r) <= BY_DOCUMENTS_MAX):
                by_documents(ess)
                break
    finally:
        base.release(sum(6 * len(t[0]) + 4 * len(t[2]) for t in terms) + 4 * (base.max_rowid + 1))
    return {int(r): float(s) for r, s in zip(best_r, best_s)}
