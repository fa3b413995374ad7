"""The vec store: commits, crash leftovers, rollback, version changes, and clear storage errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cairn_servers.brk.vecs import VecSpec, VecStore, read_manifest
from cairn_servers.core.errors import StorageError

SPECS = [VecSpec("height_to_x", "height", "<u4"), VecSpec("height_to_h", "height", "u1", 4)]


def test_commit_reopen_and_memmap(tmp_path: Path) -> None:
    s = VecStore(tmp_path, SPECS)
    s.append("height_to_x", np.arange(5))
    s.append_bytes("height_to_h", b"abcd" * 5, 5)
    assert s.read("height_to_x").shape == (0,)  # nothing committed yet
    s.commit({"tip": "t"})
    again = VecStore(tmp_path, SPECS)
    assert again.read("height_to_x").tolist() == [0, 1, 2, 3, 4]
    assert isinstance(again.read("height_to_x"), np.memmap)
    assert again.read("height_to_h").shape == (5, 4) and bytes(again.read("height_to_h")[2]) == b"abcd"
    assert again.meta == {"tip": "t"}
    assert read_manifest(tmp_path)["vecs"]["height_to_x"]["length"] == 5


def test_uncommitted_bytes_are_cut_on_open(tmp_path: Path) -> None:
    s = VecStore(tmp_path, SPECS)
    s.append("height_to_x", np.arange(3))
    s.append_bytes("height_to_h", bytes(12), 3)
    s.commit()
    with open(s.path("height_to_x"), "ab") as fh:  # a crash after appending, before the manifest
        fh.write(b"\x07" * 10)
    again = VecStore(tmp_path, SPECS)
    assert again.path("height_to_x").stat().st_size == 12
    assert again.read("height_to_x").tolist() == [0, 1, 2]


def test_rollback_survives_a_crash_between_manifest_and_truncate(tmp_path: Path) -> None:
    s = VecStore(tmp_path, SPECS)
    s.append("height_to_x", np.arange(10))
    s.append_bytes("height_to_h", bytes(40), 10)
    s.commit()
    # Simulate the crash: the manifest says 4 rows, the files still hold 10.
    manifest = json.loads(s.manifest_path.read_text())
    for v in manifest["vecs"].values():
        v["length"] = 4
    s.manifest_path.write_text(json.dumps(manifest))
    again = VecStore(tmp_path, SPECS)
    assert again.read("height_to_x").tolist() == [0, 1, 2, 3]
    again.truncate({"height_to_x": 2, "height_to_h": 2}, {"rolled": True})
    assert VecStore(tmp_path, SPECS).read("height_to_x").tolist() == [0, 1]
    with pytest.raises(StorageError, match="cannot roll vec height_to_x forward from 2 to 5"):
        again.truncate({"height_to_x": 5}, {})


def test_version_change_resets(tmp_path: Path) -> None:
    s = VecStore(tmp_path, SPECS)
    s.append("height_to_x", np.arange(3))
    s.append_bytes("height_to_h", bytes(12), 3)
    s.commit({"height": 2})
    bumped = [VecSpec("height_to_x", "height", "<u4", version=2), SPECS[1]]
    again = VecStore(tmp_path, bumped)
    assert again.lengths == {"height_to_x": 0, "height_to_h": 0} and again.meta == {}
    assert again.path("height_to_h").stat().st_size == 0


def test_damaged_stores_are_explained(tmp_path: Path) -> None:
    s = VecStore(tmp_path, SPECS)
    s.append("height_to_x", np.arange(3))
    s.append_bytes("height_to_h", bytes(12), 3)
    s.commit()
    s.path("height_to_x").write_bytes(b"\x00")
    with pytest.raises(StorageError, match=r"holds 1 bytes but the manifest commits 12\. Delete .* and index again\."):
        VecStore(tmp_path, SPECS)
    s.manifest_path.write_text("{not json")
    with pytest.raises(StorageError, match="is unreadable"):
        VecStore(tmp_path, SPECS)
    with pytest.raises(StorageError, match="has no manifest.json. Run `brk index --out"):
        read_manifest(tmp_path / "nowhere")
