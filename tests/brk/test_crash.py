"""SIGKILL the indexer at random moments: the store is always consistent and resumes to the same bytes.

The vecs and the transaction index (RocksDB) are checked together: after any kill the index holds
exactly the first ``count`` committed transactions (never more than the vecs), and every finished
run leaves vecs and index identical to an uninterrupted run's. Kills land at random moments and, via
the ``CAIRN_BRK_FAULT`` hook, exactly between the vecs' commit and the index write, and between the
index's rollback and the vecs' truncation.

20 random kills by default (about 20 s); CAIRN_STRESS=1 raises it to 60 on a longer chain. The dense
chain tests (400 transactions a block, 1,000 under CAIRN_STRESS; blocks parsed by the second process)
land at least 10 kills (30) within 80 ms of a run's first commit, while the engine is written.
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

from cairn_servers.brk.indexer import SPECS, index, open_store
from cairn_servers.brk.sample import write_sample
from cairn_servers.brk.txindex import TxIndex, expected_entries

STRESS = bool(os.environ.get("CAIRN_STRESS"))
KILLS = 60 if STRESS else 20
BLOCKS = 20_000 if STRESS else 6000


def _index_entries(out: Path) -> tuple[int, dict[bytes, int]]:
    txi = TxIndex(out / "txindex")
    try:
        return txi.count, txi.entries()
    finally:
        txi.close()


def _check_txindex(out: Path, *, exact: bool) -> int:
    """The index holds exactly the first ``count`` committed txs (all of them when ``exact``)."""
    s = open_store(out)
    count, entries = _index_entries(out)
    n = s.lengths["txindex_to_txid"]
    assert count <= n, f"the index holds {count} transactions, the vecs only {n}"
    if exact:
        assert count == n
    assert entries == expected_entries(s.read("txindex_to_txid")[:count].tobytes())
    return n - count


def _run_until_progress(cmd: list[str], out: Path, delay: float, env: dict[str, str] | None = None
                        ) -> subprocess.Popen[bytes]:
    """Start ``cmd`` and return once it has committed something new (or ended), ``delay`` s later.

    Kills then land while blocks are being indexed and written, not while Python is still starting."""
    manifest = out / "manifest.json"
    before = manifest.stat().st_mtime_ns if manifest.exists() else 0
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 30
    while proc.poll() is None and time.monotonic() < deadline:
        if manifest.exists() and manifest.stat().st_mtime_ns != before:
            break
        time.sleep(0.01)
    time.sleep(delay)
    return proc


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
    write_sample(blocks, BLOCKS, seed=3, max_file_bytes=3_000_000)
    ref = tmp_path / "ref"
    index(blocks, ref, durable=False)
    out = tmp_path / "out"
    rng = random.Random(11)
    cmd = [sys.executable, "-m", "cairn_servers.brk.cli", "index", "--blocks-dir", str(blocks), "--out", str(out),
           "--commit-every", "10", "--format", "json"]
    kills = 0
    progress = []
    finished = False
    behind = 0
    for _ in range(KILLS * 3):
        proc = _run_until_progress(cmd, out, rng.uniform(0.0, 0.4))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
        progress.append(_check_consistent(out, ref))
        behind += _check_txindex(out, exact=proc.returncode == 0) > 0
        if proc.returncode == 0:
            finished = True
            break
        if kills >= KILLS:
            break
    assert kills >= min(KILLS, 5), f"only {kills} kills landed"
    assert progress == sorted(progress) and progress[-1] > progress[0]
    if not finished:  # finish with default commit sizes (tiny fsynced batches are slow under load)
        assert subprocess.run(cmd[:-4] + cmd[-2:], stdout=subprocess.DEVNULL).returncode == 0
    assert _check_consistent(out, ref) == BLOCKS - 1
    for spec in SPECS:  # byte for byte, the scan cache included
        assert open_store(out).path(spec.name).read_bytes() == open_store(ref).path(spec.name).read_bytes()
    assert open_store(out).meta == open_store(ref).meta
    _check_txindex(out, exact=True)
    assert _index_entries(out) == _index_entries(ref)  # the same answers for every txid


@pytest.mark.timeout(240)
def test_kills_between_the_vecs_and_the_index(tmp_path: Path) -> None:
    """Each run is killed right after a commit of the vecs, before the index write: the next open
    re-inserts that batch, and the end result is the uninterrupted one."""
    blocks = tmp_path / "blocks"
    write_sample(blocks, 1500, seed=8)
    ref = tmp_path / "ref"
    index(blocks, ref, durable=False)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "cairn_servers.brk.cli", "index", "--blocks-dir", str(blocks), "--out", str(out),
           "--commit-every", "25", "--no-compute", "--format", "json"]
    rng = random.Random(3)
    kills = 0
    for _ in range(12):
        env = dict(os.environ, CAIRN_BRK_FAULT=f"commit-index:{rng.randint(1, 4)}")
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        assert proc.returncode == -signal.SIGKILL
        kills += 1
        _check_consistent(out, ref)
        assert _check_txindex(out, exact=False) > 0  # the vecs committed a batch the index lacks
    assert kills >= 10
    assert subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode == 0
    for spec in SPECS:
        assert open_store(out).path(spec.name).read_bytes() == open_store(ref).path(spec.name).read_bytes()
    _check_txindex(out, exact=True)
    assert _index_entries(out) == _index_entries(ref)


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
    cmd = [sys.executable, "-m", "cairn_servers.brk.cli", "index", "--blocks-dir", str(node), "--out", str(out),
           "--commit-every", "10", "--format", "json"]
    rng = random.Random(5)
    kills = 0
    # First a kill right after the index forgot the rolled-back transactions, before the vecs shrink.
    env = dict(os.environ, CAIRN_BRK_FAULT="rollback-vecs:1")
    assert subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env).returncode \
        == -signal.SIGKILL
    assert _prefix_of_either(out, [ref_old]) == 1999  # the vecs still hold the old chain ...
    assert _check_txindex(out, exact=False) > 0  # ... and the index only what stays (a prefix)
    for _ in range(KILLS // 2):
        proc = _run_until_progress(cmd, out, rng.uniform(0.0, 0.3))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
        _prefix_of_either(out, [ref_old, ref_new])
        _check_txindex(out, exact=proc.returncode == 0)
        if proc.returncode == 0:
            break
    assert kills >= 3
    assert subprocess.run(cmd[:-4] + cmd[-2:], stdout=subprocess.DEVNULL).returncode == 0
    assert _prefix_of_either(out, [ref_new]) == 2599
    for spec in SPECS:
        if not spec.name.startswith("blockpos"):
            assert open_store(out).path(spec.name).read_bytes() == open_store(ref_new).path(spec.name).read_bytes()
    _check_txindex(out, exact=True)  # the old branch's transactions are gone from the index
    assert _index_entries(out) == _index_entries(ref_new)


# -- dense chains: kills while the transaction index is being written, blocks parsed in a second process --

DENSE_K = 1000 if STRESS else 400  # transactions a block
DENSE_BLOCKS = 101 + (600 if STRESS else 300)  # long enough that no run ends before its kill lands
DENSE_KILLS = 30 if STRESS else 10


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except OSError:
        return []


def _kill_and_reap(proc: subprocess.Popen[bytes]) -> bool:
    """SIGKILL ``proc`` if it still runs; its parsing process must then end by itself. True if killed."""
    if proc.poll() is not None:
        proc.wait()
        return False
    workers = _children(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    for pid in workers:  # orphaned: it sees end of file on its stdin (or a broken pipe) and exits
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    if fh.read().split(")")[-1].split()[0] == "Z":
                        break  # exited; a zombie until its new parent reaps it
            except OSError:
                break
            time.sleep(0.02)
        assert time.monotonic() < deadline, f"the parsing process {pid} outlived the indexer"
    return True


def _same_as(out: Path, ref: Path, *, blockpos: bool = True) -> None:
    for spec in SPECS:
        if blockpos or not spec.name.startswith("blockpos"):
            assert open_store(out).path(spec.name).read_bytes() == open_store(ref).path(spec.name).read_bytes(), \
                spec.name
    _check_txindex(out, exact=True)
    assert _index_entries(out) == _index_entries(ref)  # the same answer for every txid


@pytest.mark.timeout(600 if STRESS else 300)
def test_sigkills_while_the_index_is_written_on_a_dense_chain(tmp_path: Path) -> None:
    """At least 10 kills at random moments of a dense chain's indexing (blocks parsed by the second
    process, engine batches of thousands of transactions), some exactly between the vecs' commit and
    the engine write: every resumed run ends with the uninterrupted run's vecs and answers."""
    blocks = tmp_path / "blocks"
    write_sample(blocks, DENSE_BLOCKS, seed=21, txs_per_block=DENSE_K, max_file_bytes=8_000_000)
    ref = tmp_path / "ref"
    index(blocks, ref, durable=False)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "cairn_servers.brk.cli", "index", "--blocks-dir", str(blocks), "--out", str(out),
           "--commit-every", "2", "--no-compute", "--format", "json"]
    env = dict(os.environ, CAIRN_BRK_PARSE_PROCESS="1")
    rng = random.Random(17)
    kills = faults = 0
    heights = []
    for run in range(DENSE_KILLS * 4):
        if run % 4 == 3:  # right after a commit of the vecs, before the engine's batch
            fenv = dict(env, CAIRN_BRK_FAULT=f"commit-index:{rng.randint(1, 3)}")
            proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=fenv)
            faults += proc.returncode == -signal.SIGKILL
            code = proc.returncode
        else:
            popen = _run_until_progress(cmd, out, rng.uniform(0.0, 0.08), env=env)
            kills += _kill_and_reap(popen)
            code = popen.returncode
        heights.append(_check_consistent(out, ref))
        _check_txindex(out, exact=code == 0)
        if code == 0 or kills >= DENSE_KILLS:
            break
    assert kills >= DENSE_KILLS, f"only {kills} random kills landed"
    assert faults >= 1 and heights == sorted(heights)
    assert subprocess.run(cmd, stdout=subprocess.DEVNULL, env=env).returncode == 0
    assert _check_consistent(out, ref) == DENSE_BLOCKS - 1
    _same_as(out, ref)
    assert open_store(out).meta == open_store(ref).meta


