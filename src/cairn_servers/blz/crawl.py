"""Build a source from a documentation site that publishes no llms.txt: ``blz add NAME --crawl URL``.

Pages are found through the site's sitemaps (``Sitemap:`` lines of robots.txt, else /sitemap.xml;
sitemap index files are followed, nested), else by following same-site links from the start URL,
breadth first, to a depth cap. Only pages under the start URL's folder, on its scheme, host and port,
are requested; robots.txt (user agent ``blz``) is honoured. Each HTML page becomes Markdown
(markdownify, with navigation, headers, footers and scripts left out) and the source is one page per
``# `` heading, its title, with the page URL on the line under it, so that search, toc and citations
work as for an llms.txt.

Every request (robots.txt, sitemaps, pages, each redirect hop) goes through a guard: for an agent
the MCP guard, for the command line one that allows the start URL's host and public addresses only.
Redirects are followed by hand (at most :data:`MAX_REDIRECTS` hops, same site only), so a loop ends
with a warning. ``refresh`` sends each page's ETag / Last-Modified back: a 304 keeps the stored page.
"""

from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import urldefrag, urljoin, urlsplit

from cairn_servers.blz.limits import CRAWL_MAX_DELAY, CRAWL_MAX_DEPTH, CRAWL_MAX_PAGES
from cairn_servers.core.errors import CairnError, InvalidInput, NetworkError, Timeout

if TYPE_CHECKING:
    import httpx

    from cairn_servers.core.guard import Guard

# (done, total or None, unit): "bytes" of a download, "pages" of a crawl (tried / known so far)
Progress = Callable[[int, int | None, str], None]

DEFAULT_MAX_PAGES = 200
MAX_PAGES = CRAWL_MAX_PAGES
DEFAULT_DEPTH = 3
MAX_DEPTH = CRAWL_MAX_DEPTH
DEFAULT_DELAY = 0.2  # seconds between two requests when neither the user nor robots.txt (Crawl-delay) says
MAX_CRAWL_DELAY = CRAWL_MAX_DELAY  # a larger Crawl-delay is capped (and said)
DEFAULT_PAGE_BYTES = 5 * 1024 * 1024
MAX_SITEMAPS = 50  # sitemap files read at most (index files included)
MAX_SITEMAP_BYTES = 50 * 1024 * 1024  # the sitemaps.org limit for one file
MAX_REDIRECTS = 5
MAX_WARNINGS = 100  # warnings listed in the result; the rest are counted
AGENT = "blz"  # the robots.txt user agent
USER_AGENT = "blz/0.1 (cairn; +https://github.com/cairn) crawler"
_HTML = ("text/html", "application/xhtml+xml")
_TEXT = ("text/plain", "text/markdown", "text/x-markdown")
# Links to these are not pages: never requested when following links.
_NOT_PAGES = frozenset({"png", "jpg", "jpeg", "gif", "svg", "webp", "ico", "bmp", "avif", "pdf", "zip", "gz", "tgz",
                        "tar", "bz2", "xz", "7z", "dmg", "exe", "msi", "deb", "rpm", "whl", "jar", "css", "js", "mjs",
                        "map", "json", "xml", "rss", "atom", "woff", "woff2", "ttf", "otf", "eot", "mp3", "mp4",
                        "webm", "mov", "avi", "wav", "ogg"})


