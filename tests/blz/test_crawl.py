"""`blz add NAME --crawl URL`: a static docs site (tests/blz/crawl_site) served on 127.0.0.1 by the test,
with robots.txt excluding /private/, a sitemap index nesting another index, a redirect loop, a 404
and links to another host. Every request the site gets is logged, and every connection and name
lookup the process makes during a crawl is recorded at the socket layer."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from cairn_servers.blz.cli import run
from cairn_servers.blz.crawl import Robots, html_to_markdown

from .conftest import blz, js

pytestmark = [pytest.mark.filterwarnings("ignore:.*(removed|deprecated) as of 2026"), pytest.mark.timeout(120)]

SITE = Path(__file__).parent / "crawl_site"
SITEMAP_PAGES = ["/", "/guide/install.html", "/guide/config.html", "/api/client.html", "/api/errors.html"]
TITLES = ["Widget documentation", "Installation", "Configuration", "Client API", "Errors"]


@dataclass
class Site:
    files: dict[str, bytes] = field(default_factory=dict)
    log: list[tuple[str, int]] = field(default_factory=list)  # (path, status answered)
    times: list[float] = field(default_factory=list)  # when each request arrived (time.monotonic)
    redirects: dict[str, str] = field(default_factory=lambda: {"/loop/a.html": "/loop/b.html",
                                                                "/loop/b.html": "/loop/a.html"})
    slow: dict[str, float] = field(default_factory=dict)  # path -> seconds to wait before answering
    port: int = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def pages(self) -> list[str]:
        """Paths requested, robots.txt and sitemaps left out."""
        return [p for p, _s in self.log if p != "/robots.txt" and not p.endswith(".xml")]


def _load(site: Site, sitemap: bool = True) -> None:
    for path in SITE.rglob("*"):
        if path.is_file():
            name = "/" + path.relative_to(SITE).as_posix()
            site.files["/" if name == "/index.html" else name] = path.read_bytes().replace(b"{BASE}", site.base.encode())
    if not sitemap:
        site.files = {k: v for k, v in site.files.items() if not k.endswith(".xml")}
        site.files["/robots.txt"] = b"User-agent: blz\nDisallow: /private/\n"


@pytest.fixture
def site() -> Iterator[Site]:
    state = Site()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            path = self.path
            state.times.append(time.monotonic())
            if path in state.redirects:
                state.log.append((path, 302))
                self.send_response(302)
                self.send_header("Location", state.redirects[path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if path in state.slow:
                time.sleep(state.slow[path])
            body = state.files.get(path)
            if body is None:
                state.log.append((path, 404))
                self.send_error(404)
                return
            tag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
            if self.headers.get("If-None-Match") == tag:
                state.log.append((path, 304))
                self.send_response(304)
                self.send_header("ETag", tag)
                self.end_headers()
                return
            state.log.append((path, 200))
            self.send_response(200)
            kind = ("application/xml" if path.endswith(".xml") else "text/plain" if path.endswith(".txt")
                    else "text/markdown" if path.endswith(".md") else "text/html; charset=utf-8")
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("ETag", tag)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def network(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """Every TCP connection (address) and name lookup (host) the process makes from now on."""
    seen: dict[str, list[Any]] = {"connect": [], "resolve": []}
    real_connect, real_resolve = socket.socket.connect, socket.getaddrinfo

    def connect(self: socket.socket, address: Any) -> None:
        seen["connect"].append(address)
        real_connect(self, address)

    def resolve(host: Any, *args: Any, **kwargs: Any) -> Any:
        seen["resolve"].append(host)
        return real_resolve(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    return seen


def stored(data_root: Path, alias: str = "docs") -> str:
    files = list((data_root / "sources" / alias).glob("*"))
    assert len(files) == 1, files
    return files[0].read_text(encoding="utf-8")


def titles(text: str) -> list[str]:
    """The "# " lines outside code fences."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif line.startswith("# ") and not fenced:
            out.append(line[2:])
    return out


