"""The MCP methods a session serves: lifecycle, tools, resources, prompts, completion, logging.

Each is ``fn(session, params, ctx) -> result``; errors are raised as ``RpcError`` (or ``CairnError``,
mapped by the session). Standard library only.
"""

from __future__ import annotations

import json
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from typing import Any, Callable

from cairn_servers.core.errors import CairnError, NotFound, public_error, raise_errors
from cairn_servers.mcp import LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS
from cairn_servers.mcp import jsonrpc as rpc
from cairn_servers.mcp.content import ToolResult, text
from cairn_servers.mcp.context import ToolContext
from cairn_servers.mcp.jsonrpc import JSON, RpcError
from cairn_servers.mcp.schema import SchemaError, validate

if TYPE_CHECKING:
    from cairn_servers.mcp.protocols import SessionLike, ToolLike

LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


def _await(value: Any) -> Any:
    """Run a coroutine returned by an ``async def`` handler to completion (we are in a worker thread)."""
    if hasattr(value, "__await__"):
        import asyncio

        async def wait() -> Any:
            return await value

        return asyncio.run(wait())
    return value


def initialize(session: SessionLike, params: JSON, ctx: ToolContext) -> JSON:
    requested = params.get("protocolVersion")
    if not isinstance(requested, str):
        raise RpcError(rpc.INVALID_PARAMS, 'Invalid params: initialize needs "protocolVersion" (a string)')
    caps = params.get("capabilities", {})
    info = params.get("clientInfo", {})
    if not isinstance(caps, dict) or not isinstance(info, dict):
        raise RpcError(rpc.INVALID_PARAMS, 'Invalid params: "capabilities" and "clientInfo" must be objects')
    version = requested if requested in SUPPORTED_PROTOCOL_VERSIONS else LATEST_PROTOCOL_VERSION
    session.protocol_version = version
    session.client_capabilities = caps
    session.client_info = info
    session.initialized = True
    session.negotiated = True
    result: JSON = {
        "protocolVersion": version,
        "capabilities": session.server.capabilities(),
        "serverInfo": session.server.server_info(),
    }
    if session.server.instructions:
        result["instructions"] = session.server.instructions
    return result

# -- pagination ---------------------------------------------------------------------------------

def page(session: SessionLike, kind: str, items: list[JSON], params: JSON, key: str) -> JSON:
    cursor = params.get("cursor")
    start = 0
    if cursor is not None:
        start = decode_cursor(kind, cursor)
    size = session.server.page_size
    result: JSON = {key: items[start:start + size]}
    if start + size < len(items):
        token = f"{kind}:{start + size}".encode()
        import base64  # off the start-up path

        result["nextCursor"] = base64.urlsafe_b64encode(token).decode("ascii")
    return result

def decode_cursor(kind: str, cursor: Any) -> int:
    bad = RpcError(rpc.INVALID_PARAMS, f"Invalid params: invalid cursor {cursor!r:.60}; "
                                       "pass the nextCursor of the previous page, or omit it")
    if not isinstance(cursor, str):
        raise bad
    try:
        import base64  # off the start-up path

        label, _, offset = base64.urlsafe_b64decode(cursor.encode("ascii")).decode("ascii").partition(":")
        start = int(offset)
    except (ValueError, UnicodeError):
        raise bad from None
    if label != kind or start < 0:
        raise bad
    return start

# -- tools --------------------------------------------------------------------------------------

def tools_list(session: SessionLike, params: JSON, ctx: ToolContext) -> JSON:
    return page(session, "tools", [t.describe() for t in session.server.tools.values()], params, "tools")

def tools_call(session: SessionLike, params: JSON, ctx: ToolContext) -> JSON:
    name = params.get("name")
    if not isinstance(name, str):
        raise RpcError(rpc.INVALID_PARAMS, 'Invalid params: tools/call needs "name" (a string)')
    tool = session.server.tools.get(name)
    if tool is None:
        raise RpcError(rpc.INVALID_PARAMS, f"Unknown tool: {name!r}", {"name": name})
    args = params.get("arguments")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise RpcError(rpc.INVALID_PARAMS, f'Invalid params: "arguments" must be an object, got {type(args).__name__}')
    if tool.validate is not None:
        try:
            tool.validate(args)
        except CairnError as exc:
            field = exc.details.get("parameter")
            raise RpcError(rpc.INVALID_PARAMS, exc.message, {"tool": name, **({"field": field} if field else {})}) \
                from None
    else:
        try:
            validate(args, tool.input_schema)
        except SchemaError as exc:
            raise RpcError(rpc.INVALID_PARAMS, str(exc), {"tool": name, "field": exc.path}) from None
    try:
        value = _await(tool.handler(args, ctx))
    except CairnError as exc:
        return ToolResult([text(public_error(exc)["message"])], is_error=True).to_dict()
    except Exception as exc:
        if raise_errors():  # debugging: surface the bug as a -32603 error (traceback on stderr)
            raise
        import traceback  # off the start-up path

        traceback.print_exc(file=sys.stderr)
        return ToolResult([text(f"{type(exc).__name__}: {exc}")], is_error=True).to_dict()
    return tool_result(tool, value)

