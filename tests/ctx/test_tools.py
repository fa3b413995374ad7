"""`ctx tool list` / `ctx tool test`, and how Lua tool declarations are read and checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cairn_servers.core.errors import CairnError, ExtensionError, InvalidInput, NotFound
from cairn_servers.ctx import config
from cairn_servers.ctx.tools import Toolbox

from .conftest import config_file
from .test_http import REPO, example_kb


def ctx(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cairn_servers.ctx.cli", *args], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO / "src")), timeout=60)


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory, ctx_module_backend: str) -> Path:
    """The example knowledge base, on each storage backend in turn (``ctx_module_backend``)."""
    return example_kb(tmp_path_factory.mktemp("kb"))


def test_tool_list(kb: Path) -> None:
    r = ctx("tool", "list", "--config", str(kb), "--json")
    assert r.returncode == 0, r.stderr
    tools = {t["name"]: t for t in json.loads(r.stdout)}
    assert list(tools) == ["search", "get", "sources", "find_mentions", "spin"]
    assert tools["find_mentions"]["parameters"]["required"] == ["term"]
    text = ctx("tool", "list", "--config", str(kb), "--text").stdout
    assert "find_mentions  (lua)  List the documents that mention a term" in text
    assert "    term: string (required)  word or phrase to look for" in text


def test_tool_test_runs_a_tool_with_typed_params(kb: Path) -> None:
    r = ctx("tool", "test", "find_mentions", "--param", "term=deploy", "--param", "limit=1", "--config", str(kb),
            "--json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)["result"]
    assert result["count"] == 1 and result["heading"] == "Mentions: deploy"
    # string parameters stay text even when they parse as JSON
    r = ctx("tool", "test", "find_mentions", "--param", "term=2024", "--config", str(kb), "--json")
    assert r.returncode == 0, r.stderr
    r = ctx("tool", "test", "search", "--param", "query=VPN", "--config", str(kb), "--json")
    assert json.loads(r.stdout)["results"][0]["source"] == "script:faq"


def test_tool_test_errors_carry_exit_codes(kb: Path) -> None:
    r = ctx("tool", "test", "find_mentions", "--param", "limit=x", "--config", str(kb))
    assert r.returncode == 2 and "term: is required" in r.stderr
    r = ctx("tool", "test", "nope", "--config", str(kb))
    assert r.returncode == 3 and "No tool named 'nope'" in r.stderr
    r = ctx("tool", "test", "spin", "--param", "seconds=1", "--config", str(kb))
    assert r.returncode == 6 and "exceeded its time limit of 0.3 s" in r.stderr
    r = ctx("tool", "test", "find_mentions", "--param", "oops", "--config", str(kb))
    assert r.returncode == 2 and "use KEY=VALUE" in r.stderr


def _box(tmp_path: Path, script: str, name: str = "t", extra: str = "") -> Toolbox:
    (tmp_path / "t.lua").write_text(script)
    return Toolbox(config.load(config_file(
        tmp_path, f'[db]\npath = "kb.sqlite"\n[tools.script.{name}]\npath = "t.lua"\ntimeout = 0.5\n{extra}')))


@pytest.mark.parametrize("script, kind, fragment", [
    ("tool = {", ExtensionError, "Lua syntax error"),
    ("x = 1", ExtensionError, "does not define a global `tool` table"),
    ("tool = {}", ExtensionError, "must define `function tool.execute(params, context)`"),
    ("tool = {parameters = {{name = 'a', type = 'date'}}}\nfunction tool.execute() end", ExtensionError,
     "type 'date' is not one of"),
    ("tool = {parameters = {{type = 'string'}}}\nfunction tool.execute() end", ExtensionError, "needs a string `name`"),
    ("while true do end", CairnError, "exceeded its time limit"),
    ("os.exit(1)", ExtensionError, "global 'os'"),
])
def test_broken_declarations_are_reported_at_load(tmp_path: Path, script: str, kind: type[CairnError],
                                                  fragment: str) -> None:
    with pytest.raises(kind) as info:
        _box(tmp_path, script)
    assert fragment in info.value.message and "Lua tool 't'" in info.value.message


def test_tool_names_and_files_are_checked(tmp_path: Path) -> None:
    ok = "tool = {}\nfunction tool.execute() return 1 end\n"
    with pytest.raises(InvalidInput, match="'search' is a built-in tool's name"):
        _box(tmp_path, ok, name="search")
    with pytest.raises(InvalidInput, match="tool names use lowercase letters"):
        _box(tmp_path, ok, name="\"Bad Name\"")
    with pytest.raises(InvalidInput, match=r"allow_hosts: must be a list"):
        _box(tmp_path, ok, extra='allow_hosts = "example.org"\n')
    cfg = config_file(tmp_path, '[db]\npath = "kb.sqlite"\n[tools.script.gone]\npath = "missing.lua"\n', "m.toml")
    with pytest.raises(NotFound, match="missing.lua does not exist"):
        Toolbox(config.load(cfg))


def test_params_get_defaults_and_context_config(tmp_path: Path) -> None:
    box = _box(tmp_path, """
tool = {description = "d", parameters = {{name = "n", type = "integer", default = 7}, {name = "s", type = "string"}}}
function tool.execute(params, context)
  return {n = params.n, s = params.s, label = context.config.label, secret = env.get("HOME")}
end
""", extra='label = "from config"\n')
    assert box.call("t", {}) == {"result": {"n": 7, "label": "from config"}}
    assert box.call("t", {"n": 1, "s": "x"}) == {"result": {"n": 1, "s": "x", "label": "from config"}}
    with pytest.raises(InvalidInput, match="n: expected integer, got number"):
        box.call("t", {"n": 1.5})
    with pytest.raises(InvalidInput, match="Invalid parameter for 't'"):
        box.call("t", {"other": 1})
    box.close()


def test_http_from_tools_needs_allowed_hosts_and_honours_the_budget(tmp_path: Path) -> None:
    import socket
    import time

    # A listener that accepts and never answers: the call must end within the tool's budget.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    port = sock.getsockname()[1]
    script = f"""
tool = {{}}
function tool.execute(params, context)
  local ok, err = pcall(http.get, "http://127.0.0.1:{port}/slow", {{timeout = 30}})
  return {{ok = ok, err = err}}
end
"""
    try:
        box = _box(tmp_path, script, extra='allow_hosts = ["127.0.0.1"]\n')
        started = time.monotonic()
        out = box.call("t", {})
        elapsed = time.monotonic() - started
        # The 0.5 s budget ended the call, not the script's 30 s timeout. The bound includes starting the Lua
        # worker process, which took over 3 s at load 10 on two cores; 10 s still tells 0.5 s from 30 s.
        assert elapsed < 10, elapsed
        assert out["result"]["ok"] is False and "did not answer" in out["result"]["err"]
        box.close()
        (tmp_path / "n").mkdir()
        box = _box(tmp_path / "n", script)
        out = box.call("t", {})
        assert "host '127.0.0.1' is not allowed" in out["result"]["err"]
        box.close()
    finally:
        sock.close()
