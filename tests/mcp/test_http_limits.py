"""Streamable HTTP against hostile clients (issue 20, items 4 and 8), on a real uvicorn server on 127.0.0.1.

* Bodies are streamed and refused at 4 MiB (413 + JSON-RPC -32600) before the client has sent the rest.
* A client that disconnects stops its work: the rest of a batch is skipped, a running request is cancelled.
* A second ``initialize`` on an initialized session is refused and does not switch the protocol version.
* A request whose id is already in flight in the session is refused; the first one still gets its answer.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from typing import Any

import httpx
import pytest

from cairn_servers.mcp.http import MAX_BODY, mcp_app
from cairn_servers.mcp.server import Server, ToolContext

from ._http import serving

JSON_ONLY = {"accept": "application/json", "content-type": "application/json"}
INIT: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}


class Probe:
    """A server whose tools record what ran: ``tick`` counts calls (and takes 50 ms), ``wait`` runs
    until it is cancelled (or 10 s) and records whether cancellation reached it."""

    def __init__(self) -> None:
        self.server = Server("probe", "1")
        self.ticks = 0
        self.cancelled = threading.Event()
        self.started = threading.Event()
        self.lock = threading.Lock()

        @self.server.tool(input_schema={"type": "object", "properties": {}})
        def tick(args: dict[str, Any], ctx: ToolContext) -> str:
            with self.lock:
                self.ticks += 1
            time.sleep(0.05)
            return "tick"

        @self.server.tool(input_schema={"type": "object", "properties": {"seconds": {"type": "number"}}})
        def wait(args: dict[str, Any], ctx: ToolContext) -> str:
            self.started.set()
            if ctx.wait_cancelled(args.get("seconds", 10)):
                self.cancelled.set()
                return "cancelled"
            return "done"


@pytest.fixture
def probe() -> Probe:
    return Probe()


def _raw_post(url: str, body: bytes, headers: dict[str, str]) -> socket.socket:
    """Send a whole POST on a raw socket and return the socket without reading the answer."""
    host, _, rest = url.removeprefix("http://").partition("/")
    port = int(host.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port))
    head = f"POST /{rest} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock.sendall(head.encode() + b"\r\n" + body)
    return sock


def _batch(n: int, name: str = "tick") -> bytes:
    return json.dumps([{"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": name}}
                       for i in range(n)]).encode()


# -- item 4: body limit ---------------------------------------------------------------------------

def stream_upload(url: str, offered: int, *, chunked: bool, piece: int = 256 * 1024) -> dict[str, Any]:
    """POST up to ``offered`` bytes (chunked, or declared in Content-Length), reading the answer as soon
    as the server sends one; returns the status, the JSON body and how many bytes were sent by then."""
    host, _, rest = url.removeprefix("http://").partition("/")
    sock = socket.create_connection(("127.0.0.1", int(host.rsplit(":", 1)[1])))
    sock.settimeout(10)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {offered}"
    sock.sendall(f"POST /{rest} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                 f"Accept: application/json\r\n{framing}\r\n\r\n".encode())
    data = b"[" + b" " * (piece - 1)
    frame = f"{len(data):x}\r\n".encode() + data + b"\r\n" if chunked else data
    sent = 0
    while sent < offered and not select.select([sock], [], [], 0)[0]:
        try:
            sock.sendall(frame)
        except OSError:  # the server answered and closed: its answer is waiting in our buffer
            break
        sent += len(data)
    raw = b""
    try:
        while True:
            more = sock.recv(65536)
            if not more:
                break
            raw += more
    except OSError:
        pass
    sock.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    length = int(headers.get("content-length", len(body)))
    return {"status": int(lines[0].split()[1]) if raw else None, "headers": headers,
            "json": json.loads(body[:length]) if body else None, "sent": sent}


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "content-length"])
def test_body_over_the_limit_is_refused_before_it_is_all_sent(probe: Probe, chunked: bool) -> None:
    with serving(mcp_app(probe.server, stateless=True)) as url:
        got = stream_upload(url, 256 << 20, chunked=chunked)
        assert got["status"] == 413, got
        assert got["json"]["error"]["code"] == -32600 and "too large" in got["json"]["error"]["message"]
        assert got["headers"].get("connection") == "close"
        # the server stopped reading at the limit: the client could not push the 256 MiB
        assert got["sent"] < MAX_BODY + (32 << 20), got["sent"]
        # a chunked body under the limit is still read whole and served
        pad = {"jsonrpc": "2.0", "id": 7, "method": "ping", "params": {"_meta": {"pad": "x" * (3 << 20)}}}
        r = httpx.post(url, content=iter([json.dumps(pad).encode()]), headers=JSON_ONLY)
        assert r.status_code == 200 and r.json() == {"jsonrpc": "2.0", "id": 7, "result": {}}


# -- item 8: disconnects --------------------------------------------------------------------------

@pytest.mark.parametrize("stateless", [True, False], ids=["stateless", "stateful"])
def test_a_dropped_client_stops_its_batch(probe: Probe, stateless: bool) -> None:
    with serving(mcp_app(probe.server, stateless=stateless)) as url:
        headers = {**JSON_ONLY, "mcp-protocol-version": "2025-03-26"}  # batches exist in 2025-03-26
        if not stateless:
            r = httpx.post(url, json=INIT, headers=JSON_ONLY)
            headers["mcp-session-id"] = r.headers["mcp-session-id"]
        sock = _raw_post(url, _batch(200), headers)  # 200 x 50 ms = 10 s of work
        time.sleep(0.5)
        sock.close()
        time.sleep(0.3)  # the item running at the disconnect may finish
        after_close = probe.ticks
        time.sleep(1.0)
        assert 0 < after_close < 200
        assert probe.ticks <= after_close + 1, f"{probe.ticks - after_close} more batch items ran after the disconnect"
        # the session (stateful) still works
        r = httpx.post(url, json={"jsonrpc": "2.0", "id": 5, "method": "ping"}, headers=headers)
        assert r.json()["result"] == {}


@pytest.mark.parametrize("stateless", [True, False], ids=["stateless", "stateful"])
def test_a_dropped_client_cancels_its_running_request(probe: Probe, stateless: bool) -> None:
    with serving(mcp_app(probe.server, stateless=stateless)) as url:
        headers = dict(JSON_ONLY)
        if not stateless:
            r = httpx.post(url, json=INIT, headers=JSON_ONLY)
            headers["mcp-session-id"] = r.headers["mcp-session-id"]
        msg = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "wait", "arguments": {}}}
        sock = _raw_post(url, json.dumps(msg).encode(), headers)
        assert probe.started.wait(5)
        sock.close()
        assert probe.cancelled.wait(2), "the tool never saw ctx.cancelled after its client disconnected"


# -- item 8: lifecycle --------------------------------------------------------------------------

def test_second_initialize_on_a_session_is_refused(probe: Probe) -> None:
    with serving(mcp_app(probe.server)) as url, httpx.Client() as c:
        r = c.post(url, json=INIT, headers=JSON_ONLY)
        sid = r.headers["mcp-session-id"]
        assert r.json()["result"]["protocolVersion"] == "2025-03-26"
        again = {**INIT, "id": 2, "params": {**INIT["params"], "protocolVersion": "2025-11-25"}}
        r = c.post(url, json=again, headers={**JSON_ONLY, "mcp-session-id": sid})
        err = r.json()["error"]
        assert err["code"] == -32600 and "already initialized" in err["message"], err
        assert "mcp-session-id" not in r.headers or r.headers["mcp-session-id"] == sid
        # still 2025-03-26: batches are still served
        r = c.post(url, content=_batch(2), headers={**JSON_ONLY, "mcp-session-id": sid})
        assert [m["result"]["content"][0]["text"] for m in r.json()] == ["tick", "tick"]
        # without a session id, initialize starts a new session (as before)
        r = c.post(url, json=again, headers=JSON_ONLY)
        assert r.json()["result"]["protocolVersion"] == "2025-11-25" and r.headers["mcp-session-id"] != sid


def test_a_request_id_already_in_flight_is_refused(probe: Probe) -> None:
    with serving(mcp_app(probe.server)) as url, httpx.Client() as c:
        sid = c.post(url, json=INIT, headers=JSON_ONLY).headers["mcp-session-id"]
        headers = {**JSON_ONLY, "mcp-session-id": sid}
        first = {"jsonrpc": "2.0", "id": "same", "method": "tools/call",
                 "params": {"name": "wait", "arguments": {"seconds": 1.0}}}
        replies: list[Any] = []
        worker = threading.Thread(target=lambda: replies.append(httpx.post(url, json=first, headers=headers, timeout=10)))
        worker.start()
        assert probe.started.wait(5)
        second = {"jsonrpc": "2.0", "id": "same", "method": "tools/call", "params": {"name": "tick"}}
        r = c.post(url, json=second, headers=headers)
        err = r.json()["error"]
        assert r.json()["id"] == "same" and err["code"] == -32600 and "already used" in err["message"], r.json()
        assert probe.ticks == 0  # the duplicate never ran
        worker.join(10)
        assert replies[0].json()["result"]["content"][0]["text"] == "done"
        # once answered, the id may be used again
        assert c.post(url, json=second, headers=headers).json()["result"]["content"][0]["text"] == "tick"
        # duplicate ids inside one batch: the later one is refused
        batch = [{"jsonrpc": "2.0", "id": 9, "method": "ping"}, {"jsonrpc": "2.0", "id": 9, "method": "ping"}]
        r = c.post(url, json=batch, headers=headers).json()
        assert r[0] == {"jsonrpc": "2.0", "id": 9, "result": {}} and r[1]["error"]["code"] == -32600

