"""The stdio transport, on a real subprocess: framing, stdout purity, concurrency, EOF drain."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, IO

import pytest

DEMO = Path(__file__).with_name("_demo_server.py")
INIT: dict[str, Any] = {"jsonrpc": "2.0", "id": "init", "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {"sampling": {}}, "clientInfo": {"name": "t", "version": "0"}}}


def spawn() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(DEMO)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def send(proc: subprocess.Popen[bytes], msg: Any) -> None:
    assert proc.stdin is not None
    proc.stdin.write((msg if isinstance(msg, str) else json.dumps(msg)).encode() + b"\n")
    proc.stdin.flush()


def read(stream: IO[bytes] | None) -> Any:
    """The next JSON-RPC message: an object, or a list for a batch reply."""
    assert stream is not None
    line = stream.readline()
    assert line.endswith(b"\n"), f"server closed stdout (got {line!r})"
    return json.loads(line)


@pytest.fixture
def proc() -> Any:
    p = spawn()
    send(p, INIT)
    assert read(p.stdout)["result"]["protocolVersion"] == "2025-11-25"
    send(p, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    yield p
    if p.poll() is None:
        p.kill()
    p.wait(5)
    for s in (p.stdin, p.stdout, p.stderr):
        if s is not None:
            s.close()


def test_stdout_carries_only_protocol_messages(proc: subprocess.Popen[bytes]) -> None:
    send(proc, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "noisy"}})
    send(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "crash"}})
    send(proc, "this is not json")
    replies = [read(proc.stdout) for _ in range(3)]
    by_id = {r["id"]: r for r in replies}
    assert by_id[1]["result"]["content"][0]["text"] == "printed"
    assert by_id[2]["result"]["isError"] is True
    assert by_id[None]["error"]["code"] == -32700
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(10) == 0
    assert proc.stdout is not None and proc.stdout.read() == b""
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    assert "this must go to stderr" in err and "RuntimeError: boom" in err


def test_a_long_tool_does_not_block_ping_or_cancellation(proc: subprocess.Popen[bytes]) -> None:
    send(proc, {"jsonrpc": "2.0", "id": "long", "method": "tools/call",
                "params": {"name": "slow", "arguments": {"steps": 100, "delay": 0.05}, "_meta": {"progressToken": "t"}}})
    send(proc, {"jsonrpc": "2.0", "id": "p", "method": "ping"})
    msg = read(proc.stdout)
    while msg.get("method") == "notifications/progress":
        msg = read(proc.stdout)
    assert msg == {"jsonrpc": "2.0", "id": "p", "result": {}}
    send(proc, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "long"}})
    send(proc, {"jsonrpc": "2.0", "id": "after", "method": "ping"})
    msg = read(proc.stdout)
    while msg.get("method") == "notifications/progress":
        msg = read(proc.stdout)
    assert msg["id"] == "after"  # and no reply for the cancelled call ever arrives:
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(10) == 0
    assert proc.stdout is not None
    rest = [json.loads(line) for line in proc.stdout.read().splitlines()]
    assert all(m.get("method") == "notifications/progress" for m in rest)


def test_eof_drains_pending_replies_then_exits_zero(proc: subprocess.Popen[bytes]) -> None:
    for i in range(3):
        send(proc, {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                    "params": {"name": "slow", "arguments": {"steps": 3, "delay": 0.1}}})
    assert proc.stdin is not None
    proc.stdin.close()
    started = time.monotonic()
    assert proc.wait(10) == 0
    assert time.monotonic() - started >= 0.25  # it waited for the tools rather than dropping them
    assert proc.stdout is not None
    replies = [json.loads(line) for line in proc.stdout.read().splitlines()]
    assert sorted(r["id"] for r in replies) == [0, 1, 2]
    assert all(r["result"]["content"][0]["text"] == "done after 3 steps" for r in replies)


def test_server_to_client_request_over_stdio(proc: subprocess.Popen[bytes]) -> None:
    send(proc, {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "ask", "arguments": {"prompt": "q"}}})
    outgoing = read(proc.stdout)
    assert outgoing["method"] == "sampling/createMessage" and isinstance(outgoing["id"], str)
    send(proc, {"jsonrpc": "2.0", "id": outgoing["id"],
                "result": {"role": "assistant", "content": {"type": "text", "text": "42"}, "model": "m"}})
    assert read(proc.stdout) == {"jsonrpc": "2.0", "id": 9, "result": {"content": [{"type": "text", "text": "client said: 42"}]}}


def test_eof_while_a_tool_waits_on_the_client_still_exits(proc: subprocess.Popen[bytes]) -> None:
    send(proc, {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "ask"}})
    assert read(proc.stdout)["method"] == "sampling/createMessage"
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(5) == 0
    assert proc.stdout is not None
    reply = json.loads(proc.stdout.read())
    assert reply["id"] == 9 and reply["result"]["isError"] is True
    assert "disconnected" in reply["result"]["content"][0]["text"]


def test_ids_in_flight_are_refused_also_from_a_batch() -> None:
    """Issue 20 item 8 on stdio: an id that is queued or running cannot be sent again (not even in a
    2025-03-26 batch); the running request still gets its own answer."""
    p = spawn()
    try:
        send(p, {**INIT, "params": {**INIT["params"], "protocolVersion": "2025-03-26"}})
        assert read(p.stdout)["result"]["protocolVersion"] == "2025-03-26"
        send(p, {"jsonrpc": "2.0", "id": "x", "method": "tools/call",
                 "params": {"name": "slow", "arguments": {"steps": 3, "delay": 0.2}}})
        time.sleep(0.1)
        send(p, [{"jsonrpc": "2.0", "id": "x", "method": "ping"}, {"jsonrpc": "2.0", "id": "y", "method": "ping"}])
        send(p, {"jsonrpc": "2.0", "id": "x", "method": "ping"})
        replies = [read(p.stdout) for _ in range(3)]
        batch = next(r for r in replies if isinstance(r, list))
        assert batch[0]["id"] == "x" and batch[0]["error"]["code"] == -32600, batch
        assert batch[1] == {"jsonrpc": "2.0", "id": "y", "result": {}}
        single = [r for r in replies if isinstance(r, dict) and "error" in r]
        assert single and single[0]["id"] == "x" and "already used" in single[0]["error"]["message"]
        done = next(r for r in replies if isinstance(r, dict) and "result" in r)
        assert done["result"]["content"][0]["text"] == "done after 3 steps"
    finally:
        p.kill()
        p.wait(5)
        for s in (p.stdin, p.stdout, p.stderr):
            if s is not None:
                s.close()
