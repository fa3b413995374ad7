"""A misbehaving bitcoind behind `brk fetch` (brk's only network source): dropped replies, lying
Content-Length, 10 GB replies, garbage, JSON that is not JSON-RPC, wrong hashes, blocks that do not
match their hash, redirect loops, a file:// RPC URL. Each time: a clear error and no traceback, the
mirrored files still a consistent prefix, and the next fetch from a well-behaved node ends byte for
byte equal to a clean mirror.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ._servers import socket_server

pytestmark = pytest.mark.timeout(180)
TEN_GB = 10 * 1024**3


def _records(blk: Path) -> list[bytes]:
    data, out, p = blk.read_bytes(), [], 0
    while p < len(data):
        n = int.from_bytes(data[p + 4:p + 8], "little")
        out.append(data[p + 8:p + 8 + n])
        p += 8 + n
    return out


def _hash(raw: bytes) -> str:
    return hashlib.sha256(hashlib.sha256(raw[:80]).digest()).digest()[::-1].hex()


@dataclass
class Node:
    """A raw-socket bitcoind: correct for ``good_requests`` requests, then ``mode``."""

    chain: list[bytes]
    mode: str = "good"
    good_requests: int = 0
    port: int = 0
    sent: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def answer(self, req: dict[str, object]) -> bytes:
        by_hash = {_hash(b): b for b in self.chain}
        method, params = req["method"], req["params"]
        assert isinstance(params, list)
        result: object = None
        if method == "getblockcount":
            result = len(self.chain) - 1
        elif method == "getblockhash":
            result = _hash(self.chain[params[0]])
        elif method == "getblock":
            result = by_hash[params[0]].hex()
        return json.dumps({"result": result, "error": None, "id": req["id"]}).encode()

    def handle(self, conn: socket.socket) -> None:
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, body = data.split(b"\r\n\r\n", 1)
            length = int([ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")][0])
            while len(body) < length:
                body += conn.recv(65536)
            req = json.loads(body)
            reply = self.answer(req)
            mode = "good" if self.good_requests > 0 else self.mode
            self.good_requests -= 1
            ok = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            if mode == "good":
                conn.sendall(ok + b"Content-Length: %d\r\n\r\n" % len(reply) + reply)
            elif mode == "drop":
                conn.sendall(ok + b"Content-Length: %d\r\n\r\n" % (len(reply) + 500) + reply[: len(reply) // 2])
            elif mode == "short-length":  # declares less than it sends: the JSON is cut
                conn.sendall(ok + b"Content-Length: %d\r\n\r\n" % (len(reply) // 2) + reply)
            elif mode == "huge":
                conn.sendall(ok + b"Content-Length: %d\r\n\r\n" % TEN_GB + b'{"result": "')
                chunk = b"00" * 32768
                while self.sent < TEN_GB and not self.stop.is_set():
                    conn.sendall(chunk)
                    self.sent += len(chunk)
            elif mode == "garbage":
                conn.sendall(ok + b"Content-Length: 12\r\n\r\n<html>nope</")
            elif mode == "not-rpc":
                conn.sendall(ok + b"Content-Length: 9\r\n\r\n[1, 2, 3]")
            elif mode in ("bad-hash", "bad-block", "bad-count"):
                wrong: Any = {"bad-hash": {"result": "zz" * 32}, "bad-count": {"result": "many"},
                                            "bad-block": {"result": "00" * 120}}[mode]
                if req["method"] != {"bad-hash": "getblockhash", "bad-block": "getblock",
                                     "bad-count": "getblockcount"}[mode]:
                    wrong = json.loads(reply)
                text = json.dumps({**wrong, "error": None, "id": req["id"]}).encode()
                conn.sendall(ok + b"Content-Length: %d\r\n\r\n" % len(text) + text)
            elif mode == "redirect-loop":
                conn.sendall(b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /again\r\nContent-Length: 0\r\n"
                             b"Connection: close\r\n\r\n")
        except OSError:
            pass
        finally:
            conn.close()


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    from cairn_servers.brk.sample import write_sample

    blocks = tmp_path_factory.mktemp("rpc-chain")
    write_sample(blocks, 150, seed=8)
    return [r for f in sorted(blocks.glob("blk*.dat")) for r in _records(f)]


@pytest.fixture
def node(chain: list[bytes]) -> Iterator[Node]:
    with socket_server(Node(chain)) as state:
        yield state


def _fetch(url: str, blocks: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BRK_RPC_PASSWORD": "pw"}
    return subprocess.run([sys.executable, "-m", "cairn_servers.brk.cli", "fetch", "--rpc-url", url, "--rpc-user", "u",
                           "--blocks-dir", str(blocks), "--network", "regtest", "--timeout", "5", "--format", "json",
                           *extra], env=env, capture_output=True, text=True, timeout=120)


CASES = {  # mode -> (exit code, words in the error)
    "drop": (5, "broke off"),
    "short-length": (5, "not JSON"),
    "huge": (9, "over 64 MiB"),
    "garbage": (5, "not JSON"),
    "not-rpc": (5, "not a JSON-RPC reply"),
    "bad-hash": (5, "not a block hash"),
    "bad-block": (5, "a block whose hash is"),
    "bad-count": (5, "not a height"),
    "redirect-loop": (5, "answered HTTP 307"),
}


@pytest.mark.parametrize("mode", list(CASES))
def test_misbehaving_bitcoind(mode: str, node: Node, chain: list[bytes], tmp_path: Path) -> None:
    blocks = tmp_path / "blocks"
    first = _fetch(node.url, blocks, "--max-blocks", "40")
    assert first.returncode == 0, first.stderr
    before = (blocks / "mirror.json").read_bytes()

    # Fail in the middle of the next run (getblockcount is its second request).
    node.mode, node.good_requests, node.sent = mode, 1 if mode == "bad-count" else 25, 0
    code, words = CASES[mode]
    bad = _fetch(node.url, blocks)
    assert bad.returncode == code, (bad.returncode, bad.stderr)
    assert bad.stderr.startswith("brk: error: ") and words in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    if mode == "huge":
        assert node.sent <= 2 * (64 << 20) + (16 << 20), node.sent  # read in pieces, stopped at the cap
    state = json.loads((blocks / "mirror.json").read_text())
    assert (blocks / "mirror.json").read_bytes() == before or len(state["hashes"]) >= 40
    assert state["hashes"] == [_hash(b) for b in chain[: len(state["hashes"])]]  # a consistent prefix

    node.mode = "good"
    again = _fetch(node.url, blocks)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["height"] == len(chain) - 1
    mirrored = [r for f in sorted(blocks.glob("blk*.dat")) for r in _records(f)]
    assert mirrored == chain


def test_rpc_url_must_be_http(tmp_path: Path) -> None:
    for url in ["file:///etc/passwd", "ftp://127.0.0.1/", "data:,{}", "/etc/passwd"]:
        res = _fetch(url, tmp_path / "b")
        assert res.returncode == 2 and "is not an http(s) URL" in res.stderr, (url, res.stderr)
    assert not (tmp_path / "b").exists()


def test_credentials_never_shown(node: Node, tmp_path: Path) -> None:
    node.mode = "garbage"
    env = {**os.environ, "BRK_RPC_PASSWORD": "hunter2-rpc"}
    res = subprocess.run([sys.executable, "-m", "cairn_servers.brk.cli", "fetch", "--rpc-url", node.url, "--rpc-user", "u",
                          "--blocks-dir", str(tmp_path / "b"), "--timeout", "5"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 5 and "hunter2-rpc" not in res.stdout + res.stderr
    assert base64.b64encode(b"u:hunter2-rpc").decode() not in res.stdout + res.stderr
