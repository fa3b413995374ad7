"""One error envelope: HTTP (brk, ctx, the host guard) and MCP tool errors all show ``public_error(exc)``."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest

from cairn_servers.core.errors import CairnError, InvalidInput, NotFound, envelope, public_error, raise_errors
from cairn_servers.core import sanitize
from cairn_servers.core.sanitize import register_root

HOME = os.path.expanduser("~")


@pytest.fixture
def data_root(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    # roots other tests registered (a blz server built in this process) stay as they were afterwards
    monkeypatch.setattr(sanitize, "_roots", dict(sanitize._roots))
    register_root(tmp_path, "<data>")
    return tmp_path


def test_public_error_is_the_scrubbed_dict(data_root: Any) -> None:
    exc = NotFound(f"No vec in {data_root}/vecs; see {HOME}/notes",
                   details={"parameter": "id", "path": f"{data_root}/x", "seen": [f"{HOME}/a"]})
    assert public_error(exc) == {"code": "not_found", "message": "No vec in <data>/vecs; see ~/notes",
                                 "details": {"parameter": "id", "path": "<data>/x", "seen": ["~/a"]}}
    assert envelope(exc) == {"error": public_error(exc)}
    assert public_error(InvalidInput("bad")) == {"code": "bad_request", "message": "bad"}  # no empty details
    assert exc.message.startswith(f"No vec in {data_root}")  # the exception itself is left as it was


def test_brk_and_ctx_http_answer_the_same_envelope(data_root: Any) -> None:
    from cairn_servers.brk.http import _error
    from cairn_servers.ctx.http import error_body

    exc = InvalidInput(f"{data_root}/manifest.json is damaged", details={"parameter": "from"})
    brk = _error(exc, {})
    assert brk.status_code == 400
    assert json.loads(bytes(brk.body)) == json.loads(error_body(exc)) == envelope(exc)
    assert "<data>/manifest.json" in json.loads(error_body(exc))["error"]["message"]


def test_the_host_guard_answers_the_same_envelope() -> None:
    from cairn_servers.core.serve import HostGuard

    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("a foreign Host must not reach the app")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    scope = {"type": "http", "headers": [(b"host", b"evil.example:80")]}
    asyncio.run(HostGuard(app)(scope, receive, send))
    assert sent[0]["status"] == 403
    body = json.loads(sent[1]["body"])
    assert body["error"]["code"] == "forbidden" and "'evil.example:80' is not allowed" in body["error"]["message"]
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}


def test_an_mcp_tool_error_shows_the_public_message(data_root: Any) -> None:
    from cairn_servers.mcp.server import Server, Tool

    def handler(args: dict[str, Any], ctx: Any) -> Any:
        raise NotFound(f"No document {data_root}/secret.md under {HOME}")

    server = Server(name="t", version="0")
    server.add_tool(Tool(name="boom", handler=handler, description="fails",
                         input_schema={"type": "object", "properties": {}}))
    session = server.open_session()
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    session.handle({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
    session.handle({"jsonrpc": "2.0", "method": "notifications/initialized"})
    reply = session.handle({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "boom"}})
    assert isinstance(reply, dict)
    result = reply["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"] == "No document <data>/secret.md under ~"


def test_cairn_error_base_is_internal() -> None:
    assert public_error(CairnError("x")) == {"code": "internal", "message": "x"}


@pytest.mark.parametrize(("value", "expected"), [
    (None, False), ("", False), ("0", False), ("false", False), ("no", False), ("1", True), ("yes", True)])
def test_one_re_raise_switch(monkeypatch: pytest.MonkeyPatch, value: str | None, expected: bool) -> None:
    if value is None:
        monkeypatch.delenv("CAIRN_RAISE_ERRORS", raising=False)
    else:
        monkeypatch.setenv("CAIRN_RAISE_ERRORS", value)
    assert raise_errors() is expected


def test_brk_cli_uses_the_same_switch(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    from cairn_servers.brk.cli import main

    monkeypatch.setenv("CAIRN_RAISE_ERRORS", "0")  # "0" means off, as for blz and ctx (brk re-raised on any value)
    assert main(["status", "--out", str(tmp_path / "empty")]) == 7
    assert "has no manifest.json" in capsys.readouterr().err
    monkeypatch.setenv("CAIRN_RAISE_ERRORS", "1")
    with pytest.raises(CairnError, match="has no manifest.json"):
        main(["status", "--out", str(tmp_path / "empty")])
