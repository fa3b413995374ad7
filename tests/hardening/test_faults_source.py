"""A misbehaving source server against `blz add` / `blz update`: dropped connections, lying
Content-Length, 10 GB bodies (plain and gzip bombs), redirect loops, redirects to file://, drip feeds,
garbage instead of HTTP. Each time: a clear error with its exit code, the installed source intact
(same bytes, index valid, no stray files), and the next update succeeds.

The server is a raw socket server on 127.0.0.1 so it can break HTTP in ways http.server will not.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ._servers import socket_server

GOOD = b"# Lib\n\n## Install\n\nnpm install lib\n\n## Usage\n\nCall lib() to start.\n"
TEN_GB = 10 * 1024**3
CHUNK = b"x" * 65536


@dataclass
class BadServer:
    """Serves ``mode`` for every request and counts body bytes it managed to send."""

    mode: str = "good"
    body: bytes = GOOD
    port: int = 0
    sent: int = 0
    requests: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def url(self, path: str = "/llms.txt") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def handle(self, conn: socket.socket) -> None:
        try:
            req = b""
            while b"\r\n\r\n" not in req:
                got = conn.recv(4096)
                if not got:
                    return
                req += got
            self.requests += 1
            path = req.split(b" ", 2)[1].decode()
            getattr(self, "_" + self.mode.replace("-", "_"))(conn, path)
        except OSError:
            pass  # the client hung up: that is what a size cap or timeout does
        finally:
            conn.close()

    def _send(self, conn: socket.socket, data: bytes) -> None:
        conn.sendall(data)
        self.sent += len(data)

    def _head(self, conn: socket.socket, extra: str) -> None:
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n{extra}Connection: close\r\n\r\n".encode())

    def _good(self, conn: socket.socket, path: str) -> None:
        self._head(conn, f"Content-Length: {len(self.body)}\r\n")
        self._send(conn, self.body)

    def _drop_mid_body(self, conn: socket.socket, path: str) -> None:
        self._head(conn, "Content-Length: 200000\r\n")
        self._send(conn, self.body + b"y" * 5000)
        conn.shutdown(socket.SHUT_RDWR)

    def _chunked_drop(self, conn: socket.socket, path: str) -> None:
        self._head(conn, "Transfer-Encoding: chunked\r\n")
        self._send(conn, b"%x\r\n%s\r\n" % (len(self.body), self.body))
        conn.shutdown(socket.SHUT_RDWR)  # no terminating 0-length chunk

    def _overlong(self, conn: socket.socket, path: str) -> None:
        # Declares 10 bytes, sends the whole body: only the declared 10 bytes are a response.
        self._head(conn, "Content-Length: 10\r\n")
        self._send(conn, self.body + b"\n## Smuggled\n\nextra\n")

    def _huge_declared(self, conn: socket.socket, path: str) -> None:
        self._head(conn, f"Content-Length: {TEN_GB}\r\n")
        self._stream(conn)

    def _huge_chunked(self, conn: socket.socket, path: str) -> None:
        self._head(conn, "Transfer-Encoding: chunked\r\n")
        frame = b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK)
        while self.sent < TEN_GB and not self.stop.is_set():
            self._send(conn, frame)

    def _huge_undeclared(self, conn: socket.socket, path: str) -> None:
        self._head(conn, "")  # no length at all: the body runs until the connection closes
        self._stream(conn)

    def _gzip_bomb(self, conn: socket.socket, path: str) -> None:
        # 10 GB of text once inflated, generated on the fly: a few MB on the wire.
        self._head(conn, "Content-Encoding: gzip\r\n")
        comp = zlib.compressobj(9, zlib.DEFLATED, 31)
        block = b"# bomb\n" + b"a" * (1 << 20)
        inflated = 0
        while inflated < TEN_GB and not self.stop.is_set():
            out = comp.compress(block)
            inflated += len(block)
            if out:
                self._send(conn, out)

    def _stream(self, conn: socket.socket) -> None:
        while self.sent < TEN_GB and not self.stop.is_set():
            self._send(conn, CHUNK)

    def _redirect_loop(self, conn: socket.socket, path: str) -> None:
        nxt = "/b" if path != "/b" else "/llms.txt"
        conn.sendall(f"HTTP/1.1 302 Found\r\nLocation: {nxt}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode())

    def _redirect_file(self, conn: socket.socket, path: str) -> None:
        conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: file:///etc/passwd\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    def _drip(self, conn: socket.socket, path: str) -> None:
        self._head(conn, f"Content-Length: {len(self.body) * 100}\r\n")
        for _ in range(len(self.body) * 100):
            if self.stop.is_set():
                return
            self._send(conn, b"z")
            time.sleep(0.1)

    def _garbage(self, conn: socket.socket, path: str) -> None:
        conn.sendall(b"\x16\x03\x01 this is not HTTP at all\r\n\r\n" + os.urandom(256))


@pytest.fixture
def bad_server() -> Iterator[BadServer]:
    with socket_server(BadServer()) as state:
        yield state


def _blz(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cairn_servers.blz.cli", *args], env=env, capture_output=True,
                          text=True, timeout=120)


# mode -> (expected exit code, words the error must contain, extra CLI flags)
CASES: dict[str, tuple[int, str, list[str]]] = {
    "drop-mid-body": (5, "Cannot fetch", []),
    "chunked-drop": (5, "Cannot fetch", []),
    "huge-declared": (9, "over the 1.0 MiB download cap", ["--max-bytes", str(1 << 20)]),
    "huge-chunked": (9, "more than the 1.0 MiB download cap", ["--max-bytes", str(1 << 20)]),
    "huge-undeclared": (9, "more than the 64.0 MiB download cap", []),  # the default cap
    "gzip-bomb": (9, "more than the 1.0 MiB download cap", ["--max-bytes", str(1 << 20)]),
    "redirect-loop": (5, "redirected more than 5 times", []),
    "redirect-file": (5, "Cannot fetch", []),
    "drip": (6, "took longer than 0.5 s", ["--timeout", "0.5"]),
    "garbage": (5, "Cannot fetch", []),
}


def _installed(env: dict[str, str]) -> dict[str, str]:
    listed = _blz(env, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    out = {}
    for s in json.loads(listed.stdout)["sources"]:
        shown = _blz(env, "inspect", s["alias"], "--json")
        out[s["alias"]] = json.loads(shown.stdout)["metadata"]["sha256"]
    return out


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", list(CASES))
def test_bad_source_server(mode: str, bad_server: BadServer, tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {**os.environ, "BLZ_DATA_DIR": str(data), "CAIRN_RAISE_ERRORS": ""}
    added = _blz(env, "add", "lib", bad_server.url(), "--exact", "--json")
    assert added.returncode == 0, added.stderr
    before = _installed(env)
    assert before == {"lib": hashlib.sha256(GOOD).hexdigest()}

    code, words, flags = CASES[mode]
    bad_server.mode = mode
    bad_server.body = GOOD + b"\n## Changed\n\nnew text\n"
    bad_server.sent = 0
    started = time.monotonic()
    upd = _blz(env, "update", "lib", *flags)
    new = _blz(env, "add", "other", bad_server.url(), "--exact", *flags)
    elapsed = time.monotonic() - started
    for res in (upd, new):
        assert res.returncode == code, (res.returncode, res.stderr)
        # Piped, blz reports progress as JSON lines on stderr; the rest is the one error line.
        err = "".join(line for line in res.stderr.splitlines(True) if not line.startswith('{"event": "progress"'))
        assert err.startswith("blz: error: ") and words in err, res.stderr
        assert "Traceback" not in res.stderr and res.stdout == ""
    if mode.startswith("huge") or mode == "gzip-bomb":
        # Streamed, never buffered whole: the client hung up soon after the cap (socket buffers aside).
        cap = (64 << 20) if mode == "huge-undeclared" else (1 << 20)
        assert bad_server.sent <= 2 * (cap + (8 << 20)), bad_server.sent
    if mode == "drip":
        assert elapsed < 6, elapsed  # two runs of a 0.5 s budget, not 100 s of drip

    # The previous state is intact: same bytes, index valid, nothing half-written left behind.
    assert _installed(env) == before
    val = _blz(env, "validate", "--json")
    assert val.returncode == 0 and json.loads(val.stdout)["ok"], val.stdout
    assert sorted(p.name for p in (data / "sources").iterdir()) == ["lib"]
    assert [p.name for p in (data / "sources" / "lib").iterdir()] == [f"{before['lib'][:16]}.txt"]
    hit = _blz(env, "search", "npm", "--json")
    assert json.loads(hit.stdout)["hits"][0]["alias"] == "lib"

    # The next run succeeds once the server behaves.
    bad_server.mode = "good"
    again = _blz(env, "update", "lib", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["results"][0]["status"] == "updated"
    assert _installed(env) == {"lib": hashlib.sha256(bad_server.body).hexdigest()}


def test_overlong_body_is_cut_at_the_declared_length(bad_server: BadServer, tmp_path: Path) -> None:
    """A server that sends more than its Content-Length: the response is what it declared, never more
    (the surplus is not read as document text)."""
    env = {**os.environ, "BLZ_DATA_DIR": str(tmp_path / "data")}
    bad_server.mode = "overlong"
    res = _blz(env, "add", "lib", bad_server.url(), "--exact", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["bytes"] == 10
    got = _blz(env, "get", "lib:1-50", "--json")
    assert "Smuggled" not in got.stdout and "npm" not in got.stdout
