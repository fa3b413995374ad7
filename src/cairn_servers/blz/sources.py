"""Adding and refreshing sources: resolve where to fetch, fetch, parse, store (the write side)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import urlsplit, urlunsplit

from cairn_servers.blz import llmstxt, registry
from cairn_servers.blz.citation import check_alias
from cairn_servers.blz.limits import MAX_REFRESH_HOURS
from cairn_servers.blz.store import SourceRow, Store, now_iso, sha256_hex
from cairn_servers.core import fetch as fetching
from cairn_servers.core.errors import CairnError, Conflict, InvalidInput, NotFound

if TYPE_CHECKING:  # imported by agent_guard(): the CLI never pays for socket and ipaddress
    from cairn_servers.blz.crawl import Progress
    from cairn_servers.core.guard import Guard


def _in_bytes(progress: Progress | None) -> fetching.Progress | None:
    """A download's byte counts as ``progress`` calls."""
    return None if progress is None else (lambda done, total: progress(done, total, "bytes"))


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
    from cairn_servers.core.guard import Guard

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
                 guard: Guard | None, missing: str | None = None) -> tuple[str, fetching.FetchResult, list[str]]:
    """The first of ``urls`` that exists: (its URL, what was fetched, the URLs before it that were not
    found). Only "not found" moves on to the next; any other failure is reported as it is.
    ``missing``: the message when none exists (else one naming them all)."""
    last: CairnError | None = None
    for i, url in enumerate(urls):
        try:
            return url, fetching.fetch(url, max_bytes=max_bytes, timeout=timeout, progress=_in_bytes(progress),
                                       guard=guard), urls[:i]
        except NotFound as exc:  # try the next variant
            last = exc
    assert last is not None
    if missing is not None:
        raise NotFound(missing)
    if len(urls) > 1:
        hint = "Check the URL."
        if given not in urls and fetching.is_url(given):  # a site or folder URL: it was not fetched itself
            hint = "Check the URL, or fetch exactly the URL given (blz add --exact; over MCP, exact: true)."
        raise NotFound(f"Nothing found at {' or '.join(urls)}. {hint}")
    raise last


# -- a bare domain: `blz add bun.sh` ---------------------------------------------------------------

_HOST = re.compile(r"(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.?"
                   r"(?::(\d{1,5}))?/?\Z")
# Hosting suffixes under which the project's own name is the label before them.
_HOSTING = ("github.io", "gitlab.io", "pages.dev", "netlify.app", "vercel.app", "readthedocs.io", "web.app")
# Leading labels that name a part of a site, not the project (docs.astro.build -> astro).
_SUBSITES = frozenset({"www", "docs", "doc", "developers", "developer", "dev", "api", "learn", "help", "en"})
# Second-level names under a country code (example.co.uk, example.com.au).
_SECOND_LEVEL = frozenset({"co", "com", "org", "net", "ac", "gov", "edu"})
# Top-level names that are file extensions, not domains: `blz add notes.txt` is a missing file.
_FILE_SUFFIXES = frozenset({"txt", "md", "markdown", "mdx", "html", "htm", "json", "toml", "xml", "rst"})
# What a site is asked for, in order: the complete text, then the index.
DOMAIN_FILES = ("llms-full.txt", "llms.txt")


def is_domain(text: str) -> bool:
    """``bun.sh``, ``docs.astro.build``, ``127.0.0.1:8443``: a host (with a dot or a port, so never
    an alias) and no scheme or path."""
    text = text.strip().lower()
    if "://" in text or not ("." in text or ":" in text):
        return False
    m = _HOST.match(text)
    return m is not None and (m.group(1) is None or 0 < int(m.group(1)) < 65536)


def domain_alias(domain: str) -> str:
    """The alias a domain is added under: the project's name in it (``bun.sh`` -> ``bun``,
    ``docs.astro.build`` -> ``astro``, ``orm.drizzle.team`` -> ``drizzle``,
    ``langchain-ai.github.io`` -> ``langchain-ai``; an IP address with dashes)."""
    host = domain.strip().lower().rstrip("/").split(":", 1)[0].rstrip(".")
    labels = host.split(".")
    if all(label.isdigit() for label in labels):  # an IPv4 address
        return "-".join(labels)
    for suffix in _HOSTING:
        if host.endswith("." + suffix):
            labels = labels[: -len(suffix.split("."))]
            break
    else:
        if len(labels) > 1:
            labels = labels[:-1]  # the top-level domain
            if len(labels) > 1 and labels[-1] in _SECOND_LEVEL:
                labels = labels[:-1]  # example.co.uk
    named = [label for label in labels if label not in _SUBSITES] or labels
    return check_alias(named[-1][:64])


