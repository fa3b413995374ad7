"""Adding and refreshing sources: resolve where to fetch, fetch, parse, store (the write side)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import urlsplit, urlunsplit

from cairn.blz import llmstxt, registry
from cairn.blz.citation import check_alias
from cairn.blz.store import SourceRow, Store, now_iso, sha256_hex
from cairn.core import fetch as fetching
from cairn.core.errors import CairnError, Conflict, InvalidInput, NotFound

if TYPE_CHECKING:  # imported by agent_guard(): the CLI never pays for socket and ipaddress
    from cairn.core.guard import Guard

Progress = Callable[[int, int | None], None]

# "ftp:", "data:", "javascript:" ... (a single letter is a Windows drive, not a scheme)
_SCHEME = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]+):")
MCP_ROOTS_ENV = "BLZ_MCP_FILE_ROOTS"
MCP_HOSTS_ENV = "BLZ_MCP_ALLOW_HOSTS"
MCP_NETWORK_ENV = "BLZ_MCP_NETWORK"


# What a folder or site is searched for, best first: the complete text, the index, the abridged text.
CONVENTIONAL = ("llms-full.txt", "llms.txt", "llms-small.txt")


def candidates(location: str, exact: bool = False) -> list[str]:
    """Where to look, best first. For ``…/llms.txt``: its ``llms-full.txt`` sibling, then the URL
    given. For a folder or site: the :data:`CONVENTIONAL` names in it. Otherwise, or with ``exact``
    (but for a local folder, which has no one file to fetch): the location given, alone. A
    substituted URL never carries the given URL's query string or fragment (``?token=…`` was meant
    for the URL given, not for a sibling).

    ``location`` is an http(s) or file URL, or a local path (made absolute and turned into a file URL).
    """
    try:
        return _candidates(location, exact)
    except (OSError, ValueError, RuntimeError) as exc:  # a name too long, a symlink loop, a NUL byte...
        shown = location if len(location) <= 100 else location[:97] + "..."
        # Never str(exc) of a resolve(): it names where a symlink led, maybe outside the allowed folders.
        reason = (exc.strerror if isinstance(exc, OSError) and exc.strerror else
                  "a symlink loop" if isinstance(exc, RuntimeError) else str(exc))
        raise InvalidInput(f"Cannot use {shown!r} as a path or URL: {reason}. "
                           "Give an http(s):// or file:// URL, or an existing local path.") from None


def _candidates(location: str, exact: bool) -> list[str]:
    if not fetching.is_url(location):
        scheme = _SCHEME.match(location)
        if scheme and not Path(location).exists():
            raise InvalidInput(f"Unsupported URL scheme {scheme.group(1).lower()!r} in {location!r}: use an "
                               "http://, https:// or file:// URL, or a local path.")
        local = Path(location).expanduser().resolve()
        if local.is_dir():  # a folder has no exact file to fetch: look inside it (even with exact)
            return [(local / n).as_uri() for n in CONVENTIONAL]
        location = local.as_uri()
    if exact:
        return [location]
    parts = urlsplit(location)
    path = parts.path or "/"
    name = path.rsplit("/", 1)[-1]

    def sibling(new_path: str) -> str:  # the same scheme and host; not the query or fragment
        return urlunsplit(parts._replace(path=new_path, query="", fragment=""))

    if name == "llms.txt":
        return [sibling(path[: -len(name)] + "llms-full.txt"), location]
    if parts.scheme.lower() == "file" and name and fetching.file_url_path(location).is_file():
        return [location]  # an existing local file is what was asked for, whatever its name
    if name == "" or "." not in name:  # a site or folder: look for the conventional files in it
        base = path if path.endswith("/") else path + "/"
        return [sibling(base + n) for n in CONVENTIONAL]
    return [location]


def allowed_roots() -> list[Path]:
    """Folders an MCP client may add local files from: ``$BLZ_MCP_FILE_ROOTS`` (os.pathsep-separated)."""
    raw = os.environ.get(MCP_ROOTS_ENV, "")
    return [Path(p).expanduser().resolve() for p in raw.split(os.pathsep) if p.strip()]


def agent_guard() -> Guard:
    """What an agent over MCP may make blz fetch, from the environment ``blz mcp`` started with:
    local files inside ``$BLZ_MCP_FILE_ROOTS``; public internet addresses, plus the hosts, IPs and
    CIDR blocks in ``$BLZ_MCP_ALLOW_HOSTS`` (with ``BLZ_MCP_NETWORK=allowlist``: only those)."""
    from cairn.core.guard import Guard

    names, nets = Guard.parse_hosts(os.environ.get(MCP_HOSTS_ENV, ""), MCP_HOSTS_ENV)
    mode = os.environ.get(MCP_NETWORK_ENV, "public").strip().lower() or "public"
    if mode not in ("public", "allowlist"):
        raise InvalidInput(f"{MCP_NETWORK_ENV}={mode!r}: use public (the default: public internet addresses "
                           f"and the hosts in {MCP_HOSTS_ENV}) or allowlist (only the hosts in {MCP_HOSTS_ENV}).")
    return Guard(file_roots=tuple(allowed_roots()), allow_names=names, allow_nets=nets, public=mode == "public",
                 file_refusal=_FILE_REFUSAL, hosts_env=MCP_HOSTS_ENV,
                 hint="Or add it from the command line: blz add ALIAS URL.")


_FILE_REFUSAL = (f"Local files cannot be added over MCP: this path is outside the folders allowed by "
                 f"{MCP_ROOTS_ENV}. Add it from the command line (blz add ALIAS PATH), or start `blz mcp` "
                 f"with {MCP_ROOTS_ENV}=/folder/with/docs.")


def check_agent_location(location: str, exact: bool = False, guard: Guard | None = None) -> None:
    """Refuse early what an agent must not add: any URL but http(s), and local files outside the
    allowed roots (after ``..`` and symlinks). The CLI user may add any file; an agent over MCP could
    otherwise read /etc/passwd or ~/.ssh through ``source-add`` + ``find``.

    This is the early, friendly check; the binding one is made again on what is opened (the file
    descriptor, the connected address) by the guard passed to :func:`add`. The refusal never names
    the resolved path: it may be a symlink's target outside the allowed folders.
    """
    guard = guard or agent_guard()
    for url in candidates(location, exact):
        if urlsplit(url).scheme.lower() != "file":
            continue
        try:
            real = fetching.file_url_path(url).resolve()
        except (OSError, RuntimeError):  # a symlink loop
            raise guard.refuse_file() from None
        if not guard.inside(real):
            raise guard.refuse_file()


def _fetch_first(urls: list[str], given: str, *, max_bytes: int, timeout: float, progress: Progress | None,
                 guard: Guard | None) -> tuple[str, fetching.FetchResult]:
    last: CairnError | None = None
    for url in urls:
        try:
            return url, fetching.fetch(url, max_bytes=max_bytes, timeout=timeout, progress=progress,
                                       guard=guard)
        except NotFound as exc:  # try the next variant
            last = exc
    assert last is not None
    if len(urls) > 1:
        hint = "Check the URL."
        if given not in urls and fetching.is_url(given):  # a site or folder URL: it was not fetched itself
            hint = "Check the URL, or fetch exactly the URL given (blz add --exact; over MCP, exact: true)."
        raise NotFound(f"Nothing found at {' or '.join(urls)}. {hint}")
    raise last


def add(store: Store, alias: str, location: str | None = None, *, force: bool = False,
        exact: bool = False, max_bytes: int = fetching.DEFAULT_MAX_BYTES,
        timeout: float = fetching.DEFAULT_TIMEOUT, progress: Progress | None = None,
        guard: Guard | None = None, all_languages: bool = False) -> dict[str, Any]:
    """Fetch and index a source under ``alias`` (from the registry when ``location`` is omitted).

    ``guard`` (set for agents: :func:`agent_guard`) limits which files and addresses are read; the
    command-line user's own requests have none. Pages that are copies in another language than
    English are stored but not indexed unless ``all_languages`` (:mod:`cairn.blz.lang`); the
    choice is kept for `blz update`.
    """
    started = time.perf_counter()
    alias = check_alias(alias)
    existing = store.source(alias)
    if existing and not force:
        raise Conflict(f"Source {alias!r} already exists. Use --force to replace it, or "
                       f"`blz update {alias}` to refresh it.")
    if not location:
        entry = registry.get(alias)
        if entry is None:
            raise NotFound(f"{alias!r} is not in the built-in registry. Give its URL: blz add {alias} URL "
                           f"(see `blz lookup {alias}`).")
        location = entry.url
    url, result = _fetch_first(candidates(location, exact), location, max_bytes=max_bytes, timeout=timeout,
                               progress=progress, guard=guard)
    assert result.body is not None
    info = _ingest(store, alias, url, result, "add" if not existing else "replace",
                   added_at=existing.added_at if existing else None, all_languages=all_languages)
    info["elapsedMs"] = round((time.perf_counter() - started) * 1000, 1)
    info["message"] = (f"Added {alias} ({info['headings']:,} headings, {info['lines']:,} lines) in "
                       f"{info['elapsedMs']:.0f}ms")
    if info["skippedLines"]:
        langs = ", ".join(sorted(info["skippedLanguages"]))
        info["message"] += (f"; {info['skippedLines']:,} lines in other languages ({langs}) stored but not "
                            "indexed (--all-languages indexes them)")
    return info


def update(store: Store, alias: str, *, max_bytes: int = fetching.DEFAULT_MAX_BYTES,
           timeout: float = fetching.DEFAULT_TIMEOUT, progress: Progress | None = None,
           all_languages: bool | None = None) -> dict[str, Any]:
    """Refresh one source with a conditional request; a 304 or identical bytes change nothing.

    The stored file and index are checked first (as `blz validate` does). If either is damaged, the
    request is unconditional and the source is written and indexed again even when its content is
    unchanged upstream: status ``repaired``. This is the fix `blz validate` suggests.
    ``all_languages`` (None: as chosen when the source was added) changes whether pages in other
    languages are indexed; a change re-indexes the source even when its content is unchanged."""
    from cairn.blz.service import source_problems

    alias = check_alias(alias)
    row = store.source(alias)
    if row is None:
        raise NotFound(f"No source named {alias!r}. See `blz list`, or add it with `blz add {alias} URL`.")
    kept = bool(store.options(alias).get("allLanguages"))
    if all_languages is None:
        all_languages = kept
    problems = source_problems(store, row)
    if problems or all_languages != kept:  # a 304 would keep the damage: ask for the content itself
        result = fetching.fetch(row.url, max_bytes=max_bytes, timeout=timeout, progress=progress)
    else:
        result = fetching.fetch(row.url, etag=row.etag, last_modified=row.last_modified,
                                max_bytes=max_bytes, timeout=timeout, progress=progress)
        if result.not_modified:
            store.touch(alias, etag=result.etag, last_modified=result.last_modified, detail="304 Not Modified")
            store.tidy(row)
            return {"alias": alias, "status": "unchanged", "reason": "not modified (304)", "url": row.url}
        assert result.body is not None
        if sha256_hex(result.body) == row.sha256:
            store.touch(alias, etag=result.etag, last_modified=result.last_modified, detail="same content")
            store.tidy(row)
            return {"alias": alias, "status": "unchanged", "reason": "same content", "url": row.url}
    detail = "repaired: " + "; ".join(problems) if problems else ""
    info = _ingest(store, alias, row.url, result, "update", added_at=row.added_at, detail=detail,
                   all_languages=all_languages)
    info["status"] = "repaired" if problems else "updated"
    if problems:
        info["reason"] = "; ".join(problems)
    elif all_languages != kept:
        info["reason"] = "indexed again with " + ("all languages" if all_languages else "English pages only")
    return info


def _ingest(store: Store, alias: str, url: str, result: fetching.FetchResult, action: str,
            added_at: str | None, detail: str = "", all_languages: bool = False) -> dict[str, Any]:
    body = result.body or b""
    if b"\x00" in body[:8192]:
        raise InvalidInput(f"{url} looks binary (it contains NUL bytes), not an llms.txt text file.")
    doc = llmstxt.parse_lines(llmstxt.decode_lines(body), all_languages=all_languages)
    languages: dict[str, int] = {}
    for _start, _end, lang in doc.skipped:
        languages[lang] = languages.get(lang, 0) + 1
    options: dict[str, Any] = {"allLanguages": all_languages}
    if doc.skipped:
        options.update(skippedLines=doc.skipped_lines, skippedPages=len(doc.skipped), skippedLanguages=languages)
    name, sha = store.write_file(alias, body)
    stamp = now_iso()
    row = SourceRow(alias=alias, url=url, title=doc.title, file=name, sha256=sha, bytes=len(body),
                    lines=len(doc.lines), headings=len(doc.headings), sections=len(doc.sections),
                    etag=result.etag, last_modified=result.last_modified, fetched_at=stamp,
                    added_at=added_at or stamp, checked_at=stamp)
    try:
        store.replace_source(row, doc, action, detail, options)
    except BaseException:
        current = store.source(alias)
        if current is None or current.file != name:  # the new file is not in use: drop it
            (store.root / "sources" / alias / name).unlink(missing_ok=True)
        raise
    return {"alias": alias, "url": url, "title": doc.title, "lines": row.lines, "headings": row.headings,
            "sections": row.sections, "bytes": row.bytes, "sha256": sha,
            "skippedLines": doc.skipped_lines, "skippedLanguages": languages}


def remove(store: Store, alias: str) -> dict[str, Any]:
    alias = check_alias(alias)
    if store.source(alias) is None:
        raise NotFound(f"No source named {alias!r}. See `blz list`.")
    store.delete_source(alias)
    return {"alias": alias, "removed": True}
