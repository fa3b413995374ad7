"""Declaring an MCP server: tools, resources, resource templates, prompts and completion, once each.

Transports (``cairn_servers.mcp.stdio``, ``cairn_servers.mcp.http``) open a ``Session`` per connection on a ``Server``.
Standard library only at module level: this is on the stdio start-up path.
"""

from __future__ import annotations

import re
import threading
import weakref

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from typing import Any, Callable

from cairn_servers.mcp.content import ToolResult
from cairn_servers.mcp.context import ToolContext

if TYPE_CHECKING:
    from cairn_servers.mcp.protocols import SessionLike
    from cairn_servers.mcp.session import Session

__all__ = ["Server", "ToolContext", "ToolResult", "Tool", "Resource", "ResourceTemplate", "Prompt"]

if TYPE_CHECKING:
    ToolHandler = Callable[[dict[str, Any], ToolContext], Any]
else:  # run time: no typing import
    from collections.abc import Callable as ToolHandler
EMPTY_INPUT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


def _described(**fields: Any) -> dict[str, Any]:
    """A declaration as the protocol lists it: fields in order, empty optional ones left out.

    ``inputSchema`` is required by the spec and kept even when empty; ``size`` 0 is a real size.
    """
    return {k: v for k, v in fields.items() if k == "inputSchema" or v or (k == "size" and v == 0)}


class _Record:
    """Plain classes with keyword constructors, repr and equality: ``dataclasses`` costs the stdio
    servers several milliseconds of start-up (it imports ``inspect``, ``ast``, ``dis``, ``tokenize``)."""

    __slots__: tuple[str, ...] = ()

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__ if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k) for k in self.__slots__ if not k.startswith("_"))

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value (as a dataclass)


class Tool(_Record):
    __slots__ = ("name", "handler", "description", "input_schema", "output_schema", "title", "annotations",
                 "structured", "meta", "validate")

    def __init__(self, name: str, handler: ToolHandler, description: str = "",
                 input_schema: dict[str, Any] | None = None, output_schema: dict[str, Any] | None = None,
                 title: str | None = None, annotations: dict[str, Any] | None = None, structured: bool = False,
                 meta: dict[str, Any] | None = None,
                 validate: Callable[[dict[str, Any]], Any] | None = None) -> None:
        self.name = name
        self.handler = handler
        self.description = description
        self.input_schema: dict[str, Any] = dict(EMPTY_INPUT_SCHEMA) if input_schema is None else input_schema
        self.output_schema = output_schema
        self.title = title
        self.annotations = annotations
        self.structured = structured
        self.meta = meta
        # Checks the arguments instead of input_schema, raising InvalidInput with the operation's own
        # message (cairn_servers.core.ops: the same words on every surface); still a JSON-RPC -32602 error.
        self.validate = validate

    def describe(self) -> dict[str, Any]:
        return _described(name=self.name, title=self.title, description=self.description,
                          inputSchema=self.input_schema, outputSchema=self.output_schema,
                          annotations=self.annotations, _meta=self.meta)


class Resource(_Record):
    __slots__ = ("uri", "handler", "name", "title", "description", "mime_type", "size")

    def __init__(self, uri: str, handler: Callable[[str], Any], name: str, title: str | None = None,
                 description: str | None = None, mime_type: str | None = None, size: int | None = None) -> None:
        self.uri = uri
        self.handler = handler
        self.name = name
        self.title = title
        self.description = description
        self.mime_type = mime_type
        self.size = size

    def describe(self) -> dict[str, Any]:
        return _described(uri=self.uri, name=self.name, title=self.title, description=self.description,
                          mimeType=self.mime_type, size=self.size)


_VAR = re.compile(r"\{([+#]?)([A-Za-z0-9_.]+)\}")


class ResourceTemplate(_Record):
    __slots__ = ("uri_template", "handler", "name", "title", "description", "mime_type", "_regex")

    def __init__(self, uri_template: str, handler: Callable[[str, dict[str, str]], Any], name: str,
                 title: str | None = None, description: str | None = None, mime_type: str | None = None) -> None:
        self.uri_template = uri_template
        self.handler = handler
        self.name = name
        self.title = title
        self.description = description
        self.mime_type = mime_type
        # RFC 6570 level 1-2 matching: {var} is one path segment, {+var} may span several.
        parts: list[str] = []
        last = 0
        for m in _VAR.finditer(uri_template):
            parts.append(re.escape(uri_template[last:m.start()]))
            span = ".+" if m.group(1) else "[^/?#]+"
            parts.append(f"(?P<{m.group(2).replace('.', '_')}>{span})")
            last = m.end()
        parts.append(re.escape(uri_template[last:]))
        self._regex: re.Pattern[str] = re.compile("".join(parts) + r"\Z")

    def match(self, uri: str) -> dict[str, str] | None:
        m = self._regex.match(uri)
        if m is None:
            return None
        from urllib.parse import unquote

        return {k: unquote(v) for k, v in m.groupdict().items()}

    def describe(self) -> dict[str, Any]:
        return _described(uriTemplate=self.uri_template, name=self.name, title=self.title,
                          description=self.description, mimeType=self.mime_type)