def _domain(text: str, exact: bool, agent: bool = False) -> tuple[str, list[str]]:
    """``(alias, URLs to try)`` for ``blz add DOMAIN``; a clear error when ``text`` is not one.
    ``agent``: an MCP client, who is not told which files exist in the server's folder."""
    shown = text if len(text) <= 100 else text[:97] + "..."
    if not agent and Path(text).expanduser().exists():  # a file here: never fetched from the web by surprise
        raise InvalidInput(f"{shown!r} is a local file or folder. Name the source: blz add ALIAS {shown}")
    if not is_domain(text):
        raise InvalidInput(f"{shown!r} is neither an alias (a-z, 0-9, '_', '-') nor a domain such as bun.sh. "
                           "Give a registry name (blz lookup), a domain, or an alias and a URL: blz add ALIAS URL.")
    host = text.strip().lower().rstrip("/")
    if host.rsplit(":", 1)[0].rsplit(".", 1)[-1] in _FILE_SUFFIXES:
        raise InvalidInput(f"There is no file {shown!r} here, and it is not a domain. Check the path, or name "
                           f"the source: blz add ALIAS PATH.")
    if exact:
        raise InvalidInput(f"--exact (exact: true) fetches one URL; a domain is looked into. Give the URL: "
                           f"blz add {domain_alias(host)} https://{host}/llms.txt --exact")
    return domain_alias(host), [f"https://{host}/{name}" for name in DOMAIN_FILES]


MAX_TAGS = 32
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def settings(tags: list[str] | None = None, category: str | None = None,
             refresh_hours: int | None = None, aliases: list[str] | None = None) -> dict[str, Any]:
    """A source's descriptive settings, checked, as kept with its options (``tags``, ``category``,
    ``refreshHours``, ``aliases``: its other names; only those given). Tags and aliases may also come
    comma-separated (``--tag a,b``)."""
    out: dict[str, Any] = {}
    if aliases is not None:
        out["aliases"] = list(dict.fromkeys(check_alias(a) for item in aliases for a in item.split(",")
                                            if a.strip()))
    if tags is not None:
        names = list(dict.fromkeys(t.strip().lower() for item in tags for t in item.split(",") if t.strip()))
        for name in names:
            if not _NAME.fullmatch(name):
                raise InvalidInput(f"Invalid tag {name!r}: use 1-64 characters from a-z 0-9 _ -, starting with a "
                                   "letter or digit (e.g. --tag frontend).", details={"parameter": "tags"})
        if len(names) > MAX_TAGS:
            raise InvalidInput(f"{len(names)} tags; a source takes at most {MAX_TAGS}.", details={"parameter": "tags"})
        out["tags"] = names
    if category is not None:  # a label (upstream manifests write "Web Framework"): any printable text
        name = " ".join(category.split())
        if not 1 <= len(name) <= 64 or not name.isprintable():
            raise InvalidInput(f"Invalid category {category!r}: give 1-64 printable characters (e.g. --category "
                               "frontend).", details={"parameter": "category"})
        out["category"] = name
    if refresh_hours is not None:
        if isinstance(refresh_hours, bool) or not 1 <= refresh_hours <= MAX_REFRESH_HOURS:
            raise InvalidInput(f"refreshHours must be between 1 and {MAX_REFRESH_HOURS}, not {refresh_hours}.",
                               details={"parameter": "refreshHours"})
        out["refreshHours"] = refresh_hours
    return out


KEPT = ("tags", "category", "refreshHours", "aliases")  # settings an update keeps (the language choice is kept apart)


