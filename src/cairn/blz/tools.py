"""``blz mcp``: the seed's MCP tools, resources and prompt over stdio, on the cairn.mcp core.

Tools: find, toc, list-sources, source-add (the only mutation), run-command (whitelisted,
in-process), learn-blz. Resources: blz://sources/{alias}, blz://registry. Prompt: discover-docs.
One Store per process keeps the database connection, its page cache and line offsets warm.
Everything a client sees is scrubbed: no home directory, no data root, no absolute local paths.
"""

from __future__ import annotations

import functools
import io
import re
import sys
import threading

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from typing import Any, Callable

from cairn.blz.limits import (CONTEXT_MODES, MAX_DEPTH, MAX_LIMIT, MAX_PADDING, TOC_DEFAULT_LIMIT,
                              TOC_MAX_LIMIT, WHITELIST)
from cairn.blz.schemas import TOC
from cairn.core.errors import CairnError, InvalidInput, NotFound
from cairn.core.paths import data_path
from cairn.core.sanitize import register_root, scrub
from cairn.mcp.server import Server, ToolContext

if TYPE_CHECKING:
    from cairn.blz.store import Store

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

    return _FILE_URL.sub(short, text)


def public(value: Any) -> Any:
    """``value`` as a client may see it. Scrubbed as one JSON text (one pass over a few KB) rather
    than string by string: a find result holds ~100 strings, and per-string scrubbing cost 1 ms."""
    import json

    if isinstance(value, str):
        return _hide_local_paths(scrub(value))
    text = json.dumps(value, ensure_ascii=False)
    cleaned = _hide_local_paths(scrub(text))
    return value if cleaned == text else json.loads(cleaned)


def _scrubbed(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any) -> Any:
        try:
            return public(fn(*args))
        except CairnError as exc:
            exc.message = public(exc.message)
            exc.args = (exc.message,)
            raise

    return wrapper


FIND_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "Search text (any words; \"quoted phrases\" work)."},
        "snippets": {"type": "array", "items": {"type": "string"},
                     "description": "Citations to retrieve, e.g. [\"bun:120-145\", \"react:1-3,5-9\"]."},
        "source": {"type": "string", "description": "Alias to search; omit to search every installed "
                                                    "source on one comparable score scale."},
        "contextMode": {"type": "string", "enum": list(CONTEXT_MODES),
                        "description": "How to expand snippets: none, symmetric (linePadding lines each "
                                       "side) or all (the whole enclosing heading section)."},
        "linePadding": {"type": "integer", "minimum": 0, "maximum": MAX_PADDING,
                        "description": "Lines added before and after each snippet (0-50)."},
        "maxResults": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 10,
                       "description": "Maximum search hits (1-50, default 10)."},
    },
    "additionalProperties": False,
}


TOC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["source"],
    "properties": {
        "source": {"type": "string", "description": "Alias of an installed source (see list-sources)."},
        "maxDepth": {"type": "integer", "minimum": 1, "maximum": MAX_DEPTH,
                     "description": "Only heading levels 1..maxDepth (1-6); omit for every level."},
        "tree": {"type": "boolean", "default": False,
                 "description": "Nest the entries: each carries the deeper headings under it as children."},
        "filter": {"type": "string", "description": "Only headings whose text contains every word of this "
                                                    "(case-insensitive)."},
        "maxResults": {"type": "integer", "minimum": 1, "maximum": TOC_MAX_LIMIT, "default": TOC_DEFAULT_LIMIT,
                       "description": f"Headings per page (1-{TOC_MAX_LIMIT}, default {TOC_DEFAULT_LIMIT})."},
        "page": {"type": "integer", "minimum": 1, "default": 1, "description": "Page number (hasMore says "
                                                                             "whether another follows)."},
    },
    "additionalProperties": False,
}


