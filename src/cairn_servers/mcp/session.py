"""One MCP session: lifecycle, method dispatch, notifications and server-to-client requests.

Transport-neutral and synchronous: a transport feeds decoded messages to ``handle`` (from any thread)
and writes whatever it returns; notifications and server-to-client requests go out through the
``send`` callable of the request being handled, or the session's default sender.
"""

from __future__ import annotations

import itertools
import sys
import threading

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from typing import Any

from cairn_servers.core.errors import CairnError, InvalidInput, NetworkError, Timeout
from cairn_servers.mcp import LATEST_PROTOCOL_VERSION
from cairn_servers.mcp import jsonrpc as rpc
from cairn_servers.mcp.context import Sender, ToolContext
from cairn_servers.mcp.jsonrpc import JSON, RpcError
from cairn_servers.mcp.methods import LEVELS, METHODS

if TYPE_CHECKING:
    from cairn_servers.mcp.protocols import ServerLike

BATCH_VERSIONS = ("2025-03-26", "2024-11-05")  # JSON-RPC batching was removed in 2025-06-18
SLOW_METHODS = frozenset({"tools/call", "resources/read", "prompts/get", "completion/complete"})
_STANDALONE = ("initialize", "ping")


def _id_key(request_id: Any) -> tuple[str, Any]:
    return (type(request_id).__name__, request_id)


def _duplicate(request_id: Any, holder: str = "a request still in flight in this session") -> JSON:
    return rpc.error_response(request_id, RpcError(
        rpc.INVALID_REQUEST,
        f"Invalid request: id {request_id!r} is already used by {holder}; "
        "give every request a new id (ids may be reused once the earlier request has been answered)"))


class _Pending:
    __slots__ = ("event", "message")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.message: JSON | None = None


