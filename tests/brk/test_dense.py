"""Mainnet-density sample chains: valid for the indexer, as dense as asked, realistic, deterministic, bounded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cairn_servers.brk.blocks.files import iter_blocks
from cairn_servers.brk.blocks.parser import OUTPUT_TYPES, P2TR, P2WPKH, P2WSH, parse_block
from cairn_servers.brk.dense import VAULT_CAP, DenseChain
from cairn_servers.brk.indexer import index, open_store
from cairn_servers.brk.sample import COIN, HALVING, write_sample

K = 300


def test_dense_chain_indexes_with_the_counts_and_kinds_asked(tmp_path: Path) -> None:
    summary = write_sample(tmp_path / "blocks", 170, seed=11, txs_per_block=K, max_file_bytes=4_000_000)
    assert summary["files"] > 1
    r = index(tmp_path / "blocks", tmp_path / "out")
    assert (r.network, r.height, r.invalid) == ("regtest", 169, [])
    s = open_store(tmp_path / "out")
    ntx = s.read("height_to_tx_count")
    assert (ntx[:101] == 1).all() and (ntx[101:] == K).all()
    assert int(ntx.sum()) == summary["transactions"] == s.lengths["txindex_to_txid"]
    # Every output type, segwit and taproot among them; multi-input and multi-output transactions.
    types = np.bincount(s.read("outputindex_to_type"), minlength=len(OUTPUT_TYPES))
    assert all(types > 0), dict(zip(OUTPUT_TYPES, types.tolist()))
    assert types[P2WPKH] > types[P2TR] > 0 and types[P2WSH] > 0
    n_in, n_out = s.read("txindex_to_input_count"), s.read("txindex_to_output_count")
    assert (n_in >= 2).sum() > 0.2 * len(n_in) and n_in.max() >= 20
    assert (n_out >= 3).sum() > 0.05 * len(n_out) and n_out.max() >= 12
    w, size = s.read("txindex_to_weight"), s.read("txindex_to_size")
    assert (w < 4 * size).mean() > 0.5  # most transactions carry witnesses
    # Fees add up: coinbase outputs == subsidy + the fees the indexer computed from resolved prevouts.
    first_tx = s.read("height_to_first_txindex").astype(np.int64)
    first_out = s.read("txindex_to_first_outputindex")[first_tx].astype(np.int64)
    cb_outs = s.read("txindex_to_output_count")[first_tx].astype(np.int64)
    values = s.read("outputindex_to_value")
    coinbase = np.array([values[a:a + n].sum() for a, n in zip(first_out, cb_outs)], dtype=np.int64)
    subsidy = (50 * COIN) >> (np.arange(170) // HALVING)
    fees = s.read("height_to_fee").astype(np.int64)
    assert (coinbase == subsidy + fees).all() and (fees[101:] > 0).all()
    # Inputs spend random older outputs, some from the first blocks: their age spans the chain.
    spent = s.read("inputindex_to_outputindex")
    real = spent != (1 << 64) - 1
    out_tx = np.searchsorted(s.read("txindex_to_first_outputindex"), spent[real], "right") - 1
    in_tx = np.repeat(np.arange(len(n_in)), n_in.astype(np.int64))[real]
    tx_height = s.read("txindex_to_height").astype(np.int64)
    age = tx_height[in_tx] - tx_height[out_tx]
    assert age.min() >= 1 and age.max() >= 160 and (age >= 30).sum() >= 20


def test_blocks_are_well_formed(tmp_path: Path) -> None:
    write_sample(tmp_path, 104, seed=2, txs_per_block=50)
    for height, (_, raw) in enumerate(iter_blocks(tmp_path)):
        block = parse_block(raw)  # merkle root checked
        assert int.from_bytes(block.hash, "little") <= 0x7FFFFF << 232
        assert block.bip34_height == height
        assert block.weight <= 4_000_000
        if height > 100:
            assert len(block.txids) == 50 and any(block.tx_segwit)
            script = block.output_script(0, block.tx_outputs[0] - 1)
            assert script[:6] == bytes.fromhex("6a24aa21a9ed")  # the witness commitment


def test_deterministic_and_forks_share_a_prefix(tmp_path: Path) -> None:
    for name, seed, fork in (("a", 5, None), ("b", 5, None), ("c", 6, None), ("f", 5, 104)):
        write_sample(tmp_path / name, 108, seed=seed, txs_per_block=40, fork_at=fork, fork_seed=1)
    a = [raw for _, raw in iter_blocks(tmp_path / "a")]
    assert a == [raw for _, raw in iter_blocks(tmp_path / "b")]
    c = [raw for _, raw in iter_blocks(tmp_path / "c")]
    assert all(x != y for x, y in zip(a, c))
    f = [raw for _, raw in iter_blocks(tmp_path / "f")]
    assert f[:104] == a[:104] and all(x != y for x, y in zip(f[104:], a[104:]))


def test_generator_memory_is_bounded(tmp_path: Path) -> None:
    chain = DenseChain(400, 200, seed=3, pool_cap=100)  # raised to 8 x 200
    peak = 0
    for _ in range(400):
        chain.next_block()
        peak = max(peak, chain.pool.n)
        assert len(chain.maturing) <= 101
    assert peak <= chain.pool.cap == 1600 and chain.vault.n <= VAULT_CAP
    assert chain.stats["evicted"] > 0 and chain.stats["vault_spends"] > 0
    # ...and a chain from a tiny pool still indexes.
    write_sample(tmp_path / "blocks", 180, seed=3, txs_per_block=200, pool_cap=1600)
    r = index(tmp_path / "blocks", tmp_path / "out")
    assert r.invalid == [] and r.height == 179


def test_cli_sample_dense(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "cairn_servers.brk.cli", "sample", "--blocks", "103", "--txs-per-block", "20",
           "--out", str(tmp_path / "b"), "--format", "json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert '"transactions": 141' in done.stdout  # 101 coinbase-only blocks + 2 x 20
    bad = subprocess.run(cmd[:-4] + ["--txs-per-block", "0", "--out", str(tmp_path / "c")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.strip() == ("brk: error: --txs-per-block must be between 1 and 3000 (more would not fit a block's "
                                  "4 million weight units); got 0.")


def _vecs(out: Path) -> dict[str, bytes]:
    from ._run import vec_bytes

    return vec_bytes(out)


def test_the_parsing_process_gives_the_same_bytes_and_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks parsed by the second process index to the same bytes as in process, a corrupt block
    included (reported with the same file, offset and message, the chain cut before it)."""
    blocks = tmp_path / "blocks"
    write_sample(blocks, 150, seed=12, txs_per_block=300, max_file_bytes=3_000_000)
    data = bytearray((blocks / "blk00000.dat").read_bytes())
    p = 0
    for _ in range(120):  # corrupt a transaction byte of height 120 (header intact: merkle mismatch)
        p += 8 + int.from_bytes(data[p + 4:p + 8], "little")
    data[p + 8 + 95] ^= 0x55  # in the coinbase's outpoint (header 80, tx count 3, version 4, marker 2, count 1)
    (blocks / "blk00000.dat").write_bytes(bytes(data))
    results = {}
    for mode in ("0", "1"):
        monkeypatch.setenv("CAIRN_BRK_PARSE_PROCESS", mode)
        r = index(blocks, tmp_path / mode, commit_blocks=7)
        results[mode] = (r.height, r.invalid, _vecs(tmp_path / mode))
    assert results["0"][0] == 119 and len(results["0"][1]) == 1
    assert results["0"][1][0]["offset"] == p + 8 and "merkle root mismatch" in results["0"][1][0]["error"]
    assert results["1"] == results["0"]


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except OSError:
        return []


