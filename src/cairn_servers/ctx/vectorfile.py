"""Chunk vectors of a SQLite knowledge base, stored for scanning and memory mapping, with an ANN index.

SQLite's ``vectors`` table stays the record (every write commits there first, with the chunks). Beside the
database, ``<db>.vectors/<model>/`` holds what search reads:

* ``matrix-<epoch>.f32``: unit float32 rows, appended only;
* ``rows-<epoch>.bin``: per row, the chunk rowid, its document's ``updated_at``, its source (a code into
  ``state.json``'s names) and an alive flag (0 once the chunk or its vector changed);
* ``ann-<epoch>-<rows>.usearch``: a usearch HNSW index (int8, cosine) of the first ``ann_rows`` rows, once the
  matrix has :data:`ANN_MIN_ROWS` rows; rows after it (the tail) are scanned exactly;
* ``state.json``: the committed row count, the change-log position applied, the files in use. Replaced atomically
  (written, renamed) after the rows it counts were written.

Triggers on ``chunks``, ``documents`` and ``vectors`` append the rowids and hashes a transaction touched to
``vector_log``, in that transaction. Catching up reads the log after ``state.json``'s position, marks the rows of
those chunks dead and appends their current vectors: a write costs its own rows, never a reload of the matrix.

A crash: SQLite's commit comes first, so the files are never ahead of the database. Killed after appending rows
but before ``state.json`` was replaced, the next catch-up truncates the files to the committed row count and
replays the log from the committed position (marking rows dead and appending again are both idempotent). Killed
before SQLite committed, neither the rows nor their log entries exist. A catch-up does not fsync (a killed
process loses nothing the kernel holds): its ``state.json`` records the machine's boot id, and one written before
the last boot (a power loss could have kept it and lost rows) makes the files be written again. A build or a
fold into the index fsyncs the files, then the state.

A new process maps the files and the index (``Index.restore(view=True)``): its first query reads only the pages
it touches.
"""

from __future__ import annotations

import json
import os
import re
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from cairn_servers.ctx.store import KnowledgeStore as Store
    from cairn_servers.search.vectors import VectorIndex

ANN_MIN_ROWS = 20_000  # below this the exact scan (~3 ms) stays; from it on, the HNSW index answers
FOLD_MIN_ROWS = 20_000  # tail rows (not in the index) that make a catch-up add them to the index ...
FOLD_SHARE = 0.02  # ... or this share of the rows, whichever is larger: the tail's exact scan stays a few ms
REBUILD_SHARE = 0.25  # dead rows, or log entries to apply, past this share of the rows: build the files again
ANN_CANDIDATES = 128  # HNSW candidates rescored in float32 for a top k (at least 4 k)
CONNECTIVITY, EXPANSION_ADD, EXPANSION_SEARCH = 16, 128, 256
STATE_VERSION = 1
ROW = [("chunk", "<i8"), ("updated", "<i8"), ("source", "<i4"), ("alive", "u1"), ("pad", "u1", (3,))]
BATCH = 500  # chunk rowids per IN (...) lookup

LOG = """
CREATE TABLE IF NOT EXISTS vector_log(seq INTEGER PRIMARY KEY AUTOINCREMENT, chunk INTEGER, hash TEXT,
    delta INTEGER NOT NULL DEFAULT 0);
CREATE TRIGGER IF NOT EXISTS vector_log_chunk_ins AFTER INSERT ON chunks
    BEGIN INSERT INTO vector_log(chunk, delta) VALUES (new.rowid, 1); END;
CREATE TRIGGER IF NOT EXISTS vector_log_chunk_del AFTER DELETE ON chunks
    BEGIN INSERT INTO vector_log(chunk, delta) VALUES (old.rowid, -1); END;
CREATE TRIGGER IF NOT EXISTS vector_log_chunk_upd AFTER UPDATE OF hash, doc ON chunks
    BEGIN INSERT INTO vector_log(chunk) VALUES (old.rowid); INSERT INTO vector_log(chunk) VALUES (new.rowid); END;
CREATE TRIGGER IF NOT EXISTS vector_log_doc_upd AFTER UPDATE OF source, updated_at ON documents
    BEGIN INSERT INTO vector_log(chunk) SELECT rowid FROM chunks WHERE doc = new.rowid; END;
CREATE TRIGGER IF NOT EXISTS vector_log_vec_ins AFTER INSERT ON vectors
    BEGIN INSERT INTO vector_log(hash) VALUES (new.hash); END;
CREATE TRIGGER IF NOT EXISTS vector_log_vec_upd AFTER UPDATE ON vectors
    BEGIN INSERT INTO vector_log(hash) VALUES (new.hash); END;
CREATE TRIGGER IF NOT EXISTS vector_log_vec_del AFTER DELETE ON vectors
    BEGIN INSERT INTO vector_log(hash) VALUES (old.hash); END;
"""


