"""A long `brk index` looks like one: progress on stderr, and SIGINT/SIGTERM stop at a committed height."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cairn_servers.brk.progress import Progress
from cairn_servers.brk.sample import write_sample

from ._run import clean_env, run_brk, vec_bytes

FIELDS = {"event", "stage", "height", "committed_height", "target_height", "blocks", "bytes", "elapsed_s", "blocks_per_s",
          "mb_per_s", "eta_s"}
TIP = 239


@pytest.fixture(scope="module")
def dense(tmp_path_factory: pytest.TempPathFactory) -> Path:
    blocks = tmp_path_factory.mktemp("dense") / "blocks"
    write_sample(blocks, TIP + 1, seed=21, txs_per_block=250, max_file_bytes=8_000_000)
    return blocks


@pytest.fixture(scope="module")
def uninterrupted(dense: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    out = tmp_path_factory.mktemp("clean") / "out"
    # One process: the passes follow the indexing, in turn (--jobs 2 is tests/brk/test_pipeline.py's).
    r = run_brk("index", "--blocks-dir", str(dense), "--out", str(out), "--format", "json", "--jobs", "1",
                env=clean_env(), timeout=300)
    assert r.code == 0, r.err
    lines = [json.loads(line) for line in r.err.splitlines()]
    assert all(set(line) - {"file", "files", "found"} == FIELDS for line in lines)  # the documented fields
    assert {line["event"] for line in lines} <= {"scan", "start", "progress", "stage", "commit", "done"}
    assert lines[-1]["event"] == "done" and lines[-1]["committed_height"] == lines[-1]["target_height"] == TIP
    assert lines[-1]["stage"] == "index" and lines[-1]["blocks"] == TIP + 1  # the last line: what was indexed
    # The default path's computed passes are reported too: each says it starts, heading for the tip.
    stages = [line for line in lines if line["event"] == "stage"]
    assert [line["stage"] for line in stages] == ["computed", "utxo", "cohorts", "addresses", "addrcohorts", "explorer",
                                                "mining"]
    assert all(line["target_height"] == TIP and line["height"] == -1 for line in stages)
    index_lines = lines[:lines.index(stages[0])]
    committed = [line["committed_height"] for line in index_lines]
    assert committed == sorted(committed) and any(line["event"] == "commit" for line in index_lines)
    for name in ("computed", "utxo", "cohorts", "addresses", "explorer", "mining"):  # within a stage heights only grow
        heights = [line["committed_height"] for line in lines[:-1] if line["stage"] == name]
        assert heights == sorted(heights)
    return vec_bytes(out)


@pytest.mark.parametrize(("signals", "code"), [([signal.SIGINT], 130), ([signal.SIGTERM], 0),
                                               ([signal.SIGINT, signal.SIGINT], 130)])
def test_a_signal_stops_at_a_committed_height_and_the_rerun_resumes(
        dense: Path, uninterrupted: dict[str, bytes], tmp_path: Path, signals: list[int], code: int) -> None:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "cairn_servers.brk.cli", "index", "--blocks-dir", str(dense), "--out", str(out),
           "--format", "json", "--commit-every", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env())
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # wait until a batch of dense blocks is committed, then interrupt
        seen.append(line)
        if line.startswith("{") and json.loads(line)["committed_height"] >= 110:
            break
    for sig in signals:
        proc.send_signal(sig)
        time.sleep(0.02)
    stdout, rest = proc.communicate(timeout=120)
    assert proc.returncode == code, rest
    status = run_brk("status", "--out", str(out), "--format", "json", env=clean_env())
    height = json.loads(status.out)["height"]
    assert 110 <= height < TIP, "the run ended before the signal landed"
    if len(signals) == 1:
        assert "brk: stopping at the next committed height (press Ctrl-C again to stop at once)\n" in rest
        assert rest.endswith(f"brk: stopped at height {height} (committed). Run the same command again to resume.\n")
        last = json.loads(rest.splitlines()[-2])
        assert (last["event"], last["committed_height"]) == ("stopped", height)
        result = json.loads(stdout)
        assert result["height"] == height and result["stopped"] == signal.Signals(signals[0]).name
    r = run_brk("index", "--blocks-dir", str(dense), "--out", str(out), "--format", "json", env=clean_env(),
                timeout=300)
    assert r.code == 0, r.err
    assert json.loads(r.out)["height"] == TIP
    resumed = vec_bytes(out)
    assert resumed.keys() == uninterrupted.keys()
    assert [k for k in resumed if resumed[k] != uninterrupted[k]] == []


def test_a_terminal_gets_a_progress_bar(dense: Path, tmp_path: Path) -> None:
    master, slave = pty.openpty()
    cmd = [sys.executable, "-m", "cairn_servers.brk.cli", "index", "--blocks-dir", str(dense), "--out", str(tmp_path / "o"),
           "--no-compute", "--format", "json", "--commit-every", "20"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave, env=clean_env())
    os.close(slave)
    screen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        screen += chunk
    os.close(master)
    assert proc.wait(60) == 0
    text = screen.decode()
    assert "\r\x1b[K" in text and "{" not in text  # redrawn in place, no JSON lines
    bars = [b for b in text.split("\r\x1b[K") if b.startswith("height ")]
    assert bars, text
    assert all(" blk/s  " in b and " MB/s  ETA " in b and f"/{TIP}" in b for b in bars)
    assert text.endswith("\r\x1b[K")  # the bar is cleared at the end


def test_json_lines_rate_limits_and_eta() -> None:
    now = [0.0]
    stream = io.StringIO()
    p = Progress("json", stream=stream, clock=lambda: now[0])
    p("start", height=99, target_height=199, blocks=0, bytes=0, total_bytes=10_000)
    for i in range(1, 51):  # 50 blocks of 100 bytes over 2.5 s
        now[0] = i * 0.05
        p("block", height=99 + i, blocks=i, bytes=100 * i)
    now[0] = 2.6
    p("commit", height=149, blocks=50, bytes=5000)
    now[0] = 2.7
    p("commit", height=150, blocks=51, bytes=5100)  # under a quarter second after the last line: skipped
    p.finish()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(x["event"], x["height"], x["committed_height"]) for x in lines] == [
        ("start", 99, 99), ("progress", 119, 99), ("progress", 139, 99), ("commit", 149, 149), ("done", 150, 150)]
    assert lines[3]["mb_per_s"] == 0.0 and lines[3]["blocks_per_s"] == pytest.approx(50 / 2.6, abs=0.05)
    assert lines[3]["eta_s"] == pytest.approx((10_000 - 5000) / (5000 / 2.6), abs=0.05)  # bytes left / byte rate
    assert lines[4]["elapsed_s"] == 2.7 and lines[4]["blocks"] == 51
    quiet = io.StringIO()
    none = Progress("none", stream=quiet)
    none("commit", height=1, blocks=1, bytes=1)
    none.finish()
    assert quiet.getvalue() == ""


def test_idle_watch_polls_are_silent() -> None:
    stream = io.StringIO()
    p = Progress("json", stream=stream, quiet_until_work=True)
    p("scan", file=0, files=3, found=0)
    p("start", height=5, target_height=5, blocks=0, bytes=0, total_bytes=0)
    p.finish()
    assert stream.getvalue() == ""  # nothing new: nothing said
    p("block", height=6, blocks=1, bytes=300)
    p.finish()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(x["event"], x["height"]) for x in lines] == [("progress", 6), ("done", 6)]


def test_computed_stages_have_their_own_rates_and_eta() -> None:
    now = [0.0]
    stream = io.StringIO()
    p = Progress("json", stream=stream, clock=lambda: now[0])
    p("start", height=-1, target_height=99, blocks=0, bytes=0, total_bytes=1000)
    now[0] = 1.0
    p("commit", height=99, blocks=100, bytes=1000)
    now[0] = 2.0
    p("stage", stage="utxo", height=-1, target_height=99, blocks=0, bytes=0, total_bytes=1000)
    now[0] = 6.0
    p("commit", stage="utxo", height=49, blocks=50, bytes=250)  # a quarter of the bytes in 4 s
    now[0] = 7.0
    p("stage", stage="addresses", height=-1, target_height=99, blocks=0, bytes=0, total_bytes=1000)
    p.finish()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(x["event"], x["stage"], x["height"]) for x in lines] == [
        ("start", "index", -1), ("commit", "index", 99), ("stage", "utxo", -1), ("commit", "utxo", 49),
        ("stage", "addresses", -1), ("done", "index", -1)]
    utxo = lines[3]
    assert utxo["blocks_per_s"] == pytest.approx(50 / 4) and utxo["eta_s"] == pytest.approx(750 / (250 / 4))
    assert utxo["committed_height"] == 49 and utxo["target_height"] == 99
    done = lines[-1]
    assert done["blocks"] == 100 and done["bytes"] == 1000 and done["elapsed_s"] == 7.0  # the indexing, whole job


def test_a_skipped_last_commit_is_said_before_the_next_stage() -> None:
    """An index that ends within a quarter second of its start line: the rate limit skips its commit,
    which is said before the first computed pass starts (where the index stopped)."""
    now = [0.0]
    stream = io.StringIO()
    p = Progress("json", stream=stream, clock=lambda: now[0])
    p("start", height=-1, target_height=99, blocks=0, bytes=0, total_bytes=1000)
    now[0] = 0.1
    p("commit", height=99, blocks=100, bytes=1000)  # skipped: 0.1 s after the start line
    now[0] = 0.15
    p("stage", stage="utxo", height=-1, target_height=99, blocks=0, bytes=0, total_bytes=1000)
    now[0] = 0.2
    p("stage", stage="addresses", height=-1, target_height=99, blocks=0, bytes=0, total_bytes=1000)
    p.finish()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(x["event"], x["stage"], x["committed_height"]) for x in lines] == [
        ("start", "index", -1), ("commit", "index", 99), ("stage", "utxo", -1), ("stage", "addresses", -1),
        ("done", "index", -1)]  # the last stage committed nothing here


def test_a_run_with_nothing_new_reports_the_tip_not_minus_one(tmp_path: Path) -> None:
    blocks, out = tmp_path / "blocks", tmp_path / "out"
    write_sample(blocks, 120, seed=5)
    args = ("index", "--blocks-dir", str(blocks), "--out", str(out), "--format", "json")
    first = run_brk(*args, env=clean_env())
    assert first.code == 0, first.err
    again = run_brk(*args, env=clean_env())
    assert again.code == 0, again.err
    lines = [json.loads(line) for line in again.err.splitlines()]
    assert lines and lines[-1]["event"] == "done"
    assert all(line["height"] == line["committed_height"] == line["target_height"] == 119 for line in lines)
    assert not any(line["event"] == "stage" for line in lines)  # nothing to compute: no stage


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_ctrl_c_during_the_computed_passes_stops_at_a_committed_chunk(dense: Path, tmp_path: Path, jobs: str) -> None:
    """SIGINT while a computed pass runs: it ends at its next committed chunk (exit 130, not after the
    whole pass); the rerun resumes every pass and ends byte-identical to an uninterrupted run. With
    ``--jobs 2`` the pass runs in a stage process: the parent tells it to stop."""
    from . import _golden

    env = dict(clean_env(), CAIRN_BRK_UTXO_CHUNK="8000")  # many small chunks
    clean = tmp_path / "clean"
    r = run_brk("index", "--blocks-dir", str(dense), "--out", str(clean), "--format", "json", env=env, timeout=300)
    assert r.code == 0, r.err
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "cairn_servers.brk.cli", "index", "--blocks-dir", str(dense), "--out", str(out),
           "--format", "json", "--progress", "json", "--jobs", jobs]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("{") and json.loads(line).get("stage") == "utxo":
            break
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
    assert proc.returncode == 130, rest
    assert "stopped at height" in rest and "Traceback" not in rest
    utxo = json.loads((out / "utxo" / "manifest.json").read_text())["meta"]
    assert utxo["height"] < TIP  # stopped within the pass, at a committed chunk
    if jobs == "1":
        assert not (out / "addresses" / "manifest.json").exists()  # the later passes did not start
    again = run_brk("index", "--blocks-dir", str(dense), "--out", str(out), "--format", "json", "--jobs", jobs,
                    env=env, timeout=300)
    assert again.code == 0, again.err
    assert _golden.checksums(out) == _golden.checksums(clean)