def test_ctrl_c_with_the_parsing_process(tmp_path: Path) -> None:
    """SIGINT to the whole process group (as a terminal sends it): the parsing process ignores it, the
    indexer commits, ends it and exits 130; the rerun ends byte-identical to an uninterrupted run."""
    import json
    import os
    import signal

    blocks = tmp_path / "blocks"
    write_sample(blocks, 240, seed=21, txs_per_block=250, max_file_bytes=8_000_000)
    index(blocks, tmp_path / "ref", durable=False)
    env = dict(os.environ, CAIRN_BRK_PARSE_PROCESS="1")
    cmd = [sys.executable, "-m", "cairn_servers.brk.cli", "index", "--blocks-dir", str(blocks), "--out",
           str(tmp_path / "out"), "--format", "json", "--commit-every", "2", "--no-compute", "--progress", "json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("{") and json.loads(line)["committed_height"] >= 110:
            break
    workers = _children(proc.pid)
    assert len(workers) == 1
    os.killpg(proc.pid, signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
    assert proc.returncode == 130, rest
    assert "stopped at height" in rest and "Traceback" not in rest
    assert not os.path.exists(f"/proc/{workers[0]}")  # ended and reaped by the indexer
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["height"] == 239
    got, want = _vecs(tmp_path / "out"), _vecs(tmp_path / "ref")
    assert [k for k in want if got.get(k) != want[k]] == [] and got.keys() == want.keys()