def test_crawl_builds_a_source_from_the_sitemaps(site: Site, data_root: Path, network: dict[str, list[Any]]) -> None:
    _load(site)
    info = js("add", "docs", "--crawl", site.base + "/", "--crawl-delay", "0")
    crawl = info["crawl"]
    assert crawl["mode"] == "sitemap" and crawl["pages"] == 5
    text = stored(data_root)
    # every sitemap page: its title as the only "# " line, its URL on a line under it
    assert titles(text) == TITLES
    for path, title in zip(SITEMAP_PAGES, TITLES):
        assert f"# {title}\n\n{site.base}{path}\n" in text
    assert "```python\nsize = client.render" in text and "```bash\npip install widget" in text
    assert "| `width` | int | 80 | Line width in columns |" in text
    assert "Copyright" not in text and "Twitter" not in text  # header, footer and navigation left out
    # robots.txt: nothing under /private/ was requested, and that is said
    assert not [p for p, _s in site.log if p.startswith("/private/")]
    warnings = "\n".join(crawl["warnings"])
    assert f"{site.base}/private/secret.html: excluded by robots.txt; not requested" in warnings
    assert f"{site.base}/guide/gone.html: HTTP 404; skipped" in warnings
    assert f"{site.base}/loop/a.html: more than 5 redirects (a redirect loop?); skipped" in warnings
    assert "http://docs.example.com/widget/other.html: outside" in warnings
    # the nested index was read; the loop ended at the redirect cap
    assert {"/sitemap.xml", "/sitemaps/guide.xml", "/sitemaps/more.xml", "/sitemaps/api.xml"} <= {p for p, _ in site.log}
    assert sum(p.startswith("/loop/") for p, _s in site.log) == 6
    # only loopback: the other host (in a sitemap and in a link) was never looked up nor connected to
    assert network["connect"] and all(addr[0] == "127.0.0.1" for addr in network["connect"])
    assert "docs.example.com" not in network["resolve"]
    # find/get/toc and citations work as for an llms.txt
    hit = js("search", "WidgetTimeout", "-s", "docs")["hits"][0]
    assert hit["headingPath"][0] in ("Client API", "Errors")
    toc = js("toc", "docs", "--depth", "1")
    assert [e["headingPath"][-1] for e in toc["entries"]] == TITLES


def test_progress_is_pages_fetched_of_known_as_json_lines(site: Site, data_root: Path) -> None:
    _load(site)
    code, _out, err = blz("add", "docs", "--crawl", site.base + "/", "--crawl-delay", "0", "--progress", "json", "--json")
    assert code == 0, err
    events = [json.loads(line) for line in err.splitlines()]
    assert events and all(e["stage"] == "pages" for e in events)
    assert (events[-1]["event"], events[-1]["done"], events[-1]["total"]) == ("done", 7, 7)
    # an update of the crawled source counts pages too, not bytes of a "download"
    code, _out, err = blz("update", "docs", "--progress", "json", "--json")
    assert code == 0, err
    events = [json.loads(line) for line in err.splitlines()]
    assert events and all(e["stage"] == "pages" for e in events), events
    assert (events[-1]["event"], events[-1]["done"]) == ("done", 7)


def test_politeness_delay_spaces_every_request(site: Site, data_root: Path) -> None:
    _load(site)  # robots.txt says Crawl-delay: 0; the user's delay is kept
    assert blz("add", "docs", "--crawl", site.base + "/", "--crawl-delay", "0.05", "--max-pages", "3")[0] == 0
    gaps = [b - a for a, b in zip(site.times, site.times[1:])]
    assert len(gaps) >= 6 and min(gaps) >= 0.045, gaps


