"""ctx's operations, declared once: ``search``, ``get`` and ``sources`` (and each Lua tool, at run time).

From these declarations (:mod:`cairn_servers.core.ops`) come the MCP tools (stdio and HTTP), the HTTP routes
``POST /tools/search``, ``POST /tools/get``, ``GET /tools/sources`` and ``POST /tools/{name}``,
``GET /tools/list`` and ``/openapi.json``, and the ``ctx search|get|sources`` commands. A parameter is
checked against the one schema before any work, so a bad value gets the same message on every surface
(``Invalid parameter for 'search': limit: 2000 is greater than the maximum of 1000``), with the details
clients of ``/tools/*`` know: ``{"tool", "parameter"}`` (the parameter's full path, ``filters.since``).

The functions take a :class:`~cairn_servers.ctx.service.Service` leased from the pool
(:mod:`cairn_servers.ctx.pool`) and return its data (dataclasses);
:func:`to_json` gives the JSON the tools answer (``{"results": [...]}``, ``{"sources": [...]}``, the
document). The CLI renders the same data itself (a list for ``--json``, its own text). A Lua tool is an
operation built from the schema its script declares (:func:`lua_op`); it answers ``{"result": ...}``.

Start-up: declaring these costs ``ctx serve mcp --stdio`` nothing before its first reply: no service,
store or retrieval import here (annotations are strings), and schemas are built on first use.
"""

from __future__ import annotations

from cairn_servers.core.ops import Op, Registry

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing stays off the stdio start-up path
if TYPE_CHECKING:
    from typing import Any, Literal

    from cairn_servers.ctx.agents import Agents
    from cairn_servers.ctx.luaproc import CancelCheck, LuaPool
    from cairn_servers.ctx.scripts import KnowledgeBase, LuaTool
    from cairn_servers.ctx.service import Document, SearchResult, Service, SourceStatus


def tool_details(op: str, field: str | None) -> dict[str, Any]:
    """The details of a refused parameter, as ``/tools/*`` has always given them."""
    return {"tool": op, "parameter": field} if field else {"tool": op}


OPS = Registry("ctx")

_SOURCE_DOC = "only these sources: `type:name`, a connector type, or a connector name"
_DATE = {"type": ["string", "integer"]}


@OPS.op(mcp="search", cli="search", http="POST /tools/search", error_details=tool_details,
        extra={"key": "results"},
        params={
            "query": {"positional": True, "minLength": 1},
            "mode": {"metavar": "MODE"},
            # absent (None) means the configured default; null itself is not a value a client sends
            "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "metavar": "N"},
            "source": {"type": ["string", "array"], "metavar": "SOURCE"},
            "filters": {"type": "object", "surfaces": ("mcp", "http"), "additionalProperties": False, "properties": {
                "source": {"type": ["string", "array"], "items": {"type": "string"}, "description": _SOURCE_DOC},
                "since": {**_DATE, "description": "only documents updated at/after this date "
                                                  "(YYYY-MM-DD, ISO 8601, unix seconds)"},
                "until": {**_DATE, "description": "only documents updated before this date"}}},
            # The CLI spells the date filters as options (--since, --until); JSON clients nest them in filters.
            "since": {**_DATE, "surfaces": ("cli",), "metavar": "DATE"},
            "until": {**_DATE, "surfaces": ("cli",), "metavar": "DATE"},
        })
def search(svc: Service, query: str, mode: Literal["keyword", "semantic", "hybrid"] = "keyword",
           limit: int | None = None, source: str | list[str] | None = None, filters: dict[str, Any] | None = None,
           since: str | int | None = None, until: str | int | None = None,
           explain: bool = False) -> list[SearchResult]:
    """Search indexed documents by keyword, semantic, or hybrid query.

    :param query: what to look for (any text)
    :param mode: keyword (BM25), semantic (embeddings) or hybrid (both, fused)
    :param limit: maximum number of documents (default: [retrieval] final_limit)
    :param source: only these sources: `type:name`, a connector type, or a connector name; several as a
        list (on the CLI, --source again)
    :param filters: `source` (combined with the parameter above), `since` and `until` (YYYY-MM-DD,
        ISO 8601 or unix seconds)
    :param since: only documents updated at/after this date (YYYY-MM-DD, ISO 8601, unix seconds)
    :param until: only documents updated before this date
    :param explain: add `explain` to each result: the keyword rank and BM25 score (on PostgreSQL its own
        IDF-weighted ts_rank) and the vector rank and cosine of its best chunk (null where that list did
        not find it), and the fused score (hybrid)
    """
    if filters:
        extra = filters.get("source")
        if extra is not None:
            source = ([source] if isinstance(source, str) else list(source or [])) + (
                [extra] if isinstance(extra, str) else list(extra))
        since = filters.get("since", since)
        until = filters.get("until", until)
    return svc.search(query, mode, source=source, since=since, until=until, limit=limit, explain=explain)


