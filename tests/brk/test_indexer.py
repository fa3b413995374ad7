"""The indexer end to end on real mainnet blocks, reorgs from btcd's side-chain files, and bad blocks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cairn_servers.brk.blocks.parser import OUTPUT_TYPES, hash_hex
from cairn_servers.brk.indexer import NO_OUTPUT, index, open_store

from .conftest import btc_file

COIN = 100_000_000


def _hex_hashes(arr: np.ndarray) -> list[str]:
    return [bytes(row)[::-1].hex() for row in arr]


def test_mainnet_0_to_589_exact(mainnet_blocks: Path, tmp_path: Path, test_data: Path) -> None:
    out = tmp_path / "out"
    result = index(mainnet_blocks, out)
    assert (result.network, result.height, result.indexed_blocks) == ("mainnet", 589, 590)
    facts = {m["file"]: m for m in json.loads((test_data / "btc" / "manifest.json").read_text())}
    first = facts["hadoopcryptoledger/firstblocks.blk"]
    s = open_store(out)
    hashes = _hex_hashes(s.read("height_to_blockhash"))
    assert hashes[0] == first["first"]["hash"] and hashes[589] == first["last"]["hash"]
    assert result.tip == first["last"]["hash"]
    # Heights 1..11 against btcd's independent header list.
    lines = (test_data / "btc" / "btcd" / "blockheaders-mainnet-1-11.txt").read_text().split()
    from cairn_servers.brk.blocks.parser import parse_header

    assert [hash_hex(parse_header(bytes.fromhex(h)).hash) for h in lines] == hashes[1:12]
    assert int(s.read("height_to_tx_count").sum()) == first["total_tx"] == 605
    assert s.lengths["txindex_to_txid"] == 605
    # The genesis coinbase.
    assert _hex_hashes(s.read("txindex_to_txid")[:1]) == ["4a5e1e4baab89f3a32518a88c31bc87f618f76673e2cc77ab2127b7afdeda33b"]
    assert s.read("outputindex_to_value")[0] == 50 * COIN
    assert OUTPUT_TYPES[s.read("outputindex_to_type")[0]] == "p2pk65"
    assert s.read("inputindex_to_outputindex")[0] == NO_OUTPUT
    assert s.read("height_to_timestamp")[0] == 1231006505
    # Height 170: the first spend (block 9's coinbase, 10 BTC to Hal Finney, 40 BTC back, fee 0).
    tx170 = int(s.read("height_to_first_txindex")[170]) + 1
    assert s.read("txindex_to_height")[tx170] == 170
    assert _hex_hashes(s.read("txindex_to_txid")[tx170:tx170 + 1]) == [
        "f4184fc596403b9d638783cf57adfe4c75c605f6356fbc91338530e9831e9e16"]
    first_in = int(s.read("txindex_to_first_inputindex")[tx170])
    spent = int(s.read("inputindex_to_outputindex")[first_in])
    assert s.read("txindex_to_height")[np.searchsorted(s.read("txindex_to_first_outputindex"), spent, "right") - 1] == 9
    assert s.read("outputindex_to_value")[spent] == 50 * COIN
    first_out = int(s.read("txindex_to_first_outputindex")[tx170])
    assert s.read("outputindex_to_value")[first_out:first_out + 2].tolist() == [10 * COIN, 40 * COIN]
    assert s.read("txindex_to_fee")[tx170] == 0
    assert s.read("txindex_to_size")[tx170] == 275
    # Every non-coinbase input spends an earlier output; every height's first-index columns line up.
    spends = s.read("inputindex_to_outputindex")
    real = spends[spends != NO_OUTPUT]
    assert len(real) == 614 - 590 and len(np.unique(real)) == len(real)
    assert (np.diff(s.read("height_to_first_txindex").astype(np.int64)) == s.read("height_to_tx_count")[:-1]).all()
    assert float(s.read("height_to_difficulty").max()) == 1.0
    assert int(s.read("height_to_size").sum()) == result.indexed_bytes


def test_resume_and_incremental_equal_one_run(mainnet_blocks: Path, tmp_path: Path) -> None:
    index(mainnet_blocks, tmp_path / "full")
    part = tmp_path / "part"
    data = (mainnet_blocks / "blk00000.dat").read_bytes()
    grow = tmp_path / "grow"
    grow.mkdir()
    (grow / "blk00000.dat").write_bytes(data[:60_000])  # the node has written about half so far
    first = index(grow, part)
    assert 0 < first.height < 589
    second = index(grow, part, max_blocks=10)  # nothing new yet
    assert second.indexed_blocks == 0 and second.height == first.height
    (grow / "blk00000.dat").write_bytes(data)
    third = index(grow, part, max_blocks=100)
    assert third.height == first.height + 100
    index(grow, part)
    for f in sorted((tmp_path / "full" / "vecs").iterdir()):
        assert (part / "vecs" / f.name).read_bytes() == f.read_bytes(), f.name


def _reorg_dir(test_data: Path, tmp_path: Path, files: list[str]) -> Path:
    blocks = tmp_path / "blocks"
    blocks.mkdir(exist_ok=True)
    for n, rel in enumerate(files):
        (blocks / f"blk{n:05d}.dat").write_bytes(btc_file(test_data, "btcd/" + rel))
    return blocks


def test_reorg_rolls_back_and_matches_fresh_index(test_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    blocks = _reorg_dir(test_data, tmp_path, ["blk_0_to_4.dat.bz2"])
    r = index(blocks, out)
    assert r.height == 4 and r.tip.startswith("000000002f264d65")
    main_tip = r.tip
    # 3A and 4A fork off height 2 with equal work: the indexed chain stays.
    _reorg_dir(test_data, tmp_path, ["blk_0_to_4.dat.bz2", "blk_3A.dat.bz2", "blk_4A.dat.bz2"])
    r = index(blocks, out)
    assert (r.height, r.tip, r.rolled_back_from) == (4, main_tip, None)
    # 5A gives the side chain more work: roll back to height 3 and index 3A, 4A, 5A.
    _reorg_dir(test_data, tmp_path, ["blk_0_to_4.dat.bz2", "blk_3A.dat.bz2", "blk_4A.dat.bz2", "blk_5A.dat.bz2"])
    r = index(blocks, out)
    assert (r.height, r.rolled_back_from, r.fork_height, r.indexed_blocks) == (5, 4, 3, 3)
    assert r.tip.startswith("00000000195f8518")
    # Byte for byte what a fresh index of the final files gives.
    fresh = tmp_path / "fresh"
    index(blocks, fresh)
    s, f = open_store(out), open_store(fresh)
    for name in s.specs:
        if name.startswith("blockpos"):
            continue  # discovery order differs by construction
        assert s.read(name).tobytes() == f.read(name).tobytes(), name
    assert _hex_hashes(s.read("height_to_blockhash"))[3].startswith("00000000474284d2")


def test_out_of_order_blocks_in_files(mainnet_blocks: Path, tmp_path: Path) -> None:
    """Blocks stored child-before-parent across files still index in chain order."""
    data = (mainnet_blocks / "blk00000.dat").read_bytes()
    records = []
    p = 0
    while p < len(data):
        n = int.from_bytes(data[p + 4:p + 8], "little")
        records.append(data[p:p + 8 + n])
        p += 8 + n
    shuffled = tmp_path / "shuffled"
    shuffled.mkdir()
    rng = np.random.default_rng(1)
    order = rng.permutation(len(records))
    (shuffled / "blk00000.dat").write_bytes(b"".join(records[i] for i in order[:300]))
    (shuffled / "blk00001.dat").write_bytes(b"\x00" * 16 + b"".join(records[i] for i in order[300:]))
    index(shuffled, tmp_path / "a")
    index(mainnet_blocks, tmp_path / "b")
    a, b = open_store(tmp_path / "a"), open_store(tmp_path / "b")
    for name in ("height_to_blockhash", "txindex_to_txid", "inputindex_to_outputindex", "txindex_to_fee"):
        assert a.read(name).tobytes() == b.read(name).tobytes()


def test_malformed_block_is_reported_and_skipped(mainnet_blocks: Path, tmp_path: Path) -> None:
    data = bytearray((mainnet_blocks / "blk00000.dat").read_bytes())
    # Corrupt a transaction byte of height 100 (keeping its header valid): merkle mismatch.
    p = 0
    for _ in range(100):
        p += 8 + int.from_bytes(data[p + 4:p + 8], "little")
    n = int.from_bytes(data[p + 4:p + 8], "little")
    data[p + 8 + n - 20] ^= 0x55
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "blk00000.dat").write_bytes(bytes(data))
    r = index(bad, tmp_path / "out")
    assert r.height == 99
    assert len(r.invalid) == 1
    entry = r.invalid[0]
    assert entry["file"] == "blk00000.dat" and entry["offset"] == p + 8
    assert "merkle root mismatch" in entry["error"]
    again = index(bad, tmp_path / "out")
    assert again.height == 99 and again.invalid == []  # remembered, not retried


def test_multiblock_and_unrelated_blocks_do_not_crash(test_data: Path, tmp_path: Path) -> None:
    blocks = tmp_path / "mb"
    blocks.mkdir()
    (blocks / "blk00000.dat").write_bytes((test_data / "btc/hadoopcryptoledger/multiblock.blk").read_bytes())
    r = index(blocks, tmp_path / "out")
    assert r.height == 0  # only the genesis connects; the others are orphans without parents


def test_network_mismatch_is_refused(mainnet_blocks: Path, tmp_path: Path) -> None:
    from cairn_servers.brk.sample import write_sample
    from cairn_servers.core.errors import InvalidInput

    index(mainnet_blocks, tmp_path / "out")
    write_sample(tmp_path / "rt", 3)
    with pytest.raises(InvalidInput, match="indexes mainnet but .* holds regtest blocks. Use a different --out"):
        index(tmp_path / "rt", tmp_path / "out")


def _overspend_tip(blocks: Path) -> tuple[int, int] | None:
    """Rewrite the last block of a sample chain so one transaction pays out more than it spends.

    Returns (height of that block, its offset in the file). Txid, merkle root and PoW are redone,
    so only the fee check can catch it.
    """
    import hashlib
    import struct

    from cairn_servers.brk.blocks.parser import merkle_root, parse_block, read_varint

    path = blocks / "blk00000.dat"
    data = path.read_bytes()
    offsets = []
    p = 0
    while p < len(data):
        offsets.append(p)
        p += 8 + int.from_bytes(data[p + 4:p + 8], "little")
    start = offsets[-1]
    raw = bytearray(data[start + 8:])
    block = parse_block(bytes(raw))
    t = next((i for i in range(1, len(block.txids)) if not block.tx_segwit[i]), None)
    if t is None:
        return None
    a, b = block.tx_span[2 * t], block.tx_span[2 * t + 1]
    q = a + 4
    n_in, q = read_varint(bytes(raw), q)
    for _ in range(n_in):
        q += 36
        slen, q = read_varint(bytes(raw), q)
        q += slen + 4
    _, q = read_varint(bytes(raw), q)
    raw[q:q + 8] = struct.pack("<q", 21_000_000 * 100_000_000)
    txids = list(block.txids)
    txids[t] = hashlib.sha256(hashlib.sha256(bytes(raw[a:b])).digest()).digest()
    raw[36:68] = merkle_root(txids)
    nonce = 0
    while True:
        raw[76:80] = struct.pack("<I", nonce)
        h = hashlib.sha256(hashlib.sha256(bytes(raw[:80])).digest()).digest()
        if int.from_bytes(h, "little") <= 0x7FFFFF << 232:
            break
        nonce += 1
    path.write_bytes(data[:start + 8] + bytes(raw))
    return len(offsets) - 1, start + 8


def test_overspending_block_is_reported_and_skipped(tmp_path: Path) -> None:
    from cairn_servers.brk.sample import write_sample

    for n in range(400, 440):  # the first chain length whose tip holds a non-segwit spend
        write_sample(tmp_path / "b", n)
        found = _overspend_tip(tmp_path / "b")
        if found:
            break
    assert found is not None
    height, offset = found
    r = index(tmp_path / "b", tmp_path / "out")
    assert r.height == height - 1 and r.indexed_blocks == height
    assert [(e["file"], e["offset"]) for e in r.invalid] == [("blk00000.dat", offset)]
    assert "spends more than its inputs hold" in r.invalid[0]["error"]
    s = open_store(tmp_path / "out")
    assert s.lengths["height_to_blockhash"] == height
    assert s.lengths["txindex_to_txid"] == int(s.read("height_to_first_txindex")[-1] + s.read("height_to_tx_count")[-1])
    again = index(tmp_path / "b", tmp_path / "out")
    assert (again.height, again.invalid, again.indexed_blocks) == (height - 1, [], 0)
