"""The official MCP Inspector CLI (@modelcontextprotocol/inspector 2.12.0 ``--cli``) against a stdio
server on ``cairn_servers.mcp`` (the conformance fixture server), asserting the JSON the Inspector prints."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
NODE_BIN = REPO / ".tools" / "node" / "node_modules" / ".bin"
INSPECTOR = NODE_BIN / "mcp-inspector"
FIXTURE = Path(__file__).resolve().parent / "conformance_server.py"

pytestmark = [
    pytest.mark.node,
    pytest.mark.skipif(not (NODE_BIN / "node").exists() or not INSPECTOR.exists(),
                       reason=f"project-local Node tools missing ({NODE_BIN}); run `make test` to install them"),
    pytest.mark.timeout(90),
]


def inspect(*args: str, expect_rc: int = 0) -> Any:
    """Run ``mcp-inspector --cli`` against the fixture server over stdio; return its parsed stdout."""
    env = dict(os.environ, PATH=f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    cmd = [str(INSPECTOR), "--cli", sys.executable, str(FIXTURE), "stdio", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=45, env=env, cwd=REPO)
    assert proc.returncode == expect_rc, (
        f"inspector exited {proc.returncode} (expected {expect_rc})\nstdout: {proc.stdout}\nstderr: {proc.stderr}")
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"inspector printed no single JSON document:\n{proc.stdout}\nstderr: {proc.stderr}")


def test_tools_list_names_every_fixture_tool_with_its_schema() -> None:
    out = inspect("--method", "tools/list")
    tools = {t["name"]: t for t in out["tools"]}
    assert {"test_simple_text", "test_image_content", "test_tool_with_progress", "test_sampling",
            "test_elicitation", "json_schema_2020_12_tool"} <= set(tools)
    assert tools["test_simple_text"]["description"] == "Returns simple text content"
    assert tools["test_simple_text"]["inputSchema"] == {"type": "object", "properties": {}}
    assert tools["test_sampling"]["inputSchema"]["required"] == ["prompt"]
    # JSON Schema 2020-12 keywords survive the listing untouched.
    schema = tools["json_schema_2020_12_tool"]["inputSchema"]
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["additionalProperties"] is False
    assert schema["properties"]["address"] == {"$ref": "#/$defs/address"}


def test_tools_call_returns_text_and_image_content() -> None:
    out = inspect("--method", "tools/call", "--tool-name", "test_simple_text")
    assert out["content"] == [{"type": "text", "text": "This is a simple text response for testing."}]
    assert out.get("isError", False) is False

    out = inspect("--method", "tools/call", "--tool-name", "test_image_content")
    (block,) = out["content"]
    assert block["type"] == "image" and block["mimeType"] == "image/png"
    assert base64.b64decode(block["data"]).startswith(b"\x89PNG\r\n\x1a\n")


def test_tools_call_with_arguments_and_a_failing_tool() -> None:
    out = inspect("--method", "tools/call", "--tool-name", "json_schema_2020_12_tool", "--tool-arg", "name=Ada")
    assert out["content"] == [{"type": "text", "text": 'Received: {"name": "Ada"}'}]

    # An isError result is still printed as JSON on stdout; the Inspector exits 5 for it.
    out = inspect("--method", "tools/call", "--tool-name", "test_error_handling", expect_rc=5)
    assert out["isError"] is True
    assert out["content"][0]["text"] == "This tool intentionally returns an error for testing"


def test_resources_read_text_blob_and_template() -> None:
    out = inspect("--method", "resources/read", "--uri", "test://static-text")
    assert out["contents"] == [{"uri": "test://static-text", "mimeType": "text/plain",
                                "text": "This is the content of the static text resource."}]

    out = inspect("--method", "resources/read", "--uri", "test://static-binary")
    (item,) = out["contents"]
    assert item["uri"] == "test://static-binary" and item["mimeType"] == "image/png"
    assert base64.b64decode(item["blob"]).startswith(b"\x89PNG")

    out = inspect("--method", "resources/read", "--uri", "test://template/abc42/data")
    (item,) = out["contents"]
    assert item["uri"] == "test://template/abc42/data"
    assert json.loads(item["text"]) == {"id": "abc42", "templateTest": True, "data": "Data for ID: abc42"}


def test_prompts_get_substitutes_arguments() -> None:
    out = inspect("--method", "prompts/get", "--prompt-name", "test_prompt_with_arguments",
                  "--prompt-args", "arg1=hello", "arg2=world")
    assert out["messages"] == [{"role": "user", "content": {
        "type": "text", "text": "Prompt with arguments: arg1='hello', arg2='world'"}}]

    out = inspect("--method", "prompts/get", "--prompt-name", "test_prompt_with_image")
    assert [m["content"]["type"] for m in out["messages"]] == ["image", "text"]


def inspect_error(*args: str) -> dict[str, Any]:
    """Run a call the server must refuse with a JSON-RPC error; return the Inspector's error envelope."""
    env = dict(os.environ, PATH=f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    cmd = [str(INSPECTOR), "--cli", sys.executable, str(FIXTURE), "stdio", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=45, env=env, cwd=REPO)
    assert proc.returncode == 1, f"expected exit 1, got {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    assert proc.stdout.strip() == "", f"a refused call printed a result: {proc.stdout}"
    envelopes = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith('{"error"')]
    assert envelopes, f"no error envelope on stderr:\n{proc.stderr}"
    error: dict[str, Any] = envelopes[-1]["error"]
    return error


def test_invalid_arguments_and_unknown_resource_are_protocol_errors() -> None:
    # Arguments are validated against inputSchema before the handler runs; the message names the field.
    assert "prompt" in inspect_error("--method", "tools/call", "--tool-name", "test_sampling")["message"]
    assert "test://nope" in inspect_error("--method", "resources/read", "--uri", "test://nope")["message"]


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.parametrize("stateless", [False, True], ids=["stateful", "stateless"])
def test_inspector_over_streamable_http(tmp_path: Path, stateless: bool) -> None:
    import socket
    import time

    port = _free_port()
    log = tmp_path / "server.log"
    cmd = [sys.executable, str(FIXTURE), "http", "--port", str(port)] + (["--stateless"] if stateless else [])
    with log.open("wb") as fh:
        server = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        deadline = time.monotonic() + 20
        while True:  # readiness by TCP connect, never by a GET that could open an endless SSE stream
            assert server.poll() is None, f"server exited {server.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"server never listened:\n{log.read_text()}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        env = dict(os.environ, PATH=f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
        url = f"http://127.0.0.1:{port}/mcp"

        def run(*args: str) -> Any:
            proc = subprocess.run([str(INSPECTOR), "--cli", url, *args], capture_output=True, text=True,
                                  timeout=45, env=env, cwd=REPO)
            assert proc.returncode == 0, f"stdout: {proc.stdout}\nstderr: {proc.stderr}\nserver: {log.read_text()}"
            return json.loads(proc.stdout)

        out = run("--method", "tools/call", "--tool-name", "test_multiple_content_types")
        assert [b["type"] for b in out["content"]] == ["text", "image", "resource"]
        assert json.loads(out["content"][2]["resource"]["text"]) == {"test": "data", "value": 123}
        out = run("--method", "resources/templates/list")
        assert out["resourceTemplates"] == [{"name": "template-data", "uriTemplate": "test://template/{id}/data",
                                             "description": "Data for one id", "mimeType": "application/json"}]
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
