"""A fixture server on ``cairn_servers.mcp`` declaring every fixture the official conformance suite expects.

The tool, resource and prompt names and payloads follow the scenario descriptions of
``@modelcontextprotocol/conformance`` 0.1.16 (``conformance list --server`` names the scenarios;
each scenario's description states what it calls and checks).

Run it:

    python tests/mcp/conformance_server.py stdio
    python tests/mcp/conformance_server.py http --port 8123 [--stateless]

Over HTTP the endpoint is ``http://127.0.0.1:PORT/mcp``. Logs go to stderr; over stdio, stdout
carries only JSON-RPC.
"""

from __future__ import annotations

import argparse
import base64
import json
import struct
import sys
import time
from typing import Any

from cairn_servers.core.errors import CairnError, InvalidInput, NotFound
from cairn_servers.mcp import content
from cairn_servers.mcp.server import Server, ToolContext, ToolResult

# A 1x1 red PNG.
RED_PIXEL_PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)


def _tiny_wav() -> bytes:
    """A valid 8 kHz mono 16-bit PCM WAV holding 8 samples of silence."""
    samples = b"\x00\x00" * 8
    fmt = struct.pack("<HHIIHH", 1, 1, 8000, 16000, 2, 16)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(samples)) + samples
    return b"RIFF" + struct.pack("<I", len(body)) + body


SIMPLE_TEXT = "This is a simple text response for testing."
ERROR_TEXT = "This tool intentionally returns an error for testing"
STATIC_TEXT = "This is the content of the static text resource."
EMBEDDED_TEXT = "This is an embedded resource content."
NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}}


