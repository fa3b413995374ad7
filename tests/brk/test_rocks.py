"""The block explorer's write paths into RocksDB: the script-hash keys built as one byte matrix agree with
hashing each address's script on its own, and ``ingest_sorted`` moves sorted keys in whole (later tables
win, a half-written table file left by a kill is removed, an empty batch writes nothing)."""

from __future__ import annotations

from hashlib import sha256
from pathlib import Path

import numpy as np

from cairn_servers.brk.addresses import ADDRESS_TYPES, SCRIPTHASH_BYTES, address_script, script_hash_keys
from cairn_servers.brk.rocks import ingest_sorted, open_rocksdb


def test_script_hash_keys_match_hashlib_per_address() -> None:
    rng = np.random.default_rng(5)
    for code, (_, _, length) in ADDRESS_TYPES.items():
        kmat = np.empty((40, 1 + length), dtype=np.uint8)
        kmat[:, 0] = code
        kmat[:, 1:] = rng.integers(0, 256, (40, length), dtype=np.uint8)
        kmat[0, 1:] = 0  # trailing zero bytes are kept
        got = script_hash_keys(kmat)
        want = [sha256(address_script(bytes(row))).digest()[:SCRIPTHASH_BYTES] for row in kmat]
        assert [bytes(r) for r in got] == want, ADDRESS_TYPES[code][0]
    assert script_hash_keys(np.zeros((0, 21), dtype=np.uint8)).shape == (0, SCRIPTHASH_BYTES)


def test_ingest_sorted(tmp_path: Path) -> None:
    path = tmp_path / "index"
    db = open_rocksdb(path, memtable_mb=1, cache_mb=1, l0_files=16)
    try:
        db[b"B" + b"\x01" * 4] = b"block"  # a key in the memtable, outside the ingested range
        leftover = tmp_path / "index.ingest.sst"
        leftover.write_bytes(b"half a table file")  # as a kill during the write leaves it
        ingest_sorted(db, path, [b"H1", b"H2", b"H3"], [b"a", b"b", b"c"])
        assert not leftover.exists()
        ingest_sorted(db, path, [b"H2", b"H4"], [b"B", b"d"])  # overlapping a table already in: it wins
        ingest_sorted(db, path, [], [])  # nothing to write: no table file
        assert [(bytes(k), bytes(v)) for k, v in db.items()] == [
            (b"B\x01\x01\x01\x01", b"block"), (b"H1", b"a"), (b"H2", b"B"), (b"H3", b"c"), (b"H4", b"d")]
    finally:
        db.close()
    db = open_rocksdb(path, memtable_mb=1, cache_mb=1, l0_files=16)  # and after a reopen
    try:
        assert db.get(b"H2") == b"B" and db.get(b"H4") == b"d" and db.get(b"H5") is None
    finally:
        db.close()


def test_sorted_history_keys_past_2_23_addresses() -> None:
    """Address ids of 2**23 and more (a chain of some millions of transactions) and txindexes past 2**32:
    keys in strict key order, each pair once, decoding back to the pairs (a 64-bit packing of a 32-bit id
    shifted by 40 bits overflowed: wrong ids, and the table writer refused the order)."""
    from cairn_servers.brk.explorer import KEY_BYTES, sorted_history_keys

    rng = np.random.default_rng(11)
    for tx_top in (1 << 30, 1 << 39):
        addr = rng.integers(0, 1 << 32, 5000, dtype=np.int64)
        addr[:100] = (1 << 23) + np.arange(100)
        addr[100:200] = (1 << 32) - 1 - np.arange(100)
        tx = rng.integers(0, tx_top, 5000, dtype=np.int64)
        addr, tx = np.concatenate((addr, addr[:300])), np.concatenate((tx, tx[:300]))  # repeats
        keys = [bytes(k) for k in sorted_history_keys(addr, tx)]
        want = sorted({b"H" + int(x).to_bytes(4, "big") + int(y).to_bytes(5, "big") for x, y in zip(addr, tx)})
        assert keys == want and all(len(k) == KEY_BYTES for k in keys)
    assert sorted_history_keys(np.zeros(0, np.int64), np.zeros(0, np.int64)).shape == (0, KEY_BYTES)


def test_tiered_store_reopens_a_levelled_one_and_merges_overlapping_runs(tmp_path: Path) -> None:
    """The address, script-hash and history stores use the tiered (universal) compaction: a store written
    before with levels opens as is, and many ingested tables spread over the whole key space (as every chunk
    writes them) are merged into fewer runs with every key's latest value."""
    path = tmp_path / "index"
    rng = np.random.default_rng(3)
    db = open_rocksdb(path, memtable_mb=1, cache_mb=1)  # levels, as stores indexed before
    try:
        for i in range(3000):
            db[i.to_bytes(8, "big")] = b"old"
        db.flush()
    finally:
        db.close()
    want: dict[bytes, bytes] = {i.to_bytes(8, "big"): b"old" for i in range(3000)}
    db = open_rocksdb(path, memtable_mb=1, cache_mb=1, l0_files=4, tiered=True)
    try:
        for batch in range(24):  # overlapping tables: more than the trigger, so merges run
            keys = np.unique(rng.integers(0, 6000, 400)).tolist()
            raw = [int(k).to_bytes(8, "big") for k in keys]
            value = b"v%d" % batch
            ingest_sorted(db, path, raw, [value] * len(raw))
            want.update(dict.fromkeys(raw, value))
    finally:
        db.close()
    db = open_rocksdb(path, memtable_mb=1, cache_mb=1, l0_files=4, tiered=True)
    try:
        assert {bytes(k): bytes(v) for k, v in db.items()} == want
        assert len(list(path.glob("*.sst"))) < 24  # merged
    finally:
        db.close()
