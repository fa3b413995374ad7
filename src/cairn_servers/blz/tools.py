"""``blz mcp``: the seed's MCP tools, resources and prompt over stdio, on the cairn_servers.mcp core.

Tools: find, toc, diff, list-sources, lookup, source-add and source-refresh (the only mutations) and learn-blz are the
operations of :mod:`cairn_servers.blz.ops` on MCP (schemas, descriptions and validation from their declarations);
run-command (whitelisted read-only commands, in-process, through :mod:`cairn_servers.blz.render`) is this
surface's own. Resources: blz://sources/{alias}, blz://registry. Prompt: discover-docs.
One Store per process keeps the database connection, its page cache and line offsets warm.
Everything a client sees is scrubbed: no home directory, no data root, no absolute local paths.
"""

from __future__ import annotations

import io
import json
import re
import sys
import threading

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from typing import Any, Callable

from cairn_servers.blz.limits import WHITELIST
from cairn_servers.core.errors import CairnError, InvalidInput, NotFound
from cairn_servers.core.heap import one_arena, trim_heap
from cairn_servers.core.paths import data_path
from cairn_servers.core.sanitize import generation, has_secrets, register_root, scrub
from cairn_servers.mcp.content import ToolResult
from cairn_servers.mcp.content import text as content_text
from cairn_servers.mcp.server import Server, Tool, ToolContext

if TYPE_CHECKING:
    from cairn_servers.blz.store import Store
    from cairn_servers.core.ops import Op

# The store, search and service modules are imported by a warm-up thread right after start-up (and
# by the first request at the latest), so `initialize` is answered before they load.

INSTRUCTIONS = ("Search local llms.txt documentation and cite exact lines as alias:start-end. "
                "Use find(query=...) to search, then find(snippets=[...]) to read the cited lines.")
_FILE_URL = re.compile(r"file://(/[^\s\"'<>]*)")


def _hide_local_paths(text: str) -> str:
    """file:///abs/dir/docs/llms.txt -> file://<local>/docs/llms.txt (after scrub() had its turn)."""
    def short(m: re.Match[str]) -> str:
        parts = [p for p in m.group(1).split("/") if p]
        return "file://<local>/" + "/".join(parts[-2:])

    return _FILE_URL.sub(short, text) if "file:///" in text else text  # the check: a tenth of the regex's scan


def public(value: Any) -> Any:
    """``value`` as a client may see it. Scrubbed as one JSON text (one pass over a few KB) rather
    than string by string: a find result holds ~100 strings, and per-string scrubbing cost 1 ms."""
    if isinstance(value, str):
        return _hide_local_paths(scrub(value))
    text = json.dumps(value, ensure_ascii=False)
    cleaned = _hide_local_paths(scrub(text))
    return value if cleaned == text else json.loads(cleaned)


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)  # made once, not per result


def public_result(value: dict[str, Any]) -> ToolResult:
    """A structured tool result as :func:`public` would make it, and its text block: the JSON text that
    was scrubbed, not a second serialization of the answer (a warm find spent 4% of its time there).

    Search hits' ``sourceUrl`` values are put in their public form first (:func:`_public_url`, made
    once per URL): a local file's URL always changed in the scrubbed text, which then had to be
    parsed again; now the text usually comes out of the scrub unchanged and is used as it is."""
    hits = value.get("hits")
    if type(hits) is list and hits and not has_secrets():
        value = {**value, "hits": _public_hits(hits)}
    try:
        text = _ENCODER.encode(value)  # json.dumps(value, ensure_ascii=False, allow_nan=False)
    except ValueError:  # NaN or infinity: shown as the MCP core shows what JSON cannot carry
        scrubbed = public(value)
        return ToolResult([content_text(str(scrubbed))], structured=scrubbed)
    from cairn_servers.mcp.jsonrpc import JsonText

    cleaned = _hide_local_paths(scrub(text))
    if cleaned == text:
        return ToolResult([content_text(JsonText(text, value, from_encoder=True))], structured=value)
    structured = json.loads(cleaned)
    return ToolResult([content_text(JsonText(cleaned, structured))], structured=structured)


def _public_hits(hits: list[Any]) -> list[Any]:
    """``hits`` with each ``sourceUrl`` in its public form (see :func:`_public_url`)."""
    import os

    state = (generation(), os.environ.get("HOME"))
    out = []
    for hit in hits:
        url = hit.get("sourceUrl") if type(hit) is dict else None
        shown = _public_url(url, state) if type(url) is str else url
        out.append(hit if shown == url else {**hit, "sourceUrl": shown})
    return out


