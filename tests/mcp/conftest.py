"""Fixtures shared by the MCP start-up and log-level tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def brk_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small indexed and computed brk store (20 regtest blocks) for the servers to open."""
    from cairn_servers.brk.compute import compute
    from cairn_servers.brk.indexer import index
    from cairn_servers.brk.sample import write_sample

    base = tmp_path_factory.mktemp("brk_mcp")
    write_sample(base / "blocks", 20)
    index(base / "blocks", base / "out")
    compute(base / "out")
    return base / "out"
