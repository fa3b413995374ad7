"""Fixtures for brk tests: real mainnet block files laid out as a node's blocks/ directory."""

from __future__ import annotations

import bz2
import shutil
from pathlib import Path

import pytest

BTC = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "btc"


def btc_file(shared_data: Path, rel: str) -> bytes:
    """The bytes of a file under ``shared/data/btc`` (bz2 files decompressed)."""
    data = (shared_data / "btc" / rel).read_bytes()
    return bz2.decompress(data) if rel.endswith(".bz2") else data


@pytest.fixture
def mainnet_blocks(shared_data: Path, tmp_path: Path) -> Path:
    """A blocks/ directory holding mainnet heights 0..589 as blk00000.dat."""
    blocks = tmp_path / "blocks"
    blocks.mkdir()
    shutil.copy(shared_data / "btc" / "hadoopcryptoledger" / "firstblocks.blk", blocks / "blk00000.dat")
    return blocks
