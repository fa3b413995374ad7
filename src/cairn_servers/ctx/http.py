"""``ctx serve mcp``: the HTTP API (``/tools/*``, ``/agents``, ``/health``, ``/openapi.json``) and MCP at ``/mcp`` and ``/``.

Routes are thin: read the JSON body (capped, content type checked), call the toolbox (which validates
against the same declarations MCP uses), and answer JSON. Every failure, routing ones included, is one
envelope ``{"error": {"code", "message"}}`` (``cairn_servers.core.errors.envelope``) with the status of the error's class (400 validation, 401
auth, 403 a request from a web page of another site or for another host (without a token), 404 unknown tool/document/route, 405, 408 Lua timeout, 413 body too large, 415 content type,
499 a call cancelled by a client that disconnected (nobody reads it),
500 internal). Unexpected exceptions are logged to stderr with their traceback; the client only
learns their type. Each call runs on a service leased from the toolbox's pool. Lua tools and agents run
on the shared thread pool, and so does any built-in tool on PostgreSQL or a semantic or hybrid search.
A built-in tool on SQLite (keyword search, get, sources) is first tried on the event loop under
:class:`LoopBudget` (a few ms, the statement interrupted past it): most answer there, which spares two
thread hops that cost about a third of the throughput; a knowledge base large enough to have a keyword head
index sends its keyword searches to the threads untried. Past the budget, the call is done again on one of
``TOOL_THREADS`` threads, and the event loop never waits longer. A GET never runs a Lua tool or agent.
"""

from __future__ import annotations

import hmac
import json
import sys
import traceback
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from cairn_servers.core.errors import CairnError, InvalidInput, NotFound, TooLarge, Unauthorized, envelope

if TYPE_CHECKING:
    from pathlib import Path

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.types import ASGIApp, Receive, Scope, Send

    from cairn_servers.core.ops import Op
    from cairn_servers.ctx.config import Config
    from cairn_servers.ctx.tools import Toolbox

MAX_BODY = 1 << 20  # bytes of a request body
TOOL_THREADS = 4  # threads answering built-in tools (search, get, sources) the event loop did not answer
LOOP_TRY = 0.005  # seconds a built-in tool may run on the event loop before it is stopped and sent to a thread
LOOP_WASTE = 0.05  # seconds per second the loop may spend on such stopped tries; past it, threads answer all


class LoopBudget:
    """Which built-in calls are tried on the event loop (see the module docstring). A stopped try is work
    thrown away, so the tries' waste is capped: once stopped tries used ``LOOP_WASTE`` s within one second,
    every call goes to the threads until the next second (a flood of costly queries costs the loop at
    most 5 %)."""

    def __init__(self, sqlite: bool, keyword_files: "Path | None" = None) -> None:
        self.sqlite = sqlite
        self.second = 0
        self.wasted = 0.0
        self.tries = self.stopped = 0  # (for tests and benchmarks)
        # The knowledge base's keyword head index (cairn_servers.ctx.keyword_index): it exists for large ones
        # only, whose keyword searches take milliseconds of numpy work: those go to the threads untried.
        self.keyword_files = keyword_files
        self.large = False

    def allows(self, name: str, params: Any) -> bool:
        if not self.sqlite or name not in ("search", "get", "sources"):
            return False  # a PostgreSQL statement waits on the network; a Lua tool on its worker
        if name == "search" and not (isinstance(params, dict) and params.get("mode", "keyword") == "keyword"):
            return False  # an embedding is computed (not interruptible)
        import time

        now = int(time.monotonic())
        if now != self.second:
            self.second, self.wasted = now, 0.0
            self.large = self.keyword_files is not None and self.keyword_files.exists()  # looked at once a second
        if name == "search" and self.large:
            return False
        return self.wasted < LOOP_WASTE

    def run(self, fn: Callable[[], bytes]) -> bytes | None:
        """``fn()`` on this (the loop's) thread under the budget; None when it was stopped."""
        import time

        from cairn_servers.core import deadline

        self.tries += 1
        start = time.monotonic()
        try:
            with deadline.budget(LOOP_TRY):
                return fn()
        except deadline.OverBudget:
            self.stopped += 1
            self.wasted += time.monotonic() - start
            return None


