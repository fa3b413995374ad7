"""blz's operations, each declared once: the MCP tools (``blz mcp``) and the CLI sub-commands are built
from this registry (cairn_servers.core.ops), so a parameter's name, type, limits and description live here only.

Each function is the operation's contract (typed arguments, ``:param`` docs, wire names in the
declaration); the work is done by :mod:`cairn_servers.blz.service`, :mod:`cairn_servers.blz.search` and
:mod:`cairn_servers.blz.sources`, imported inside the functions: ``blz mcp`` imports this module before it
answers ``initialize`` and must not pay for the store, SQLite or typing there. The first argument is
the :class:`~cairn_servers.blz.store.Store` the surface supplies. Arguments a surface supplies itself (a
download guard and a progress callback for MCP ``source-add``; ``registry`` for ``list-sources``; an
error reporter for ``blz update --all``) are declared with ``surfaces: ()``: never on the wire.

Operation names are the MCP tool names where a tool exists, else the CLI command names; they are the
names validation messages use (``Invalid parameter for 'toc': maxDepth: ...``), whichever surface.
"""

from __future__ import annotations

from cairn_servers.blz.limits import (CATEGORIES, CONTEXT_MODES, CRAWL_MAX_DELAY, CRAWL_MAX_DEPTH, CRAWL_MAX_PAGES,
                              MAX_DEPTH, MAX_LIMIT, MAX_PADDING, MAX_REFRESH_HOURS, TOC_DEFAULT_LIMIT,
                              TOC_MAX_LIMIT)
from cairn_servers.blz.schemas import TOC
from cairn_servers.core.ops import Registry

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: `blz mcp` imports this module before its first reply
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from cairn_servers.blz.store import Store
    from cairn_servers.core.errors import CairnError
    from cairn_servers.core.guard import Guard

OPS = Registry("blz")

# Surface-supplied arguments: never part of a schema, never accepted from a client or argv.
_CONTEXT: dict[str, Any] = {"surfaces": ()}
# Download limits: the command-line user's own; agents get the defaults and the guard.
_NET: dict[str, dict[str, Any]] = {
    "max_bytes": {"wire": "maxBytes", "surfaces": ("cli",), "flags": ("--max-bytes",), "metavar": "BYTES",
                  "type": "integer", "minimum": 1},
    "timeout": {"surfaces": ("cli",), "flags": ("--timeout",), "metavar": "SECONDS", "type": "number",
                "exclusiveMinimum": 0},
}
_ALIAS: dict[str, Any] = {"positional": True, "metavar": "ALIAS"}
# Search filters and retrieval controls shared by find, search and get (the same wire names everywhere).
_SOURCES: dict[str, Any] = {"type": ["string", "array"], "flags": ("-s", "--source"), "metavar": "ALIAS[,ALIAS]"}
_SEARCH_FILTERS: dict[str, dict[str, Any]] = {
    "headings_only": {"wire": "headingsOnly", "flags": ("--headings-only",)},
    "heading_level": {"wire": "headingLevel", "type": ["string", "integer", "array"],
                      "flags": ("-H", "--heading-level"), "metavar": "LEVELS"},
}
_SPAN_CONTROLS: dict[str, dict[str, Any]] = {
    "max_lines": {"wire": "maxLines", "type": "integer", "minimum": 1, "flags": ("--max-lines",), "metavar": "N"},
    "lines_before": {"wire": "linesBefore", "type": "integer", "minimum": 0, "maximum": MAX_PADDING,
                     "flags": ("-B", "--before-context"), "metavar": "N"},
    "lines_after": {"wire": "linesAfter", "type": "integer", "minimum": 0, "maximum": MAX_PADDING,
                    "flags": ("-A", "--after-context"), "metavar": "N"},
}
_OPTIONAL_ALIAS: dict[str, Any] = {"positional": True, "metavar": "ALIAS", "type": "string"}


def _levels(op: str, spec: str | int | list[str | int] | None) -> tuple[int, ...] | None:
    """A heading-level filter as levels, or the parameter refused with the schema's message form
    (``Invalid parameter for 'find': headingLevel: '3-1' is an empty range ...``)."""
    if spec is None:
        return None
    from cairn_servers.blz.search import heading_levels
    from cairn_servers.core.ops import invalid

    try:
        return heading_levels(spec)
    except ValueError as exc:
        raise invalid(op, f"headingLevel: {exc}", "headingLevel") from None


