"""``brk index --jobs N``: the computed passes in stage processes beside the indexer.

* Every computed id is byte-identical between ``--jobs 1``, ``--jobs 2`` (and 3) and the previous main:
  the checksums in ``golden/`` were written by the earlier code (see ``_golden.py``).
* A SIGKILL of each process of the pipeline (the indexer, each stage process) then a re-run ends
  byte-identical to a clean run; a stage that dies fails the whole command with a clear error.
* A reorg while the stages compute (the raw store is rolled back under them) ends as a clean run of
  the new chain.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cairn_servers.brk.sample import write_sample

from . import _golden as golden
from ._run import clean_env, run_brk, vec_bytes


def _prepare(kind: str, root: Path) -> tuple[Path, Path]:
    """The chain, and an output directory holding its first block (raw only) and the golden prices."""
    blocks, out = root / "blocks", root / "out"
    if not blocks.exists():
        golden.write_chain(kind, blocks)
    r = run_brk("index", "--blocks-dir", str(blocks), "--out", str(out), "--no-compute", "--max-blocks", "1",
                "--format", "json", env=clean_env())
    assert r.code == 0, r.err
    golden.write_prices(kind, out)
    return blocks, out


def _index(blocks: Path, out: Path, jobs: int, *extra: str, env: dict[str, str] | None = None,
           timeout: float = 240) -> tuple[int, str]:
    r = run_brk("index", "--blocks-dir", str(blocks), "--out", str(out), "--jobs", str(jobs), "--format", "json",
                *extra, env=env or clean_env(), timeout=timeout)
    return r.code, r.err


def _same_as_previous_main(kind: str, tmp_path: Path, jobs: list[int], commit_every: str) -> None:
    want = golden.expected(kind)
    blocks = tmp_path / "blocks"
    for n in jobs:
        root = tmp_path / f"jobs{n}"
        root.mkdir()
        if not blocks.exists():
            golden.write_chain(kind, blocks)
        (root / "blocks").symlink_to(blocks)
        blocks_dir, out = _prepare(kind, root)
        code, err = _index(blocks_dir, out, n, "--commit-every", commit_every)
        assert code == 0, err
        got = golden.checksums(out)
        assert sorted(got) == sorted(want)
        assert [name for name in want if got[name] != want[name]] == [], f"--jobs {n}: computed vecs changed"


def test_every_computed_id_is_identical_with_1_2_and_3_jobs_on_mainnet(tmp_path: Path) -> None:
    # Small commits: the stages follow the indexer over many cycles, as on a long chain.
    _same_as_previous_main("mainnet", tmp_path, [1, 2, 3], "40")


def test_every_computed_id_is_identical_with_1_and_2_jobs_on_a_dense_chain(tmp_path: Path) -> None:
    _same_as_previous_main("dense", tmp_path, [1, 2], "20")


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("CAIRN_STRESS"), reason="about 30 s: make stress (CAIRN_STRESS=1)")
def test_every_computed_id_is_identical_with_2_jobs_on_a_dense_500k_chain(tmp_path: Path) -> None:
    _same_as_previous_main("dense500k", tmp_path, [2], "100")


def test_progress_covers_every_stage_process(tmp_path: Path) -> None:
    """The stage processes' lines reach the command's JSON progress: each stage says it starts, then its
    committed heights only grow up to the tip, with the documented fields; the last line is the index's."""
    blocks = tmp_path / "blocks"
    write_sample(blocks, 141, seed=5, txs_per_block=150)
    r = run_brk("index", "--blocks-dir", str(blocks), "--out", str(tmp_path / "out"), "--jobs", "3",
                "--commit-every", "10", "--format", "json", env=clean_env(CAIRN_BRK_UTXO_CHUNK="3000"))
    assert r.code == 0, r.err
    lines = [json.loads(line) for line in r.err.splitlines()]
    fields = {"event", "stage", "height", "committed_height", "target_height", "blocks", "bytes", "elapsed_s",
              "blocks_per_s", "mb_per_s", "eta_s"}
    assert all(set(line) - {"file", "files", "found"} == fields for line in lines)
    assert (lines[-1]["event"], lines[-1]["stage"], lines[-1]["committed_height"]) == ("done", "index", 140)
    for name in ("index", "computed", "utxo", "addresses", "explorer"):
        mine = [line for line in lines[:-1] if line["stage"] == name]
        if name != "index":
            assert mine[0]["event"] == "stage" and [x["event"] for x in mine].count("stage") == 1
            assert all(x["target_height"] == 140 for x in mine)
            assert any(x["eta_s"] is not None for x in mine)
        heights = [x["committed_height"] for x in mine]
        assert heights == sorted(heights) and heights[-1] == 140, (name, heights)