def add(store: Store, alias: str, location: str | None = None, *, force: bool = False,
        exact: bool = False, max_bytes: int = fetching.DEFAULT_MAX_BYTES,
        timeout: float = fetching.DEFAULT_TIMEOUT, progress: Progress | None = None,
        guard: Guard | None = None, all_languages: bool = False, dry_run: bool = False,
        tags: list[str] | None = None, category: str | None = None,
        refresh_hours: int | None = None, aliases: list[str] | None = None, crawl: bool = False,
        max_pages: int | None = None, crawl_depth: int | None = None, crawl_delay: float | None = None,
        max_page_bytes: int | None = None) -> dict[str, Any]:
    """Fetch and index a source under ``alias``. Without ``location``, ``alias`` is a registry name
    (its URL; for a ``…/llms-full.txt`` entry, ``llms.txt`` beside it when that is gone) or a bare
    domain (``bun.sh``: ``https://bun.sh/llms-full.txt``, then ``https://bun.sh/llms.txt``, added
    under the name in it, ``bun``). The message says which URL was used when it was not the one given.

    ``guard`` (set for agents: :func:`agent_guard`) limits which files and addresses are read; the
    command-line user's own requests have none. Pages that are copies in another language than
    English are stored but not indexed unless ``all_languages`` (:mod:`cairn_servers.blz.lang`); the
    choice is kept for `blz update`. ``dry_run`` fetches and parses, and reports what would be
    added (lines, headings, lines in other languages left out) without writing anything.
    ``tags``, ``category``, ``refresh_hours`` and ``aliases`` (other names for the source, resolved by
    search, find, get and toc; :func:`settings`) are kept with the source.

    ``crawl``: build the source from the site at ``location`` (:mod:`cairn_servers.blz.crawl`), with
    ``max_pages``, ``crawl_depth``, ``crawl_delay`` and ``max_page_bytes`` (``max_bytes``: all pages
    together; ``timeout``: per request); the limits are kept for `blz update`.
    """
    started = time.perf_counter()
    extra = settings(tags, category, refresh_hours, aliases)
    if crawl:
        from cairn_servers.blz.crawl import Limits

        if exact:
            raise InvalidInput("--exact fetches one URL; --crawl fetches a site's pages. Give one of them.")

        limits = Limits(total_bytes=max_bytes, timeout=timeout)
        for name, value in (("max_pages", max_pages), ("max_depth", crawl_depth), ("delay", crawl_delay),
                            ("page_bytes", max_page_bytes)):
            if value is not None:
                setattr(limits, name, value)
        limits.check()
        return _add_crawl(store, alias, location, force=force, dry_run=dry_run, limits=limits, progress=progress,
                          guard=guard, all_languages=all_languages, extra=extra, started=started)
    if any(v is not None for v in (max_pages, crawl_depth, crawl_delay, max_page_bytes)):
        raise InvalidInput("--max-pages, --crawl-depth, --crawl-delay and --max-page-bytes limit a crawl: "
                           "add --crawl (blz add NAME --crawl URL).")
    missing: str | None = None
    derived = False  # the URL was not given: say which one was fetched
    if not location and ("." in alias or ":" in alias):  # a domain (an alias has neither)
        alias, urls = _domain(alias, exact, agent=guard is not None)
        host = urls[0].split("/")[2]
        missing = (f"Neither {urls[0]} nor {urls[1]} exists (HTTP 404). If {host} keeps its llms.txt "
                   f"elsewhere, give that URL: blz add {alias} URL.")
        derived = True
    alias, existing = _claim(store, alias, extra, force)
    if not derived:
        if not location:
            entry = registry.get(alias)
            if entry is None:
                raise NotFound(f"{alias!r} is not in the built-in registry. Give its URL: blz add {alias} URL "
                               f"(see `blz lookup {alias}`), or its site's domain: blz add example.com.")
            location, derived = entry.url, True
            urls = candidates(location, exact)
            if not exact and location.endswith("/llms-full.txt"):  # the registry's fallback: the index
                urls.append(location[: -len("llms-full.txt")] + "llms.txt")
        else:
            urls = candidates(location, exact)
    url, result, absent = _fetch_first(urls, location or urls[0], max_bytes=max_bytes, timeout=timeout,
                                       progress=progress, guard=guard, missing=missing)
    assert result.body is not None
    action = "add" if not existing else "replace"
    if dry_run:
        info = {"alias": alias, **_parse(url, result, all_languages)[1], "sha256": sha256_hex(result.body)}
    else:
        info = _ingest(store, alias, url, result, action, added_at=existing.added_at if existing else None,
                       all_languages=all_languages, extra=extra)
    info.update(extra)
    info["elapsedMs"] = round((time.perf_counter() - started) * 1000, 1)
    where = ""
    if derived or absent:
        where = f" from {url}" + (f" ({', '.join(absent)}: not found)" if absent else "")
    elif len(urls) == 2 and url == urls[0] and urls[1].rsplit("/", 1)[-1] == "llms.txt":
        # asked for …/llms.txt, took the complete text beside it: say so, and how to get the one asked for
        where = f" from {url}, the complete text beside the llms.txt given (--exact adds {urls[1]} itself)"
        info["substituted"] = {"asked": urls[1], "used": url}
    counts = f"({info['headings']:,} headings, {info['lines']:,} lines)"
    if dry_run:
        info["dryRun"] = True
        verb = "replace" if existing else "add"
        info["message"] = f"Dry run: would {verb} {alias} {counts}{where or f' from {url}'}; nothing was written"
    else:
        info["message"] = f"Added {alias} {counts} in {info['elapsedMs']:.0f}ms{where}"
    if info["skippedLines"]:
        langs = ", ".join(sorted(info["skippedLanguages"]))
        info["message"] += (f"; {info['skippedLines']:,} lines in other languages ({langs}) "
                            + ("would be stored but not indexed" if dry_run else "stored but not indexed")
                            + " (--all-languages indexes them)")
    return info


