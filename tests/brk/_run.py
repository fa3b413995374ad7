"""Run ``brk`` as a real subprocess and measure it (exit code, output, peak RSS, wall time)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cairn_servers.core.heap import memory_kib


@dataclass
class Run:
    code: int
    out: str
    err: str
    peak_mb: float
    seconds: float


def run_brk(*args: str, env: dict[str, str] | None = None, timeout: float = 120, **popen: Any) -> Run:
    """``python -m cairn_servers.brk.cli ARGS`` with stdout/stderr to files; peak RSS from ``wait4``."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "cairn_servers.brk.cli", *args], stdout=out, stderr=err,
                                env=env, **popen)
        deadline = t0 + timeout
        hwm_kb = 0
        while True:
            hwm_kb = max(hwm_kb, memory_kib(proc.pid, "VmHWM"))
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                raise AssertionError(f"brk {' '.join(args)} ran past {timeout} s")
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - t0
        out.seek(0)
        err.seek(0)
        # VmHWM, not ru_maxrss (see memory_kib); the last 20 ms of a run can be missed, not its peak before.
        peak_kb = hwm_kb or usage.ru_maxrss
        return Run(proc.returncode, out.read(), err.read(), peak_kb / 1024, seconds)


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without brk's directory variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("BRK_BLOCKS_DIR", "BRK_DATA_DIR", "APPDATA",
                                                             "LOCALAPPDATA")}
    env.update(extra)
    return env


def vec_bytes(out: Path) -> dict[str, bytes]:
    """Every file of a store (raw vecs, computed vecs, manifests), to compare two runs byte for byte."""
    # Crash-recovery aids depend on where earlier runs committed (the analytics' state checkpoints and
    # undo rows) and engine files on their history: compared by contents below, not file by file.
    history = ("txindex", "utxo/state", "cohorts/state", "addresses/undo", "addresses/index", "addresses/balance.bin",
               "addresses/scripthash", "explorer/index", "explorer/spender.bin", "addrcohorts/undo", "addrcohorts/state")
    files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
             if p.is_file() and not str(p.relative_to(out)).startswith(history)}
    # The transaction index is a RocksDB directory whose files (logs, table numbers) differ from run to
    # run; its contents are what must match: the transaction count and every key with its txindexes.
    if (out / "txindex").is_dir():
        from cairn_servers.brk.txindex import TxIndex

        txi = TxIndex(out / "txindex")
        try:
            files["txindex (contents)"] = repr((txi.count, sorted(txi.entries().items()))).encode()
        finally:
            txi.close()
    _analytics_state(out, files)
    return files


def _analytics_state(out: Path, files: dict[str, bytes]) -> None:
    """The analytics passes' state: the tip checkpoint, the live balances and the address index."""
    import json

    utxo = out / "utxo" / "manifest.json"
    if utxo.exists():
        tip = json.loads(utxo.read_text())["meta"].get("state", 0)
        state = out / "utxo" / "state" / f"unspent-{tip}.bin"
        files["utxo state (tip)"] = state.read_bytes() if state.exists() else b""
    cohorts = out / "cohorts" / "manifest.json"
    if cohorts.exists():
        tip = json.loads(cohorts.read_text())["meta"].get("state", 0)
        state = out / "cohorts" / "state" / f"cohorts-{tip}.bin"
        files["cohorts state (tip)"] = state.read_bytes() if state.exists() else b""
    manifest = out / "addresses" / "manifest.json"
    if manifest.exists():
        count = json.loads(manifest.read_text())["vecs"]["addressindex_to_keyhash"]["length"]
        files["address balances"] = (out / "addresses" / "balance.bin").read_bytes()[:8 * count]
        from rocksdict import Options, Rdict

        db = Rdict(str(out / "addresses" / "index"), Options(raw_mode=True))
        try:
            live = sorted((k, v) for k, v in db.items() if int.from_bytes(v, "little") < count)
        finally:
            db.close()
        files["address index (contents)"] = repr(live).encode()
        if (out / "addresses" / "scripthash").is_dir():
            keys = {k for k, _ in live}
            db = Rdict(str(out / "addresses" / "scripthash"), Options(raw_mode=True))
            try:  # entries naming an address the index holds (others are left by an interrupted chunk)
                files["script hashes (contents)"] = repr(sorted((k, v) for k, v in db.items() if v in keys)).encode()
            finally:
                db.close()
    explorer = out / "explorer" / "manifest.json"
    if explorer.exists():
        from rocksdict import Options, Rdict

        meta = json.loads(explorer.read_text())["meta"]
        files["spenders"] = (out / "explorer" / "spender.bin").read_bytes()[:8 * int(meta.get("outputs", 0))]
        db = Rdict(str(out / "explorer" / "index"), Options(raw_mode=True))
        try:  # the committed entries (an interrupted chunk may leave later ones, which readers skip)
            items = [(bytes(k), bytes(v)) for k, v in db.items()]  # type: ignore[arg-type]
            files["explorer index (contents)"] = repr(sorted(
                (k, v) for k, v in items
                if (k[:1] == b"H" and int.from_bytes(k[5:], "big") < int(meta.get("txs", 0)))
                or (k[:1] == b"B" and int.from_bytes(v, "little") <= int(meta.get("height", -1))))).encode()
        finally:
            db.close()