def tool_result(tool: ToolLike, value: Any) -> JSON:
    if isinstance(value, ToolResult):
        result = value
    elif isinstance(value, str):
        result = ToolResult([text(value)])
    elif value is None:
        result = ToolResult([])
    else:
        try:
            body = json.dumps(value, ensure_ascii=False, allow_nan=False)
            serialized = True
        except (TypeError, ValueError):
            body, serialized = str(value), False
        structured = value if isinstance(value, dict) and (tool.output_schema is not None or tool.structured) else None
        if structured is not None and serialized:  # the transport splices body in: no second serialization
            body = rpc.JsonText(body, structured, from_encoder=True)
        result = ToolResult([text(body)], structured=structured)
    if tool.output_schema is not None and not result.is_error:
        if result.structured is None:
            return ToolResult([text(f"Tool {tool.name!r} declares an outputSchema but returned no structured content")],
                              is_error=True).to_dict()
        try:
            validate(result.structured, tool.output_schema)
        except SchemaError as exc:
            print(f"cairn_servers.mcp: tool {tool.name!r} output violates its outputSchema: {exc}", file=sys.stderr)
            return ToolResult([text(f"Tool {tool.name!r} returned output that does not match its outputSchema: {exc}")],
                              is_error=True).to_dict()
    return result.to_dict()

# -- resources ----------------------------------------------------------------------------------

def resources_list(session: SessionLike, params: JSON, ctx: ToolContext) -> JSON:
    return page(session, "resources", [r.describe() for r in session.server.resources.values()], params, "resources")

def templates_list(session: SessionLike, params: JSON, ctx: ToolContext) -> JSON:
    return page(session, "templates", [t.describe() for t in session.server.templates], params, "resourceTemplates")

def resources_read(session: SessionLike, params: JSON, ctx: ToolContext) -> JSON:
    uri = params.get("uri")
    if not isinstance(uri, str):
        raise RpcError(rpc.INVALID_PARAMS, 'Invalid params: resources/read needs "uri" (a string)')
    mime: str | None
    resource = session.server.resources.get(uri)
    try:
        if resource is not None:
            mime = resource.mime_type
            value = _await(resource.handler(uri))
        else:
            for template in session.server.templates:
                found = template.match(uri)
                if found is not None:
                    mime = template.mime_type
                    value = _await(template.handler(uri, found))
                    break
            else:
                raise NotFound(f"Resource not found: {uri}")
    except NotFound as exc:
        raise RpcError(rpc.INVALID_PARAMS, exc.message, {"uri": uri}) from None
    return {"contents": resource_contents(uri, value, mime)}

def subscribe(session: SessionLike, params: JSON, ctx: ToolContext) -> JSON:
    uri = params.get("uri")
    if not isinstance(uri, str):
        raise RpcError(rpc.INVALID_PARAMS, 'Invalid params: resources/subscribe needs "uri" (a string)')
    session.subscribe(uri)
    return {}

def unsubscribe(session: SessionLike, params: JSON, ctx: ToolContext) -> JSON:
    uri = params.get("uri")
    if not isinstance(uri, str):
        raise RpcError(rpc.INVALID_PARAMS, 'Invalid params: resources/unsubscribe needs "uri" (a string)')
    session.unsubscribe(uri)
    return {}

# -- prompts, completion, logging ---------------------------------------------------------------------

def prompts_list(session: SessionLike, params: JSON, ctx: ToolContext) -> JSON:
    return page(session, "prompts", [p.describe() for p in session.server.prompts.values()], params, "prompts")

