"""cairn_servers.core.fetch against a real HTTP server on 127.0.0.1: caps, timeouts, redirects, 304s."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cairn_servers.core import fetch
from cairn_servers.core.errors import InvalidInput, NetworkError, NotFound, Timeout, TooLarge

BODY = b"hello world\n" * 100


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/ok":
            if self.headers.get("If-None-Match") == '"v1"':
                self.send_response(304)
                self.send_header("ETag", '"v1"')
                self.end_headers()
                return
            self._send(200, BODY, etag='"v1"')
        elif self.path == "/chunked":  # no Content-Length: the cap must apply while streaming
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for _ in range(50):
                self.wfile.write(b"400\r\n" + b"x" * 1024 + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        elif self.path == "/slow":
            time.sleep(0.8)
            self._send(200, b"late")
        elif self.path == "/loop":
            self.send_response(302)
            self.send_header("Location", "/loop")
            self.end_headers()
        elif self.path == "/redirect":
            self.send_response(301)
            self.send_header("Location", "/ok")
            self.end_headers()
        elif self.path == "/error":
            self._send(503, b"down")
        else:
            self._send(404, b"no")

    def _send(self, status: int, body: bytes, etag: str | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        if etag:
            self.send_header("ETag", etag)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients that stop reading on purpose (size caps, timeouts) are not errors here


@pytest.fixture
def base() -> Iterator[str]:
    httpd = _QuietServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_get_and_conditional_304(base: str) -> None:
    seen: list[tuple[int, int | None]] = []
    res = fetch.fetch(base + "/ok", progress=lambda n, t: seen.append((n, t)))
    assert res.status == 200 and res.body == BODY and res.etag == '"v1"' and not res.not_modified
    assert seen[-1] == (len(BODY), len(BODY))
    again = fetch.fetch(base + "/ok", etag='"v1"')
    assert again.not_modified and again.body is None and again.etag == '"v1"'


def test_redirect_reports_final_url(base: str) -> None:
    res = fetch.fetch(base + "/redirect")
    assert res.url == base + "/ok" and res.body == BODY
    with pytest.raises(NetworkError, match="redirected more than 5 times"):
        fetch.fetch(base + "/loop")


def test_size_caps(base: str) -> None:
    with pytest.raises(TooLarge, match="is 1200 bytes, over the 100 bytes download cap"):
        fetch.fetch(base + "/ok", max_bytes=100)
    with pytest.raises(TooLarge, match="sent more than"):
        fetch.fetch(base + "/chunked", max_bytes=10_000)
    assert len(fetch.fetch(base + "/chunked").body or b"") == 50 * 1024


def test_errors_are_classified(base: str) -> None:
    with pytest.raises(NotFound, match="HTTP 404"):
        fetch.fetch(base + "/missing")
    with pytest.raises(NetworkError, match="HTTP 503"):
        fetch.fetch(base + "/error")
    with pytest.raises(Timeout):
        fetch.fetch(base + "/slow", timeout=0.2)
    with pytest.raises(InvalidInput):
        fetch.fetch("ftp://example.com/llms.txt")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    with pytest.raises(NetworkError, match="Cannot fetch"):
        fetch.fetch(f"http://127.0.0.1:{port}/x", connect=1.0)


def test_file_urls(tmp_path: Path) -> None:
    path = tmp_path / "my docs.txt"
    path.write_bytes(b"local\n")
    res = fetch.fetch(path.as_uri())
    assert res.body == b"local\n" and res.last_modified
    with pytest.raises(TooLarge):
        fetch.fetch(path.as_uri(), max_bytes=2)
    with pytest.raises(NotFound):
        fetch.fetch((tmp_path / "nope.txt").as_uri())
    with pytest.raises(InvalidInput):
        fetch.fetch(tmp_path.as_uri())
    with pytest.raises(InvalidInput):
        fetch.fetch("file://otherhost/etc/passwd")
