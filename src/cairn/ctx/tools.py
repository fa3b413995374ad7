"""ctx's tools, declared once: name, description, JSON Schema of the parameters, handler.

The same declarations feed ``GET /tools/list``, ``POST /tools/{name}``, MCP ``tools/list`` and
``tools/call`` (HTTP and stdio), ``ctx tool list`` and ``ctx tool test``, and the OpenAPI document.
Parameters are validated against the schema before any handler (or Lua script) runs, so every
surface rejects the same input with the same message, naming the parameter.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable

from cairn.core.errors import InvalidInput, NotFound

if TYPE_CHECKING:
    from cairn.ctx.config import Config
    from cairn.ctx.luaproc import CancelCheck, LuaPool
    from cairn.ctx.scripts import LuaTool
    from cairn.ctx.service import Service

_SOURCE = {
    "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
    "description": "only these sources: `type:name`, a connector type, or a connector name",
}
SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1, "description": "what to look for (any text)"},
        "mode": {"type": "string", "enum": ["keyword", "semantic", "hybrid"], "default": "keyword",
                 "description": "keyword (BM25), semantic (embeddings) or hybrid (both, fused)"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 1000,
                  "description": "maximum number of documents (default: [retrieval] final_limit)"},
        "source": _SOURCE,
        "filters": {
            "type": "object",
            "properties": {
                "source": _SOURCE,
                "since": {"type": ["string", "integer"],
                          "description": "only documents updated at/after this date (YYYY-MM-DD, ISO 8601, unix seconds)"},
                "until": {"type": ["string", "integer"], "description": "only documents updated before this date"},
            },
            "additionalProperties": False,
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}
GET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"id": {"type": "string", "minLength": 1, "description": "a document id from search results"}},
    "required": ["id"],
    "additionalProperties": False,
}
SOURCES_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


@dataclass
class ToolSpec:
    """One tool on every surface. ``run(params, service)`` gets validated params with defaults filled."""

    name: str
    description: str
    parameters: dict[str, Any]
    builtin: bool
    run: Callable[[dict[str, Any], "Service"], Any]
    # A Lua tool's run that stops (killing its worker) once ``cancelled()`` is true; see Toolbox.call.
    run_cancellable: Callable[[dict[str, Any], "Service", "CancelCheck | None"], Any] | None = None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "builtin": self.builtin,
                "parameters": self.parameters}


def _search(p: dict[str, Any], svc: "Service") -> dict[str, Any]:
    filters = p.get("filters") or {}
    source = p.get("source")
    if filters.get("source") is not None:
        extra = filters["source"]
        source = ([source] if isinstance(source, str) else list(source or [])) + (
            [extra] if isinstance(extra, str) else list(extra))
    hits = svc.search(p["query"], p.get("mode", "keyword"), source=source, since=filters.get("since"),
                      until=filters.get("until"), limit=p.get("limit"))
    return {"results": [dict(h.__dict__) for h in hits]}  # flat dataclasses: asdict's deep copy is 1/4 of a search


def _get(p: dict[str, Any], svc: "Service") -> dict[str, Any]:
    return asdict(svc.get(p["id"]))


def _sources(p: dict[str, Any], svc: "Service") -> dict[str, Any]:
    return {"sources": [asdict(s) for s in svc.sources()]}


# The built-in tools' descriptions: the first paragraph of the ``Service`` methods' docstrings, written
# out so that declaring the tools (``ctx serve mcp --stdio``, before ``initialize`` is answered) does not
# import the service, store and retrieval modules. tests/ctx/test_tools.py checks they stay in step.
DESCRIPTIONS = {
    "search": "Search indexed documents by keyword, semantic, or hybrid query.",
    "get": "A document by id, with its full body and its chunks in order.",
    "sources": "Configured sources with their health (last sync result) and document counts.",
}


def builtin_specs() -> list[ToolSpec]:
    return [
        ToolSpec("search", DESCRIPTIONS["search"], SEARCH_SCHEMA, True, _search),
        ToolSpec("get", DESCRIPTIONS["get"], GET_SCHEMA, True, _get),
        ToolSpec("sources", DESCRIPTIONS["sources"], SOURCES_SCHEMA, True, _sources),
    ]


# Each Lua run may use up to 64 MiB in its worker process; bounding concurrent runs bounds the
# server's memory (8 x 64 MiB). Further calls wait for a worker.
LUA_CONCURRENCY = 8


def _lua_spec(tool: "LuaTool", pool: "LuaPool") -> ToolSpec:
    from cairn.ctx.scripts import run_tool

    def run(params: dict[str, Any], svc: "Service", cancelled: "CancelCheck | None" = None) -> Any:
        return {"result": run_tool(tool, params, svc, pool, cancelled)}

    return ToolSpec(tool.name, tool.description, tool.schema, False, run, run)


def validate(spec: ToolSpec, params: Any) -> dict[str, Any]:
    """``params`` checked against the tool's schema (400 naming the parameter), with defaults filled in."""
    from cairn.mcp.schema import SchemaError, validate as check

    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InvalidInput(f"Parameters of {spec.name!r} must be a JSON object.")
    try:
        check(params, spec.parameters)
    except SchemaError as exc:
        field = exc.path or None
        raise InvalidInput(f"Invalid parameter for {spec.name!r}: {exc}",
                           details={"tool": spec.name, **({"parameter": field} if field else {})}) from None
    out = dict(params)
    for name, prop in spec.parameters.get("properties", {}).items():
        if name not in out and isinstance(prop, dict) and "default" in prop:
            out[name] = prop["default"]
    return out


