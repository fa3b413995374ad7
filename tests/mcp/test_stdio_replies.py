"""Replies on the stdio transport: one ``os.write`` per line, structured results serialized once (the
text block's JSON spliced in as structuredContent), and the strict request parser built once (h-stdio)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from cairn_servers.mcp import jsonrpc as rpc
from cairn_servers.mcp.jsonrpc import JsonText, RpcError

SERVER = r'''
import sys
from cairn_servers.mcp.server import Server
from cairn_servers.mcp.stdio import serve_stdio

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


def _spliced_before(message: Any) -> str | None:
    """cairn_servers.mcp.jsonrpc._spliced as it was before h-blzfind (5eda24d): the text block went through the encoder."""
    result = message.get("result")
    if type(result) is not dict:
        return None
    structured = result.get("structuredContent")
    content = result.get("content")
    if structured is None or type(content) is not list:
        return None
    for block in content:
        text = block.get("text") if type(block) is dict else None
        if type(text) is JsonText and text.value is structured:
            break
    else:
        return None
    head = {k: v for k, v in message.items() if k != "result"}
    rest = {k: v for k, v in result.items() if k != "structuredContent"}
    if not head or not rest:
        return None
    compact = _compact_before
    return compact(head)[:-1] + ',"result":' + compact(rest)[:-1] + ',"structuredContent":' + text + "}}"


def _compact_before(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _encode_before(message: Any) -> bytes:
    text = (_spliced_before(message) if type(message) is dict else None) or _compact_before(message)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(message, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii")


def test_spliced_replies_match_the_encoder_on_generated_messages() -> None:
    """The text block's JSON string is made by escaping quotes and backslashes (from the UTF-8 bytes in
    encode), not by the encoder: byte for byte what the encoder made, on texts with quotes, backslashes,
    control characters, non-ASCII, lone surrogates, and the splice's own marker elsewhere in the message."""
    import random

    assert rpc._MARK_JSON == json.dumps(rpc._MARK) == _compact_before(rpc._MARK)
    rng = random.Random(16)
    pieces = ["a", "\"", "\\", "\\\"", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "…", "\u2028", "😀", "\ud800", " ",
              "{", "}", ":", ",", rpc._MARK, "\\u0000"]
    for n in range(3000):
        value: dict[str, Any] = {"s": "".join(rng.choice(pieces) for _ in range(rng.randint(0, 8))), "n": n}
        body = json.dumps(value, ensure_ascii=False, allow_nan=False)
        edited = rng.random() < 0.3
        if edited:  # a JsonText whose text is not exactly the encoder's (a scrubbed one may differ)
            body = body.replace("a", rng.choice(pieces))
        # The encoder's own text is quoted without looking for control characters.
        blocks: list[Any] = [{"type": "text", "text": JsonText(body, value, from_encoder=not edited and rng.random() < 0.7)}]
        if rng.random() < 0.3:
            blocks.insert(rng.randint(0, 1), {"type": "text", "text": rng.choice(pieces) * rng.randint(0, 3)})
        result: dict[str, Any] = {"content": blocks, "structuredContent": value}
        if rng.random() < 0.3:
            result["isError"] = False
        if rng.random() < 0.2:
            result["_meta"] = {"m": rng.choice(pieces)}
        ids: list[str | int] = [7, "id-\"x\"", rpc._MARK]
        request_id = rng.choice(ids)
        message = rpc.response(request_id, result)
        if rng.random() < 0.1:
            message = dict(reversed(message.items()))
        assert rpc.encode(message) == _encode_before(message), message
        assert rpc.dumps(message).encode() == _encode_before(message), message
