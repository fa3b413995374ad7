"""The sample chain generator: deterministic, valid PoW, every script type, fees that add up."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from cairn_servers.brk.blocks.files import iter_blocks
from cairn_servers.brk.blocks.parser import OUTPUT_TYPES, parse_block
from cairn_servers.brk.indexer import index, open_store
from cairn_servers.brk.sample import COIN, HALVING, write_sample


def test_deterministic(tmp_path: Path) -> None:
    write_sample(tmp_path / "a", 300, seed=5)
    write_sample(tmp_path / "b", 300, seed=5)
    write_sample(tmp_path / "c", 300, seed=6)
    a = (tmp_path / "a" / "blk00000.dat").read_bytes()
    assert a == (tmp_path / "b" / "blk00000.dat").read_bytes()
    assert a != (tmp_path / "c" / "blk00000.dat").read_bytes()


def test_sample_chain_indexes_with_consistent_fees(tmp_path: Path) -> None:
    summary = write_sample(tmp_path / "blocks", 1500, max_file_bytes=500_000)
    assert summary["files"] > 1
    r = index(tmp_path / "blocks", tmp_path / "out")
    assert (r.network, r.height, r.invalid) == ("regtest", 1499, [])
    s = open_store(tmp_path / "out")
    types = np.bincount(s.read("outputindex_to_type"), minlength=len(OUTPUT_TYPES))
    assert all(types > 0), dict(zip(OUTPUT_TYPES, types.tolist()))
    # Coinbase outputs == subsidy + the fees the indexer computed from resolved prevouts.
    first_tx = s.read("height_to_first_txindex").astype(np.int64)
    first_out = s.read("txindex_to_first_outputindex")[first_tx].astype(np.int64)
    n_out = s.read("txindex_to_output_count")[first_tx].astype(np.int64)
    values = s.read("outputindex_to_value")
    coinbase = np.array([values[a:a + n].sum() for a, n in zip(first_out, n_out)], dtype=np.int64)
    heights = np.arange(1500)
    subsidy = (50 * COIN) >> (heights // HALVING)
    fees = s.read("height_to_fee").astype(np.int64)
    assert (coinbase == subsidy + fees).all()
    assert fees[200:].sum() > 0 and (s.read("txindex_to_fee") > 0).sum() > 1000
    # Timestamps rise and span at least six months.
    ts = s.read("height_to_timestamp").astype(np.int64)
    assert (np.diff(ts) > 0).all() and ts[-1] - ts[0] >= 180 * 86400
    # Segwit transactions exist and are lighter than their size.
    w, size = s.read("txindex_to_weight"), s.read("txindex_to_size")
    assert (w < 4 * size).sum() > 100


def test_pow_bip34_and_witness_commitment(tmp_path: Path) -> None:
    write_sample(tmp_path, 250)
    for height, (_, raw) in enumerate(iter_blocks(tmp_path)):
        block = parse_block(raw)
        assert int.from_bytes(block.hash, "little") <= 0x7FFFFF << 232
        assert block.bip34_height == height
        if any(block.tx_segwit):
            script = block.output_script(0, block.tx_outputs[0] - 1)
            assert script[:6] == bytes.fromhex("6a24aa21a9ed")
            level = [bytes(32)] + [block.wtxid(i) for i in range(1, len(block.txids))]
            while len(level) > 1:
                if len(level) % 2:
                    level.append(level[-1])
                level = [hashlib.sha256(hashlib.sha256(level[i] + level[i + 1]).digest()).digest()
                         for i in range(0, len(level), 2)]
            commit = hashlib.sha256(hashlib.sha256(level[0] + bytes(32)).digest()).digest()
            assert script[6:] == commit
