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
