"""Hardening round 3, cross-site requests, in a real browser: a web page of another site cannot make
the user's browser run ctx's Lua tools or agents (no token set, the default).

Headless Chromium (the Debian package ``chromium``; ``make browser`` installs it; skipped with the
reason where it is absent) loads an attacking page from a second server on 127.0.0.1. Chromium maps
the page's host names to 127.0.0.1 (``--host-resolver-rules``), so every byte stays on this machine
while the page's origin is a foreign site's. The page tries everything a site can do without the
user's help: ``fetch()`` (``no-cors``, a JSON body, an empty one), a form post of each kind into a
hidden frame, an ``<img>`` GET, on a Lua tool with no required parameter and on a Lua agent. Each
script logs a marker on the server's stderr when it runs, so the test counts runs.

Controls: the same page served from this machine (``http://127.0.0.1:PORT``, a page ctx trusts like
CORS does) runs both, so the counting works; a page whose host name resolves to the server itself
(DNS rebinding, a same-origin request with a foreign ``Host``) runs nothing either.
"""

from __future__ import annotations

import http.server
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from ._servers import HttpServer, free_port, generated_kb, spawn_ctx_http

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason="headless Chromium is not installed (make browser, or apt-get install -y chromium)")

MARK_TOOL = """
tool = {name = "mark", description = "logs that it ran", parameters = {}}
function tool.execute(params, context)
  log.info("TOOL-RAN")
  return {ran = true}
end
"""
MARK_AGENT = """
agent = {}
function agent.resolve(args, config, context)
  log.info("AGENT-RAN")
  return {system = "ran"}
end
"""

# Every way a page can send a request without the user's help; ``done`` once each has been tried.
PAGE = """<!doctype html><html><body><p id="state">running</p>
<iframe name="f1"></iframe><iframe name="f2"></iframe><iframe name="f3"></iframe><iframe name="f4"></iframe>
<form id="p1" method="POST" action="{ctx}/tools/mark" target="f1"></form>
<form id="p2" method="POST" action="{ctx}/agents/marker" target="f2"></form>
<form id="p3" method="POST" action="{ctx}/tools/mark" target="f3" enctype="text/plain"><input name='{{"a":"' value='"}}'></form>
<form id="p4" method="POST" action="{ctx}/agents/marker" target="f4" enctype="multipart/form-data"></form>
<img src="{ctx}/agents/marker?topic=pwned">
<script>
const ctx = "{ctx}";
const tries = [
  fetch(ctx + "/tools/mark", {{method: "POST", mode: "no-cors"}}),
  fetch(ctx + "/tools/mark", {{method: "POST", mode: "no-cors", body: "{{}}", headers: {{"Content-Type": "text/plain"}}}}),
  fetch(ctx + "/tools/mark", {{method: "POST", body: "{{}}", headers: {{"Content-Type": "application/json"}}}}),
  fetch(ctx + "/agents/marker", {{method: "POST", mode: "no-cors"}}),
  fetch(ctx + "/agents/marker", {{method: "POST", body: "{{}}", headers: {{"Content-Type": "application/json"}}}}),
  fetch(ctx + "/agents/marker?topic=pwned", {{mode: "no-cors"}}),
].map(p => p.then(() => "sent", () => "refused"));
let frames = 0;
for (const f of document.querySelectorAll("iframe")) f.onload = () => {{ frames++; }};
for (const id of ["p1", "p2", "p3", "p4"]) document.getElementById(id).submit();
Promise.all(tries).then(async (r) => {{
  for (let i = 0; i < 12000 && frames < 4; i++) await new Promise(ok => setTimeout(ok, 50));
  document.getElementById("state").textContent = "done " + frames + " frames " + r.join(",");
}});
</script></body></html>"""


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    base = tmp_path_factory.mktemp("cross-site")
    cfg = generated_kb(base, {"deploy.md": "# Deploy\n\nHow we deploy.\n"}, {"mark": (MARK_TOOL, 10)})
    (base / "marker.lua").write_text(MARK_AGENT)
    with cfg.open("a") as f:  # an agent with no required argument: an empty POST would resolve it
        f.write('[agents.script.marker]\npath = "marker.lua"\ntimeout = 10\n'
                'arguments = [{ name = "topic", description = "anything" }]\n')
    server = spawn_ctx_http(cfg, base / "run")
    try:
        yield server
    finally:
        server.close()


