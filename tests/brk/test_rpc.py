"""The bitcoind JSON-RPC source against a real HTTP server on loopback that speaks bitcoind's protocol."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cairn_servers.brk.blocks.parser import hash_hex, parse_block
from cairn_servers.brk.blocks.rpc import RpcClient, mirror
from cairn_servers.brk.indexer import index, open_store
from cairn_servers.core.errors import NetworkError, Unauthorized

from .conftest import btc_file


def _split(data: bytes) -> list[bytes]:
    out, p = [], 0
    while p < len(data):
        n = int.from_bytes(data[p + 4:p + 8], "little")
        out.append(data[p + 8:p + 8 + n])
        p += 8 + n
    return out


class FakeNode:
    """bitcoind's RPC surface for a list of best-chain blocks (swap ``chain`` to simulate a reorg)."""

    def __init__(self, chain: list[bytes], token: str) -> None:
        self.chain = chain
        self.token = token
        node = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server naming
                auth = self.headers.get("Authorization", "")
                if auth != "Basic " + base64.b64encode(node.token.encode()).decode():
                    self.send_response(401)
                    self.end_headers()
                    return
                req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, body = 200, {"result": None, "error": None, "id": req["id"]}
                by_hash = {hash_hex(parse_block(b).hash): b for b in node.chain}
                method, params = req["method"], req["params"]
                if method == "getblockcount":
                    body["result"] = len(node.chain) - 1
                elif method == "getblockhash" and 0 <= params[0] < len(node.chain):
                    body["result"] = hash_hex(parse_block(node.chain[params[0]]).hash)
                elif method == "getblock" and params[0] in by_hash and params[1] == 0:
                    body["result"] = by_hash[params[0]].hex()
                else:
                    status, body["error"] = 500, {"code": -8, "message": "Block height out of range"}
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"


@pytest.fixture
def node(test_data: Path) -> Iterator[FakeNode]:
    chain = _split(btc_file(test_data, "btcd/blk_0_to_4.dat.bz2"))
    fake = FakeNode(chain, "__cookie__:s3cret")
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def test_mirror_then_index_follows_a_reorg(node: FakeNode, test_data: Path, tmp_path: Path) -> None:
    cookie = tmp_path / ".cookie"
    cookie.write_text("__cookie__:s3cret\n")
    client = RpcClient(node.url, cookie=str(cookie))
    blocks, out = tmp_path / "blocks", tmp_path / "out"
    assert mirror(client, blocks) == {"fetched": 5, "height": 4, "tip": hash_hex(parse_block(node.chain[4]).hash),
                                      "replaced": 0}
    assert index(blocks, out).height == 4
    assert mirror(client, blocks)["fetched"] == 0
    # The node reorgs onto the 3A-4A-5A side chain.
    side = [_split(btc_file(test_data, f"btcd/blk_{n}A.dat.bz2"))[0] for n in (3, 4, 5)]
    node.chain = node.chain[:3] + side
    summary = mirror(client, blocks)
    assert (summary["fetched"], summary["replaced"], summary["height"]) == (3, 2, 5)
    r = index(blocks, out)
    assert (r.height, r.fork_height, r.rolled_back_from) == (5, 3, 4)
    assert r.tip == hash_hex(parse_block(side[-1]).hash)
    assert open_store(out).lengths["height_to_blockhash"] == 6


def test_user_password_and_errors(node: FakeNode, tmp_path: Path) -> None:
    good = RpcClient(node.url, user="__cookie__", password="s3cret")
    assert good.call("getblockcount") == 4
    with pytest.raises(NetworkError, match="bitcoind getblockhash failed: Block height out of range"):
        good.call("getblockhash", 99)
    with pytest.raises(Unauthorized, match="rejected the credentials"):
        RpcClient(node.url, user="x", password="y").call("getblockcount")
    with pytest.raises(NetworkError, match="Cannot reach bitcoind"):
        RpcClient("http://127.0.0.1:9/", timeout=2).call("getblockcount")


def test_crash_mid_append_is_cut_back(node: FakeNode, tmp_path: Path) -> None:
    client = RpcClient(node.url, user="__cookie__", password="s3cret")
    blocks = tmp_path / "blocks"
    mirror(client, blocks, max_blocks=3)
    with open(blocks / "blk00000.dat", "ab") as fh:
        fh.write(b"\xf9\xbe\xb4\xd9\xff\x00\x00\x00half a block")  # a crash left a torn record
    mirror(client, blocks)
    r = index(blocks, tmp_path / "out")
    assert (r.height, r.invalid) == (4, [])


@pytest.mark.parametrize("user_info, token", [("u:PASS", "u:PASS"), ("u:ret@PW", "u:ret@PW"),
                                              ("u:p%40ss%2Fw", "u:p@ss/w")])
def test_user_info_in_the_url_becomes_basic_auth_and_is_never_resolved(
        test_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        user_info: str, token: str) -> None:
    """`brk fetch --rpc-url http://u:PASS@127.0.0.1:PORT/`: the node (which checks the Basic header)
    serves the blocks, and the only host name resolved or connected to is 127.0.0.1."""
    import socket

    from cairn_servers.brk.cli import main

    fake = FakeNode(_split(btc_file(test_data, "btcd/blk_0_to_4.dat.bz2")), token)
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    resolved: list[str] = []
    real_getaddrinfo = socket.getaddrinfo

    def recording_getaddrinfo(host: object, *args: object, **kwargs: object) -> object:
        resolved.append(str(host))
        return real_getaddrinfo(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", recording_getaddrinfo)
    try:
        url = fake.url.replace("http://", f"http://{user_info}@")
        assert main(["fetch", "--rpc-url", url, "--blocks-dir", str(tmp_path / "b"), "--format", "json"]) == 0
        assert json.loads(capsys.readouterr().out)["fetched"] == 5
        assert set(resolved) == {"127.0.0.1"}
        # A wrong password: refused by the node, and the message shows the URL without user info.
        bad = fake.url.replace("http://", "http://u:WRONGPASS@")
        assert main(["fetch", "--rpc-url", bad, "--blocks-dir", str(tmp_path / "c")]) == 10
        err = capsys.readouterr().err
        assert f"bitcoind at {fake.url} rejected the credentials" in err and "WRONGPASS" not in err
    finally:
        fake.server.shutdown()
        fake.server.server_close()
    assert set(resolved) == {"127.0.0.1"}


def test_an_ambiguous_user_info_is_refused_before_connecting(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from cairn_servers.brk.cli import main

    resolved: list[object] = []

    def recording_getaddrinfo(host: object, *args: object, **kwargs: object) -> list[object]:
        resolved.append(host)
        return []

    monkeypatch.setattr(socket, "getaddrinfo", recording_getaddrinfo)
    for url in ("http://u:se/cret@127.0.0.1:1/", "http://u:/secret@127.0.0.1:1/"):
        assert main(["fetch", "--rpc-url", url, "--blocks-dir", str(tmp_path / "b")]) == 2
        err = capsys.readouterr().err
        assert "percent-encode" in err and "secret" not in err.replace("--rpc-url", ""), err
    assert resolved == []
