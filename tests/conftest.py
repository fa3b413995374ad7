"""Shared test fixtures: repo paths, the shared data folder, per-test state dirs."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
NODE_BIN = REPO / ".tools" / "node" / "node_modules" / ".bin"


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own XDG dirs so no test reads or writes the user's real state."""
    base = tmp_path_factory.mktemp("xdg")
    for var in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        monkeypatch.setenv(var, str(base / var.lower()))


@pytest.fixture
def shared_data() -> Path:
    """``../shared/data`` beside the repo; tests that need it skip cleanly where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not present beside this clone")
    return SHARED_DATA
