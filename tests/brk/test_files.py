"""blk file framing: junk before magics, XOR obfuscation, partial records, network detection."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cairn.brk.blocks.files import MAGICS, detect_network, iter_blocks, read_xor_key, scan, unxor
from cairn.brk.blocks.parser import hash_hex, parse_block
from cairn.core.errors import InvalidInput, NotFound


def test_junk_before_magic_is_skipped(test_data: Path, tmp_path: Path) -> None:
    src = test_data / "btc" / "hadoopcryptoledger" / "reqseekversion1.blk"
    assert src.read_bytes()[:6] != MAGICS["mainnet"][:6]
    shutil.copy(src, tmp_path / "blk00000.dat")
    found = [parse_block(raw) for _, raw in iter_blocks(tmp_path)]
    assert len(found) == 1
    assert found[0].header.version == 1


def test_xor_obfuscated_files_read_the_same(mainnet_blocks: Path, tmp_path: Path) -> None:
    key = bytes.fromhex("0102030405a6b7c8")
    plain = (mainnet_blocks / "blk00000.dat").read_bytes()
    obf = tmp_path / "obf"
    obf.mkdir()
    (obf / "xor.dat").write_bytes(key)
    (obf / "blk00000.dat").write_bytes(unxor(plain, key, 0))
    assert (obf / "blk00000.dat").read_bytes()[:4] != MAGICS["mainnet"]
    assert read_xor_key(obf) == key
    a = [raw for _, raw in iter_blocks(mainnet_blocks)]
    b = [raw for _, raw in iter_blocks(obf)]
    assert len(a) == 590 and a == b
    assert unxor(unxor(plain[5:100], key, 5), key, 5) == plain[5:100]


def test_bad_xor_key_is_explained(tmp_path: Path) -> None:
    (tmp_path / "xor.dat").write_bytes(b"abc")
    with pytest.raises(InvalidInput, match="holds 3 bytes; Bitcoin Core writes an 8-byte key there"):
        read_xor_key(tmp_path)


@pytest.mark.parametrize("key", [bytes(8), bytes.fromhex("f00dbabe12345678")])
def test_partial_record_resumes_where_it_stopped(mainnet_blocks: Path, tmp_path: Path, key: bytes) -> None:
    data = (mainnet_blocks / "blk00000.dat").read_bytes()
    path = tmp_path / "blk00000.dat"
    path.write_bytes(unxor(data[:1000] + bytes(4096), key, 0))  # cut mid-record, then zero preallocation
    records, resume = scan(path, key, MAGICS["mainnet"])
    assert 0 < resume < 1000
    assert all(r.offset + r.length <= resume for r in records)
    path.write_bytes(unxor(data, key, 0))
    more, resume2 = scan(path, key, MAGICS["mainnet"], resume)
    assert more and all(r.header == data[r.offset:r.offset + 80] for r in more)  # XOR phase kept mid-file
    assert len(records) + len(more) == 590
    assert resume2 == len(data)


def test_network_detection(tmp_path: Path, mainnet_blocks: Path) -> None:
    assert detect_network(mainnet_blocks) == "mainnet"
    regtest = tmp_path / "rt"
    regtest.mkdir()
    raw = (mainnet_blocks / "blk00000.dat").read_bytes()
    (regtest / "blk00000.dat").write_bytes(MAGICS["regtest"] + raw[4:293])
    assert detect_network(regtest) == "regtest"
    assert hash_hex(parse_block(next(iter_blocks(regtest))[1]).hash).startswith("000000000019d668")


def test_missing_dir_is_explained(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="does not exist. Point --blocks-dir at a node's blocks/ folder."):
        detect_network(tmp_path / "nope")
    with pytest.raises(NotFound, match="No block records found"):
        detect_network(tmp_path)
