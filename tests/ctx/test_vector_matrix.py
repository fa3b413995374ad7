"""The in-memory vector matrix of SQLite knowledge bases (:class:`cairn_servers.ctx.vectorfile.VectorMatrix`), loaded with
two sequential reads instead of one SQL join per vector, holds exactly what the join gave: the same chunks in the
same order, the same filter columns and the same normalised vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cairn_servers.ctx.chunk import Chunk, chunk_hash
from cairn_servers.ctx.retrieval import Filters
from cairn_servers.ctx.vectorfile import VectorMatrix
from cairn_servers.ctx.store import DocumentRecord, SqliteStore
from cairn_servers.ctx.service import Service
from cairn_servers.search.vectors import normalize

from .conftest import config_file, write

MODEL = "fake:unit:8"


def _store(tmp_path: Path) -> tuple[SqliteStore, list[str]]:
    """Documents in three sources whose chunks share texts (one vector, several chunks), some chunks without a
    vector (pending), a vector no chunk uses (orphan), a zero vector, and another model's vectors."""
    store = SqliteStore(tmp_path / "kb.sqlite", create=True)
    rng = np.random.default_rng(5)
    texts = [f"text {i}" for i in range(30)]
    hashes = []
    with store.transaction():
        for d in range(12):
            chunks = []
            for k in range(5):
                body = texts[(d * 7 + k * 3) % len(texts)]  # repeats across documents
                chunks.append(Chunk(k, "# H", body, chunk_hash("# H", body)))
            store.upsert(DocumentRecord(source=f"filesystem:s{d % 3}", source_id=f"d{d}.md", title=f"D{d}", body="",
                                        updated_at=1_600_000_000 + d * 1000, fingerprint="x", content_hash=str(d)),
                         chunks)
        hashes = [chunk_hash("# H", t) for t in texts]
        stored = hashes[:25] + ["orphan-hash"]  # texts 25-29 pending
        vecs = (rng.normal(size=(len(stored), 8)) * 3).astype(np.float32)
        vecs[3] = 0.0
        store.put_vectors(MODEL, stored, [v.tobytes() for v in vecs])
        store.put_vectors("other:model:8", hashes, [v.tobytes() for v in rng.normal(size=(30, 8)).astype(np.float32)])
        store.bump()
    return store, hashes


def _joined(store: SqliteStore) -> tuple[list[int], list[str], list[int], np.ndarray]:
    """What the matrix was built from before: the SQL join, by chunk rowid, normalised as a copy."""
    rows = store.vector_rows(MODEL)
    matrix = np.frombuffer(b"".join(r[3] for r in rows), dtype=np.float32).reshape(len(rows), 8)
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], normalize(matrix)


def test_matrix_holds_what_the_join_gave(tmp_path: Path) -> None:
    store, _ = _store(tmp_path)
    rowids, sources, updated, expected = _joined(store)
    assert 0 < len(rowids) < store.counts()[1]  # some chunks are pending
    m = VectorMatrix.load(store, MODEL, 8)
    assert m.chunk_rows.tolist() == rowids
    assert [m.source_names[c] for c in m.sources.tolist()] == sources
    assert m.updated.tolist() == updated
    assert m.index.matrix.tobytes() == expected.tobytes()
    assert m.generation == store.generation()
    # Filters and answers: the same as over the join's matrix.
    q = np.random.default_rng(9).normal(size=8).astype(np.float32)
    for filters in (Filters(), Filters(sources=("filesystem:s1",)), Filters(since=1_600_004_000)):
        mask = m.mask(filters.sources, filters.since, filters.until)
        ref = None if mask is None else np.array(
            [(filters.sources is None or s in filters.sources) and (filters.since is None or u >= filters.since)
             for s, u in zip(sources, updated)])
        assert (mask is None) == (ref is None) and (mask is None or mask.tolist() == ref.tolist())  # type: ignore[union-attr]
        hits = m.index.search(q, 10, mask)
        scores = expected @ normalize(q)[0]
        allowed = [i for i in range(len(rowids)) if ref is None or ref[i]]
        best = sorted(allowed, key=lambda i: (-scores[i], i))[:10]
        assert [h.row for h in hits] == best
        assert [h.score for h in hits] == [float(scores[i]) for i in best]


def test_matrix_loads_inside_an_open_transaction_and_when_empty(tmp_path: Path) -> None:
    store, _ = _store(tmp_path)
    with store.transaction():  # the snapshot is the transaction already open
        m = VectorMatrix.load(store, MODEL, 8)
    assert m.index.matrix.tobytes() == _joined(store)[3].tobytes()
    assert VectorMatrix.load(store, "nobody:model:8", 8).index.size == 0
    empty = SqliteStore(tmp_path / "empty.sqlite", create=True)
    assert VectorMatrix.load(empty, MODEL, 8).index.size == 0


def test_a_vector_of_the_wrong_size_is_an_error_not_a_wrong_matrix(tmp_path: Path) -> None:
    store, hashes = _store(tmp_path)
    with store.transaction():
        store.put_vectors(MODEL, [hashes[26]], [np.ones(5, dtype=np.float32).tobytes()])
    try:
        VectorMatrix.load(store, MODEL, 8)
    except ValueError as exc:
        assert "5 dimensions, not 8" in str(exc)
    else:
        raise AssertionError("a 5-dimension vector was loaded into an 8-dimension matrix")


@pytest.mark.usefixtures("ctx_backend")
def test_both_backends_give_the_matrix_rows_the_join_gives(tmp_path: Path) -> None:
    # vector_chunks + vector_blobs (what VectorMatrix.load reads) against vector_rows (the join), on SQLite and
    # on PostgreSQL: the same chunks, filter columns and vector bytes. Some texts repeat (shared vectors).
    write(tmp_path / "notes", {f"n{i:02d}.md": f"# Note {i % 5}\n\nkiwi report {i % 5}\n" for i in range(15)})
    write(tmp_path / "wiki", {"kiwi.md": "# Kiwi\n\nA kiwi is a flightless bird.\n"})
    svc = Service.from_config(config_file(tmp_path, """
[db]
path = "kb.sqlite"
[embedding]
provider = "local"
[connectors.filesystem.notes]
root = "notes"
[connectors.filesystem.wiki]
root = "wiki"
"""))
    svc.sync("all")
    model = svc.embedder().identity
    joined = svc.store.vector_rows(model)
    blobs = dict(svc.store.vector_blobs(model))
    with svc.store.snapshot():
        chunks = svc.store.vector_chunks()
    rebuilt = [(r, s, u, blobs[h]) for r, h, s, u in chunks if h in blobs]
    assert len(joined) == 16 and len(blobs) < len(joined)  # shared texts: fewer vectors than chunks
    assert rebuilt == joined
    svc.close()