class _Page(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def _serve_page(html: str, port: int) -> http.server.ThreadingHTTPServer:
    handler = type("Page", (_Page,), {"body": html.encode()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _runs(server: HttpServer) -> tuple[int, int]:
    log = server.stderr_tail(1 << 20)
    return log.count("TOOL-RAN"), log.count("AGENT-RAN")


def _visit(url: str, profile: Path) -> str:
    """Load ``url`` in headless Chromium (``*.test`` names resolve to 127.0.0.1); the page's DOM after it ran.
    The page polls on virtual time, which runs ahead of real time while Chromium waits: its budget (600 s of
    polling, 700 s in all) is ample, so that a loaded machine's slow answers are still waited for (a 60 s
    budget once ran out first under a full test run); real time is bounded by the subprocess timeout."""
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage", f"--user-data-dir={profile}",
           "--host-resolver-rules=MAP *.test 127.0.0.1", "--virtual-time-budget=700000", "--dump-dom", url]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _attack(ctx: HttpServer, page_url: str, ctx_url: str, profile: Path, page_port: int) -> tuple[int, int]:
    """Runs of the tool and the agent caused by one visit of the attacking page."""
    before = _runs(ctx)
    page = _serve_page(PAGE.format(ctx=ctx_url), page_port)
    try:
        dom = _visit(page_url, profile)
    finally:
        page.shutdown()
        page.server_close()
    assert "done 4 frames" in dom, dom[-3000:]  # every attempt was made, and answered
    after, steady, deadline = _runs(ctx), 0, time.monotonic() + 20
    while steady < 4 and time.monotonic() < deadline:  # a run's log line is written by its Lua worker: settle
        time.sleep(0.5)
        now = _runs(ctx)
        steady, after = (steady + 1, now) if now == after else (0, now)
    return after[0] - before[0], after[1] - before[1]


@pytest.mark.timeout(300)
def test_a_page_of_another_site_runs_no_tool_and_no_agent(ctx: HttpServer, tmp_path: Path) -> None:
    port = free_port()
    ran = _attack(ctx, f"http://evil.test:{port}/", ctx.url, tmp_path / "evil", port)
    assert ran == (0, 0), f"a foreign page ran the tool {ran[0]} and the agent {ran[1]} times"
    assert ctx.alive()


@pytest.mark.timeout(300)
def test_dns_rebinding_runs_nothing(ctx: HttpServer, tmp_path: Path) -> None:
    """The page's own host name resolves to the ctx server: same-origin requests, a foreign Host."""
    rebound = f"http://rebind.test:{ctx.port}"
    before = _runs(ctx)
    dom = _visit(rebound + "/", tmp_path / "rebind")  # ctx answers its GET / index, 403 for the foreign Host
    assert '"forbidden"' in dom or "is not allowed" in dom, dom[-2000:]
    port = free_port()
    ran = _attack(ctx, f"http://rebind.test:{port}/", rebound, tmp_path / "rebind2", port)
    assert ran == (0, 0) and _runs(ctx) == before, f"a rebound page ran the tool and agent {ran} times"


@pytest.mark.timeout(300)
def test_control_a_page_of_this_machine_runs_them(ctx: HttpServer, tmp_path: Path) -> None:
    """The counting works: a page served from this machine (trusted, as CORS trusts it) runs the tool from
    both fetch() calls and both simple forms, and the agent from its fetch() and both forms; the text/plain
    form (415) and every GET run nothing."""
    port = free_port()
    tool, agent = _attack(ctx, f"http://127.0.0.1:{port}/", ctx.url, tmp_path / "local", port)
    # tool: no-cors fetch (empty body), JSON fetch (CORS allows this machine's pages), form p1; the
    # text/plain fetch and form are 415. agent: no-cors fetch, JSON fetch, multipart form p4 is 415, form p2.
    assert (tool, agent) == (3, 3), (tool, agent, os.getloadavg())
