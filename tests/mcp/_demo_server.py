"""A demo server on the MCP core, used by the protocol, stdio, HTTP, SDK-client and fuzz tests.

Run as a script: ``python tests/mcp/_demo_server.py`` serves stdio;
``python tests/mcp/_demo_server.py --http PORT [--stateless]`` serves Streamable HTTP on 127.0.0.1.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # runnable as a file from the repo root without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from cairn_servers.core.errors import InvalidInput, NotFound
from cairn_servers.mcp import content
from cairn_servers.mcp.server import Server, ToolContext, ToolResult

PNG_1PX = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
WAV_B64 = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA="
COLORS = ["red", "green", "blue", "rebeccapurple", "rose"]


def build(page_size: int = 100, extra_tools: int = 0) -> Server:
    server = Server(name="demo", version="1.0.0", title="Cairn demo", instructions="A demo of the MCP core.",
                    page_size=page_size)

    @server.tool(description="Echo the text back.",
                 input_schema={"type": "object", "properties": {"text": {"type": "string", "maxLength": 1000}},
                               "required": ["text"], "additionalProperties": False},
                 annotations={"readOnlyHint": True})
    def echo(args: dict[str, Any], ctx: ToolContext) -> str:
        return str(args["text"])

    @server.tool(description="Add two integers.", title="Adder",
                 input_schema={"type": "object",
                               "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "maximum": 50}},
                               "required": ["a", "b"]},
                 output_schema={"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]})
    def add(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        return {"sum": args["a"] + args["b"]}

    @server.tool(description="Always fails with a clear message.")
    def fail(args: dict[str, Any], ctx: ToolContext) -> str:
        raise InvalidInput("The widget is broken. Use another widget.")

    @server.tool(description="Raises an unexpected exception.")
    def crash(args: dict[str, Any], ctx: ToolContext) -> str:
        raise RuntimeError("boom")

    @server.tool(description="Report progress in steps, then finish; stops early when cancelled.",
                 input_schema={"type": "object", "properties": {"steps": {"type": "integer", "minimum": 0, "maximum": 100},
                                                                "delay": {"type": "number", "minimum": 0}}})
    def slow(args: dict[str, Any], ctx: ToolContext) -> str:
        steps, delay = int(args.get("steps", 3)), float(args.get("delay", 0.0))
        for i in range(steps):
            if ctx.wait_cancelled(delay) if delay else ctx.cancelled:
                return "cancelled"
            ctx.progress(i + 1, steps, f"step {i + 1}")
        return f"done after {steps} steps"

    @server.tool(description="Log a message at each level given.",
                 input_schema={"type": "object", "properties": {"levels": {"type": "array", "items": {"type": "string"}}}})
    def shout(args: dict[str, Any], ctx: ToolContext) -> str:
        for level in args.get("levels", ["info"]):
            ctx.log(level, {"msg": f"at {level}"}, logger="demo")
        return "logged"

    @server.tool(description="Every content type at once.")
    def media(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult([
            content.text("hello"),
            content.image(PNG_1PX, "image/png"),
            content.audio(WAV_B64, "audio/wav"),
            content.embedded_resource("demo://note", text="a note", mime="text/plain"),
            content.resource_link("demo://colors/red", "red", mime="text/plain"),
        ])

    @server.tool(description="Ask the client to sample a message (a server-to-client request).",
                 input_schema={"type": "object", "properties": {"prompt": {"type": "string"}}})
    def ask(args: dict[str, Any], ctx: ToolContext) -> str:
        answer = ctx.request("sampling/createMessage", {
            "messages": [{"role": "user", "content": {"type": "text", "text": args.get("prompt", "hi")}}],
            "maxTokens": 20}, timeout=10)
        block = answer.get("content", {})
        return f"client said: {block.get('text', '')}"

    @server.tool(description="An async handler.", structured=True)
    async def later(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        import asyncio

        await asyncio.sleep(0)
        return {"async": True}

    @server.tool(description="Print to stdout (which must not reach the protocol stream).")
    def noisy(args: dict[str, Any], ctx: ToolContext) -> str:
        print("this must go to stderr")
        return "printed"

    @server.tool(name="test_reconnection", description="Close the SSE stream mid-call, then finish (resumability).")
    def reconnect(args: dict[str, Any], ctx: ToolContext) -> str:
        ctx.log("info", "before the cut")
        time.sleep(0.05)
        ctx.close_stream()
        time.sleep(0.2)
        ctx.log("info", "after the cut")
        return "Reconnection test completed successfully"

    for i in range(extra_tools):
        server.tool(name=f"extra_{i}", description=f"Extra tool {i}.")(lambda args, ctx: "extra")

    @server.resource("demo://note", name="note", description="A short note.", mime_type="text/plain")
    def note(uri: str) -> str:
        return "a note"

    @server.resource("demo://logo", name="logo", mime_type="image/png")
    def logo(uri: str) -> bytes:
        import base64

        return base64.b64decode(PNG_1PX)

    @server.resource_template("demo://colors/{name}", name="color", description="A color by name.",
                              mime_type="text/plain")
    def color(uri: str, params: dict[str, str]) -> str:
        if params["name"] not in COLORS:
            raise NotFound(f"No color named {params['name']!r}. Known: {', '.join(COLORS)}.")
        return f"color {params['name']}"

    @server.prompt("greet", description="Greet someone.", arguments=[{"name": "who", "required": True},
                                                                     {"name": "style"}])
    def greet(args: dict[str, str]) -> str:
        return f"Say hello to {args['who']}" + (f" in a {args['style']} way" if "style" in args else "")

    @server.prompt("pair", description="Two messages.")
    def pair(args: dict[str, str]) -> list[Any]:
        return ["first", {"role": "assistant", "content": content.text("second")}]

    @server.completion
    def complete(ref: dict[str, Any], argument: dict[str, Any], context: dict[str, Any] | None) -> list[str]:
        if argument["name"] in ("name", "style"):
            return [c for c in COLORS if c.startswith(argument["value"])]
        return []

    return server


def main(argv: list[str]) -> int:
    if "--http" in argv:
        import uvicorn

        from cairn_servers.mcp.http import mcp_app

        port = int(argv[argv.index("--http") + 1])
        app = mcp_app(build(), stateless="--stateless" in argv)
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
        return 0
    from cairn_servers.mcp.stdio import serve_stdio

    return serve_stdio(build())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