def _crawl_summary(result: Any) -> dict[str, Any]:
    return {"mode": result.mode, "pages": len(result.pages), "requests": result.requests,
            "changed": result.changed, "notModified": result.kept, "warnings": result.warnings,
            "moreWarnings": result.more_warnings}


def _crawl_meta(start: str, result: Any, records: list[dict[str, Any]], limits: Any) -> dict[str, Any]:
    """What a crawled source keeps with its options: the start URL, the limits it was crawled with
    and each page's URL, ETag, Last-Modified, depth and lines in the file (for conditional refresh)."""
    return {"start": start, "mode": result.mode, "pages": records,
            "limits": {"maxPages": limits.max_pages, "crawlDepth": limits.max_depth, "crawlDelay": limits.delay,
                       "maxPageBytes": limits.page_bytes}}


def _add_crawl(store: Store, alias: str, location: str | None, *, force: bool, dry_run: bool, limits: Any,
               progress: Progress | None, guard: Guard | None, all_languages: bool, extra: dict[str, Any],
               started: float) -> dict[str, Any]:
    """``blz add ALIAS --crawl URL``: crawl the site, then store and index it as any other source."""
    from cairn_servers.blz.crawl import Crawler

    if not location:
        raise InvalidInput("--crawl takes the site's URL: blz add NAME --crawl https://docs.example.com/")
    alias, existing = _claim(store, alias, extra, force)
    result = Crawler(location, limits, guard=guard, progress=progress).run()
    if not result.pages:
        said = "; ".join(result.warnings[:5]) or "no page was found"
        raise NotFound(f"Crawling {location} gave no pages ({said}). Check the URL, or raise --max-pages or "
                       "--crawl-depth.")
    body, records = result.body()
    fetched = fetching.FetchResult(url=location, status=200, body=body)
    if dry_run:
        info = {"alias": alias, **_parse(location, fetched, all_languages)[1], "sha256": sha256_hex(body)}
    else:
        info = _ingest(store, alias, location, fetched, "add" if not existing else "replace",
                       added_at=existing.added_at if existing else None, all_languages=all_languages,
                       extra={**extra, "crawl": _crawl_meta(location, result, records, limits)})
    info.update(extra)
    info["crawl"] = _crawl_summary(result)
    info["elapsedMs"] = round((time.perf_counter() - started) * 1000, 1)
    counts = f"({len(result.pages):,} pages, {info['headings']:,} headings, {info['lines']:,} lines)"
    how = "sitemap" if result.mode == "sitemap" else "links"
    if dry_run:
        info["dryRun"] = True
        info["message"] = f"Dry run: would add {alias} {counts} by crawling {location} ({how}); nothing was written"
    else:
        info["message"] = f"Added {alias} {counts} by crawling {location} ({how}) in {info['elapsedMs']:.0f}ms"
    info["message"] += _crawl_warnings(result)
    return info


def _crawl_warnings(result: Any, shown: int = 10) -> str:
    """The message's tail listing a crawl's warnings (the first ``shown``; all are in crawl.warnings)."""
    n = len(result.warnings) + result.more_warnings
    if not n:
        return ""
    more = f"\n  ... and {n - shown} more (crawl.warnings in --json)" if n > shown else ""
    return (f"; {n} warning{'s' if n != 1 else ''}:\n" + "\n".join(f"  - {w}" for w in result.warnings[:shown])
            + more)


