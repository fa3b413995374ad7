"""The block parser against real mainnet blocks, python-bitcoinlib as an independent oracle, and fuzzing."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cairn_servers.brk.blocks.parser import (
    OUTPUT_TYPES,
    MalformedBlock,
    bip34_height,
    bits_to_target,
    block_work,
    classify,
    difficulty,
    hash_hex,
    merkle_root,
    parse_block,
)

from .conftest import btc_file

SEGWIT_574200 = "btcd/block-0000000000000000001602407ac49862a7bca9d00f7f402db20b7be2f5de59d2.blk"
SEGWIT_540107 = "btcd/block-00000000000000000021868c2cefc52a480d173c849412fe81c4e5ab806f94ab.blk"
GENESIS = "000000000019d6689c085ae165831e934ff763ae46a2a6c172b3f1b60a8ce26f"


def _first_block(test_data: Path, rel: str) -> bytes:
    data = btc_file(test_data, rel)
    length = int.from_bytes(data[4:8], "little")
    return data[8:8 + length]


def test_genesis_block_exact(test_data: Path) -> None:
    block = parse_block(_first_block(test_data, "hadoopcryptoledger/firstblocks.blk"))
    assert hash_hex(block.hash) == GENESIS
    assert hash_hex(block.txids[0]) == "4a5e1e4baab89f3a32518a88c31bc87f618f76673e2cc77ab2127b7afdeda33b"
    assert block.header.time == 1231006505 and block.header.bits == 0x1D00FFFF and block.header.nonce == 2083236893
    assert b"The Times 03/Jan/2009 Chancellor on brink of second bailout for banks" in block.coinbase_script
    assert block.out_value == [50 * 100_000_000]
    assert [OUTPUT_TYPES[t] for t in block.out_type] == ["p2pk65"]
    assert block.size == 285 and block.weight == 4 * 285
    assert difficulty(block.header.bits) == 1.0


@pytest.mark.parametrize("rel", [SEGWIT_574200, SEGWIT_540107, "bitcoinkit/block413567.raw"])
def test_matches_python_bitcoinlib(test_data: Path, rel: str) -> None:
    from bitcoin.core import CBlock

    raw = btc_file(test_data, rel)
    ours = parse_block(raw)
    ref = CBlock.deserialize(raw)
    assert len(ours.txids) == len(ref.vtx)
    assert ours.weight == ref.GetWeight()
    for i, tx in enumerate(ref.vtx):
        assert ours.txids[i] == tx.GetTxid()
        assert ours.wtxid(i) == tx.GetHash()
        assert ours.tx_size[i] == len(tx.serialize())
        assert ours.tx_weight[i] == tx.calc_weight()
        assert ours.tx_inputs[i] == len(tx.vin) and ours.tx_outputs[i] == len(tx.vout)
        assert ours.tx_version[i] == tx.nVersion and ours.tx_locktime[i] == tx.nLockTime
    values = [o.nValue for tx in ref.vtx for o in tx.vout]
    assert ours.out_value == values
    scripts = [bytes(o.scriptPubKey) for tx in ref.vtx for o in tx.vout]
    assert ours.out_type == [classify(s) for s in scripts]
    prevouts = [(i.prevout.hash, i.prevout.n) for tx in ref.vtx for i in tx.vin]
    assert list(zip(ours.in_prev_txid, ours.in_prev_vout)) == prevouts


def test_manifest_facts(test_data: Path) -> None:
    manifest = {m["file"]: m for m in json.loads((test_data / "btc" / "manifest.json").read_text())}
    for rel in (SEGWIT_574200, SEGWIT_540107, "bitcoinkit/block413567.raw"):
        block = parse_block(btc_file(test_data, rel))
        facts = manifest[rel]["first"]
        assert hash_hex(block.hash) == facts["hash"]
        assert len(block.txids) == facts["ntx"]
        assert block.size == facts["size"]
        assert block.bip34_height == facts["bip34_height"]
        assert any(block.tx_segwit) == facts["segwit"]


def test_testnet_blockfilter_vectors(test_data: Path) -> None:
    """BIP158 vectors: testnet blocks incl. witness txs and an unparseable coinbase output script."""
    rows = json.loads((test_data / "btc" / "bitcoin-core" / "blockfilters.json").read_text())
    checked = 0
    for row in rows[1:]:
        block = parse_block(bytes.fromhex(row[2]))
        assert hash_hex(block.hash) == row[1]
        checked += 1
    assert checked == 6


SCRIPTS = {
    "p2pkh": "76a914" + "11" * 20 + "88ac",
    "p2sh": "a914" + "22" * 20 + "87",
    "p2wpkh": "0014" + "33" * 20,
    "p2wsh": "0020" + "44" * 32,
    "p2tr": "5120" + "55" * 32,
    "p2a": "51024e73",
    "p2pk33": "21" + "02" + "66" * 32 + "ac",
    "p2pk65": "41" + "04" + "77" * 64 + "ac",
    "p2ms": "52" + ("21" + "02" + "88" * 32) * 3 + "53ae",
    "op_return": "6a0b68656c6c6f20776f726c64",
    "empty": "",
    "unknown": "52935487",
}


@pytest.mark.parametrize("kind", sorted(SCRIPTS))
def test_classify_each_type(kind: str) -> None:
    script = bytes.fromhex(SCRIPTS[kind])
    assert OUTPUT_TYPES[classify(script)] == kind


def test_classify_near_misses() -> None:
    assert OUTPUT_TYPES[classify(bytes.fromhex("76a914" + "11" * 20 + "88ad"))] == "unknown"
    assert OUTPUT_TYPES[classify(bytes.fromhex("0015" + "33" * 21))] == "unknown"  # v0 with 21-byte program
    assert OUTPUT_TYPES[classify(bytes.fromhex("52" + ("21" + "02" + "88" * 32) * 2 + "53ae"))] == "unknown"
    assert OUTPUT_TYPES[classify(bytes.fromhex("5220" + "55" * 32))] == "unknown"  # witness v2


def test_bip34_and_work() -> None:
    assert bip34_height(bytes.fromhex("03a0bb0d")) == 900000
    assert bip34_height(b"\x51") == 1
    assert bip34_height(b"") is None
    assert bits_to_target(0x1D00FFFF) == 0xFFFF << 208
    assert block_work(0x1D00FFFF) == 0x100010001
    assert bits_to_target(0x04923456) == 0  # sign bit set: invalid
    assert merkle_root([b"\x01" * 32]) == b"\x01" * 32


def test_merkle_mismatch_is_reported(test_data: Path) -> None:
    raw = bytearray(btc_file(test_data, "bitcoinkit/block413567.raw"))
    raw[-10] ^= 0xFF  # inside the last transaction's outputs/locktime: parses, but the txid changes
    with pytest.raises(MalformedBlock, match="merkle root mismatch"):
        parse_block(bytes(raw))


def test_truncated_block_is_reported(test_data: Path) -> None:
    raw = btc_file(test_data, "bitcoinkit/block413567.raw")
    with pytest.raises(MalformedBlock, match="truncated or corrupt"):
        parse_block(raw[:-100])
    with pytest.raises(MalformedBlock, match="unexpected bytes"):
        parse_block(raw + b"\x00")


@functools.cache
def _small_block(root: Path) -> bytes:
    return btc_file(root, "hadoopcryptoledger/block176149.blk")[8:]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_bytes_never_crash(test_data: Path, data: st.DataObject) -> None:
    """Any mutation either parses (and then the merkle check holds) or raises MalformedBlock."""
    small_block = _small_block(test_data)
    raw = bytearray(small_block)
    for _ in range(data.draw(st.integers(1, 8))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.one_of(st.none(), st.integers(0, len(raw))))
    blob = bytes(raw if cut is None else raw[:cut])
    try:
        block = parse_block(blob)
    except MalformedBlock:
        return
    assert merkle_root(block.txids) == block.header.merkle_root
    assert sum(block.tx_size) + 80 < len(blob) + 1
