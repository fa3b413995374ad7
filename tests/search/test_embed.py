from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from cairn_servers.core.errors import NetworkError
from cairn_servers.search import embed
from cairn_servers.search.embed import EmbeddingSettings, EmbeddingsDisabled


def _vector(text: str, dims: int) -> list[float]:
    # Deterministic: letter histogram folded into dims.
    v = [0.0] * dims
    for ch in text.lower():
        v[ord(ch) % dims] += 1.0
    return v


class _Handler(BaseHTTPRequestHandler):
    requests: list[dict[str, Any]] = []
    status = 200

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        if type(self).status != 200:
            self.send_response(type(self).status)
            self.end_headers()
            self.wfile.write(b"quota exceeded")
            return
        texts = body["input"]
        if self.path == "/v1/embeddings":
            # Out of order on purpose: clients must sort by index.
            data = [{"index": i, "embedding": _vector(t, 8)} for i, t in enumerate(texts)][::-1]
            out: dict[str, Any] = {"data": data, "model": body["model"]}
        elif self.path == "/api/embed":
            out = {"embeddings": [_vector(t, 8) for t in texts]}
        else:
            self.send_response(404)
            self.end_headers()
            return
        raw = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Handler.requests = []
    _Handler.status = 200
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_disabled_is_a_clear_error() -> None:
    with pytest.raises(EmbeddingsDisabled) as info:
        embed.create(EmbeddingSettings(provider="disabled"))
    assert info.value.code == "embeddings_disabled"
    assert info.value.http_status == 400
    assert 'provider = "minilm"' in info.value.message


def test_local_is_offline_normalised_and_quiet(capfd: pytest.CaptureFixture[str]) -> None:
    e = embed.create(EmbeddingSettings(provider="local"))
    assert e.identity == "local:l2_supercat:256"
    v = e.embed(["How do I configure the database?", "Configuring the database", "a recipe for banana bread", ""])
    assert v.shape == (4, 256) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v[:3], axis=1), 1.0, atol=1e-5)
    assert np.allclose(v[3], 0.0)  # empty text -> zero vector, not NaN
    assert float(v[0] @ v[1]) > float(v[0] @ v[2])
    assert capfd.readouterr().out == ""  # nothing on stdout: stdio servers need it clean
    # Same text, same vector: chunk vectors stay valid across runs.
    assert np.array_equal(e.embed(["Configuring the database"])[0], v[1])


def test_openai_compatible(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", "sk-test")
    e = embed.create(EmbeddingSettings(provider="openai", model="m1", dims=8, url=server + "/v1", api_key_env="MY_KEY"))
    v = e.embed(["abc", "zzz"])
    assert v.shape == (2, 8)
    expected = np.array([_vector("abc", 8), _vector("zzz", 8)], dtype=np.float32)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    assert np.allclose(v, expected)  # order restored from "index"
    req = _Handler.requests[0]
    assert req["body"] == {"model": "m1", "input": ["abc", "zzz"]}
    assert req["auth"] == "Bearer sk-test"


def test_ollama(server: str) -> None:
    e = embed.create(EmbeddingSettings(provider="ollama", model="nomic", dims=8, url=server))
    assert e.embed(["hello"]).shape == (1, 8)
    assert _Handler.requests[0]["path"] == "/api/embed"


def test_wrong_dims_and_http_errors_are_reported(server: str) -> None:
    e = embed.create(EmbeddingSettings(provider="ollama", model="nomic", dims=16, url=server))
    with pytest.raises(Exception, match="8 dimensions; \\[embedding\\] dims = 16"):
        e.embed(["hello"])
    _Handler.status = 429
    e = embed.create(EmbeddingSettings(provider="openai", model="m", dims=8, url=server.replace("http://", "http://user:secret@") + "/v1"))
    with pytest.raises(NetworkError) as info:
        e.embed(["x"])
    assert "HTTP 429" in info.value.message and "secret" not in info.value.message


def test_unreachable_endpoint() -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    e = embed.create(EmbeddingSettings(provider="openai", model="m", dims=8, url=f"http://127.0.0.1:{port}/v1", timeout=2))
    with pytest.raises(NetworkError, match="could not be reached"):
        e.embed(["x"])
