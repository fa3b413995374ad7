"""What the MCP method handlers need from a session, and what a session needs from its server.

A ``Session`` holds its ``Server`` and is handed to every method handler (``cairn_servers.mcp.methods``); the
``Server`` opens sessions. Typing each side with the other's class made the four modules import one
another (under ``TYPE_CHECKING``). With these Protocols every edge points one way:
``context`` <- ``protocols`` <- ``methods`` <- ``session`` <- ``server`` <- transports, each
importing (for types too) only modules to its left (tests/test_import_cycles.py). mypy checks the real classes against them where they are passed: a
``Server`` to ``Session(...)``, a ``Session`` to the handlers in ``METHODS``.

Type-only: imported under ``TYPE_CHECKING`` alone, never at run time (so ``typing`` here costs the
stdio servers' start-up nothing; tests/test_import_cycles.py checks no module imports it otherwise).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from cairn_servers.mcp.context import ToolContext


class ToolLike(Protocol):
    """A declared tool as ``tools/list`` and ``tools/call`` read it (``cairn_servers.mcp.server.Tool``)."""

    @property
    def name(self) -> str: ...
    @property
    def handler(self) -> Callable[[dict[str, Any], ToolContext], Any]: ...
    @property
    def input_schema(self) -> dict[str, Any]: ...
    @property
    def output_schema(self) -> dict[str, Any] | None: ...
    @property
    def structured(self) -> bool: ...
    @property
    def validate(self) -> Callable[[dict[str, Any]], Any] | None: ...
    def describe(self) -> dict[str, Any]: ...


class ResourceLike(Protocol):
    """``cairn_servers.mcp.server.Resource`` as ``resources/list`` and ``resources/read`` read it."""

    @property
    def handler(self) -> Callable[[str], Any]: ...
    @property
    def mime_type(self) -> str | None: ...
    def describe(self) -> dict[str, Any]: ...


class TemplateLike(Protocol):
    """``cairn_servers.mcp.server.ResourceTemplate`` as the resource methods and completion read it."""

    @property
    def uri_template(self) -> str: ...
    @property
    def handler(self) -> Callable[[str, dict[str, str]], Any]: ...
    @property
    def mime_type(self) -> str | None: ...
    def match(self, uri: str) -> dict[str, str] | None: ...
    def describe(self) -> dict[str, Any]: ...


class PromptLike(Protocol):
    """``cairn_servers.mcp.server.Prompt`` as ``prompts/list`` and ``prompts/get`` read it."""

    @property
    def handler(self) -> Callable[..., Any]: ...
    @property
    def description(self) -> str | None: ...
    @property
    def arguments(self) -> list[dict[str, Any]]: ...
    @property
    def validate(self) -> Callable[[dict[str, Any]], Any] | None: ...
    @property
    def context(self) -> bool: ...
    def describe(self) -> dict[str, Any]: ...


class ServerLike(Protocol):
    """What a session and its method handlers need from the server (``cairn_servers.mcp.server.Server``)."""

    @property
    def instructions(self) -> str | None: ...
    @property
    def page_size(self) -> int: ...
    @property
    def tools(self) -> Mapping[str, ToolLike]: ...
    @property
    def resources(self) -> Mapping[str, ResourceLike]: ...
    @property
    def templates(self) -> Sequence[TemplateLike]: ...
    @property
    def prompts(self) -> Mapping[str, PromptLike]: ...
    @property
    def completion_handler(self) -> Callable[[dict[str, Any], dict[str, Any], dict[str, Any] | None], Any] | None: ...
    def capabilities(self) -> dict[str, Any]: ...
    def server_info(self) -> dict[str, Any]: ...
    def _attach(self, session: SessionLike) -> None: ...


class SessionLike(Protocol):
    """What the method handlers need from a session (``cairn_servers.mcp.session.Session``): its server, the
    state ``initialize`` and ``logging/setLevel`` set, and subscriptions; and what the server needs
    (``notify_resource_updated``). A ``ToolContext`` needs less (``cairn_servers.mcp.context.Channel``)."""

    protocol_version: str | None
    client_capabilities: dict[str, Any]
    client_info: dict[str, Any]
    initialized: bool
    negotiated: bool
    log_level: str

    @property
    def server(self) -> ServerLike: ...
    def subscribe(self, uri: str) -> None: ...
    def unsubscribe(self, uri: str) -> None: ...
    def notify_resource_updated(self, uri: str) -> bool: ...