class Session:
    """Protocol state of one client connection (stdio process, HTTP session, or one stateless POST)."""

    def __init__(self, server: ServerLike, *, stateless: bool = False, send: Sender | None = None) -> None:
        self.server = server
        self.stateless = stateless
        self.initialized = stateless
        self.negotiated = False  # a successful initialize happened: a second one is refused
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
        server._attach(self)

    # -- entry points -------------------------------------------------------------------------

    def handle_raw(self, data: str | bytes, send: Sender | None = None) -> JSON | list[JSON] | None:
        """Decode one JSON text and handle it; a parse failure yields a -32700 reply with id null."""
        try:
            msg = rpc.loads(data)
        except RpcError as exc:
            return rpc.error_response(None, exc)
        return self.handle(msg, send)

    def handle(self, msg: Any, send: Sender | None = None, abort: threading.Event | None = None
               ) -> JSON | list[JSON] | None:
        """Handle one decoded message or batch; returns the reply (None for notifications/responses).

        ``abort`` (set by a transport whose client went away) stops a batch before its next item.
        """
        if isinstance(msg, list):
            return self._batch(msg, send, abort)
        return self.handle_message(msg, send)

    def is_slow(self, msg: Any) -> bool:
        """Whether a transport should run this message off its reader thread (it runs user code)."""
        if isinstance(msg, list):
            return True
        method = msg.get("method") if isinstance(msg, dict) else None
        return isinstance(method, str) and method in SLOW_METHODS and "id" in msg

    def enqueue(self, msg: Any) -> JSON | None:
        """Note a request handed to a worker but not started yet, so a cancellation can overtake it.

        Returns an error reply instead when a request with the same id is already queued or running
        in this session (the client could not tell their answers apart); the request must not run.
        """
        if isinstance(msg, dict) and rpc.kind(msg) == "request":
            key = _id_key(msg["id"])
            with self._lock:
                if key in self._queued or key in self._inflight:
                    return _duplicate(msg["id"])
                self._queued.add(key)
        return None

    def _batch(self, batch: list[Any], send: Sender | None, abort: threading.Event | None = None
               ) -> JSON | list[JSON] | None:
        if self.protocol_version not in BATCH_VERSIONS:
            version = self.protocol_version or "an uninitialized session"
            return rpc.error_response(None, RpcError(
                rpc.INVALID_REQUEST,
                f"Invalid request: JSON-RPC batches are not supported in {version} "
                "(batching was removed in protocol 2025-06-18); send one message per request"))
        if not batch:
            return rpc.error_response(None, RpcError(rpc.INVALID_REQUEST, "Invalid request: empty batch"))
        replies = []
        seen: set[tuple[str, Any]] = set()
        for item in batch:
            if self.closed or (abort is not None and abort.is_set()):
                return None  # the client is gone: nobody will read the rest (a batch is answered whole)
            if isinstance(item, dict) and item.get("method") == "initialize":
                reply: JSON | None = rpc.error_response(item.get("id"), RpcError(
                    rpc.INVALID_REQUEST, "Invalid request: initialize must not be part of a batch"))
            elif rpc.kind(item) == "request" and _id_key(item["id"]) in seen:
                reply = _duplicate(item["id"], "an earlier request of this batch")
            elif rpc.kind(item) == "request" and self._busy(_id_key(item["id"])):
                reply = _duplicate(item["id"])  # a request queued or running outside this batch
            else:
                if rpc.kind(item) == "request":
                    seen.add(_id_key(item["id"]))
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
                import traceback  # off the start-up path

                traceback.print_exc(file=sys.stderr)
            return None
        return self._on_request(msg, send)

    # -- requests -----------------------------------------------------------------------------

    def _on_request(self, msg: JSON, send: Sender | None) -> JSON | None:
        request_id, method = msg["id"], msg["method"]
        key = _id_key(request_id)
        refusal = self._refuse(msg)
        if refusal is not None:
            with self._lock:
                self._queued.discard(key)
                self._early_cancel.discard(key)
            return rpc.error_response(request_id, refusal)
        handler = METHODS[method]
        params = msg.get("params", {})
        ctx = ToolContext(self, request_id, method, params, send)
        with self._lock:
            if key in self._inflight:  # the same id is running (another HTTP POST, or a quick method on stdio)
                return _duplicate(request_id)
            self._inflight[key] = ctx
            self._queued.discard(key)
            if key in self._early_cancel:
                self._early_cancel.discard(key)
                ctx._cancel("cancelled before it started")
        if (ctx.cancelled or self.closed) and method != "initialize":  # cancelled while queued, or the
            with self._lock:                                            # session ended: do not start it
                self._inflight.pop(key, None)
            return None
        try:
            result = handler(self, params, ctx)
            reply = rpc.response(request_id, result)
        except RpcError as exc:
            reply = rpc.error_response(request_id, exc)
        except CairnError as exc:
            reply = rpc.error_response(request_id, RpcError(exc.jsonrpc_code, exc.message))
        except Exception as exc:  # a handler bug never kills the server
            import traceback  # off the start-up path

            traceback.print_exc(file=sys.stderr)
            reply = rpc.error_response(request_id, RpcError(rpc.INTERNAL_ERROR, f"Internal error: {type(exc).__name__}: {exc}"))
        finally:
            with self._lock:
                self._inflight.pop(key, None)
        if ctx.cancelled and method != "initialize":
            return None  # the client gave up on it; cancelled requests get no response
        return reply

    def _busy(self, key: tuple[str, Any]) -> bool:
        with self._lock:
            return key in self._queued or key in self._inflight

    def _refuse(self, msg: JSON) -> RpcError | None:
        """Why this request must not run at all (unknown method, wrong lifecycle, bad params), if it must not."""
        method = msg["method"]
        if method not in METHODS:
            return RpcError(rpc.METHOD_NOT_FOUND, f"Method not found: {method}")
        if not self.initialized and method not in _STANDALONE:
            return RpcError(rpc.INVALID_REQUEST, f"Invalid request: {method} before initialize; send initialize first")
        if method == "initialize" and self.negotiated:
            return RpcError(rpc.INVALID_REQUEST,
                            f"Invalid request: this session is already initialized (protocol {self.protocol_version}); "
                            "initialize is sent once per session. To negotiate again, start a new session "
                            "(a new stdio process, or an HTTP initialize without Mcp-Session-Id)")
        if not isinstance(msg.get("params", {}), dict):
            return RpcError(rpc.INVALID_PARAMS, "Invalid params: params must be an object")
        return None

    def subscribe(self, uri: str) -> None:
        with self._lock:
            self.subscriptions.add(uri)

    def unsubscribe(self, uri: str) -> None:
        with self._lock:
            self.subscriptions.discard(uri)

    def notify_resource_updated(self, uri: str) -> bool:
        if uri not in self.subscriptions or self.closed:
            return False
        self.send_notification("notifications/resources/updated", {"uri": uri}, None)
        return True

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
