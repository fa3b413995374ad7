"""The Lua sandbox, extended beyond tests/ctx/test_lua.py: metamethod and finaliser loops, `<close>`
variables, comparator and replacement callbacks, oversized formats and unpacks, state leaking from one
run to the next, and `http`/`env` host allow-lists attacked with URL parser tricks.

Each attempt ends in the expected clean error (or a harmless value) within its budget, and no
request ever reaches a host that is not allow-listed.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cairn_servers.core.errors import CairnError, ExtensionError, InvalidInput, Timeout
from cairn_servers.ctx.lua import Sandbox

pytestmark = pytest.mark.timeout(120)
BUDGET = 0.3

# (script, expected error class or None for "returns", fragment of the message or the repr of the value)
CORPUS: list[tuple[str, type[CairnError] | None, str]] = [
    ("error(setmetatable({}, {__tostring = function() while true do end end}))", ExtensionError, "Lua error"),
    ("return setmetatable({}, {__tostring = function() while true do end end})", None, "[]"),
    ("return setmetatable({a = 1}, {__pairs = function() while true do end end, __len = function() "
     "while true do end end, __index = function() while true do end end})", None, "{'a': 1}"),
    ("print(setmetatable({}, {__tostring = function() while true do end end}))", None, "None"),
    ("return xpcall(function() error('x') end, function() while true do end end)", Timeout, "time limit"),
    ("do local x <close> = setmetatable({}, {__close = function() while true do end end}) end", Timeout,
     "time limit"),
    ("local co = coroutine.create(function() local x <close> = setmetatable({}, {__close = function() "
     "while true do end end}) coroutine.yield() end) coroutine.resume(co) coroutine.close(co)", Timeout,
     "time limit"),
    ("::a:: goto a", Timeout, "time limit"),
    ("local t = {3, 2, 1} table.sort(t, function(a, b) while true do end end)", Timeout, "time limit"),
    ("return string.gsub(string.rep('a', 100), 'a', function() while true do end end)", Timeout, "time limit"),
    ("while true do pcall(function() while true do end end) end", Timeout, "time limit"),
    ("setmetatable({}, {__mode = 'k', __gc = true})", ExtensionError, "__gc finalizers are not allowed"),
    ("return string.rep('x', 2^40)", ExtensionError, "over the sandbox limit"),
    ("local t = {} for i = 1, 100 do t[i] = string.rep('z', 1e6) end return table.concat(t)", ExtensionError,
     "ran out of memory"),
    ("local s = 'x' while true do s = s .. s end", ExtensionError, "ran out of memory"),
    ("local t = {} for i = 1, 3e6 do t[i] = i end return t", ExtensionError, "ran out of memory"),
    ("return string.format('%099999d', 1)", ExtensionError, "invalid conversion"),
    ("return string.byte(string.rep('a', 1e6), 1, -1)", ExtensionError, "string slice too long"),
    ("return table.unpack({}, 1, 1e7)", ExtensionError, "too many results"),
    ("local function f(n) return f(n + 1) + 1 end return f(1)", ExtensionError, "stack overflow"),
    ("local t = {} local c = t for i = 1, 100000 do c.x = {} c = c.x end return t", ExtensionError,
     "nested more than"),
    ("return utf8.char(0x7FFFFFFF)", ExtensionError, "not valid UTF-8"),
    ("return {0/0}", ExtensionError, "JSON cannot carry"),
    ("return {[1.5] = 1}", ExtensionError, "float key"),
    ("return coroutine.create(function() end)", ExtensionError, "JSON cannot carry"),
    ("warn('@on')", ExtensionError, "global 'warn'"),
    ("return rawget(_G, 'os') == nil and rawget(_G, 'io') == nil and _ENV.os == nil", None, "True"),
    ("return ('').load == nil and ('').dump == nil", None, "True"),
    ("return getmetatable(_G)", None, "None"),
    ("return setmetatable('', {})", ExtensionError, "table expected"),
]


# For scripts that must end by their own error or value, not by the clock: filling 64 MiB took 0.4-1.4 s
# and a stack overflow over 0.3 s at load average 8.5.
SLACK_BUDGET = 10.0


def _run(source: str, budget: float = BUDGET) -> Any:
    sb = Sandbox("probe", budget)
    try:
        return sb.execute(source, "probe.lua")
    finally:
        sb.close()


@pytest.mark.parametrize("source, kind, fragment", CORPUS)
def test_escape_and_exhaustion_corpus(source: str, kind: type[CairnError] | None, fragment: str) -> None:
    """Each script ends in its expected error (or value) within its time budget. Only the scripts that
    must hit the time limit run with the short one; the others (memory, stack, nesting, conversion) get a
    budget no loaded machine reaches, so only their own limit can stop them (regression: in a parallel,
    randomly ordered suite the 0.3 s budget sometimes expired first: Timeout instead of the error under test)."""
    budget = BUDGET if kind is Timeout else SLACK_BUDGET
    started = time.monotonic()
    if kind is None:
        assert repr(_run(source, budget)) == fragment
    else:
        with pytest.raises(kind) as info:
            _run(source, budget)
        assert type(info.value) is kind and fragment in info.value.message, info.value.message
    assert time.monotonic() - started < budget + 1.0  # a budget is a budget


class _Hits(BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802
        _Hits.hits.append(self.path)
        self.send_response(302)
        self.send_header("Location", "http://localhost:9/secret")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def target() -> Iterator[int]:
    _Hits.hits = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Hits)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


FETCH_TOOL = """
tool = {name = "fetch", description = "fetch a URL", parameters = {
  {name = "url", type = "string", required = true, description = "URL"},
  {name = "header", type = "string", description = "a value for X-Test"},
  {name = "header_name", type = "string", description = "a header name"}}}
