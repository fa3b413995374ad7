"""The address pass's vectorised parts (cairn_servers.brk.addresses): the key de-duplication against
``numpy.unique``, and identical figures whatever the block grouping, with or without XOR-obfuscated
block files. The figures themselves are checked against a recount from the raw blocks in test_utxo.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from cairn_servers.brk import addresses, seen
from cairn_servers.brk.blocks.files import unxor
from cairn_servers.brk.indexer import index, open_store
from cairn_servers.brk.sample import write_sample


def _numpy_unique(mat: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    width = mat.shape[1]
    uniq, first, inverse = np.unique(mat.view(f"V{width}").ravel(), return_index=True, return_inverse=True)
    return np.frombuffer(uniq.tobytes(), dtype=np.uint8).reshape(-1, width), first, inverse.ravel()


@pytest.mark.parametrize("case", ["hashes", "shared_prefixes", "short_rows", "public_keys", "one_row", "empty"])
def test_unique_rows_equals_numpy_unique(case: str) -> None:
    rng = np.random.default_rng(3)
    if case == "hashes":  # distinct 20-byte hashes, each paid several times
        base = rng.integers(0, 256, (500, 20), dtype=np.uint8)
        mat = base[rng.integers(0, 500, 3000)]
    elif case == "shared_prefixes":  # rows equal in their first 8 bytes but not after: the byte-string sort
        base = rng.integers(0, 256, (300, 32), dtype=np.uint8)
        base[:, :8] = rng.integers(0, 4, (300, 1), dtype=np.uint8)
        mat = base[rng.integers(0, 300, 2000)]
    elif case == "short_rows":  # p2a: a 4-byte payload, the same for every output
        mat = np.tile(np.frombuffer(b"\x4e\x73\x00\x00", dtype=np.uint8), (50, 1))
        mat[7] = [1, 2, 3, 0]
    elif case == "public_keys":  # 33-byte keys whose first byte is 02 or 03, some ending in zeros
        base = rng.integers(0, 256, (200, 33), dtype=np.uint8)
        base[:, 0] = 2 + rng.integers(0, 2, 200)
        base[:20, -3:] = 0
        mat = base[rng.integers(0, 200, 1000)]
    elif case == "one_row":
        mat = rng.integers(0, 256, (1, 65), dtype=np.uint8)
    else:
        mat = np.zeros((0, 20), dtype=np.uint8)
    got = addresses._unique_rows(np.ascontiguousarray(mat))
    want = _numpy_unique(np.ascontiguousarray(mat)) if mat.shape[0] else (mat, np.zeros(0, np.int64),
                                                                           np.zeros(0, np.int64))
    assert got[0].tobytes() == want[0].tobytes() and got[0].shape == want[0].shape
    assert got[1].tolist() == want[1].tolist()
    assert got[2].tolist() == want[2].tolist()


def _address_files(out: Path) -> dict[str, bytes]:
    root = addresses.addresses_dir(out)
    got = {p.name: p.read_bytes() for p in sorted((root / "vecs").glob("*.bin"))}
    got["balance.bin"] = (root / "balance.bin").read_bytes()
    return got


def test_the_same_figures_whatever_the_block_grouping(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks are walked in runs of about GROUP_BYTES (a run crosses blk files and chunk ends are not run
    ends); one block a run, a few and all of them, from plain or XOR-obfuscated files, and transactions
    walked by array steps or by the plain loop, give the same bytes."""
    blocks = tmp_path / "blocks"
    write_sample(blocks, 160, seed=5, txs_per_block=60, max_file_bytes=1 << 20)
    assert len(list(blocks.glob("blk*.dat"))) > 1
    out = tmp_path / "out"
    index(blocks, out)
    key = bytes.fromhex("0102030405a6b7c8")
    obf = tmp_path / "obf"
    obf.mkdir()
    (obf / "xor.dat").write_bytes(key)
    for blk in blocks.glob("blk*.dat"):
        (obf / blk.name).write_bytes(unxor(blk.read_bytes(), key, 0))
    monkeypatch.setattr(addresses, "CHUNK_ROWS", 3000)  # several chunks: ids and balances cross commits
    runs = {}
    for name, group, blocks_dir in (("all", 1 << 30, blocks), ("one", 1, blocks), ("few", 60_000, blocks),
                                    ("xor", 60_000, obf), ("loop", 60_000, blocks), ("arrays", 60_000, blocks)):
        shutil.rmtree(addresses.addresses_dir(out), ignore_errors=True)
        monkeypatch.setattr(addresses, "GROUP_BYTES", group)
        # The walker's plain loop for the last few long transactions: for every transaction, or never.
        monkeypatch.setattr(addresses, "_FEW", {"loop": 1 << 30, "arrays": -1}.get(name, 4))
        monkeypatch.setattr(addresses, "_MANY", {"loop": -1}.get(name, 32))
        summary = addresses.update(out, durable=False, blocks_dir=blocks_dir)
        assert summary is not None and summary["height"] == 159
        runs[name] = _address_files(out)
    assert all(files == runs["all"] for files in runs.values())
    count = np.frombuffer(runs["all"]["height_to_address_count.bin"], dtype="<u8")
    assert count[-1] > 0


