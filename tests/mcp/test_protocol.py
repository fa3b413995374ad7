"""The transport-neutral protocol core: JSON-RPC framing, lifecycle, tools, resources, prompts, schema."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from cairn_servers.mcp import jsonrpc as rpc
from cairn_servers.mcp.schema import SchemaError, validate
from cairn_servers.mcp.server import Server, ToolContext
from cairn_servers.mcp.session import Session

from ._demo_server import COLORS, build

INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}


def req(method: str, params: dict[str, Any] | None = None, id: Any = 1) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def ready(server: Server | None = None, version: str = "2025-11-25") -> Session:
    session = (server or build()).open_session()
    reply = session.handle(req("initialize", {**INIT, "protocolVersion": version}))
    assert isinstance(reply, dict) and "result" in reply
    session.handle({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return session


def result(session: Session, method: str, params: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    reply = session.handle(req(method, params), **kw)
    assert isinstance(reply, dict) and "result" in reply, reply
    return reply["result"]  # type: ignore[no-any-return]


def error(session: Session, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    reply = session.handle(req(method, params))
    assert isinstance(reply, dict) and "error" in reply, reply
    return reply["error"]  # type: ignore[no-any-return]


# -- framing -----------------------------------------------------------------------------------

@pytest.mark.parametrize("raw,code", [
    (b"{bad json", rpc.PARSE_ERROR),
    (b'{"jsonrpc":"2.0","id":1,"method":"ping","params":NaN}', rpc.PARSE_ERROR),
    (b"\xff\xfe", rpc.PARSE_ERROR),
    (b"1" * 5000, rpc.PARSE_ERROR),
    (b"[" * 100000, rpc.PARSE_ERROR),
    (b'"just a string"', rpc.INVALID_REQUEST),
    (b'{"jsonrpc":"1.0","id":1,"method":"ping"}', rpc.INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":1,"method":5}', rpc.INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', rpc.INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":true,"method":"ping"}', rpc.INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', rpc.INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":1,"method":"ping","params":3}', rpc.INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}', rpc.INVALID_PARAMS),
    (b'{"jsonrpc":"2.0","id":1,"method":"nope/nothing"}', rpc.METHOD_NOT_FOUND),
    (b"[]", rpc.INVALID_REQUEST),
])
def test_framing_errors_are_well_formed(raw: bytes, code: int) -> None:
    session = ready()
    reply = session.handle_raw(raw)
    assert isinstance(reply, dict)
    assert reply["jsonrpc"] == "2.0" and reply["error"]["code"] == code
    assert isinstance(reply["error"]["message"], str) and reply["error"]["message"]
    if code in (rpc.PARSE_ERROR,):
        assert reply["id"] is None
    rpc.dumps(reply)  # serializable
    assert result(session, "ping") == {}  # and the session keeps serving


def test_invalid_request_echoes_a_valid_id() -> None:
    reply = ready().handle_raw(b'{"jsonrpc":"2.0","id":"abc","method":"ping","params":"x"}')
    assert reply == {"jsonrpc": "2.0", "id": "abc", "error": {"code": -32600, "message": 'Invalid request: "params" must be an object'}}


def test_huge_integer_id_round_trips() -> None:
    big = 10**300
    reply = ready().handle_raw(rpc.dumps(req("ping", id=big)))
    assert reply == {"jsonrpc": "2.0", "id": big, "result": {}}


def test_batches_rejected_for_modern_versions_and_accepted_for_2025_03_26() -> None:
    modern = ready(version="2025-06-18")
    reply = modern.handle([req("ping", id=1), req("ping", id=2)])
    assert isinstance(reply, dict) and reply["error"]["code"] == rpc.INVALID_REQUEST and reply["id"] is None
    assert "2025-06-18" in reply["error"]["message"]
    legacy = ready(version="2025-03-26")
    replies = legacy.handle([req("ping", id=1), {"jsonrpc": "2.0", "method": "notifications/x"}, req("nope", id=2)])
    assert isinstance(replies, list)
    assert [r["id"] for r in replies] == [1, 2]
    assert replies[0]["result"] == {} and replies[1]["error"]["code"] == rpc.METHOD_NOT_FOUND


# -- lifecycle ---------------------------------------------------------------------------------

@pytest.mark.parametrize("asked,got", [
    ("2025-11-25", "2025-11-25"), ("2025-06-18", "2025-06-18"), ("2025-03-26", "2025-03-26"),
    ("2024-11-05", "2024-11-05"), ("1999-01-01", "2025-11-25"), ("2026-07-28", "2025-11-25"),
])
def test_version_negotiation(asked: str, got: str) -> None:
    session = build().open_session()
    res = result(session, "initialize", {**INIT, "protocolVersion": asked})
    assert res["protocolVersion"] == got
    assert res["serverInfo"] == {"name": "demo", "version": "1.0.0", "title": "Cairn demo"}
    assert res["instructions"] == "A demo of the MCP core."
    assert set(res["capabilities"]) == {"logging", "tools", "resources", "prompts", "completions"}
    assert len(rpc.dumps(res)) <= 512


def test_requests_before_initialize_are_refused_but_ping_works() -> None:
    session = build().open_session()
    assert result(session, "ping") == {}
    err = error(session, "tools/list")
    assert err["code"] == rpc.INVALID_REQUEST and "initialize" in err["message"]
    assert error(session, "server/discover")["code"] == rpc.METHOD_NOT_FOUND
    assert error(session, "initialize", {"capabilities": {}})["code"] == rpc.INVALID_PARAMS


def test_minimal_server_capabilities_are_small() -> None:
    server = Server("tiny", "0.1")
    res = result(server.open_session(), "initialize", INIT)
    assert res == {"protocolVersion": "2025-11-25", "capabilities": {"logging": {}},
                   "serverInfo": {"name": "tiny", "version": "0.1"}}


def test_a_tool_reads_what_the_client_negotiated_from_its_context() -> None:
    """``ctx.session`` (docs/mcp-core.md) gives a handler the client's info, capabilities and protocol
    version; typed by ``context.Channel`` now that the context no longer imports the session (mypy over
    this file checks the three stay on it)."""
    server = Server("s", "1")

    @server.tool("who")
    def who(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        session = ctx.session
        return {"client": session.client_info.get("name"), "caps": sorted(session.client_capabilities),
                "version": session.protocol_version}

    session = server.open_session()
    result(session, "initialize", {**INIT, "protocolVersion": "2025-06-18", "capabilities": {"roots": {}}})
    res = result(session, "tools/call", {"name": "who"})
    assert res["content"][0]["text"] == '{"client": "t", "caps": ["roots"], "version": "2025-06-18"}'


# -- tools -------------------------------------------------------------------------------------

def test_tools_list_describes_each_tool_once() -> None:
    tools = {t["name"]: t for t in result(ready(), "tools/list")["tools"]}
    assert tools["add"]["title"] == "Adder"
    assert tools["add"]["outputSchema"]["required"] == ["sum"]
    assert tools["echo"]["annotations"] == {"readOnlyHint": True}
    assert tools["fail"]["inputSchema"] == {"type": "object", "properties": {}}
    assert "outputSchema" not in tools["echo"]


def test_tools_list_pagination_and_bad_cursor() -> None:
    server = build(page_size=4, extra_tools=7)
    session = ready(server)
    names: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = result(session, "tools/list", {"cursor": cursor} if cursor else {})
        names += [t["name"] for t in page["tools"]]
        pages += 1
        cursor = page.get("nextCursor")
        if not cursor:
            break
    assert names == list(server.tools) and len(names) > 12
    assert pages == -(-len(names) // 4)
    for bad in ("garbage!", "", 5, "cHJvbXB0czo0"):  # the last is a valid prompts cursor, not a tools one
        err = error(session, "tools/list", {"cursor": bad})
        assert err["code"] == rpc.INVALID_PARAMS and "cursor" in err["message"]


def test_tools_call_text_structured_and_errors() -> None:
    session = ready()
    assert result(session, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}) == \
        {"content": [{"type": "text", "text": "hi"}]}
    added = result(session, "tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}})
    assert added["structuredContent"] == {"sum": 5} and added["content"][0]["type"] == "text"
    failed = result(session, "tools/call", {"name": "fail"})
    assert failed == {"content": [{"type": "text", "text": "The widget is broken. Use another widget."}], "isError": True}
    crashed = result(session, "tools/call", {"name": "crash"})
    assert crashed["isError"] is True and "boom" in crashed["content"][0]["text"]
    assert result(session, "tools/call", {"name": "later"})["structuredContent"] == {"async": True}


def test_raise_errors_switch_surfaces_tool_bugs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_RAISE_ERRORS", "1")
    session = ready()
    assert error(session, "tools/call", {"name": "crash"}) == {"code": rpc.INTERNAL_ERROR, "message": "Internal error: RuntimeError: boom"}
    assert result(session, "tools/call", {"name": "fail"})["isError"] is True  # CairnErrors stay tool errors


@pytest.mark.parametrize("args,message", [
    ({"a": 1, "b": 99}, "b: 99 is greater than the maximum of 50"),
    ({"a": 1}, "b: is required"),
    ({"a": "1", "b": 2}, "a: expected integer, got string"),
    ({"a": True, "b": 2}, "a: expected integer, got boolean"),
    ({"a": 1.5, "b": 2}, "a: expected integer, got number"),
])
def test_tools_call_validates_arguments_before_the_handler(args: dict[str, Any], message: str) -> None:
    err = error(ready(), "tools/call", {"name": "add", "arguments": args})
    assert err["code"] == rpc.INVALID_PARAMS and err["message"] == message


def test_tools_call_unknown_tool_and_bad_arguments() -> None:
    session = ready()
    err = error(session, "tools/call", {"name": "nope"})
    assert err["code"] == rpc.INVALID_PARAMS and err["message"] == "Unknown tool: 'nope'"
    assert error(session, "tools/call", {"name": "echo", "arguments": [1]})["code"] == rpc.INVALID_PARAMS
    assert error(session, "tools/call", {"arguments": {}})["code"] == rpc.INVALID_PARAMS
    err = error(session, "tools/call", {"name": "echo", "arguments": {"text": "x", "extra": 1}})
    assert err["message"] == "extra: is not an allowed property (allowed: text)"


def test_output_schema_violation_is_a_tool_error() -> None:
    server = Server("s", "1")

    @server.tool(output_schema={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    def bad(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        return {"n": "not a number"}

    res = result(ready(server), "tools/call", {"name": "bad"})
    assert res["isError"] is True and "n: expected integer, got string" in res["content"][0]["text"]


def test_every_content_type() -> None:
    res = result(ready(), "tools/call", {"name": "media"})
    assert [c["type"] for c in res["content"]] == ["text", "image", "audio", "resource", "resource_link"]
    assert res["content"][1]["mimeType"] == "image/png"
    assert res["content"][3]["resource"] == {"uri": "demo://note", "mimeType": "text/plain", "text": "a note"}
    assert res["content"][4] == {"type": "resource_link", "uri": "demo://colors/red", "name": "red", "mimeType": "text/plain"}


def test_progress_and_logging_notifications_follow_set_level() -> None:
    session = ready()
    sent: list[dict[str, Any]] = []
    result(session, "tools/call", {"name": "slow", "arguments": {"steps": 2}, "_meta": {"progressToken": 7}}, send=sent.append)
    assert [m["params"]["progress"] for m in sent] == [1, 2]
    assert all(m["method"] == "notifications/progress" and m["params"]["progressToken"] == 7 for m in sent)
    sent.clear()
    result(session, "tools/call", {"name": "slow", "arguments": {"steps": 2}}, send=sent.append)
    assert sent == []  # no progressToken, no progress
    result(session, "tools/call", {"name": "shout", "arguments": {"levels": ["debug", "info", "error"]}}, send=sent.append)
    assert [m["params"]["level"] for m in sent] == ["info", "error"]  # default threshold: info
    assert result(session, "logging/setLevel", {"level": "error"}) == {}
    sent.clear()
    result(session, "tools/call", {"name": "shout", "arguments": {"levels": ["debug", "warning", "critical"]}}, send=sent.append)
    assert [m["params"] for m in sent] == [{"level": "critical", "data": {"msg": "at critical"}, "logger": "demo"}]
    assert error(session, "logging/setLevel", {"level": "loud"})["code"] == rpc.INVALID_PARAMS


def test_cancellation_stops_the_handler_and_suppresses_the_reply() -> None:
    session = ready()
    replies: list[Any] = []
    worker = threading.Thread(target=lambda: replies.append(session.handle(
        req("tools/call", {"name": "slow", "arguments": {"steps": 50, "delay": 0.1}}, id="c1"))))
    worker.start()
    time.sleep(0.15)
    session.handle({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "c1", "reason": "user"}})
    worker.join(5)
    assert not worker.is_alive() and replies == [None]
    assert result(session, "ping") == {}


def test_server_to_client_request_round_trip() -> None:
    session = ready()
    outgoing: list[dict[str, Any]] = []

    def client(msg: dict[str, Any]) -> None:
        outgoing.append(msg)
        if "id" in msg:  # answer the sampling request from "the client", on another thread
            threading.Thread(target=session.handle, args=({"jsonrpc": "2.0", "id": msg["id"], "result": {
                "role": "assistant", "content": {"type": "text", "text": "pong"}, "model": "m"}},)).start()

    res = result(session, "tools/call", {"name": "ask", "arguments": {"prompt": "ping?"}}, send=client)
    assert res == {"content": [{"type": "text", "text": "client said: pong"}]}
    assert outgoing[0]["method"] == "sampling/createMessage"


def test_stateless_session_cannot_send_requests_to_the_client() -> None:
    session = build().open_session(stateless=True)
    res = result(session, "tools/call", {"name": "ask"})
    assert res["isError"] is True and "stateful mode" in res["content"][0]["text"]


# -- resources, prompts, completion ------------------------------------------------------------

def test_resources_list_read_templates_and_not_found() -> None:
    session = ready()
    assert [r["uri"] for r in result(session, "resources/list")["resources"]] == ["demo://note", "demo://logo"]
    assert result(session, "resources/templates/list")["resourceTemplates"] == [
        {"uriTemplate": "demo://colors/{name}", "name": "color", "description": "A color by name.", "mimeType": "text/plain"}]
    assert result(session, "resources/read", {"uri": "demo://note"})["contents"] == [
        {"uri": "demo://note", "mimeType": "text/plain", "text": "a note"}]
    blob = result(session, "resources/read", {"uri": "demo://logo"})["contents"][0]
    assert blob["mimeType"] == "image/png" and blob["blob"].startswith("iVBOR")
    assert result(session, "resources/read", {"uri": "demo://colors/blue"})["contents"][0]["text"] == "color blue"
    err = error(session, "resources/read", {"uri": "demo://colors/mauve"})
    assert err["code"] == rpc.INVALID_PARAMS and err["message"].startswith("No color named 'mauve'")
    err = error(session, "resources/read", {"uri": "demo://missing"})
    assert err == {"code": rpc.INVALID_PARAMS, "message": "Resource not found: demo://missing", "data": {"uri": "demo://missing"}}


def test_subscribe_and_updated_notifications() -> None:
    server = build()
    sent: list[dict[str, Any]] = []
    session = server.open_session(send=sent.append)
    session.handle(req("initialize", INIT))
    assert result(session, "resources/subscribe", {"uri": "demo://note"}) == {}
    assert server.notify_resource_updated("demo://note") == 1
    assert server.notify_resource_updated("demo://logo") == 0
    assert sent == [{"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "demo://note"}}]
    result(session, "resources/unsubscribe", {"uri": "demo://note"})
    assert server.notify_resource_updated("demo://note") == 0


def test_prompts_list_get_and_errors() -> None:
    session = ready()
    prompts = result(session, "prompts/list")["prompts"]
    assert prompts[0] == {"name": "greet", "description": "Greet someone.",
                          "arguments": [{"name": "who", "required": True}, {"name": "style"}]}
    got = result(session, "prompts/get", {"name": "greet", "arguments": {"who": "Ann", "style": "warm"}})
    assert got == {"description": "Greet someone.", "messages": [
        {"role": "user", "content": {"type": "text", "text": "Say hello to Ann in a warm way"}}]}
    assert [m["role"] for m in result(session, "prompts/get", {"name": "pair"})["messages"]] == ["user", "assistant"]
    err = error(session, "prompts/get", {"name": "greet"})
    assert err["code"] == rpc.INVALID_PARAMS and err["message"] == "Missing required argument 'who' for prompt 'greet'"
    assert error(session, "prompts/get", {"name": "nope"})["message"] == "Unknown prompt: 'nope'"
    assert error(session, "prompts/get", {"name": "greet", "arguments": {"who": 3}})["code"] == rpc.INVALID_PARAMS


def test_prompt_validate_hook_gives_the_servers_own_message() -> None:
    """A prompt may check its arguments itself (ctx's agents do, with the message their CLI and HTTP
    surfaces give): its InvalidInput is a -32602 error carrying that message, before the handler runs."""
    from cairn_servers.core.errors import InvalidInput
    from cairn_servers.mcp.server import Prompt

    ran: list[dict[str, Any]] = []

    def check(args: Any) -> None:
        if not isinstance(args, dict) or set(args) != {"topic"}:
            raise InvalidInput("Agent 'a': give exactly 'topic'.")

    def handler(args: dict[str, str]) -> str:
        ran.append(args)
        return f"About {args['topic']}"

    server = Server("s", "1")
    server.add_prompt(Prompt("a", handler, description="A.",
                             arguments=[{"name": "topic", "required": True}], validate=check))
    with pytest.raises(ValueError, match="already declared"):
        server.add_prompt(Prompt("a", lambda args: ""))
    session = ready(server)
    assert session.server.capabilities()["prompts"] == {}
    err = error(session, "prompts/get", {"name": "a", "arguments": {"topic": "x", "extra": "y"}})
    assert err["code"] == rpc.INVALID_PARAMS and err["message"] == "Agent 'a': give exactly 'topic'."
    assert error(session, "prompts/get", {"name": "a"})["message"] == "Agent 'a': give exactly 'topic'."
    assert ran == []
    assert result(session, "prompts/get", {"name": "a", "arguments": {"topic": "x"}}) == {
        "description": "A.", "messages": [{"role": "user", "content": {"type": "text", "text": "About x"}}]}
    assert ran == [{"topic": "x"}]
    assert "prompts" not in Server("t", "1").capabilities()


def test_completion() -> None:
    session = ready()
    got = result(session, "completion/complete", {"ref": {"type": "ref/resource", "uri": "demo://colors/{name}"},
                                                   "argument": {"name": "name", "value": "r"}})
    assert got == {"completion": {"values": [c for c in COLORS if c.startswith("r")], "total": 3, "hasMore": False}}
    assert error(session, "completion/complete", {"ref": {"type": "ref/prompt", "name": "nope"},
                                                  "argument": {"name": "x", "value": ""}})["code"] == rpc.INVALID_PARAMS
    assert error(session, "completion/complete", {"ref": "x", "argument": {}})["code"] == rpc.INVALID_PARAMS
    assert error(Server("s", "1").open_session(stateless=True), "completion/complete", {})["code"] == rpc.METHOD_NOT_FOUND


# -- schema ------------------------------------------------------------------------------------

@pytest.mark.parametrize("schema,value,message", [
    ({"type": "integer"}, True, "expected integer, got boolean"),
    ({"type": "number"}, "1", "expected number, got string"),
    ({"type": ["string", "null"]}, 3, "expected string or null, got integer"),
    ({"enum": ["a", 1]}, True, 'true is not one of "a", 1'),
    ({"const": 1}, True, "must be 1"),
    ({"exclusiveMinimum": 0}, 0, "0 must be greater than 0"),
    ({"exclusiveMaximum": 1}, 1.0, "1.0 must be less than 1"),
    ({"minLength": 2}, "a", '"a" is shorter than 2 characters'),
    ({"pattern": "^a+$"}, "ab", "\"ab\" does not match the pattern '^a+$'"),
    ({"items": {"type": "string"}}, ["a", 2], "[1]: expected string, got integer"),
    ({"minItems": 2}, [1], "has 1 items, fewer than the minimum of 2"),
    ({"maxItems": 1}, [1, 2], "has 2 items, more than the maximum of 1"),
    ({"uniqueItems": True}, [1, {"a": 1}, {"a": 1}], "items 1 and 2 are equal; items must be unique"),
    ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, 1.5, "1.5 matches none of the allowed forms (expected string, got number)"),
    ({"oneOf": [{"type": "number"}, {"type": "integer"}]}, 1, "1 matches more than one of the exclusive forms (oneOf)"),
    ({"allOf": [{"type": "integer"}, {"minimum": 5}]}, 4, "4 is less than the minimum of 5"),
    ({"properties": {"a": {"properties": {"b": {"type": "string"}}}}}, {"a": {"b": 1}}, "a.b: expected string, got integer"),
    ({"$defs": {"n": {"type": "integer"}}, "properties": {"x": {"$ref": "#/$defs/n"}}}, {"x": "s"}, "x: expected integer, got string"),
])
def test_schema_violations_name_the_field(schema: dict[str, Any], value: Any, message: str) -> None:
    with pytest.raises(SchemaError) as exc:
        validate(value, schema)
    assert str(exc.value) == message


@pytest.mark.parametrize("schema,value", [
    ({"type": "integer"}, 3.0), ({"type": "number"}, 3), ({"type": "null"}, None),
    ({"type": "object", "default": 5}, {}), ({"uniqueItems": True}, [1, True, "1"]),
    ({"enum": [1]}, 1.0), ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, 1),
    ({"additionalProperties": {"type": "integer"}, "properties": {"a": {"type": "string"}}}, {"a": "x", "b": 2}),
])
def test_schema_accepts_valid_values(schema: dict[str, Any], value: Any) -> None:
    validate(value, schema)