def directory(store: "Store", model: str) -> Path:
    """``<db>.vectors/<model>``, the model's name made safe for a file name; when the database's folder cannot be
    written (a read-only mount), a folder of this user's in the temporary directory instead."""
    path = Path(getattr(store, "path"))
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", model)
    beside = path.parent / f"{path.name}.vectors"
    if beside.is_dir() and os.access(beside, os.W_OK) or not beside.exists() and os.access(path.parent, os.W_OK):
        return beside / name
    import hashlib
    import tempfile

    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"ctx-vectors-{os.getuid()}" / key / name


def _row_dtype() -> Any:
    import numpy as np

    return np.dtype(ROW)


def _usearch() -> Any:
    """usearch's ``Index``, with onnxruntime (the minilm provider) imported first when installed: imported after
    usearch 2.26, onnxruntime 1.32 crashes the process (SIGSEGV) as it loads."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        pass
    from usearch.index import Index

    return Index


def _append(path: Path, data: bytes, sync: bool = True) -> None:
    with open(path, "ab") as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _boot() -> str:
    """This boot of the machine: what a catch-up's unsynced writes survive (a process killed, not the machine)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _write_state(folder: Path, state: dict[str, Any], sync: bool = True) -> None:
    """``state.json`` replaced atomically. ``sync``: the files it counts were fsynced, and it is too (durable);
    otherwise it records this boot, and after another boot the files are not trusted (see :func:`_read_state`)."""
    from cairn_servers.core.files import write_atomic

    state["durable"], state["boot"] = sync, "" if sync else _boot()
    write_atomic(folder / "state.json", json.dumps(state).encode("utf-8"), durable=sync)


