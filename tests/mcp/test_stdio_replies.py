"""Replies on the stdio transport: one ``os.write`` per line, structured results serialized once (the
text block's JSON spliced in as structuredContent), and the strict request parser built once (h-stdio)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from cairn.mcp import jsonrpc as rpc
from cairn.mcp.jsonrpc import JsonText, RpcError

SERVER = r'''
import sys
from cairn.mcp.server import Server
from cairn.mcp.stdio import serve_stdio

server = Server(name="big", version="1.0.0")

@server.tool(description="A large structured answer.", structured=True)
def big(args, ctx):
    return {"text": "\u00e9t\u00e9 \u2026 " * int(args["n"]), "n": list(range(50)), "quote": "a \"b\" \\ c\n"}

@server.tool(description="A structured answer holding a lone surrogate.", structured=True)
def lone(args, ctx):
    return {"s": args["s"]}

sys.exit(serve_stdio(server))
'''

INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}


def _exchange(messages: list[Any]) -> list[Any]:
    """Send every message (a str as it is), close stdin, and return the replies in the order they came (one per line)."""
    data = b"".join((m if isinstance(m, str) else json.dumps(m)).encode() + b"\n" for m in messages)
    done = subprocess.run([sys.executable, "-c", SERVER], input=data, capture_output=True, timeout=60, check=True)
    lines = done.stdout.split(b"\n")
    assert lines[-1] == b"", "the last reply ends with a newline"
    return [json.loads(line) for line in lines[:-1]]


def test_a_reply_larger_than_the_pipe_arrives_whole_and_spliced() -> None:
    """~1.2 MB of non-ASCII text: written in several pipe-sized parts, still one line; the
    structuredContent member is the text block's JSON verbatim and parses to the same value."""
    n = 100_000
    replies = _exchange([INIT, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                         {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "big", "arguments": {"n": n}}}])
    assert [r["id"] for r in replies] == [0, 1]
    result = replies[1]["result"]
    expected = {"text": "\u00e9t\u00e9 \u2026 " * n, "n": list(range(50)), "quote": "a \"b\" \\ c\n"}
    assert result["structuredContent"] == expected
    assert json.loads(result["content"][0]["text"]) == expected


def test_a_lone_surrogate_in_a_spliced_result_falls_back_to_ascii_escapes() -> None:
    replies = _exchange([INIT, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                         '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lone","arguments":{"s":"x\\ud800y"}}}'])
    assert replies[1]["result"]["structuredContent"] == {"s": "x\ud800y"}
    assert json.loads(replies[1]["result"]["content"][0]["text"]) == {"s": "x\ud800y"}


def _response(structured: Any, text: str) -> dict[str, Any]:
    return rpc.response(7, {"content": [{"type": "text", "text": text}], "structuredContent": structured})


def test_encode_splices_only_the_text_made_from_that_very_value() -> None:
    value = {"a": [1, 2.5, None, True], "b": "\u00e9\"\\"}
    body = json.dumps(value, ensure_ascii=False, allow_nan=False)
    spliced = rpc.encode(_response(value, JsonText(body, value)))
    assert spliced.endswith(b',"structuredContent":' + body.encode() + b"}}")
    assert json.loads(spliced) == json.loads(json.dumps(_response(value, body)))
    assert rpc.dumps(_response(value, JsonText(body, value))).encode() == spliced
    # A JsonText made from another (equal) value, or copied without its value, is serialized as usual.
    for text in (JsonText(body, dict(value)), JsonText(body)):
        plain = rpc.encode(_response(value, text))
        assert b'"structuredContent":{"a":[1,2.5,null,true]' in plain
        assert json.loads(plain) == json.loads(spliced)


def test_encode_safe_still_reports_an_unserializable_result() -> None:
    value = {"a": 1}
    reply = _response(value, JsonText(json.dumps(value), value))
    reply["result"]["_meta"] = {"bad": object()}
    err = json.loads(rpc.encode_safe(reply))
    assert err["id"] == 7 and err["error"]["code"] == rpc.INTERNAL_ERROR
    assert "not serializable" in err["error"]["message"]
    assert rpc.dumps_safe(reply) == rpc.encode_safe(reply).decode()


@pytest.mark.parametrize("data", [
    b'{"a": 1}', '{"a": 1}', b'\xef\xbb\xbf{"a": 1}', '{"a": 1}'.encode("utf-16"), '{"a": "\u00e9"}'.encode("utf-32-le"),
    bytearray(b'[1, 2]'), b'"\\ud800"',
])
def test_loads_parses_what_json_loads_parses(data: str | bytes) -> None:
    assert rpc.loads(data) == json.loads(data)


@pytest.mark.parametrize("data", ['\ufeff{"a": 1}', b'{"a": NaN}', b'[Infinity]', b'{"a": \xff}', b"", b"{", "[1,]"])
def test_loads_refuses_what_json_loads_refuses(data: str | bytes) -> None:
    with pytest.raises(ValueError):
        json.loads(data, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
    with pytest.raises(RpcError) as info:
        rpc.loads(data)
    assert info.value.code == rpc.PARSE_ERROR and info.value.message.startswith("Parse error: ")
