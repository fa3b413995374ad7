"""Fixtures for brk tests: real mainnet block files (tests/data/btc) laid out as a node's blocks/ directory."""

from __future__ import annotations

import bz2
import shutil
from pathlib import Path

import pytest


def btc_file(test_data: Path, rel: str) -> bytes:
    """The bytes of ``btc/<rel>`` in the materialised test data (``.bz2`` files decompressed)."""
    data = (test_data / "btc" / rel).read_bytes()
    return bz2.decompress(data) if rel.endswith(".bz2") else data


@pytest.fixture
def mainnet_blocks(test_data: Path, tmp_path: Path) -> Path:
    """A blocks/ directory holding mainnet heights 0..589 as blk00000.dat."""
    blocks = tmp_path / "blocks"
    blocks.mkdir()
    shutil.copy(test_data / "btc" / "hadoopcryptoledger" / "firstblocks.blk", blocks / "blk00000.dat")
    return blocks


def mainnet_store(base: Path, *, addresses: bool = False) -> Path:
    """Mainnet heights 0..589 written to ``base/blocks``, indexed and computed into ``base/out`` (the address
    pass too with ``addresses``, which reads the blocks); returns ``base/out``."""
    from cairn_servers.brk.compute import compute
    from cairn_servers.brk.indexer import index
    from cairn_servers.brk.sample import write_mainnet_sample

    write_mainnet_sample(base / "blocks")
    index(base / "blocks", base / "out")
    compute(base / "out", blocks_dir=base / "blocks" if addresses else None)
    return base / "out"


@pytest.fixture(autouse=True)
def _no_price_downloads(monkeypatch: pytest.MonkeyPatch) -> None:
    """`brk run` and `brk index --watch` fetch daily prices in the background: never from the internet in
    tests (the environment reaches their subprocesses too). Tests of the refresh set their own local URL."""
    monkeypatch.setenv("BRK_PRICES", "off")
