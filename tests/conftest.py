"""Shared test fixtures: repo paths, the repository's test data, per-test state dirs; the no-data-skip rule.

`make test` runs the suite on one pytest-xdist worker per core: a new test must follow the rules in
tests/_workers.py (temporary files under tmp_path, free ports, monkeypatched env, PostgreSQL through
``pg_server``, costly read-only artefacts through ``shared_artefact``, no dependence on test order)."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from ._data import is_data_skip, materialise
from ._pg import ctx_backend, ctx_module_backend, pg_server  # noqa: F401  (the storage backends, for every directory)
from ._workers import shared_artefact

REPO = Path(__file__).resolve().parents[1]
NODE_BIN = REPO / ".tools" / "node" / "node_modules" / ".bin"


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own XDG dirs so no test reads or writes the user's real state."""
    base = tmp_path_factory.mktemp("xdg")
    for var in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        monkeypatch.setenv(var, str(base / var.lower()))


@pytest.fixture(scope="session")
def test_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's test data (``tests/data``, see its README), decompressed once per run into a
    temporary directory: ``llms/<project>/*.txt`` (real llms.txt files) and ``btc/<source>/<file>`` (real
    blocks, ``btc/manifest.json``). Shared by every test and every xdist worker: copy a file before changing it."""
    return shared_artefact(tmp_path_factory, "test-data", materialise)


def _skip_reason(longrepr: Any) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """A test skipped because test data is missing fails instead: the data ships with the repository,
    so such a skip hides a broken checkout or fixture rather than anything a user can act on."""
    report = yield
    if report.skipped and not hasattr(report, "wasxfail") and is_data_skip(_skip_reason(report.longrepr)):
        report.outcome = "failed"
        report.longrepr = f"skipped for missing test data, which this suite does not allow: {_skip_reason(report.longrepr)}"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, Any]:
    """The same rule for a whole module skipped at collection."""
    report = yield
    if report.skipped and is_data_skip(_skip_reason(report.longrepr)):
        report.outcome = "failed"
        report.longrepr = f"skipped for missing test data, which this suite does not allow: {_skip_reason(report.longrepr)}"
    return report