class UnsupportedMediaType(InvalidInput):
    """The request body is not JSON."""

    code = "unsupported_media_type"
    http_status = 415


class MethodNotAllowed(InvalidInput):
    """The route exists but not for this method."""

    code = "method_not_allowed"
    http_status = 405


def _dumps(data: Any) -> bytes:
    from cairn_servers.core.output import json_bytes

    return json_bytes(data)


def error_body(exc: CairnError) -> bytes:
    return _dumps(envelope(exc))


def error_response(exc: CairnError, headers: dict[str, str] | None = None) -> "Response":
    from starlette.responses import Response

    return Response(error_body(exc), status_code=exc.http_status, media_type="application/json", headers=headers)


def internal_error(exc: BaseException) -> "Response":
    traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    return error_response(CairnError(f"Internal error ({type(exc).__name__}). The server log has the details."))


async def read_json(request: "Request") -> Any:
    """The JSON body (an empty body is ``{}``); 413 past ``MAX_BODY``, 415 for other media, 400 when malformed."""
    length = request.headers.get("content-length")
    if length and length.isdigit() and int(length) > MAX_BODY:
        raise TooLarge(f"The request body is {length} bytes; the limit is {MAX_BODY}.")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise TooLarge(f"The request body is over the limit of {MAX_BODY} bytes.")
    if not body.strip():
        return {}
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        raise UnsupportedMediaType(
            f"The request body must be JSON (Content-Type: application/json), not {media or 'unspecified'!r}.")
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        reason = "a number has more than 4300 digits" if "integer string conversion" in str(exc) else str(exc)
        raise InvalidInput(f"The request body is not valid JSON: {reason}.") from None
    except RecursionError:
        raise InvalidInput("The request body is nested too deeply to be parsed.") from None


