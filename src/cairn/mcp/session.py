"""One MCP session: lifecycle, method dispatch, notifications and server-to-client requests.

Transport-neutral and synchronous: a transport feeds decoded messages to ``handle`` (from any thread)
and writes whatever it returns; notifications and server-to-client requests go out through the
``send`` callable of the request being handled, or the session's default sender.
"""

from __future__ import annotations

import base64
import itertools
import json
import sys
import threading
import traceback
from typing import TYPE_CHECKING, Any, Callable

from cairn.core.errors import CairnError, InvalidInput, NetworkError, NotFound, Timeout
from cairn.mcp import jsonrpc as rpc
from cairn.mcp.content import ToolResult, text
from cairn.mcp.context import Sender, ToolContext
from cairn.mcp.jsonrpc import JSON, RpcError
from cairn.mcp.schema import SchemaError, validate

if TYPE_CHECKING:
    from cairn.mcp.server import Server

LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
BATCH_VERSIONS = ("2025-03-26", "2024-11-05")  # JSON-RPC batching was removed in 2025-06-18
SLOW_METHODS = frozenset({"tools/call", "resources/read", "prompts/get", "completion/complete"})
_STANDALONE = ("initialize", "ping")


def _await(value: Any) -> Any:
    """Run a coroutine returned by an ``async def`` handler to completion (we are in a worker thread)."""
    if hasattr(value, "__await__"):
        import asyncio

        async def wait() -> Any:
            return await value

        return asyncio.run(wait())
    return value


def _id_key(request_id: Any) -> tuple[str, Any]:
    return (type(request_id).__name__, request_id)


class _Pending:
    __slots__ = ("event", "message")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.message: JSON | None = None