_PUBLIC_URLS: dict[tuple[str, tuple[int, str | None]], str] = {}


def _public_url(url: str, state: tuple[int, str | None]) -> str:
    """What scrubbing a result's JSON text makes of ``url`` as a string value in it, when that can be
    worked out from the URL alone; else ``url`` itself (the text's scrub still handles it).

    Exact when the URL needs no JSON escape (its text in the JSON is the URL itself, between quotes
    that neither scrub() nor the file-URL pattern reads past), no secret is registered (the caller
    checks: a secret is masked wherever it occurs, across values too), and the public form is a
    fixed point (scrubbing the text again leaves it as it is). Cached per URL and ``state`` (the
    sanitize generation and ``$HOME``, what scrub() depends on); a few hundred at most."""
    key = (url, state)
    shown = _PUBLIC_URLS.get(key)
    if shown is None:
        shown = url
        if json.dumps(url, ensure_ascii=False)[1:-1] == url:
            candidate = _hide_local_paths(scrub(url))
            if _hide_local_paths(scrub(candidate)) == candidate:
                shown = candidate
        if len(_PUBLIC_URLS) >= 256:
            _PUBLIC_URLS.clear()
        _PUBLIC_URLS[key] = shown
    return shown


class _ScrubErrors:
    """``with SCRUBBED:`` a CairnError leaving the block carries a message a client may see."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, CairnError):
            exc.message = public(exc.message)
            exc.args = (exc.message,)


SCRUBBED = _ScrubErrors()


class Docs:
    """What every handler of one server shares: the data root, one Store (opened on first use, so
    `initialize` never waits for SQLite) and the lock its worker threads take turns on it with."""

    def __init__(self, root: str, store: Store | None = None) -> None:
        self.root = root
        self.lock = threading.RLock()  # one connection, used by the worker threads one at a time
        self._store = store

    def store(self) -> Store:
        with self.lock:
            if self._store is None:
                from pathlib import Path

                from cairn_servers.blz.store import Store

                self._store = Store(Path(self.root))
            return self._store

    def warm(self) -> None:
        """Import the search path and open the database now (a thread after `initialize`), not on
        the first call."""
        try:
            with self.lock:
                from cairn_servers.blz import search, service  # noqa: F401

                self.store().sources()  # opens the database and reads its first pages
        except CairnError as exc:  # the first request reports it properly
            print(f"blz: warm-up: {exc.message}", file=sys.stderr)


class _Checked(threading.local):
    """The arguments the tool's ``validate`` hook just bound, for the handler the same thread runs
    next: a warm ``find`` is about a millisecond, and binding twice cost 3% of it."""

    args: Any = None
    kwargs: dict[str, Any] = {}


_CHECKED = _Checked()


def check_op(op: Op, args: dict[str, Any]) -> None:
    """The MCP ``validate`` hook: ``op.bind`` (a bad argument is a -32602 error with the operation's message);
    a search query is parsed too, so that a query refused by its syntax or size is also a -32602 error."""
    _CHECKED.args = None  # nothing stale survives a refused call
    kwargs = op.bind(args, "mcp")
    query = kwargs.get("query")
    if query and op.name in _QUERIES:
        _QUERIES[op.name](query)
    _CHECKED.kwargs = kwargs
    _CHECKED.args = args


def _find_query(query: str) -> None:
    from cairn_servers.blz.query import parse

    parse(query)


def _lookup_query(query: str) -> None:
    from cairn_servers.search.query import check_terms

    check_terms(query)


_QUERIES: dict[str, Callable[[str], None]] = {"find": _find_query, "lookup": _lookup_query}


def call_op(docs: Docs, op: Op, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """One MCP call of a declared operation: run on the server's store under its lock, with what
    this surface supplies itself (:data:`MCP_CONTEXT`), the answer and any error message scrubbed."""
    if _CHECKED.args is args:
        kwargs, _CHECKED.args = _CHECKED.kwargs, None
    else:  # called without the hook (a test, another transport): bind here
        kwargs = op.bind(args, "mcp")
    supply = MCP_CONTEXT.get(op.name)
    if supply is not None:
        kwargs = {**kwargs, **supply(ctx)}
    fields = op.extra.get("mcp_fields")
    try:
        with SCRUBBED, docs.lock:
            result = op.fn(docs.store(), **kwargs)
            return public_result({k: result[k] for k in fields if k in result} if fields else result)
    finally:
        if not op.read_only:
            trim_heap()  # indexing briefly needs ~20 MB that searches never need again


def _source_add_context(ctx: ToolContext) -> dict[str, Any]:
    """Agents read files in BLZ_MCP_FILE_ROOTS and public (or BLZ_MCP_ALLOW_HOSTS) addresses only;
    download progress goes to the client."""
    from cairn_servers.blz import sources

    def progress(done: int, total: int | None, unit: str) -> None:
        if unit == "pages":
            ctx.progress(done, total, f"crawled {done:,} of {total or done:,} pages found so far")
        else:
            ctx.progress(done, total, f"fetched {done:,} bytes")

    return {"guard": sources.agent_guard(), "progress": progress}


def _list_sources_context(ctx: ToolContext) -> dict[str, Any]:
    return {"registry": True}  # the seed's list-sources: installed sources and registry candidates


MCP_CONTEXT: dict[str, Callable[[ToolContext], dict[str, Any]]] = {
    "source-add": _source_add_context, "source-refresh": _source_add_context, "list-sources": _list_sources_context}

RUN_COMMAND_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["command"], "additionalProperties": False,
    "properties": {"command": {"type": "string", "enum": list(WHITELIST)}, "source": {"type": "string"}}}


def run_command(docs: Docs, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """``run-command``: one whitelisted read-only command run in-process as ``blz COMMAND --text``
    would (never a shell, never argv parsing): its stdout, stderr and exit code."""
    from cairn_servers.blz.ops import OPS
    from cairn_servers.blz.render import run_op

    command = args["command"]
    op = OPS.by_surface_name("cli", command)
    with SCRUBBED:
        if command not in WHITELIST or op is None:  # the schema's enum already refuses it; never rely on one check
            raise InvalidInput(f"{command!r} is not allowed. Allowed: {', '.join(WHITELIST)}.")
        operands: dict[str, Any] = {}
        if args.get("source"):
            slot = next((p for p in op.params_for("cli") if p.positional), None)
            if slot is None:
                raise InvalidInput(f"`{command}` takes no source.")
            operands[slot.wire] = _command_operand(command, args["source"])
    assert op is not None
    out, err = io.StringIO(), io.StringIO()
    with docs.lock:
        code = run_op(op, docs.store(), operands, "text", out, err)
    answer: dict[str, Any] = public({"stdout": out.getvalue(), "stderr": err.getvalue(), "exitCode": code})
    return answer


def registry_resource(uri: str) -> Any:
    from cairn_servers.blz import registry

    return [{"alias": e.alias, "url": e.url, "description": e.description, "category": e.category}
            for e in registry.REGISTRY]


def source_resource(docs: Docs, uri: str, params: dict[str, str]) -> Any:
    with docs.lock:
        row = docs.store().source(params["alias"].strip().lower())
    if row is None:
        with SCRUBBED:
            raise NotFound(f"No source named {params['alias']!r}. See list-sources.")
    return public({"alias": row.alias, "title": row.title, "url": row.url, "fetchedAt": row.fetched_at,
                   "totalLines": row.lines, "headings": row.headings,
                   "lastUpdated": row.checked_at or row.fetched_at, "sha256": row.sha256})


def discover_docs(docs: Docs, args: dict[str, str]) -> str:
    """The discover-docs prompt: which of the project's technologies are installed, which the
    registry has, and the calls that add and search them."""
    techs = [t.strip().lower() for t in (args.get("technologies") or "").split(",") if t.strip()]
    if not techs:
        raise InvalidInput("technologies is required: a comma-separated list such as \"bun,react\".")
    from cairn_servers.blz import registry

    with docs.lock:
        installed = {r.alias: r for r in docs.store().sources()}
    lines = [f"Help me set up documentation for: {', '.join(techs)}.", ""]
    missing = []
    for tech in techs:
        have = [a for a in installed if tech in a]
        known = [e for e in registry.lookup(tech) if e.alias not in installed]
        if have:
            lines.append(f"- {tech}: installed as {', '.join(have)} — search with "
                         f"find(query='...', source='{have[0]}').")
        elif known:
            lines.append(f"- {tech}: available in the registry as {known[0].alias} ({known[0].url}) — "
                         f"add with source-add(alias='{known[0].alias}').")
            missing.append(known[0].alias)
        else:
            lines.append(f"- {tech}: not installed and not in the registry (lookup(query='{tech}') searches it "
                         f"by description) — if the project publishes an llms.txt, add it by its site's domain, "
                         f"source-add(alias='example.dev'), or its URL, source-add(alias="
                         f"'{re.sub(r'[^a-z0-9_-]', '-', tech)[:64]}', url='https://.../llms.txt').")
    lines += ["", "Steps: 1) call list-sources to confirm what is installed; 2) add the missing sources"
              + (f" ({', '.join(missing)})" if missing else "") + "; 3) search with find(query=...), then "
              "read exact lines with find(snippets=['alias:start-end'], contextMode='all')."]
    text: str = public("\n".join(lines))
    return text


def build_server(store: Store | None = None, *, op_tools: bool = True) -> Server:
    """The blz MCP server: a tool per operation of :data:`cairn_servers.blz.ops.OPS` on MCP, plus run-command,
    the resources and the prompt. With ``op_tools=False`` the operations' tools are left for
    :func:`add_op_tools` (``blz mcp`` adds them right after answering ``initialize``: deriving their
    schemas is not worth delaying the first reply)."""
    from functools import partial

    server = Server(name="blz", version="0.1.0", title="blz docs search", instructions=INSTRUCTIONS)
    root = data_path("blz", "BLZ_DATA_DIR")  # a str: pathlib is not imported before `initialize`
    register_root(root, "<blz-data>")
    docs = Docs(root, store)
    server.warm = docs.warm  # type: ignore[attr-defined]
    server.add_tool(Tool("run-command", partial(run_command, docs), structured=True,
                         description="Run a read-only blz command in-process (never a shell): "
                         + ", ".join(WHITELIST) + ". Returns stdout, stderr and exitCode. `source` "
                         "names the alias for history, validate and inspect.",
                         input_schema=RUN_COMMAND_SCHEMA, annotations={"readOnlyHint": True}))
    if op_tools:
        add_op_tools(server, docs)
    server.resource("blz://registry", name="registry", description="Known llms.txt sources that "
                    "`source-add` can install by alias.", mime_type="application/json")(registry_resource)
    server.resource_template("blz://sources/{alias}", name="source", description="One installed "
                             "source's metadata.", mime_type="application/json")(partial(source_resource, docs))
    server.prompt("discover-docs", description="Find which documentation to add for a project's "
                  "technologies and how to search it.",
                  arguments=[{"name": "technologies", "description": "Comma-separated list, e.g. "
                              "\"bun,react,tailwind\"", "required": True}])(partial(discover_docs, docs))
    server.docs = docs  # type: ignore[attr-defined]
    return server


def add_op_tools(server: Server, docs: Docs) -> None:
    """Register a tool per operation on MCP, in the seed's order (run-command before learn-blz)."""
    from functools import partial

    from cairn_servers.blz.ops import OPS
    from cairn_servers.core.ops import mcp_tool

    tools = dict(server.tools)
    server.tools.clear()
    for op in OPS.on("mcp"):
        if op.name == "learn-blz":
            server.tools.update(tools)  # run-command
        tool = mcp_tool(op, partial(call_op, docs, op))
        tool.validate = partial(check_op, op)
        server.add_tool(tool)


def _command_operand(command: str, source: str) -> str:
    """run-command's ``source``, checked before the command runs: an alias (history, validate,
    inspect) or a schema name (schema); anything else is invalid input (a tool error)."""
    if command == "schema":
        from cairn_servers.blz.schemas import SCHEMAS

        if source not in SCHEMAS:
            raise InvalidInput(f"No schema named {source!r}. Known: {', '.join(SCHEMAS)}.")
        return source
    from cairn_servers.blz.citation import check_alias

    return check_alias(source)


def serve() -> int:
    """Serve MCP on stdio until stdin closes; the exit status."""
    from cairn_servers.mcp.stdio import serve_stdio

    server = build_server(op_tools=False)

    def after_initialize() -> None:  # not before: ctypes and the warm-up's imports would delay the reply
        # On the reader thread, before the next message is read: tools/list sees every tool.
        add_op_tools(server, server.docs)  # type: ignore[attr-defined]
        one_arena()  # before any worker thread exists
        threading.Thread(target=server.warm, name="blz-warm", daemon=True).start()  # type: ignore[attr-defined]

    return serve_stdio(server, after_first=after_initialize)
