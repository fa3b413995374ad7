"""Tools declared after the first reply (``Server.defer_tools``): what brk and ctx use so that deriving
their operations' schemas does not delay ``initialize``. The capability is announced meanwhile, the
declarations run once (also when threads race for them), and over stdio they run right after the
``initialize`` reply is written, before the next message is read."""

from __future__ import annotations

import io
import json
import threading
import time
from typing import Any

import pytest

from cairn_servers.mcp.server import Server, Tool, ToolContext
from cairn_servers.mcp.stdio import serve_stdio

INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}


def _echo(args: dict[str, Any], ctx: ToolContext) -> Any:
    return args.get("text", "")


def _server(declared: list[str], names: tuple[str, ...] = ("a", "b"), delay: float = 0.0) -> Server:
    server = Server(name="deferred", version="1")

    def declare() -> None:
        declared.append("run")
        for name in names:
            time.sleep(delay)  # a slow declaration: racing readers must still see every tool
            server.add_tool(Tool(name, _echo, description=f"tool {name}"))

    server.defer_tools(declare)
    return server


def _request(method: str, params: dict[str, Any] | None = None, id: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "method": method, "params": params or {}}


def test_initialize_announces_tools_without_declaring_them() -> None:
    declared: list[str] = []
    session = _server(declared).open_session()
    reply = session.handle(_request("initialize", INIT))
    assert isinstance(reply, dict)
    assert "tools" in reply["result"]["capabilities"]
    assert declared == []  # nothing derived for the first reply
    session.handle({"jsonrpc": "2.0", "method": "notifications/initialized"})
    listed = session.handle(_request("tools/list", id=2))
    assert isinstance(listed, dict)
    assert [t["name"] for t in listed["result"]["tools"]] == ["a", "b"]
    called = session.handle(_request("tools/call", {"name": "b", "arguments": {"text": "hi"}}, id=3))
    assert isinstance(called, dict) and called["result"]["content"][0]["text"] == "hi"
    assert declared == ["run"]  # once, however often the tools are read


def test_a_tools_call_first_declares_the_tools_too() -> None:
    declared: list[str] = []
    server = _server(declared)
    session = server.open_session(stateless=True)
    called = session.handle(_request("tools/call", {"name": "a", "arguments": {"text": "x"}}))
    assert isinstance(called, dict) and called["result"]["content"][0]["text"] == "x", called
    assert declared == ["run"]


def test_racing_readers_wait_for_the_whole_declaration() -> None:
    declared: list[str] = []
    server = _server(declared, names=tuple("abcdef"), delay=0.01)
    seen: list[list[str]] = []
    start = threading.Barrier(8)

    def read() -> None:
        start.wait()
        seen.append(sorted(server.tools))

    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [list("abcdef")] * 8
    assert declared == ["run"]


def test_a_failing_declaration_is_reported_once_and_the_others_still_run() -> None:
    server = Server(name="deferred", version="1")
    runs: list[str] = []

    def broken() -> None:
        runs.append("broken")
        raise ValueError("bad schema")

    def fine() -> None:
        runs.append("fine")
        server.add_tool(Tool("ok", _echo))

    server.defer_tools(broken)
    server.defer_tools(fine)
    with pytest.raises(ValueError, match="bad schema"):
        server.declare_deferred_tools()
    assert list(server.tools) == ["ok"]
    assert list(server.tools) == ["ok"] and runs == ["broken", "fine"]


def test_a_declaration_reading_the_tools_sees_those_declared_so_far() -> None:
    server = Server(name="deferred", version="1")
    server.add_tool(Tool("first", _echo))
    seen: list[list[str]] = []

    def declare() -> None:
        seen.append(list(server.tools))  # re-entrant: no deadlock, no second run
        server.add_tool(Tool("second", _echo))

    server.defer_tools(declare)
    assert list(server.tools) == ["first", "second"] and seen == [["first"]]


class _In(io.BytesIO):
    """stdin of an in-process stdio server that counts the lines read."""

    lines = 0

    def readline(self, size: int | None = -1) -> bytes:
        self.lines += 1
        return super().readline(size)


def test_stdio_declares_right_after_the_initialize_reply() -> None:
    out = io.BytesIO()
    server = Server(name="deferred", version="1")
    lines = [_request("initialize", INIT, id=1), {"jsonrpc": "2.0", "method": "notifications/initialized"},
             _request("tools/list", id=2)]
    stdin = _In(b"".join(json.dumps(m).encode() + b"\n" for m in lines))
    at_declaration: list[tuple[int, int]] = []  # (replies written, lines read)

    def declare() -> None:
        at_declaration.append((out.getvalue().count(b"\n"), stdin.lines))
        server.add_tool(Tool("a", _echo))

    server.defer_tools(declare)
    assert serve_stdio(server, stdin=stdin, stdout=out) == 0
    replies = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["id"] for r in replies] == [1, 2]
    assert "tools" in replies[0]["result"]["capabilities"]
    assert [t["name"] for t in replies[1]["result"]["tools"]] == ["a"]
    assert at_declaration == [(1, 1)]  # after the initialize reply, before the next line was read