def _refresh_crawl(store: Store, row: SourceRow, options: dict[str, Any], *, max_bytes: int, timeout: float,
                   progress: Progress | None, guard: Guard | None, all_languages: bool, problems: list[str],
                   extra: dict[str, Any]) -> dict[str, Any]:
    """`blz update` of a crawled source: the site is discovered again, each known page asked for with
    its ETag / Last-Modified (a 304 keeps the stored page), new pages fetched, gone ones dropped."""
    from cairn_servers.blz.crawl import Crawler, Limits

    meta = options["crawl"]
    kept_limits = meta.get("limits", {})
    limits = Limits(max_pages=int(kept_limits.get("maxPages", Limits.max_pages)),
                    max_depth=int(kept_limits.get("crawlDepth", Limits.max_depth)),
                    delay=None if kept_limits.get("crawlDelay") is None else float(kept_limits["crawlDelay"]),
                    page_bytes=int(kept_limits.get("maxPageBytes", Limits.page_bytes)),
                    total_bytes=max_bytes, timeout=timeout)
    lines: list[str] | None = None

    def stored_text(record: dict[str, Any]) -> str | None:
        nonlocal lines
        if lines is None:
            try:
                data = store.file_path(row).read_bytes()
            except OSError:
                return None
            if sha256_hex(data) != row.sha256:
                return None
            lines = data.decode("utf-8", "replace").split("\n")
        first, end = record.get("lines", [0, 0])
        return "\n".join(lines[int(first):int(end)])

    # a damaged source, or a change of languages, is fetched whole (a 304 would keep the damage)
    stored = {} if problems else {str(r["url"]): r for r in meta.get("pages", []) if isinstance(r, dict)}
    result = Crawler(str(meta["start"]), limits, guard=guard, progress=progress, stored=stored,
                     stored_text=stored_text).run()
    summary = _crawl_summary(result)
    if not result.pages:
        said = "; ".join(result.warnings[:5]) or "no page was found"
        raise NotFound(f"Crawling {meta['start']} again gave no pages ({said}); the stored copy is kept.")
    body, records = result.body()
    if sha256_hex(body) == row.sha256 and not problems and all_languages == bool(options.get("allLanguages")):
        store.touch(row.alias, etag=None, last_modified=None,
                    detail=f"crawl: {result.kept} pages not modified, {result.changed} fetched, same content")
        store.tidy(row)
        return {"alias": row.alias, "status": "unchanged", "url": row.url, "crawl": summary,
                "reason": f"same content ({result.kept} pages not modified (304), {result.changed} fetched)"}
    detail = "repaired: " + "; ".join(problems) if problems else ""
    fetched = fetching.FetchResult(url=row.url, status=200, body=body)
    info = _ingest(store, row.alias, row.url, fetched, "update", added_at=row.added_at, detail=detail,
                   all_languages=all_languages,
                   extra={**extra, "crawl": _crawl_meta(str(meta["start"]), result, records, limits)})
    info["status"] = "repaired" if problems else "updated"
    info["crawl"] = summary
    info["reason"] = "; ".join(problems) if problems else (
        f"{result.changed} pages fetched, {result.kept} not modified (304)")
    return info


def _claim(store: Store, alias: str, extra: dict[str, Any], force: bool) -> tuple[str, SourceRow | None]:
    """``alias`` checked, with its source if one is installed (a Conflict unless ``force``), and its
    other names checked against the other sources'."""
    alias = check_alias(alias)
    existing = store.source(alias)
    _check_names(store, alias, extra.get("aliases", []))
    if existing and not force:
        raise Conflict(f"Source {alias!r} already exists. Use --force to replace it, or "
                       f"`blz update {alias}` to refresh it.")
    return alias, existing


def _check_names(store: Store, alias: str, names: list[str]) -> None:
    """Conflict when ``alias`` is another source's other name, or one of ``names`` (its other names)
    names another source."""
    others = store.other_names()
    owner = others.get(alias)
    if owner is not None and owner != alias:
        raise Conflict(f"{alias!r} is another name of {owner!r}. Pick another alias, or use {owner!r}.")
    installed = {r.alias for r in store.sources()}
    for name in names:
        if name == alias:
            raise InvalidInput(f"--alias {name} is the source's own alias; give other names.",
                               details={"parameter": "aliases"})
        taken = name if name in installed else others.get(name)
        if taken is not None and taken != alias:
            raise Conflict(f"{name!r} already names the source {taken!r}; pick another name for --alias.")


def update(store: Store, alias: str, *, max_bytes: int = fetching.DEFAULT_MAX_BYTES,
           timeout: float = fetching.DEFAULT_TIMEOUT, progress: Progress | None = None,
           all_languages: bool | None = None, guard: Guard | None = None) -> dict[str, Any]:
    """Refresh one source with a conditional request; a 304 or identical bytes change nothing.

    The stored file and index are checked first (as `blz validate` does). If either is damaged, the
    request is unconditional and the source is written and indexed again even when its content is
    unchanged upstream: status ``repaired``. This is the fix `blz validate` suggests.
    ``all_languages`` (None: as chosen when the source was added) changes whether pages in other
    languages are indexed; a change re-indexes the source even when its content is unchanged.
    ``guard`` (an agent's, as for :func:`add`) limits which files and addresses the refresh reads."""
    from cairn_servers.blz.service import source_problems

    alias = check_alias(alias)
    row = store.source(alias)
    if row is None:
        raise NotFound(f"No source named {alias!r}. See `blz list`, or add it with `blz add {alias} URL`.")
    options = store.options(alias)
    kept = bool(options.get("allLanguages"))
    extra = {k: options[k] for k in KEPT if k in options}
    if guard is not None:  # the stored URL may be one the user added: an agent is held to its own limits
        check_agent_location(row.url, True, guard=guard)
    if all_languages is None:
        all_languages = kept
    problems = source_problems(store, row)
    if "crawl" in options and isinstance(options["crawl"], dict):
        return _refresh_crawl(store, row, options, max_bytes=max_bytes, timeout=timeout, progress=progress,
                              guard=guard, all_languages=all_languages, problems=problems, extra=extra)
    if problems or all_languages != kept:  # a 304 would keep the damage: ask for the content itself
        result = fetching.fetch(row.url, max_bytes=max_bytes, timeout=timeout, progress=_in_bytes(progress),
                                guard=guard)
    else:
        result = fetching.fetch(row.url, etag=row.etag, last_modified=row.last_modified,
                                max_bytes=max_bytes, timeout=timeout, progress=_in_bytes(progress), guard=guard)
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
                   all_languages=all_languages, extra=extra)
    info["status"] = "repaired" if problems else "updated"
    if problems:
        info["reason"] = "; ".join(problems)
    elif all_languages != kept:
        info["reason"] = "indexed again with " + ("all languages" if all_languages else "English pages only")
    return info