# -- kills --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes], dict[str, object]]:
    """A dense chain and a clean ``--jobs 1`` run's files (vec_bytes) and computed checksums."""
    root = tmp_path_factory.mktemp("pipe")
    blocks = root / "blocks"
    write_sample(blocks, 161, seed=31, txs_per_block=200)
    out = root / "clean"
    code, err = _index(blocks, out, 1)
    assert code == 0, err
    return blocks, vec_bytes(out), golden.checksums(out)


def _stage_pids(parent: int) -> list[int]:
    """The stage processes of a ``brk index`` (not its block-parsing process)."""
    try:
        with open(f"/proc/{parent}/task/{parent}/children") as fh:
            pids = [int(x) for x in fh.read().split()]
    except OSError:
        return []
    found = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if b"cairn_servers.brk.pipeline" in fh.read():
                    found.append(pid)
        except OSError:
            pass
    return found


def _gone(pids: list[int], timeout: float = 30) -> bool:
    """True once every pid has exited (a zombie counts: it has, and waits for its reaper)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    if fh.read().split(")")[-1].split()[0] != "Z":
                        alive.append(pid)
            except OSError:
                pass
        if not alive:
            return True
        time.sleep(0.05)
    return False


def _rerun_is_clean(blocks: Path, out: Path, clean: tuple[dict[str, bytes], dict[str, object]], jobs: int) -> None:
    code, err = _index(blocks, out, jobs)
    assert code == 0, err
    files = vec_bytes(out)
    assert files.keys() == clean[0].keys()
    assert [k for k in files if files[k] != clean[0][k]] == []
    assert golden.checksums(out) == clean[1]


@pytest.mark.parametrize(("jobs", "fault", "who"), [
    (2, "commit-index:3", "indexer"),  # the parent, between the vecs' commit and the index write
    (2, "utxo-commit:2", "computed+utxo+cohorts+addrcohorts+mining"),  # each of the two stage processes
    (2, "explorer-chunk:2", "addresses+explorer"),  # between the explorer's index writes and its commit
    (3, "utxo-commit:2", "computed+utxo+cohorts+addrcohorts+mining"),
    (3, "address-commit:2", "addresses+explorer"),
    (2, "addrcohorts-undo:2", "computed+utxo+cohorts+addrcohorts+mining"),  # between the undo rows and the commit
])
def test_a_kill_in_each_stage_then_a_rerun_ends_as_a_clean_run(
        chain: tuple[Path, dict[str, bytes], dict[str, object]], tmp_path: Path, jobs: int, fault: str, who: str
) -> None:
    blocks, clean_files, clean_sums = chain
    out = tmp_path / "out"
    env = clean_env(CAIRN_BRK_FAULT=fault, CAIRN_BRK_UTXO_CHUNK="6000")  # small chunks: several commits
    proc = subprocess.Popen([sys.executable, "-m", "cairn_servers.brk.cli", "index", "--blocks-dir", str(blocks),
                             "--out", str(out), "--jobs", str(jobs), "--commit-every", "20", "--format", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    stages: set[int] = set()
    while proc.poll() is None:
        stages.update(_stage_pids(proc.pid))
        time.sleep(0.01)
    _, err = proc.communicate(timeout=60)
    if who == "indexer":
        assert proc.returncode == -signal.SIGKILL
        # Orphaned, each stage sees end of file from its parent and stops at its next committed chunk.
        assert _gone(list(stages)), "a stage process outlived the indexer"
    else:  # a stage died: the command fails with a clear error, the other processes stop
        assert proc.returncode == 1, err
        assert f"brk: error: the {who} stage (process " in err and "failed: killed by SIGKILL" in err, err
        assert "Traceback" not in err
        assert _gone(list(stages))
    _rerun_is_clean(blocks, out, (clean_files, clean_sums), jobs)


def test_a_sigkill_of_the_stage_process_mid_run(chain: tuple[Path, dict[str, bytes], dict[str, object]],
                                                tmp_path: Path) -> None:
    """Killed from outside at a random moment of its work: the command fails at once, the rerun is clean."""
    blocks, clean_files, clean_sums = chain
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "cairn_servers.brk.cli", "index", "--blocks-dir", str(blocks),
                             "--out", str(out), "--jobs", "2", "--commit-every", "10", "--format", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env())
    assert proc.stderr is not None
    for line in proc.stderr:  # a stage has committed something: it is at work
        if line.startswith("{") and json.loads(line)["stage"] == "utxo":
            break
    pids = [pid for pid in _stage_pids(proc.pid) if b"utxo" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(pids) == 1  # beside the address and explorer passes' stage process
    os.kill(pids[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert f"(process {pids[0]}) failed: killed by SIGKILL" in err and "run the same command again" in err
    _rerun_is_clean(blocks, out, (clean_files, clean_sums), 2)


# -- a reorg under the stages ---------------------------------------------------------------------------

def test_a_reorg_while_the_stages_compute_ends_as_a_clean_run(tmp_path: Path) -> None:
    """The stages are catching up on a chain when a longer fork arrives: the indexer holds them, rolls the
    raw store back and indexes the fork; they resume, cut themselves back and end as a clean run's."""
    n_old, n_new, fork = 130, 140, 90
    old_dir, new_dir, node = tmp_path / "old", tmp_path / "new", tmp_path / "node"
    write_sample(old_dir, n_old, seed=6, txs_per_block=200, spread_blocks=n_new)
    write_sample(new_dir, n_new, seed=6, txs_per_block=200, fork_at=fork, fork_seed=66, spread_blocks=n_new,
                 first_file=1)
    (new_dir / "blk00000.dat").write_bytes((new_dir / "blk00001.dat").read_bytes())
    (new_dir / "blk00001.dat").unlink()
    clean = tmp_path / "clean"
    code, err = _index(new_dir, clean, 1)
    assert code == 0, err
    node.mkdir()
    (node / "blk00000.dat").write_bytes((old_dir / "blk00000.dat").read_bytes())
    out = tmp_path / "out"
    r = run_brk("index", "--blocks-dir", str(node), "--out", str(out), "--no-compute", "--format", "json",
                env=clean_env())
    assert r.code == 0, r.err
    env = clean_env(CAIRN_BRK_UTXO_CHUNK="1500")  # small chunks: the passes take a while, committing often
    log = tmp_path / "stderr"
    with open(log, "w") as err_file:
        proc = subprocess.Popen([sys.executable, "-m", "cairn_servers.brk.cli", "index", "--blocks-dir", str(node),
                                 "--out", str(out), "--jobs", "3", "--watch", "--interval", "0.1", "--format",
                                 "json"], stdout=subprocess.DEVNULL, stderr=err_file, env=env)

    def height(store: str) -> int:
        try:
            return int(json.loads((out / store / "manifest.json").read_text())["meta"].get("height", -1))
        except (OSError, ValueError):
            return -1

    deadline = time.monotonic() + 60
    while height("addresses") < fork and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.005)
    before = height("addresses")
    (node / "blk00001.dat").write_bytes((new_dir / "blk00000.dat").read_bytes())  # the fork arrives
    # The address stage had computed the old branch past the fork height, and not all of it.
    assert fork <= before < n_old - 1, before
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if [height(s) for s in ("computed", "utxo", "addresses", "explorer")] == [n_new - 1] * 4:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    rest = log.read_text()
    assert proc.returncode == 0, rest
    assert [height(s) for s in ("computed", "utxo", "addresses", "explorer")] == [n_new - 1] * 4, rest
    assert f"reorg: rolling back from height {n_old - 1} to {fork - 1}" in rest, rest
    assert golden.checksums(out) == golden.checksums(clean)
    raw_out, raw_clean = vec_bytes(out), vec_bytes(clean)
    raw = [k for k in raw_clean if k.startswith("vecs/") and "blockpos" not in k]
    assert raw and [k for k in raw if raw_out[k] != raw_clean[k]] == []


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_a_bad_jobs_value_is_refused(tmp_path: Path, value: str) -> None:
    r = run_brk("index", "--blocks-dir", str(tmp_path), "--out", str(tmp_path / "out"), "--jobs", value,
                env=clean_env())
    assert r.code == 2
    assert f"argument --jobs: expected a whole number of processes, 1 or more (got '{value}')" in r.err
    assert "Traceback" not in r.err and not (tmp_path / "out").exists()