def test_slow_large_and_redirected_away_pages_are_skipped_with_a_warning(
        site: Site, data_root: Path, network: dict[str, list[Any]]) -> None:
    ok = b"<html><body><main><h1>Fine</h1><p>A page of normal size.</p></main></body></html>"
    site.files.update({"/ok.html": ok, "/slow.html": ok, "/big.html": ok.replace(b"normal", b"x" * 5000)})
    site.files["/sitemap.xml"] = (f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                                  + "".join(f"<url><loc>{site.base}/{n}.html</loc></url>" for n in ("slow", "big", "away", "ok"))
                                  + "</urlset>").encode()
    site.slow["/slow.html"] = 1.0
    site.redirects["/away.html"] = "http://docs.example.com/moved.html"
    info = js("add", "docs", "--crawl", site.base + "/", "--crawl-delay", "0", "--timeout", "0.3",
              "--max-page-bytes", "2000")
    assert info["crawl"]["pages"] == 1
    assert info["crawl"]["warnings"] == [f"{site.base}/slow.html: no answer within 0.3 s; skipped",
                                         f"{site.base}/big.html: {len(site.files['/big.html']):,} bytes, over the 2,000-byte cap; skipped",
                                         f"{site.base}/away.html: redirects outside {site.base}/ to "
                                         "http://docs.example.com/moved.html; not followed"]
    assert "docs.example.com" not in network["resolve"] and {a[0] for a in network["connect"]} == {"127.0.0.1"}


def test_page_cap_bounds_every_page_request(site: Site, data_root: Path) -> None:
    _load(site)
    info = js("add", "docs", "--crawl", site.base + "/", "--crawl-delay", "0", "--max-pages", "3")
    assert len(site.pages()) == 3 and info["crawl"]["pages"] == 3
    assert any(w.startswith("page cap (3 requests) reached: 4 pages not fetched") for w in info["crawl"]["warnings"])


def test_links_are_followed_without_a_sitemap(site: Site, data_root: Path, network: dict[str, list[Any]]) -> None:
    _load(site, sitemap=False)
    info = js("add", "docs", "--crawl", site.base + "/", "--crawl-delay", "0", "--crawl-depth", "1")
    assert info["crawl"]["mode"] == "links"
    assert sorted(site.pages()) == sorted(["/", "/guide/install.html", "/guide/config.html", "/api/client.html",
                                           "/api/errors.html", "/privacy.html"])
    assert any("/private/secret.html: excluded by robots.txt" in w for w in info["crawl"]["warnings"])
    assert all(addr[0] == "127.0.0.1" for addr in network["connect"])
    assert "docs.example.com" not in network["resolve"] and "github.com" not in network["resolve"]
    # update without a sitemap: the known pages asked for again, only the changed one downloaded
    site.files["/guide/config.html"] = site.files["/guide/config.html"].replace(b"NO_COLOR", b"WIDGET_NO_COLOR")
    site.log.clear()
    done = js("update", "docs")["results"][0]
    assert done["status"] == "updated" and (done["crawl"]["changed"], done["crawl"]["notModified"]) == (1, 4)
    assert [p for p, s in site.log if s == 200 and p != "/robots.txt"] == ["/guide/config.html"]
    assert js("search", "WIDGET_NO_COLOR", "-s", "docs")["hits"]
    site.log.clear()
    assert blz("add", "start", "--crawl", site.base + "/", "--crawl-delay", "0", "--crawl-depth", "0")[0] == 0
    assert site.pages() == ["/"]  # depth 0: the start page only


def test_update_refetches_only_the_changed_page(site: Site, data_root: Path) -> None:
    _load(site)
    assert blz("add", "docs", "--crawl", site.base + "/", "--crawl-delay", "0")[0] == 0
    site.log.clear()
    same = js("update", "docs")["results"][0]
    assert same["status"] == "unchanged" and same["crawl"]["notModified"] == 5
    assert [p for p, s in site.log if s == 200 and p in SITEMAP_PAGES] == []
    before = js("search", "WidgetError exc", "-s", "docs")["hits"][0]  # in "Handling errors", after the edit
    site.files["/api/errors.html"] = site.files["/api/errors.html"].replace(
        b"<h2>Handling errors</h2>", b"<h2>Retrying</h2><p>Retry with backoff after WidgetClosed.</p><h2>Handling errors</h2>")
    site.log.clear()
    done = js("update", "docs")["results"][0]
    assert done["status"] == "updated" and (done["crawl"]["changed"], done["crawl"]["notModified"]) == (1, 4)
    answered = {p: s for p, s in site.log if p in SITEMAP_PAGES}
    assert answered == {"/": 304, "/guide/install.html": 304, "/guide/config.html": 304, "/api/client.html": 304,
                        "/api/errors.html": 200}
    assert "Retry with backoff" in stored(data_root)
    assert js("search", "backoff", "-s", "docs")["hits"][0]["headingPath"][-1] == "Retrying"
    # the update went through the versioned path: the old citation resolves to the lines the text moved to
    assert [a["anchor"] for a in js("diff", "docs")["added"]] == ["docs#errors/retrying"]
    moved = js("get", f"docs:{before['lines']}@{before['version']}")
    assert moved["citations"][0]["status"] == "moved" and "print(exc.code)" in moved["snippets"][0]["content"]


