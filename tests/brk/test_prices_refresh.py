"""Prices where they belong (issue 15, item 5): `brk index --watch` and `brk run` refresh daily prices in
the background from a price source (here a Kraken-shaped server on 127.0.0.1), never wait for it (a
source that accepts and never answers, or refuses), and stay silent when it fails."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from cairn_servers.brk.interface import Interface
from cairn_servers.brk.ops import OPS
from cairn_servers.brk.prices import Refresher
from cairn_servers.brk.vecs import read_manifest

from ..mcp._http import free_port, sse_messages
from ..mcp.test_conformance import wait_listening
from ._prices import closed_url, kraken, kraken_body, silent

SEED: dict[str, Any] = {"index": "date", "ids": "close", "from": -1}
# 2009-01-01 .. 2009-01-20: mainnet 0..589 ends on 2009-01-15, whose close is 2.15.
BODY = kraken_body(dt.date(2009, 1, 1), 20, lambda i: 2 + (i + 1) / 100)


def _until(check: Callable[[], Any], timeout: float, what: str, log: Callable[[], str] = lambda: "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"{what} within {timeout} s\n{log()}")


def _close(out: Path) -> Any:
    try:
        return OPS["get_vecs"].call(Interface(out), SEED).value()
    except Exception:  # noqa: BLE001 - not there yet (no store, or no prices)
        return None


def _watch(blocks: Path, out: Path, err: Path, url: str, interval: str) -> subprocess.Popen[str]:
    env = dict(os.environ, BRK_PRICES="kraken", BRK_PRICE_URL=url, BRK_PRICE_INTERVAL=interval)
    return subprocess.Popen([sys.executable, "-m", "cairn_servers.brk.cli", "index", "--watch", "--interval", "0.2",
                             "--blocks-dir", str(blocks), "--out", str(out), "--format", "jsonl",
                             "--progress", "none"],
                            stdout=subprocess.PIPE, stderr=err.open("w"), text=True, env=env)


def _node(mainnet_blocks: Path, tmp_path: Path) -> tuple[Path, bytes]:
    data = (mainnet_blocks / "blk00000.dat").read_bytes()
    blocks = tmp_path / "node"
    blocks.mkdir()
    (blocks / "blk00000.dat").write_bytes(data[:50_000])
    return blocks, data


def _noise(err: Path) -> list[str]:
    """stderr lines other than the stop messages SIGTERM produces."""
    return [line for line in err.read_text().splitlines() if not line.startswith("brk: stop")]


def _height(out: Path) -> int:
    try:
        return int(read_manifest(out)["meta"]["height"])
    except Exception:  # noqa: BLE001 - not indexed yet
        return -1


@pytest.mark.timeout(120)
def test_watch_fetches_prices_in_the_background(mainnet_blocks: Path, tmp_path: Path) -> None:
    blocks, data = _node(mainnet_blocks, tmp_path)
    out, err = tmp_path / "out", tmp_path / "err.log"
    with kraken(BODY) as (url, seen):
        proc = _watch(blocks, out, err, url, "3600")
        try:
            day = _until(lambda: _close(out) and _vecs(out, "date", "date"), 60, "a close", err.read_text)
            assert _close(out) == 2 + int(day[-2:]) / 100  # the last indexed day's close, as served
            with open(blocks / "blk00000.dat", "ab") as fh:  # the node appends the rest
                fh.write(data[50_000:])
            _until(lambda: _height(out) == 589, 30, "height 589", err.read_text)
            _until(lambda: _close(out) == 2.15, 30, "the close of 2009-01-15", err.read_text)
            # Realized values follow once the computer ran with the prices (the whole chain is priced).
            _until(lambda: _vecs(out, "realized_cap", "height") is not None, 30, "realized_cap", err.read_text)
            assert _close(out) == 2.15
            assert len(seen) == 1 and seen[0].startswith("/0/public/OHLC")  # once an interval (3600 s)
        finally:
            proc.terminate()
            proc.wait(timeout=15)
    assert proc.returncode == 0 and _noise(err) == []  # nothing else on stderr at the default level


def _vecs(out: Path, vec_id: str, index: str) -> Any:
    try:
        return OPS["get_vecs"].call(Interface(out), {"index": index, "ids": vec_id, "from": -1}).value()
    except Exception:  # noqa: BLE001
        return None


@pytest.mark.timeout(120)
@pytest.mark.parametrize("source", ["silent", "refused"])
def test_an_unreachable_source_never_blocks_indexing(mainnet_blocks: Path, tmp_path: Path, source: str) -> None:
    """A source that never answers (the fetch hangs until its 10 s timeout) or refuses at once (retried
    every 0.1 s here): blocks appended meanwhile are indexed within seconds, stderr stays empty, and the
    seed's query keeps naming the commands that provide prices."""
    blocks, data = _node(mainnet_blocks, tmp_path)
    out, err = tmp_path / "out", tmp_path / "err.log"
    with silent() as hanging:
        url = hanging if source == "silent" else closed_url()
        proc = _watch(blocks, out, err, url, "0.1")
        try:
            assert proc.stdout is not None
            first = json.loads(proc.stdout.readline())
            assert 0 < first["height"] < 589
            started = time.monotonic()
            with open(blocks / "blk00000.dat", "ab") as fh:
                fh.write(data[50_000:])
            second = json.loads(proc.stdout.readline())
            assert second["height"] == 589
            assert time.monotonic() - started < 8  # well inside the hanging fetch's 10 s timeout
            time.sleep(1.0)  # more refresh attempts (refused: ~10), all silent
            with pytest.raises(Exception, match=r"brk price import FILE\.csv.*brk price fetch.*brk run"):
                OPS["get_vecs"].call(Interface(out), SEED)
        finally:
            proc.terminate()
            proc.wait(timeout=15)
    assert proc.returncode == 0 and _noise(err) == [], err.read_text()