def _net(max_bytes: int | None, timeout: float | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if max_bytes is not None:
        out["max_bytes"] = max_bytes
    if timeout is not None:
        out["timeout"] = timeout
    return out


# -- on MCP and the CLI ---------------------------------------------------------------------------

@OPS.op(name="find", mcp="find", cli="find",
        extra={"help": "search and/or print cited lines in one answer (the MCP find tool)"}, params={
    "query": {"type": "string", "positional": True, "metavar": "QUERY"},
    "snippets": {"type": "array", "flags": ("--snippet", "--snippets"), "metavar": "CITATION"},
    "source": _SOURCES,
    "context_mode": {"wire": "contextMode", "type": "string", "enum": list(CONTEXT_MODES),
                     "flags": ("--context", "--context-mode"), "metavar": "MODE"},
    "line_padding": {"wire": "linePadding", "type": "integer", "minimum": 0, "maximum": MAX_PADDING,
                     "flags": ("-C", "--context-lines", "--line-padding"), "metavar": "N"},
    "max_results": {"wire": "maxResults", "minimum": 1, "maximum": MAX_LIMIT,
                    "flags": ("-n", "--limit", "--max-results"), "metavar": "LIMIT"},
    **_SEARCH_FILTERS, **_SPAN_CONTROLS,
})
def find(store: Store, query: str | None = None, snippets: list[str] | None = None,
         source: str | list[str] | None = None, context_mode: str | None = None, line_padding: int | None = None,
         max_results: int = 10, headings_only: bool = False, heading_level: str | int | list[str | int] | None = None,
         max_lines: int | None = None, lines_before: int | None = None,
         lines_after: int | None = None) -> dict[str, Any]:
    """Search documentation (query) and/or retrieve exact cited line ranges (snippets). Hits carry alias, lines, headingPath, snippet, score (0-100 relative to the top hit), sourceUrl, version and anchor; cite them as alias:lines, or as alias:lines@version or by anchor (alias#heading/path) to keep the citation valid after the source is updated.

    Snippets take alias:120-142, alias:1-3,5-9, alias:120-142@3 (the lines that text is on now,
    with citations saying what happened to which part: moved, changed, removed) and alias#anchor
    (the section's current lines).

    Query syntax: every word must match; "a phrase" matches those words in that order; +word is
    required even when the search falls back; -word (or -"a phrase") drops every section holding
    it; title:word (or heading:word, title:"a phrase") matches only a section's own heading. Signs
    and title: go right before the word, and combine: -title:deprecated. When nothing matches every
    word, any of them may (fallback: "any-term"), then unknown words are replaced by the closest
    indexed word (fallback: "corrected", correctedQuery); +required and -excluded words still
    apply, and note says what was done.

    :param query: Search text: words, "quoted phrases", +required, -excluded, title:heading-words.
    :param snippets: Citations to retrieve, e.g. ["bun:120-145", "react:1-3,5-9", "react:120-142@3",
        "react#use-effect/usage"].
    :param source: Alias to search, or several: a list (["react", "bun"]) or "react,bun"; "tag:NAME"
        for every source tagged NAME; omit to search every installed source on one comparable score scale.
    :param context_mode: How to expand snippets: none, symmetric (linePadding lines each side) or all
        (the whole enclosing heading section); omitted, symmetric when linePadding, linesBefore or
        linesAfter is given, else none.
    :param line_padding: Lines added before and after each snippet (0-50).
    :param max_results: Maximum search hits (1-50).
    :param headings_only: Match the query against heading text only (each section's own heading).
    :param heading_level: Only hits in sections under headings of these levels: 2, "1-2", "<=2",
        ">=3", "1,3", or a list such as [1, 2] (levels 1-6).
    :param max_lines: Lines returned per snippet at most; a cut snippet has truncated: true and
        remaining, the citation of the lines left out (at most 2000 lines in all either way).
    :param lines_before: Lines added before each snippet only (0-50; overrides linePadding on that side).
    :param lines_after: Lines added after each snippet only (0-50; overrides linePadding on that side).
    """
    from cairn_servers.blz import service

    return service.find(store, query, snippets, source, context_mode, line_padding, max_results,
                        headings_only=headings_only, levels=_levels("find", heading_level), max_lines=max_lines,
                        before=lines_before, after=lines_after)


@OPS.op(name="toc", mcp="toc", cli="toc", output_schema=TOC,
        extra={"help": "browse a source's outline: headings with their line ranges",
               "cli_description": "Browse one source's outline without searching: its headings in file order, "
               "each with its level, heading path and its whole section as a citation (alias:start-end, to the "
               "next heading of the same or a higher level) to read with `blz get`. Paginated: --page N "
               "(hasMore in the JSON says whether another page follows).\n\nRead from the stored outline; the "
               "file is not parsed again."}, params={
    "source": _ALIAS,
    "max_depth": {"wire": "maxDepth", "type": "integer", "minimum": 1, "maximum": MAX_DEPTH,
                  "flags": ("-d", "--depth", "--max-depth"), "metavar": "N",
                  "help": "Only heading levels 1..N (1-6); omit for every level."},
    "tree": {"flags": ("--tree",)},
    "filter": {"type": "string", "flags": ("-f", "--filter"), "metavar": "TEXT"},
    "max_results": {"wire": "maxResults", "minimum": 1, "maximum": TOC_MAX_LIMIT, "flags": ("-n", "--limit"),
                    "metavar": "LIMIT"},
    "page": {"minimum": 1, "flags": ("--page",), "metavar": "N"},
})
def toc(store: Store, source: str, max_depth: int | None = None, tree: bool = False, filter: str | None = None,
        max_results: int = TOC_DEFAULT_LIMIT, page: int = 1) -> dict[str, Any]:
    """Browse one source's outline without searching: its headings in file order, each with level, headingPath, and its whole section as a citation (alias:start-end, to the next heading of the same or a higher level) to read with find(snippets=[...]). Paginated: total, hasMore, page.

    Read from the stored outline; the file is not parsed again.

    :param source: Alias of an installed source (see list-sources); several: "react,vue", or
        "tag:NAME" for every source tagged NAME (entries then carry their alias, in the order given).
    :param max_depth: Only heading levels 1..maxDepth (1-6); omit for every level.
    :param tree: Nest the entries: each carries the deeper headings under it as children (on a
        terminal: indented by level).
    :param filter: Only headings whose text contains every word of this (case-insensitive); OR
        between groups of words, NOT before a word to leave out (hooks OR effects NOT class).
    :param max_results: Headings per page (1-1000).
    :param page: Page number (hasMore says whether another follows).
    """
    from cairn_servers.blz import service

    return service.toc(store, source, max_depth, filter, max_results, page, tree=tree)


@OPS.op(name="list-sources", mcp="list-sources", cli="list", extra={"help": "list installed sources"}, params={
    "filter": {"type": "string", "flags": ("-f", "--filter"), "metavar": "TEXT"},
    "registry": {"surfaces": ("cli",), "flags": ("--registry",)},
})
def list_sources(store: Store, filter: str | None = None, registry: bool = False) -> dict[str, Any]:
    """List installed documentation sources and registry candidates (kind: installed | registry), optionally filtered by name (case-insensitive).

    :param filter: Only sources whose alias, title or URL contains this (case-insensitive).
    :param registry: Also list registry candidates not installed yet.
    """
    from cairn_servers.blz import service

    return service.list_sources(store, filter, include_registry=registry)


@OPS.op(name="lookup", mcp="lookup", cli="lookup",
        extra={"help": "browse and search the built-in registry of well-known llms.txt sources"}, params={
    "query": {"positional": True, "metavar": "QUERY"},
    "category": {"type": "string", "enum": list(CATEGORIES), "flags": ("-c", "--category"),
                 "metavar": "CATEGORY"},
})
def lookup(store: Store, query: str = "", category: str | None = None) -> dict[str, Any]:
    """Browse and search the built-in registry of well-known llms.txt sources: each with alias, url, description, category, whether it is installed, and the source-add call to make. Also lists every category with its number of entries.

    :param query: Words in an entry's alias, description, category or URL; omit to list every entry.
    :param category: Only entries of this category: ai, frontend, database, ... (the answer's
        categories lists them all with their entry counts).
    """
    from cairn_servers.blz import service

    return service.lookup(query, category, store)


@OPS.op(name="source-add", mcp="source-add", cli="add", read_only=False, open_world=True,
        extra={"help": "add a source from a URL, a local file, a domain, the registry, or a manifest",
               # the seed's source-add answer (and a crawl's summary); the CLI shows the whole result (title, sha256, ...)
               "mcp_fields": ("alias", "url", "message", "lines", "headings", "skippedLines", "crawl"),
               "cli_description": "Add a documentation source: from the registry (`blz add react`), a domain "
               "(`blz add bun.sh` tries https://bun.sh/llms-full.txt, then /llms.txt, and adds it as bun), a URL, "
               "a file:// URL or a local file or folder (`blz add mydocs ~/docs/llms.txt`), or several from a "
               "manifest (--manifest FILE). For .../llms.txt the llms-full.txt beside it is tried first (the "
               "message says when it was taken); for a site or folder, llms-full.txt, llms.txt, then "
               "llms-small.txt in it. --exact fetches exactly the URL given; --dry-run fetches and parses but "
               "writes nothing. For a site without an llms.txt, --crawl URL builds the source from its pages "
               "(sitemaps, else same-site links; robots.txt honoured; see --max-pages, --crawl-depth, "
               "--crawl-delay, --max-page-bytes)."}, params={
    # required over MCP (the seed's schema); on the command line `--manifest FILE` stands in for it
    "alias": {**_OPTIONAL_ALIAS, "required": ("mcp",)},
    "url": {"type": "string", "positional": True, "metavar": "URL",
            "help": "http(s) URL, file:// URL, or a local file or folder; omit to use the registry entry or "
                    "domain ALIAS names"},
    "force": {"flags": ("--force",)},
    "exact": {"flags": ("--exact",)},
    "all_languages": {"wire": "allLanguages", "flags": ("--all-languages",)},
    "dry_run": {"wire": "dryRun", "flags": ("--dry-run",)},
    "tags": {"type": "array", "flags": ("--tag", "--tags"), "metavar": "TAG"},
    "aliases": {"type": "array", "flags": ("--alias", "--aliases"), "metavar": "NAME"},
    "category": {"type": "string", "flags": ("--category",), "metavar": "NAME"},
    "refresh_hours": {"wire": "refreshHours", "type": "integer", "minimum": 1, "maximum": MAX_REFRESH_HOURS,
                      "flags": ("--refresh-hours",), "metavar": "HOURS"},
    "manifest": {"type": "string", "surfaces": ("cli",), "flags": ("--manifest",), "metavar": "FILE"},
    "only": {"surfaces": ("cli",), "flags": ("--only",), "metavar": "ALIASES"},
    "crawl": {"type": "string", "flags": ("--crawl",), "metavar": "URL"},
    "max_pages": {"wire": "maxPages", "type": "integer", "minimum": 1, "maximum": CRAWL_MAX_PAGES,
                  "flags": ("--max-pages",), "metavar": "N"},
    "crawl_depth": {"wire": "crawlDepth", "type": "integer", "minimum": 0, "maximum": CRAWL_MAX_DEPTH,
                    "flags": ("--crawl-depth",), "metavar": "N"},
    # the politeness delay and the per-page cap: the command-line user's own; agents get the defaults
    "crawl_delay": {"wire": "crawlDelay", "surfaces": ("cli",), "type": "number", "minimum": 0,
                    "maximum": CRAWL_MAX_DELAY, "flags": ("--crawl-delay",), "metavar": "SECONDS"},
    "max_page_bytes": {"wire": "maxPageBytes", "surfaces": ("cli",), "type": "integer", "minimum": 1,
                       "flags": ("--max-page-bytes",), "metavar": "BYTES"},
    **_NET, "guard": _CONTEXT, "progress": _CONTEXT, "on_error": _CONTEXT,
})
def source_add(store: Store, alias: str | None = None, url: str | None = None, force: bool = False,
               exact: bool = False, all_languages: bool = False, dry_run: bool = False,
               tags: list[str] | None = None, category: str | None = None, refresh_hours: int | None = None,
               aliases: list[str] | None = None, manifest: str | None = None, only: list[str] | None = None,
               crawl: str | None = None, max_pages: int | None = None, crawl_depth: int | None = None,
               crawl_delay: float | None = None, max_page_bytes: int | None = None, max_bytes: int | None = None,
               timeout: float | None = None,
               guard: Guard | None = None, progress: Callable[[int, int | None, str], None] | None = None,
               on_error: Callable[[str, CairnError], None] | None = None) -> dict[str, Any]:
    """Add a documentation source from the registry (alias only), a domain (alias: "bun.sh" tries https://bun.sh/llms-full.txt, then /llms.txt, and adds it as bun) or a URL. For .../llms.txt the llms-full.txt variant is tried first; for a site or folder, llms-full.txt, llms.txt, then llms-small.txt in it; exact: true fetches exactly the URL given; dryRun: true fetches and parses but writes nothing; crawl: "https://site/" (instead of url) builds the source from a site that has no llms.txt. With source-refresh, the only tools that change anything. Fetches from public internet addresses only (and hosts the user lists in BLZ_MCP_ALLOW_HOSTS); local files only inside the folders in BLZ_MCP_FILE_ROOTS.

    :param alias: Name for the source (a-z 0-9 _ -, 1-64 characters); alone, the registry entry of
        that name, or a domain such as bun.sh (added under the name in it: bun).
    :param url: http(s) URL (or a file inside BLZ_MCP_FILE_ROOTS); omit to use the registry. The
        command line also takes a file:// URL or a local path, anywhere.
    :param force: Replace an existing source of that alias.
    :param exact: Fetch exactly url (or the registry URL): no llms-full.txt variant, no files looked up
        inside a site (like `blz add --exact`).
    :param all_languages: Also index pages in other languages than English (by default a multilingual
        file's non-English copies are stored but not indexed).
    :param dry_run: Fetch and parse, and report what would be added (lines, headings, lines in
        other languages left out), without writing anything.
    :param tags: Tags for the source (a-z 0-9 _ -; a list, or comma-separated), to search a group of
        sources with source "tag:NAME".
    :param aliases: Other names for the source (a-z 0-9 _ -; a list, or comma-separated): search,
        find, toc and citations accept them in place of its alias.
    :param category: A category for the source (a label, 1-64 characters), shown in list-sources.
    :param refresh_hours: Hours after which the source is stale (default 24; list-sources shows
        stale and ageHours, and `blz update --stale` refreshes the stale ones).
    :param manifest: A TOML file listing sources ([[source]] tables with alias, and url or path):
        each is added as if given alone; one that fails is reported and the others still run.
    :param only: With a manifest, only the entries of these aliases (comma-separated, repeatable).
    :param crawl: A site's URL (instead of url): build the source by crawling it, for sites without an
        llms.txt. Pages come from its sitemaps, else from same-site links under that URL's folder;
        robots.txt is honoured; each page is a "# title" heading with its URL under it. `blz update`
        asks again only for changed pages (ETag / Last-Modified).
    :param max_pages: With crawl: page requests at most (default 200; redirect hops count).
    :param crawl_depth: With crawl: link hops followed from url when the site has no sitemap (default 3).
    :param crawl_delay: With --crawl: seconds between two requests at least (default: the site's
        robots.txt Crawl-delay, else 0.2; a longer Crawl-delay is kept, up to 30).
    :param max_page_bytes: With --crawl: size cap of one page in bytes (default 5 MiB; --max-bytes
        caps all pages together).
    :param max_bytes: Download size cap in bytes (default 64 MiB).
    :param timeout: Download time budget in seconds (default 60; with crawl, per request).
    """
    from cairn_servers.blz import sources
    from cairn_servers.core.errors import InvalidInput

    if manifest is not None and (crawl is not None or any(v is not None for v in (max_pages, crawl_depth, crawl_delay,
                                                                      max_page_bytes))):
        raise InvalidInput("--crawl adds one site: blz add NAME --crawl URL (not with --manifest).")
    if manifest is not None:
        if alias is not None or url is not None:
            raise InvalidInput("Give either ALIAS [URL] or --manifest FILE, not both.")
        return sources.add_manifest(store, manifest, force=force, exact=exact, all_languages=all_languages,
                                    dry_run=dry_run, only=only, on_error=on_error, tags=tags, category=category,
                                    refresh_hours=refresh_hours, aliases=aliases, **_net(max_bytes, timeout))
    if only is not None:
        raise InvalidInput("--only picks entries of a manifest: blz add --manifest FILE --only a,b")
    if alias is None:  # "" is an invalid alias, said as such
        raise InvalidInput("Name a source: blz add ALIAS [URL], blz add DOMAIN, or blz add --manifest FILE.")
    if crawl is not None:
        if url is not None:
            raise InvalidInput("Give the site to crawl once: blz add NAME --crawl URL (without a second URL).")
        url = crawl
    elif url and guard is not None:  # an agent's location is refused before anything is fetched
        sources.check_agent_location(url, exact, guard=guard)
    return sources.add(store, alias, url, force=force, exact=exact, progress=progress, guard=guard,
                       all_languages=all_languages, dry_run=dry_run, tags=tags, category=category,
                       refresh_hours=refresh_hours, aliases=aliases, crawl=crawl is not None, max_pages=max_pages,
                       crawl_depth=crawl_depth, crawl_delay=crawl_delay, max_page_bytes=max_page_bytes,
                       **_net(max_bytes, timeout))


@OPS.op(name="diff", mcp="diff", cli="diff",
        extra={"help": "sections added, removed or changed by a source's updates"}, params={
    "source": _ALIAS,
    "since": {"type": "integer", "minimum": 1, "flags": ("--since",), "metavar": "VERSION"},
})
def diff(store: Store, source: str, since: int | None = None) -> dict[str, Any]:
    """Sections added, removed or changed in a source since a version (default: the version before the current one), by anchor (alias#heading/path). added and changed carry their current lines; removed carry removedIn and was, a citation of their last lines (alias:start-end@version). Every update that changes a source's text is a new version; the last 20 updates are kept.

    :param source: Alias of an installed source.
    :param since: The version to compare with (hits of find carry each source's current version).
    """
    from cairn_servers.blz import versions
    from cairn_servers.blz.service import require

    return versions.diff(store, require(store, source).alias, since)


# -- on MCP only ----------------------------------------------------------------------------------

@OPS.op(name="source-refresh", mcp="source-refresh", read_only=False, open_world=True, params={
    "alias": {"type": "string"}, "stale": {}, "guard": _CONTEXT, "progress": _CONTEXT,
})
def source_refresh(store: Store, alias: str | None = None, stale: bool = False, guard: Guard | None = None,
                   progress: Callable[[int, int | None, str], None] | None = None) -> dict[str, Any]:
    """Refresh a documentation source (alias), or every stale one (stale: true), with a conditional request: unchanged sources are only marked checked. A source is stale when it was last fetched or checked longer ago than its refreshHours (default 24; see list-sources). Under the same limits as source-add: public internet addresses only (and hosts in BLZ_MCP_ALLOW_HOSTS), local files only inside BLZ_MCP_FILE_ROOTS. Returns results: [{alias, status: updated | unchanged | repaired | failed, ...}].

    :param alias: The source to refresh (see list-sources).
    :param stale: Refresh every stale source instead; one that fails is reported and the others still run.
    """
    from cairn_servers.blz import sources
    from cairn_servers.core.errors import CairnError, InvalidInput

    if bool(alias) == stale:
        raise InvalidInput("Give alias (one source) or stale: true (every stale source), not both.",
                           details={"parameter": "alias"})
    if alias:
        from cairn_servers.blz.service import require

        name = require(store, alias).alias
        return {"results": [sources.update(store, name, guard=guard, progress=progress)]}
    from cairn_servers.blz.service import freshness

    results: list[dict[str, Any]] = []
    for row in store.sources():
        if not freshness(row, store.options(row.alias))["stale"]:
            continue
        try:
            results.append(sources.update(store, row.alias, guard=guard, progress=progress))
        except CairnError as exc:
            results.append({"alias": row.alias, "status": "failed", "error": exc.message})
    return {"results": results}


@OPS.op(name="learn-blz", mcp="learn-blz")
def learn_blz(store: Store) -> dict[str, Any]:
    """Reference data about blz: prompts, flags, installed sources and example calls."""
    aliases = [r.alias for r in store.sources()]
    first = aliases[0] if aliases else "react"
    return {
        "prompts": [{"name": "discover-docs", "summary": "Find and add project docs"}],
        "flags": {"contextMode": list(CONTEXT_MODES), "source": aliases,
                  "maxResults": {"min": 1, "max": MAX_LIMIT, "default": 10},
                  "linePadding": {"min": 0, "max": MAX_PADDING},
                  "linesBefore": {"min": 0, "max": MAX_PADDING}, "linesAfter": {"min": 0, "max": MAX_PADDING},
                  "headingsOnly": "match heading text only",
                  "headingLevel": ["2", "1-2", "<=2", ">=3", "1,3", [1, 2]],
                  "maxLines": {"min": 1, "perSnippet": True},
                  "query": {"+word": "required, even in a fallback", "-word": "excluded",
                            '"a phrase"': "words in that order", "title:word": "in a section's own heading"}},
        "citations": "alias:start-end (1-based, inclusive); several ranges: alias:1-3,5-9; as of a version: "
                     "alias:start-end@V (the lines that text is on now); a section: alias#heading/path (a hit's anchor)",
        "examples": [f"find(query='hooks', source='{first}')",
                     f"find(query='hooks', source={aliases[:2] or ['react', 'bun']}, headingLevel='1-2')",
                     "find(query='hooks', headingsOnly=True)",
                     "find(query='+cleanup title:useEffect -class')",
                     f"find(snippets=['{first}:1-20'], linesAfter=10, maxLines=40)",
                     f"toc(source='{first}', maxDepth=2, filter='hooks')",
                     f"find(snippets=['{first}:1-20'], contextMode='all')",
                     f"find(snippets=['{first}:1-20@1'])", f"diff(source='{first}')",
                     "list-sources(filter='react')", "lookup(query='orm', category='database')",
                     "source-add(alias='bun')", "source-add(alias='hono.dev', dryRun=True)",
                     "source-add(alias='mine', url='https://example.com/docs/llms.txt', exact=True)",
                     "run-command(command='stats')"],
        "tools": ["find", "toc", "diff", "list-sources", "lookup", "source-add", "source-refresh", "run-command",
                  "learn-blz"],
        "resources": ["blz://registry", "blz://sources/{alias}"],
    }


# -- on the CLI only (the read-only ones also through MCP run-command) ----------------------------

@OPS.op(name="update", cli="update", read_only=False, open_world=True, params={
    "alias": _OPTIONAL_ALIAS, "every": {"wire": "all", "flags": ("--all",)},
    "stale": {"flags": ("--stale",)},
    "all_languages": {"wire": "allLanguages", "flags": ("--all-languages",)}, **_NET, "on_error": _CONTEXT,
    "progress": _CONTEXT,
})
def update(store: Store, alias: str | None = None, every: bool = False, stale: bool = False,
           all_languages: bool = False, max_bytes: int | None = None, timeout: float | None = None,
           on_error: Callable[[str, CairnError], None] | None = None,
           progress: Callable[[int, int | None, str], None] | None = None) -> dict[str, Any]:
    """Refresh sources (conditional request; 304 = no change).

    :param alias: The source to refresh.
    :param every: Refresh every source; one that fails is reported and the others still run.
    :param stale: Refresh the stale sources only: those checked longer ago than their refresh
        interval (--refresh-hours at add, default 24); as with --all, a failure does not stop the others.
    :param all_languages: From now on also index pages in other languages (default: as chosen at add).
    :param max_bytes: Download size cap in bytes (default 64 MiB).
    :param timeout: Download time budget in seconds (default 60).
    """
    from cairn_servers.blz import sources
    from cairn_servers.core.errors import CairnError, InvalidInput

    if bool(alias) + every + stale != 1:
        raise InvalidInput("Name one source to update, or use --all or --stale: blz update react | "
                           "blz update --all | blz update --stale")
    if stale:
        from cairn_servers.blz.service import freshness

        names = [r.alias for r in store.sources() if freshness(r, store.options(r.alias))["stale"]]
    else:
        names = [alias] if alias else [r.alias for r in store.sources()]
    results: list[dict[str, Any]] = []
    for name in names:
        try:
            results.append(sources.update(store, name, all_languages=True if all_languages else None,
                                          progress=progress, **_net(max_bytes, timeout)))
        except CairnError as exc:
            if alias:
                raise
            if on_error is not None:
                on_error(name, exc)
            results.append({"alias": name, "status": "failed", "error": exc.message})
    return {"results": results}


@OPS.op(name="remove", cli="remove", read_only=False, destructive=True, params={"alias": _ALIAS})
def remove(store: Store, alias: str) -> dict[str, Any]:
    """Remove a source and its index.

    :param alias: The source to remove.
    """
    from cairn_servers.blz import sources

    return sources.remove(store, alias)


@OPS.op(name="search", cli="search", params={
    "query": {"positional": True, "metavar": "QUERY"},
    "source": {"flags": ("-s", "--source"), "metavar": "ALIAS[,ALIAS]"},
    "max_results": {"wire": "maxResults", "minimum": 1, "maximum": MAX_LIMIT, "flags": ("-n", "--limit"),
                    "metavar": "LIMIT"},
    "page": {"minimum": 1, "flags": ("--page",), "metavar": "N"},
    **_SEARCH_FILTERS,
})
def search(store: Store, query: str, source: list[str] | None = None, max_results: int = 10,
           page: int = 1, headings_only: bool = False,
           heading_level: str | int | list[str | int] | None = None) -> dict[str, Any]:
    """Search the docs (BM25 over all or some sources).

    Query syntax: every word must match; "a phrase" matches those words in that order; +word is
    required even when the search falls back; -word (or -"a phrase") drops every section holding
    it; title:word (or heading:word, title:"a phrase") matches only a section's own heading. Signs
    and title: go right before the word, and combine: -title:deprecated. A query that is one word
    starting with - goes after --: blz search -- --force.

    When nothing matches every word, any of them may (fallback "any-term"), then unknown words are
    replaced by the closest indexed word (fallback "corrected"); +required and -excluded words still
    apply. A fallback is said on the first line of text output, in "fallback" and "note" in JSON,
    and on stderr (blz: note: ...) with jsonl, csv, tsv and md.

    :param query: Search text: words, "quoted phrases", +required, -excluded, title:heading-words.
    :param source: Only these sources (-s react,bun or -s react -s bun; -s tag:NAME for every source
        tagged NAME); omit for every installed source.
    :param max_results: Hits per page (1-50).
    :param page: Page number (hasMore says whether another follows).
    :param headings_only: Match the query against heading text only (each section's own heading).
    :param heading_level: Only hits in sections under headings of these levels: 2, 1-2, <=2, >=3,
        1,3 (levels 1-6).
    """
    from cairn_servers.blz.search import search as run

    return run(store, query, source, max_results, page, headings_only=headings_only,
               levels=_levels("search", heading_level))


@OPS.op(name="get", cli="get", params={
    "citations": {"positional": True, "metavar": "CITATION", "minItems": 1},
    "context_mode": {"wire": "contextMode", "type": "string", "enum": list(CONTEXT_MODES),
                     "flags": ("--context",), "metavar": "MODE"},
    "line_padding": {"wire": "linePadding", "type": "integer", "minimum": 0, "maximum": MAX_PADDING,
                     "flags": ("-C", "--context-lines"), "metavar": "N"},
    **_SPAN_CONTROLS,
})
def get(store: Store, citations: list[str], context_mode: str | None = None, line_padding: int | None = None,
        max_lines: int | None = None, lines_before: int | None = None,
        lines_after: int | None = None) -> dict[str, Any]:
    """Print cited lines: alias:120-142, alias:1-3,5-9, alias:120-142@V, alias#heading/path.

    alias:START-END@V names the lines as they were in version V: blz prints the lines that text is
    on now and says what happened to each part (moved, edited, removed). alias#heading/path names a
    section by its anchor (search hits carry it): its current lines.

    :param citations: Citations to retrieve: alias:START-END, several ranges as alias:1-3,5-9, as of a
        version as alias:START-END@V, or a section as alias#heading/path.
    :param context_mode: none, symmetric (-C lines each side) or all (the whole enclosing heading
        section); omitted, symmetric when -C, -B or -A is given, else none.
    :param line_padding: N lines of context each side (0-50).
    :param max_lines: Lines printed per cited range at most; a cut range is marked truncated, with
        the citation of the rest (at most 2000 lines in all either way).
    :param lines_before: N lines of context before each range only (0-50; overrides -C on that side).
    :param lines_after: N lines of context after each range only (0-50; overrides -C on that side).
    """
    from cairn_servers.blz import service

    return service.get(store, citations, context_mode, line_padding, max_lines, lines_before, lines_after)


@OPS.op(name="stats", cli="stats")
def stats(store: Store) -> dict[str, Any]:
    """Totals over all sources."""
    from cairn_servers.blz import service

    return service.stats(store)


@OPS.op(name="history", cli="history", params={
    "alias": _OPTIONAL_ALIAS, "limit": {"minimum": 1, "flags": ("-n", "--limit"), "metavar": "N"}})
def history(store: Store, alias: str | None = None, limit: int = 50) -> dict[str, Any]:
    """Adds, updates and removals, newest first.

    :param alias: Only this source's events.
    :param limit: At most this many events.
    """
    from cairn_servers.blz import service

    return service.history(store, alias, limit)


@OPS.op(name="validate", cli="validate", params={"alias": _OPTIONAL_ALIAS})
def validate(store: Store, alias: str | None = None) -> dict[str, Any]:
    """Check stored files and the index (exit code 7 when something is wrong).

    :param alias: Only this source (the index is checked as a whole either way).
    """
    from cairn_servers.blz import service

    return service.validate(store, alias)


@OPS.op(name="inspect", cli="inspect", params={"alias": _ALIAS})
def inspect(store: Store, alias: str) -> dict[str, Any]:
    """One source's metadata and outline.

    :param alias: An installed source.
    """
    from cairn_servers.blz import service

    return service.inspect(store, alias)


@OPS.op(name="schema", cli="schema", params={"name": {"positional": True, "metavar": "NAME", "type": "string"}})
def schema(store: Store, name: str | None = None) -> dict[str, Any]:
    """JSON Schemas of the outputs.

    :param name: One command's schema.
    """
    from cairn_servers.blz.schemas import SCHEMAS
    from cairn_servers.core.errors import InvalidInput

    if name is None:
        return SCHEMAS
    if name not in SCHEMAS:
        raise InvalidInput(f"No schema named {name!r}. Known: {', '.join(SCHEMAS)}.")
    return SCHEMAS[name]
