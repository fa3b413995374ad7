"""The disk-backed transaction index: collisions, repeated txids, rollback, and the indexer's use of it."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from cairn_servers.brk.indexer import SPECS, Indexer, index, open_store
from cairn_servers.brk.sample import write_sample
from cairn_servers.brk.txindex import TxIndex, expected_entries
from cairn_servers.core.errors import StorageError


def _reader(txids: list[bytes]):  # type: ignore[no-untyped-def]
    table = np.frombuffer(b"".join(txids), dtype=np.uint8).reshape(-1, 32)
    return lambda idx: table[idx]


def check_txindex(out: Path, prefix_bytes: int = 8) -> None:
    """The index under ``out`` holds exactly the committed transactions of the vecs, nothing else."""
    s = open_store(out)
    txi = TxIndex(out / "txindex", prefix_bytes=prefix_bytes)
    try:
        raw = s.read("txindex_to_txid").tobytes()
        assert txi.count == s.lengths["txindex_to_txid"]
        assert txi.entries() == expected_entries(raw, prefix_bytes)
    finally:
        txi.close()


def test_colliding_prefixes_resolve_by_the_full_txid(tmp_path: Path) -> None:
    rng = random.Random(1)
    txids = [rng.randbytes(32) for _ in range(3000)]
    txi = TxIndex(tmp_path / "ix", prefix_bytes=1)  # 256 keys for 3,000 txs: every key is shared
    for lo in range(0, 3000, 700):
        txi.insert(lo, txids[lo:lo + 700])
    read = _reader(txids)
    assert txi.lookup(txids, read) == list(range(3000))
    strangers = [bytes([t[0]]) + rng.randbytes(31) for t in txids[:200]]  # same prefixes, other txids
    assert txi.lookup(strangers, read) == [-1] * 200
    assert txi.entries() == expected_entries(b"".join(txids), 1)
    with pytest.raises(StorageError, match="cannot append at 10"):
        txi.insert(10, txids[:1])
    txi.remove_from(1234, txids[1234:])
    # The keys the rolled-back transactions held are gone; the earlier transactions they had taken
    # over are found by scanning txindex_to_txid, so every answer is still exact.
    assert txi.entries() == {k: v for k, v in expected_entries(b"".join(txids), 1).items() if v < 1234}
    assert txi.lookup(txids, read) == list(range(1234)) + [-1] * (3000 - 1234)
    txi.close()
    again = TxIndex(tmp_path / "ix", prefix_bytes=1)
    assert again.count == 1234 and again.lookup(txids[:5], read) == [0, 1, 2, 3, 4]
    again.close()
    # A different prefix length means different keys: the index starts over (the indexer refills it).
    other = TxIndex(tmp_path / "ix", prefix_bytes=8)
    assert other.count == 0 and other.entries() == {}
    other.close()


def test_repeated_txid_latest_wins_and_rollback_restores_the_earlier(tmp_path: Path) -> None:
    """Mainnet's two BIP30 duplicates: a repeated txid resolves to the later tx until it is rolled back."""
    rng = random.Random(2)
    txids = [rng.randbytes(32) for _ in range(6)]
    txids.append(txids[2])
    txids.append(rng.randbytes(32))
    read = _reader(txids)
    txi = TxIndex(tmp_path / "ix")
    txi.insert(0, txids[:4])
    txi.insert(4, txids[4:])
    assert txi.lookup([txids[2]], read) == [6]
    txi.remove_from(5, txids[5:])
    assert txi.lookup([txids[2]], read) == [2]
    txi.close()


def test_tiny_prefix_index_gives_the_same_vecs(tmp_path: Path) -> None:
    """A whole chain indexed with 1-byte keys (collisions everywhere) equals the normal index."""
    write_sample(tmp_path / "b", 400, seed=9)
    index(tmp_path / "b", tmp_path / "ref", durable=False)
    Indexer(tmp_path / "b", tmp_path / "tiny", durable=False, prefix_bytes=1, commit_blocks=37).run()
    r, t = open_store(tmp_path / "ref"), open_store(tmp_path / "tiny")
    for spec in SPECS:
        assert r.path(spec.name).read_bytes() == t.path(spec.name).read_bytes(), spec.name
    check_txindex(tmp_path / "tiny", prefix_bytes=1)
    check_txindex(tmp_path / "ref")