class Prompt(_Record):
    __slots__ = ("name", "handler", "description", "title", "arguments", "validate", "context")

    def __init__(self, name: str, handler: Callable[..., Any], description: str | None = None,
                 title: str | None = None, arguments: list[dict[str, Any]] | None = None,
                 validate: Callable[[dict[str, Any]], Any] | None = None, context: bool = False) -> None:
        self.name = name
        self.handler = handler
        self.description = description
        self.title = title
        self.arguments: list[dict[str, Any]] = [] if arguments is None else arguments
        # Checks the arguments instead of the generic check (required ones present, strings), raising
        # InvalidInput with the server's own message (the one its other surfaces give); a JSON-RPC -32602 error.
        self.validate = validate
        # True: the handler is called as handler(args, ctx) (a ToolContext: ctx.cancelled, progress, log)
        self.context = context

    def describe(self) -> dict[str, Any]:
        return _described(name=self.name, title=self.title, description=self.description,
                          arguments=self.arguments)


class Server:
    """One MCP server's declarations; transports serve it to any number of sessions."""

    def __init__(self, name: str, version: str, *, title: str | None = None, instructions: str | None = None,
                 page_size: int = 100, website_url: str | None = None) -> None:
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        self.name = name
        self.version = version
        self.title = title
        self.instructions = instructions
        self.website_url = website_url
        self.page_size = page_size
        self._tools: dict[str, Tool] = {}
        # Tool declarations left for later (defer_tools); None once every one has run.
        self._deferred: list[Callable[[], None]] | None = None
        self._deferring = threading.RLock()
        self._in_deferred = False
        self.resources: dict[str, Resource] = {}
        self.templates: list[ResourceTemplate] = []
        self.prompts: dict[str, Prompt] = {}
        self.completion_handler: Callable[[dict[str, Any], dict[str, Any], dict[str, Any] | None], Any] | None = None
        self._sessions: weakref.WeakSet[SessionLike] = weakref.WeakSet()
        self._lock = threading.Lock()

    # -- declarations -------------------------------------------------------------------------

    def tool(self, name: str | None = None, *, description: str | None = None,
             input_schema: dict[str, Any] | None = None, output_schema: dict[str, Any] | None = None,
             title: str | None = None, annotations: dict[str, Any] | None = None,
             structured: bool = False, meta: dict[str, Any] | None = None) -> Callable[[ToolHandler], ToolHandler]:
        """Decorator declaring a tool; name and description default to the function's name and docstring."""

        def register(fn: ToolHandler) -> ToolHandler:
            self.add_tool(Tool(
                name=name or fn.__name__,
                handler=fn,
                description=description if description is not None else (fn.__doc__ or "").strip(),
                input_schema=input_schema if input_schema is not None else dict(EMPTY_INPUT_SCHEMA),
                output_schema=output_schema,
                title=title,
                annotations=annotations,
                structured=structured,
                meta=meta,
            ))
            return fn

        return register

    def add_tool(self, tool: Tool) -> None:
        if tool.input_schema.get("type") != "object":
            raise ValueError(f'Tool {tool.name!r}: input_schema must have "type": "object"')
        if tool.output_schema is not None and tool.output_schema.get("type") != "object":
            raise ValueError(f'Tool {tool.name!r}: output_schema must have "type": "object"')
        if tool.name in self._tools:
            raise ValueError(f"Tool {tool.name!r} is already declared")
        self._tools[tool.name] = tool

    def defer_tools(self, declare: Callable[[], None]) -> None:
        """Declare tools later: ``declare()`` (which calls :meth:`add_tool`) runs once, the first time the
        tools are read (:attr:`tools`: ``tools/list``, ``tools/call``), or when a transport calls
        :meth:`declare_deferred_tools` (``serve_stdio`` does, right after answering ``initialize``).
        ``initialize`` still announces the tools capability meanwhile.

        For stdio servers: deriving the tools' schemas from the operations' declarations
        (``cairn_servers.core.ops``) need not delay the client's first reply.
        """
        with self._deferring:
            if self._deferred is None:
                self._deferred = []
            self._deferred.append(declare)

    @property
    def tools(self) -> dict[str, Tool]:
        """The declared tools by name (deferred declarations run first: see :meth:`defer_tools`)."""
        if self._deferred is not None:
            self.declare_deferred_tools()
        return self._tools

    def declare_deferred_tools(self) -> None:
        """Run the deferred tool declarations now, once, in order (thread-safe: a second thread waits for
        them). A declaration that raises is dropped (its error goes to the caller, once); one that reads :attr:`tools` itself sees those declared so far."""
        with self._deferring:
            pending = self._deferred
            if pending is None or self._in_deferred:  # all done, or re-entered from a declaration
                return
            self._in_deferred = True
            try:
                while pending:
                    pending.pop(0)()
            finally:  # a declaration that raised is not run again; those after it run next time
                self._in_deferred = False
                self._deferred = pending or None

    def resource(self, uri: str, *, name: str | None = None, title: str | None = None,
                 description: str | None = None, mime_type: str | None = None,
                 size: int | None = None) -> Callable[[Callable[[str], Any]], Callable[[str], Any]]:
        def register(fn: Callable[[str], Any]) -> Callable[[str], Any]:
            self.resources[uri] = Resource(uri, fn, name or fn.__name__, title,
                                           description if description is not None else (fn.__doc__ or "").strip() or None,
                                           mime_type, size)
            return fn

        return register

    def resource_template(self, uri_template: str, *, name: str | None = None, title: str | None = None,
                          description: str | None = None, mime_type: str | None = None
                          ) -> Callable[[Callable[[str, dict[str, str]], Any]], Callable[[str, dict[str, str]], Any]]:
        def register(fn: Callable[[str, dict[str, str]], Any]) -> Callable[[str, dict[str, str]], Any]:
            self.templates.append(ResourceTemplate(
                uri_template, fn, name or fn.__name__, title,
                description if description is not None else (fn.__doc__ or "").strip() or None, mime_type))
            return fn

        return register

    def prompt(self, name: str | None = None, *, description: str | None = None, title: str | None = None,
               arguments: list[dict[str, Any]] | None = None
               ) -> Callable[[Callable[[dict[str, str]], Any]], Callable[[dict[str, str]], Any]]:
        def register(fn: Callable[[dict[str, str]], Any]) -> Callable[[dict[str, str]], Any]:
            pname = name or fn.__name__
            self.prompts[pname] = Prompt(pname, fn,
                                         description if description is not None else (fn.__doc__ or "").strip() or None,
                                         title, list(arguments or []))
            return fn

        return register

    def add_prompt(self, prompt: Prompt) -> None:
        if prompt.name in self.prompts:
            raise ValueError(f"Prompt {prompt.name!r} is already declared")
        self.prompts[prompt.name] = prompt

    def completion(self, fn: Callable[[dict[str, Any], dict[str, Any], dict[str, Any] | None], Any]
                   ) -> Callable[[dict[str, Any], dict[str, Any], dict[str, Any] | None], Any]:
        """Decorator: ``fn(ref, argument, context) -> list[str]`` answers completion/complete."""
        self.completion_handler = fn
        return fn

    # -- introspection ------------------------------------------------------------------------

    def capabilities(self) -> dict[str, Any]:
        """Only what is declared, so the initialize result stays small."""
        caps: dict[str, Any] = {"logging": {}}
        if self._tools or self._deferred:  # not self.tools: deferred tools stay deferred
            caps["tools"] = {}
        if self.resources or self.templates:
            caps["resources"] = {"subscribe": True}
        if self.prompts:
            caps["prompts"] = {}
        if self.completion_handler is not None:
            caps["completions"] = {}
        return caps

    def server_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"name": self.name, "version": self.version}
        if self.title:
            info["title"] = self.title
        if self.website_url:
            info["websiteUrl"] = self.website_url
        return info

    # -- sessions and notifications -----------------------------------------------------------

    def _attach(self, session: SessionLike) -> None:
        with self._lock:
            self._sessions.add(session)

    def sessions(self) -> list[SessionLike]:
        with self._lock:
            return list(self._sessions)

    def notify_resource_updated(self, uri: str) -> int:
        """Send notifications/resources/updated to every session subscribed to ``uri``; returns how many."""
        sent = 0
        for session in self.sessions():
            if session.notify_resource_updated(uri):
                sent += 1
        return sent

    def open_session(self, *, stateless: bool = False, send: Callable[[dict[str, Any]], None] | None = None) -> Session:
        """A new protocol session on this server (transports call this once per connection)."""
        from cairn_servers.mcp.session import Session

        return Session(self, stateless=stateless, send=send)