def _parse(url: str, result: fetching.FetchResult,
           all_languages: bool) -> tuple[llmstxt.Document, dict[str, Any]]:
    """The fetched file parsed, and what adding it reports: url, title, lines, headings, sections,
    bytes, the lines and languages left out. Writes nothing."""
    body = result.body or b""
    if b"\x00" in body[:8192]:
        raise InvalidInput(f"{url} looks binary (it contains NUL bytes), not an llms.txt text file.")
    doc = llmstxt.parse_lines(llmstxt.decode_lines(body), all_languages=all_languages)
    languages: dict[str, int] = {}
    for _start, _end, lang in doc.skipped:
        languages[lang] = languages.get(lang, 0) + 1
    return doc, {"url": url, "title": doc.title, "lines": len(doc.lines), "headings": len(doc.headings),
                 "sections": len(doc.sections), "bytes": len(body), "skippedLines": doc.skipped_lines,
                 "skippedLanguages": languages}


def _ingest(store: Store, alias: str, url: str, result: fetching.FetchResult, action: str,
            added_at: str | None, detail: str = "", all_languages: bool = False,
            extra: dict[str, Any] | None = None) -> dict[str, Any]:
    body = result.body or b""
    doc, report = _parse(url, result, all_languages)
    languages = report["skippedLanguages"]
    options: dict[str, Any] = {"allLanguages": all_languages, **(extra or {})}
    if doc.skipped:
        options.update(skippedLines=doc.skipped_lines, skippedPages=len(doc.skipped), skippedLanguages=languages)
    previous = store.source(alias)
    line_map, changes = (_since(store, previous, doc) if previous is not None and previous.sha256 != sha256_hex(body)
                         else (None, None))
    name, sha = store.write_file(alias, body)
    stamp = now_iso()
    row = SourceRow(alias=alias, url=url, title=doc.title, file=name, sha256=sha, bytes=len(body),
                    lines=len(doc.lines), headings=len(doc.headings), sections=len(doc.sections),
                    etag=result.etag, last_modified=result.last_modified, fetched_at=stamp,
                    added_at=added_at or stamp, checked_at=stamp)
    try:
        store.replace_source(row, doc, action, detail, options, line_map=line_map, changes=changes)
    except BaseException:
        current = store.source(alias)
        if current is None or current.file != name:  # the new file is not in use: drop it
            (store.root / "sources" / alias / name).unlink(missing_ok=True)
        raise
    return {"alias": alias, "url": url, "title": doc.title, "lines": row.lines, "headings": row.headings,
            "sections": row.sections, "bytes": row.bytes, "sha256": sha,
            "skippedLines": doc.skipped_lines, "skippedLanguages": languages}


def _since(store: Store, old: SourceRow, doc: llmstxt.Document) -> tuple[bytes | None, dict[str, Any] | None]:
    """The line map (encoded) and the sections added, removed and changed from the stored version of
    ``old`` to ``doc``; (None, None) when the stored file is gone or damaged (nothing to compare)."""
    from cairn_servers.blz.citation import section_anchors
    from cairn_servers.blz.versions import line_map, section_changes

    try:
        data = store.file_path(old).read_bytes()
    except OSError:
        return None, None
    if sha256_hex(data) != old.sha256:
        return None, None
    before = llmstxt.decode_lines(data)
    new_heads: list[tuple[int, str, list[str]]] = []
    for s, anchor in zip(doc.sections, section_anchors([(bool(s.heading), s.path) for s in doc.sections])):
        if anchor and (not new_heads or new_heads[-1][1] != anchor):
            new_heads.append((s.start, anchor, list(s.path)))
    old_heads = [(first, anchor, path) for first, _last, anchor, path, _h in store.anchored(old.alias)]
    return (line_map(before, doc.lines).encode(),
            section_changes(before, old_heads, doc.lines, new_heads))


