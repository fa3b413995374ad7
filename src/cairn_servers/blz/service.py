"""blz's read-side operations: retrieval by citation, listing, statistics, history, validation.

Plain data in, plain data out; the CLI and the MCP tools only parse input and render these results.
Writes live in :mod:`cairn_servers.blz.sources`, search in :mod:`cairn_servers.blz.search`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cairn_servers.blz.citation import check_alias, merge, parse_ref
from cairn_servers.blz.limits import (CONTEXT_MODES, DEFAULT_MAX_LINES, MAX_DEPTH, MAX_PADDING, TOC_DEFAULT_LIMIT,
                              TOC_MAX_LIMIT)
from cairn_servers.blz.store import SourceRow, Store, file_digest
from cairn_servers.core.errors import InvalidInput, NotFound

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

# Not imported here: cairn_servers.blz.llmstxt (the parser, and dataclasses with inspect/ast/dis: 1.5 MiB that
# `blz mcp`'s warm-up would keep resident for finds that never parse) and cairn_servers.blz.registry; the
# functions that need them import them.


def require(store: Store, alias: str) -> SourceRow:
    """The source named ``alias``, or by one of its other names (``blz add --alias``)."""
    name = check_alias(alias)
    row = store.source(name)
    if row is None:
        owner = store.other_names().get(name)
        row = store.source(owner) if owner is not None else None
    if row is None:
        names = ", ".join(r.alias for r in store.sources()) or "none"
        raise NotFound(f"No source named {alias.strip().lower()!r}. Installed: {names}. "
                       f"Add it with `blz add {alias.strip().lower()}`.")
    return row


def get(store: Store, citations: list[str], context: str | None = None, padding: int | None = None,
        max_lines: int | None = None, before: int | None = None, after: int | None = None) -> dict[str, Any]:
    """The exact lines each citation names (``alias:120-142``, ``alias:1-3,5-9``), expanded by
    ``context``: ``none``; ``symmetric`` (``padding`` lines each side, 0-50; ``before`` / ``after``
    set one side each, overriding ``padding`` there); or ``all`` (the whole heading section holding
    the range). Without ``context``: symmetric when any of those is given, else none.

    Each span (a citation's range, expanded; overlapping spans merged) is cut to ``max_lines``
    lines when given, and the answer holds at most DEFAULT_MAX_LINES lines in all, shared so that every
    span gets its part. A cut span carries ``truncated: true`` and ``remaining``, the citation of the
    lines left out."""
    context = context or ("symmetric" if padding or before or after else "none")
    if context not in CONTEXT_MODES:
        raise InvalidInput(f"Unknown context mode {context!r}: use one of {', '.join(CONTEXT_MODES)}.")
    for name, value in (("Line padding", padding), ("Lines before", before), ("Lines after", after)):
        if value is not None and not 0 <= value <= MAX_PADDING:
            raise InvalidInput(f"{name} must be between 0 and {MAX_PADDING}, not {value}.")
    if max_lines is not None and max_lines < 1:
        raise InvalidInput(f"maxLines must be at least 1, not {max_lines}.")
    if not citations:
        raise InvalidInput("Give at least one citation, e.g. react:120-142.")
    if before is None and after is None and not padding:
        padding = 5  # symmetric context without an explicit padding: a few lines each side
    lead = before if before is not None else padding or 0
    tail = after if after is not None else padding or 0
    spans: list[tuple[str, Any, int, int, str | None]] = []
    reports: list[dict[str, Any]] = []
    for citation in citations:
        ref = parse_ref(citation)
        row = require(store, ref.alias)
        alias = row.alias  # another name of the source is cited by its alias
        ranges = ref.ranges
        durable = ref.anchor is not None or ref.version is not None
        if ref.anchor is not None:
            from cairn_servers.blz.versions import resolve_anchor

            span, report = resolve_anchor(store, alias, ref.anchor, citation.strip())
            ranges = [span] if span else []
            reports.append(report)
        elif ref.version is not None and ref.version != store.current_versions().get(alias, 1):
            from cairn_servers.blz.versions import resolve_lines

            ranges, report = resolve_lines(store, alias, ranges, ref.version, citation.strip())
            reports.append(report)
        wanted = []
        for start, end in ranges:
            if start > row.lines:
                raise InvalidInput(f"{alias}:{start}-{end} starts past the end: {alias} has {row.lines} lines.")
            end = min(end, row.lines)
            if context == "symmetric":
                start, end = max(1, start - lead), min(row.lines, end + tail)
            elif context == "all":
                from cairn_servers.blz import llmstxt

                heads = [llmstxt.Heading(*h) for h in store.enclosing_headings(alias, start, end)]
                start, end = llmstxt.enclosing(heads, start, end, row.lines)
            wanted.append((start, end))
        spans += [(alias, row, start, end, citation.strip() if durable else None) for start, end in merge(wanted)]
    # The line budget is shared fairly: short spans whole, the long ones splitting what is left, so a
    # long first span (a whole section with --context all) cannot crowd out the citations after it.
    caps = _shares([min(end - start + 1, max_lines or end - start + 1) for _, _, start, end, _c in spans],
                   DEFAULT_MAX_LINES)
    snippets: list[dict[str, Any]] = []
    versions = store.current_versions() if reports or any(c for *_s, c in spans) else {}
    for (alias, row, start, end, cited), cap in zip(spans, caps):
        if cap < 1:  # more spans than lines in the budget: named, never dropped silently
            snippets.append({"alias": alias, "lines": f"{start}-{start - 1}", "content": "", "headingPath": [],
                             "truncated": True, "remaining": f"{alias}:{start}-{end}"})
            continue
        last = min(end, start + cap - 1)
        lines = store.read_lines(row, start, last)
        snip: dict[str, Any] = {"alias": alias, "lines": f"{start}-{last}", "content": "\n".join(lines),
                                "headingPath": heading_path(store, alias, start)}
        if last < end:
            snip["truncated"] = True
            snip["remaining"] = f"{alias}:{last + 1}-{end}"
        if cited is not None:  # a durable citation: which one, and the version these lines are of
            snip["cited"] = cited
            snip["version"] = versions.get(alias)
        snippets.append(snip)
    out: dict[str, Any] = {"snippets": snippets}
    if reports:
        out["citations"] = reports
    return out


def _shares(sizes: list[int], budget: int) -> list[int]:
    """Lines for each span out of ``budget``: the smallest first, each at most an even share of what
    is left (water-filling), so every span gets lines while any are left."""
    caps = [0] * len(sizes)
    left = budget
    for n, i in enumerate(sorted(range(len(sizes)), key=sizes.__getitem__)):
        caps[i] = min(sizes[i], left // (len(sizes) - n))
        left -= caps[i]
    return caps


def find(store: Store, query: str | None = None, snippets: list[str] | None = None,
         source: list[str] | str | None = None, context: str | None = None, padding: int | None = None,
         limit: int = 10, *, headings_only: bool = False, levels: tuple[int, ...] | None = None,
         max_lines: int | None = None, before: int | None = None, after: int | None = None) -> dict[str, Any]:
    """Search (``query``) and/or retrieve cited lines (``snippets``) in one answer: ``hits`` as
    :func:`cairn_servers.blz.search.search` ranks them (in ``source`` only, when given: one alias, a list,
    or aliases separated by commas; ``headings_only`` and ``levels`` as search takes them),
    ``snippets`` as :func:`get` expands and cuts them, and ``executed`` saying which of the two ran."""
    from cairn_servers.blz.search import search

    searching = bool(query and query.strip())
    if not searching and not snippets:
        raise InvalidInput("Give a query to search, or snippets (citations like react:120-142) to retrieve.")
    out: dict[str, Any] = {"snippets": [], "hits": [], "executed": {"searched": False, "retrievedSnippets": False}}
    if searching:
        assert query is not None
        found = search(store, query, source, limit, headings_only=headings_only, levels=levels)
        out["hits"] = found["hits"]
        if found.get("fallback"):
            out["fallback"] = found["fallback"]
        if found.get("correctedQuery"):
            out["correctedQuery"] = found["correctedQuery"]
        if found.get("note"):
            out["note"] = found["note"]
        out["executed"]["searched"] = True
    if snippets:
        got = get(store, snippets, context, padding, max_lines, before, after)
        out["snippets"] = got["snippets"]
        if "citations" in got:
            out["citations"] = got["citations"]
        out["executed"]["retrievedSnippets"] = True
    return out


def toc(store: Store, alias: str, depth: int | None = None, filter: str | None = None,
        limit: int = TOC_DEFAULT_LIMIT, page: int = 1, tree: bool = False) -> dict[str, Any]:
    """One page of a source's outline from the stored headings (the file is not parsed again):
    each heading with its level, heading path and line range, cited as ``alias:start-end`` (the
    range runs to the line before the next heading of the same or a higher level). ``depth`` keeps
    levels 1..depth; ``filter`` keeps headings whose text holds every one of its words
    (case-insensitive). ``total`` counts every match; ``hasMore`` says whether a next page exists.
    With ``tree``, the page's entries are nested: each carries the deeper entries after it (on the
    same page) as ``children``; pagination still counts headings, not top-level entries."""
    if depth is not None and not 1 <= depth <= MAX_DEPTH:
        raise InvalidInput(f"depth must be between 1 and {MAX_DEPTH} (heading levels H1-H{MAX_DEPTH}), not {depth}.")
    if not 1 <= limit <= TOC_MAX_LIMIT:
        raise InvalidInput(f"limit must be between 1 and {TOC_MAX_LIMIT}, not {limit}.")
    if page < 1:
        raise InvalidInput(f"page must be 1 or more, not {page}.")
    from cairn_servers.blz.search import resolve, source_list

    given = source_list(alias)
    if not given:
        raise InvalidInput("Name a source: toc ALIAS (or several: a,b; or tag:NAME).", details={"parameter": "source"})
    rows = list({r.alias: r for r in (require(store, a) for a in resolve(store, given))}.values())
    keep = toc_filter(filter)
    offset, seen = (page - 1) * limit, 0
    entries: list[dict[str, Any]] = []
    for row in rows:  # one page across the sources, in the order given
        count, found = store.outline(row.alias, depth or MAX_DEPTH, (), max(0, offset - seen), limit - len(entries),
                                     keep)
        seen += count
        for line, level, text, last, path in found:
            entry = {"level": level, "text": text, "headingPath": list(path), "lines": f"{line}-{last}",
                     "citation": f"{row.alias}:{line}-{last}"}
            if len(rows) > 1:
                entry["alias"] = row.alias
            entries.append(entry)
    one = rows[0] if len(rows) == 1 else None
    out: dict[str, Any] = {"alias": one.alias if one else None, "url": one.url if one else None, "depth": depth,
           "filter": filter or None, "page": page, "limit": limit, "total": seen, "hasMore": page * limit < seen,
           "tree": tree, "entries": _nest_each(entries) if tree else entries}
    if one is None:
        out["sources"] = [r.alias for r in rows]
    return out


def toc_filter(text: str | None) -> Callable[[str], bool] | None:
    """What a toc filter keeps, as a test of a heading's lower-cased text: its words must all be in
    the text; ``OR`` between groups of words keeps a heading any group matches; ``NOT word`` keeps
    headings without it (``AND`` may be written; operators in capitals). None: no filter."""
    groups: list[list[tuple[bool, str]]] = [[]]
    negate = False
    for token in (text or "").split():
        if token == "OR":
            groups.append([])
        elif token == "NOT":
            negate = True
        elif token != "AND":
            groups[-1].append((negate, token.lower()))
            negate = False
    kept = [g for g in groups if g]
    if not kept:
        return None

    def keep(low: str) -> bool:
        return any(all((word in low) != negated for negated, word in group) for group in kept)

    return keep


def _nest_each(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`nest` for each source's run of entries (a source's H2 never nests under another's H1)."""
    out: list[dict[str, Any]] = []
    start = 0
    for k in range(1, len(entries) + 1):
        if k == len(entries) or entries[k].get("alias") != entries[start].get("alias"):
            out += nest(entries[start:k])
            start = k
    return out