@pytest.mark.timeout(600 if STRESS else 300)
def test_sigkills_during_a_reorg_of_a_dense_chain(tmp_path: Path) -> None:
    """A dense chain is replaced by a longer fork while the indexer is killed: the rolled-back
    transactions leave the engine, and the end state is the new chain's, vecs and answers alike."""
    n_old, n_new, fork = DENSE_BLOCKS - 10, DENSE_BLOCKS, 121
    old_dir, new_dir, node = tmp_path / "old", tmp_path / "new", tmp_path / "node"
    one_file = 1 << 30  # each chain in one blk file (the stress size would otherwise take two)
    write_sample(old_dir, n_old, seed=6, txs_per_block=DENSE_K, spread_blocks=n_new, max_file_bytes=one_file)
    write_sample(new_dir, n_new, seed=6, txs_per_block=DENSE_K, fork_at=fork, fork_seed=66, spread_blocks=n_new,
                 first_file=1, max_file_bytes=one_file)
    node.mkdir()
    (node / "blk00000.dat").write_bytes((old_dir / "blk00000.dat").read_bytes())
    ref_new = tmp_path / "ref_new"
    (new_dir / "blk00000.dat").write_bytes((new_dir / "blk00001.dat").read_bytes())
    (new_dir / "blk00001.dat").unlink()
    index(new_dir, ref_new, durable=False)
    out = tmp_path / "out"
    index(node, out)
    old_txs = open_store(out).lengths["txindex_to_txid"]
    (node / "blk00001.dat").write_bytes((new_dir / "blk00000.dat").read_bytes())  # the fork arrives
    cmd = [sys.executable, "-m", "cairn_servers.brk.cli", "index", "--blocks-dir", str(node), "--out", str(out),
           "--commit-every", "2", "--no-compute", "--format", "json"]
    env = dict(os.environ, CAIRN_BRK_PARSE_PROCESS="1")
    # A kill right after the engine forgot the rolled-back transactions, before the vecs shrink.
    fenv = dict(env, CAIRN_BRK_FAULT="rollback-vecs:1")
    assert subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=fenv).returncode \
        == -signal.SIGKILL
    assert open_store(out).lengths["txindex_to_txid"] == old_txs  # the vecs still hold the old chain ...
    assert _check_txindex(out, exact=False) > 0  # ... the engine only the part both chains share
    rng = random.Random(8)
    kills = 0
    for _ in range(DENSE_KILLS * 3):
        proc = _run_until_progress(cmd, out, rng.uniform(0.0, 0.08), env=env)
        kills += _kill_and_reap(proc)
        _check_txindex(out, exact=proc.returncode == 0)
        if proc.returncode == 0 or kills >= DENSE_KILLS // 2:
            break
    assert kills >= DENSE_KILLS // 2
    assert subprocess.run(cmd, stdout=subprocess.DEVNULL, env=env).returncode == 0
    _same_as(out, ref_new, blockpos=False)
