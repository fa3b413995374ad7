"""blz: local llms.txt documentation search with exact line citations.

Output is text on a terminal and JSON when piped; --json, --jsonl and --text override
(or set BLZ_OUTPUT_FORMAT). Data lives in $BLZ_DATA_DIR, else $XDG_DATA_HOME/blz.

Exit codes: 0 ok, 1 internal error, 2 invalid input or usage, 3 not found, 4 conflict (already
exists), 5 network error, 6 timeout, 7 storage error (or validation found problems),
9 download too large.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from typing import Any, TextIO

from cairn.core.errors import CairnError, InvalidInput, raise_errors

if TYPE_CHECKING:
    import argparse  # imported by build_parser: `blz mcp` starts without it

# Only these imports are paid on every call; everything else is imported by the command using it.

def _store() -> Any:
    from cairn.blz.store import Store
    from cairn.core.paths import data_dir

    return Store(data_dir("blz", "BLZ_DATA_DIR"))


def _parser_class(out: TextIO, err: TextIO) -> type[argparse.ArgumentParser]:
    """An ArgumentParser printing help to ``out`` and usage errors to ``err`` (not sys.*), so that
    run-command can execute blz in-process and capture everything."""
    import argparse

    class Parser(argparse.ArgumentParser):
        def _print_message(self, message: str, file: Any = None) -> None:
            if message:
                (err if file is sys.stderr else out).write(message)

    return Parser


def build_parser(out: TextIO | None = None, err: TextIO | None = None) -> argparse.ArgumentParser:
    import argparse

    P = _parser_class(out or sys.stdout, err or sys.stderr)
    fmt = P(add_help=False)
    g = fmt.add_argument_group("output")
    g.add_argument("--json", dest="format", action="store_const", const="json", help="JSON output")
    g.add_argument("--jsonl", dest="format", action="store_const", const="jsonl", help="JSON lines output")
    g.add_argument("--text", dest="format", action="store_const", const="text", help="human-readable output")
    g.add_argument("--format", dest="format", choices=("json", "jsonl", "text"), help=argparse.SUPPRESS)
    net = P(add_help=False)
    net.add_argument("--max-bytes", type=int, default=None, help="download size cap in bytes (default 64 MiB)")
    net.add_argument("--timeout", type=float, default=None, help="download time budget in seconds (default 60)")

    p = P(prog="blz", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                parents=[fmt])
    p.add_argument("--version", action="version", version="blz (cairn) 0.1.0")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    a = sub.add_parser("add", parents=[fmt, net], help="add a source from a URL, a local file, or the registry")
    a.add_argument("alias")
    a.add_argument("url", nargs="?", help="http(s) URL, file:// URL or local path; omit to use the registry. "
                   "For .../llms.txt, llms-full.txt is tried first; in a folder or site, llms-full.txt, "
                   "llms.txt, then llms-small.txt")
    a.add_argument("--force", action="store_true", help="replace an existing source of that alias")
    a.add_argument("--exact", action="store_true",
                   help="fetch exactly URL, query string included (no llms-full.txt or other file looked for)")
    a.add_argument("--all-languages", action="store_true",
                   help="also index pages in other languages than English (by default a multilingual file's "
                        "non-English copies are stored but not indexed)")

    u = sub.add_parser("update", parents=[fmt, net], help="refresh sources (conditional request; 304 = no change)")
    u.add_argument("alias", nargs="?")
    u.add_argument("--all", action="store_true", help="refresh every source")
    u.add_argument("--all-languages", action="store_true", default=None,
                   help="from now on also index pages in other languages (default: as chosen at add)")

    r = sub.add_parser("remove", parents=[fmt], help="remove a source and its index")
    r.add_argument("alias")

    sub.add_parser("list", parents=[fmt], help="list installed sources")
    lk = sub.add_parser("lookup", parents=[fmt], help="search the built-in registry")
    lk.add_argument("query", nargs="?", default="")

    s = sub.add_parser("search", parents=[fmt], help="search the docs (BM25 over all or some sources)")
    s.add_argument("query")
    s.add_argument("-s", "--source", action="append", default=[], help="only this source (repeatable)")
    s.add_argument("-n", "--limit", type=int, default=10, help="hits per page (1-50, default 10)")
    s.add_argument("--page", type=int, default=1)

    gt = sub.add_parser("get", parents=[fmt], help="print cited lines: alias:120-142, alias:1-3,5-9")
    gt.add_argument("citations", nargs="+")
    gt.add_argument("-C", "--context-lines", type=int, default=None, metavar="N",
                    help="N lines of context each side (0-50): symmetric context")
    gt.add_argument("--context", choices=("none", "symmetric", "all"), default=None,
                    help="none, symmetric (with -C), or all (the whole enclosing heading section)")
    gt.add_argument("--max-lines", type=int, default=2000, help="cap on lines returned (default 2000)")

    tc = sub.add_parser("toc", parents=[fmt], help="browse a source's outline: headings with their line ranges",
                        description="Headings of one source in file order, each with its line range as a "
                        "citation (alias:start-end: the heading's whole section, to the next heading of the "
                        "same or a higher level). Read from the stored outline; the file is not parsed again.")
    tc.add_argument("alias")
    tc.add_argument("-d", "--depth", "--max-depth", type=int, default=None, metavar="N",
                    help="only heading levels 1..N (1-6; default all)")
    tc.add_argument("-f", "--filter", default=None, metavar="TEXT",
                    help="only headings whose text contains every word of TEXT (case-insensitive)")
    tc.add_argument("--tree", action="store_true",
                    help="nest the entries: text indented by heading level; JSON entries carry children")
    tc.add_argument("-n", "--limit", type=int, default=100, help="headings per page (1-1000, default 100)")
    tc.add_argument("--page", type=int, default=1)

    sub.add_parser("stats", parents=[fmt], help="totals over all sources")
    h = sub.add_parser("history", parents=[fmt], help="adds, updates and removals, newest first")
    h.add_argument("alias", nargs="?")
    h.add_argument("-n", "--limit", type=int, default=50)
    v = sub.add_parser("validate", parents=[fmt], help="check stored files and the index")
    v.add_argument("alias", nargs="?")
    i = sub.add_parser("inspect", parents=[fmt], help="one source's metadata and outline")
    i.add_argument("alias")
    sc = sub.add_parser("schema", parents=[fmt], help="JSON Schemas of the outputs")
    sc.add_argument("name", nargs="?", help="one command's schema")
    m = sub.add_parser("mcp", help="serve the MCP tools over stdio: find, toc, list-sources, source-add, "
                       "run-command, learn-blz")
    m.add_argument("--log-level", metavar="LEVEL",
                   help="diagnostics on stderr: error, warn (default), info, debug, off (or $BLZ_LOG)")
    return p


def _net(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if args.max_bytes is not None:
        if args.max_bytes < 1:
            raise InvalidInput("--max-bytes must be a positive number of bytes.")
        out["max_bytes"] = args.max_bytes
    if args.timeout is not None:
        if args.timeout <= 0:
            raise InvalidInput("--timeout must be a positive number of seconds.")
        out["timeout"] = args.timeout
    return out


def execute(args: argparse.Namespace, err: TextIO) -> tuple[Any, int]:
    """Run a parsed command; returns (result data, exit code)."""
    cmd = args.command
    if cmd == "schema":
        from cairn.blz.schemas import SCHEMAS

        if args.name:
            if args.name not in SCHEMAS:
                raise InvalidInput(f"No schema named {args.name!r}. Known: {', '.join(SCHEMAS)}.")
            return SCHEMAS[args.name], 0
        return SCHEMAS, 0
    if cmd == "lookup":
        from cairn.blz import service

        return service.lookup(args.query), 0
    store = _store()
    if cmd == "search":
        from cairn.blz.search import search

        return search(store, args.query, args.source, args.limit, args.page), 0
    from cairn.blz import service

    if cmd == "get":
        context = args.context or ("symmetric" if args.context_lines else "none")
        return service.get(store, args.citations, context, args.context_lines or 0, args.max_lines), 0
    if cmd == "toc":
        return service.toc(store, args.alias, args.depth, args.filter, args.limit, args.page,
                           tree=args.tree and args.format == "json"), 0
    if cmd == "list":
        return service.list_sources(store), 0
    if cmd == "stats":
        return service.stats(store), 0
    if cmd == "history":
        return service.history(store, args.alias, args.limit), 0
    if cmd == "validate":
        report = service.validate(store, args.alias)
        return report, 0 if report["ok"] else 7
    if cmd == "inspect":
        return service.inspect(store, args.alias), 0
    from cairn.blz import sources

    if cmd == "add":
        return sources.add(store, args.alias, args.url, force=args.force, exact=args.exact,
                           all_languages=args.all_languages, **_net(args)), 0
    if cmd == "remove":
        return sources.remove(store, args.alias), 0
    if cmd == "update":
        if bool(args.alias) == bool(args.all):
            raise InvalidInput("Name one source to update, or use --all: blz update react | blz update --all")
        names = [args.alias] if args.alias else [r.alias for r in store.sources()]
        results, code = [], 0
        for name in names:
            try:
                results.append(sources.update(store, name, all_languages=args.all_languages, **_net(args)))
            except CairnError as exc:
                if not args.all:
                    raise
                from cairn.core.sanitize import scrub

                err.write(f"blz: {name}: {scrub(exc.message)}\n")
                results.append({"alias": name, "status": "failed", "error": exc.message})
                code = code or exc.exit_code
        return {"results": results}, code
    raise InvalidInput(f"Unknown command {cmd!r}.")


def _text(cmd: str, data: Any) -> str:
    if cmd == "search":
        if not data["hits"]:
            return f"No results for {data['query']!r}."
        out = []
        if data.get("fallback") == "corrected":
            out.append(f"(no exact match; showing results for {data['correctedQuery']!r})")
        for h in data["hits"]:
            path = " > ".join(h["headingPath"])
            out.append(f"{h['alias']}:{h['lines']}  [{h['score']:.1f}]  {path}\n    {h['snippet']}")
        if data.get("hasMore"):
            out.append(f"(more: --page {data['page'] + 1})")
        return "\n".join(out)
    if cmd == "get":
        parts = []
        for s in data["snippets"]:
            head = f"--- {s['alias']}:{s['lines']}"
            if s["headingPath"]:
                head += "  " + " > ".join(s["headingPath"])
            parts.append(head + ("  (truncated)" if s.get("truncated") else "") + "\n" + s["content"])
        return "\n".join(parts)
    if cmd == "toc":
        return _toc_text(data)
    if cmd == "list":
        if not data["sources"]:
            return "No sources yet. Add one: blz add react (see blz lookup), or blz add ALIAS URL."
        return "\n".join(f"{s['alias']:<20} {s['metadata']['totalLines']:>8,} lines  "
                         f"{s['metadata']['headings']:>6,} headings  {s['url']}"
                         + (f"  ({s['metadata']['skippedLines']:,} lines in other languages not indexed)"
                            if s["metadata"].get("skippedLines") else "") for s in data["sources"])
    if cmd == "stats":
        return (f"Total sources: {data['sources']}\nTotal indexed lines: {data['totalLines']:,}\n"
                f"Total headings: {data['totalHeadings']:,}\nTotal sections: {data['totalSections']:,}\n"
                f"Stored bytes: {data['totalBytes']:,}\nIndex bytes: {data['indexBytes']:,}")
    if cmd == "add":
        return str(data["message"])
    from cairn.core.output import render

    return render(data, "text")


def _toc_text(data: dict[str, Any], tree: bool = False) -> str:
    """``blz toc`` on a terminal: one heading a line with its citation; with ``tree``, indented by
    level (relative to the shallowest level shown) instead of showing the heading path."""
    entries = data["entries"]
    if not entries:
        what = f" matching {data['filter']!r}" if data.get("filter") else ""
        where = f" on page {data['page']}" if data["total"] else ""
        return f"No headings{what} in {data['alias']}{where} ({data['total']} in all)."
    out = []
    if tree:  # flat entries (nested ones are for JSON), indented here
        top = min(e["level"] for e in entries)
        for e in entries:
            out.append(f"{'  ' * (e['level'] - top)}{'#' * e['level']} {e['text']}  {e['citation']}")
    else:
        width = max(len(e["citation"]) for e in entries)
        for e in entries:
            out.append(f"{e['citation']:<{width}}  {' > '.join(e['headingPath'])}")
    first = (data["page"] - 1) * data["limit"] + 1
    footer = f"({first}-{first + len(entries) - 1} of {data['total']} headings"
    out.append(footer + (f"; more: --page {data['page'] + 1})" if data.get("hasMore") else ")"))
    return "\n".join(out)


def _mcp(log_level: str | None, err: TextIO) -> int:
    """``blz mcp [--log-level LEVEL]``: serve over stdio until stdin closes."""
    from cairn.core import log

    try:
        log.configure(log_level, "BLZ_LOG", "blz")
    except CairnError as exc:
        err.write(f"blz: error: {exc.message}\n")
        return exc.exit_code
    from cairn.blz.tools import serve

    serve()
    return 0


def run(argv: list[str], out: TextIO, err: TextIO) -> int:
    """Run blz with ``argv``, writing to ``out``/``err``; returns the exit code (no sys.exit)."""
    if argv == ["mcp"]:  # the server's start-up path: skip building the parser
        return _mcp(None, err)
    parser = build_parser(out, err)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help/--version (0) or a usage error (2)
        return int(exc.code or 0)
    if not args.command:
        parser.print_help(out)
        return 0
    if args.command == "mcp":
        return _mcp(args.log_level, err)
    try:
        fmt = getattr(args, "format", None)
        if not fmt:
            from cairn.core.output import choose_format

            fmt = choose_format(None, "BLZ_OUTPUT_FORMAT", out)
            args.format = fmt  # toc nests its entries for JSON only
        data, code = execute(args, err)
    except CairnError as exc:
        if raise_errors():
            raise
        from cairn.core.sanitize import scrub

        err.write(f"blz: error: {scrub(exc.message)}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    if fmt == "jsonl" and isinstance(data, dict):
        # Stream the list inside the result (hits, snippets, sources, ...) one object per line.
        for key in ("hits", "snippets", "sources", "results", "events", "entries"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
    if fmt == "text":
        rendered = _toc_text(data, args.tree) if args.command == "toc" else _text(args.command, data)
    elif fmt in ("json", "jsonl"):
        # Services return plain dicts, so this is exactly cairn.core.output.render's JSON, without
        # importing it (and dataclasses) on `blz search --json`, the path that must start fastest.
        import json

        if fmt == "json":
            rendered = json.dumps(data, indent=2, ensure_ascii=False, default=str)
        else:
            rows = data if isinstance(data, list) else [data]
            rendered = "\n".join(json.dumps(r, ensure_ascii=False, separators=(",", ":"), default=str) for r in rows)
    else:  # csv, tsv, md (BLZ_OUTPUT_FORMAT accepts every cairn format)
        from cairn.core.output import render

        if args.command == "toc":  # one row per heading
            data = [{**e, "headingPath": " > ".join(e["headingPath"])} for e in data["entries"]]

        rendered = render(data, fmt)
    if rendered:
        if args.command != "get":  # `get` prints the cited lines exactly; nothing else may show $HOME
            from cairn.core.sanitize import scrub  # or URL credentials

            rendered = scrub(rendered)
        out.write(rendered + "\n")
    return code


def main(argv: list[str] | None = None) -> int:
    return run(sys.argv[1:] if argv is None else argv, sys.stdout, sys.stderr)

if __name__ == "__main__":
    sys.exit(main())
