"""The Lua sandbox: escape attempts end in clean errors, budgets hold inside pcall and coroutines.

Direct tests on ``cairn_servers.ctx.lua.Sandbox`` (one fresh Lua 5.4 state per run), then the same attacks
as Lua tools behind the real HTTP server: each answers 400/408/500 with the error envelope and the
server keeps serving.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from cairn_servers.core.errors import CairnError, ExtensionError, NotFound, Timeout
from cairn_servers.ctx.lua import Sandbox, wrap_host

from .conftest import config_file, serving

BUDGET = 0.3


def run(source: str, timeout: float = BUDGET, **hosts: Any) -> Any:
    sb = Sandbox("test", timeout)
    try:
        for name, fn in hosts.items():
            sb.set_global(name, wrap_host(sb, fn))
        return sb.execute(source, "test.lua")
    finally:
        sb.close()


def fails(source: str, kind: type[CairnError] = ExtensionError, timeout: float = BUDGET, **hosts: Any) -> str:
    started = time.monotonic()
    with pytest.raises(kind) as info:
        run(source, timeout, **hosts)
    # a budget is a budget: nothing may run much past it (pattern calls are capped to ~0.1 s)
    assert time.monotonic() - started < timeout + 2.0
    assert type(info.value) is kind, info.value
    return info.value.message


def test_plain_scripts_return_json_ready_data() -> None:
    assert run("return {a = 1, b = {1, 2, 3}, c = {}, d = 'x', e = 1.5, f = true}") == {
        "a": 1, "b": [1, 2, 3], "c": [], "d": "x", "e": 1.5, "f": True}
    assert run("local t = {} for i = 1, 3 do t[#t + 1] = i * i end return t") == [1, 4, 9]
    assert run("return ('a,b'):find(',')") == 2  # string methods still work, guarded
    assert run("return string.gsub('a  b   c', '%s+', ' ')") == "a b c"


@pytest.mark.parametrize("name", ["os", "io", "debug", "require", "package", "load", "loadfile", "dofile",
                                  "collectgarbage", "python"])
def test_dangerous_globals_are_gone(name: str) -> None:
    assert run(f"return {name} == nil") is True


@pytest.mark.parametrize("source, fragment", [
    ("return os.execute('id')", "global 'os'"),
    ("return io.open('/etc/passwd'):read('a')", "global 'io'"),
    ("debug.sethook()", "global 'debug'"),
    ("return require('os')", "global 'require'"),
    ("return load('return 1')()", "global 'load'"),
    ("return string.dump(function() end)", "field 'dump'"),
    ("return python.eval('1')", "global 'python'"),
    ("return getmetatable('').__index.dump", None),
])
def test_escape_attempts_fail_cleanly(source: str, fragment: str | None) -> None:
    if fragment is None:
        assert run(source) is None  # the string metatable leads back to the guarded string table
        return
    assert fragment in fails(source)


def test_python_objects_expose_no_attributes() -> None:
    called: list[str] = []

    def host(x: Any = None) -> str:
        called.append("yes")
        return "ok"

    assert run("return host('x')", host=host) == "ok" and called == ["yes"]
    # host functions reach Lua as Lua closures: nothing to index
    assert "attempt to index a function value" in fails("return host.__class__", host=host)
    # the one raw Python callable (print) refuses every attribute
    assert "not accessible from the Lua sandbox" in fails("return print.__class__")
    assert "not accessible from the Lua sandbox" in fails("return print.__call__.__globals__")
    assert run("return pcall(function() return print.__self__ end)") is False


def test_precompiled_bytecode_is_refused(tmp_path: Path) -> None:
    from cairn_servers.ctx.lua import read_script

    script = tmp_path / "x.luac"
    script.write_bytes(b"\x1bLua\x54\x00" + b"\x00" * 20)
    with pytest.raises(ExtensionError, match="precompiled Lua bytecode"):
        read_script(script, "tool")


@pytest.mark.parametrize("source", [
    "while true do end",
    "local n = 0 while true do pcall(function() while true do n = n + 1 end end) end",
    "return pcall(function() while true do end end)",
    "while true do pcall(error, 'x') end",
    "local co = coroutine.create(function() while true do end end) return coroutine.resume(co)",
    "local f = coroutine.wrap(function() pcall(function() while true do end end) return 1 end) return pcall(f)",
    "return xpcall(function() while true do end end, function(e) while true do end end)",
    "return xpcall(function() error('x') end, function(e) while true do end end)",
    "local function f() return pcall(f) end while true do f() end",
])
def test_infinite_loops_time_out_even_inside_pcall_and_coroutines(source: str) -> None:
    assert "exceeded its time limit of 0.3 s" in fails(source, Timeout)


def test_finalizers_cannot_run_unhooked_code() -> None:
    # Lua runs __gc with hooks off; an endless finalizer would never be interrupted.
    assert "__gc finalizers are not allowed" in fails("setmetatable({}, {__gc = function() while true do end end})")


@pytest.mark.parametrize("source, fragment", [
    ("return string.rep('x', 1e10)", "string.rep: a result of"),
    ("return ('x'):rep(2^40)", "string.rep: a result of"),
    ("return string.rep('ab', 3e6, ',')", "string.rep: a result of"),
    ("return string.find(string.rep('a', 20000), 'a*b')", "could run too long"),
    ("return string.match(string.rep('a', 3000), '.-.-.-b')", "could run too long"),
    ("return string.gsub(string.rep('a', 30000), '(a*)*b', '')", "could run too long"),
    ("for m in string.gmatch(string.rep('a', 20000), 'a-b') do end", "could run too long"),
    ("return string.find(string.rep('x', 2^21), 'y', 1, true)", "subject is 2097152 bytes"),
])
def test_string_bombs_and_pathological_patterns_are_refused(source: str, fragment: str) -> None:
    assert fragment in fails(source)


def test_memory_bombs_hit_the_cap() -> None:
    # a generous time budget, so the memory cap is what stops them even on a busy machine
    assert "ran out of memory" in fails("local t = {} for i = 1, 1e9 do t[i] = ('x'):rep(1000) .. i end", timeout=10)
    assert "ran out of memory" in fails("local s = 'x' for i = 1, 40 do s = s .. s end return #s", timeout=10)
    # caught by pcall: the memory stays capped and the loop still ends by the time budget
    fails("while true do pcall(function() local t = {} for i = 1, 1e9 do t[i] = {} end end) end", Timeout)


def test_host_errors_are_lua_errors_that_pcall_can_catch() -> None:
    def get(doc_id: Any = None) -> Any:
        raise NotFound(f"No document with id {doc_id!r}.")

    assert run("local ok, err = pcall(get, 'x') return {ok, err}", get=get) == [False, "No document with id 'x'."]
    assert "No document with id 'x'." in fails("return get('x')", NotFound, get=get)  # uncaught: keeps its class


def test_each_run_starts_from_a_clean_state() -> None:
    assert run("secret = 42 return secret") == 42
    assert run("return secret") is None


def test_invalid_results_are_reported() -> None:
    assert "not valid UTF-8" in fails("return '\\xff\\xfe'")
    assert "nested more than" in fails("local t = {} t.self = t return t")
    assert "function" in fails("return function() end")
    assert "syntax error" in fails("return (")


# ---- the same attacks behind the HTTP server ------------------------------------------------------

ATTACKS: dict[str, tuple[str, int, str]] = {
    "os_execute": ("return os.execute('touch /tmp/ctx-pwned')", 500, "extension"),
    "io_open": ("return io.open('/etc/passwd'):read('a')", 500, "extension"),
    "debug_hook": ("debug.sethook() while true do end", 500, "extension"),
    "load_bytecode": ("return load(string.dump(function() return 1 end), 'x', 'b')()", 500, "extension"),
    "rep_bomb": ("return string.rep('x', 2^40)", 500, "extension"),
    "pattern": ("return string.find(string.rep('a', 50000), '.-.-.-b')", 500, "extension"),
    "loop": ("while true do end", 408, "timeout"),
    "loop_in_pcall": ("while true do pcall(function() while true do end end) end", 408, "timeout"),
    "loop_in_coroutine": ("return coroutine.wrap(function() while true do end end)()", 408, "timeout"),
    "memory": ("local t = {} for i = 1, 1e9 do t[i] = ('x'):rep(4096) .. i end", 500, "extension"),
    "error": ("error('the widget is broken')", 500, "extension"),
    # A host error the script does not catch keeps its class across the worker pipe, subclasses too
    # (EmbeddingsDisabled is an InvalidInput: a 400, not a script failure).
    "host_bad_input": ("return context.search('printer', {mode = 'semantic'})", 400, "bad_request"),
}


@pytest.fixture(scope="module")
def attack_server(tmp_path_factory: pytest.TempPathFactory, ctx_module_backend: str) -> Any:
    """A server of attack tools over a knowledge base on each storage backend in turn."""
    from cairn_servers.ctx import config
    from cairn_servers.ctx.http import create_app

    base = tmp_path_factory.mktemp("attacks")
    (base / "docs").mkdir()
    (base / "docs" / "a.md").write_text("# Printers\n\nThe printer on floor two jams on Mondays.\n")
    body = '[db]\npath = "kb.sqlite"\n[connectors.filesystem.docs]\nroot = "docs"\n'
    for name, (code, _, _) in ATTACKS.items():
        (base / f"{name}.lua").write_text(
            f'tool = {{description = "attack {name}", parameters = {{}}}}\n'
            f"function tool.execute(params, context)\n{code}\nend\n")
        budget = 10 if name == "memory" else BUDGET  # the memory cap, not the clock, must stop it
        body += f'[tools.script.{name}]\npath = "{name}.lua"\ntimeout = {budget}\n'
    cfg = config.load(config_file(base, body))
    from cairn_servers.ctx.service import Service

    svc = Service(cfg)
    svc.sync("all")
    svc.close()
    with serving(create_app(cfg)) as url:
        yield url


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attacks_over_http_end_in_the_error_envelope_and_the_server_keeps_serving(attack_server: str, name: str) -> None:
    _, status, code = ATTACKS[name]
    started = time.monotonic()
    r = httpx.post(f"{attack_server}/tools/{name}", json={}, timeout=10)
    assert time.monotonic() - started < (10 if name == "memory" else BUDGET) + 2
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code and error["message"]
    assert "Traceback" not in r.text
    assert not Path("/tmp/ctx-pwned").exists()
    assert httpx.get(f"{attack_server}/health").json() == {"status": "ok"}
    hits = httpx.post(f"{attack_server}/tools/search", json={"query": "printer"}).json()["results"]
    assert [h["source_id"] for h in hits] == ["a.md"]