def build_server() -> Server:
    """The conformance fixture server (tools, resources, templates, prompts, completion)."""
    server = Server(name="cairn-conformance-fixture", version="0.1.0", title="Cairn conformance fixture",
                    instructions="Fixture server for the MCP conformance suite.")

    # -- tools ------------------------------------------------------------------------------

    @server.tool(name="test_simple_text", description="Returns simple text content", input_schema=NO_ARGS)
    def simple_text(args: dict[str, Any], ctx: ToolContext) -> str:
        return SIMPLE_TEXT

    @server.tool(name="test_image_content", description="Returns image content", input_schema=NO_ARGS)
    def image_content(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult(content=[content.image(RED_PIXEL_PNG, "image/png")])

    @server.tool(name="test_audio_content", description="Returns audio content", input_schema=NO_ARGS)
    def audio_content(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult(content=[content.audio(_tiny_wav(), "audio/wav")])

    @server.tool(name="test_embedded_resource", description="Returns an embedded resource", input_schema=NO_ARGS)
    def embedded(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult(content=[content.embedded_resource("test://embedded-resource", text=EMBEDDED_TEXT,
                                                             mime="text/plain")])

    @server.tool(name="test_multiple_content_types", description="Returns text, image and resource content",
                 input_schema=NO_ARGS)
    def mixed(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult(content=[
            content.text("Multiple content types test:"),
            content.image(RED_PIXEL_PNG, "image/png"),
            content.embedded_resource("test://mixed-content-resource",
                                      text=json.dumps({"test": "data", "value": 123}), mime="application/json"),
        ])

    @server.tool(name="test_tool_with_logging", description="Sends three info log notifications",
                 input_schema=NO_ARGS)
    def with_logging(args: dict[str, Any], ctx: ToolContext) -> str:
        ctx.log("info", "Tool execution started", "conformance")
        time.sleep(0.05)
        ctx.log("info", "Tool processing data", "conformance")
        time.sleep(0.05)
        ctx.log("info", "Tool execution completed", "conformance")
        return "Tool with logging executed successfully"

    @server.tool(name="test_tool_with_progress", description="Reports progress 0, 50, 100 of 100",
                 input_schema=NO_ARGS)
    def with_progress(args: dict[str, Any], ctx: ToolContext) -> str:
        for step, done in enumerate((0, 50, 100)):
            if step:
                time.sleep(0.05)
            ctx.progress(done, 100, f"step {step + 1} of 3")
        return f"Progress tool executed successfully (token: {ctx.progress_token})"

    @server.tool(name="test_error_handling", description="Always fails", input_schema=NO_ARGS)
    def error_handling(args: dict[str, Any], ctx: ToolContext) -> str:
        raise CairnError(ERROR_TEXT)

    @server.tool(name="test_sampling", description="Asks the client's LLM via sampling/createMessage",
                 input_schema={"type": "object", "properties": {"prompt": {"type": "string"}},
                               "required": ["prompt"]})
    def sampling(args: dict[str, Any], ctx: ToolContext) -> str:
        result = ctx.request("sampling/createMessage", {
            "messages": [{"role": "user", "content": {"type": "text", "text": args["prompt"]}}],
            "maxTokens": 100,
        }, timeout=20.0)
        block = result.get("content")
        answer = block.get("text") if isinstance(block, dict) else json.dumps(block)
        return f"LLM response: {answer}"

    @server.tool(name="test_elicitation", description="Asks the user via elicitation/create",
                 input_schema={"type": "object", "properties": {"message": {"type": "string"}},
                               "required": ["message"]})
    def elicitation(args: dict[str, Any], ctx: ToolContext) -> str:
        result = ctx.request("elicitation/create", {
            "message": args["message"],
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "username": {"type": "string", "description": "User's response"},
                    "email": {"type": "string", "description": "User's email address"},
                },
                "required": ["username", "email"],
            },
        }, timeout=20.0)
        return f"User response: action={result.get('action')}, content={json.dumps(result.get('content'))}"

    @server.tool(name="test_elicitation_sep1034_defaults", description="Elicitation with defaults (SEP-1034)",
                 input_schema=NO_ARGS)
    def elicitation_defaults(args: dict[str, Any], ctx: ToolContext) -> str:
        result = ctx.request("elicitation/create", {
            "message": "Please review and update the form fields with defaults",
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "User name", "default": "John Doe"},
                    "age": {"type": "integer", "description": "User age", "default": 30},
                    "score": {"type": "number", "description": "User score", "default": 95.5},
                    "status": {"type": "string", "description": "User status",
                               "enum": ["active", "inactive", "pending"], "default": "active"},
                    "verified": {"type": "boolean", "description": "Verification status", "default": True},
                },
                "required": [],
            },
        }, timeout=20.0)
        return (f"Elicitation completed: action={result.get('action')}, "
                f"content={json.dumps(result.get('content'))}")

    @server.tool(name="test_elicitation_sep1330_enums", description="Elicitation with enum variants (SEP-1330)",
                 input_schema=NO_ARGS)
    def elicitation_enums(args: dict[str, Any], ctx: ToolContext) -> str:
        result = ctx.request("elicitation/create", {
            "message": "Please select options from the enum fields",
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                    "titledSingle": {"type": "string", "oneOf": [
                        {"const": "value1", "title": "First Option"},
                        {"const": "value2", "title": "Second Option"},
                        {"const": "value3", "title": "Third Option"},
                    ]},
                    "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                                   "enumNames": ["Option One", "Option Two", "Option Three"]},
                    "untitledMulti": {"type": "array",
                                      "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                    "titledMulti": {"type": "array", "items": {"anyOf": [
                        {"const": "value1", "title": "First Choice"},
                        {"const": "value2", "title": "Second Choice"},
                        {"const": "value3", "title": "Third Choice"},
                    ]}},
                },
                "required": [],
            },
        }, timeout=20.0)
        return (f"Elicitation completed: action={result.get('action')}, "
                f"content={json.dumps(result.get('content'))}")

    @server.tool(name="json_schema_2020_12_tool", description="Tool with JSON Schema 2020-12 features",
                 input_schema={
                     "$schema": "https://json-schema.org/draft/2020-12/schema",
                     "type": "object",
                     "$defs": {"address": {"type": "object", "properties": {
                         "street": {"type": "string"}, "city": {"type": "string"}}}},
                     "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
                     "additionalProperties": False,
                 })
    def json_schema_2020_12(args: dict[str, Any], ctx: ToolContext) -> str:
        return f"Received: {json.dumps(args, sort_keys=True)}"

    @server.tool(name="test_reconnection", description="Closes its SSE stream mid-call (SEP-1699)",
                 input_schema=NO_ARGS)
    def reconnection(args: dict[str, Any], ctx: ToolContext) -> str:
        time.sleep(0.05)
        ctx.close_stream()
        time.sleep(0.1)
        return "Reconnection test completed successfully"

    # -- resources --------------------------------------------------------------------------

    @server.resource("test://static-text", name="static-text", description="A static text resource",
                     mime_type="text/plain")
    def static_text(uri: str) -> str:
        return STATIC_TEXT

    @server.resource("test://static-binary", name="static-binary", description="A static binary resource (PNG)",
                     mime_type="image/png")
    def static_binary(uri: str) -> bytes:
        return base64.b64decode(RED_PIXEL_PNG)

    @server.resource("test://watched-resource", name="watched-resource",
                     description="A resource clients may subscribe to", mime_type="text/plain")
    def watched(uri: str) -> str:
        return "Watched resource content"

    @server.resource_template("test://template/{id}/data", name="template-data",
                              description="Data for one id", mime_type="application/json")
    def template_data(uri: str, params: dict[str, str]) -> dict[str, Any]:
        if not params["id"].isalnum():
            raise NotFound(f"No data for id {params['id']!r}; ids are alphanumeric")
        return {"id": params["id"], "templateTest": True, "data": f"Data for ID: {params['id']}"}

    # -- prompts ----------------------------------------------------------------------------

    @server.prompt("test_simple_prompt", description="A simple prompt without arguments")
    def simple_prompt(args: dict[str, str]) -> str:
        return "This is a simple prompt for testing."

    @server.prompt("test_prompt_with_arguments", description="A prompt with two required arguments",
                   arguments=[{"name": "arg1", "description": "First test argument", "required": True},
                              {"name": "arg2", "description": "Second test argument", "required": True}])
    def prompt_with_arguments(args: dict[str, str]) -> str:
        return f"Prompt with arguments: arg1='{args.get('arg1')}', arg2='{args.get('arg2')}'"

    @server.prompt("test_prompt_with_embedded_resource", description="A prompt embedding a resource",
                   arguments=[{"name": "resourceUri", "description": "URI of the resource to embed",
                               "required": True}])
    def prompt_with_resource(args: dict[str, str]) -> list[dict[str, Any]]:
        uri = args.get("resourceUri")
        if not uri:
            raise InvalidInput("resourceUri is required: pass the URI of the resource to embed")
        return [
            {"role": "user", "content": content.embedded_resource(
                uri, text="Embedded resource content for testing.", mime="text/plain")},
            {"role": "user", "content": content.text("Please process the embedded resource above.")},
        ]

    @server.prompt("test_prompt_with_image", description="A prompt with image content")
    def prompt_with_image(args: dict[str, str]) -> list[dict[str, Any]]:
        return [
            {"role": "user", "content": content.image(RED_PIXEL_PNG, "image/png")},
            {"role": "user", "content": content.text("Please analyze the image above.")},
        ]

    # -- completion -------------------------------------------------------------------------

    words = ["paris", "park", "party", "test", "testing", "tested", "value"]

    @server.completion
    def complete(ref: dict[str, Any], argument: dict[str, Any], context: dict[str, Any] | None) -> list[str]:
        prefix = str(argument.get("value", ""))
        return [w for w in words if w.startswith(prefix)]

    return server


def _serve_http(server: Server, port: int, stateless: bool) -> None:
    import uvicorn

    from cairn_servers.mcp.http import mcp_app

    app = mcp_app(server, stateless=stateless)
    # Open SSE streams (a client's GET stream) never finish on their own, and uvicorn waits for every
    # connection before the app's lifespan shutdown: bound that wait so SIGTERM always stops the server.
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Cairn MCP conformance fixture server")
    sub = parser.add_subparsers(dest="transport", required=True)
    sub.add_parser("stdio", help="serve on stdin/stdout")
    http = sub.add_parser("http", help="serve streamable HTTP at http://127.0.0.1:PORT/mcp")
    http.add_argument("--port", type=int, required=True)
    http.add_argument("--stateless", action="store_true", help="stateless mode (no sessions, no client requests)")
    opts = parser.parse_args(argv)
    server = build_server()
    if opts.transport == "stdio":
        from cairn_servers.mcp.stdio import serve_stdio

        serve_stdio(server)
    else:
        _serve_http(server, opts.port, opts.stateless)
    return 0


if __name__ == "__main__":
    sys.exit(main())
