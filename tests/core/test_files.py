"""cairn_servers.core.files: the one atomic-write helper (temp in the same directory, fsync, replace, fsync dir)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cairn_servers.core.files import TEMP_PREFIX, atomic_file, replace_file, write_atomic


def test_write_atomic_replaces_the_content_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "manifest.json"
    target.write_bytes(b"old")
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]


def test_a_failure_inside_the_block_keeps_the_old_content_and_removes_the_temp(tmp_path: Path) -> None:
    target = tmp_path / "blk00000.dat"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="disk gone"):
        with atomic_file(target) as fh:
            fh.write(b"half of the new")
            raise RuntimeError("disk gone")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["blk00000.dat"]


def test_the_temp_file_lives_beside_the_target_until_the_block_ends(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    with atomic_file(target) as fh:
        fh.write(b"{}")
        temps = [p.name for p in tmp_path.iterdir()]
        assert len(temps) == 1 and temps[0].startswith(TEMP_PREFIX + "state.json.")
        assert not target.exists()  # readers never see a half-written file
    assert target.read_bytes() == b"{}"


def test_the_rule_fsyncs_the_file_then_the_directory_after_the_rename(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append("fsync-dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "fsync-file")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        calls.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)  # cairn_servers.core.files calls os.fsync / os.replace
    monkeypatch.setattr(os, "replace", replace)
    write_atomic(tmp_path / "a", b"x")
    if os.path.isdir("/proc/self/fd"):
        assert calls == ["fsync-file", "replace", "fsync-dir"]
    else:
        assert calls[1] == "replace" and len(calls) == 3
    calls.clear()
    write_atomic(tmp_path / "a", b"y", durable=False)  # brk index --no-fsync: still atomic, no fsync
    assert calls == ["replace"]
    assert (tmp_path / "a").read_bytes() == b"y"


def test_the_mode_is_what_open_would_give_unless_asked_for_an_owner_only_file(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    try:
        write_atomic(tmp_path / "public", b"x")
        write_atomic(tmp_path / "private", b"x", mode=0o600)
    finally:
        os.umask(umask)
    assert (tmp_path / "public").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "private").stat().st_mode & 0o777 == 0o600


def test_replace_file_syncs_a_file_written_in_place_then_renames_it(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # brk's UTXO pass writes its state through a memory map, then moves it over the checkpoint.
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append("fsync-dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "fsync-file")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        calls.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    (tmp_path / "state").write_bytes(b"old")
    (tmp_path / "state.tmp").write_bytes(b"new")
    replace_file(tmp_path / "state.tmp", tmp_path / "state")
    assert (tmp_path / "state").read_bytes() == b"new" and not (tmp_path / "state.tmp").exists()
    if os.path.isdir("/proc/self/fd"):
        assert calls == ["fsync-file", "replace", "fsync-dir"]
    calls.clear()
    (tmp_path / "state.tmp").write_bytes(b"newer")
    replace_file(tmp_path / "state.tmp", tmp_path / "state", durable=False)
    assert calls == ["replace"] and (tmp_path / "state").read_bytes() == b"newer"


def test_only_core_files_replaces_files() -> None:
    import cairn_servers

    src = Path(cairn_servers.__file__).resolve().parent
    # the one exception renames a finished git clone (a directory) into place
    offenders = [str(p.relative_to(src)) for p in src.rglob("*.py")
                 if p.name != "files.py" and "os.replace(" in p.read_text(encoding="utf-8")
                 and p.name != "git.py"]
    assert offenders == []
