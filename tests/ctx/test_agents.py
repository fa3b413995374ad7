"""Agents as prompts (issue 17 item 3): ``[agents.inline|script.NAME]`` checked at load, resolved the
same way over MCP (``prompts/list``, ``prompts/get``, the official SDK client over stdio and HTTP),
HTTP (``GET /agents``, ``POST /agents/{name}`` on a real server; ``GET /agents/{name}`` runs nothing) and the CLI (``ctx agent list|show``),
and Lua agents that build their prompt from a search of a real, synced knowledge base."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from cairn_servers.core.errors import CairnError, ExtensionError, InvalidInput, NotFound, Timeout
from cairn_servers.ctx import config as cfg
from cairn_servers.ctx.agents import Agents
from cairn_servers.ctx.http import create_app
from cairn_servers.ctx.ops import OPS
from cairn_servers.ctx.service import Service

from .conftest import config_file, serving, synced, write

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.filterwarnings("ignore:.*(removed|deprecated) as of 2026")

DOCS = {
    "runbooks/db.md": "# Database failover\n\nPromote the replica with `pg_ctl promote`, then repoint the pooler.\n",
    "runbooks/cache.md": "# Cache outage\n\nFlush the cache nodes one at a time; the database absorbs the load.\n",
    "guide/style.md": "# Writing style\n\nShort sentences. Name the database table you change.\n",
}

CONFIG = """
[db]
path = "data/ctx.sqlite"

[connectors.filesystem.runbooks]
root = "docs/runbooks"

[connectors.filesystem.guide]
root = "docs/guide"

[agents.inline.writer]
description = "Writes docs in the house style"
tools = ["search", "get"]
search_mode = "keyword"
search_sources = ["guide"]
arguments = [
  { name = "topic", description = "what to write about", required = true },
  { name = "tone", default = "plain" },
  { name = "audience" },
]
system_prompt = "Write about {{topic}} in a {{tone}} tone for {{ audience }}."

