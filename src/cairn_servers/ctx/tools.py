"""ctx's tools at run time: the operations of :mod:`cairn_servers.ctx.ops` plus the configuration's Lua tools,
and the pool of knowledge-base services (database connections) that runs them.

One registry feeds ``GET /tools/list``, ``POST /tools/{name}``, MCP ``tools/list`` and ``tools/call``
(HTTP and stdio), ``ctx tool list`` and ``ctx tool test``, and the OpenAPI document. Parameters are
validated against the operation's schema (``Op.bind``) before any handler (or Lua script) runs, so
every surface rejects the same input with the same message, naming the parameter.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from cairn_servers.core.errors import InvalidInput, NotFound

if TYPE_CHECKING:
    from cairn_servers.core.ops import Op
    from cairn_servers.ctx.config import Config
    from cairn_servers.ctx.luaproc import CancelCheck, LuaPool
    from cairn_servers.ctx.pool import ServicePool
    from cairn_servers.ctx.sync import BackgroundEmbedder
    from cairn_servers.mcp.server import Server

# Each Lua run may use up to 64 MiB in its worker process; bounding concurrent runs bounds the
# server's memory (8 x 64 MiB). Further calls wait for a worker.
LUA_CONCURRENCY = 8


def describe(op: "Op") -> dict[str, Any]:
    """A tool as ``/tools/list`` and ``ctx tool list`` show it."""
    return {"name": op.name, "description": op.description, "builtin": not op.extra.get("lua"),
            "parameters": op.input_schema("mcp")}


class Toolbox:
    """Every tool of one configuration, and the pool of knowledge-base services that runs them.

    A call leases a service (one database connection) from :attr:`services` for its work and gives it
    back, so the process holds at most ``[db] pool_size`` connections whatever its threads do; a Lua
    tool or agent leases one per ``context.*`` call, not for its whole run (:class:`Knowledge`). The
    vector matrix cache is shared per process and reloads only when the database's generation moves.
    """

    def __init__(self, config: "Config") -> None:
        from cairn_servers.ctx.ops import OPS
        from cairn_servers.ctx.pool import ServicePool

        self.config = config
        self.services = ServicePool(config)
        self.knowledge = Knowledge(self.services)
        # The tools: the operations on MCP (agent_list/agent_show are not tools: agents are MCP prompts)
        self.ops: dict[str, Op] = {op.name: op for op in OPS.on("mcp")}
        self.pool: LuaPool | None = None  # Lua worker processes, started with the first Lua tool or agent
        self.embedding: BackgroundEmbedder | None = None  # set by embed_in_background (a server)
        self._embedding_lock = threading.Lock()
        self._embedding_closed = False
        self._embedding_asked = False  # embed_in_background was called
        for tc in config.tools:
            if tc.name in self.ops:
                raise InvalidInput(f"{config.path}: [tools.script.{tc.name}]: {tc.name!r} is a built-in tool's name. "
                                   "Rename the section.")
        # only with Lua tools or agents: lupa and the sandbox cost start-up
        if config.tools or any(a.kind == "script" for a in config.agents):
            from cairn_servers.ctx.luaproc import LuaPool

            self.pool = LuaPool(LUA_CONCURRENCY)
        try:
            if config.tools:
                from cairn_servers.ctx.ops import lua_op
                from cairn_servers.ctx.scripts import declare_tool

                assert self.pool is not None
                for tc in config.tools:
                    self.ops[tc.name] = lua_op(declare_tool(tc, self.pool), self.pool)
            from cairn_servers.ctx.agents import Agents

            self.agents = Agents(config, lambda: self.knowledge, self.pool)
        except BaseException:
            if self.pool is not None:
                self.pool.close()
            raise

    def embed_in_background(self, *, wait: bool = True) -> None:
        """Embed the chunks still pending while serving: both ``ctx serve mcp`` servers (HTTP and stdio) call
        this, and :meth:`stop_embedding` (or :meth:`close`) when they stop. Nothing runs when embeddings are
        disabled or ``[embedding] background = false``. The worker is
        :func:`cairn_servers.ctx.service.background_embedder`'s, in :attr:`embedding` once set up.

        :param wait: set it up before returning; False sets it up on a thread of its own (the stdio server
            calls it after answering ``initialize``: the set-up imports the store and the provider)."""
        settings = self.config.embedding
        if settings.provider == "disabled" or not settings.background or self._embedding_asked:
            return
        self._embedding_asked = True

        def setup() -> None:
            from cairn_servers.ctx.service import background_embedder

            worker = background_embedder(self.config)
            with self._embedding_lock:
                if worker is not None and not self._embedding_closed:
                    self.embedding = worker
                    worker.start()

        if wait:
            setup()
        else:
            threading.Thread(target=setup, name="ctx-embed-setup", daemon=True).start()

    def stop_embedding(self, timeout: float = 60.0) -> None:
        """Stop the background embedding (after the provider call under way, waiting at most ``timeout``
        seconds for it); a set-up still under way starts nothing."""
        if not self._embedding_asked:
            return
        with self._embedding_lock:
            self._embedding_closed = True
            worker = self.embedding
        if worker is not None:
            worker.stop(timeout)

    def close(self) -> None:
        """Stop the background embedding, kill the Lua workers (a call still running ends with an error at
        once) and close the services."""
        self.stop_embedding()
        self.agents.close()
        if self.pool is not None:
            self.pool.close()
        self.services.close()

    def list(self) -> list[dict[str, Any]]:
        return [describe(op) for op in self.ops.values()]

    def op(self, name: str) -> "Op":
        op = self.ops.get(name)
        if op is None:
            raise NotFound(f"No tool named {name!r}. Available tools: {', '.join(self.ops)}.",
                           details={"tool": name})
        return op

    def run(self, name: str, params: Any, cancelled: "CancelCheck | None" = None, surface: str = "mcp") -> Any:
        """Validate ``params`` (wire names, JSON values) and run the operation on this thread's service;
        its data as the service returns it (the CLI renders that). The work stops (``Cancelled``) once
        ``cancelled()`` is true: its caller's client went away or cancelled (a Lua tool: its worker killed;
        a built-in tool: its running statement stopped)."""
        from cairn_servers.core import deadline

        op = self.op(name)
        if op.extra.get("lua"):  # a connection per context.* call, none while the script computes
            with deadline.cancellable(cancelled):  # its context.* callbacks' statements stop too
                return op.call(self.knowledge, params, surface, cancelled=cancelled)
        # A built-in tool's statements stop too once its caller gives up (SQLite: the progress handler;
        # PostgreSQL: the running statement cancelled on the server): Cancelled.
        with deadline.cancellable(cancelled), self.services.lease() as svc:
            return op.call(svc, params, surface)

    def call(self, name: str, params: Any, cancelled: "CancelCheck | None" = None) -> Any:
        """:meth:`run`, answered as JSON (what MCP and HTTP send: ``{"results": [...]}``, ...)."""
        from cairn_servers.ctx.ops import to_json

        return to_json(self.op(name), self.run(name, params, cancelled))


class Knowledge:
    """``context.search/get/sources`` for Lua tools and agents: each call leases a service from ``services``
    for itself alone, so a script that computes (or waits) between its calls holds no connection."""

    def __init__(self, services: "ServicePool") -> None:
        self.services = services

    def search(self, query: str, mode: str = "keyword", *, source: str | list[str] | None = None,
               since: str | int | None = None, until: str | int | None = None,
               limit: int | None = None) -> list[Any]:
        with self.services.lease() as svc:
            return list(svc.search(query, mode, source=source, since=since, until=until, limit=limit))

    def get(self, id: str) -> Any:
        with self.services.lease() as svc:
            return svc.get(id)

    def sources(self) -> list[Any]:
        with self.services.lease() as svc:
            return list(svc.sources())


def mcp_server(toolbox: Toolbox) -> Server:
    """An MCP server exposing exactly the toolbox's tools (same names, descriptions, schemas, handlers),
    declared after ``initialize`` is answered over stdio (``Server.defer_tools``)."""
    from cairn_servers.mcp.server import Server

    server = Server(name="ctx", version=_version(), title="ctx knowledge base",
                    instructions="Search the local knowledge base (files, git repositories) with `search`, "
                                 "read a whole document with `get`, list sources with `sources`.")
    add_prompts(server, toolbox)  # before initialize: the prompts capability is announced there
    server.defer_tools(lambda: _declare_tools(server, toolbox))
    return server


def _declare_tools(server: Server, toolbox: Toolbox) -> None:
    from cairn_servers.core.ops import mcp_tool

    for op in toolbox.ops.values():
        def handler(args: dict[str, Any], ctx: Any, _name: str = op.name) -> Any:
            from cairn_servers.core.errors import CairnError
            from cairn_servers.core.sanitize import scrub, scrub_obj

            try:
                # no $HOME or URL credentials, as over HTTP; a cancelled request (notifications/cancelled,
                # a disconnected HTTP client) stops its Lua worker
                return scrub_obj(toolbox.call(_name, args, lambda: ctx.cancelled))
            except CairnError as exc:
                exc.message = scrub(exc.message)
                exc.args = (exc.message,)
                raise

        tool = mcp_tool(op, handler)  # validated by op.bind: the message HTTP and the CLI give
        if op.extra.get("lua"):
            tool.annotations = None  # a script may do anything its config allows: no hints
        server.add_tool(tool)


def add_prompts(server: Any, toolbox: Toolbox) -> None:
    """Each agent as an MCP prompt: ``prompts/get`` answers what ``GET /agents/NAME`` and ``ctx agent
    show`` do (the system prompt as the first, user-role, message), with the same argument checks."""
    from cairn_servers.ctx.agents import prompt_messages
    from cairn_servers.mcp.server import Prompt

    agents = toolbox.agents
    for info in agents.describe_all():
        def handler(args: dict[str, str], ctx: Any, _name: str = info["name"]) -> Any:
            from cairn_servers.core.errors import CairnError
            from cairn_servers.core.sanitize import scrub, scrub_obj

            try:
                # a cancelled request (notifications/cancelled, a disconnected HTTP client) stops a Lua agent
                resolved = agents.resolve(_name, args, lambda: bool(ctx.cancelled))
            except CairnError as exc:
                exc.message = scrub(exc.message)
                exc.args = (exc.message,)
                raise
            answer = {"messages": prompt_messages(resolved)}
            if resolved["description"]:
                answer["description"] = resolved["description"]
            return scrub_obj(answer)

        def check(args: dict[str, Any], _name: str = info["name"]) -> Any:
            return agents.check(_name, args)

        server.add_prompt(Prompt(
            info["name"], handler, description=info["description"] or None,
            arguments=[{k: v for k, v in a.items() if k != "default" and (v or k == "name")}
                       for a in info["arguments"]],
            validate=check, context=True))


def _version() -> str:
    from cairn_servers import __version__  # not importlib.metadata: it costs ctx's stdio start-up ~15 ms

    return __version__
