"""The brk command line: real commands, exit codes, exact messages, and a light import path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cairn_servers.brk.cli import main


def test_sample_index_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sample", "--blocks", "120", "--out", str(tmp_path / "b"), "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary == {"blocks": 120, "transactions": summary["transactions"], "files": 1, "bytes": _size(tmp_path / "b")}
    assert main(["index", "--blocks-dir", str(tmp_path / "b"), "--out", str(tmp_path / "o"), "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["network"], result["height"], result["indexed_blocks"]) == ("regtest", 119, 120)
    assert main(["status", "--out", str(tmp_path / "o"), "--format", "json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["height"] == 119 and status["vecs"]["height_to_blockhash"] == 120
    assert status["vecs"]["txindex_to_txid"] == summary["transactions"]
    assert status["tip"] == result["tip"]


def _size(blocks: Path) -> int:
    data = (blocks / "blk00000.dat").read_bytes()
    return len(data) - 8 * 120


def test_errors_state_fact_and_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["index", "--blocks-dir", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 3
    assert capsys.readouterr().err == (f"brk: error: Blocks directory {tmp_path / 'nope'} does not exist. "
                                       f"Point --blocks-dir at a node's blocks/ folder.\n")
    assert main(["status", "--out", str(tmp_path / "empty")]) == 7
    assert capsys.readouterr().err == (f"brk: error: {tmp_path / 'empty'} has no manifest.json. "
                                       f"Run `brk index --out {tmp_path / 'empty'}` first.\n")


def test_help_does_not_import_numpy_or_the_parser() -> None:
    code = ("import sys; from cairn_servers.brk.cli import main; "
            "import contextlib, io\n"
            "with contextlib.redirect_stdout(io.StringIO()): main([])\n"
            "print(sorted(m for m in ('numpy', 'cairn_servers.brk.blocks.parser', 'cairn_servers.brk.indexer') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_watch_picks_up_appended_blocks(mainnet_blocks: Path, tmp_path: Path) -> None:
    import time

    from cairn_servers.brk.vecs import read_manifest

    data = (mainnet_blocks / "blk00000.dat").read_bytes()
    blocks = tmp_path / "node"
    blocks.mkdir()
    (blocks / "blk00000.dat").write_bytes(data[:50_000])
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "cairn_servers.brk.cli", "index", "--watch", "--interval", "0.2",
                             "--blocks-dir", str(blocks), "--out", str(out), "--format", "jsonl"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert 0 < first["height"] < 589
        with open(blocks / "blk00000.dat", "ab") as fh:  # the node appends the rest
            fh.write(data[50_000:])
        second = json.loads(proc.stdout.readline())
        assert second["height"] == 589 and second["indexed_blocks"] == 589 - first["height"]
        deadline = time.monotonic() + 10
        while read_manifest(out)["meta"]["height"] != 589 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert read_manifest(out)["meta"]["height"] == 589
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_bundled_mainnet_sample(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sample", "--mainnet", "--out", str(tmp_path / "b"), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["blocks"] == 590
    assert main(["index", "--blocks-dir", str(tmp_path / "b"), "--out", str(tmp_path / "o"), "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["height"] == 589
    assert result["tip"] == "00000000b96305605f1eb5ab800024ff3fa260deedf6005e1e3987daa11d3935"


@pytest.mark.parametrize("name", ["BRK_OUTPUT_FORMAT", "BRK_FORMAT"])
def test_the_format_variable_and_its_older_name(name: str, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    for var in ("BRK_OUTPUT_FORMAT", "BRK_FORMAT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(name, "csv")
    assert main(["indexes"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].count(",") >= 1 and not out.lstrip().startswith("{")
