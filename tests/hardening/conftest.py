"""Hardening fixtures: prepared data (session) and real server processes (per module).

Servers run with ``CAIRN_RAISE_ERRORS=1``: an unexpected exception in a tool becomes a -32603
error instead of an ``isError`` result, so a test can tell a bug from a tool's own error answer.
Data is prepared once per run and shared by the xdist workers (``shared_artefact``); servers that write
(blz's ``source-add``) get a per-module copy, and ctx a per-worker copy of its synced knowledge base.
Each module gets its own server processes, so a test that kills or starves one (fault injection)
cannot affect another module. The real data comes from the repository's test data (``test_data``).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from .._workers import shared_artefact
from ._servers import (
    HttpServer,
    StdioServer,
    prepare_blz,
    prepare_brk,
    prepare_ctx,
    spawn_blz_stdio,
    spawn_brk_http,
    spawn_brk_stdio,
    spawn_ctx_http,
    spawn_ctx_stdio,
)


@pytest.fixture(scope="session")
def blz_data_template(llms_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_artefact(tmp_path_factory, "blz-template", lambda folder: prepare_blz(folder / "data", llms_data))


@pytest.fixture(scope="module")
def blz_data(blz_data_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the prepared blz data root (real llms.txt sources)."""
    dest = tmp_path_factory.mktemp("blz") / "data"
    shutil.copytree(blz_data_template, dest)
    return dest


@pytest.fixture(scope="session")
def brk_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A brk output directory computed from real mainnet blocks 0..589 (bundled in the package); the servers only read it."""
    return shared_artefact(tmp_path_factory, "brk-mainnet", prepare_brk)


@pytest.fixture(scope="module")
def server_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("servers")


@pytest.fixture(scope="module")
def blz_stdio(blz_data: Path, server_workdir: Path) -> Iterator[StdioServer]:
    """``blz mcp``, initialized."""
    server = spawn_blz_stdio(blz_data, server_workdir / "blz", CAIRN_RAISE_ERRORS="1")
    try:
        server.initialize()
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def brk_stdio(brk_out: Path, server_workdir: Path) -> Iterator[StdioServer]:
    """``brk mcp --out OUT``, initialized."""
    server = spawn_brk_stdio(brk_out, server_workdir / "brk-stdio", CAIRN_RAISE_ERRORS="1")
    try:
        server.initialize()
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def brk_http(brk_out: Path, server_workdir: Path) -> Iterator[HttpServer]:
    """``brk serve --out OUT`` on a free 127.0.0.1 port (``.url`` has no trailing slash)."""
    server = spawn_brk_http(brk_out, server_workdir / "brk-http", CAIRN_RAISE_ERRORS="1")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def ctx_config(llms_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A synced ctx config over real llms.txt files (keyword search) with Lua tools find_mentions and echo: this
    worker's copy of the run's synced folder (its paths are relative to the config)."""
    template = shared_artefact(tmp_path_factory, "ctx", lambda folder: prepare_ctx(folder, llms_data))
    dest = tmp_path_factory.mktemp("ctx") / "kb"
    shutil.copytree(template.parent, dest)
    return dest / template.name


@pytest.fixture(scope="module")
def ctx_stdio(ctx_config: Path, server_workdir: Path) -> Iterator[StdioServer]:
    """``ctx serve mcp --stdio``, initialized."""
    server = spawn_ctx_stdio(ctx_config, server_workdir / "ctx-stdio", CAIRN_RAISE_ERRORS="1")
    try:
        server.initialize()
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def ctx_http(ctx_config: Path, server_workdir: Path) -> Iterator[HttpServer]:
    """``ctx serve mcp`` on a free 127.0.0.1 port."""
    server = spawn_ctx_http(ctx_config, server_workdir / "ctx-http", CAIRN_RAISE_ERRORS="1")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def llms_data(test_data: Path) -> Path:
    """The real llms.txt files of the test data: ``<project>/llms*.txt``."""
    return test_data / "llms"