def test_opening_repairs_an_index_behind_or_ahead_of_the_vecs(tmp_path: Path) -> None:
    write_sample(tmp_path / "b", 300, seed=5)
    ref = tmp_path / "ref"
    index(tmp_path / "b", ref, durable=False, max_blocks=200)
    index(tmp_path / "b", ref, durable=False)
    out = tmp_path / "out"
    index(tmp_path / "b", out, max_blocks=200)
    # Behind: the last batch never reached the engine (a kill between the two writes).
    s = open_store(out)
    txids = s.read("txindex_to_txid").tobytes()
    cut = int(s.read("height_to_first_txindex")[150])
    txi = TxIndex(out / "txindex")
    txi.remove_from(cut, [txids[i:i + 32] for i in range(32 * cut, len(txids), 32)])
    txi.close()
    Indexer(tmp_path / "b", out)  # opening alone repairs it
    check_txindex(out)
    # Ahead: the vecs were emptied (a format change) but the engine kept its keys.
    index(tmp_path / "b", out)
    open_store(out).truncate({spec.name: 0 for spec in SPECS}, {})
    index(tmp_path / "b", out)
    check_txindex(out)
    for spec in SPECS:
        assert open_store(out).path(spec.name).read_bytes() == open_store(ref).path(spec.name).read_bytes()


def test_up_to_date_open_rebuilds_nothing(tmp_path: Path) -> None:
    write_sample(tmp_path / "b", 200, seed=6)
    index(tmp_path / "b", tmp_path / "out", durable=False)
    inserted: list[int] = []
    original = TxIndex.insert

    def spy(self: TxIndex, first: int, txids: Sequence[bytes] | bytes) -> None:
        inserted.append(len(txids))
        original(self, first, txids)

    TxIndex.insert = spy  # type: ignore[method-assign]
    try:
        ix = Indexer(tmp_path / "b", tmp_path / "out")
        r = ix.run()
    finally:
        TxIndex.insert = original  # type: ignore[method-assign]
    assert r.indexed_blocks == 0 and inserted == [] and r.height == 199
    assert not ix._headers_loaded  # no new block in the files, already at the best tip: no header loaded


def test_headers_load_only_when_chain_selection_needs_them(tmp_path: Path) -> None:
    full, b = tmp_path / "full", tmp_path / "b"
    files = write_sample(full, 300, seed=6, max_file_bytes=60_000)["files"]
    assert files >= 3
    b.mkdir()
    for n in range(files - 1):  # the last file arrives later
        (b / f"blk{n:05d}.dat").write_bytes((full / f"blk{n:05d}.dat").read_bytes())
    ix = Indexer(b, tmp_path / "out")
    first = ix.run(max_blocks=150)
    assert first.height == 149 and ix._headers_loaded
    ix = Indexer(b, tmp_path / "out")  # nothing new in the files, but not at the best tip yet
    r = ix.run()
    assert ix._headers_loaded and r.indexed_blocks > 0 and r.height < 299
    ix = Indexer(b, tmp_path / "out")
    assert ix.run().indexed_blocks == 0 and not ix._headers_loaded
    last = f"blk{files - 1:05d}.dat"
    (b / last).write_bytes((full / last).read_bytes())
    ix = Indexer(b, tmp_path / "out")
    r = ix.run()
    assert ix._headers_loaded and r.indexed_blocks > 0 and r.height == 299
    index(full, tmp_path / "ref", durable=False)
    for spec in SPECS:
        assert open_store(tmp_path / "out").path(spec.name).read_bytes() == \
            open_store(tmp_path / "ref").path(spec.name).read_bytes(), spec.name


