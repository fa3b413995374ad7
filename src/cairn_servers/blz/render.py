"""Running one blz operation for a command line and writing its answer: text renderings per operation,
``--json``/``--jsonl``/csv/tsv/md, error lines and exit codes.

Shared by ``blz`` (:mod:`cairn_servers.blz.cli`) and the MCP ``run-command`` tool (:mod:`cairn_servers.blz.tools`),
which runs the read-only commands in-process: neither imports the other. Operations return data
(:mod:`cairn_servers.blz.ops`); everything a terminal shows is decided here.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: run-command imports this module in `blz mcp`
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TextIO

    from cairn_servers.core.errors import CairnError
    from cairn_servers.core.ops import Op

# With --jsonl, the list inside a result (hits, snippets, sources, ...) is streamed one object a line.
_STREAMED = ("hits", "snippets", "sources", "results", "events", "entries")


def run_op(op: Op, target: Any, args: dict[str, Any], fmt: str, out: TextIO, err: TextIO,
           progress: Callable[[int, int | None, str], None] | None = None) -> int:
    """Run ``op`` on ``target`` with CLI arguments (wire names, coerced), write its answer in ``fmt``
    to ``out`` (errors to ``err`` as ``blz: error: ...``); return the exit code. ``progress``: the
    download's, for an operation that reports one (``blz add``)."""
    from cairn_servers.core.errors import CairnError, raise_errors

    failed: list[int] = []

    def report(name: str, exc: CairnError) -> None:  # blz update --all: one source failed, go on
        from cairn_servers.core.sanitize import scrub

        err.write(f"blz: error: {name}: {scrub(exc.message)}\n")
        failed.append(exc.exit_code)

    context: dict[str, Any] = {"on_error": report} if any(p.name == "on_error" for p in op.params) else {}
    if progress is not None and any(p.name == "progress" for p in op.params):
        context["progress"] = progress
    try:
        data = op.call(target, args, "cli", **context)
    except CairnError as exc:
        if raise_errors():
            raise
        from cairn_servers.core.sanitize import scrub

        err.write(f"blz: error: {scrub(exc.message)}\n")
        return exc.exit_code
    code = failed[0] if failed else EXIT.get(op.name, _ok)(data)
    if fmt not in ("json", "text") and isinstance(data, dict) and fallback_note(data):
        # jsonl, csv, tsv and md carry the hits alone: the fallback is told beside them
        err.write(f"blz: note: {fallback_note(data)}\n")
    if fmt not in ("json", "text") and isinstance(data, dict):
        # likewise where durable citations led (moved, edited, removed): the rows are the snippets alone
        for cited in data.get("citations") or []:
            err.write(f"blz: note: {cited['message']}\n")
    rendered = render(op.name, data, fmt)
    if rendered:
        if op.name != "get":  # `get` prints the cited lines exactly; nothing else may show $HOME
            from cairn_servers.core.sanitize import scrub  # or URL credentials

            rendered = scrub(rendered)
        out.write(rendered + "\n")
    return code


def render(name: str, data: Any, fmt: str) -> str:
    """Operation ``name``'s result as ``fmt``: text (its own rendering), json, jsonl, csv, tsv or md."""
    if name == "toc" and fmt != "json":  # nested entries are for JSON; the others list headings flat
        data = {**data, "entries": flat(data["entries"])}
    if fmt == "text":
        text = TEXT.get(name)
        if text is not None:
            return text(data)
        from cairn_servers.core.output import render as generic

        return generic(data, "text")
    if fmt != "json" and isinstance(data, dict):  # jsonl, csv, tsv, md: one row per hit, snippet, source
        for key in _STREAMED:
            if isinstance(data.get(key), list):
                data = data[key]
                break
    if fmt in ("json", "jsonl"):
        # Operations return plain dicts, so this is exactly cairn_servers.core.output.render's JSON, without
        # importing it (and dataclasses) on `blz search --json`, the path that must start fastest.
        import json

        if fmt == "json":
            return json.dumps(data, indent=2, ensure_ascii=False, default=str)
        rows = data if isinstance(data, list) else [data]
        return "\n".join(json.dumps(r, ensure_ascii=False, separators=(",", ":"), default=str) for r in rows)
    from cairn_servers.core.output import render as generic  # csv, tsv, md: every cairn format

    if isinstance(data, list):  # a heading path is one cell: "Hooks > useEffect"
        data = [{**r, "headingPath": " > ".join(r["headingPath"])} if isinstance(r, dict)
                and isinstance(r.get("headingPath"), list) else r for r in data]
    return generic(data, fmt, COLUMNS.get(name))