# -- several at once: `blz add --manifest FILE` -----------------------------------------------------

# Keys of a manifest entry: what to add, and per-entry options.
MANIFEST_KEYS = frozenset({"alias", "url", "path", "exact", "allLanguages", "tags", "category", "aliases",
                           "refreshHours"})
# Upstream BLZ's descriptive keys: accepted (so its manifests load) and not used.
_UPSTREAM_KEYS = frozenset({"name", "description", "notes", "_notes"})


MAX_MANIFEST_BYTES = 4 << 20  # a manifest of thousands of sources is a few hundred KB


def _read_manifest_file(file: Path, shown: str) -> bytes:
    """The bytes of a regular file of at most MAX_MANIFEST_BYTES. Opened without blocking: a FIFO
    (which would wait for a writer forever) or a device is refused at once."""
    import stat

    fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(shown)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidInput(f"{shown} is not a regular file. Give the manifest's TOML file.")
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > MAX_MANIFEST_BYTES:
                raise InvalidInput(f"{shown} is over {MAX_MANIFEST_BYTES >> 20} MiB; a manifest lists sources "
                                   "in a few KB. Check the path.")
            chunks.append(chunk)
    finally:
        os.close(fd)


def read_manifest(path: str) -> tuple[Path, list[Any]]:
    """``(the manifest's folder, its [[source]] entries)`` from a TOML file (upstream BLZ's format:
    an array of tables ``[[source]]``, each with ``alias`` and ``url`` or ``path``). The file as a
    whole must parse; the entries are checked one by one when they are added."""
    import tomllib

    file = Path(path).expanduser()
    try:
        text = _read_manifest_file(file, path).decode("utf-8")
        data = tomllib.loads(text)
    except FileNotFoundError:
        raise NotFound(f"No manifest at {path}. Check the path.") from None
    except IsADirectoryError:
        raise InvalidInput(f"{path} is a folder. Give the manifest's TOML file.") from None
    except UnicodeDecodeError:
        raise InvalidInput(f"{path} is not UTF-8 text. A manifest is a TOML file.") from None
    except OSError as exc:
        raise InvalidInput(f"Cannot read the manifest {path}: {exc.strerror or exc}.") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{path} is not valid TOML: {exc}.") from None
    except RecursionError:  # tomllib recurses once per level of nested arrays or inline tables
        raise InvalidInput(f"{path} nests arrays or tables too deeply to be a manifest. A manifest is a "
                           "list of [[source]] tables.") from None
    entries = data.get("source")
    if not isinstance(entries, list) or not entries:
        raise InvalidInput(f"{path} lists no sources. Write one [[source]] table per source, e.g.\n"
                           '[[source]]\nalias = "bun"\n\n[[source]]\nalias = "mine"\nurl = "https://example.com/llms.txt"')
    return file.resolve().parent, entries


def _manifest_entry(entry: Any, n: int, folder: Path) -> tuple[str, str | None, bool, bool, dict[str, Any]]:
    """``(alias, location or None, exact, allLanguages, settings)`` of entry ``n`` (1-based), or
    InvalidInput. ``settings``: the entry's tags, category, aliases and refreshHours, as given."""
    if not isinstance(entry, dict):
        raise InvalidInput(f"source #{n} is not a table: write it as [[source]] with alias = \"...\".")
    unknown = sorted(set(entry) - MANIFEST_KEYS - _UPSTREAM_KEYS)
    if unknown:
        raise InvalidInput(f"source #{n}: unknown key {unknown[0]!r}; a source takes alias, url or path, "
                           "exact, allLanguages, tags, category, aliases, refreshHours.")
    alias = entry.get("alias")
    if not isinstance(alias, str) or not alias.strip():
        raise InvalidInput(f"source #{n} has no alias: give alias = \"name\" (a registry name or a domain "
                           "alone, or with url or path).")
    for key in ("url", "path"):
        if key in entry and (not isinstance(entry[key], str) or not entry[key].strip()):
            raise InvalidInput(f"source {alias!r}: {key} must be a non-empty string.")
    for key in ("exact", "allLanguages"):
        if key in entry and not isinstance(entry[key], bool):
            raise InvalidInput(f"source {alias!r}: {key} must be true or false.")
    for key in ("tags", "aliases"):
        if key in entry and not (isinstance(entry[key], list) and all(isinstance(v, str) for v in entry[key])):
            raise InvalidInput(f"source {alias!r}: {key} must be a list of names, e.g. {key} = [\"web\"].")
    if "category" in entry and not isinstance(entry["category"], str):
        raise InvalidInput(f"source {alias!r}: category must be a string.")
    if "refreshHours" in entry and (not isinstance(entry["refreshHours"], int) or isinstance(entry["refreshHours"], bool)):
        raise InvalidInput(f"source {alias!r}: refreshHours must be a whole number of hours.")
    if "url" in entry and "path" in entry:
        raise InvalidInput(f"source {alias!r} has both url and path: give one.")
    location: str | None = entry.get("url") or entry.get("path")
    if location is not None and not fetching.is_url(location) and not _SCHEME.match(location):
        location = str(folder / Path(location).expanduser())  # a relative path is the manifest's neighbour
    given = {k: entry[k] for k in ("tags", "category", "aliases", "refreshHours") if k in entry}
    return alias, location, bool(entry.get("exact")), bool(entry.get("allLanguages")), given


