"""A misbehaving embedding endpoint behind `ctx embed pending` (OpenAI-compatible provider): dropped
replies, 10 GB replies, garbage, wrong vector counts, redirect loops, silence. Each time: a clear
error and exit code, every vector already stored kept, documents untouched, and the next run with a
well-behaved endpoint embeds everything.
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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ._servers import socket_server

pytestmark = pytest.mark.timeout(180)
TEN_GB = 10 * 1024**3
DIMS = 8


@dataclass
class Endpoint:
    mode: str = "good"
    good_requests: int = 0
    port: int = 0
    sent: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def reply(self, texts: list[str]) -> bytes:
        rows = []
        for i, text in enumerate(texts):
            digest = hashlib.sha256(text.encode()).digest()
            rows.append({"index": i, "embedding": [b / 255 + 0.01 for b in digest[:DIMS]]})
        return json.dumps({"data": rows}).encode()

    def handle(self, conn: socket.socket) -> None:
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, body = data.split(b"\r\n\r\n", 1)
            length = int([ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")][0])
            while len(body) < length:
                body += conn.recv(65536)
            texts = json.loads(body)["input"]
            mode = "good" if self.good_requests > 0 else self.mode
            self.good_requests -= 1
            ok = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            good = self.reply(texts)
            if mode == "good":
                conn.sendall(ok + b"Content-Length: %d\r\n\r\n" % len(good) + good)
            elif mode == "drop":
                conn.sendall(ok + b"Content-Length: %d\r\n\r\n" % (len(good) + 100) + good[:20])
            elif mode == "huge":
                conn.sendall(ok + b"Transfer-Encoding: chunked\r\n\r\n")
                frame = b"%x\r\n%s\r\n" % (65536, b"1" * 65536)
                while self.sent < TEN_GB and not self.stop.is_set():
                    conn.sendall(frame)
                    self.sent += 65536
            elif mode == "garbage":
                conn.sendall(ok + b"Content-Length: 9\r\n\r\n<b>no</b>")
            elif mode == "wrong-count":
                short = self.reply(texts[:-1])
                conn.sendall(ok + b"Content-Length: %d\r\n\r\n" % len(short) + short)
            elif mode == "redirect-loop":
                conn.sendall(b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /v1/embeddings\r\nContent-Length: 0\r\n"
                             b"Connection: close\r\n\r\n")
            elif mode == "silent":
                self.stop.wait(10)
            elif mode == "error-500":
                msg = b'{"error": "overloaded"}'
                conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                             % len(msg) + msg)
        except OSError:
            pass
        finally:
            conn.close()


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    with socket_server(Endpoint()) as state:
        yield state


CASES = {  # mode -> (exit code, words in the error)
    "drop": (5, "could not be reached"),
    "huge": (9, "more than 128 MiB"),
    "garbage": (5, "invalid JSON"),
    "wrong-count": (5, "returned 7 vectors for 8 texts"),
    "redirect-loop": (5, "answered HTTP 307"),
    "silent": (6, "did not answer within"),
    "error-500": (5, "answered HTTP 500"),
}


def _stats(cfg: Path) -> dict[str, object]:
    """`ctx stats` in-process (the command's own numbers, without paying a process start each time)."""
    from dataclasses import asdict

    from cairn_servers.ctx.service import Service

    svc = Service.from_config(cfg)
    try:
        return asdict(svc.stats())
    finally:
        svc.close()


def _service_run(cfg: Path, what: str) -> str | None:
    """`ctx sync all` / `ctx embed pending` in-process; returns the embedding error, if any."""
    from cairn_servers.ctx.service import Service

    svc = Service.from_config(cfg)
    try:
        report = svc.sync("all").embedding if what == "sync" else svc.embed_pending()
        return report.error if report is not None else None
    finally:
        svc.close()


@pytest.mark.usefixtures("ctx_backend")  # the vectors kept and resumed, on SQLite and on PostgreSQL
@pytest.mark.parametrize("mode", list(CASES))
def test_misbehaving_embedding_endpoint(mode: str, endpoint: Endpoint, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(40):
        (docs / f"d{i:02d}.md").write_text(f"# Doc {i}\n\nembedtoken{i} text about topic {i % 7}.\n")
    cfg = tmp_path / "ctx.toml"
    cfg.write_text(f'[db]\npath = "kb.sqlite"\n[embedding]\nprovider = "openai"\nmodel = "m"\ndims = {DIMS}\n'
                   f'batch_size = 8\ntimeout = 1\nurl = "http://127.0.0.1:{endpoint.port}/v1"\n'
                   f'[connectors.filesystem.docs]\nroot = "{docs}"\n')
    env = {**os.environ, "CTX_OUTPUT_FORMAT": "json"}
    _service_run(cfg, "sync")
    assert _stats(cfg)["vectors"] == 40
    for i in range(40, 80):
        (docs / f"d{i:02d}.md").write_text(f"# Doc {i}\n\nembedtoken{i} text about topic {i % 7}.\n")
    endpoint.mode, endpoint.good_requests = mode, 2  # two batches answer, then the endpoint misbehaves
    _service_run(cfg, "sync")  # reports the embedding error; the documents are synced
    after_sync = _stats(cfg)
    assert after_sync["documents"] == 80  # documents never depend on the embedding endpoint
    assert after_sync["vectors"] == 40 and after_sync["pending_embeddings"] == 40, after_sync

    code, words = CASES[mode]
    endpoint.sent = 0
    started = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "cairn_servers.ctx.cli", "embed", "pending", "--config", str(cfg)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == code, (res.returncode, res.stderr)
    assert "ctx: error: " in res.stderr and words in res.stderr and "Traceback" not in res.stderr, res.stderr
    if mode == "huge":
        assert endpoint.sent <= 2 * (128 << 20) + (16 << 20), endpoint.sent
    if mode == "silent":
        assert time.monotonic() - started < 10
    kept = _stats(cfg)
    assert kept["vectors"] == 40 and kept["documents"] == 80, kept  # the stored vectors are kept

    endpoint.mode = "good"
    assert _service_run(cfg, "embed") is None
    final = _stats(cfg)
    assert final["pending_embeddings"] == 0 and final["vectors"] == final["distinct_chunks"] == 80, final