SOURCE_ADD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["alias"],
    "properties": {
        "alias": {"type": "string", "description": "Name for the source (a-z 0-9 _ -, 1-64 characters); "
                                                   "alone, the registry entry of that name."},
        "url": {"type": "string", "description": "http(s) URL (or a file inside BLZ_MCP_FILE_ROOTS); "
                                                 "omit to use the registry."},
        "force": {"type": "boolean", "default": False, "description": "Replace an existing source of "
                                                                      "that alias."},
        "exact": {"type": "boolean", "default": False,
                  "description": "Fetch exactly url (or the registry URL): no llms-full.txt variant, no "
                                 "files looked up inside a site (like `blz add --exact`)."},
        "allLanguages": {"type": "boolean", "default": False,
                         "description": "Also index pages in other languages than English (by default a "
                                        "multilingual file's non-English copies are not indexed)."},
    },
    "additionalProperties": False,
}


def build_server(store: Store | None = None) -> Server:
    server = Server(name="blz", version="0.1.0", title="blz docs search", instructions=INSTRUCTIONS)
    root = data_path("blz", "BLZ_DATA_DIR")  # a str: pathlib is not imported before `initialize`
    register_root(root, "<blz-data>")
    lock = threading.RLock()  # one connection, used by the worker threads one at a time
    holder: list[Store] = [store] if store is not None else []

    def get_store() -> Store:
        with lock:
            if not holder:
                from cairn.blz.store import Store

                from pathlib import Path

                holder.append(Store(Path(root)))
            return holder[0]

    def warm() -> None:
        try:
            with lock:
                from cairn.blz import search, service  # noqa: F401  (import now, not on the first call)

                get_store().sources()  # opens the database and reads its first pages
        except CairnError as exc:  # the first request reports it properly
            print(f"blz: warm-up: {exc.message}", file=sys.stderr)

    server.warm = warm  # type: ignore[attr-defined]

    @server.tool("find", description="Search documentation (query) and/or retrieve exact cited line "
                 "ranges (snippets). Hits carry alias, lines, headingPath, snippet, score (0-100 relative "
                 "to the top hit) and sourceUrl; cite them as alias:lines.", input_schema=FIND_SCHEMA,
                 structured=True, annotations={"readOnlyHint": True, "openWorldHint": False})
    @_scrubbed
    def find(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        query, cites = args.get("query"), args.get("snippets") or []
        if not (query and query.strip()) and not cites:
            raise InvalidInput("Give a query to search, or snippets (citations like react:120-142) to retrieve.")
        from cairn.blz import service
        from cairn.blz.search import search

        store = get_store()
        out: dict[str, Any] = {"snippets": [], "hits": [],
                               "executed": {"searched": False, "retrievedSnippets": False}}
        with lock:
            if query and query.strip():
                source = args.get("source")
                found = search(store, query, [source] if source else None, args.get("maxResults", 10))
                out["hits"] = found["hits"]
                if found.get("fallback"):
                    out["fallback"] = found["fallback"]
                if found.get("correctedQuery"):
                    out["correctedQuery"] = found["correctedQuery"]
                out["executed"]["searched"] = True
            if cites:
                mode = args.get("contextMode") or ("symmetric" if args.get("linePadding") else "none")
                got = service.get(store, cites, mode, args.get("linePadding", 0))
                out["snippets"] = got["snippets"]
                out["executed"]["retrievedSnippets"] = True
        return out

    @server.tool("toc", description="Browse one source's outline without searching: its headings in file "
                 "order, each with level, headingPath, and its whole section as a citation (alias:start-end, "
                 "to the next heading of the same or a higher level) to read with find(snippets=[...]). "
                 "Paginated: total, hasMore, page.", input_schema=TOC_SCHEMA, output_schema=TOC,
                 structured=True, annotations={"readOnlyHint": True, "openWorldHint": False})
    @_scrubbed
    def toc(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        from cairn.blz import service

        with lock:
            return service.toc(get_store(), args["source"], args.get("maxDepth"), args.get("filter"),
                               args.get("maxResults", TOC_DEFAULT_LIMIT), args.get("page", 1),
                               tree=bool(args.get("tree")))

    @server.tool("list-sources", description="List installed documentation sources and registry "
                 "candidates (kind: installed | registry), optionally filtered by name (case-insensitive).",
                 input_schema={"type": "object", "properties": {"filter": {"type": "string"}},
                               "additionalProperties": False},
                 structured=True, annotations={"readOnlyHint": True})
    @_scrubbed
    def list_sources(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        from cairn.blz import service

        with lock:
            return service.list_sources(get_store(), args.get("filter"), include_registry=True)

    @server.tool("source-add", description="Add a documentation source from the registry (alias only) "
                 "or a URL. For .../llms.txt the llms-full.txt variant is tried first; for a site or folder, "
                 "llms-full.txt, llms.txt, then llms-small.txt in it; exact: true fetches exactly the URL "
                 "given. The only tool that changes anything. Fetches from public internet addresses only "
                 "(and hosts the user lists in BLZ_MCP_ALLOW_HOSTS); local files only inside the folders in "
                 "BLZ_MCP_FILE_ROOTS.",
                 input_schema=SOURCE_ADD_SCHEMA,
                 structured=True, annotations={"readOnlyHint": False, "destructiveHint": False,
                                               "openWorldHint": True})
    @_scrubbed
    def source_add(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        from cairn.blz import sources

        def progress(done: int, total: int | None) -> None:
            ctx.progress(done, total, f"fetched {done:,} bytes")

        guard = sources.agent_guard()  # files in BLZ_MCP_FILE_ROOTS, public or BLZ_MCP_ALLOW_HOSTS addresses
        exact = bool(args.get("exact"))
        if args.get("url"):
            sources.check_agent_location(args["url"], exact, guard=guard)  # early; the guard checks again
        with lock:
            try:
                info = sources.add(get_store(), args["alias"], args.get("url"), force=bool(args.get("force")),
                                   exact=exact, progress=progress, guard=guard,
                                   all_languages=bool(args.get("allLanguages")))
            finally:
                _release_memory()
        return {"alias": info["alias"], "url": info["url"], "message": info["message"],
                "lines": info["lines"], "headings": info["headings"], "skippedLines": info["skippedLines"]}

    @server.tool("run-command", description="Run a read-only blz command in-process (never a shell): "
                 + ", ".join(WHITELIST) + ". Returns stdout, stderr and exitCode. `source` names the alias "
                 "for history, validate and inspect.",
                 input_schema={"type": "object", "required": ["command"], "additionalProperties": False,
                               "properties": {"command": {"type": "string", "enum": list(WHITELIST)},
                                              "source": {"type": "string"}}},
                 structured=True, annotations={"readOnlyHint": True})
    @_scrubbed
    def run_command(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        from cairn.blz.cli import run

        command = args["command"]
        if command not in WHITELIST:  # the schema's enum already refuses it; never rely on one check
            raise InvalidInput(f"{command!r} is not allowed. Allowed: {', '.join(WHITELIST)}.")
        operands: list[str] = []
        if args.get("source"):
            if command not in ("history", "validate", "inspect", "schema"):
                raise InvalidInput(f"`{command}` takes no source.")
            operands.append(_command_operand(command, args["source"]))
        out, err = io.StringIO(), io.StringIO()
        argv = [command, "--text"]
        if operands:  # "--": what follows is an operand, never an option (a source "-h" or "--json")
            argv += ["--", *operands]
        with lock:
            code = run(argv, out, err)
        return {"stdout": out.getvalue(), "stderr": err.getvalue(), "exitCode": code}

    @server.tool("learn-blz", description="Reference data about blz: prompts, flags, installed sources "
                 "and example calls.", structured=True, annotations={"readOnlyHint": True})
    @_scrubbed
    def learn_blz(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        with lock:
            aliases = [r.alias for r in get_store().sources()]
        first = aliases[0] if aliases else "react"
        return {
            "prompts": [{"name": "discover-docs", "summary": "Find and add project docs"}],
            "flags": {"contextMode": list(CONTEXT_MODES), "source": aliases,
                      "maxResults": {"min": 1, "max": MAX_LIMIT, "default": 10},
                      "linePadding": {"min": 0, "max": MAX_PADDING}},
            "citations": "alias:start-end (1-based, inclusive); several ranges: alias:1-3,5-9",
            "examples": [f"find(query='hooks', source='{first}')",
                         f"toc(source='{first}', maxDepth=2, filter='hooks')",
                         f"find(snippets=['{first}:1-20'], contextMode='all')",
                         "list-sources(filter='react')", "source-add(alias='bun')",
                         "source-add(alias='mine', url='https://example.com/docs/llms.txt', exact=True)",
                         "run-command(command='stats')"],
            "tools": ["find", "toc", "list-sources", "source-add", "run-command", "learn-blz"],
            "resources": ["blz://registry", "blz://sources/{alias}"],
        }

    @server.resource("blz://registry", name="registry", description="Known llms.txt sources that "
                     "`source-add` can install by alias.", mime_type="application/json")
    def registry_resource(uri: str) -> Any:
        from cairn.blz import registry

        return [{"alias": e.alias, "url": e.url, "description": e.description, "category": e.category}
                for e in registry.REGISTRY]

    @server.resource_template("blz://sources/{alias}", name="source", description="One installed "
                              "source's metadata.", mime_type="application/json")
    @_scrubbed
    def source_resource(uri: str, params: dict[str, str]) -> Any:
        with lock:
            row = get_store().source(params["alias"].strip().lower())
        if row is None:
            raise NotFound(f"No source named {params['alias']!r}. See list-sources.")
        return {"alias": row.alias, "title": row.title, "url": row.url, "fetchedAt": row.fetched_at,
                "totalLines": row.lines, "headings": row.headings, "lastUpdated": row.checked_at or row.fetched_at,
                "sha256": row.sha256}

    @server.prompt("discover-docs", description="Find which documentation to add for a project's "
                   "technologies and how to search it.",
                   arguments=[{"name": "technologies", "description": "Comma-separated list, e.g. "
                               "\"bun,react,tailwind\"", "required": True}])
    @_scrubbed
    def discover(args: dict[str, str]) -> str:
        techs = [t.strip().lower() for t in (args.get("technologies") or "").split(",") if t.strip()]
        if not techs:
            raise InvalidInput("technologies is required: a comma-separated list such as \"bun,react\".")
        from cairn.blz import registry

        with lock:
            installed = {r.alias: r for r in get_store().sources()}
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
                lines.append(f"- {tech}: not installed and not in the registry — if the project publishes "
                             f"an llms.txt, add it with source-add(alias='{re.sub(r'[^a-z0-9_-]', '-', tech)[:64]}', url='https://.../llms.txt').")
        lines += ["", "Steps: 1) call list-sources to confirm what is installed; 2) add the missing sources"
                  + (f" ({', '.join(missing)})" if missing else "") + "; 3) search with find(query=...), then "
                  "read exact lines with find(snippets=['alias:start-end'], contextMode='all')."]
        return "\n".join(lines)

    return server


def _command_operand(command: str, source: str) -> str:
    """run-command's ``source``, checked before it reaches the argument parser: an alias (history,
    validate, inspect) or a schema name (schema). Never an option, whatever the parser would do."""
    if command == "schema":
        from cairn.blz.schemas import SCHEMAS

        if source not in SCHEMAS:
            raise InvalidInput(f"No schema named {source!r}. Known: {', '.join(SCHEMAS)}.")
        return source
    from cairn.blz.citation import check_alias

    return check_alias(source)


def _one_malloc_arena() -> None:
    """Make glibc use one malloc arena for all threads. Requests run on worker threads; with an
    arena per thread, freed memory (a parse's, SQLite's page cache) is spread over up to eight
    arenas and stays resident. Measured: 2-4 MB less RSS after indexing, no latency change."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-8, 1)  # M_ARENA_MAX
    except (OSError, AttributeError):  # not glibc
        pass


def _release_memory() -> None:
    """Give the parse's freed memory back to the OS (glibc keeps it otherwise): this server lives
    long, and indexing a 3 MB file briefly needs ~20 MB that searches never need again."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to do
        pass


def serve() -> None:
    from cairn.mcp.stdio import serve_stdio

    server = build_server()

    def after_initialize() -> None:  # not before: ctypes and the warm-up's imports would delay the reply
        _one_malloc_arena()  # before any worker thread exists
        threading.Thread(target=server.warm, name="blz-warm", daemon=True).start()  # type: ignore[attr-defined]

    serve_stdio(server, after_first=after_initialize)