class Session:
    """Protocol state of one client connection (stdio process, HTTP session, or one stateless POST)."""

    def __init__(self, server: Server, *, stateless: bool = False, send: Sender | None = None) -> None:
        from cairn.mcp.server import LATEST_PROTOCOL_VERSION

        self.server = server
        self.stateless = stateless
        self.initialized = stateless
        self.protocol_version: str | None = LATEST_PROTOCOL_VERSION if stateless else None
        self.client_info: dict[str, Any] = {}
        self.client_capabilities: dict[str, Any] = {}
        self.log_level = "info"
        self.subscriptions: set[str] = set()
        self.default_send: Sender | None = send
        self.closed = False
        self._abandoned = False
        self._lock = threading.Lock()
        self._inflight: dict[tuple[str, Any], ToolContext] = {}
        self._early_cancel: set[tuple[str, Any]] = set()
        self._queued: set[tuple[str, Any]] = set()
        self._pending: dict[str, _Pending] = {}
        self._ids = itertools.count(1)
        self._methods: dict[str, Callable[[JSON, ToolContext], JSON]] = {
            "initialize": self._initialize,
            "ping": lambda p, c: {},
            "tools/list": self._tools_list,
            "tools/call": self._tools_call,
            "resources/list": self._resources_list,
            "resources/templates/list": self._templates_list,
            "resources/read": self._resources_read,
            "resources/subscribe": self._subscribe,
            "resources/unsubscribe": self._unsubscribe,
            "prompts/list": self._prompts_list,
            "prompts/get": self._prompts_get,
            "completion/complete": self._complete,
            "logging/setLevel": self._set_level,
        }
        server._attach(self)

    # -- entry points -------------------------------------------------------------------------

    def handle_raw(self, data: str | bytes, send: Sender | None = None) -> JSON | list[JSON] | None:
        """Decode one JSON text and handle it; a parse failure yields a -32700 reply with id null."""
        try:
            msg = rpc.loads(data)
        except RpcError as exc:
            return rpc.error_response(None, exc)
        return self.handle(msg, send)

    def handle(self, msg: Any, send: Sender | None = None) -> JSON | list[JSON] | None:
        """Handle one decoded message or batch; returns the reply (None for notifications/responses)."""
        if isinstance(msg, list):
            return self._batch(msg, send)
        return self.handle_message(msg, send)

    def is_slow(self, msg: Any) -> bool:
        """Whether a transport should run this message off its reader thread (it runs user code)."""
        if isinstance(msg, list):
            return True
        method = msg.get("method") if isinstance(msg, dict) else None
        return isinstance(method, str) and method in SLOW_METHODS and "id" in msg

    def enqueue(self, msg: Any) -> None:
        """Note a request handed to a worker but not started yet, so a cancellation can overtake it."""
        if isinstance(msg, dict) and rpc.kind(msg) == "request":
            with self._lock:
                self._queued.add(_id_key(msg["id"]))

    def _batch(self, batch: list[Any], send: Sender | None) -> JSON | list[JSON] | None:
        if self.protocol_version not in BATCH_VERSIONS:
            version = self.protocol_version or "an uninitialized session"
            return rpc.error_response(None, RpcError(
                rpc.INVALID_REQUEST,
                f"Invalid request: JSON-RPC batches are not supported in {version} "
                "(batching was removed in protocol 2025-06-18); send one message per request"))
        if not batch:
            return rpc.error_response(None, RpcError(rpc.INVALID_REQUEST, "Invalid request: empty batch"))
        replies = []
        for item in batch:
            if isinstance(item, dict) and item.get("method") == "initialize":
                reply: JSON | None = rpc.error_response(item.get("id"), RpcError(
                    rpc.INVALID_REQUEST, "Invalid request: initialize must not be part of a batch"))
            else:
                reply = self.handle_message(item, send)
            if reply is not None:
                replies.append(reply)
        return replies or None

    def handle_message(self, msg: Any, send: Sender | None = None) -> JSON | None:
        what = rpc.kind(msg)
        if what == "invalid":
            request_id = msg.get("id") if isinstance(msg, dict) else None
            return rpc.error_response(request_id, RpcError(rpc.INVALID_REQUEST, rpc.invalid_reason(msg)))
        if what == "response":
            self._on_response(msg)
            return None
        if what == "notification":
            try:
                self._on_notification(msg["method"], msg.get("params"))
            except Exception:  # a bad notification never kills the session
                traceback.print_exc(file=sys.stderr)
            return None
        return self._on_request(msg, send)

    # -- requests -----------------------------------------------------------------------------

    def _on_request(self, msg: JSON, send: Sender | None) -> JSON | None:
        request_id, method = msg["id"], msg["method"]
        handler = self._methods.get(method)
        if handler is None:
            return rpc.error_response(request_id, RpcError(rpc.METHOD_NOT_FOUND, f"Method not found: {method}"))
        if not self.initialized and method not in _STANDALONE:
            return rpc.error_response(request_id, RpcError(
                rpc.INVALID_REQUEST, f"Invalid request: {method} before initialize; send initialize first"))
        params = msg.get("params", {})
        if not isinstance(params, dict):
            return rpc.error_response(request_id, RpcError(rpc.INVALID_PARAMS, "Invalid params: params must be an object"))
        ctx = ToolContext(self, request_id, method, params, send)
        key = _id_key(request_id)
        with self._lock:
            self._inflight[key] = ctx
            self._queued.discard(key)
            if key in self._early_cancel:
                self._early_cancel.discard(key)
                ctx._cancel("cancelled before it started")
        try:
            result = handler(params, ctx)
            reply = rpc.response(request_id, result)
        except RpcError as exc:
            reply = rpc.error_response(request_id, exc)
        except CairnError as exc:
            reply = rpc.error_response(request_id, RpcError(exc.jsonrpc_code, exc.message))
        except Exception as exc:  # a handler bug never kills the server
            traceback.print_exc(file=sys.stderr)
            reply = rpc.error_response(request_id, RpcError(rpc.INTERNAL_ERROR, f"Internal error: {type(exc).__name__}: {exc}"))
        finally:
            with self._lock:
                self._inflight.pop(key, None)
        if ctx.cancelled and method != "initialize":
            return None  # the client gave up on it; cancelled requests get no response
        return reply

    def _initialize(self, params: JSON, ctx: ToolContext) -> JSON:
        from cairn.mcp.server import LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS

        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise RpcError(rpc.INVALID_PARAMS, 'Invalid params: initialize needs "protocolVersion" (a string)')
        caps = params.get("capabilities", {})
        info = params.get("clientInfo", {})
        if not isinstance(caps, dict) or not isinstance(info, dict):
            raise RpcError(rpc.INVALID_PARAMS, 'Invalid params: "capabilities" and "clientInfo" must be objects')
        version = requested if requested in SUPPORTED_PROTOCOL_VERSIONS else LATEST_PROTOCOL_VERSION
        self.protocol_version = version
        self.client_capabilities = caps
        self.client_info = info
        self.initialized = True
        result: JSON = {
            "protocolVersion": version,
            "capabilities": self.server.capabilities(),
            "serverInfo": self.server.server_info(),
        }
        if self.server.instructions:
            result["instructions"] = self.server.instructions
        return result

    # pagination ---------------------------------------------------------------------------------

    def _page(self, kind: str, items: list[JSON], params: JSON, key: str) -> JSON:
        cursor = params.get("cursor")
        start = 0
        if cursor is not None:
            start = self._decode_cursor(kind, cursor)
        size = self.server.page_size
        result: JSON = {key: items[start:start + size]}
        if start + size < len(items):
            token = f"{kind}:{start + size}".encode()
            result["nextCursor"] = base64.urlsafe_b64encode(token).decode("ascii")
        return result

    @staticmethod
    def _decode_cursor(kind: str, cursor: Any) -> int:
        bad = RpcError(rpc.INVALID_PARAMS, f"Invalid params: invalid cursor {cursor!r:.60}; "
                                           "pass the nextCursor of the previous page, or omit it")
        if not isinstance(cursor, str):
            raise bad
        try:
            label, _, offset = base64.urlsafe_b64decode(cursor.encode("ascii")).decode("ascii").partition(":")
            start = int(offset)
        except (ValueError, UnicodeError):
            raise bad from None
        if label != kind or start < 0:
            raise bad
        return start

    # tools --------------------------------------------------------------------------------------

    def _tools_list(self, params: JSON, ctx: ToolContext) -> JSON:
        return self._page("tools", [t.describe() for t in self.server.tools.values()], params, "tools")

    def _tools_call(self, params: JSON, ctx: ToolContext) -> JSON:
        name = params.get("name")
        if not isinstance(name, str):
            raise RpcError(rpc.INVALID_PARAMS, 'Invalid params: tools/call needs "name" (a string)')
        tool = self.server.tools.get(name)
        if tool is None:
            raise RpcError(rpc.INVALID_PARAMS, f"Unknown tool: {name!r}", {"name": name})
        args = params.get("arguments")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise RpcError(rpc.INVALID_PARAMS, f'Invalid params: "arguments" must be an object, got {type(args).__name__}')
        try:
            validate(args, tool.input_schema)
        except SchemaError as exc:
            raise RpcError(rpc.INVALID_PARAMS, str(exc), {"tool": name, "field": exc.path}) from None
        try:
            value = _await(tool.handler(args, ctx))
        except CairnError as exc:
            return ToolResult([text(exc.message)], is_error=True).to_dict()
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            return ToolResult([text(f"{type(exc).__name__}: {exc}")], is_error=True).to_dict()
        return self._tool_result(tool, value)

    @staticmethod
    def _tool_result(tool: Any, value: Any) -> JSON:
        if isinstance(value, ToolResult):
            result = value
        elif isinstance(value, str):
            result = ToolResult([text(value)])
        elif value is None:
            result = ToolResult([])
        else:
            try:
                body = json.dumps(value, ensure_ascii=False, allow_nan=False)
            except (TypeError, ValueError):
                body = str(value)
            structured = value if isinstance(value, dict) and (tool.output_schema is not None or tool.structured) else None
            result = ToolResult([text(body)], structured=structured)
        if tool.output_schema is not None and not result.is_error:
            if result.structured is None:
                return ToolResult([text(f"Tool {tool.name!r} declares an outputSchema but returned no structured content")],
                                  is_error=True).to_dict()
            try:
                validate(result.structured, tool.output_schema)
            except SchemaError as exc:
                print(f"cairn.mcp: tool {tool.name!r} output violates its outputSchema: {exc}", file=sys.stderr)
                return ToolResult([text(f"Tool {tool.name!r} returned output that does not match its outputSchema: {exc}")],
                                  is_error=True).to_dict()
        return result.to_dict()

    # resources ----------------------------------------------------------------------------------

    def _resources_list(self, params: JSON, ctx: ToolContext) -> JSON:
        return self._page("resources", [r.describe() for r in self.server.resources.values()], params, "resources")

    def _templates_list(self, params: JSON, ctx: ToolContext) -> JSON:
        return self._page("templates", [t.describe() for t in self.server.templates], params, "resourceTemplates")

    def _resources_read(self, params: JSON, ctx: ToolContext) -> JSON:
        uri = params.get("uri")
        if not isinstance(uri, str):
            raise RpcError(rpc.INVALID_PARAMS, 'Invalid params: resources/read needs "uri" (a string)')
        mime: str | None
        resource = self.server.resources.get(uri)
        try:
            if resource is not None:
                mime = resource.mime_type
                value = _await(resource.handler(uri))
            else:
                for template in self.server.templates:
                    found = template.match(uri)
                    if found is not None:
                        mime = template.mime_type
                        value = _await(template.handler(uri, found))
                        break
                else:
                    raise NotFound(f"Resource not found: {uri}")
        except NotFound as exc:
            raise RpcError(rpc.INVALID_PARAMS, exc.message, {"uri": uri}) from None
        return {"contents": _resource_contents(uri, value, mime)}

    def _subscribe(self, params: JSON, ctx: ToolContext) -> JSON:
        uri = params.get("uri")
        if not isinstance(uri, str):
            raise RpcError(rpc.INVALID_PARAMS, 'Invalid params: resources/subscribe needs "uri" (a string)')
        with self._lock:
            self.subscriptions.add(uri)
        return {}

    def _unsubscribe(self, params: JSON, ctx: ToolContext) -> JSON:
        uri = params.get("uri")
        if not isinstance(uri, str):
            raise RpcError(rpc.INVALID_PARAMS, 'Invalid params: resources/unsubscribe needs "uri" (a string)')
        with self._lock:
            self.subscriptions.discard(uri)
        return {}

    def notify_resource_updated(self, uri: str) -> bool:
        if uri not in self.subscriptions or self.closed:
            return False
        self.send_notification("notifications/resources/updated", {"uri": uri}, None)
        return True

    # prompts and completion ---------------------------------------------------------------------

    def _prompts_list(self, params: JSON, ctx: ToolContext) -> JSON:
        return self._page("prompts", [p.describe() for p in self.server.prompts.values()], params, "prompts")

    def _prompts_get(self, params: JSON, ctx: ToolContext) -> JSON:
        name = params.get("name")
        if not isinstance(name, str):
            raise RpcError(rpc.INVALID_PARAMS, 'Invalid params: prompts/get needs "name" (a string)')
        prompt = self.server.prompts.get(name)
        if prompt is None:
            raise RpcError(rpc.INVALID_PARAMS, f"Unknown prompt: {name!r}", {"name": name})
        args = params.get("arguments") or {}
        if not isinstance(args, dict) or not all(isinstance(v, str) for v in args.values()):
            raise RpcError(rpc.INVALID_PARAMS, 'Invalid params: prompt "arguments" must be an object of strings')
        for spec in prompt.arguments:
            if spec.get("required") and spec.get("name") not in args:
                raise RpcError(rpc.INVALID_PARAMS, f"Missing required argument {spec.get('name')!r} for prompt {name!r}")
        try:
            value = _await(prompt.handler(args))
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

    def _complete(self, params: JSON, ctx: ToolContext) -> JSON:
        handler = self.server.completion_handler
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
            if not isinstance(name, str) or name not in self.server.prompts:
                raise RpcError(rpc.INVALID_PARAMS, f"Unknown prompt: {name!r}")
        if ref["type"] == "ref/resource":
            uri = ref.get("uri")
            known = {t.uri_template for t in self.server.templates} | set(self.server.resources)
            if not isinstance(uri, str) or uri not in known:
                raise RpcError(rpc.INVALID_PARAMS, f"Unknown resource template: {uri!r}")
        value = _await(handler(ref, argument, context))
        if isinstance(value, dict):
            return {"completion": value}
        values = [str(v) for v in value]
        return {"completion": {"values": values[:100], "total": len(values), "hasMore": len(values) > 100}}

    def _set_level(self, params: JSON, ctx: ToolContext) -> JSON:
        level = params.get("level")
        if level not in LEVELS:
            raise RpcError(rpc.INVALID_PARAMS, f"Invalid params: level must be one of {', '.join(LEVELS)}")
        self.log_level = level
        return {}

    # -- notifications, responses, outgoing messages ---------------------------------------------

    def _on_notification(self, method: str, params: Any) -> None:
        if method == "notifications/cancelled" and isinstance(params, dict):
            self.cancel(params.get("requestId"), params.get("reason"))
        # notifications/initialized, roots/list_changed, progress and unknown ones need no action

    def cancel(self, request_id: Any, reason: Any = None) -> None:
        if not rpc.is_valid_id(request_id):
            return
        key = _id_key(request_id)
        with self._lock:
            ctx = self._inflight.get(key)
            if ctx is None:
                if key in self._queued:  # received, waiting for a worker: cancel it when it starts
                    self._early_cancel.add(key)
                return  # finished or unknown: nothing to cancel
        ctx._cancel(reason if isinstance(reason, str) else None)

    def _on_response(self, msg: JSON) -> None:
        with self._lock:
            pending = self._pending.get(str(msg.get("id")))
        if pending is not None:
            pending.message = msg
            pending.event.set()

    def send_notification(self, method: str, params: JSON | None, send: Sender | None, related: Any = None) -> None:
        sender = send or self.default_send
        if sender is None or self.closed:
            return
        try:
            sender(rpc.notification(method, params))
        except Exception:  # a closed stream must not fail the tool that is reporting progress
            pass

    def log(self, level: str, data: Any, logger: str | None = None, send: Sender | None = None, related: Any = None) -> None:
        if level not in LEVELS:
            raise ValueError(f"log level must be one of {', '.join(LEVELS)}")
        if LEVELS.index(level) < LEVELS.index(self.log_level):
            return
        params: JSON = {"level": level, "data": data}
        if logger:
            params["logger"] = logger
        self.send_notification("notifications/message", params, send, related)

    def send_request(self, method: str, params: JSON | None, send: Sender | None, timeout: float = 60.0,
                     related: Any = None) -> JSON:
        sender = send or self.default_send
        if self.stateless or sender is None:
            raise InvalidInput(f"Cannot send {method} to the client: this transport (stateless HTTP) has no channel "
                               "for server-to-client requests; run the server in stateful mode")
        request_id = f"srv-{next(self._ids)}"
        pending = _Pending()
        with self._lock:
            if self.closed or self._abandoned:
                raise NetworkError(f"Cannot send {method}: the client has disconnected")
            self._pending[request_id] = pending
        try:
            try:
                sender(rpc.request(request_id, method, params))
            except Exception as exc:
                raise NetworkError(f"Cannot send {method} to the client: {exc}") from None
            if not pending.event.wait(timeout):
                self.send_notification("notifications/cancelled", {"requestId": request_id, "reason": "timed out"}, send)
                raise Timeout(f"The client did not answer {method} within {timeout:g} s")
        finally:
            with self._lock:
                self._pending.pop(request_id, None)
        answer = pending.message
        if answer is None:
            raise NetworkError(f"The client disconnected before answering {method}")
        if "error" in answer:
            err = answer["error"]
            raise CairnError(f"The client answered {method} with an error: {err.get('message', err)}",
                             details={"error": err})
        result = answer.get("result")
        return result if isinstance(result, dict) else {}

    def abandon_requests(self) -> None:
        """Fail every server-to-client request still waiting (the client can no longer answer)."""
        with self._lock:
            self._abandoned = True
            pending = list(self._pending.values())
        for p in pending:
            p.event.set()

    def close(self) -> None:
        """End the session: wake waiting server-to-client requests and cancel in-flight handlers."""
        with self._lock:
            self.closed = True
            pending = list(self._pending.values())
            inflight = list(self._inflight.values())
        for p in pending:
            p.event.set()
        for ctx in inflight:
            ctx._cancel("session closed")


def _resource_contents(uri: str, value: Any, mime: str | None) -> list[JSON]:
    """Turn a resource handler's return value into ``resources/read`` contents."""
    if isinstance(value, list) and value and all(isinstance(v, dict) and "uri" in v and ("text" in v or "blob" in v)
                                                 for v in value):
        return value
    entry: JSON = {"uri": uri}
    if isinstance(value, bytes):
        entry["mimeType"] = mime or "application/octet-stream"
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