function tool.execute(params, context)
  local headers = {}
  if params.header then headers[params.header_name or "X-Test"] = params.header end
  local r = http.get(params.url, {timeout = 2, headers = headers})
  return {status = r.status}
end
"""
ENV_TOOL = """
tool = {name = "envy", description = "read a variable", parameters = {
  {name = "name", type = "string", required = true, description = "variable"}}}
function tool.execute(params, context)
  return {value = env.get(params.name) or "<nil>"}
end
"""
STATE_TOOL = """
tool = {name = "counter", description = "counts calls in a global", parameters = {}}
function tool.execute(params, context)
  counter_global = (counter_global or 0) + 1
  getmetatable('').__index.leak = function() return 'leaked' end
  return {n = counter_global, leaked = (('x').leak ~= nil)}
end
"""


def _toolbox(tmp_path: Path, allow_hosts: list[str]) -> Any:
    from cairn_servers.ctx.config import load
    from cairn_servers.ctx.tools import Toolbox

    for name, body in (("fetch", FETCH_TOOL), ("envy", ENV_TOOL), ("counter", STATE_TOOL)):
        (tmp_path / f"{name}.lua").write_text(body)
    cfg = tmp_path / "ctx.toml"
    cfg.write_text('[db]\npath = "kb.sqlite"\n'
                   f'[tools.script.fetch]\npath = "fetch.lua"\ntimeout = 5\nallow_hosts = {json.dumps(allow_hosts)}\n'
                   '[tools.script.envy]\npath = "envy.lua"\nallow_env = ["CTX_HARDENING_OK"]\n'
                   '[tools.script.counter]\npath = "counter.lua"\n')
    return Toolbox(load(cfg))


def test_http_allow_list_resists_url_tricks(tmp_path: Path, target: int) -> None:
    box = _toolbox(tmp_path, ["allowed.example"])
    p = target
    tricks = [f"http://127.0.0.1:{p}/", f"http://allowed.example@127.0.0.1:{p}/", f"http://127.0.0.1:{p}#@allowed.example/",
              f"http://127.0.0.1:{p}?@allowed.example/", f"http://allowed.example:80@127.0.0.1:{p}/",
              f"http://127.0.0.1:{p}/\\@allowed.example", f"HTTP://127.0.0.1:{p}/", f"http://[::ffff:127.0.0.1]:{p}/",
              f"http://2130706433:{p}/", f"http://0x7f.1:{p}/", f"http://localhost:{p}/", f"http://allowed.example.localhost:{p}/",
              "file:///etc/passwd", f"gopher://127.0.0.1:{p}/", f"ftp://allowed.example/", "//allowed.example/x",
              f"http://127.0.0.1:{p}\t@allowed.example/", f"http://allowed.example\\.127.0.0.1:{p}/"]
    refused = 0
    try:
        for url in tricks:
            try:
                result = box.call("fetch", {"url": url})
            except (InvalidInput, ExtensionError, CairnError) as exc:
                assert "not allowed" in exc.message or "not an http(s) URL" in exc.message or "cannot send" in exc.message \
                    or "network" in exc.message.lower(), (url, exc.message)
                refused += 1
            else:
                pytest.fail(f"{url} was fetched: {result}")
    finally:
        box.close()
    assert refused == len(tricks)
    assert _Hits.hits == [], _Hits.hits  # not one request reached the host that is not allow-listed


def test_redirects_from_an_allowed_host_are_not_followed(tmp_path: Path, target: int) -> None:
    box = _toolbox(tmp_path, ["127.0.0.1"])
    try:
        assert box.call("fetch", {"url": f"http://127.0.0.1:{target}/start"}) == {"result": {"status": 302}}
        # Header injection and unsendable values are clean errors, never a raw exception or a request.
        for value, name in [("a\r\nInjected: 1", "X-Test"), ("caf\u00e9", "X-Test"), ("x", "bad name"),
                            ("x", "X\r\nY"), ("x" * 100, "")]:
            with pytest.raises((InvalidInput, CairnError)) as info:
                box.call("fetch", {"url": f"http://127.0.0.1:{target}/h", "header": value, "header_name": name})
            assert isinstance(info.value, CairnError) and "http" in info.value.message, info.value
    finally:
        box.close()
    assert _Hits.hits == ["/start"]  # the Location (localhost:9/secret) was handed back, not fetched


def test_env_allow_list_and_fresh_state_per_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTX_HARDENING_OK", "visible")
    monkeypatch.setenv("CTX_AUTH_TOKEN", "secret-token-value")
    box = _toolbox(tmp_path, [])
    try:
        assert box.call("envy", {"name": "CTX_HARDENING_OK"}) == {"result": {"value": "visible"}}
        for name in ["CTX_AUTH_TOKEN", "HOME", "PATH", "ctx_hardening_ok", "CTX_HARDENING_OK ", ""]:
            assert box.call("envy", {"name": name}) == {"result": {"value": "<nil>"}}, name
        # Globals and string-metatable tampering never survive into the next call.
        assert [box.call("counter", {}) for _ in range(3)] == [{"result": {"n": 1, "leaked": True}}] * 3
    finally:
        box.close()