def flat(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Outline entries in file order, ``children`` unfolded (and dropped)."""
    out: list[dict[str, Any]] = []
    for e in entries:
        children = e.get("children")
        out.append({k: v for k, v in e.items() if k != "children"})
        if children:
            out += flat(children)
    return out


def _ok(data: Any) -> int:
    return 0


def _validate_exit(data: Any) -> int:
    return 0 if data["ok"] else 7  # a damaged source or index: the storage error's code


# -- text renderings ----------------------------------------------------------------------------

def fallback_note(data: dict[str, Any]) -> str | None:
    """What a fallback search did, in words (the ``note`` search and find put beside ``fallback``):
    the hits do not match the query as written."""
    note = data.get("note") if data.get("fallback") else None
    return note if isinstance(note, str) else None


def search_text(data: dict[str, Any]) -> str:
    if not data["hits"]:
        return f"No results for {data['query']!r}."
    out = []
    note = fallback_note(data)
    if note:
        out.append(f"({note})")
    out += _hits(data["hits"])
    if data.get("hasMore"):
        out.append(f"(more: --page {data['page'] + 1})")
    return "\n".join(out)


def _hits(hits: list[dict[str, Any]]) -> list[str]:
    return [f"{h['alias']}:{h['lines']}  [{h['score']:.1f}]  {' > '.join(h['headingPath'])}\n    {h['snippet']}"
            for h in hits]


def get_text(data: dict[str, Any]) -> str:
    parts = [f"({c['message']})" for c in data.get("citations", [])]  # where durable citations led
    for s in data["snippets"]:
        head = f"--- {s['alias']}:{s['lines']}"
        if s["headingPath"]:
            head += "  " + " > ".join(s["headingPath"])
        if s.get("truncated"):
            head += f"  (truncated; the rest: {s['remaining']})" if s.get("remaining") else "  (truncated)"
        parts.append(head + "\n" + s["content"])
    return "\n".join(parts)


def find_text(data: dict[str, Any]) -> str:
    """Hits as `blz search` shows them, then the snippets as `blz get` does."""
    out = []
    if data["executed"]["searched"]:
        note = fallback_note(data)
        if note:
            out.append(f"({note})")
        out += _hits(data["hits"]) or ["No results."]
    if data["executed"]["retrievedSnippets"]:
        out.append(get_text(data))
    return "\n".join(out)


def diff_text(data: dict[str, Any]) -> str:
    """``blz diff``: one section a line, ``+`` added, ``-`` removed, ``~`` changed, then the totals."""
    out = []
    for sign, key in (("+", "added"), ("-", "removed"), ("~", "changed")):
        for e in data[key]:
            where = (f"{e['alias'] if 'alias' in e else data['alias']}:{e['lines']}" if "lines" in e
                     else f"removed in version {e['removedIn']}; was {e['was']}")
            out.append(f"{sign} {e['anchor']}  {where}  {' > '.join(e['headingPath'])}")
    out.append(data["message"])
    return "\n".join(out)


def toc_text(data: dict[str, Any]) -> str:
    """``blz toc`` on a terminal: one heading a line with its citation; with ``tree``, indented by
    level (relative to the shallowest level shown) instead of showing the heading path."""
    entries = data["entries"]
    if not entries:
        what = f" matching {data['filter']!r}" if data.get("filter") else ""
        where = f" on page {data['page']}" if data["total"] else ""
        names = data["alias"] or ", ".join(data.get("sources") or [])
        return f"No headings{what} in {names}{where} ({data['total']} in all)."
    out = []
    if data.get("tree"):
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


def list_text(data: dict[str, Any]) -> str:
    if not data["sources"]:
        return "No sources yet. Add one: blz add react (see blz lookup), or blz add ALIAS URL."
    lines = []
    for s in data["sources"]:
        if s["kind"] == "installed":
            skipped = s["metadata"].get("skippedLines")
            lines.append(f"{s['alias']:<20} {s['metadata']['totalLines']:>8,} lines  "
                         f"{s['metadata']['headings']:>6,} headings  {s['url']}"
                         + (f"  ({skipped:,} lines in other languages not indexed)" if skipped else "")
                         + (f"  [{', '.join(s['tags'])}]" if s.get("tags") else "")
                         + (f"  (stale: checked {_age(s['ageHours'])} ago; refresh every {s['refreshHours']} h"
                            f"; blz update --stale)" if s.get("stale") else ""))
        else:
            lines.append(f"{s['alias']:<20} {'(registry)':>30}  {s['url']}")
    return "\n".join(lines)


def _age(hours: float | None) -> str:
    if hours is None:
        return "at an unknown time"
    return f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.1f} days"


def stats_text(data: dict[str, Any]) -> str:
    return (f"Total sources: {data['sources']}\nTotal indexed lines: {data['totalLines']:,}\n"
            f"Total headings: {data['totalHeadings']:,}\nTotal sections: {data['totalSections']:,}\n"
            f"Stored bytes: {data['totalBytes']:,}\nIndex bytes: {data['indexBytes']:,}")


def add_text(data: dict[str, Any]) -> str:
    """One source: its message. A manifest: one line per entry, then the totals."""
    if "results" not in data:
        return str(data["message"])
    out = []
    for r in data["results"]:
        out.append(f"{r['alias']}: " + (f"failed: {r['error']}" if r["status"] == "failed" else r["message"]))
    out.append(data["message"])
    return "\n".join(out)


def lookup_text(data: dict[str, Any]) -> str:
    """``blz lookup``: one entry a block (alias, category, description, URL, installed or the add
    command), then the categories to filter by."""
    cats = ", ".join(f"{name} ({n})" for name, n in data["categories"].items() if n)
    if not data["results"]:
        what = f" for {data['query']!r}" if data["query"] else ""
        if data["category"]:
            what += f" in category {data['category']}"
        return (f"No registry entries{what}. Categories: {cats}.\n"
                "Any site's llms.txt can be added: blz add DOMAIN (e.g. blz add hono.dev), or blz add ALIAS URL.")
    width = max(len(r["alias"]) for r in data["results"])
    cw = max(len(r["category"]) for r in data["results"]) + 2
    out = []
    for r in data["results"]:
        state = "installed" if r["installed"] else r["suggestedCommand"]
        out.append(f"{r['alias']:<{width}}  {'[' + r['category'] + ']':<{cw}}  {r['description']}\n"
                   f"{'':<{width}}  {r['url']}  ({state})")
    out.append(f"({len(data['results'])} entries; categories: {cats}; filter with -c CATEGORY)")
    return "\n".join(out)


def _add_exit(data: Any) -> int:
    """A manifest with failures: the first failure's exit code is set by the error reporter; this is
    the fallback when none was reported (never 0 with a failure)."""
    return 1 if data.get("failed") else 0


TEXT: dict[str, Callable[[dict[str, Any]], str]] = {
    "search": search_text, "get": get_text, "find": find_text, "toc": toc_text, "list-sources": list_text,
    "stats": stats_text, "source-add": add_text, "diff": diff_text,
    "lookup": lookup_text}
# The header of an empty table (csv, tsv, md: a search with no hits still names its columns).
COLUMNS: dict[str, list[str]] = {
    "search": ["alias", "lines", "score", "headingPath", "snippet", "sourceUrl"],
    "list-sources": ["alias", "kind", "url"],
    "lookup": ["alias", "category", "description", "url", "installed", "suggestedCommand"],
    "toc": ["level", "text", "citation", "headingPath"],
}
EXIT: dict[str, Callable[[Any], int]] = {"validate": _validate_exit, "source-add": _add_exit}
