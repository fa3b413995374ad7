"""JSON-RPC 2.0 framing: error codes, message constructors, parsing and request validation.

Standard library only: this module is on the stdio start-up path.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

if TYPE_CHECKING:
    JSON = dict[str, Any]
else:  # run time: no typing import
    JSON = dict
RequestId = str | int


class RpcError(Exception):
    """A JSON-RPC error to send back as the ``error`` member of a response."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_dict(self) -> JSON:
        err: JSON = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err


def _reject_constant(name: str) -> Any:
    # json.loads accepts NaN/Infinity by default, which are not JSON and could never be echoed back.
    raise ValueError(f"{name} is not valid JSON")


def loads(data: str | bytes) -> Any:
    """Parse one JSON text strictly; raises ``RpcError(PARSE_ERROR)`` on anything that is not JSON."""
    try:
        return json.loads(data, parse_constant=_reject_constant)
    except RecursionError:
        raise RpcError(PARSE_ERROR, "Parse error: the JSON is nested too deeply (arrays or objects inside each "
                                    "other more than about 900 levels)") from None
    except (ValueError, TypeError) as exc:  # JSONDecodeError, bad UTF-8, >4300-digit ints
        raise RpcError(PARSE_ERROR, f"Parse error: {_short(str(exc))}") from None


def dumps(message: Any) -> str:
    """Serialize one message compactly (one line, no NaN) as text that always encodes to UTF-8."""
    text = json.dumps(message, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (a "\ud800" escape in the input, echoed back)
            text = json.dumps(message, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return text


def dumps_safe(message: JSON) -> str:
    """Serialize a response; if its result is not serializable, send an internal error for its id."""
    try:
        return dumps(message)
    except (ValueError, TypeError, RecursionError) as exc:
        fallback = error_response(
            message.get("id"), RpcError(INTERNAL_ERROR, f"Internal error: result is not serializable: {_short(str(exc))}")
        )
        return dumps(fallback)


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def response(request_id: RequestId | None, result: JSON) -> JSON:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(request_id: Any, error: RpcError) -> JSON:
    return {"jsonrpc": "2.0", "id": request_id if is_valid_id(request_id) else None, "error": error.to_dict()}


def notification(method: str, params: JSON | None = None) -> JSON:
    msg: JSON = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def request(request_id: RequestId, method: str, params: JSON | None = None) -> JSON:
    msg: JSON = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def is_valid_id(value: Any) -> bool:
    """MCP ids are strings or integers (never null, never bool, never fractional)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def kind(msg: Any) -> str:
    """Classify a decoded message: 'request', 'notification', 'response' or 'invalid'."""
    if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
        return "invalid"
    if "method" in msg:
        if not isinstance(msg["method"], str):
            return "invalid"
        if "params" in msg and not isinstance(msg["params"], (dict, list)):
            return "invalid"
        if "id" not in msg:
            return "notification"
        return "request" if is_valid_id(msg["id"]) else "invalid"
    if "id" in msg and ("result" in msg) != ("error" in msg):
        if "result" in msg and not isinstance(msg["result"], dict):
            return "invalid"
        if "error" in msg and not isinstance(msg["error"], dict):
            return "invalid"
        return "response" if is_valid_id(msg["id"]) or msg["id"] is None else "invalid"
    return "invalid"


def invalid_reason(msg: Any) -> str:
    """A one-line explanation of why ``kind(msg) == 'invalid'``."""
    if not isinstance(msg, dict):
        return f"Invalid request: expected a JSON object, got {type(msg).__name__}"
    if msg.get("jsonrpc") != "2.0":
        return 'Invalid request: "jsonrpc" must be "2.0"'
    if "method" in msg:
        if not isinstance(msg["method"], str):
            return 'Invalid request: "method" must be a string'
        if "params" in msg and not isinstance(msg["params"], (dict, list)):
            return 'Invalid request: "params" must be an object'
        return 'Invalid request: "id" must be a string or an integer'
    return 'Invalid request: a message needs "method" (request/notification) or "id" with "result"/"error" (response)'
