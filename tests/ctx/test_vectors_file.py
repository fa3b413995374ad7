"""The memory-mapped vector files of SQLite knowledge bases (:mod:`cairn_servers.ctx.vectorfile`): the ANN index
against the exact scan, writes applied as their own rows (no reload), a SIGKILL between the files and their state,
and a new process answering without reading the matrix."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cairn_servers.ctx import vectorfile
from cairn_servers.ctx.chunk import Chunk, chunk_hash
from cairn_servers.ctx.store import DocumentRecord, SqliteStore

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ctx"
MODEL = "fake:unit:16"
DIMS = 16


def _add(store: SqliteStore, rng: np.random.Generator, docs: range, per_doc: int = 10, *, source: str = "fs:a",
         updated: int = 1_600_000_000, model: str = MODEL, dims: int = DIMS) -> dict[str, np.ndarray]:
    """Documents of ``per_doc`` distinct chunks each, every chunk with a random vector; hash -> vector."""
    vectors: dict[str, np.ndarray] = {}
    with store.transaction():
        for d in docs:
            chunks = []
            for k in range(per_doc):
                body = f"doc {d} chunk {k} {source}"
                h = chunk_hash("", body)
                chunks.append(Chunk(k, "", body, h))
                vectors[h] = rng.normal(size=dims).astype(np.float32)
            store.upsert(DocumentRecord(source=source, source_id=f"d{d}.md", title=f"D{d}", body="",
                                        updated_at=updated + d, fingerprint="x", content_hash=str(d)), chunks)
        store.put_vectors(model, list(vectors), [v.tobytes() for v in vectors.values()])
        store.bump()
    return vectors


def _exact(store: SqliteStore, q: np.ndarray, k: int) -> list[int]:
    """The top ``k`` chunk rowids by cosine, computed from SQLite alone."""
    rows = store.vector_rows(MODEL)
    m = np.frombuffer(b"".join(r[3] for r in rows), dtype=np.float32).reshape(len(rows), DIMS)
    m = m / np.linalg.norm(m, axis=1, keepdims=True)
    scores = m @ (q / np.linalg.norm(q))
    order = np.lexsort((np.array([r[0] for r in rows]), -scores))[:k]
    return [rows[i][0] for i in order]


def test_ann_recall_against_exact(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    store = SqliteStore(tmp_path / "kb.sqlite", create=True)
    _add(store, rng, range(300))  # 3,000 rows, the index threshold lowered to 1,000
    files = vectorfile.files_for(store, MODEL, DIMS, ann_min_rows=1000)
    assert files.ann is not None and files.ann_rows == 3000
    found = 0
    for _ in range(50):
        q = rng.normal(size=DIMS).astype(np.float32)
        ann = [c for c, _ in files.search(q, 10)]
        exact = [c for c, _ in files.search(q, 10, exact=True)]
        assert exact == _exact(store, q, 10)
        found += len(set(ann) & set(exact))
    assert found / 500 >= 0.95
    vectorfile.forget(store)


def test_write_is_applied_incrementally(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    store = SqliteStore(tmp_path / "kb.sqlite", create=True)
    _add(store, rng, range(200))
    files = vectorfile.files_for(store, MODEL, DIMS, ann_min_rows=1000, fold_min_rows=10_000)
    epoch, rows = files.state["epoch"], files.size
    matrix = vectorfile.directory(store, MODEL) / f"matrix-{epoch}.f32"
    before = matrix.stat().st_ino
    added = _add(store, rng, range(200, 203), source="fs:b")  # 30 new rows
    with store.transaction():  # a deleted document: its rows die
        store.delete([store.sql("SELECT rowid FROM documents WHERE source_id = 'd0.md'")[0][0]])
        store.bump()
    after = vectorfile.files_for(store, MODEL, DIMS, ann_min_rows=1000, fold_min_rows=10_000)
    assert after is not files
    # The same files, 30 rows appended, 10 rows marked dead: no rebuild.
    assert after.state["epoch"] == epoch and matrix.stat().st_ino == before and after.size == rows + 30
    assert after.state["alive"] == rows + 30 - 10 and after.ann_rows == rows  # the new rows are the exact tail
    q = next(iter(added.values()))
    best = after.search(q, 1, ("fs:b",))
    assert best and best[0][1] == pytest.approx(1.0, abs=1e-5)
    assert store.sql("SELECT hash FROM chunks WHERE rowid = ?", [best[0][0]])[0][0] == next(iter(added))
    gone = {r[0] for r in store.sql("SELECT rowid FROM chunks")}
    for _ in range(20):
        qv = rng.normal(size=DIMS).astype(np.float32)
        hits = [c for c, _ in after.search(qv, 10)]
        assert set(hits) <= gone and hits == _exact(store, qv, 10)[: len(hits)] or \
            len(set(hits) & set(_exact(store, qv, 10))) >= 8
    assert after.unembedded == 0 and after.state["chunks"] == store.counts()[1]
    vectorfile.forget(store)


KILLED = """
import sys
from cairn_servers.ctx import vectorfile
from cairn_servers.ctx.store import SqliteStore
store = SqliteStore(__import__("pathlib").Path(sys.argv[1]))
vectorfile.files_for(store, sys.argv[2], int(sys.argv[3]), ann_min_rows=1000, fold_min_rows=10_000)
"""


def test_sigkill_between_the_files_and_their_state(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    store = SqliteStore(tmp_path / "kb.sqlite", create=True)
    _add(store, rng, range(150))
    files = vectorfile.files_for(store, MODEL, DIMS, ann_min_rows=1000)
    committed = files.size
    vectorfile.forget(store)
    _add(store, rng, range(150, 160))  # committed in SQLite; the files are behind
    env = dict(os.environ, CAIRN_VECTORS_KILL="after-append")
    done = subprocess.run([sys.executable, "-c", KILLED, str(store.path), MODEL, str(DIMS)], env=env,
                          capture_output=True, timeout=60)
    assert done.returncode == -9  # killed after appending its rows, before replacing state.json
    folder = vectorfile.directory(store, MODEL)
    state = vectorfile._read_state(folder)
    assert state is not None and state["rows"] == committed  # the state still counts the old rows only
    matrix = folder / f"matrix-{state['epoch']}.f32"
    assert matrix.stat().st_size == (committed + 100) * DIMS * 4  # the appended, uncounted rows
    again = vectorfile.files_for(store, MODEL, DIMS, ann_min_rows=1000, fold_min_rows=10_000)
    assert again.size == committed + 100 and matrix.stat().st_size == again.size * DIMS * 4
    assert again.state["alive"] == committed + 100
    for _ in range(10):
        q = rng.normal(size=DIMS).astype(np.float32)
        assert [c for c, _ in again.search(q, 10, exact=True)] == _exact(store, q, 10)
    vectorfile.forget(store)


FIRST = """
import sys, time, resource
import numpy as np
from cairn_servers.ctx import vectorfile
from cairn_servers.ctx.store import SqliteStore
def read() -> int:
    with open("/proc/self/io") as f:
        return int(dict(line.split(": ") for line in f.read().splitlines())["rchar"])