@OPS.op(mcp="get", cli="get", http="POST /tools/get", error_details=tool_details,
        params={"id": {"positional": True, "minLength": 1}})
def get(svc: Service, id: str) -> Document:
    """A document by id, with its full body and its chunks in order.

    :param id: a document id from search results
    """
    return svc.get(id)


@OPS.op(mcp="sources", cli="sources", http="GET /tools/sources", error_details=tool_details,
        extra={"key": "sources"})
def sources(svc: Service) -> list[SourceStatus]:
    """Configured sources with their health (last sync result) and document counts."""
    return svc.sources()


# Agents (cairn_servers.ctx.agents): prompts, not tools. MCP serves them as prompts (prompts/list, prompts/get,
# from the same Agents), so these operations are on the CLI and HTTP only; they run on the Agents of
# the configuration (extra["agents"]), not on a leased Service. extra["http_aliases"]: the same operation at
# Context Harness's routes (GET /agents/list, POST /agents/{name}/prompt), so a client written for it works;
# the HTTP server serves them and lists them in /openapi.json from here.

@OPS.op(name="agent_list", cli="agent list", http="GET /agents",
        extra={"key": "agents", "agents": True, "http_aliases": (("GET", "/agents/list"),)})
def agent_list(agents: Agents) -> list[dict[str, Any]]:
    """The configured agents: name, description, kind (and source: toml or lua), tools, search defaults and
    arguments."""
    return agents.describe_all()


@OPS.op(name="agent_show", cli="agent show", http="POST /agents/{name}",
        extra={"agents": True, "http_aliases": (("POST", "/agents/{name}/prompt"),)},
        params={"name": {"positional": True, "minLength": 1, "metavar": "NAME"},
                "arguments": {"surfaces": ()}, "cancelled": {"surfaces": ()}})
def agent_show(agents: Agents, name: str, arguments: dict[str, Any] | None = None,
               cancelled: CancelCheck | None = None) -> dict[str, Any]:
    """One agent's prompt, resolved with its arguments: its description, tools and search defaults, the
    system prompt (`{{argument}}` filled in; a Lua agent builds it, e.g. from a search) and messages.

    :param name: an agent name (see agent list)
    :param arguments: the agent's arguments (strings): `--arg KEY=VALUE` on the CLI, the JSON body
        over HTTP, the prompt arguments over MCP
    :param cancelled: true once the caller gave up (its HTTP client went away): a Lua agent stops
    """
    return agents.resolve(name, arguments, cancelled)


def to_json(op: Op, value: Any) -> Any:
    """What a tool answers over MCP and HTTP: the data as JSON, a list wrapped in the op's ``key``."""
    import dataclasses

    key = op.extra.get("key")
    if key is not None:
        # flat dataclasses: a shallow dict is a quarter of the cost of asdict's deep copy per search
        answer = {key: [item if isinstance(item, dict) else dict(item.__dict__) for item in value]}
        answer.update(getattr(value, "extra", None) or {})  # search: "unembedded" (semantic, hybrid)
        return answer
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def lua_op(tool: LuaTool, pool: LuaPool) -> Op:
    """A Lua tool as an operation: its script's schema, ``{"result": ...}`` from ``tool.execute``. It
    stops (killing its worker) once the surface's ``cancelled()`` is true."""
    from cairn_servers.ctx.scripts import run_tool

    def run(svc: KnowledgeBase, params: dict[str, Any], *, cancelled: CancelCheck | None = None) -> Any:
        return {"result": run_tool(tool, params, svc, pool, cancelled)}

    return Op(run, name=tool.name, mcp=tool.name, http=f"POST /tools/{tool.name}", schema=tool.schema,
              description=tool.description, read_only=False, open_world=True, error_details=tool_details,
              extra={"lua": True})