def test_a_small_recent_map_gives_the_same_vecs(tmp_path: Path) -> None:
    """The recent-batch txid map drops its oldest batches (those spends then go to the engine): same vecs."""
    write_sample(tmp_path / "b", 140, seed=4, txs_per_block=120)
    index(tmp_path / "b", tmp_path / "ref", durable=False)
    ix = Indexer(tmp_path / "b", tmp_path / "small", durable=False, recent_txs=500, commit_blocks=2)
    ix.run()
    assert 0 < ix._recent.count <= 500 + 2 * 120 and len(ix._recent.batches) >= 2
    r, t = open_store(tmp_path / "ref"), open_store(tmp_path / "small")
    for spec in SPECS:
        assert r.path(spec.name).read_bytes() == t.path(spec.name).read_bytes(), spec.name
    check_txindex(tmp_path / "small")


def test_the_chunk_path_and_the_per_block_path_give_the_same_vecs(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Prevouts resolved a chunk at a time (numpy) equal the per-block path's, also when the two alternate
    within a batch (the per-block path takes over a chunk the chunk path leaves: a bad block, a repeated txid)."""
    write_sample(tmp_path / "b", 160, seed=5, txs_per_block=90)
    index(tmp_path / "b", tmp_path / "chunks", durable=False, chunk_bytes=20_000, commit_blocks=7)
    original = Indexer._add_chunk
    calls = {"chunk": 0, "left": 0}

    def every_third_left(self: Indexer, batch: object, blocks: list[object]) -> bool:
        calls["chunk"] += 1
        if calls["chunk"] % 3 == 0:
            calls["left"] += 1
            return False
        return original(self, batch, blocks)  # type: ignore[arg-type]

    monkeypatch.setattr(Indexer, "_add_chunk", every_third_left)
    index(tmp_path / "b", tmp_path / "mixed", durable=False, chunk_bytes=20_000, commit_blocks=7, recent_txs=2_000)
    monkeypatch.setattr(Indexer, "_add_chunk", lambda self, batch, blocks: False)
    index(tmp_path / "b", tmp_path / "blocks", durable=False, chunk_bytes=20_000, commit_blocks=7)
    assert calls["left"] >= 5
    for name in ("mixed", "blocks"):
        a, b = open_store(tmp_path / "chunks"), open_store(tmp_path / name)
        for spec in SPECS:
            assert a.path(spec.name).read_bytes() == b.path(spec.name).read_bytes(), (name, spec.name)
        check_txindex(tmp_path / name)


def test_the_recent_txids_answer_the_latest_and_check_the_whole_txid() -> None:
    from cairn_servers.brk.indexer import _RecentTxids

    recent = _RecentTxids(limit=5)
    a, b = b"\x01" * 8 + b"a" * 24, b"\x01" * 8 + b"b" * 24  # the same 8-byte prefix
    c, d, e = b"c" * 32, b"d" * 31 + b"\x00", b"d" * 31 + b"\x01"
    recent.add({a: 1, c: 2})
    recent.add({b: 3, c: 4, d: 5})  # c again: the later batch answers
    assert recent.lookup({a, b, c, d, e, b"z" * 32}) == {a: 1, b: 3, c: 4, d: 5}
    recent.add({e: 6})  # 6 held, past the limit of 5: the oldest batch goes
    assert len(recent.batches) == 2 and recent.count == 4
    assert recent.lookup({a, b, c, e}) == {b: 3, c: 4, e: 6}
    recent.clear()
    assert recent.lookup({b}) == {} and recent.count == 0


def test_one_place_opens_rocksdb() -> None:
    """The transaction index and the address index open RocksDB with one set of settings
    (cairn_servers.brk.rocks); they had a copy each."""
    import cairn_servers

    src = Path(cairn_servers.__file__).resolve().parent
    offenders = [str(p.relative_to(src)) for p in src.rglob("*.py")
                 if p.name != "rocks.py" and "BlockBasedOptions" in p.read_text(encoding="utf-8")]
    assert offenders == []
