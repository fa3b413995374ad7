"""A file or folder ``ctx sync`` cannot read is counted as skipped and named in the warnings, with why;
never dropped silently."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cairn_servers.ctx.config import load
from cairn_servers.ctx.connectors.filesystem import FilesystemConnector


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "ctx.toml"
    config.write_text('[db]\npath = "kb.sqlite"\n\n[embedding]\nprovider = "disabled"\n\n'
                      '[connectors.filesystem.docs]\nroot = "docs"\n', encoding="utf-8")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Alpha\n\nreadable\n", encoding="utf-8")
    return config


def _deep_folder(root: Path) -> str:
    """A folder whose full path is longer than the system allows (ENAMETOOLONG), built step by step with
    relative names, holding a Markdown file: unreadable whoever runs the test (root included)."""
    name = "d" * 200
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(22):  # 22 x 201 bytes: past PATH_MAX (4096)
            os.mkdir(name, dir_fd=fd)
            inner = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        with open(os.open("deep.md", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as f:
            f.write("# Deep\n\nnever read\n")
    finally:
        os.close(fd)
    return "/".join([name] * 21)  # the first folder whose scan fails (its path is past the limit)


def test_an_unreadable_folder_is_skipped_and_named(tmp_path: Path) -> None:
    config = _config(tmp_path)
    _deep_folder(tmp_path / "docs")
    r = subprocess.run([sys.executable, "-m", "cairn_servers.ctx.cli", "--config", str(config), "sync", "all",
                        "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)["sources"][0]
    assert (report["added"], report["skipped"]) == (1, 1)
    [warning] = report["warnings"]
    assert warning.endswith(": skipped: cannot read the folder (File name too long)"), warning
    text = subprocess.run([sys.executable, "-m", "cairn_servers.ctx.cli", "--config", str(config), "sync", "all",
                           "--full", "--text"], capture_output=True, text=True, timeout=60).stdout
    assert "1 skipped" in text and "  warning: " in text and "cannot read the folder" in text


def test_a_file_gone_between_scan_and_read_is_skipped_and_named(tmp_path: Path) -> None:
    config = _config(tmp_path)
    (tmp_path / "docs" / "b.md").write_text("# Beta\n\nremoved before it is read\n", encoding="utf-8")
    connector = FilesystemConnector(load(str(config)).connectors[0])
    entries = {e.source_id: e for e in connector.scan()}
    (tmp_path / "docs" / "b.md").unlink()
    assert entries["a.md"].load() is not None
    assert entries["b.md"].load() is None
    assert connector.skipped == 1
    assert connector.warnings == ["b.md: skipped: cannot read it (No such file or directory)"]