class Toolbox:
    """Every tool of one configuration, and a knowledge-base service per thread to run them on.

    SQLite connections are not shared between threads: each worker thread gets its own ``Service``
    (they all see the same database; the vector matrix cache is shared per process and reloads only
    when the database's generation moves).
    """

    def __init__(self, config: "Config") -> None:
        self.config = config
        self.specs: dict[str, ToolSpec] = {s.name: s for s in builtin_specs()}
        self.pool: LuaPool | None = None  # Lua worker processes, started with the first Lua tool
        for tc in config.tools:
            from cairn.ctx.scripts import declare_tool  # only with Lua tools: lupa and the sandbox cost start-up

            if tc.name in self.specs:
                raise InvalidInput(f"{config.path}: [tools.script.{tc.name}]: {tc.name!r} is a built-in tool's name. "
                                   "Rename the section.")
        if config.tools:
            from cairn.ctx.luaproc import LuaPool
            from cairn.ctx.scripts import declare_tool

            self.pool = LuaPool(LUA_CONCURRENCY)
            try:
                for tc in config.tools:
                    self.specs[tc.name] = _lua_spec(declare_tool(tc, self.pool), self.pool)
            except BaseException:
                self.pool.close()
                raise
        self._local = threading.local()
        self._services: list[Service] = []
        self._lock = threading.Lock()

    def service(self) -> "Service":
        svc: Service | None = getattr(self._local, "service", None)
        if svc is None:
            from cairn.ctx.service import Service

            svc = Service(self.config)
            self._local.service = svc
            with self._lock:
                self._services.append(svc)
        return svc

    def close(self) -> None:
        """Kill the Lua workers (a call still running ends with an error at once) and close the services."""
        if self.pool is not None:
            self.pool.close()
        with self._lock:
            services, self._services = self._services, []
        for svc in services:
            try:
                svc.close()
            except Exception:
                pass

    def list(self) -> list[dict[str, Any]]:
        return [s.describe() for s in self.specs.values()]

    def spec(self, name: str) -> ToolSpec:
        spec = self.specs.get(name)
        if spec is None:
            raise NotFound(f"No tool named {name!r}. Available tools: {', '.join(self.specs)}.",
                           details={"tool": name})
        return spec

    def call(self, name: str, params: Any, cancelled: "CancelCheck | None" = None) -> Any:
        """Validate and run a tool on this thread's service. A Lua tool stops (``luaproc.Cancelled``)
        once ``cancelled()`` is true: its caller's client went away or cancelled the request."""
        spec = self.spec(name)
        if spec.run_cancellable is not None:
            return spec.run_cancellable(validate(spec, params), self.service(), cancelled)
        return spec.run(validate(spec, params), self.service())


def mcp_server(toolbox: Toolbox) -> Any:
    """An MCP server exposing exactly the toolbox's tools (same names, descriptions, schemas, handlers)."""
    from cairn.mcp.server import Server, Tool

    server = Server(name="ctx", version=_version(), title="ctx knowledge base",
                    instructions="Search the local knowledge base (files, git repositories) with `search`, "
                                 "read a whole document with `get`, list sources with `sources`.")
    for spec in toolbox.specs.values():
        def handler(args: dict[str, Any], ctx: Any, _name: str = spec.name) -> Any:
            from cairn.core.errors import CairnError
            from cairn.core.sanitize import scrub, scrub_obj

            try:
                # no $HOME or URL credentials, as over HTTP; a cancelled request (notifications/cancelled,
                # a disconnected HTTP client) stops its Lua worker
                return scrub_obj(toolbox.call(_name, args, lambda: ctx.cancelled))
            except CairnError as exc:
                exc.message = scrub(exc.message)
                exc.args = (exc.message,)
                raise

        server.add_tool(Tool(name=spec.name, handler=handler, description=spec.description,
                             input_schema=spec.parameters, structured=True,
                             annotations={"readOnlyHint": True} if spec.builtin else None))
    return server


def _version() -> str:
    from cairn import __version__  # not importlib.metadata: it costs ctx's stdio start-up ~15 ms

    return __version__