def create_app(config: "Config", toolbox: "Toolbox | None" = None, *, auth_token: str | None = None,
               cors_origins: list[str] | None = None) -> "Starlette":
    """The ASGI app for ``config``; ``auth_token``/``cors_origins`` default to the config's ``[server]``."""
    import asyncio
    import threading
    from concurrent.futures import ThreadPoolExecutor
    from contextlib import asynccontextmanager

    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware
    from starlette.requests import ClientDisconnect
    from starlette.responses import Response
    from starlette.routing import Route

    from cairn_servers.core.ops import query_args
    from cairn_servers.core.serve import CrossSiteGuard
    from cairn_servers.ctx.ops import OPS
    from cairn_servers.ctx.tools import Toolbox, mcp_server
    from cairn_servers.mcp.http import _disconnected as disconnected, mcp_app

    box = toolbox if toolbox is not None else Toolbox(config)
    token = auth_token if auth_token is not None else config.server.auth_token
    origins = cors_origins if cors_origins is not None else list(config.server.cors_origins)

    def ok(data: Any) -> Response:
        """A JSON answer; ``bytes`` are one already encoded (off the loop, by the thread that made it)."""
        return Response(data if isinstance(data, bytes) else _dumps(data), media_type="application/json")

    def endpoint(fn: Callable[["Request"], Awaitable[Any]]) -> Callable[["Request"], Awaitable[Response]]:
        async def run(request: "Request") -> Response:
            try:
                return ok(await fn(request))
            except ClientDisconnect:  # gone while sending its body: nobody reads the answer
                return Response(status_code=400)
            except CairnError as exc:
                # A refused upload is not read further: close the connection rather than drain it.
                return error_response(exc, headers={"connection": "close"} if exc.http_status == 413 else None)
            except Exception as exc:  # never a traceback in the body
                return internal_error(exc)

        return run

    async def call(name: str, request: "Request") -> Any:
        params = await read_json(request)
        op = box.op(name)  # 404 before any work
        if not op.extra.get("lua"):
            return await built_in(name, params, request)
        return await run_while_connected(request, name, params)

    async def built_in(name: str, params: Any, request: "Request | None" = None) -> Any:
        """A built-in tool's answer, encoded: tried on the loop (see LoopBudget), else on the tool threads.
        There, /health and every other request go on while it runs (a search's time depends on its terms
        and the backend), and a client that disconnects stops it: its statement is interrupted (SQLite)
        or cancelled (PostgreSQL). The answer is encoded where it was made: a document's JSON is most of
        the CPU a large answer costs."""
        if loop_budget.allows(name, params):
            answer = loop_budget.run(lambda: _dumps(box.call(name, params)))
            if answer is not None:
                return answer
        if request is None:
            return await off_loop(lambda: _dumps(box.call(name, params)))
        return await run_cancellable(request, lambda cancelled: _dumps(box.call(name, params, cancelled)),
                                     tool_threads)

    # Built-in tools run on a few threads of their own: a few threads contend less for the GIL and reuse the
    # pool's services (their caches of term counts and rankings) more than anyio's 40 would; Lua tools,
    # which mostly wait for their worker process, use the larger shared pool.
    tool_threads = ThreadPoolExecutor(max_workers=TOOL_THREADS, thread_name_prefix="ctx-tool")
    from cairn_servers.ctx.keyword_index import folder

    loop_budget = LoopBudget(sqlite=config.db.url is None, keyword_files=folder(config.db.path))

    async def off_loop(fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(tool_threads, fn, *args)

    async def run_while_connected(request: "Request", name: str, params: Any) -> Any:
        """``box.call`` in the thread pool; if the client disconnects first, a Lua tool is stopped
        (its worker killed, ``Cancelled``: 499, which nobody reads) instead of running to its timeout."""
        return await run_cancellable(request, lambda cancelled: box.call(name, params, cancelled))

    async def run_cancellable(request: "Request", work_fn: Callable[[Callable[[], bool]], Any],
                              threads: ThreadPoolExecutor | None = None) -> Any:
        """``work_fn(cancelled)`` in ``threads`` (default: the shared thread pool), ``cancelled()`` turning
        true once the client is gone."""
        gone = threading.Event()
        if threads is None:
            work = asyncio.ensure_future(run_in_threadpool(work_fn, gone.is_set))
        else:
            work = asyncio.ensure_future(asyncio.get_running_loop().run_in_executor(threads, work_fn, gone.is_set))
        watch = asyncio.ensure_future(disconnected(request))
        try:
            await asyncio.wait((work, watch), return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
        gone.set()  # also when the work finished first: the flag is only read while it runs
        return await work  # a built-in tool's statement and a Lua tool stop within about 50 ms

    def route(op: "Op") -> Route:
        """The operation's own route (``POST /tools/search``, ``GET /tools/sources``, a Lua tool's
        ``POST /tools/NAME``): a JSON body, or the query string for GET."""
        assert op.http is not None
        method, path = op.http
        if method == "GET":
            async def answer(request: "Request") -> Any:
                return await built_in(op.name, query_args(op, request.query_params))
        else:
            async def answer(request: "Request") -> Any:
                return await call(op.name, request)
        return Route(path, endpoint(answer), methods=[method])

    def agent_routes(op: "Op") -> list[Route]:
        """``GET /agents`` (the list) and ``POST /agents/{name}`` (one agent's prompt, resolved: the JSON body
        holds its arguments, ``{"topic": "deploys"}``), each also at its declared aliases (Context Harness's
        ``GET /agents/list`` and ``POST /agents/{name}/prompt``). A GET never runs an agent: a web page can
        make the user's browser send one without asking (``GET /agents/{name}`` shows the definition)."""
        assert op.http is not None
        method, path = op.http
        aliases: list[tuple[str, str]] = list(op.extra.get("http_aliases", ()))

        async def answer(request: "Request") -> Any:
            from cairn_servers.ctx.ops import to_json

            args = dict(request.path_params)
            if "name" not in args:  # the list
                args.update(query_args(op, request.query_params))
                return to_json(op, op.call(box.agents, args, "http"))
            if request.query_params:
                raise InvalidInput(f"POST {request.url.path} takes the agent's arguments as a JSON body "
                                   '(such as {"topic": "deploys"}), not in the query string.')
            arguments = await read_json(request)  # an object of strings: checked with the agent's arguments
            # in the thread pool; a Lua agent stops (its worker killed) if the client goes away, as a Lua tool does
            value = await run_cancellable(
                request, lambda cancelled: op.call(box.agents, args, "http", arguments=arguments, cancelled=cancelled))
            return to_json(op, value)

        served = endpoint(answer)
        return [Route(p, served, methods=[m]) for m, p in [(method, path), *aliases]]

    @endpoint
    async def agent_definition(request: "Request") -> Any:
        """``GET /agents/{name}``: the agent as ``GET /agents`` lists it; nothing runs."""
        from cairn_servers.ctx.agents import describe

        name = request.path_params["name"]
        if request.query_params:
            raise InvalidInput(f"GET /agents/{name} shows the agent without running it and takes no parameters. "
                               f"To resolve its prompt, POST /agents/{name} with its arguments as a JSON body "
                               '(such as {"topic": "deploys"}).')
        return describe(box.agents.agent(name))

    @endpoint
    async def tool(request: "Request") -> Any:
        return await call(request.path_params["name"], request)

    @endpoint
    async def tools_list(request: "Request") -> Any:
        return {"tools": box.list()}

    @endpoint
    async def health(request: "Request") -> Any:
        return {"status": "ok"}

    mcp_origins = [o for o in origins if o != "*" and not o.endswith(":*")]  # loopback pages are always allowed
    mcp = mcp_app(mcp_server(box), stateless=True, allowed_origins=mcp_origins)
    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/openapi.json", endpoint(lambda r: _async(openapi(box))), methods=["GET"]),
        Route("/tools/list", tools_list, methods=["GET"]),
        *(route(op) for op in box.ops.values() if op.http is not None and not op.extra.get("lua")),
        # Any tool by name: the Lua tools' routes (POST /tools/NAME, in the OpenAPI document from their
        # declarations), and the built-in ones too (POST /tools/sources); 404 for an unknown name.
        Route("/tools/{name}", tool, methods=["POST"]),
        # before GET /agents/{name}, which would take GET /agents/list for an agent named "list"
        *(r for op in OPS if op.extra.get("agents") for r in agent_routes(op)),
        Route("/agents/{name}", agent_definition, methods=["GET"]),
        Route("/mcp", mcp),
        # The seed's client configuration points at the server's root URL: the same app answers there.
        Route("/", RootMcp(mcp)),
    ]

    async def http_error(request: "Request", exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        if status == 404:
            return error_response(NotFound(f"No route {request.method} {request.url.path}. See GET /openapi.json."))
        if status == 405:
            allow = getattr(exc, "headers", None) or {}
            return error_response(MethodNotAllowed(f"{request.method} is not allowed on {request.url.path}."),
                                  headers=dict(allow))
        return error_response(InvalidInput(str(getattr(exc, "detail", "Bad request"))))

    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        box.embed_in_background()  # pending chunks embedded while serving (unless disabled)
        app.state.embedding = box.embedding
        yield
        await asyncio.to_thread(box.stop_embedding)  # after the provider call under way
        tool_threads.shutdown(wait=False, cancel_futures=True)
        box.close()

    middleware = []
    if origins:
        exact, pattern = cors_rules(origins)
        middleware.append(Middleware(CORSMiddleware, allow_origins=exact, allow_origin_regex=pattern,
                                     allow_methods=["GET", "POST", "OPTIONS"], allow_headers=["*"],
                                     expose_headers=["Mcp-Session-Id"], max_age=600))
    if token:
        middleware.append(Middleware(BearerAuth, token=token))
    else:
        # No token: a web page of another site must not reach the tools and agents through the user's
        # browser (a form post or fetch() runs them even though CORS hides the answer). /mcp and / apply
        # the same rule in the MCP app, with JSON-RPC errors.
        middleware.append(Middleware(CrossSiteGuard, allowed_origins=mcp_origins, exempt=("/mcp", "/"),
                                     hint="Serve the page from this machine, list its origin in [server] "
                                          "cors_origins, or set an auth_token."))
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan,
                    exception_handlers={HTTPException: http_error})
    app.state.toolbox = box
    app.state.loop_budget = loop_budget
    return app


def cors_rules(origins: list[str]) -> tuple[list[str], str | None]:
    """``[server] cors_origins`` as CORSMiddleware's exact origins and one regex for the ``host:*`` entries
    (any port, or none). ``"*"`` stays in the exact list, where it means every origin."""
    import re

    exact = [o.rstrip("/") for o in origins if not o.endswith(":*")]
    wild = [re.escape(o[:-2]) + r"(?::\d{1,5})?" for o in origins if o.endswith(":*")]
    return exact, ("|".join(wild) or None)


async def _async(value: Any) -> Any:
    return value


INDEX = {
    "name": "ctx",
    "mcp": "POST / or POST /mcp: MCP Streamable HTTP (stateless)",
    "openapi": "/openapi.json",
    "tools": "/tools/list",
    "agents": "/agents",
    "health": "/health",
}


class RootMcp:
    """``/``: the MCP app mounted at ``/mcp`` (the same instance, so the same Host/Origin guard, body limit
    and session handling; the auth middleware wraps both). A browser's plain ``GET /`` (no
    ``Accept: text/event-stream``, so not an MCP stream request) gets a short JSON index of the routes."""

    def __init__(self, mcp: "ASGIApp") -> None:
        self.mcp = mcp

    async def __call__(self, scope: "Scope", receive: "Receive", send: "Send") -> None:
        if scope["type"] == "http" and scope["method"] in ("GET", "HEAD"):
            accept = b",".join(v for k, v in scope["headers"] if k == b"accept")
            if b"text/event-stream" not in accept:
                from starlette.responses import Response

                await Response(_dumps(INDEX), media_type="application/json")(scope, receive, send)
                return
        await self.mcp(scope, receive, send)


class BearerAuth:
    """``Authorization: Bearer <token>`` on every route but ``/health`` and CORS preflights (constant-time compare)."""

    def __init__(self, app: "ASGIApp", token: str) -> None:
        self.app = app
        self.token = token.encode("utf-8")

    async def __call__(self, scope: "Scope", receive: "Receive", send: "Send") -> None:
        if scope["type"] == "http" and scope["method"] != "OPTIONS" and scope["path"] != "/health":
            header = b""
            for key, value in scope["headers"]:
                if key == b"authorization":
                    header = value
                    break
            scheme, _, given = header.partition(b" ")
            if not (scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token)):
                response = error_response(
                    Unauthorized("Missing or wrong bearer token. Send `Authorization: Bearer <token>` "
                                 "(the server's [server] auth_token or $CTX_AUTH_TOKEN)."),
                    headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def openapi(box: "Toolbox") -> dict[str, Any]:
    """OpenAPI 3.1 for every route: the operations' own routes from their declarations
    (:func:`cairn_servers.core.ops.openapi_paths`: request bodies are their input schemas), plus the rest."""
    from cairn_servers.core.ops import openapi_paths

    err = {"$ref": "#/components/schemas/Error"}

    def errors(*codes: int) -> dict[str, Any]:
        reasons = {400: "invalid parameters or malformed JSON", 401: "missing or wrong bearer token",
                   404: "unknown tool, document or agent", 408: "a Lua tool or agent ran past its timeout",
                   413: "request body too large", 415: "body is not JSON", 500: "internal or script error"}
        return {str(c): {"description": reasons[c], "content": {"application/json": {"schema": err}}} for c in codes}

    def body(schema: dict[str, Any]) -> dict[str, Any]:
        return {"required": False, "content": {"application/json": {"schema": schema}}}

    def reply(description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"description": description, "content": {"application/json": {"schema": schema or {"type": "object"}}}}

    ops = list(box.ops.values())
    paths: dict[str, Any] = {
        "/health": {"get": {"summary": "Health check", "responses": {"200": reply("ok", {
            "type": "object", "properties": {"status": {"const": "ok"}}})}}},
        "/openapi.json": {"get": {"summary": "This document", "responses": {"200": reply("OpenAPI 3.1")}}},
        "/tools/list": {"get": {"summary": "Every tool (built-in and Lua) with its parameter schema",
                                "responses": {"200": reply("tools"), **errors(401, 500)}}},
    }
    for path, methods in openapi_paths(ops).items():
        for method, entry in methods.items():
            op = box.ops[entry["operationId"]]
            lua = bool(op.extra.get("lua"))
            codes: tuple[int, ...] = (400, 401, 500)
            if method == "post":
                entry["requestBody"]["required"] = False  # an empty body is {}
                codes = (400, 401, 408, 413, 415, 500) if lua else (400, 401, 404, 413, 415, 500)
            key = op.extra.get("key")
            entry["summary"] = entry["summary"] or f"Lua tool {op.name}"
            entry["responses"] = {"200": reply("{\"result\": ...}" if lua else f"{{\"{key}\": [...]}}" if key
                                               else "the tool's result"), **errors(*codes)}
        paths[path] = methods
    from cairn_servers.ctx.ops import OPS

    for path, methods in openapi_paths([op for op in OPS if op.extra.get("agents")]).items():
        if path == "/agents/{name}":
            entry = methods["post"]
            # The body is the agent's arguments (their names: GET /agents); the name is in the path
            entry["parameters"] = [{"name": "name", "in": "path", "required": True, "description": "an agent name",
                                    "schema": {"type": "string", "minLength": 1}}]
            entry["requestBody"] = body({"type": "object", "additionalProperties": {"type": "string"},
                                         "description": "the agent's arguments, e.g. {\"topic\": \"deploys\"}"})
            entry["responses"] = {"200": reply("the agent and its resolved prompt"),
                                  **errors(400, 401, 404, 408, 413, 415, 500)}
            methods["get"] = {"operationId": "agent_definition", "summary": "One agent as GET /agents lists it "
                              "(nothing runs; POST resolves its prompt)",
                              "parameters": entry["parameters"],
                              "responses": {"200": reply("the agent"), **errors(400, 401, 404)}}
        else:
            methods["get"]["responses"] = {"200": reply('{"agents": [...]}'), **errors(401, 500)}
        paths[path] = methods
    for op in OPS:  # the same operations at their aliases (Context Harness's routes), declared in ctx/ops.py
        for i, (method, path) in enumerate(op.extra.get("http_aliases", ()) if op.http is not None else ()):
            assert op.http is not None
            main = paths[op.http[1]][op.http[0].lower()]
            paths.setdefault(path, {})[method.lower()] = {
                **main, "operationId": f"{op.name}_alias" + (str(i + 1) if i else ""),
                "summary": f"{op.http[0]} {op.http[1]} at Context Harness's route: the same operation and answer"}
    paths["/tools/{name}"] = {"post": {
        "summary": "Call any tool by name; Lua tools answer {\"result\": ...}",
        "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string",
                                                                                     "enum": list(box.ops)}}],
        "requestBody": body({"type": "object"}),
        "responses": {"200": reply("the tool's result"), **errors(400, 401, 404, 408, 413, 415, 500)}}}
    mcp = {"summary": "MCP Streamable HTTP (stateless JSON-RPC 2.0): the same tools",
           "requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}},
           "responses": {"200": reply("JSON-RPC response (or an SSE stream)"),
                         "202": {"description": "notification accepted"}, **errors(401)}}
    paths["/mcp"] = {"post": mcp}
    paths["/"] = {"post": {**mcp, "summary": "MCP at the root URL, exactly as /mcp"},
                  "get": {"summary": "Without Accept: text/event-stream, an index of these routes",
                          "responses": {"200": reply("index"), **errors(401)}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "ctx knowledge base", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": {"Error": {"type": "object", "required": ["error"], "properties": {"error": {
                "type": "object", "required": ["code", "message"],
                "properties": {"code": {"type": "string"}, "message": {"type": "string"}, "details": {"type": "object"}}}}}},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def serve(config: "Config", *, bind: str | None = None, allow_remote: bool = False) -> None:
    """Run the server until SIGINT/SIGTERM on ``bind`` (default ``[server] bind``)."""
    from cairn_servers.core.serve import is_loopback, parse_bind
    from cairn_servers.core.serve import serve as run

    host, port = parse_bind(bind or config.server.bind, 7331)
    if not is_loopback(host) and allow_remote and not config.server.auth_token:
        raise InvalidInput(f"Refusing to serve on {host} without an auth token: set [server] auth_token "
                           "or $CTX_AUTH_TOKEN so only your clients can call it.")
    app = create_app(config)
    import gc

    # A long-running server: start-up objects (modules, schemas, the app) never become garbage, so
    # freeze them out of the collector's scans and collect young objects less often.
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    run(app, host, port, name="ctx", allow_remote=allow_remote)
