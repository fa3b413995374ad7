from __future__ import annotations

from pathlib import Path

import pytest

from cairn_servers.core import paths


def test_override_env_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("BLZ_DATA_DIR", str(tmp_path / "x"))
    assert paths.data_dir("blz", "BLZ_DATA_DIR") == tmp_path / "x"


def test_xdg_used_when_absolute(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("BLZ_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert paths.data_dir("blz", "BLZ_DATA_DIR") == tmp_path / "blz"


def test_relative_xdg_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")
    assert paths.cache_dir("ctx") == Path.home() / ".cache" / "ctx"
