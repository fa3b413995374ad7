"""Content blocks for tool results and prompt messages, and ``ToolResult`` for full control."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from typing import Any

if TYPE_CHECKING:
    Content = dict[str, Any]
else:  # run time: no typing import
    Content = dict


def _b64(data: str | bytes) -> str:
    if isinstance(data, str):
        return data
    import base64  # not on the stdio servers' start-up path

    return base64.b64encode(data).decode("ascii")


def text(s: str, *, annotations: dict[str, Any] | None = None) -> Content:
    """A text block."""
    block: Content = {"type": "text", "text": s}
    if annotations:
        block["annotations"] = annotations
    return block


def image(data: str | bytes, mime: str, *, annotations: dict[str, Any] | None = None) -> Content:
    """An image block; ``data`` is base64 text, or raw bytes which are encoded here."""
    block: Content = {"type": "image", "data": _b64(data), "mimeType": mime}
    if annotations:
        block["annotations"] = annotations
    return block


def audio(data: str | bytes, mime: str, *, annotations: dict[str, Any] | None = None) -> Content:
    """An audio block; ``data`` is base64 text, or raw bytes which are encoded here."""
    block: Content = {"type": "audio", "data": _b64(data), "mimeType": mime}
    if annotations:
        block["annotations"] = annotations
    return block


def resource_contents(uri: str, *, text: str | None = None, blob: str | bytes | None = None,
                      mime: str | None = None) -> Content:
    """One entry of ``resources/read`` contents (exactly one of ``text`` / ``blob``)."""
    if (text is None) == (blob is None):
        raise ValueError("resource contents need exactly one of text= or blob=")
    body: Content = {"uri": uri}
    if mime:
        body["mimeType"] = mime
    if text is not None:
        body["text"] = text
    else:
        assert blob is not None
        body["blob"] = _b64(blob)
    return body


def embedded_resource(uri: str, *, text: str | None = None, blob: str | bytes | None = None,
                      mime: str | None = None) -> Content:
    """A resource embedded in a tool result or prompt message."""
    return {"type": "resource", "resource": resource_contents(uri, text=text, blob=blob, mime=mime)}


def resource_link(uri: str, name: str, *, title: str | None = None, description: str | None = None,
                  mime: str | None = None, size: int | None = None) -> Content:
    """A link to a resource the client may read later (2025-06-18+)."""
    block: Content = {"type": "resource_link", "uri": uri, "name": name}
    if title:
        block["title"] = title
    if description:
        block["description"] = description
    if mime:
        block["mimeType"] = mime
    if size is not None:
        block["size"] = size
    return block


class ToolResult:
    """A tool result under the handler's full control."""

    __slots__ = ("content", "structured", "is_error", "meta")

    def __init__(self, content: list[Content] | None = None, structured: dict[str, Any] | None = None,
                 is_error: bool = False, meta: dict[str, Any] | None = None) -> None:
        self.content: list[Content] = [] if content is None else content
        self.structured = structured
        self.is_error = is_error
        self.meta = meta

    def __repr__(self) -> str:
        return (f"ToolResult(content={self.content!r}, structured={self.structured!r}, "
                f"is_error={self.is_error!r}, meta={self.meta!r})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ToolResult):
            return NotImplemented
        return (self.content, self.structured, self.is_error, self.meta) == (
            other.content, other.structured, other.is_error, other.meta)

    __hash__ = None  # type: ignore[assignment]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"content": self.content}
        if self.structured is not None:
            out["structuredContent"] = self.structured
        if self.is_error:
            out["isError"] = True
        if self.meta:
            out["_meta"] = self.meta
        return out