@dataclass
class Limits:
    max_pages: int = DEFAULT_MAX_PAGES  # page requests at most (each redirect hop counts)
    max_depth: int = DEFAULT_DEPTH  # link hops from the start URL (link discovery only)
    delay: float | None = None  # None: robots.txt's Crawl-delay, else DEFAULT_DELAY; given: at least this
    page_bytes: int = DEFAULT_PAGE_BYTES
    total_bytes: int = 64 * 1024 * 1024  # all pages together
    timeout: float = 30.0  # per request

    def check(self) -> None:
        if not 1 <= self.max_pages <= MAX_PAGES:
            raise InvalidInput(f"maxPages must be between 1 and {MAX_PAGES}, not {self.max_pages}.",
                               details={"parameter": "maxPages"})
        if not 0 <= self.max_depth <= MAX_DEPTH:
            raise InvalidInput(f"crawlDepth must be between 0 and {MAX_DEPTH}, not {self.max_depth}.",
                               details={"parameter": "crawlDepth"})
        if self.delay is not None and not 0 <= self.delay <= MAX_CRAWL_DELAY:
            raise InvalidInput(f"--crawl-delay must be between 0 and {MAX_CRAWL_DELAY:g} seconds, not {self.delay:g}.",
                               details={"parameter": "crawlDelay"})
        if self.page_bytes < 1 or self.total_bytes < 1 or self.timeout <= 0:
            raise InvalidInput("Size caps and the timeout must be positive.")


@dataclass
class Page:
    url: str
    title: str
    text: str  # the page's Markdown body (without its title line)
    depth: int
    etag: str | None = None
    last_modified: str | None = None
    kept: bool = False  # a 304: the stored text is reused


@dataclass
class Result:
    pages: list[Page]
    mode: str  # "sitemap" or "links"
    requests: int
    warnings: list[str] = field(default_factory=list)
    more_warnings: int = 0
    changed: int = 0  # pages fetched with a body (refresh: new or changed)
    kept: int = 0  # pages answered 304

    def body(self) -> tuple[bytes, list[dict[str, Any]]]:
        """The source file (one ``# title`` page after another, each with its URL under the title) and
        each page's stored record: url, etag, lastModified, depth and its lines ``[first, end)``
        (0-based) in the file, which a refresh uses to keep a page answered 304."""
        out: list[str] = []
        records: list[dict[str, Any]] = []
        line = 0
        for page in self.pages:
            block = f"# {page.title}\n\n{page.url}\n\n{page.text.strip()}\n\n"
            n = block.count("\n")
            records.append({"url": page.url, "etag": page.etag, "lastModified": page.last_modified,
                            "depth": page.depth, "lines": [line, line + n]})
            out.append(block)
            line += n
        return "".join(out).encode("utf-8"), records


def scope_of(start: str) -> tuple[str, str]:
    """``(origin, folder)`` of a start URL: only URLs on that origin whose path starts with the
    folder are crawled (``https://x.dev/docs/intro`` -> ``("https://x.dev", "/docs/")``)."""
    parts = urlsplit(start)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        shown = start if len(start) <= 100 else start[:97] + "..."
        raise InvalidInput(f"--crawl takes an http(s) URL of a site, not {shown!r}: "
                           "blz add NAME --crawl https://docs.example.com/")
    path = parts.path or "/"
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}", path[: path.rfind("/") + 1]


def cli_guard(start: str) -> Guard:
    """The command line's guard for a crawl: the start URL's host (whatever it is: the user named it)
    and public internet addresses. A page or sitemap of that site cannot point the crawler at a
    private address of the user's network: other hosts are never crawled, and a redirect can only
    stay on the site."""
    from cairn_servers.core.guard import Guard

    host = (urlsplit(start).hostname or "").lower().rstrip(".")
    return Guard(allow_names=frozenset({host}), public=True, hosts_env="the start URL of the crawl",
                 hint="Crawl that host itself: blz add NAME --crawl URL.")