[agents.script.responder]
path = "agents/responder.lua"
timeout = 5
description = "Starts from the runbooks that match"
tools = ["search", "get", "sources"]
search_sources = ["runbooks"]
search_limit = 1
arguments = [{ name = "incident", required = true }]
system_prompt = "Incident: {{incident}}."
team = "platform"
"""

RESPONDER = """
local agent = {}
function agent.resolve(args, config, context)
  local hits = context.search(args.incident)          -- the agent's defaults: runbooks, limit 1
  local all = context.search("database", { limit = 5, source = "guide" })
  local titles = {}
  for _, h in ipairs(hits) do titles[#titles + 1] = h.title end
  return {
    system = context.system_prompt .. " Team " .. config.team .. ". Runbooks: " .. table.concat(titles, ", ")
      .. ". Guide hits: " .. #all .. ".",
    messages = { { role = "assistant", content = "Found " .. #hits .. " runbook(s)." } },
  }
end
return agent
"""


def make_kb(root: Path, body: str = CONFIG, scripts: dict[str, str] | None = None) -> Path:
    write(root / "docs", DOCS)
    write(root, {"agents/responder.lua": RESPONDER, **(scripts or {})})
    return synced(config_file(root, body))


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory, ctx_module_backend: str) -> Path:
    """The agents' knowledge base, on each storage backend in turn (``ctx_module_backend``)."""
    return make_kb(tmp_path_factory.mktemp("agents"))


@pytest.fixture(scope="module")
def agents(kb: Path) -> Iterator[Agents]:
    conf = cfg.load(kb)
    svc = Service(conf)
    found = Agents(conf, lambda: svc)
    yield found
    found.close()
    svc.close()


WRITER_SYSTEM = "Write about failover in a plain tone for ."
RESPONDER_SYSTEM = "Incident: database failover. Team platform. Runbooks: Database failover. Guide hits: 1."


# ---- configuration ------------------------------------------------------------------------------

AGENT = "[agents.inline.a]\nsystem_prompt = 'x'\n"


@pytest.mark.parametrize("body, message", [
    ("[agents.a]\nsystem_prompt = 'x'\n",
     "[agents] a: unknown agent kind. Write [agents.inline.a] (a prompt in this file) or [agents.script.a]"),
    ("[agents.inline.a]\ndescription = 'd'\n",
     "[agents.inline.a] system_prompt: is required: the prompt the agent starts from"),
    ("[agents.inline.a]\nsystem_prompt = '  '\n", "[agents.inline.a] system_prompt: must not be empty"),
    (AGENT + "prompt = 'y'\n", "[agents.inline.a] prompt: unknown key. Known keys: description, system_prompt,"),
    (AGENT + "tools = ['search', 'deploy']\n",
     "[agents.inline.a] tools: 'deploy' is not a tool. Tools: search, get, sources."),
    (AGENT + "tools = 'search'\n", "[agents.inline.a] tools: must be a list of tool names"),
    (AGENT + "tools = ['get', 'get']\n", "[agents.inline.a] tools: lists a tool twice"),
    (AGENT + "search_mode = 'fuzzy'\n",
     "[agents.inline.a] search_mode: must be one of keyword, semantic, hybrid, not 'fuzzy'"),
    (AGENT + "search_sources = ['wiki']\n",
     "[agents.inline.a] search_sources: 'wiki' matches no connector. Sources: none configured."),
    (AGENT + "search_limit = 0\n", "[agents.inline.a] search_limit: must be between 1 and 1000, not 0"),
    ("[agents.inline.a]\nsystem_prompt = 'Hi {{who}}'\n",
     "[agents.inline.a] system_prompt: uses {{who}}, which is not an argument of this agent. Declare it in"),
    ("[agents.inline.a]\nsystem_prompt = 'Hi {{who}}'\narguments = [{ name = 'whom' }]\n",
     "[agents.inline.a] system_prompt: uses {{who}}, which is not an argument of this agent. Arguments: whom."),
    (AGENT + "arguments = 'who'\n", "[agents.inline.a] arguments: must be a list of tables"),
    (AGENT + "arguments = ['who']\n", "[agents.inline.a] arguments[1]: must be a table such as"),
    (AGENT + "arguments = [{ name = 'a b' }]\n", "[agents.inline.a] arguments[1]: name: must be a non-empty name"),
    (AGENT + "arguments = [{ name = 'x' }, { name = 'x' }]\n",
     "[agents.inline.a] arguments[2]: name: 'x' is declared twice"),
    (AGENT + "arguments = [{ name = 'x', kind = 'int' }]\n",
     "[agents.inline.a] arguments[1]: kind: unknown key. Known keys: name, description, required, default."),
    (AGENT + "arguments = [{ name = 'x', required = 'yes' }]\n",
     "[agents.inline.a] arguments[1]: required: must be true or false, not 'yes'"),
    (AGENT + "arguments = [{ name = 'x', default = 3 }]\n",
     "[agents.inline.a] arguments[1]: default: must be a string (arguments are text), not 3"),
    (AGENT + "arguments = [{ name = 'x', required = true, default = 'y' }]\n",
     "[agents.inline.a] arguments[1]: default: a required argument has no default"),
    ("[agents.inline.Bad]\nsystem_prompt = 'x'\n", "[agents.inline.Bad]: agent names use lowercase letters"),
    ("[agents.script.a]\ntimeout = 3\n", "[agents.script.a] path: is required"),
    ("[agents.script.a]\npath = 'a.lua'\ntimeout = 0\n", "[agents.script.a] timeout: must be between 0.001 and 3600"),
    ("[agents.script.a]\npath = 'a.lua'\nallow_hosts = 'x'\n", "[agents.script.a] allow_hosts: must be a list"),
    ("[agents.inline.a]\nsystem_prompt = 'x'\n[agents.script.a]\npath = 'a.lua'\n",
     "[agents.script] a: is defined both inline and as a script"),
])
def test_bad_agent_config_names_the_agent_and_the_field(tmp_path: Path, body: str, message: str) -> None:
    path = config_file(tmp_path, body)
    with pytest.raises(InvalidInput) as info:
        cfg.load(path)
    assert info.value.message.startswith(f"{path}: ")
    assert message in info.value.message


def test_agent_config_accepts_lua_tools_and_round_trips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAM_TOKEN", "s3cret-value")
    path = config_file(tmp_path, '[tools.script.lookup]\npath = "t.lua"\n'
                                 '[agents.script.b]\npath = "b.lua"\ntools = ["lookup", "search"]\n'
                                 'api_token = "${TEAM_TOKEN}"\nsearch_limit = 4\n')
    conf = cfg.load(path)
    (agent,) = conf.agents
    assert agent.tools == ("lookup", "search") and agent.path == tmp_path / "b.lua"
    assert agent.config == {"api_token": "s3cret-value"} and agent.search_limit == 4
    shown = cfg.effective(conf)["agents"]["script"]["b"]
    assert shown["api_token"] == "***" and shown["search_limit"] == 4 and shown["path"] == str(tmp_path / "b.lua")
    again = config_file(tmp_path, cfg.to_toml(cfg.effective(cfg.load(config_file(tmp_path, CONFIG, "c.toml")))),
                        "again.toml")
    assert cfg.load(again).agents == cfg.load(tmp_path / "c.toml").agents


def test_builtin_tool_names_are_the_mcp_operations() -> None:
    assert cfg.BUILTIN_TOOLS == tuple(op.mcp for op in OPS.on("mcp"))


# ---- resolving ----------------------------------------------------------------------------------


def test_inline_agent_fills_arguments_and_defaults(agents: Agents) -> None:
    got = agents.resolve("writer", {"topic": "failover"})
    assert got["system"] == WRITER_SYSTEM and got["messages"] == []
    assert got["tools"] == ["search", "get"] and got["kind"] == "inline"
    assert got["search"] == {"mode": "keyword", "sources": ["guide"], "limit": None}
    assert agents.resolve("writer", {"topic": "x", "tone": "warm", "audience": "SREs"})["system"] == \
        "Write about x in a warm tone for SREs."
    assert [a["name"] for a in agents.describe_all()] == ["writer", "responder"]


@pytest.mark.parametrize("name, args, error, message", [
    ("writer", {}, InvalidInput, "Agent 'writer': missing required argument 'topic': what to write about. "
                                 "Arguments: topic (required), tone, audience."),
    ("writer", {"topic": "x", "colour": "red"}, InvalidInput,
     "Agent 'writer': unknown argument 'colour'. Arguments: topic (required), tone, audience."),
    ("writer", {"topic": 3}, InvalidInput, "Agent 'writer': argument 'topic' must be a string, not 3."),
    ("writer", ["topic"], InvalidInput, "The arguments of agent 'writer' must be an object of strings."),
    ("nobody", {}, NotFound, "No agent named 'nobody'. Agents: writer, responder."),
])
def test_bad_arguments_are_refused_before_any_work(agents: Agents, name: str, args: Any,
                                                   error: type[CairnError], message: str) -> None:
    with pytest.raises(error) as info:
        agents.resolve(name, args)
    assert info.value.message == message


def test_lua_agent_builds_its_prompt_from_a_search_with_the_agents_defaults(agents: Agents) -> None:
    got = agents.resolve("responder", {"incident": "database failover"})
    # search_sources = ["runbooks"], search_limit = 1: the failover runbook only (the cache runbook and the
    # style guide also say "database"); the script's own `source = "guide"` wins over the default.
    assert got["system"] == RESPONDER_SYSTEM
    assert got["messages"] == [{"role": "assistant", "content": "Found 1 runbook(s)."}]
    assert got["kind"] == "script" and got["search"] == {"mode": "keyword", "sources": ["runbooks"], "limit": 1}


BROKEN = {
    "agents/ret_string.lua": "agent = {}\nfunction agent.resolve() return 'hi' end\n",
    "agents/ret_tools.lua": "agent = {}\nfunction agent.resolve() return { system = 's', tools = { 'get' } } end\n",
    "agents/bad_msg.lua": "agent = {}\nfunction agent.resolve() return { system = 's', "
                          "messages = { { role = 'system', content = 'x' } } } end\n",
    "agents/no_resolve.lua": "agent = { description = 'x' }\n",
    "agents/syntax.lua": "agent = {}\nfunction agent.resolve(\n",
    "agents/loop.lua": "agent = {}\nfunction agent.resolve() while true do end end\n",
    "agents/keeps.lua": "agent = {}\nfunction agent.resolve(args, config) return { messages = {\n"
                        "  { role = 'user', content = config.search_mode .. ' ' .. #config.search_sources } } } end\n",
    "agents/fails.lua": "agent = {}\nfunction agent.resolve(args, config, context) return context.get('nope') end\n",
}


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory, ctx_module_backend: str) -> Iterator[Agents]:
    body = "[db]\npath = 'data/ctx.sqlite'\n[connectors.filesystem.runbooks]\nroot = 'docs/runbooks'\n" + "".join(
        f"[agents.script.{Path(p).stem.replace('_', '-')}]\npath = '{p}'\ntimeout = 0.5\n"
        + ("system_prompt = 'Kept.'\n" if "keeps" in p else "") for p in BROKEN)
    path = make_kb(tmp_path_factory.mktemp("broken"), body, BROKEN)
    conf = cfg.load(path)
    svc = Service(conf)
    found = Agents(conf, lambda: svc)
    yield found
    found.close()
    svc.close()


@pytest.mark.parametrize("name, error, message", [
    ("ret-string", ExtensionError, "Lua agent 'ret-string': agent.resolve must return a table {system = ..., "
                                   "messages = ...}, not str."),
    ("ret-tools", ExtensionError, "Lua agent 'ret-tools': agent.resolve returned 'tools'; it may return only "
                                  "`system` and `messages` (tools and search defaults are set in ctx.toml)."),
    ("bad-msg", ExtensionError, "Lua agent 'bad-msg': messages[1] must be {role = \"user\"|\"assistant\", "
                                "content = \"text\"}."),
    ("no-resolve", ExtensionError, "Lua agent 'no-resolve': no_resolve.lua must define "
                                   "`function agent.resolve(args, config, context)`"),
    ("syntax", ExtensionError, "Lua agent 'syntax': Lua syntax error:"),
    ("loop", Timeout, "Lua agent 'loop'"),
    ("fails", NotFound, "No document with id 'nope'."),
])
def test_lua_agent_failures_are_clear_errors(broken: Agents, name: str, error: type[CairnError],
                                             message: str) -> None:
    with pytest.raises(error) as info:
        broken.resolve(name, {})
    assert message in info.value.message, info.value.message


def test_lua_agent_may_leave_the_configured_system_prompt(broken: Agents) -> None:
    got = broken.resolve("keeps")
    assert got["system"] == "Kept."
    assert got["messages"] == [{"role": "user", "content": "keyword 0"}]  # the search defaults are in config


# ---- HTTP ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base(kb: Path) -> Iterator[str]:
    with serving(create_app(cfg.load(kb))) as url:
        yield url


def test_http_lists_and_resolves_agents(base: str, agents: Agents) -> None:
    listed = httpx.get(f"{base}/agents").json()
    assert listed == {"agents": agents.describe_all()}
    assert listed["agents"][0]["arguments"] == [
        {"name": "topic", "description": "what to write about", "required": True},
        {"name": "tone", "description": "", "required": False, "default": "plain"},
        {"name": "audience", "description": "", "required": False}]
    r = httpx.post(f"{base}/agents/writer", json={"topic": "failover"})
    assert r.status_code == 200 and r.json()["system"] == WRITER_SYSTEM
    r = httpx.post(f"{base}/agents/responder", json={"incident": "database failover"})
    assert r.status_code == 200 and r.json()["system"] == RESPONDER_SYSTEM


def test_http_get_shows_an_agent_without_running_it(base: str, agents: Agents) -> None:
    """A GET never runs an agent (a web page can make the browser send one): it shows the definition,
    as GET /agents lists it, with no prompt resolved; arguments in a GET are refused, naming the POST."""
    for name in ("writer", "responder"):
        r = httpx.get(f"{base}/agents/{name}")
        assert r.status_code == 200 and r.json() == next(a for a in agents.describe_all() if a["name"] == name)
        assert "system" not in r.json() and "messages" not in r.json()
    r = httpx.get(f"{base}/agents/responder", params={"incident": "x"})
    assert r.status_code == 400 and r.json()["error"]["message"] == (
        "GET /agents/responder shows the agent without running it and takes no parameters. To resolve its "
        'prompt, POST /agents/responder with its arguments as a JSON body (such as {"topic": "deploys"}).')


@pytest.mark.parametrize("method, path, body, status, code, message", [
    ("POST", "/agents/writer", None, 400, "bad_request", "Agent 'writer': missing required argument 'topic': what "
                                                         "to write about. Arguments: topic (required), tone, audience."),
    ("POST", "/agents/writer", {"topic": "a", "x": "1"}, 400, "bad_request", "Agent 'writer': unknown argument 'x'."),
    ("POST", "/agents/writer", {"topic": 5}, 400, "bad_request", "Agent 'writer': argument 'topic' must be a string"),
    ("POST", "/agents/writer", ["a"], 400, "bad_request", "The arguments of agent 'writer' must be an object"),
    ("POST", "/agents/writer?topic=a", None, 400, "bad_request", "POST /agents/writer takes the agent's arguments "
                                                                 "as a JSON body"),
    ("POST", "/agents/nobody", {}, 404, "not_found", "No agent named 'nobody'. Agents: writer, responder."),
    ("GET", "/agents/nobody", None, 404, "not_found", "No agent named 'nobody'. Agents: writer, responder."),
    ("GET", "/agents?verbose=1", None, 400, "bad_request", "Invalid parameter for 'agent_list': verbose: is not an "
                                                           "allowed"),
])
def test_http_errors_are_the_envelope(base: str, method: str, path: str, body: Any, status: int, code: str,
                                      message: str) -> None:
    r = httpx.request(method, f"{base}{path}", json=body)
    assert r.status_code == status and r.json()["error"]["code"] == code
    assert r.json()["error"]["message"].startswith(message), r.text


def test_openapi_lists_the_agent_routes(base: str) -> None:
    paths = httpx.get(f"{base}/openapi.json").json()["paths"]
    assert paths["/agents"]["get"]["operationId"] == "agent_list"
    show = paths["/agents/{name}"]["post"]
    assert show["operationId"] == "agent_show"
    assert [(p["name"], p["in"]) for p in show["parameters"]] == [("name", "path")]
    assert show["requestBody"]["content"]["application/json"]["schema"]["type"] == "object"
    assert {"400", "404", "408"} <= set(show["responses"])
    definition = paths["/agents/{name}"]["get"]
    assert definition["operationId"] == "agent_definition" and "408" not in definition["responses"]
    assert httpx.get(f"{base}/").json()["agents"] == "/agents"


def test_agents_need_the_token(kb: Path) -> None:
    with serving(create_app(cfg.load(kb), auth_token="s3cret-token")) as url:
        assert httpx.get(f"{url}/agents").status_code == 401
        assert httpx.get(f"{url}/agents/writer").status_code == 401
        r = httpx.post(f"{url}/agents/writer", json={"topic": "x"}, headers={"Authorization": "Bearer s3cret-token"})
        assert r.status_code == 200


# ---- MCP ----------------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO / "src"), CTX_OUTPUT_FORMAT="")


async def _prompts(server: Any, agents: Agents) -> None:
    async with Client(server, cache=None) as client:
        assert client.server_capabilities is not None and client.server_capabilities.prompts is not None
        prompts = (await client.list_prompts()).prompts
        assert [p.name for p in prompts] == ["writer", "responder"]
        assert prompts[0].description == "Writes docs in the house style"
        assert [(a.name, a.description, a.required) for a in prompts[0].arguments or []] == [
            ("topic", "what to write about", True), ("tone", None, None), ("audience", None, None)]

        got = await client.get_prompt("writer", {"topic": "failover"})
        assert got.description == "Writes docs in the house style"
        assert [(m.role, m.content.text) for m in got.messages] == [("user", WRITER_SYSTEM)]  # type: ignore[union-attr]
        got = await client.get_prompt("responder", {"incident": "database failover"})
        assert [(m.role, m.content.text) for m in got.messages] == [  # type: ignore[union-attr]
            ("user", RESPONDER_SYSTEM), ("assistant", "Found 1 runbook(s).")]

        for name, args, message in [
            ("writer", {}, "Agent 'writer': missing required argument 'topic': what to write about. "
                           "Arguments: topic (required), tone, audience."),
            ("writer", {"topic": "a", "x": "1"}, "Agent 'writer': unknown argument 'x'. Arguments: topic "
                                                 "(required), tone, audience."),
            ("nobody", {}, "Unknown prompt: 'nobody'"),
        ]:
            with pytest.raises(MCPError) as exc:
                await client.get_prompt(name, args)
            assert exc.value.error.code == -32602 and exc.value.error.message == message


def test_mcp_prompts_over_streamable_http(base: str, agents: Agents) -> None:
    asyncio.run(asyncio.wait_for(_prompts(f"{base}/mcp", agents), 60))


def test_mcp_prompts_over_stdio(kb: Path, agents: Agents) -> None:
    params = StdioServerParameters(command=sys.executable, env=_env(),
                                   args=["-m", "cairn_servers.ctx.cli", "serve", "mcp", "--stdio", "--config", str(kb)])
    asyncio.run(asyncio.wait_for(_prompts(params, agents), 60))


def test_no_agents_no_prompts_capability(tmp_path: Path) -> None:
    path = config_file(tmp_path, "[db]\npath = 'data/ctx.sqlite'\n")

    async def check() -> None:
        async with Client(f"{url}/mcp", cache=None) as client:
            assert client.server_capabilities is not None and client.server_capabilities.prompts is None
            with pytest.raises(MCPError) as exc:
                await client.get_prompt("writer", {})
            assert exc.value.error.code == -32602

    with serving(create_app(cfg.load(path))) as url:
        asyncio.run(asyncio.wait_for(check(), 60))
        assert httpx.get(f"{url}/agents").json() == {"agents": []}


# ---- CLI ----------------------------------------------------------------------------------------


def _ctx(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cairn_servers.ctx.cli", *args], capture_output=True, text=True,
                          env=_env(), timeout=60)


def test_cli_agent_list_and_show(kb: Path, agents: Agents) -> None:
    r = _ctx("agent", "list", "--config", str(kb), "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == agents.describe_all()
    r = _ctx("agent", "show", "responder", "--arg", "incident=database failover", "--config", str(kb), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == agents.resolve("responder", {"incident": "database failover"})
    r = _ctx("agent", "show", "writer", "--arg", "topic=failover", "--config", str(kb), "--text")
    assert r.returncode == 0 and r.stdout.splitlines()[:5] == [
        "Agent: writer (inline)", "Description: Writes docs in the house style", "Tools: search, get",
        "Search: keyword, sources guide", ""]
    assert WRITER_SYSTEM in r.stdout
    r = _ctx("agent", "list", "--config", str(kb), "--text")
    assert r.stdout.startswith("writer  (inline)  Writes docs in the house style\n    tools: search, get\n"
                               "    topic (required)  what to write about\n    tone (default 'plain')\n")


@pytest.mark.parametrize("argv, code, message", [
    (["writer"], 2, "Agent 'writer': missing required argument 'topic'"),
    (["writer", "--arg", "topic"], 2, "--arg 'topic': use KEY=VALUE."),
    (["writer", "--arg", "topic=a", "--arg", "topic=b"], 2, "Agent argument 'topic' is given more than once"),
    (["nobody"], 3, "No agent named 'nobody'. Agents: writer, responder."),
])
def test_cli_agent_errors(kb: Path, argv: list[str], code: int, message: str) -> None:
    r = _ctx("agent", "show", *argv, "--config", str(kb))
    assert r.returncode == code and r.stdout == "" and r.stderr.startswith(f"ctx: error: {message}"), r.stderr


def test_cli_help_lists_agent_commands() -> None:
    r = _ctx("--help")
    assert "agent" in r.stdout and "list the agents (prompts)" in r.stdout
    r = _ctx("agent", "show", "--help")
    assert "--arg KEY=VALUE" in r.stdout and "NAME" in r.stdout


# ---- the MCP Inspector CLI (a second, independent client) ---------------------------------------

NODE_BIN = REPO / ".tools" / "node" / "node_modules" / ".bin"
INSPECTOR = NODE_BIN / "mcp-inspector"


def _inspect(kb: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # the config through $CTX_CONFIG (-e: the server's environment): the Inspector takes --config for itself
    env = dict(_env(), PATH=f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    url = os.environ.get("CTX_DATABASE_URL")  # the Inspector passes the server only the variables given
    cmd = [str(INSPECTOR), "--cli", "-e", f"CTX_CONFIG={kb}", "-e", f"PYTHONPATH={REPO / 'src'}",
           *(["-e", f"CTX_DATABASE_URL={url}"] if url else []), sys.executable,
           "-m", "cairn_servers.ctx.cli", "serve", "mcp", "--stdio", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, cwd=REPO)


@pytest.mark.node
@pytest.mark.timeout(120)
@pytest.mark.skipif(not INSPECTOR.exists(), reason=f"project-local Node tools missing ({NODE_BIN})")
def test_inspector_lists_and_gets_agent_prompts(kb: Path) -> None:
    listed = _inspect(kb, "--method", "prompts/list")
    assert listed.returncode == 0, listed.stderr
    assert [p["name"] for p in json.loads(listed.stdout)["prompts"]] == ["writer", "responder"]
    got = _inspect(kb, "--method", "prompts/get", "--prompt-name", "responder",
                   "--prompt-args", "incident=database failover")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["messages"] == [
        {"role": "user", "content": {"type": "text", "text": RESPONDER_SYSTEM}},
        {"role": "assistant", "content": {"type": "text", "text": "Found 1 runbook(s)."}}]
    missing = _inspect(kb, "--method", "prompts/get", "--prompt-name", "responder")
    assert missing.returncode != 0
    assert "Agent 'responder': missing required argument 'incident'" in missing.stdout + missing.stderr
