"""SIGKILL `blz add --force` and `blz update` at random moments: the index is never corrupt, the source
is always the previous or the new version (never a mix), and the next run completes.

5 kills in `make test` (about 4 s), 20 under CAIRN_STRESS=1. (ctx sync and brk index have their own
SIGKILL tests: tests/ctx/test_kill.py, tests/brk/test_crash.py.)
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

KILLS = 20 if os.environ.get("CAIRN_STRESS") else 5
WORDS = "alpha beta gamma delta hooks state effect render cache token stream layer".split()


def _doc(version: int, sections: int = 2500) -> bytes:
    """A ~2 MB llms.txt; every version differs in every section (so a torn write would show)."""
    rng = random.Random(version)
    out = [f"# Doc v{version}\n"]
    for s in range(sections):
        out.append(f"## Section {s} v{version}\n")
        out.extend(" ".join(rng.choice(WORDS) for _ in range(12)) + f" w{s}x{n}\n" for n in range(10))
    out.append(f"\nversiontoken{version}\n")
    return "".join(out).encode()


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _blz(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cairn_servers.blz.cli", *args, "--json"], env=env,
                          capture_output=True, text=True, timeout=60)


def _state(env: dict[str, str]) -> dict[str, Any]:
    """The committed state, as `blz validate` and `blz list` report it (both must succeed)."""
    val = _blz(env, "validate")
    assert val.returncode == 0, val.stdout + val.stderr
    assert json.loads(val.stdout)["ok"] is True
    listed = _blz(env, "list")
    assert listed.returncode == 0, listed.stderr
    return {s["alias"]: s for s in json.loads(listed.stdout)["sources"]}


def _sha(row: dict[str, Any]) -> str:
    return str(row.get("sha256") or row["metadata"]["sha256"])


@pytest.mark.timeout(240)
def test_sigkill_during_blz_add_and_update(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {**os.environ, "BLZ_DATA_DIR": str(data), "PYTHONUNBUFFERED": "1"}
    src = tmp_path / "llms.txt"
    _write_atomic(src, _doc(0))
    started = time.monotonic()
    first = _blz(env, "add", "d", str(src), "--exact")
    duration = time.monotonic() - started  # how long an uninterrupted run takes on this machine, now
    assert first.returncode == 0, first.stderr
    committed = hashlib.sha256(_doc(0)).hexdigest()
    listed = json.loads(_blz(env, "list").stdout)["sources"]
    assert listed and listed[0]["alias"] == "d"

    rng = random.Random(9)
    landed = 0
    for version in range(1, KILLS + 1):
        body = _doc(version)
        new = hashlib.sha256(body).hexdigest()
        _write_atomic(src, body)
        cmd = ["update", "d"] if version % 2 else ["add", "d", str(src), "--exact", "--force"]
        proc = subprocess.Popen([sys.executable, "-m", "cairn_servers.blz.cli", *cmd, "--json"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.05, 0.9) * duration)  # anywhere from start-up to the final commit
        hit = proc.poll() is None
        landed += hit
        proc.send_signal(signal.SIGKILL)
        proc.wait()

        # Never corrupt, never a mix: the index validates and the source is exactly old or new.
        rows = _state(env)
        assert set(rows) == {"d"}
        got = _blz(env, "inspect", "d")
        assert got.returncode == 0, got.stderr
        sha = _sha(json.loads(got.stdout))
        assert sha in (committed, new), f"round {version}: unknown content {sha}"

        # The next run completes and leaves exactly one stored file (no orphan from the killed run).
        started = time.monotonic()
        again = _blz(env, *cmd)
        if hit:  # then this run did the whole job: a fresh measure of how long that takes now
            duration = time.monotonic() - started
        assert again.returncode == 0, again.stderr
        got = json.loads(_blz(env, "inspect", "d").stdout)
        assert _sha(got) == new
        committed = new
        _state(env)
        files = sorted(p.name for p in (data / "sources" / "d").iterdir())
        assert files == [f"{new[:16]}.txt"], files
        found = _blz(env, "search", f"versiontoken{version}", "-s", "d")
        assert found.returncode == 0 and json.loads(found.stdout)["hits"], found.stdout
    assert landed >= max(2, KILLS // 2), f"only {landed} of {KILLS} kills landed while blz was running"


def test_unchanged_update_removes_a_file_left_by_a_kill_after_commit(tmp_path: Path) -> None:
    """A kill between the commit and the old file's deletion leaves that file behind; the next
    `blz update`, even one that finds nothing new, removes it (found by the random kills above)."""
    data = tmp_path / "data"
    env = {**os.environ, "BLZ_DATA_DIR": str(data)}
    src = tmp_path / "llms.txt"
    src.write_bytes(_doc(1, sections=20))
    assert _blz(env, "add", "d", str(src), "--exact").returncode == 0
    folder = data / "sources" / "d"
    current = sorted(p.name for p in folder.iterdir())
    (folder / "0123456789abcdef.txt").write_bytes(_doc(0, sections=20))  # the previous version's file
    res = _blz(env, "update", "d")
    assert res.returncode == 0 and json.loads(res.stdout)["results"][0]["status"] == "unchanged", res.stdout
    assert sorted(p.name for p in folder.iterdir()) == current