def test_the_seen_filter_never_hides_a_known_address(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys the filter (seen.bin) says were never given an id are not looked up: after incremental runs
    with the filter lost, left stale by a kill (covering fewer ids than committed), of an earlier format,
    or growing (doubling) many times past its starting size, every figure equals a run that looks every
    key up."""
    blocks = tmp_path / "blocks"
    write_sample(blocks, 300, seed=4)
    fresh = tmp_path / "fresh"
    index(blocks, fresh)
    monkeypatch.setattr(addresses, "FILTER", False)  # no filter: every key looked up
    assert addresses.update(fresh, durable=False, blocks_dir=blocks) is not None
    want = _address_files(fresh)
    assert not (addresses.addresses_dir(fresh) / "seen.bin").exists()
    new = np.frombuffer(want["height_to_new_address_count.bin"], dtype="<u8")
    paid = np.frombuffer(want["outputindex_to_addressindex.bin"], dtype="<u4")
    count = int(new.sum())
    assert count < int((paid != addresses.NONE).sum())  # addresses are paid again: hits matter
    monkeypatch.setattr(addresses, "FILTER", True)
    monkeypatch.setattr(addresses, "CHUNK_ROWS", 200)
    old = b""
    for case in ("stale", "lost", "untagged", "grown"):
        # "grown": a filter of 64 words (256 keys) at first, so it doubles several times within a run.
        monkeypatch.setattr(seen, "MIN_WORDS", 64 if case == "grown" else seen.MIN_WORDS)
        monkeypatch.setattr(seen, "PENDING", 50 if case == "grown" else 1 << 20)  # written to the file often
        out = tmp_path / case
        path = addresses.addresses_dir(out) / "seen.bin"
        for stop in (100, 200, 300):
            have = open_store(out).lengths["height_to_blockhash"] if (out / "manifest.json").exists() else 0
            index(blocks, out, max_blocks=stop - have)
            if stop == 300 and case == "stale":
                path.write_bytes(old)  # as after a kill between a commit and the end of the run
            if stop == 300 and case == "lost":
                path.unlink()
            if stop == 300 and case == "untagged":  # the earlier 16 MiB three-probe format
                path.write_bytes(b"bloom3\x00\x00" + (40).to_bytes(8, "little") + b"\xff" * (1 << 20))
            assert addresses.update(out, durable=False, blocks_dir=blocks) is not None
            head = path.read_bytes()[:seen.HEADER]
            assert head[:8] == seen.TAG
            if stop == 100:
                old = path.read_bytes()
                assert 0 < int.from_bytes(old[8:16], "little") < count
        assert int.from_bytes(head[8:16], "little") == count  # vouches for every committed id
        words = int.from_bytes(head[16:24], "little")
        assert words == seen.words_for(count) and path.stat().st_size == seen.HEADER + 8 * words
        if case == "grown":
            assert words >= 8 * 64 and words * 64 >= count * seen.BITS_PER_KEY  # three doublings or more
        assert _address_files(out) == want, case


def test_the_filter_grows_with_its_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past its capacity the filter is rebuilt twice as large from the key hashes: every key added is
    still found, fresh keys are let through at well under 2 % however many keys it holds (a fixed-size
    filter would let nearly all through), and a reopened filter is not rebuilt."""
    monkeypatch.setattr(seen, "MIN_WORDS", 1024)  # 4,096 keys before the first doubling
    monkeypatch.setattr(seen, "PENDING", 25_000)  # written to the file every few batches
    rng = np.random.default_rng(11)
    hashes = rng.integers(0, 1 << 63, 200_000, dtype=np.int64).astype(np.uint64) * np.uint64(2) + np.uint64(1)
    fresh = rng.integers(0, 1 << 63, 20_000, dtype=np.int64).astype(np.uint64) * np.uint64(2)  # even: never added
    keyhash = tmp_path / "keyhash.bin"
    keyhash.write_bytes(hashes.tobytes())
    path = tmp_path / "seen.bin"
    f = seen.Seen(path, keyhash, 0, durable=False)
    rates = []
    for lo in range(0, hashes.shape[0], 10_000):
        batch = hashes[lo:lo + 10_000]
        before = f.maybe(batch)
        assert (f.add(batch) == before).all()  # add tells what maybe told before it
        assert f.maybe(batch).all()
        f.grow(lo + 10_000)
        assert f.maybe(hashes[:lo + 10_000]).all()
        rates.append(float(f.maybe(fresh).mean()))
    assert f.words == seen.words_for(200_000) == 1 << 16
    assert max(rates) < 0.02, rates
    f.save()
    size = path.stat().st_size
    again = seen.Seen(path, keyhash, 200_000, durable=False)
    assert again.words == f.words and again.maybe(hashes).all() and path.stat().st_size == size
    stale = seen.Seen(path, keyhash, 150_000, durable=False)  # ids rolled back: their bits may stay
    assert stale.covered == 150_000 and stale.maybe(hashes[:150_000]).all()