vectorfile._usearch()  # the libraries' own files are not the matrix
store = SqliteStore(__import__("pathlib").Path(sys.argv[1]))
before = read()
files = vectorfile.files_for(store, sys.argv[2], int(sys.argv[3]), ann_min_rows=1000)
hits = files.search(np.ones(int(sys.argv[3]), dtype=np.float32), 10)
print(len(hits), files.ann is not None, read() - before)
"""


def test_first_query_does_not_read_the_matrix(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    store = SqliteStore(tmp_path / "kb.sqlite", create=True)
    _add(store, rng, range(400), model="fake:unit:384", dims=384)  # 4,000 rows of minilm's size: 6 MB
    files = vectorfile.files_for(store, "fake:unit:384", 384, ann_min_rows=1000)
    assert files.ann is not None
    vectorfile.forget(store)
    matrix_bytes = files.size * 384 * 4
    out = subprocess.run([sys.executable, "-c", FIRST, str(store.path), "fake:unit:384", "384"], capture_output=True,
                         text=True, timeout=60, check=True).stdout.split()
    assert out[:2] == ["10", "True"]
    # Bytes read with read(2) to open the files and answer: the state, not the matrix (mapped, touched only at the
    # rescored rows) nor the index (mapped as a view).
    assert int(out[2]) < matrix_bytes // 20


def test_filters_through_the_index(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    store = SqliteStore(tmp_path / "kb.sqlite", create=True)
    _add(store, rng, range(250), source="fs:a")
    _add(store, rng, range(250, 255), source="fs:b", updated=1_700_000_000)  # 50 rows of a small source
    files = vectorfile.files_for(store, MODEL, DIMS, ann_min_rows=1000)
    assert files.ann is not None and files.ann_rows == files.size == 2550
    b = {r[0] for r in store.sql("SELECT c.rowid FROM chunks c JOIN documents d ON d.rowid = c.doc"
                                 " WHERE d.source = 'fs:b'")}
    for _ in range(10):
        q = rng.normal(size=DIMS).astype(np.float32)
        for hits in (files.search(q, 10, ("fs:b",)), files.search(q, 10, since=1_700_000_000)):
            assert len(hits) == 10 and {c for c, _ in hits} <= b
            exact = files.search(q, 10, ("fs:b",), exact=True)  # the narrow filter: its rows scanned
            assert [c for c, _ in hits] == [c for c, _ in exact]
            assert [s for _, s in hits] == pytest.approx([s for _, s in exact], abs=1e-5)
    vectorfile.forget(store)


def test_embed_rebuild_writes_the_files_again(tmp_path: Path) -> None:
    from cairn_servers.ctx.service import Service

    root = tmp_path / "example"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("data"))
    cfg = root / "ctx.toml"
    cfg.write_text(cfg.read_text().replace('provider = "disabled"', 'provider = "local"'))
    svc = Service.from_config(cfg)
    assert all(r.ok for r in svc.sync("all").sources)
    assert svc.search("connect to the VPN", "semantic", limit=1)[0].source_id == "vpn"
    identity = svc.embedder().identity
    folder = vectorfile.directory(svc.store, identity)
    first = vectorfile._read_state(folder)
    assert first is not None and first["alive"] == svc.store.counts()[1]
    svc.embed_rebuild()
    again = vectorfile._read_state(folder)
    assert again is not None and again["epoch"] == first["epoch"] + 1 and again["alive"] == first["alive"]
    assert sorted(p.name for p in folder.iterdir()) == ["lock", f"matrix-{again['epoch']}.f32",
                                                        f"rows-{again['epoch']}.bin", "state.json"]
    assert svc.search("connect to the VPN", "semantic", limit=1)[0].source_id == "vpn"
    vectorfile.forget(svc.store)
    svc.close()


def test_a_database_that_cannot_be_written_gets_no_log(tmp_path: Path) -> None:
    """Without the change log (a read-only database), every change makes the next query write the files again."""
    rng = np.random.default_rng(7)
    store = SqliteStore(tmp_path / "kb.sqlite", create=True)
    _add(store, rng, range(20))
    store.sql("PRAGMA query_only = ON")
    files = vectorfile.files_for(store, MODEL, DIMS)
    assert files.state["seq"] == -1 and files.size == 200
    assert not store.sql("SELECT name FROM sqlite_master WHERE name = 'vector_log'")
    store.sql("PRAGMA query_only = OFF")
    added = _add(store, rng, range(20, 21))
    store.sql("PRAGMA query_only = ON")
    again = vectorfile.files_for(store, MODEL, DIMS)
    assert again.state["epoch"] == files.state["epoch"] + 1 and again.size == 210
    best = again.search(next(iter(added.values())), 1)
    assert store.sql("SELECT hash FROM chunks WHERE rowid = ?", [best[0][0]])[0][0] == next(iter(added))
    vectorfile.forget(store)


def test_the_index_is_mapped_once_per_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    store = SqliteStore(tmp_path / "kb.sqlite", create=True)
    _add(store, rng, range(150))
    files = vectorfile.files_for(store, MODEL, DIMS, ann_min_rows=1000, fold_min_rows=10_000)
    _add(store, rng, range(150, 151))  # into the tail: the same index file
    after = vectorfile.files_for(store, MODEL, DIMS, ann_min_rows=1000, fold_min_rows=10_000)
    assert after is not files and after.ann is files.ann and after.size == files.size + 10
    _add(store, rng, range(151, 160))  # 100 tail rows, folded into a new index file
    folded = vectorfile.files_for(store, MODEL, DIMS, ann_min_rows=1000, fold_min_rows=50)
    assert folded.ann is not files.ann and folded.ann_rows == folded.size == files.size + 100
    assert sorted(p.name for p in vectorfile.directory(store, MODEL).iterdir() if p.suffix == ".usearch") == \
        [f"ann-1-{folded.size}.usearch"]
    for _ in range(10):
        q = rng.normal(size=DIMS).astype(np.float32)
        assert len({c for c, _ in folded.search(q, 10)} & {c for c, _ in folded.search(q, 10, exact=True)}) >= 8
    vectorfile.forget(store)


def test_applied_log_entries_are_deleted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(9)
    store = SqliteStore(tmp_path / "kb.sqlite", create=True)
    _add(store, rng, range(10))
    vectorfile.files_for(store, MODEL, DIMS)
    _add(store, rng, range(10, 12))  # 20 chunks and 20 vectors: 40 entries
    monkeypatch.setattr(vectorfile, "PRUNE_ENTRIES", 1000)
    files = vectorfile.files_for(store, MODEL, DIMS)
    assert store.sql("SELECT COUNT(*) FROM vector_log")[0][0] == 40 and files.size == 120  # under the threshold
    monkeypatch.setattr(vectorfile, "PRUNE_ENTRIES", 30)
    _add(store, rng, range(12, 13))
    files = vectorfile.files_for(store, MODEL, DIMS)
    assert store.sql("SELECT COUNT(*) FROM vector_log")[0][0] == 0 and files.size == 130
    assert store.sql("PRAGMA busy_timeout")[0][0] == 10000
    _add(store, rng, range(13, 14))  # the log goes on from there
    assert vectorfile.files_for(store, MODEL, DIMS).size == 140
    vectorfile.forget(store)


def test_unembedded_follows_the_log(tmp_path: Path) -> None:
    rng = np.random.default_rng(10)
    store = SqliteStore(tmp_path / "kb.sqlite", create=True)
    _add(store, rng, range(10))
    assert vectorfile.files_for(store, MODEL, DIMS).unembedded == 0
    with store.transaction():  # a document whose 3 chunks wait for their vectors
        store.upsert(DocumentRecord(source="fs:a", source_id="new.md", title="New", body="", updated_at=1,
                                    fingerprint="x", content_hash="n"),
                     [Chunk(k, "", f"pending {k}", chunk_hash("", f"pending {k}")) for k in range(3)])
        store.bump()
    assert vectorfile.files_for(store, MODEL, DIMS).unembedded == 3
    with store.transaction():
        store.put_vectors(MODEL, [chunk_hash("", "pending 0")], [rng.normal(size=DIMS).astype(np.float32).tobytes()])
        store.bump()
    files = vectorfile.files_for(store, MODEL, DIMS)
    assert files.unembedded == 2 and files.size == 101
    with store.transaction():
        store.delete([store.sql("SELECT rowid FROM documents WHERE source_id = 'new.md'")[0][0]])
        store.bump()
    files = vectorfile.files_for(store, MODEL, DIMS)
    assert files.unembedded == 0 and files.state["chunks"] == store.counts()[1] == 100
    vectorfile.forget(store)


def test_files_without_their_log_are_written_again(tmp_path: Path) -> None:
    rng = np.random.default_rng(12)
    store = SqliteStore(tmp_path / "kb.sqlite", create=True)
    _add(store, rng, range(10))
    first = vectorfile.files_for(store, MODEL, DIMS)
    with store.transaction():  # a database restored from before the files had their log
        for (name,) in store.sql("SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'vector_log%'"):
            store.sql(f"DROP TRIGGER {name}")
        store.sql("DROP TABLE vector_log")
    _add(store, rng, range(10, 11))
    again = vectorfile.files_for(store, MODEL, DIMS)
    assert again.state["epoch"] == first.state["epoch"] + 1 and again.size == 110
    assert store.sql("SELECT COUNT(*) FROM sqlite_master WHERE name = 'vector_log'")[0][0] == 1
    vectorfile.forget(store)


def test_files_written_without_fsync_before_a_reboot_are_written_again(tmp_path: Path) -> None:
    rng = np.random.default_rng(13)
    store = SqliteStore(tmp_path / "kb.sqlite", create=True)
    _add(store, rng, range(10))
    first = vectorfile.files_for(store, MODEL, DIMS)
    assert first.state["durable"] is True  # written by a build: fsynced
    _add(store, rng, range(10, 11))
    caught = vectorfile.files_for(store, MODEL, DIMS)
    assert caught.state["durable"] is False and caught.state["boot"] and caught.state["epoch"] == first.state["epoch"]
    folder = vectorfile.directory(store, MODEL)
    state = json.loads((folder / "state.json").read_text())
    (folder / "state.json").write_text(json.dumps(dict(state, boot="another boot")))  # the machine restarted
    vectorfile.forget(store)
    _add(store, rng, range(11, 12))
    again = vectorfile.files_for(store, MODEL, DIMS)
    assert again.state["epoch"] == first.state["epoch"] + 1 and again.state["durable"] is True and again.size == 120
    vectorfile.forget(store)