def test_refresher_attempts_once_an_interval_and_keeps_stored_prices(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    r = Refresher(out, source="kraken", url=closed_url(), interval=3600, timeout=2)
    assert not r.poke() and r.attempts == 0  # nothing indexed yet: not tried (and not counted as tried)
    (out / "manifest.json").write_text("{}")
    assert r.poke() and not r.poke()  # one at a time, and then not before the interval
    r.join(10)
    assert r.attempts == 1 and r.updates == 0 and r.last_error and "127.0.0.1" in r.last_error
    assert not r.poke()
    assert not Refresher(out, source="off").poke()
    assert not (out / "prices").exists()  # nothing written on failure


@pytest.mark.timeout(120)
def test_run_fetches_prices_and_serves_them(mainnet_blocks: Path, tmp_path: Path) -> None:
    """`brk run`: the seed's query answers over HTTP and MCP once the background fetch is in (logged at
    info level), while the server and the follower go on."""
    out = tmp_path / "out"
    port = free_port()
    log = tmp_path / "run.log"
    with kraken(BODY) as (url, seen):
        env = dict(os.environ, BRK_PRICES="kraken", BRK_PRICE_URL=url, BRK_PRICE_INTERVAL="3600")
        cmd = [sys.executable, "-m", "cairn_servers.brk.cli", "run", "--blocks-dir", str(mainnet_blocks), "--out", str(out),
               "--bind", f"127.0.0.1:{port}", "--interval", "0.2", "--log-level", "info"]
        with log.open("wb") as fh:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT, env=env)
        try:
            wait_listening(port, proc, log, timeout=60)
            base = f"http://127.0.0.1:{port}"
            with httpx.Client(base_url=base, timeout=10) as c:
                def answered() -> Any:
                    r = c.get("/api/vecs/query", params=SEED)
                    return r.json() if r.status_code == 200 else None

                assert _until(answered, 30, "close over HTTP", log.read_text) == 2.15
                body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                        "params": {"name": "get_vecs", "arguments": SEED}}
                r = c.post("/mcp", json=body, headers={"Accept": "application/json, text/event-stream",
                                                       "MCP-Protocol-Version": "2025-06-18"})
                assert r.status_code == 200, r.text
                if r.headers["content-type"].startswith("application/json"):
                    reply = r.json()
                else:
                    reply = next(m for m in sse_messages(r.text) if m.get("id") == 1)
                result = reply["result"]
                assert not result.get("isError") and json.loads(result["content"][0]["text"]) == 2.15
            assert len(seen) == 1
        finally:
            proc.terminate()
            proc.wait(timeout=15)
    text = log.read_text()
    assert proc.returncode == 0 and "prices refreshed from kraken: 13 day(s) changed" in text, text
    assert "Traceback" not in text
