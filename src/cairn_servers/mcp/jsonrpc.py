"""JSON-RPC 2.0 framing: error codes, message constructors, parsing and request validation.

Standard library only: this module is on the stdio start-up path.
"""

from __future__ import annotations

import json
import re

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


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)  # one, not one per message as json.loads(**kw) makes


def loads(data: str | bytes) -> Any:
    """Parse one JSON text strictly; raises ``RpcError(PARSE_ERROR)`` on anything that is not JSON.

    What ``json.loads(data, parse_constant=...)`` does, with the decoder built once.
    """
    try:
        if isinstance(data, str):
            if data.startswith("\ufeff"):
                raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", data, 0)
        elif isinstance(data, (bytes, bytearray)):
            data = data.decode(json.detect_encoding(data), "surrogatepass")
        else:
            raise TypeError(f"the JSON object must be str, bytes or bytearray, not {type(data).__name__}")
        return _DECODER.decode(data)
    except RecursionError:
        raise RpcError(PARSE_ERROR, "Parse error: the JSON is nested too deeply (arrays or objects inside each "
                                    "other more than about 900 levels)") from None
    except (ValueError, TypeError) as exc:  # JSONDecodeError, bad UTF-8, >4300-digit ints
        raise RpcError(PARSE_ERROR, f"Parse error: {_short(str(exc))}") from None


class JsonText(str):
    """A text block's text that is ``json.dumps(value, ensure_ascii=False, allow_nan=False)`` of the
    ``structuredContent`` beside it (``value``, held by identity). :func:`dumps` splices it in as that
    member instead of serializing the same value a second time (a warm blz ``find`` reply is ~9 KB:
    the second pass cost ~50-100 us of its stdio round trip). Whitespace differs, the JSON does not.

    ``from_encoder``: the text is the encoder's output as it came (not edited since), so it holds no
    control character: the splice then quotes it without looking for one."""

    value: Any
    from_encoder: bool

    def __new__(cls, text: str, value: Any = None, *, from_encoder: bool = False) -> JsonText:
        self = super().__new__(cls, text)  # a copy (no value) is never spliced
        self.value = value
        self.from_encoder = from_encoder
        return self


def _spliced(message: Any) -> tuple[str, bool, str, str] | None:
    """``message`` serialized with its result's structuredContent spliced from a :class:`JsonText`, as
    ``(before, quote, after, text)`` (None when the message is not such a response). The message is
    ``before + after + text + "}}"``, or with ``quote``, ``before + <text as a JSON string> + after +
    text + "}}"``: the text block's string then need not go through the encoder, which escapes
    character by character; when ``text`` holds no control character (checked, unless it is the
    encoder's own output), escaping its backslashes and quotes is all there is to it (:func:`_quoted`)."""
    result = message.get("result")
    if type(result) is not dict:
        return None
    structured = result.get("structuredContent")
    content = result.get("content")
    if structured is None or type(content) is not list:
        return None
    for index, block in enumerate(content):
        text = block.get("text") if type(block) is dict else None
        if type(text) is JsonText and text.value is structured:
            break
    else:
        return None
    head = {k: v for k, v in message.items() if k != "result"}
    rest = {k: v for k, v in result.items() if k != "structuredContent"}
    if not head or not rest:
        return None
    start = _compact(head)[:-1] + ',"result":'
    if text.from_encoder or re.search("[\x00-\x1f]", text) is None:  # ~10 instructions a character
        blocks = list(content)
        blocks[index] = {**block, "text": _MARK}
        rest["content"] = blocks
        body = _compact(rest)
        at = body.find(_MARK_JSON)
        if at != -1 and body.find(_MARK_JSON, at + 1) == -1:  # exactly once: the marker is ours
            return start + body[:at], True, body[at + len(_MARK_JSON):-1] + ',"structuredContent":', text
        rest["content"] = content
    return start + _compact(rest)[:-1] + ',"structuredContent":', False, "", text


def _quoted(text: str) -> str:
    """``text`` (no control character in it) as a JSON string, as the encoder writes it."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


_MARK = "\x00\x01cairn-json-text\x01\x00"  # stands for the text block's text while the rest is serialized
_MARK_JSON = '"\\u0000\\u0001cairn-json-text\\u0001\\u0000"'  # json.dumps(_MARK)


_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _compact(value: Any) -> str:
    """``json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)``, with the encoder
    made once (json.dumps makes one per call when given options)."""
    return _COMPACT.encode(value)


def dumps(message: Any) -> str:
    """Serialize one message compactly (one line, no NaN) as text that always encodes to UTF-8."""
    parts = _spliced(message) if type(message) is dict else None
    if parts is None:
        text = _compact(message)
    else:
        before, quote, after, spliced = parts
        text = before + (_quoted(spliced) if quote else "") + after + spliced + "}}"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (a "\ud800" escape in the input, echoed back)
            text = json.dumps(message, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return text


def encode(message: Any) -> bytes:
    """:func:`dumps` as UTF-8 bytes, encoded once (a transport writes these): a spliced text is encoded
    once, and its JSON string form made from those bytes (UTF-8 never puts a quote or a backslash
    byte inside a multi-byte character)."""
    parts = _spliced(message) if type(message) is dict else None
    try:
        if parts is None:
            return _compact(message).encode("utf-8")
        before, quote, after, text = parts
        data = text.encode("utf-8")
        quoted = b'"' + data.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"' if quote else b""
        return before.encode("utf-8") + quoted + after.encode("utf-8") + data + b"}}"
    except UnicodeEncodeError:  # a lone surrogate (a "\ud800" escape in the input, echoed back)
        return json.dumps(message, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii")


def dumps_safe(message: JSON) -> str:
    """Serialize a response; if its result is not serializable, send an internal error for its id."""
    try:
        return dumps(message)
    except (ValueError, TypeError, RecursionError) as exc:
        return dumps(_unserializable(message, exc))


def encode_safe(message: JSON) -> bytes:
    """:func:`dumps_safe` as UTF-8 bytes."""
    try:
        return encode(message)
    except (ValueError, TypeError, RecursionError) as exc:
        return encode(_unserializable(message, exc))


def _unserializable(message: JSON, exc: Exception) -> JSON:
    return error_response(message.get("id"), RpcError(
        INTERNAL_ERROR, f"Internal error: result is not serializable: {_short(str(exc))}"))


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