def _read_state(folder: Path) -> dict[str, Any] | None:
    """The committed state, or None (the files are written again): missing, of another version, or written
    without fsync before the machine last started (a power loss may have kept the state and lost rows)."""
    try:
        state: dict[str, Any] = json.loads((folder / "state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if state.get("version") != STATE_VERSION:
        return None
    if not state.get("durable", True) and state.get("boot") != _boot():
        return None
    return state


def _kill_point(name: str) -> None:
    """Fault injection for the crash tests: ``CAIRN_VECTORS_KILL=<name>`` kills this process (SIGKILL) here."""
    if os.environ.get("CAIRN_VECTORS_KILL") == name:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


class _FileLock:
    def __init__(self, folder: Path) -> None:
        self.path = folder / "lock"

    def __enter__(self) -> "_FileLock":
        import fcntl

        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def _log_ready(store: "Store") -> bool:
    """The change log and its triggers (one write transaction, once per database); False when the database
    cannot be written (then every change makes the next query write the files again, as a reload would)."""
    if store.sql("SELECT COUNT(*) FROM sqlite_master WHERE name = 'vector_log_vec_del'")[0][0]:
        return True
    try:
        with store.transaction():
            for statement in LOG.split(";\n"):
                if statement.strip():
                    store.sql(statement)
    except Exception:  # read-only (a mount, PRAGMA query_only): no log
        return False
    return True


def _log_position(store: "Store") -> int:
    row = store.sql("SELECT MAX(seq) FROM vector_log")
    return int(row[0][0] or 0)


def _current(store: "Store", model: str, chunks: list[int]) -> Iterator[tuple[int, str, int, bytes]]:
    """(chunk rowid, source, updated_at, vector blob) of those of ``chunks`` that exist and have a vector."""
    for s in range(0, len(chunks), BATCH):
        part = chunks[s : s + BATCH]
        marks = ",".join("?" * len(part))
        yield from store.sql(
            "SELECT c.rowid, d.source, d.updated_at, v.vec FROM chunks c JOIN documents d ON d.rowid = c.doc"
            f" JOIN vectors v ON v.hash = c.hash AND v.model = ? WHERE c.rowid IN ({marks}) ORDER BY c.rowid",
            [model, *part])


def build(store: "Store", model: str, dims: int, *, ann_min_rows: int | None = None) -> dict[str, Any]:
    """Write the model's files from the database (a new epoch), the index too when large enough; the new state."""
    import numpy as np

    ann_min_rows = ANN_MIN_ROWS if ann_min_rows is None else ann_min_rows
    folder = directory(store, model)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    logged = _log_ready(store)
    with _FileLock(folder):
        used = [int(found.group(1)) for p in folder.iterdir() if (found := re.match(r"matrix-(\d+)\.f32$", p.name))]
        epoch = max(used, default=0) + 1  # new names: a process may still map the old files
        with store.snapshot():
            seq = _log_position(store) if logged else -1
            generation = store.generation()
            chunks = int(store.sql("SELECT COUNT(*) FROM chunks")[0][0])
            m = VectorMatrix.load(store, model, dims, scan=False)
        rows = np.zeros(m.index.size, dtype=_row_dtype())
        rows["chunk"], rows["updated"], rows["source"], rows["alive"] = m.chunk_rows, m.updated, m.sources, 1
        matrix_path, rows_path = folder / f"matrix-{epoch}.f32", folder / f"rows-{epoch}.bin"
        for path in (matrix_path, rows_path):
            path.unlink(missing_ok=True)
        _append(matrix_path, m.index.matrix.tobytes())
        _append(rows_path, rows.tobytes())
        state: dict[str, Any] = {"version": STATE_VERSION, "model": model, "dims": dims, "epoch": epoch, "rows": int(m.index.size),
                 "alive": int(m.index.size), "seq": seq, "generation": generation, "chunks": chunks,
                 "sources": m.source_names, "ann": None, "ann_rows": 0}
        del m, rows
        if state["rows"] >= ann_min_rows:
            state["ann"], state["ann_rows"] = _ann_build(folder, state, state["rows"])
        _write_state(folder, state)
        _clean(folder, state)
        return state


def _clean(folder: Path, state: dict[str, Any]) -> None:
    """Delete files of other epochs and indexes (a process still mapping one keeps its pages)."""
    keep = {f"matrix-{state['epoch']}.f32", f"rows-{state['epoch']}.bin", state.get("ann"), "state.json", "lock"}
    for path in folder.iterdir():
        if path.name not in keep:
            path.unlink(missing_ok=True)


def _ann_build(folder: Path, state: dict[str, Any], upto: int, base: str | None = None) -> tuple[str, int]:
    """An index of rows [0, upto) (from ``base``'s file plus the rows after its ``ann_rows``); its file name."""
    import numpy as np

    Index = _usearch()
    matrix = np.memmap(folder / f"matrix-{state['epoch']}.f32", dtype=np.float32, mode="r",
                       shape=(state["rows"], state["dims"]))
    rows = np.memmap(folder / f"rows-{state['epoch']}.bin", dtype=_row_dtype(), mode="r", shape=(state["rows"],))
    index = Index(ndim=state["dims"], metric="cos", dtype="i8", connectivity=CONNECTIVITY,
                  expansion_add=EXPANSION_ADD, expansion_search=EXPANSION_SEARCH)
    start = 0
    if base is not None:
        index.load(str(folder / base))
        start = int(state["ann_rows"])
    for s in range(start, upto, 65536):
        e = min(upto, s + 65536)
        alive = np.flatnonzero(rows["alive"][s:e]) + s
        if alive.size:
            index.add(alive.astype(np.uint64), np.ascontiguousarray(matrix[alive]), threads=os.cpu_count() or 1)
    name = f"ann-{state['epoch']}-{upto}.usearch"
    tmp = folder / (name + ".tmp")
    index.save(str(tmp))
    from cairn_servers.core.files import replace_file

    replace_file(tmp, folder / name)  # its data synced, then the rename and the folder
    return name, upto


def catch_up(store: "Store", model: str, dims: int, *, ann_min_rows: int | None = None,
             fold_min_rows: int | None = None) -> dict[str, Any]:
    """Apply the database's changes since the files' state (building them when missing or far behind); the state."""
    folder = directory(store, model)
    state = _read_state(folder)
    if state is not None and state["dims"] == dims and state["seq"] >= 0:
        with _FileLock(folder):
            state = _read_state(folder)
            if state is not None and state["generation"] == store.generation():
                return state
            if state is not None:
                done = _apply(store, folder, state, ann_min_rows, fold_min_rows)
                if done is not None:
                    return done
    return build(store, model, dims, ann_min_rows=ann_min_rows)


def _apply(store: "Store", folder: Path, state: dict[str, Any], ann_min_rows: int | None,
           fold_min_rows: int | None) -> dict[str, Any] | None:
    """One catch-up under the folder's lock: the new state, or None when building again is cheaper."""
    import numpy as np

    ann_min_rows = ANN_MIN_ROWS if ann_min_rows is None else ann_min_rows
    fold_min_rows = FOLD_MIN_ROWS if fold_min_rows is None else fold_min_rows
    model, epoch, committed = state["model"], state["epoch"], int(state["rows"])
    matrix_path, rows_path = folder / f"matrix-{epoch}.f32", folder / f"rows-{epoch}.bin"
    width, row_size = state["dims"] * 4, _row_dtype().itemsize
    # Rows a killed catch-up appended after the last committed state: not counted, so dropped.
    for path, size in ((matrix_path, committed * width), (rows_path, committed * row_size)):
        if path.stat().st_size != size:
            os.truncate(path, size)
    if not store.sql("SELECT COUNT(*) FROM sqlite_master WHERE name = 'vector_log'")[0][0]:
        return None  # no log (dropped, or a database restored from before the files): build again
    with store.snapshot():
        seq = _log_position(store)
        generation = store.generation()
        if seq < state["seq"]:
            return None  # the log was emptied (a copied or restored database): build again
        entries = store.sql("SELECT chunk, hash, delta FROM vector_log WHERE seq > ? AND seq <= ?", [state["seq"], seq])
        if len(entries) > max(BATCH * 20, committed * REBUILD_SHARE):
            return None
        affected = {int(c) for c, _, _ in entries if c is not None}
        hashes = sorted({h for _, h, _ in entries if h is not None})
        for s in range(0, len(hashes), BATCH):
            part = hashes[s : s + BATCH]
            affected.update(int(r[0]) for r in store.sql(
                f"SELECT rowid FROM chunks WHERE hash IN ({','.join('?' * len(part))})", part))
        current = list(_current(store, model, sorted(affected)))
        chunks = int(state["chunks"]) + sum(d for _, _, d in entries)  # (no COUNT(*): ~70 ms at a million chunks)
    names: list[str] = list(state["sources"])
    code = {n: i for i, n in enumerate(names)}
    dead = 0
    if affected and committed:
        rows = np.memmap(rows_path, dtype=_row_dtype(), mode="r+", shape=(committed,))
        hit = np.flatnonzero(np.isin(rows["chunk"], np.fromiter(affected, dtype=np.int64)) & (rows["alive"] == 1))
        if hit.size:
            rows["alive"][hit] = 0  # (written back by the kernel: other processes map the same pages)
        dead = int(hit.size)
        del rows
    if current:
        for _, source, _, _ in current:
            if source not in code:
                code[source] = len(names)
                names.append(source)
        new = np.zeros(len(current), dtype=_row_dtype())
        new["chunk"] = [c for c, _, _, _ in current]
        new["updated"] = [u for _, _, u, _ in current]
        new["source"] = [code[s] for _, s, _, _ in current]
        new["alive"] = 1
        from cairn_servers.search.vectors import normalize

        vecs = normalize(np.frombuffer(b"".join(v for _, _, _, v in current), dtype=np.float32).reshape(len(current), -1))
        if vecs.shape[1] != state["dims"]:
            raise ValueError(f"a stored {model} vector has {vecs.shape[1]} dimensions, not {state['dims']}")
        _append(matrix_path, vecs.tobytes(), sync=False)
        _append(rows_path, new.tobytes(), sync=False)
    _kill_point("after-append")
    state = dict(state, rows=committed + len(current), alive=int(state["alive"]) - dead + len(current), seq=seq,
                 generation=generation, chunks=chunks, sources=names)
    if state["rows"] - state["alive"] > state["rows"] * REBUILD_SHARE and state["rows"] > BATCH * 20:
        return None
    tail = state["rows"] - int(state["ann_rows"])
    durable = False  # a catch-up costs no fsync (~5-30 ms each under load); a fold or a build makes all durable
    if state["rows"] >= ann_min_rows and tail >= max(fold_min_rows, int(state["rows"] * FOLD_SHARE)):
        state["ann"], state["ann_rows"] = _ann_build(folder, state, state["rows"], base=state["ann"])
        _fsync(matrix_path)
        _fsync(rows_path)
        durable = True
    _write_state(folder, state, durable)
    _clean(folder, state)
    _prune(store, folder, seq)
    return state


PRUNE_ENTRIES = 50_000  # applied log entries left before a catch-up deletes them


def _prune(store: "Store", folder: Path, seq: int) -> None:
    """Delete the applied log entries once there are :data:`PRUNE_ENTRIES`, when this model's files are the only
    ones (another model's would miss them). Never waits: while another connection writes (a sync), it is left
    to a later catch-up, so a search does not wait for the sync's transaction."""
    if len([p for p in folder.parent.iterdir() if p.is_dir()]) != 1:
        return
    first = store.sql("SELECT MIN(seq) FROM vector_log")[0][0]
    if first is None or seq - int(first) < PRUNE_ENTRIES:
        return
    store.sql("PRAGMA busy_timeout = 0")
    try:
        with store.transaction():
            store.sql("DELETE FROM vector_log WHERE seq <= ?", [seq])
    except Exception:  # a read-only or busy database: the entries stay, harmless
        pass
    finally:
        store.sql("PRAGMA busy_timeout = 10000")


class VectorFiles:
    """One state of the files, mapped: what a query reads. Never changed in place: a catch-up makes a new one."""

    def __init__(self, folder: Path, state: dict[str, Any], previous: "VectorFiles | None" = None) -> None:
        """``previous``: the state this one follows; its index, when the same file, is used again (not mapped anew)."""
        import numpy as np

        self.folder, self.state = folder, state
        self.generation = int(state["generation"])
        self.size = int(state["rows"])
        self.dims = int(state["dims"])
        self.unembedded = max(0, int(state["chunks"]) - int(state["alive"]))
        self.source_names: list[str] = list(state["sources"])
        epoch = state["epoch"]
        self.matrix: Any
        self.rows: Any
        if self.size:
            self.matrix = np.memmap(folder / f"matrix-{epoch}.f32", dtype=np.float32, mode="r",
                                    shape=(self.size, self.dims))
            self.rows = np.memmap(folder / f"rows-{epoch}.bin", dtype=_row_dtype(), mode="r", shape=(self.size,))
            self._fd = os.open(folder / f"matrix-{epoch}.f32", os.O_RDONLY)
            weakref.finalize(self, os.close, self._fd)
        else:
            self.matrix = np.zeros((0, self.dims), dtype=np.float32)
            self.rows = np.zeros(0, dtype=_row_dtype())
        self.ann_rows = int(state["ann_rows"]) if state.get("ann") else 0
        self.ann: Any = None
        if self.ann_rows and previous is not None and previous.ann is not None and \
                previous.state.get("ann") == state["ann"] and previous.state["epoch"] == epoch:
            self.ann = previous.ann
        elif self.ann_rows:
            self.ann = _usearch().restore(str(folder / state["ann"]), view=True)
            self.ann.expansion_search = EXPANSION_SEARCH

    def mask(self, sources: tuple[str, ...] | None, since: int | None, until: int | None,
             rows: "npt.NDArray[np.intp] | slice") -> "npt.NDArray[np.bool_]":
        """Which of ``rows`` are alive and pass the filters."""
        import numpy as np

        part = self.rows[rows]
        m: npt.NDArray[np.bool_] = part["alive"] == 1
        if sources is not None:
            codes = [i for i, n in enumerate(self.source_names) if n in sources]
            m &= np.isin(part["source"], np.array(codes, dtype=np.int32))
        if since is not None:
            m &= part["updated"] >= since
        if until is not None:
            m &= part["updated"] < until
        return m

    def search(self, query: "npt.NDArray[Any]", k: int, sources: tuple[str, ...] | None = None,
               since: int | None = None, until: int | None = None, *, exact: bool = False) -> list[tuple[int, float]]:
        """(chunk rowid, cosine) of the best ``k`` alive rows that pass the filters, best first (ties by row).
        ``exact``: scan every row even when an index exists (what the recall checks compare with)."""
        import numpy as np

        from cairn_servers.search.vectors import normalize

        if self.size == 0 or k <= 0:
            return []
        q = normalize(query)[0]
        if q.shape[0] != self.dims:
            raise ValueError(f"query has {q.shape[0]} dimensions, the index has {self.dims}")
        filtered = sources is not None or since is not None or until is not None
        start = 0 if exact or self.ann is None else self.ann_rows
        candidates: list["npt.NDArray[np.intp]"] = []
        if start:
            want = max(ANN_CANDIDATES, 4 * k)
            while True:
                found = self.ann.search(q, min(want, self.ann_rows))
                keys = np.asarray(found.keys, dtype=np.intp)
                keys = keys[keys < self.ann_rows]
                keep = keys[self.mask(sources, since, until, keys)]
                if keep.size >= k or want >= self.ann_rows or not filtered and want >= 4 * ANN_CANDIDATES:
                    break
                if want >= 16 * ANN_CANDIDATES:  # a narrow filter: scan the rows it lets through
                    keep = np.flatnonzero(self.mask(sources, since, until, slice(0, self.ann_rows)))
                    break
                want *= 4
            candidates.append(keep)
        if start < self.size:
            candidates.append(np.flatnonzero(self.mask(sources, since, until, slice(start, self.size))) + start)
        rows = np.concatenate(candidates) if candidates else np.zeros(0, dtype=np.intp)
        if rows.size == 0:
            return []
        if start == 0 and rows.size == self.size:
            scores = np.asarray(self.matrix @ q)
        else:
            scores = self._scores(rows, q)
        k = min(k, rows.size)
        top = np.argpartition(-scores, k - 1)[:k] if rows.size > k else np.arange(rows.size)
        order = top[np.lexsort((rows[top], -scores[top]))]
        chunks = self.rows["chunk"]
        return [(int(chunks[rows[i]]), float(scores[i])) for i in order]

    def _scores(self, rows: "npt.NDArray[np.intp]", q: "npt.NDArray[np.float32]") -> "npt.NDArray[np.float32]":
        import numpy as np

        out = np.empty(rows.size, dtype=np.float32)
        scattered = rows < self.ann_rows if self.ann is not None else np.zeros(rows.size, dtype=bool)
        if scattered.any():
            # The index's candidates, read with pread: a page fault on the mapped matrix maps the kernel's whole
            # folio around the row (~360 KB a row at a million rows, measured), so 30 queries made 1.4 GB resident.
            picked = np.flatnonzero(scattered)
            out[picked] = self._read(rows[picked]) @ q
        rest = np.flatnonzero(~scattered)
        for s in range(0, rest.size, 65536):  # the exact scan, mapped, in blocks: no copy the size of the matrix
            part = rest[s : s + 65536]
            out[part] = self.matrix[rows[part]] @ q
        return out

    def _read(self, rows: "npt.NDArray[np.intp]") -> "npt.NDArray[np.float32]":
        """The matrix's ``rows``, read from the file."""
        import numpy as np

        width = self.dims * 4
        out = np.empty((rows.size, self.dims), dtype=np.float32)
        view = out.reshape(-1).view(np.uint8).data  # a memoryview of bytes
        for i, r in enumerate(rows.tolist()):
            os.preadv(self._fd, [view[i * width : (i + 1) * width]], r * width)
        return out


_files: dict[tuple[str, str], VectorFiles] = {}
_lock = threading.Lock()
_busy: set[tuple[str, str]] = set()


def files_for(store: "Store", model: str, dims: int, *, ann_min_rows: int | None = None,
              fold_min_rows: int | None = None) -> VectorFiles:
    """The mapped files for this database and model, caught up with the store's generation. While one thread
    catches up, other threads keep answering from the state they have (they do not wait for it)."""
    key = (store.label, model)
    generation = store.generation()
    with _lock:
        cached = _files.get(key)
        if cached is not None and (cached.generation == generation or key in _busy):
            return cached
        _busy.add(key)
    try:
        folder = directory(store, model)
        state = _read_state(folder)
        if state is None or state["generation"] != generation or state["dims"] != dims:
            state = catch_up(store, model, dims, ann_min_rows=ann_min_rows, fold_min_rows=fold_min_rows)
        files = VectorFiles(folder, state, cached)
        with _lock:
            _files[key] = files
        return files
    finally:
        with _lock:
            _busy.discard(key)


def forget(store: "Store") -> None:
    """Drop this database's mapped files from the cache (tests; a rebuild maps the new files on the next query)."""
    with _lock:
        for key in [k for k in _files if k[0] == store.label]:
            del _files[key]


class VectorMatrix:
    """Every chunk vector of one model as one contiguous float32 matrix, plus per-row filter columns."""

    def __init__(self, index: "VectorIndex", chunk_rows: "npt.NDArray[np.int64]", sources: "npt.NDArray[np.int32]",
                 source_names: list[str], updated: "npt.NDArray[np.int64]", generation: int,
                 unembedded: int = 0) -> None:
        self.index = index
        self.unembedded = unembedded  # chunks without a vector of this model when it was loaded
        self.chunk_rows = chunk_rows
        self.sources = sources
        self.source_names = source_names
        self.updated = updated
        self.generation = generation

    @classmethod
    def load(cls, store: Store, model: str, dims: int, *, scan: bool = True) -> "VectorMatrix":
        """Every chunk with a ``model`` vector, by chunk rowid. Two sequential reads in one snapshot (the
        chunks with their filter columns; the model's vectors in table order), each vector copied into its
        chunk's rows of one preallocated matrix: no per-row lookup in SQL, no list of 100k blobs."""
        import numpy as np

        from cairn_servers.search.vectors import VectorIndex

        generation = store.generation()
        with store.snapshot():
            chunks = store.vector_chunks()
            first: dict[str, int] = {}  # hash -> its first chunk's position
            more: dict[int, int] = {}  # position -> the next chunk's with the same hash (chunks sharing a text)
            last: dict[str, int] = {}
            for i, row in enumerate(chunks):
                j = first.setdefault(row[1], i)
                if j != i:
                    more[last.get(row[1], j)] = i
                    last[row[1]] = i
            del last
            matrix = np.zeros((len(chunks), dims), dtype=np.float32)
            flat = matrix.reshape(-1).view(np.uint8).data  # a memoryview of bytes, even with 0 rows
            width = dims * 4
            filled: list[int] = []
            for h, blob in store.vector_blobs(model):
                at = first.get(h)
                if at is None:
                    continue  # a vector no chunk uses any more
                i = at
                if len(blob) != width:
                    raise ValueError(f"a stored {model} vector has {len(blob) // 4} dimensions, not {dims}")
                flat[i * width : (i + 1) * width] = blob
                filled.append(i)
                while i in more:
                    i = more[i]
                    flat[i * width : (i + 1) * width] = blob
                    filled.append(i)
        del first, more, flat
        have = np.zeros(len(chunks), dtype=bool)
        have[np.array(filled, dtype=np.intp)] = True
        del filled
        unembedded = len(chunks) - int(have.sum())
        if not have.all():  # chunks still waiting for their vector
            matrix = matrix[have]
        kept = [row for row, ok in zip(chunks, have.tolist()) if ok]
        del chunks
        names = sorted({r[2] for r in kept})
        code = {n: i for i, n in enumerate(names)}
        return cls(
            VectorIndex(matrix, owned=True, int8_min_rows=None if scan else 1 << 62),
            np.fromiter((r[0] for r in kept), dtype=np.int64, count=len(kept)),
            np.fromiter((code[r[2]] for r in kept), dtype=np.int32, count=len(kept)),
            names,
            np.fromiter((r[3] for r in kept), dtype=np.int64, count=len(kept)),
            generation,
            unembedded,
        )

    def mask(self, sources: "tuple[str, ...] | None", since: int | None,
             until: int | None) -> "npt.NDArray[np.bool_] | None":
        """The rows a search's filters keep (None: all of them)."""
        import numpy as np

        if sources is None and since is None and until is None:
            return None
        m = np.ones(self.chunk_rows.shape[0], dtype=bool)
        if sources is not None:
            codes = [i for i, n in enumerate(self.source_names) if n in sources]
            m &= np.isin(self.sources, np.array(codes, dtype=np.int32))
        if since is not None:
            m &= self.updated >= since
        if until is not None:
            m &= self.updated < until
        return m