def nest(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Flat outline entries (file order) as a forest: each entry's ``children`` are the deeper
    entries following it until one of its level or higher."""
    roots: list[dict[str, Any]] = []
    stack: list[dict[str, Any]] = []
    for entry in entries:
        node = {**entry, "children": []}
        while stack and stack[-1]["level"] >= node["level"]:
            stack.pop()
        (stack[-1]["children"] if stack else roots).append(node)
        stack.append(node)
    return roots


def heading_path(store: Store, alias: str, line: int) -> list[str]:
    """The chain of headings enclosing ``line`` of source ``alias``."""
    return path_of(store.ancestors(alias, line), line)


def path_of(heads: Sequence[tuple[int, int, str, int]], line: int) -> list[str]:
    """The chain of headings enclosing ``line``, from headings ``(line, level, text, last_line)`` in
    file order: the whole outline, or only the headings on that chain (the same answer)."""
    stack: list[tuple[int, int, str, int]] = []
    for h in heads:
        if h[0] > line:
            break
        while stack and stack[-1][1] >= h[1]:
            stack.pop()
        stack.append(h)
    return [h[2] for h in stack if h[3] >= line]


def freshness(row: SourceRow, options: dict[str, Any], now: float | None = None) -> dict[str, Any]:
    """``refreshHours`` (the source's, default 24), ``ageHours`` (since it was last fetched or checked
    unchanged, one decimal) and ``stale`` (older than refreshHours)."""
    import calendar
    import time

    from cairn_servers.blz.limits import DEFAULT_REFRESH_HOURS

    hours = options.get("refreshHours")
    hours = hours if isinstance(hours, int) and not isinstance(hours, bool) and hours > 0 else DEFAULT_REFRESH_HOURS
    stamp = row.checked_at or row.fetched_at
    try:
        then = calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))
    except (TypeError, ValueError):  # no readable time: as old as can be, so that an update fixes it
        return {"refreshHours": hours, "ageHours": None, "stale": True}
    age = max(0.0, ((time.time() if now is None else now) - then) / 3600)
    return {"refreshHours": hours, "ageHours": round(age, 1), "stale": age > hours}


def describe(row: SourceRow, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """A source as listed; ``options`` (Store.options) adds the lines left out as other languages,
    its tags, category and freshness."""
    options = options or {}
    return {"alias": row.alias, "title": row.title, "url": row.url, "kind": "installed",
            "fetchedAt": row.fetched_at, "checkedAt": row.checked_at,
            "tags": list(options.get("tags") or []), "category": options.get("category"),
            "aliases": list(options.get("aliases") or []),
            **freshness(row, options),
            "metadata": {"totalLines": row.lines, "headings": row.headings, "sections": row.sections,
                         "bytes": row.bytes, "sha256": row.sha256,
                         "skippedLines": options.get("skippedLines", 0),
                         "skippedLanguages": options.get("skippedLanguages", {}),
                         "allLanguages": bool(options.get("allLanguages"))}}


def list_sources(store: Store, filter: str | None = None, include_registry: bool = False) -> dict[str, Any]:
    """Installed sources (and, with ``include_registry``, registry entries not yet installed),
    optionally only those whose alias, title or URL contains ``filter`` (case-insensitive)."""
    needle = (filter or "").strip().lower()
    out = []
    installed = store.sources()
    for row in installed:
        if not needle or needle in f"{row.alias} {row.title} {row.url}".lower():
            out.append(describe(row, store.options(row.alias)))
    if include_registry:
        from cairn_servers.blz import registry

        have = {r.alias for r in installed}
        # the entry named by the filter first, then those whose alias holds it (react, preact, then
        # ant-design for its "React" description)
        for e in sorted(registry.REGISTRY, key=lambda e: (e.alias != needle, needle not in e.alias)):
            if e.alias in have:
                continue
            if not needle or needle in f"{e.alias} {e.description} {e.category} {e.url}".lower():
                out.append({"alias": e.alias, "title": e.description, "url": e.url, "kind": "registry",
                            "category": e.category, "suggestedCommand": f"blz add {e.alias}"})
    return {"sources": out}


def lookup(query: str, category: str | None = None, store: Store | None = None) -> dict[str, Any]:
    """Registry entries matching ``query`` (words in alias, description, category or URL), in
    ``category`` only when given; each says whether it is ``installed`` (an installed source of
    that alias, when ``store`` is given). ``categories``: every category with its entry count."""
    from cairn_servers.blz import registry
    from cairn_servers.search.query import check_terms

    check_terms(query)  # each word is compared with every entry
    if category is not None:
        if category not in registry.CATEGORIES:
            raise InvalidInput(f"Unknown category {category!r}. Categories: {', '.join(registry.CATEGORIES)}.")
    installed = {r.alias for r in store.sources()} if store is not None else set()
    return {"query": query, "category": category, "categories": registry.categories(), "results": [
        {"alias": e.alias, "url": e.url, "description": e.description, "category": e.category,
         "installed": e.alias in installed, "suggestedCommand": f"blz add {e.alias}"}
        for e in registry.lookup(query, category)]}


def stats(store: Store) -> dict[str, Any]:
    """Totals over every installed source."""
    rows = store.sources()
    size = store.index_bytes()
    return {"sources": len(rows), "totalLines": sum(r.lines for r in rows),
            "totalHeadings": sum(r.headings for r in rows), "totalSections": sum(r.sections for r in rows),
            "totalBytes": sum(r.bytes for r in rows), "indexBytes": size,
            "perSource": [{"alias": r.alias, "lines": r.lines, "headings": r.headings,
                           "sections": r.sections, "bytes": r.bytes} for r in rows]}


def history(store: Store, alias: str | None = None, limit: int = 50) -> dict[str, Any]:
    """Adds, updates, unchanged checks and removals, newest first."""
    if limit < 1:
        raise InvalidInput(f"limit must be at least 1, not {limit}.")
    return {"events": store.history(check_alias(alias) if alias else None, limit)}


def source_problems(store: Store, row: SourceRow) -> list[str]:
    """What is wrong with one source's stored file (checksum, line count) and index rows (section
    and heading counts); empty when nothing is. `blz update` repairs whatever this finds."""
    problems = []
    try:
        sha, lines = file_digest(store.file_path(row))
    except FileNotFoundError:
        problems.append(f"stored file sources/{row.alias}/{row.file} is missing")
    except OSError as exc:
        problems.append(f"stored file sources/{row.alias}/{row.file} cannot be read ({exc.strerror or exc})")
    else:
        if sha != row.sha256:
            problems.append("checksum mismatch: the stored file changed after it was indexed")
        if lines != row.lines:
            problems.append(f"line count {lines} differs from the indexed {row.lines}")
    count, heads = store.indexed_counts(row)
    if count != row.sections:
        problems.append(f"index holds {count} sections, expected {row.sections}")
    if heads != row.headings:
        problems.append(f"index holds {heads} headings, expected {row.headings}")
    return problems


def validate(store: Store, alias: str | None = None) -> dict[str, Any]:
    """Check each stored file against its checksum and line count, and the index against the file.
    Each damaged source names its fix, `blz update ALIAS`: it fetches the source again (not
    conditionally) and rewrites the stored file and the index."""
    rows = [require(store, alias)] if alias else store.sources()
    report = []
    for row in rows:
        problems = source_problems(store, row)
        report.append({"alias": row.alias, "ok": not problems, "problems": problems,
                       "fix": f"blz update {row.alias}" if problems else None})
    index_ok = store.index_ok()
    return {"ok": index_ok and all(r["ok"] for r in report), "indexOk": index_ok, "sources": report}


def inspect(store: Store, alias: str) -> dict[str, Any]:
    """One source's metadata, stored file and heading outline (levels 1-2)."""
    row = require(store, alias)
    heads = store.headings(row.alias)
    levels: dict[str, int] = {}
    for _line, level, _text, _end in heads:
        levels[f"h{level}"] = levels.get(f"h{level}", 0) + 1
    info = describe(row, store.options(row.alias))
    info.update({"file": f"sources/{row.alias}/{row.file}", "etag": row.etag,
                 "lastModified": row.last_modified, "addedAt": row.added_at, "headingLevels": levels,
                 "outline": [{"line": ln, "level": lv, "text": t, "lines": f"{ln}-{end}"}
                             for ln, lv, t, end in heads if lv <= 2][:200]})
    return info
