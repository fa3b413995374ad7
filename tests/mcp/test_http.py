"""Streamable HTTP on a real uvicorn server: stateless and stateful modes, SSE, headers, status codes."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Iterator

import httpx
import pytest

from cairn_servers.mcp.http import mcp_app
from cairn_servers.mcp.server import Server

from ._demo_server import build
from ._http import serving, sse_events, sse_messages

BOTH = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
JSON_ONLY = {"accept": "application/json", "content-type": "application/json"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}


def call(name: str, arguments: dict[str, Any] | None = None, id: Any = 2, **meta: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
    if meta:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}


@pytest.fixture(scope="module")
def stateless() -> Iterator[str]:
    with serving(mcp_app(build(), stateless=True)) as url:
        yield url


@pytest.fixture(scope="module")
def stateful_server() -> Server:
    return build()


@pytest.fixture(scope="module")
def stateful(stateful_server: Server) -> Iterator[str]:
    with serving(mcp_app(stateful_server)) as url:
        yield url


def open_session(url: str, client: httpx.Client) -> dict[str, str]:
    r = client.post(url, json=INIT, headers=JSON_ONLY)
    assert r.status_code == 200
    sid = r.headers["mcp-session-id"]
    assert len(sid) >= 16 and sid.isascii()
    headers = {**BOTH, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
    assert client.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers).status_code == 202
    return headers


# -- stateless ---------------------------------------------------------------------------------

def test_stateless_initialize_and_calls_need_no_session(stateless: str) -> None:
    with httpx.Client() as c:
        r = c.post(stateless, json=INIT, headers=BOTH)
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
        assert "mcp-session-id" not in r.headers
        assert r.json()["result"]["protocolVersion"] == "2025-11-25"
        # any replica can answer any request: no initialize on this "connection"
        r = c.post(stateless, json=call("add", {"a": 2, "b": 3}), headers=JSON_ONLY)
        assert r.json()["result"]["structuredContent"] == {"sum": 5}


def test_stateless_sse_reply_has_priming_event_progress_and_result(stateless: str) -> None:
    with httpx.Client() as c:
        r = c.post(stateless, json=call("slow", {"steps": 2}, progressToken="tok"), headers=BOTH)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[0]["data"] == "" and events[0]["retry"] == "1000" and events[0]["id"]
    ids = [e["id"] for e in events]
    assert len(set(ids)) == len(ids)
    messages = sse_messages(r.text)
    assert [m.get("method") for m in messages] == ["notifications/progress"] * 2 + [None]
    assert messages[-1] == {"jsonrpc": "2.0", "id": 2, "result": {"content": [{"type": "text", "text": "done after 2 steps"}]}}


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
def test_stateless_other_methods_are_405(stateless: str, method: str) -> None:
    r = httpx.request(method, stateless, headers={"accept": "text/event-stream"})
    assert r.status_code == 405 and "POST" in r.headers["allow"]
    assert r.json()["error"]["code"] == -32600


def test_notifications_and_responses_get_202(stateless: str) -> None:
    with httpx.Client() as c:
        r = c.post(stateless, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=BOTH)
        assert r.status_code == 202 and r.content == b""
        r = c.post(stateless, json={"jsonrpc": "2.0", "id": "srv-1", "result": {}}, headers=BOTH)
        assert r.status_code == 202 and r.content == b""


def test_protocol_version_header(stateless: str) -> None:
    with httpx.Client() as c:
        r = c.post(stateless, json=call("echo", {"text": "x"}), headers={**JSON_ONLY, "mcp-protocol-version": "2031-01-01"})
        assert r.status_code == 400 and "2031-01-01" in r.json()["error"]["message"]
        for good in ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"):
            r = c.post(stateless, json=call("echo", {"text": "x"}), headers={**JSON_ONLY, "mcp-protocol-version": good})
            assert r.status_code == 200 and r.json()["result"]["content"][0]["text"] == "x"


def test_bad_bodies_get_json_rpc_errors(stateless: str) -> None:
    with httpx.Client() as c:
        r = c.post(stateless, content=b"{nope", headers=BOTH)
        assert r.status_code == 400 and r.json()["error"]["code"] == -32700 and r.json()["id"] is None
        r = c.post(stateless, json={"jsonrpc": "2.0", "id": 3, "method": 4}, headers=BOTH)
        assert r.status_code == 400 and r.json() == {"jsonrpc": "2.0", "id": 3, "error": {
            "code": -32600, "message": 'Invalid request: "method" must be a string'}}
        r = c.post(stateless, json=[INIT], headers=BOTH)
        assert r.status_code == 200 and r.json()["error"]["code"] == -32600
        r = c.post(stateless, json={"jsonrpc": "2.0", "id": 4, "method": "nope"}, headers=BOTH)
        assert r.json()["error"]["code"] == -32601


@pytest.mark.parametrize("headers,status", [
    ({"host": "evil.example.com"}, 403),
    ({"origin": "http://evil.example.com"}, 403),
    ({"origin": "null"}, 403),
    ({"host": "localhost:1234", "origin": "http://localhost:5173"}, 200),
    ({"origin": "http://[::1]:8080"}, 200),
    ({"origin": "https://127.0.0.1"}, 200),
])
def test_dns_rebinding_protection_on_loopback(stateless: str, headers: dict[str, str], status: int) -> None:
    r = httpx.post(stateless, json=INIT, headers={**BOTH, **headers})
    assert r.status_code == status
    if status == 403:
        assert r.json()["error"]["message"].startswith("Forbidden:")


def test_allowed_hosts_are_configurable() -> None:
    app = mcp_app(build(), stateless=True, allowed_hosts=["mcp.internal"], allowed_origins=["https://app.example"])
    with serving(app) as url:
        assert httpx.post(url, json=INIT, headers=BOTH).status_code == 403  # Host 127.0.0.1 no longer listed
        assert httpx.post(url, json=INIT, headers={**BOTH, "host": "mcp.internal:9"}).status_code == 200
        ok = {**BOTH, "host": "mcp.internal", "origin": "https://app.example"}
        assert httpx.post(url, json=INIT, headers=ok).status_code == 200


# -- stateful ----------------------------------------------------------------------------------

def test_stateful_session_lifecycle(stateful: str) -> None:
    with httpx.Client() as c:
        headers = open_session(stateful, c)
        r = c.post(stateful, json={"jsonrpc": "2.0", "id": 5, "method": "tools/list"}, headers=headers)
        assert r.status_code == 200 and len(r.json()["result"]["tools"]) > 5
        missing = {k: v for k, v in headers.items() if k != "mcp-session-id"}
        r = c.post(stateful, json={"jsonrpc": "2.0", "id": 6, "method": "ping"}, headers=missing)
        assert r.status_code == 400 and "Mcp-Session-Id" in r.json()["error"]["message"]
        r = c.post(stateful, json={"jsonrpc": "2.0", "id": 6, "method": "ping"}, headers={**headers, "mcp-session-id": "bogus"})
        assert r.status_code == 404 and r.json()["error"]["code"] == -32001
        assert c.delete(stateful, headers=headers).status_code == 204
        r = c.post(stateful, json={"jsonrpc": "2.0", "id": 7, "method": "ping"}, headers=headers)
        assert r.status_code == 404
        assert c.delete(stateful, headers=headers).status_code == 404


def test_get_stream_carries_resource_updates(stateful: str, stateful_server: Server) -> None:
    with httpx.Client(timeout=10) as c:
        headers = open_session(stateful, c)
        c.post(stateful, json={"jsonrpc": "2.0", "id": 8, "method": "resources/subscribe",
                               "params": {"uri": "demo://note"}}, headers=headers).raise_for_status()
        assert c.get(stateful, headers={**headers, "accept": "application/json"}).status_code == 406
        lines: list[str] = []
        with c.stream("GET", stateful, headers={**headers, "accept": "text/event-stream"}) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            it = r.iter_lines()
            while True:  # the priming event arrives first
                line = next(it)
                lines.append(line)
                if line == "":
                    break
            assert any(line.startswith("retry:") for line in lines)
            assert stateful_server.notify_resource_updated("demo://note") >= 1
            while not any(line.startswith("data: {") for line in lines):
                lines.append(next(it))
        data = json.loads(next(line for line in lines if line.startswith("data: {"))[6:])
        assert data == {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "demo://note"}}


def test_server_to_client_request_over_the_post_stream(stateful: str) -> None:
    with httpx.Client(timeout=10) as c:
        headers = open_session(stateful, c)
        answered = threading.Event()
        with c.stream("POST", stateful, json=call("ask", {"prompt": "2+2?"}, id=9), headers=headers) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            buffer = ""
            for chunk in r.iter_text():
                buffer += chunk
                for msg in sse_messages(buffer.rsplit("\n\n", 1)[0] + "\n\n") if "\n\n" in buffer else []:
                    if msg.get("method") == "sampling/createMessage" and not answered.is_set():
                        answered.set()
                        reply = {"jsonrpc": "2.0", "id": msg["id"], "result": {
                            "role": "assistant", "content": {"type": "text", "text": "4"}, "model": "m"}}
                        with httpx.Client() as other:
                            assert other.post(stateful, json=reply, headers=headers).status_code == 202
            messages = sse_messages(buffer)
        assert answered.is_set()
        assert messages[-1] == {"jsonrpc": "2.0", "id": 9, "result": {"content": [{"type": "text", "text": "client said: 4"}]}}


def test_stream_cut_mid_call_resumes_with_last_event_id(stateful: str) -> None:
    with httpx.Client(timeout=10) as c:
        headers = open_session(stateful, c)
        r = c.post(stateful, json=call("test_reconnection", id=10), headers=headers)
        first = sse_events(r.text)
        assert all("result" not in json.loads(e["data"]) for e in first if e.get("data"))
        last_id = first[-1]["id"]
        r = c.get(stateful, headers={**headers, "accept": "text/event-stream", "last-event-id": last_id})
        assert r.status_code == 200
        resumed = sse_messages(r.text)
        assert [m.get("params", {}).get("data") for m in resumed[:-1]] == ["after the cut"]
        assert resumed[-1]["result"]["content"][0]["text"] == "Reconnection test completed successfully"
        r = c.get(stateful, headers={**headers, "accept": "text/event-stream", "last-event-id": "nope_3"})
        assert r.status_code == 404


def test_concurrent_posts_on_one_session(stateful: str) -> None:
    with httpx.Client(timeout=10) as c:
        headers = open_session(stateful, c)
    results: list[Any] = []

    def one(i: int) -> None:
        with httpx.Client(timeout=10) as client:
            r = client.post(stateful, json=call("slow", {"steps": 2, "delay": 0.5}, id=100 + i), headers=headers)
            results.append(sse_messages(r.text)[-1]["id"])

    started = time.monotonic()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [100, 101, 102, 103]
    # They ran side by side: one after another takes at least 4 s. (With 0.1 s steps the margin left for
    # HTTP overhead was 0.6 s, which a loaded machine - load average 10 - exceeded.)
    assert time.monotonic() - started < 3.0