def prompts_get(session: SessionLike, params: JSON, ctx: ToolContext) -> JSON:
    name = params.get("name")
    if not isinstance(name, str):
        raise RpcError(rpc.INVALID_PARAMS, 'Invalid params: prompts/get needs "name" (a string)')
    prompt = session.server.prompts.get(name)
    if prompt is None:
        raise RpcError(rpc.INVALID_PARAMS, f"Unknown prompt: {name!r}", {"name": name})
    args = params.get("arguments") or {}
    if prompt.validate is not None:
        try:
            prompt.validate(args)
        except CairnError as exc:
            raise RpcError(rpc.INVALID_PARAMS, exc.message, {"prompt": name}) from None
    else:
        if not isinstance(args, dict) or not all(isinstance(v, str) for v in args.values()):
            raise RpcError(rpc.INVALID_PARAMS, 'Invalid params: prompt "arguments" must be an object of strings')
        for spec in prompt.arguments:
            if spec.get("required") and spec.get("name") not in args:
                raise RpcError(rpc.INVALID_PARAMS, f"Missing required argument {spec.get('name')!r} for prompt {name!r}")
    try:
        value = _await(prompt.handler(args, ctx) if prompt.context else prompt.handler(args))
    except NotFound as exc:
        raise RpcError(rpc.INVALID_PARAMS, exc.message) from None
    result: JSON
    if isinstance(value, dict) and "messages" in value:
        result = dict(value)
    else:
        items = [value] if isinstance(value, str) else list(value)
        result = {"messages": [
            {"role": "user", "content": text(m)} if isinstance(m, str) else m for m in items]}
    if prompt.description and "description" not in result:
        result["description"] = prompt.description
    return result

def complete(session: SessionLike, params: JSON, ctx: ToolContext) -> JSON:
    handler = session.server.completion_handler
    if handler is None:
        raise RpcError(rpc.METHOD_NOT_FOUND, "Method not found: completion/complete (this server offers no completions)")
    ref, argument, context = params.get("ref"), params.get("argument"), params.get("context")
    if not isinstance(ref, dict) or ref.get("type") not in ("ref/prompt", "ref/resource"):
        raise RpcError(rpc.INVALID_PARAMS, 'Invalid params: "ref" must be {"type": "ref/prompt", "name"} or {"type": "ref/resource", "uri"}')
    if not isinstance(argument, dict) or not isinstance(argument.get("name"), str) or not isinstance(argument.get("value"), str):
        raise RpcError(rpc.INVALID_PARAMS, 'Invalid params: "argument" must be {"name": string, "value": string}')
    if context is not None and not isinstance(context, dict):
        raise RpcError(rpc.INVALID_PARAMS, 'Invalid params: "context" must be an object')
    if ref["type"] == "ref/prompt":
        name = ref.get("name")
        if not isinstance(name, str) or name not in session.server.prompts:
            raise RpcError(rpc.INVALID_PARAMS, f"Unknown prompt: {name!r}")
    if ref["type"] == "ref/resource":
        uri = ref.get("uri")
        known = {t.uri_template for t in session.server.templates} | set(session.server.resources)
        if not isinstance(uri, str) or uri not in known:
            raise RpcError(rpc.INVALID_PARAMS, f"Unknown resource template: {uri!r}")
    value = _await(handler(ref, argument, context))
    if isinstance(value, dict):
        return {"completion": value}
    values = [str(v) for v in value]
    return {"completion": {"values": values[:100], "total": len(values), "hasMore": len(values) > 100}}

def set_level(session: SessionLike, params: JSON, ctx: ToolContext) -> JSON:
    level = params.get("level")
    if level not in LEVELS:
        raise RpcError(rpc.INVALID_PARAMS, f"Invalid params: level must be one of {', '.join(LEVELS)}")
    session.log_level = level
    return {}


def resource_contents(uri: str, value: Any, mime: str | None) -> list[JSON]:
    """Turn a resource handler's return value into ``resources/read`` contents."""
    if isinstance(value, list) and value and all(isinstance(v, dict) and "uri" in v and ("text" in v or "blob" in v)
                                                 for v in value):
        return value
    entry: JSON = {"uri": uri}
    if isinstance(value, bytes):
        entry["mimeType"] = mime or "application/octet-stream"
        import base64  # off the start-up path

        entry["blob"] = base64.b64encode(value).decode("ascii")
        return [entry]
    if isinstance(value, str):
        if mime:
            entry["mimeType"] = mime
        entry["text"] = value
        return [entry]
    entry["mimeType"] = mime or "application/json"
    entry["text"] = json.dumps(value, ensure_ascii=False)
    return [entry]


METHODS: dict[str, Callable[[SessionLike, JSON, ToolContext], JSON]] = {
    "initialize": initialize,
    "ping": lambda session, params, ctx: {},
    "tools/list": tools_list,
    "tools/call": tools_call,
    "resources/list": resources_list,
    "resources/templates/list": templates_list,
    "resources/read": resources_read,
    "resources/subscribe": subscribe,
    "resources/unsubscribe": unsubscribe,
    "prompts/list": prompts_list,
    "prompts/get": prompts_get,
    "completion/complete": complete,
    "logging/setLevel": set_level,
}