def add_manifest(store: Store, path: str, *, force: bool = False, exact: bool = False,
                 all_languages: bool = False, dry_run: bool = False, only: list[str] | None = None,
                 on_error: Callable[[str, CairnError], None] | None = None, tags: list[str] | None = None,
                 category: str | None = None, refresh_hours: int | None = None, aliases: list[str] | None = None,
                 **net: Any) -> dict[str, Any]:
    """Add every source a manifest lists (:func:`read_manifest`), each as :func:`add` would, in
    file order. One that fails (a bad entry, a fetch, a conflict) is reported through ``on_error``
    and in the results, and the others are still added; ``failed`` counts them. The options given
    apply to every entry (``exact`` and ``allLanguages`` may also be set per entry). ``only``
    (aliases, each item possibly comma-separated) keeps the entries of those aliases."""
    if aliases:
        raise InvalidInput("--alias names one source; with a manifest, add the other names one source at a time.",
                           details={"parameter": "aliases"})
    settings(tags, category, refresh_hours)  # checked once, before anything is fetched
    folder, entries = read_manifest(path)
    if only is not None:
        wanted = {a.strip().lower() for item in only for a in item.split(",") if a.strip()}
        named = [str(e["alias"]) for e in entries if isinstance(e, dict) and isinstance(e.get("alias"), str)]
        entries = [e for e in entries if isinstance(e, dict) and str(e.get("alias", "")).strip().lower() in wanted]
        if not entries:
            raise InvalidInput(f"No entry of {path} has an alias in --only {','.join(sorted(wanted))}. "
                               f"Its aliases: {', '.join(named) or 'none'}.")
    results: list[dict[str, Any]] = []
    seen: set[str] = set()
    for n, entry in enumerate(entries, 1):
        name = entry.get("alias") if isinstance(entry, dict) and isinstance(entry.get("alias"), str) else f"#{n}"
        try:
            alias, location, entry_exact, entry_all, own = _manifest_entry(entry, n, folder)
            key = alias.strip().lower()
            if key in seen:
                raise InvalidInput(f"{alias!r} appears twice in the manifest; the first one is used.")
            seen.add(key)
            info = add(store, alias, location, force=force, exact=exact or entry_exact, dry_run=dry_run,
                       all_languages=all_languages or entry_all,
                       # the flags' tags and the entry's; the entry's category and refresh interval first
                       tags=[*(tags or []), *own.get("tags", [])] if tags or "tags" in own else None,
                       category=own.get("category", category), aliases=own.get("aliases"),
                       refresh_hours=own.get("refreshHours", refresh_hours), **net)
        except CairnError as exc:
            if on_error is not None:
                on_error(str(name), exc)
            results.append({"alias": name, "status": "failed", "error": exc.message, "code": exc.code})
            continue
        info["status"] = "dry-run" if dry_run else "added"
        results.append(info)
    failed = sum(r["status"] == "failed" for r in results)
    done = len(results) - failed
    verb = "would add" if dry_run else "added"
    message = f"{path}: {verb} {done} of {len(results)} sources" + (f"; {failed} failed" if failed else "")
    if dry_run:
        message += "; nothing was written"
    return {"manifest": path, "dryRun": dry_run, "added": 0 if dry_run else done, "failed": failed,
            "message": message, "results": results}


def remove(store: Store, alias: str) -> dict[str, Any]:
    alias = check_alias(alias)
    if store.source(alias) is None:
        raise NotFound(f"No source named {alias!r}. See `blz list`.")
    store.delete_source(alias)
    return {"alias": alias, "removed": True}