def test_bad_crawl_input_is_refused(site: Site, data_root: Path) -> None:
    code, _out, err = blz("add", "docs", "--crawl", "ftp://example.com/")
    assert code != 0 and "--crawl takes an http(s) URL of a site" in err
    code, _out, err = blz("add", "docs", "--crawl", site.base + "/", "--exact")
    assert code == 2 and "--exact fetches one URL; --crawl fetches a site's pages" in err
    code, _out, err = blz("add", "docs", "--crawl", "http://127.0.0.1:1/")  # nothing listens there
    assert code != 0 and "Cannot crawl http://127.0.0.1:1/" in err
    code, _out, err = blz("add", "docs", site.base + "/x.txt", "--max-pages", "3")
    assert code != 0 and "limit a crawl: add --crawl" in err
    code, _out, err = blz("add", "docs", "--crawl", site.base + "/", "--max-pages", "0")
    assert code == 2 and "maxPages: 0 is less than the minimum of 1" in err
    _load(site)
    site.files = {"/robots.txt": b"User-agent: *\nDisallow: /\n"}
    code, _out, err = blz("add", "docs", "--crawl", site.base + "/", "--crawl-delay", "0")
    assert code != 0 and "excluded by robots.txt" in err and not site.pages()


def test_gzip_sitemap_markdown_pages_and_dry_run(site: Site, data_root: Path) -> None:
    page = b"# Alpha\n\nIntro text.\n\n# Second top\n\n```sh\n# a comment, not a heading\n```\n"
    site.files["/docs/a.md"] = page
    site.files["/sitemap.xml"] = gzip.compress(
        f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>{site.base}/docs/a.md</loc></url>'
        f'<url><loc>{site.base}/docs/app.html</loc></url><url><loc>{site.base}/blog/b.html</loc></url></urlset>'.encode())
    site.files["/docs/app.html"] = b'<html><body><div id="root"></div><script src="/app.js"></script></body></html>'

    dry = js("add", "docs", "--crawl", site.base + "/docs/", "--crawl-delay", "0", "--dry-run")
    assert dry["message"].startswith(f"Dry run: would add docs (1 pages, ") and not (data_root / "sources").exists()
    assert any("/blog/b.html: outside" in w for w in dry["crawl"]["warnings"])  # not under /docs/
    assert f"{site.base}/docs/app.html: no text in the page (one drawn by JavaScript?); skipped" in dry["crawl"]["warnings"]
    assert not [p for p, _s in site.log if p.startswith("/blog/")]
    assert js("add", "docs", "--crawl", site.base + "/docs/", "--crawl-delay", "0")["crawl"]["pages"] == 1
    text = stored(data_root)
    assert text.startswith(f"# Alpha\n\n{site.base}/docs/a.md\n\nIntro text.\n\n## Second top\n")
    assert "```sh\n# a comment, not a heading\n```" in text


