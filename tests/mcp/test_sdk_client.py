"""The official MCP Python SDK client (mcp 2.3.0) against the demo server on our core.

Over stdio (spawned subprocess) and Streamable HTTP (uvicorn on a free 127.0.0.1 port), stateless and
stateful: initialize, tools (text, structured, error, progress), resources, prompts, completion, logging.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any, Iterator

import mcp_types as t
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from cairn_servers.mcp.http import mcp_app

from ._demo_server import build
from ._http import serving

DEMO = Path(__file__).with_name("_demo_server.py")
# The SDK flags subscribe/setLevel as deprecated for its 2026-07-28 era; we speak 2025-11-25, where they are current.
pytestmark = pytest.mark.filterwarnings("ignore:.*(removed|deprecated) as of 2026")


@pytest.fixture(params=["stdio", "http-stateful", "http-stateless"])
def target(request: pytest.FixtureRequest) -> Iterator[tuple[str, Any]]:
    if request.param == "stdio":
        yield "stdio", StdioServerParameters(command=sys.executable, args=[str(DEMO)])
        return
    with serving(mcp_app(build(), stateless=request.param == "http-stateless")) as url:
        yield request.param, url


async def _exercise(kind: str, server: Any) -> None:
    logs: list[t.LoggingMessageNotificationParams] = []
    reports: list[tuple[float, float | None, str | None]] = []

    async def on_log(params: t.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total, message))

    async def sampling(context: Any, params: Any) -> t.CreateMessageResult:
        return t.CreateMessageResult(role="assistant", content=t.TextContent(type="text", text="sampled"), model="m")

    async with Client(server, logging_callback=on_log, sampling_callback=sampling, cache=None) as client:
        assert client.protocol_version == "2025-11-25"
        assert client.server_info is not None and client.server_info.name == "demo"
        assert client.instructions == "A demo of the MCP core."
        caps = client.server_capabilities
        assert caps.tools is not None and caps.resources is not None and caps.resources.subscribe
        assert caps.prompts is not None and caps.completions is not None and caps.logging is not None

        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert tools["add"].output_schema is not None and tools["add"].title == "Adder"
        assert tools["echo"].annotations is not None and tools["echo"].annotations.read_only_hint is True

        res = await client.call_tool("echo", {"text": "hello"})
        assert not res.is_error and isinstance(res.content[0], t.TextContent) and res.content[0].text == "hello"
        res = await client.call_tool("add", {"a": 20, "b": 22})
        assert res.structured_content == {"sum": 42}
        res = await client.call_tool("fail", {})
        assert res.is_error and isinstance(res.content[0], t.TextContent)
        assert res.content[0].text == "The widget is broken. Use another widget."
        with pytest.raises(MCPError) as exc:
            await client.call_tool("add", {"a": 1, "b": 99})
        assert exc.value.error.code == -32602 and exc.value.error.message == "b: 99 is greater than the maximum of 50"
        res = await client.call_tool("media", {})
        assert [type(c).__name__ for c in res.content] == [
            "TextContent", "ImageContent", "AudioContent", "EmbeddedResource", "ResourceLink"]

        res = await client.call_tool("slow", {"steps": 3}, progress_callback=on_progress)
        assert res.content[0].text == "done after 3 steps"  # type: ignore[union-attr]
        assert reports == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]

        if kind != "http-stateless":  # logging/setLevel is per session; stateless has none to remember it
            await client.set_logging_level("warning")
        await client.call_tool("shout", {"levels": ["debug", "info", "warning", "error"]})
        expected = ["warning", "error"] if kind != "http-stateless" else ["info", "warning", "error"]
        assert [entry.level for entry in logs] == expected
        assert logs[-1].data == {"msg": "at error"} and logs[-1].logger == "demo"

        res = await client.call_tool("ask", {"prompt": "?"})
        if kind == "http-stateless":
            assert res.is_error and "stateful mode" in res.content[0].text  # type: ignore[union-attr]
        else:
            assert res.content[0].text == "client said: sampled"  # type: ignore[union-attr]

        resources = (await client.list_resources()).resources
        assert [str(r.uri) for r in resources] == ["demo://note", "demo://logo"]
        templates = (await client.list_resource_templates()).resource_templates
        assert templates[0].uri_template == "demo://colors/{name}"
        contents = (await client.read_resource("demo://colors/blue")).contents
        assert isinstance(contents[0], t.TextResourceContents) and contents[0].text == "color blue"
        blob = (await client.read_resource("demo://logo")).contents[0]
        assert isinstance(blob, t.BlobResourceContents) and blob.mime_type == "image/png"
        with pytest.raises(MCPError) as exc:
            await client.read_resource("demo://colors/mauve")
        assert exc.value.error.code == -32602
        await client.subscribe_resource("demo://note")
        await client.unsubscribe_resource("demo://note")

        prompts = (await client.list_prompts()).prompts
        assert [p.name for p in prompts] == ["greet", "pair"]
        got = await client.get_prompt("greet", {"who": "Ada"})
        assert got.messages[0].role == "user" and got.messages[0].content.text == "Say hello to Ada"  # type: ignore[union-attr]
        with pytest.raises(MCPError):
            await client.get_prompt("greet", {})

        done = await client.complete(t.PromptReference(type="ref/prompt", name="greet"), {"name": "style", "value": "r"})
        assert done.completion.values == ["red", "rebeccapurple", "rose"] and done.completion.total == 3
        done = await client.complete(t.ResourceTemplateReference(type="ref/resource", uri="demo://colors/{name}"),
                                     {"name": "name", "value": "g"})
        assert done.completion.values == ["green"]


def test_official_sdk_client(target: tuple[str, Any]) -> None:
    kind, server = target
    asyncio.run(asyncio.wait_for(_exercise(kind, server), 60))
