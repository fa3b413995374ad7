"""SIGKILL the indexer at random moments: the store is always consistent and resumes to the same bytes.

20 kills by default (about 10 s); CAIRN_STRESS=1 raises it to 60.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cairn.brk.indexer import SPECS, index, open_store
from cairn.brk.sample import write_sample

KILLS = 60 if os.environ.get("CAIRN_STRESS") else 20


def _check_consistent(out: Path, ref: Path) -> int:
    """The committed store is internally consistent and a prefix of the reference; returns its height."""
    s = open_store(out)
    r = open_store(ref)
    by_index: dict[str, set[int]] = {}
    for spec in SPECS:
        by_index.setdefault(spec.index, set()).add(s.lengths[spec.name])
    assert all(len(v) == 1 for v in by_index.values()), by_index
    heights = s.lengths["height_to_blockhash"]
    if heights:
        last_tx = int(s.read("height_to_first_txindex")[-1]) + int(s.read("height_to_tx_count")[-1])
        assert last_tx == s.lengths["txindex_to_txid"]
        assert s.meta["height"] == heights - 1
        assert s.meta["tip"] == bytes(s.read("height_to_blockhash")[-1])[::-1].hex()
    for spec in SPECS:
        n = s.lengths[spec.name] * spec.row_bytes
        got = s.path(spec.name).read_bytes()
        assert len(got) == n
        if not spec.name.startswith("blockpos"):
            assert got == r.path(spec.name).read_bytes()[:n], spec.name
    return heights - 1


@pytest.mark.timeout(120)
def test_random_sigkills_leave_a_consistent_store(tmp_path: Path) -> None:
    blocks = tmp_path / "blocks"
    write_sample(blocks, 6000, seed=3, max_file_bytes=3_000_000)
    ref = tmp_path / "ref"
    index(blocks, ref, durable=False)
    out = tmp_path / "out"
    rng = random.Random(11)
    cmd = [sys.executable, "-m", "cairn.brk.cli", "index", "--blocks-dir", str(blocks), "--out", str(out),
           "--commit-every", "10", "--format", "json"]
    kills = 0
    progress = []
    finished = False
    for _ in range(KILLS * 3):
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.1, 0.5))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
        progress.append(_check_consistent(out, ref))
        if proc.returncode == 0:
            finished = True
            break
        if kills >= KILLS:
            break
    assert kills >= min(KILLS, 5), f"only {kills} kills landed"
    assert progress == sorted(progress) and progress[-1] > progress[0]
    if not finished:  # finish with default commit sizes (tiny fsynced batches are slow under load)
        assert subprocess.run(cmd[:-4] + cmd[-2:], stdout=subprocess.DEVNULL).returncode == 0
    assert _check_consistent(out, ref) == 5999
    for spec in SPECS:  # byte for byte, the scan cache included
        assert open_store(out).path(spec.name).read_bytes() == open_store(ref).path(spec.name).read_bytes()
    assert open_store(out).meta == open_store(ref).meta


def _prefix_of_either(out: Path, refs: list[Path]) -> int:
    s = open_store(out)
    for ref in refs:
        r = open_store(ref)
        if all(s.path(spec.name).read_bytes() == r.path(spec.name).read_bytes()[:s.lengths[spec.name] * spec.row_bytes]
               for spec in SPECS if not spec.name.startswith("blockpos")):
            return s.lengths["height_to_blockhash"] - 1
    raise AssertionError("the store is neither a prefix of the old chain nor of the new one")


@pytest.mark.timeout(120)
def test_sigkills_during_a_deep_reorg(tmp_path: Path) -> None:
    """A 2,000-block chain is replaced by a longer fork from height 500 while the indexer is killed."""
    old_dir, new_dir, node = tmp_path / "old", tmp_path / "new", tmp_path / "node"
    write_sample(old_dir, 2000, seed=4, spread_blocks=2600)
    write_sample(new_dir, 2600, seed=4, fork_at=500, fork_seed=44, spread_blocks=2600, first_file=1)
    node.mkdir()
    (node / "blk00000.dat").write_bytes((old_dir / "blk00000.dat").read_bytes())
    ref_old, ref_new = tmp_path / "ref_old", tmp_path / "ref_new"
    index(old_dir, ref_old, durable=False)
    (new_dir / "blk00000.dat").write_bytes((new_dir / "blk00001.dat").read_bytes())
    (new_dir / "blk00001.dat").unlink()
    index(new_dir, ref_new, durable=False)
    assert open_store(ref_old).read("height_to_blockhash")[499].tobytes() == \
        open_store(ref_new).read("height_to_blockhash")[499].tobytes()
    out = tmp_path / "out"
    index(node, out)
    (node / "blk00001.dat").write_bytes((new_dir / "blk00000.dat").read_bytes())  # the fork arrives
    cmd = [sys.executable, "-m", "cairn.brk.cli", "index", "--blocks-dir", str(node), "--out", str(out),
           "--commit-every", "10", "--format", "json"]
    rng = random.Random(5)
    kills = 0
    for _ in range(KILLS // 2):
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.05, 0.4))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
        _prefix_of_either(out, [ref_old, ref_new])
        if proc.returncode == 0:
            break
    assert kills >= 3
    assert subprocess.run(cmd[:-4] + cmd[-2:], stdout=subprocess.DEVNULL).returncode == 0
    assert _prefix_of_either(out, [ref_new]) == 2599
    for spec in SPECS:
        if not spec.name.startswith("blockpos"):
            assert open_store(out).path(spec.name).read_bytes() == open_store(ref_new).path(spec.name).read_bytes()