def test_robots_rules_as_rfc_9309_reads_them() -> None:
    text = """User-agent: *
Disallow: /

User-agent: other
User-agent: BLZ   # this group is blz's: only its rules count
Disallow: /private/
Disallow: /*.pdf$
Disallow: /*?print=
Allow: /private/public/
Crawl-delay: 2
Disallow:

Sitemap: https://example.com/sitemap.xml
"""
    robots = Robots.parse(text)
    assert (robots.delay, robots.sitemaps) == (2.0, ["https://example.com/sitemap.xml"])
    ok = {"/": True, "/guide/": True, "/private/x.html": False, "/private/public/a.html": True,
          "/docs/a.pdf": False, "/docs/a.pdf.html": True, "/docs/page?print=1": False, "/docs/page?x=1": True,
          "/robots.txt": True}
    assert {path: robots.allowed("https://example.com" + path) for path in ok} == ok
    everyone = Robots.parse(text, agent="somebot")  # no group of its own: the "*" group
    assert not everyone.allowed("https://example.com/guide/") and everyone.allowed("https://example.com/robots.txt")
    assert Robots.parse("").allowed("https://example.com/anything") and Robots.parse("Disallow: /x\n").rules == []


def test_html_to_markdown_reads_the_declared_charset() -> None:
    page = "<html><body><main><h1>Caf\u00e9</h1><p>cr\u00e8me br\u00fbl\u00e9e</p></main></body></html>"
    title, text, _links = html_to_markdown(page.encode("latin-1"), "http://h/", "iso-8859-1")
    assert (title, text) == ("Caf\u00e9", "cr\u00e8me br\u00fbl\u00e9e")


def test_html_to_markdown_keeps_headings_and_code() -> None:
    title, text, links = html_to_markdown((SITE / "api" / "client.html").read_bytes(), "http://h/api/client.html")
    assert title == "Client API"
    assert "## Client.connect" in text and "### Arguments" in text
    assert "client = Client(\"localhost:7000\")" in text and "\n\nclient = Client" in text  # blank line kept
    assert "http://h/guide/install.html" in links and "https://github.com/widget/widget" in links


async def _mcp_add(params: StdioServerParameters, url: str) -> tuple[bool, str]:
    async with Client(params, cache=None) as client:
        props = {t.name: t for t in (await client.list_tools()).tools}["source-add"].input_schema["properties"]
        assert {"crawl", "maxPages", "crawlDepth"} <= set(props) and "crawlDelay" not in props
        messages: list[str] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:  # noqa: ARG001
            messages.append(message or "")

        res = await client.call_tool("source-add", {"alias": "docs", "crawl": url, "maxPages": 4},
                                     progress_callback=on_progress)
        if res.is_error:
            return True, res.content[0].text  # type: ignore[union-attr]
        # a crawl's progress counts pages, not bytes
        assert messages and all(m.startswith("crawled ") and m.endswith(" pages found so far") for m in messages), messages
        again = await client.call_tool("source-refresh", {"alias": "docs"})  # under the same guard
        assert not again.is_error, again.content
        refreshed = json.loads(again.content[0].text)["results"][0]  # type: ignore[union-attr]
        assert refreshed["status"] == "unchanged" and refreshed["crawl"]["notModified"] == 3
        return False, res.content[0].text  # type: ignore[union-attr]


def test_crawl_over_mcp_is_guarded_like_source_add(site: Site, data_root: Path) -> None:
    _load(site)
    cmd = [sys.executable, "-m", "cairn_servers.blz.cli", "mcp"]
    refused = asyncio.run(asyncio.wait_for(_mcp_add(StdioServerParameters(
        command=cmd[0], args=cmd[1:], env={"BLZ_DATA_DIR": str(data_root)}), site.base + "/"), 60))
    assert refused[0] and "Refused to connect to 127.0.0.1" in refused[1] and "BLZ_MCP_ALLOW_HOSTS" in refused[1]
    assert site.log == []
    allowed = asyncio.run(asyncio.wait_for(_mcp_add(StdioServerParameters(
        command=cmd[0], args=cmd[1:], env={"BLZ_DATA_DIR": str(data_root), "BLZ_MCP_ALLOW_HOSTS": "127.0.0.1"}),
        site.base + "/"), 60))
    assert not allowed[0], allowed[1]
    answer = json.loads(allowed[1])
    assert answer["crawl"]["pages"] == 3  # maxPages: 4 requests (one a 404), then as many for the refresh
    assert site.pages() == ["/", "/guide/install.html", "/guide/config.html", "/guide/gone.html"] * 2
    assert any(w.startswith("page cap (4 requests) reached") for w in answer["crawl"]["warnings"])