@dataclass
class Robots:
    """A robots.txt as RFC 9309 reads it, for the user agent ``blz``: the rules of the groups naming
    ``blz`` (else of those naming ``*``; none: everything allowed), with ``*`` and ``$`` in paths; the
    longest matching rule wins, and Allow wins a tie. /robots.txt itself is always allowed. Also the
    group's Crawl-delay (not in the RFC, widely used) and every Sitemap line."""

    rules: list[tuple[bool, str]] = field(default_factory=list)  # (allow, path pattern)
    delay: float | None = None
    sitemaps: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str, agent: str = AGENT) -> Robots:
        groups: list[tuple[list[str], list[tuple[bool, str]], list[float]]] = []
        sitemaps: list[str] = []
        open_group = False  # user-agent lines still being collected for the last group
        for raw in text.splitlines():
            line = raw.split("#", 1)[0].strip()
            key, sep, value = line.partition(":")
            if not sep:
                continue
            key, value = key.strip().lower(), value.strip()
            if key == "sitemap":
                if value:
                    sitemaps.append(value)
            elif key == "user-agent":
                if not open_group:
                    groups.append(([], [], []))
                    open_group = True
                groups[-1][0].append(value.lower())
            elif groups and key in ("allow", "disallow", "crawl-delay"):
                open_group = False
                if key == "crawl-delay":
                    try:
                        groups[-1][2].append(float(value))
                    except ValueError:
                        pass
                elif value:  # an empty Disallow allows everything: no rule
                    groups[-1][1].append((key == "allow", value))
        name = agent.lower()
        chosen = [g for g in groups if name in g[0]] or [g for g in groups if "*" in g[0]]
        delays = [d for g in chosen for d in g[2]]
        return cls([rule for g in chosen for rule in g[1]], max(delays) if delays else None, sitemaps)

    def allowed(self, url: str) -> bool:
        from urllib.parse import unquote

        parts = urlsplit(url)
        path = unquote((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
        if path == "/robots.txt":
            return True
        best: tuple[int, bool] | None = None
        for allow, pattern in self.rules:
            if _robots_pattern(pattern).match(path):
                key = (len(pattern), allow)
                if best is None or key > best:
                    best = key
        return best is None or best[1]


@functools.lru_cache(maxsize=1024)
def _robots_pattern(pattern: str) -> re.Pattern[str]:
    """A robots.txt path pattern as a regular expression matched at the start of a path: ``*`` any
    characters, a final ``$`` the end of the path."""
    from urllib.parse import unquote

    anchored = pattern.endswith("$")
    body = unquote(pattern[:-1] if anchored else pattern)
    return re.compile(".*".join(re.escape(piece) for piece in body.split("*")) + ("$" if anchored else ""), re.S)


class Crawler:
    """One crawl (or refresh) of one site; :meth:`run` does the work."""

    def __init__(self, start: str, limits: Limits, *, guard: Guard | None = None,
                 progress: Progress | None = None, stored: dict[str, dict[str, Any]] | None = None,
                 stored_text: Callable[[dict[str, Any]], str | None] | None = None) -> None:
        limits.check()
        self.start = urldefrag(start)[0]
        self.origin, self.folder = scope_of(self.start)
        self.limits = limits
        self.guard = guard or cli_guard(self.start)
        self.progress = progress
        self.stored = stored or {}  # url -> its stored record (refresh)
        self.stored_text = stored_text
        self.warnings: list[str] = []
        self.more_warnings = 0
        self.requests = 0  # every HTTP request made
        self.page_requests = 0  # those for pages (each redirect hop included): at most max_pages
        self.total = 0
        self.delay = DEFAULT_DELAY if limits.delay is None else limits.delay
        self._last = 0.0
        self._client: httpx.Client | None = None
        self._robots: Robots | None = None

    # -- helpers ------------------------------------------------------------------------------

    def warn(self, text: str) -> None:
        if len(self.warnings) < MAX_WARNINGS:
            self.warnings.append(text)
        else:
            self.more_warnings += 1

    def in_scope(self, url: str) -> bool:
        return self.same_origin(url) and (urlsplit(url).path or "/").startswith(self.folder)

    def same_origin(self, url: str) -> bool:
        parts = urlsplit(url)
        return f"{parts.scheme.lower()}://{parts.netloc.lower()}" == self.origin

    def allowed(self, url: str) -> bool:
        return self._robots is None or self._robots.allowed(url)

    def _wait(self) -> None:
        pause = self._last + self.delay - time.monotonic()
        if pause > 0:
            time.sleep(pause)

    def _get(self, url: str, *, limit: int, page: bool, headers: dict[str, str] | None = None,
             strict: bool = False) -> tuple[str, int, bytes | None, Any] | None:
        """GET ``url``, following same-site redirects by hand: ``(final URL, status, body or None,
        response headers)``, or None (with a warning) when it cannot be had: a redirect loop or off
        the site, robots.txt, the page cap, a refused address or a network failure. ``strict``: a
        refused address or a network failure is raised instead (the first request of a crawl)."""
        import httpx

        assert self._client is not None
        first = url
        for hop in range(MAX_REDIRECTS + 1):
            if page:
                if self.page_requests >= self.limits.max_pages:
                    if hop:
                        self.warn(f"{first}: the page cap ({self.limits.max_pages} requests) was reached while "
                                  f"following its redirects; skipped")
                    return None
                self.page_requests += 1
            self._wait()
            self.requests += 1
            try:
                with self._client.stream("GET", url, headers=headers or {}) as resp:
                    self._last = time.monotonic()
                    if resp.is_redirect and resp.headers.get("location"):
                        target = urldefrag(urljoin(url, resp.headers["location"]))[0]
                        if not (self.in_scope(target) if page else self.same_origin(target)):
                            where = f"{self.origin}{self.folder}" if page else self.origin
                            self.warn(f"{first}: redirects outside {where} to {target}; not followed")
                            return None
                        if page and not self.allowed(target):
                            self.warn(f"{first}: redirects to {target}, which robots.txt excludes; not followed")
                            return None
                        url = target
                        continue
                    if resp.status_code == 304 or resp.status_code >= 400:
                        return str(resp.url), resp.status_code, None, resp.headers
                    body = self._read(resp, url, limit)
                    return (str(resp.url), resp.status_code, body, resp.headers) if body is not None else None
            except httpx.TimeoutException:
                if strict:
                    raise Timeout(f"{url} did not answer within {self.limits.timeout:g} s. Retry, or raise the "
                                  "timeout (--timeout).") from None
                self.warn(f"{url}: no answer within {self.limits.timeout:g} s; skipped")
                return None
            except httpx.HTTPError as exc:
                if strict:
                    raise NetworkError(f"Cannot crawl {self.start}: {exc or type(exc).__name__}. Check the URL and "
                                       "your network connection.") from None
                self.warn(f"{url}: {exc or type(exc).__name__}; skipped")
                return None
            except CairnError as exc:  # the guard refused the address
                if strict:
                    raise
                self.warn(f"{url}: {exc.message}")
                return None
        self.warn(f"{first}: more than {MAX_REDIRECTS} redirects (a redirect loop?); skipped")
        return None

    def _read(self, resp: httpx.Response, url: str, limit: int) -> bytes | None:
        declared = resp.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            self.warn(f"{url}: {int(declared):,} bytes, over the {limit:,}-byte cap; skipped")
            return None
        chunks: list[bytes] = []
        got = 0
        deadline = time.monotonic() + self.limits.timeout
        for chunk in resp.iter_bytes():
            got += len(chunk)
            if got > limit:
                self.warn(f"{url}: over the {limit:,}-byte cap; skipped")
                return None
            if time.monotonic() > deadline:
                self.warn(f"{url}: took longer than {self.limits.timeout:g} s; skipped")
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    # -- discovery ----------------------------------------------------------------------------

    def _read_robots(self) -> list[str]:
        """Read robots.txt (a missing one allows everything); its Sitemap: URLs on this site."""
        got = self._get(self.origin + "/robots.txt", limit=512 * 1024, page=False, strict=True)
        if got is None:
            raise NetworkError(f"Cannot crawl {self.start}: {self.warnings[-1] if self.warnings else 'no answer'}. "
                               "Check the URL and your network connection.")
        _url, status, body, _headers = got
        if status >= 500:
            raise NetworkError(f"{self.origin}/robots.txt answered HTTP {status}: the site does not say what may be "
                               "crawled now. Retry later.")
        if status >= 400 or body is None:  # no robots.txt: everything is allowed
            return []
        parser = Robots.parse(body.decode("utf-8", "replace"))
        self._robots = parser
        asked = parser.delay
        if asked is not None:
            wanted = float(asked)
            if wanted > MAX_CRAWL_DELAY:
                self.warn(f"robots.txt asks for {wanted:g} s between requests; {MAX_CRAWL_DELAY:g} s used")
            wanted = min(wanted, MAX_CRAWL_DELAY)
            # the site's own word replaces the default; a delay the user gave is kept when longer
            self.delay = wanted if self.limits.delay is None else max(self.limits.delay, wanted)
        maps = [urldefrag(urljoin(self.origin + "/", u))[0] for u in parser.sitemaps]
        for u in maps:
            if not self.same_origin(u):
                self.warn(f"robots.txt lists a sitemap on another site ({u}); not read")
        return [u for u in maps if self.same_origin(u)]

    def _sitemap_pages(self, listed: list[str]) -> list[str]:
        """Page URLs from the sitemaps (index files followed), in file order, deduplicated."""
        import xml.etree.ElementTree as ET

        queue = list(dict.fromkeys(listed or [self.origin + "/sitemap.xml"]))
        seen: set[str] = set()
        pages: dict[str, None] = {}
        while queue:
            url = queue.pop(0)
            if url in seen:
                continue
            if len(seen) >= MAX_SITEMAPS:
                self.warn(f"more than {MAX_SITEMAPS} sitemap files; the rest were not read")
                break
            seen.add(url)
            got = self._get(url, limit=MAX_SITEMAP_BYTES, page=False)
            if got is None:
                continue
            _final, status, body, _headers = got
            if status >= 400 or body is None:
                if listed:  # robots.txt named it: say it is missing (a missing /sitemap.xml is usual)
                    self.warn(f"{url}: HTTP {status}; sitemap not read")
                continue
            if body[:2] == b"\x1f\x8b":  # sitemap.xml.gz
                body = _gunzip(body, MAX_SITEMAP_BYTES)
                if body is None:
                    self.warn(f"{url}: a damaged or over {MAX_SITEMAP_BYTES >> 20} MiB gzip sitemap; not read")
                    continue
            head = body[:4096].lower()
            if b"<!doctype" in head or b"<!entity" in body.lower():  # no entity expansion, ever
                self.warn(f"{url}: a sitemap with a DTD or entities; not read")
                continue
            try:
                root = ET.fromstring(body)
            except ET.ParseError as exc:
                self.warn(f"{url}: not a valid sitemap ({exc}); not read")
                continue
            kind = root.tag.rsplit("}", 1)[-1]
            for loc in root.iter():
                text = (loc.text or "").strip()
                if loc.tag.rsplit("}", 1)[-1] != "loc" or not text:
                    continue
                target = urldefrag(urljoin(url, text))[0]
                if kind == "sitemapindex":
                    if self.same_origin(target):
                        queue.append(target)
                    else:
                        self.warn(f"{url}: lists a sitemap on another site ({target}); not read")
                else:
                    pages.setdefault(target, None)
        return list(pages)

    # -- pages --------------------------------------------------------------------------------

    def _fetch_page(self, url: str, depth: int) -> tuple[Page | None, list[str]]:
        """A page (or None, with a warning) and the in-scope links it holds."""
        record = self.stored.get(url)
        headers: dict[str, str] = {}
        if record is not None:
            if record.get("etag"):
                headers["If-None-Match"] = str(record["etag"])
            if record.get("lastModified"):
                headers["If-Modified-Since"] = str(record["lastModified"])
        left = self.limits.total_bytes - self.total
        got = self._get(url, limit=min(self.limits.page_bytes, max(left, 0)), page=True, headers=headers)
        if got is None:
            return None, []
        final, status, body, resp_headers = got
        if status == 304 and record is not None and self.stored_text is not None:
            text = self.stored_text(record)
            if text is not None:
                title, _, rest = text.partition("\n")
                page = Page(url, title.removeprefix("# "), rest.split("\n", 3)[-1] if rest else "", depth,
                            resp_headers.get("etag") or record.get("etag"),
                            resp_headers.get("last-modified") or record.get("lastModified"), kept=True)
                return page, []  # its links: a refresh in link mode offers every stored page anyway
            headers = {}  # the stored copy is unreadable: ask for the page itself
            got = self._get(url, limit=self.limits.page_bytes, page=True)
            if got is None:
                return None, []
            final, status, body, resp_headers = got
        if status >= 400 or body is None:
            self.warn(f"{url}: HTTP {status}; skipped")
            return None, []
        self.total += len(body)
        declared = resp_headers.get("content-type") or "text/html"
        ctype = declared.split(";")[0].strip().lower()
        charset = next((p.split("=", 1)[1].strip().strip('"') for p in declared.split(";")[1:]
                        if p.strip().lower().startswith("charset=")), None)
        if ctype in _HTML:
            title, text, links = html_to_markdown(body, final, charset)
        elif ctype in _TEXT:
            title, text = markdown_page(body.decode(_codec(charset), "replace"))
            links = []
        else:
            self.warn(f"{url}: {ctype}, not a page of text; skipped")
            return None, []
        title = " ".join(title.split()) or urlsplit(final).path or final
        if not text.strip():
            self.warn(f"{url}: no text in the page (one drawn by JavaScript?); skipped")
            return None, [u for u in links if self.in_scope(u)]
        page = Page(url, title, text, depth, resp_headers.get("etag"), resp_headers.get("last-modified"))
        return page, [u for u in links if self.in_scope(u)]

    def run(self) -> Result:
        import httpx

        from cairn_servers.core.fetch import _guarded_transport

        timeout = httpx.Timeout(self.limits.timeout, connect=min(10.0, self.limits.timeout))
        self._client = httpx.Client(follow_redirects=False, timeout=timeout, trust_env=False,
                                    transport=_guarded_transport(self.guard), headers={"User-Agent": USER_AGENT})
        try:
            with self._client:
                return self._run()
        finally:
            self._client = None

    def _run(self) -> Result:
        listed = self._read_robots()
        found = self._sitemap_pages(listed)
        mode = "sitemap" if found else "links"
        queue: list[tuple[str, int]] = []
        seen: set[str] = set()
        excluded: list[str] = []

        def offer(url: str, depth: int) -> None:
            if url in seen:
                return
            seen.add(url)
            if not self.in_scope(url):
                self.warn(f"{url}: outside {self.origin}{self.folder}; not crawled")
            elif not self.allowed(url):
                excluded.append(url)
            elif depth and urlsplit(url).path.rsplit(".", 1)[-1].lower() in _NOT_PAGES:
                pass  # a linked image, archive, stylesheet...: not a page
            else:
                queue.append((url, depth))

        if found:
            for url in found:
                offer(url, 0)
        else:
            offer(self.start, 0)
            for url, record in self.stored.items():  # a refresh re-checks the pages it knows
                offer(url, int(record.get("depth", 0)))
        for url in excluded:
            self.warn(f"{url}: excluded by robots.txt; not requested")
        pages: list[Page] = []
        changed = kept = 0
        i = 0
        while i < len(queue):
            if self.page_requests >= self.limits.max_pages:
                self.warn(f"page cap ({self.limits.max_pages} requests) reached: {len(queue) - i} pages "
                          "not fetched (--max-pages raises it)")
                break
            if self.total >= self.limits.total_bytes:
                self.warn(f"total size cap ({self.limits.total_bytes:,} bytes) reached: {len(queue) - i} pages "
                          "not fetched (--max-bytes raises it)")
                break
            url, depth = queue[i]
            i += 1
            page, links = self._fetch_page(url, depth)
            if page is not None:
                pages.append(page)
                kept += page.kept
                changed += not page.kept
                if mode == "links" and depth < self.limits.max_depth:
                    before = len(excluded)
                    for link in links:
                        offer(link, depth + 1)
                    for url_ in excluded[before:]:
                        self.warn(f"{url_}: excluded by robots.txt; not requested")
            if self.progress:
                self.progress(i, len(queue), "pages")  # pages tried / pages known so far
        if self.progress and i < len(queue):
            self.progress(i, i, "pages")  # the stage ends here (the page cap may have stopped it early)
        return Result(pages, mode, self.requests, self.warnings, self.more_warnings, changed, kept)


def _gunzip(data: bytes, limit: int) -> bytes | None:
    """``data`` decompressed, or None when damaged or larger than ``limit`` (no gzip bomb)."""
    import zlib

    try:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = inflater.decompress(data, limit + 1)
    except zlib.error:
        return None
    return None if len(out) > limit or inflater.unconsumed_tail else out


def markdown_page(text: str) -> tuple[str, str]:
    """``(title, body)`` of a Markdown or text page: its first ``# `` line is the title; any other
    ``# `` line outside code fences goes one level down (the page's title is its only one)."""
    title = ""
    out: list[str] = []
    fence = ""
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith(("```", "~~~")):
            mark = stripped[:3]
            fence = "" if fence == mark else fence or mark
        elif not fence and line.startswith("# "):
            if not title:
                title = line[2:].strip()
                continue
            line = "#" + line
        out.append(line)
    return title, "\n".join(out)


def _codec(charset: str | None) -> str:
    import codecs

    try:
        return codecs.lookup(charset or "utf-8").name
    except LookupError:
        return "utf-8"


def html_to_markdown(body: bytes, url: str, charset: str | None = None) -> tuple[str, str, list[str]]:
    """``(title, Markdown, links)`` of an HTML page. The title is the first ``<h1>`` of the main
    content (else ``<title>``); the Markdown is the main content (``<main>``, ``[role=main]``,
    ``<article>``, else ``<body>``) without navigation, headers, footers, sidebars and scripts, its
    headings one level down when the page has more than one ``<h1>`` (the page's own title is the
    only ``# `` line). Links are absolute, without fragments, from the whole page (navigation too).
    ``charset``: the one the server declared (else the page's own ``<meta>``, else detected)."""
    from bs4 import BeautifulSoup
    from markdownify import MarkdownConverter

    soup = BeautifulSoup(body, "html.parser", from_encoding=_codec(charset) if charset else None)
    links: list[str] = []
    for a in soup.find_all("a", href=True):
        href = str(a.get("href") or "").strip()
        if href and not href.startswith(("mailto:", "javascript:", "tel:", "data:")):
            target = urldefrag(urljoin(url, href))[0]
            if urlsplit(target).scheme in ("http", "https"):
                links.append(target)
    head_title = soup.title.get_text(" ", strip=True) if soup.title else ""
    for tag in soup(["script", "style", "noscript", "template", "nav", "header", "footer", "aside", "form",
                     "iframe", "svg", "button"]):
        tag.decompose()
    main = soup.find("main") or soup.find(None, {"role": "main"}) or soup.find("article") or soup.body or soup
    title = ""
    first = main.find("h1")
    if first is not None:
        title = first.get_text(" ", strip=True)
        first.decompose()
    if not title:
        title = re.split(r"\s+[|\u2013\u2014-]\s+", head_title)[0] if head_title else ""
    if main.find("h1") is not None:  # more than one: every heading goes one level down
        for h in main.find_all(re.compile(r"^h[1-5]$")):
            h.name = f"h{int(h.name[1]) + 1}"

    def language(el: Any) -> str | None:
        code = el.find("code") or el
        for cls in (code.get("class") or []) + (el.get("class") or []):
            for prefix in ("language-", "lang-"):
                if cls.startswith(prefix):
                    return str(cls[len(prefix):])
        return None

    text = MarkdownConverter(heading_style="ATX", bullets="-", code_language_callback=language).convert_soup(main)
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    return title, text, list(dict.fromkeys(links))
