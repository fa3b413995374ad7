"""blz fixtures: a per-test data root, a Store on it, and a real HTTP server serving llms.txt files."""

from __future__ import annotations

import hashlib
import io
import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cairn_servers.blz.store import Store


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients that stop reading on purpose (size caps, timeouts) are not errors here


@pytest.fixture
def data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "blz-data"
    monkeypatch.setenv("BLZ_DATA_DIR", str(root))
    return root


@pytest.fixture
def store(data_root: Path) -> Iterator[Store]:
    st = Store(data_root)
    yield st
    st.close()


@dataclass
class DocServer:
    """Serves ``files`` (path -> bytes) with strong ETags and Last-Modified; answers conditional
    requests with 304; records every request as (method, path, headers)."""

    files: dict[str, bytes] = field(default_factory=dict)
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    redirects: dict[str, str] = field(default_factory=dict)
    port: int = 0
    scheme: str = "http"

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``: what `blz add DOMAIN` takes."""
        return f"127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}{path}"

    def etag(self, path: str) -> str:
        return '"' + hashlib.sha256(self.files[path]).hexdigest()[:16] + '"'

    def gets(self, path: str) -> list[dict[str, str]]:
        return [h for m, p, h in self.requests if p == path and m == "GET"]


LAST_MODIFIED = "Wed, 01 Jan 2025 00:00:00 GMT"


@pytest.fixture
def doc_server() -> Iterator[DocServer]:
    yield from _serve(DocServer())


@pytest.fixture
def other_server() -> Iterator[DocServer]:
    """A second DocServer on another port (redirect targets)."""
    yield from _serve(DocServer())


@pytest.fixture(scope="session")
def tls_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (and localhost), made by the openssl command: (cert, key)."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.fixture
def tls_server(tls_cert: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> Iterator[DocServer]:
    """A DocServer over HTTPS on 127.0.0.1 (`blz add DOMAIN` fetches https://DOMAIN/...), its
    certificate trusted through SSL_CERT_FILE for this test (in-process and in child processes)."""
    cert, key = tls_cert
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    yield from _serve(DocServer(scheme="https"), context)


def _serve(state: DocServer, tls: ssl.SSLContext | None = None) -> Iterator[DocServer]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            state.requests.append(("GET", self.path, {k.lower(): v for k, v in self.headers.items()}))
            if self.path in state.redirects:
                self.send_response(302)
                self.send_header("Location", state.redirects[self.path])
                self.end_headers()
                return
            body = state.files.get(self.path)
            if body is None:
                self.send_error(404)
                return
            tag = state.etag(self.path)
            if self.headers.get("If-None-Match") == tag:
                self.send_response(304)
                self.send_header("ETag", tag)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("ETag", tag)
            self.send_header("Last-Modified", LAST_MODIFIED)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = _QuietServer(("127.0.0.1", 0), Handler)
    state.port = httpd.server_address[1]
    if tls is not None:  # the handshake runs in the handler's thread, on its first read
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()


def blz(*argv: str) -> tuple[int, str, str]:
    """``blz ARGV`` run in process: exit code, stdout, stderr."""
    from cairn_servers.blz.cli import run

    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def js(*argv: str) -> Any:
    """``blz ARGV --json``, which must succeed: its JSON answer."""
    code, out, err = blz(*argv, "--json")
    assert code == 0, err
    return json.loads(out)
