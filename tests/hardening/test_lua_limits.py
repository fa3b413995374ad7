"""Hardening round 2 (issue 20, items 1-3): the Lua sandbox's memory and time limits hold for every
call, and a script can never take the server down.

1. Out of memory anywhere (parameters converted into Lua, host results such as ``json.decode``,
   results converted back) is a clean error, never a Lua panic (abort) or a hang.
2. C functions the count hook cannot interrupt are bounded (``string.rep`` of empty strings,
   ``table.move/insert/remove`` over huge ranges, patterns with ``?`` and back-references), and a
   worker process still running past its deadline is killed: the call answers, the server keeps
   serving, and SIGTERM exits 0 promptly even while Lua calls are stuck.
3. Numeric-string arguments (``string.rep("x", "30000000")``) meet the same limits.

The sandbox cases run in-process; the pool cases use real worker processes; the server cases run
``ctx serve mcp`` as its own process on 127.0.0.1 and talk MCP (JSON-RPC over HTTP) to it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from cairn_servers.core.errors import CairnError, ExtensionError, Timeout
from cairn_servers.ctx.lua import Sandbox
from cairn_servers.ctx.luaproc import LuaPool
from cairn_servers.ctx.scripts import Hosts

from ._servers import STRESS, HttpServer, _cli, server_env, spawn_ctx_http

pytestmark = pytest.mark.timeout(300)
BUDGET = 0.5


def _run(source: str, timeout: float = BUDGET, **globals_: Any) -> Any:
    sb = Sandbox("probe", timeout)
    try:
        Hosts(sb, "probe", {}, {}).install()
        for name, value in globals_.items():
            sb.set_global(name, value)
        return sb.execute(source, "probe.lua")
    finally:
        sb.close()


# -- item 2 and 3: C functions, in-process ----------------------------------------------------------

C_CASES: list[tuple[str, type[CairnError] | None, str]] = [
    # string.rep loops n times in C even when the result is empty (23 s for 1e10 before)
    ('return string.rep("", 1e10)', None, "''"),
    ('return string.rep("", math.maxinteger)', None, "''"),
    ('return string.rep("", math.maxinteger, "")', None, "''"),
    # item 3: numeric strings are coerced by the C function, so the limit must see the number
    ('return string.rep("x", "30000000")', ExtensionError, "over the sandbox limit"),
    ('return string.rep("x", " 3e7 ")', ExtensionError, "over the sandbox limit"),
    ('return string.rep(12, "9000000")', ExtensionError, "over the sandbox limit"),
    ('return string.rep("x", 3, ("y"):rep(3000000))', ExtensionError, "over the sandbox limit"),
    ('return string.rep("x", "many")', ExtensionError, "number has no integer representation"),
    ('return string.rep("ab", "3", ",")', None, "'ab,ab,ab'"),
    # table loops over script-chosen ranges (still running at 40 s before)
    ("return table.move({}, 1, 1e10, 1, {})", Timeout, "time limit"),
    ("return table.move({}, 1, math.maxinteger, 2)", ExtensionError, "wrap around"),
    ("table.insert(setmetatable({}, {__len = function() return math.maxinteger - 1 end}), 1, 1)", Timeout,
     "time limit"),
    ("table.remove(setmetatable({}, {__len = function() return 1e15 end}), 1)", Timeout, "time limit"),
    ("return table.insert({}, 5, 1)", ExtensionError, "position out of bounds"),
    # patterns: `?` and back-references multiply the backtracking too (4 s, answered 200, before)
    ('return (("a"):rep(26)):find(("a?"):rep(26) .. ("a"):rep(26))', ExtensionError, "could run too long"),
    ('return (("a"):rep(26)):match(("a?"):rep(26) .. ("a"):rep(26))', ExtensionError, "could run too long"),
    ('return string.gsub(("a"):rep(40), ("a?"):rep(20) .. ("a"):rep(20), "")', ExtensionError, "could run too long"),
    ('return (("ab"):rep(500)):find("(.*)%1x")', ExtensionError, "could run too long"),
    ('return string.find(1234512345, "(%d+)%1")', None, "1"),
]


@pytest.mark.parametrize("source, kind, expected", C_CASES)
def test_c_functions_stay_within_the_budget(source: str, kind: type[CairnError] | None, expected: str) -> None:
    started = time.monotonic()
    if kind is None:
        assert repr(_run(source)) == expected
    else:
        with pytest.raises(kind) as info:
            _run(source)
        assert type(info.value) is kind and expected in info.value.message, info.value.message
    assert time.monotonic() - started < BUDGET + 1.5  # a budget is a budget


def test_table_functions_keep_their_lua_semantics() -> None:
    source = """
      local t = {1, 2, 3}
      table.insert(t, 2, 9); table.insert(t, 7)
      local removed, last = table.remove(t, 1), table.remove(t)
      local e = {}; local none = table.remove(e)
      local m = table.move({1, 2, 3}, 1, 3, 2)
      local o = table.move({1, 2, 3}, 2, 3, 1)
      local other = table.move({1, 2, 3}, 1, 3, 3, {"a", "b"})
      return {t = t, removed = removed, last = last, none = none == nil, m = m, o = o, other = other,
              n = #table.move({}, 1, 0, 1)}
    """
    assert _run(source) == {"t": [9, 2, 3], "removed": 1, "last": 7, "none": True, "m": [1, 1, 2, 3],
                            "o": [2, 3, 3], "other": ["a", "b", 1, 2, 3], "n": 0}


# -- item 1: memory, in-process --------------------------------------------------------------------

def test_parameters_too_big_for_the_memory_cap_are_a_clean_error() -> None:
    """1.4 M empty objects (a 4 MiB MCP request) used to abort the process (Lua panic, exit 134)."""
    sb = Sandbox("Lua tool 'echo'", 5)
    try:
        started = time.monotonic()
        with pytest.raises(ExtensionError) as info:
            sb.table({"items": [{}] * 1_400_000})
        assert "does not fit the sandbox's memory" in info.value.message
        assert time.monotonic() - started < 5
        assert sb.execute("return 1 + 1", "after.lua") == 2  # the state is still usable
    finally:
        sb.close()


@pytest.mark.parametrize("count", [3_000_000, 600_000] if STRESS else [600_000])
def test_json_decode_beyond_the_memory_cap_is_a_clean_error(count: int) -> None:
    """A 3 M-number array in json.decode used to hang the process. The small case fills most of
    the cap first, so the decoded value cannot fit either."""
    fill = "" if count >= 3_000_000 else "local fill = {} for i = 1, 12 do fill[i] = ('x'):rep(4e6) .. i end "
    text = "[" + ",".join(["1"] * count) + "]"
    started = time.monotonic()
    result = _run(fill + "local ok, err = pcall(json.decode, text) return {ok, err}", 10, text=text)
    assert result[0] is False and "does not fit the sandbox's memory" in result[1], result
    assert time.monotonic() - started < 10


def test_results_near_the_memory_cap_convert_without_a_panic() -> None:
    """Converting a result wraps each Lua table (a registry slot each): near the cap that must not
    be an unprotected allocation failure."""
    source = ("local fill = {} for i = 1, 15 do fill[i] = ('x'):rep(4e6) .. i end "
              "local t = {} for i = 1, 20000 do t[i] = {i} end return t")
    try:
        result = _run(source, 10)
    except ExtensionError as exc:  # the cap may be reached while building t: a clean error is fine too
        assert "ran out of memory" in exc.message
    else:
        assert len(result) == 20000 and result[-1] == [20000]


# -- item 2: worker processes ----------------------------------------------------------------------

TOOL = "tool = {name = 'echo', parameters = {}}\nfunction tool.execute(params) return {n = #(params.items or {})} end\n"


def _job(source: str = TOOL, params: dict[str, Any] | None = None, timeout: float = 0.3) -> dict[str, Any]:
    return {"kind": "tool", "label": "Lua tool 'echo'", "source": source, "file": "echo.lua", "timeout": timeout,
            "config": {}, "env": {}, "params": params or {}}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in f)
    except FileNotFoundError:
        return False


def test_a_worker_that_does_not_answer_is_killed_at_its_deadline() -> None:
    """A worker frozen the way a C loop freezes it (SIGSTOP: no hook, no reply) costs its call the
    timeout plus the grace, then it is killed and the next call gets a fresh worker."""
    with LuaPool(2, grace=0.3) as pool:
        assert pool.run(_job(params={"items": [1, 2]}), label="echo", timeout=0.3) == {"n": 2}
        (pid,) = pool.pids()
        os.kill(pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(Timeout) as info:
            pool.run(_job(), label="Lua tool 'echo'", timeout=0.3)
        assert "worker was killed" in info.value.message and "0.3 s" in info.value.message
        assert time.monotonic() - started < 0.3 + 0.3 + 1.5
        assert not _alive(pid)
        assert pool.run(_job(params={"items": [1]}), label="echo", timeout=0.3) == {"n": 1}
        assert pid not in pool.pids()


def test_closing_the_pool_ends_stuck_calls_at_once() -> None:
    """Shutdown never waits for a script: close() kills busy workers and their callers get an error."""
    pool = LuaPool(2)
    assert pool.run(_job(), label="echo", timeout=5) == {"n": 0}
    (pid,) = pool.pids()
    os.kill(pid, signal.SIGSTOP)
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            pool.run(_job(timeout=30), label="Lua tool 'echo'", timeout=30)
        except BaseException as exc:  # noqa: BLE001 (recorded for the assertion)
            outcome.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    time.sleep(0.3)
    started = time.monotonic()
    pool.close()
    thread.join(5)
    assert not thread.is_alive() and time.monotonic() - started < 2
    assert isinstance(outcome[0], ExtensionError) and "shutting down" in outcome[0].message
    assert not _alive(pid)


# -- over a real `ctx serve mcp` -------------------------------------------------------------------

ECHO = """
tool = {name = "echo", description = "count items", parameters = {
  {name = "items", type = "array", description = "anything"}}}
function tool.execute(params, context)
  return {n = #(params.items or {}), hits = #context.search("zebra")}
end
"""
MOVE = """
tool = {name = "move", description = "a C loop over 1e10 slots", parameters = {}}
function tool.execute(params) return table.move({}, 1, 1e10, 1, {}) end
"""
REP = """
tool = {name = "rep", description = "string.rep with a numeric string", parameters = {}}
function tool.execute(params) return #string.rep("x", "30000000") end
"""


@pytest.fixture(scope="module")
def lua_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("lua-limits")
    (base / "docs").mkdir()
    (base / "docs" / "zoo.md").write_text("# Zoo\n\nThe zebra sleeps.\n")
    for name, body in (("echo", ECHO), ("move", MOVE), ("rep", REP)):
        (base / f"{name}.lua").write_text(body)
    cfg = base / "ctx.toml"
    cfg.write_text('[db]\npath = "kb.sqlite"\n[embedding]\nprovider = "disabled"\n'
                   '[connectors.filesystem.docs]\nroot = "docs"\n'
                   '[tools.script.echo]\npath = "echo.lua"\ntimeout = 1\n'
                   '[tools.script.move]\npath = "move.lua"\ntimeout = 1\n'
                   '[tools.script.rep]\npath = "rep.lua"\ntimeout = 1\n')
    subprocess.run(_cli("ctx", "sync", "all", "--config", str(cfg)), check=True, env=server_env(base),
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    return cfg


@pytest.fixture
def server(lua_config: Path, tmp_path: Path) -> Iterator[HttpServer]:
    srv = spawn_ctx_http(lua_config, tmp_path / "server", CAIRN_RAISE_ERRORS="1")
    try:
        yield srv
    finally:
        srv.close()


def _mcp_call(url: str, name: str, arguments: dict[str, Any] | bytes, timeout: float = 30) -> dict[str, Any]:
    """One stateless MCP ``tools/call``; returns the JSON-RPC response."""
    body = arguments if isinstance(arguments, bytes) else json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}).encode()
    r = httpx.post(url + "/mcp", content=body, timeout=timeout,
                   headers={"content-type": "application/json", "accept": "application/json, text/event-stream",
                            "mcp-protocol-version": "2025-06-18"})
    assert r.status_code == 200, r.text[:500]
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in r.text.splitlines() if line.startswith("data:") and line[5:].strip()]
        return dict(json.loads(data[-1]))
    return dict(r.json())


def _text(response: dict[str, Any]) -> str:
    return str(response["result"]["content"][0]["text"])


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as f:
                found += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            pass
    return found


def test_a_4_mib_array_parameter_is_an_error_result_and_the_server_survives(server: HttpServer) -> None:
    count = 1_390_000  # "{}," is 3 bytes: 1.39 M of them fill the 4 MiB request limit
    payload = ('{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": '
               '{"items": [' + ",".join(["{}"] * count) + "]}}}").encode()
    reply = _mcp_call(server.url, "echo", payload, timeout=60)
    assert reply["result"]["isError"] is True and "do not fit the sandbox's memory" in _text(reply), reply
    assert server.alive()
    ok = _mcp_call(server.url, "echo", {"items": [1, 2, 3]})
    assert json.loads(_text(ok)) == {"result": {"n": 3, "hits": 1}}, ok


def test_c_loops_and_coerced_sizes_answer_errors_over_mcp(server: HttpServer) -> None:
    started = time.monotonic()
    reply = _mcp_call(server.url, "move", {})
    assert reply["result"]["isError"] is True and "time limit of 1 s" in _text(reply), reply
    assert time.monotonic() - started < 1 + 3
    reply = _mcp_call(server.url, "rep", {})
    assert reply["result"]["isError"] is True and "over the sandbox limit" in _text(reply), reply


def test_stuck_lua_calls_neither_block_the_server_nor_its_shutdown(server: HttpServer) -> None:
    """Eight calls whose workers never answer (frozen like a C loop) used to hold every Lua slot
    forever and make SIGTERM hang. Now each answers after its timeout plus the grace, the server
    answers everything else meanwhile, later Lua calls work, and SIGTERM exits 0 at once."""
    url = server.url
    with ThreadPoolExecutor(8) as warm:  # several idle workers
        assert all("isError" not in r["result"] or not r["result"]["isError"]
                   for r in warm.map(lambda _: _mcp_call(url, "echo", {"items": [1]}), range(8)))
    workers = _children(server.pid)
    assert workers, "ctx serve mcp runs Lua in worker processes"
    for pid in workers:
        os.kill(pid, signal.SIGSTOP)
    calls = ThreadPoolExecutor(10)
    started = time.monotonic()
    futures = [calls.submit(_mcp_call, url, "echo", {"items": [i]}) for i in range(10)]
    time.sleep(0.3)
    # the rest of the server answers at once while those calls are stuck
    assert httpx.get(url + "/health", timeout=5).status_code == 200
    r = httpx.post(url + "/tools/search", json={"query": "zebra"}, timeout=5)
    assert r.status_code == 200 and r.json()["results"], r.text
    replies = [f.result(timeout=30) for f in futures]
    elapsed = time.monotonic() - started
    calls.shutdown()
    killed = [r for r in replies if r["result"].get("isError") and "worker was killed" in _text(r)]
    assert len(killed) == min(len(workers), 10), replies
    assert elapsed < 2 * (1 + 1) + 5, elapsed  # each frozen worker costs at most timeout + grace
    for pid in workers:
        assert not _alive(pid)
    assert json.loads(_text(_mcp_call(url, "echo", {"items": [1, 2]})))["result"]["n"] == 2

    # SIGTERM while Lua calls are stuck: a clean, prompt exit
    for pid in _children(server.pid):
        os.kill(pid, signal.SIGSTOP)
    stuck = ThreadPoolExecutor(8)
    pending = [stuck.submit(_mcp_call_quietly, url) for _ in range(8)]
    time.sleep(0.5)
    started = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    code = server.proc.wait(15)
    assert code == 0, server.stderr_tail()
    assert time.monotonic() - started < 5, time.monotonic() - started
    stuck.shutdown(wait=True)
    assert all(f.done() for f in pending)


def _mcp_call_quietly(url: str) -> None:
    try:
        _mcp_call(url, "echo", {"items": [1]}, timeout=20)
    except (httpx.HTTPError, AssertionError):
        pass
